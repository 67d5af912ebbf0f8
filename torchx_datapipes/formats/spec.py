"""The format spec: ``--format`` plus the format options as one string, and the parsers of the options
(``--schema``, ``--delimiter``). Which format reads a file is ``formats/registry.py``'s answer."""

import re
import urllib.parse
from typing import Dict, List, Optional, Tuple

from torchx_datapipes.formats.base import ReadOptions


# -- the format spec: the --format value plus the format options, as one string ---------------
def encode_spec(
    fmt: str, schema: str = "", na_values: Optional[str] = None, delimiter: str = "", header: bool = True
) -> str:
    """``fmt`` alone, or ``fmt?delimiter=...&header=false&na_values=...&schema=...`` with options."""
    query = {k: v for k, v in (("delimiter", delimiter), ("na_values", na_values), ("schema", schema)) if v}
    if na_values == "":
        query["na_values"] = ""
    if not header:
        query["header"] = "false"
    return fmt if not query else f"{fmt}?{urllib.parse.urlencode(sorted(query.items()))}"


def decode_spec(spec: str) -> Tuple[str, ReadOptions]:
    fmt, _, query = spec.partition("?")
    q = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
    return fmt or "auto", ReadOptions(
        schema=parse_schema(q.get("schema", "")),
        na_values=None if "na_values" not in q else tuple(v for v in q["na_values"].split(",")),
        delimiter=parse_delimiter(q.get("delimiter", "")),
        header=q.get("header", "true") != "false",
    )


TYPE_NAMES = {
    "int": "int", "integer": "int", "int64": "int", "float": "float", "double": "float", "float64": "float",
    "bool": "bool", "boolean": "bool", "str": "string", "string": "string", "date": "date",
    "timestamp": "timestamp", "datetime": "timestamp",
}  # fmt: skip
# the strptime directives pyarrow's parser supports (``pyarrow.compute.strptime``; no %f)
STRPTIME_DIRECTIVES = "aAbBdHIjmMpSyYz%"
_ITEM = re.compile(r"^(?P<col>.+?)\s*:\s*(?P<typ>[A-Za-z0-9_]+)\s*(?:\[(?P<fmt>[^\]]*)\])?$")


def _schema_items(text: str) -> List[str]:
    """``text`` split at the commas outside ``[...]`` (a date format may hold a comma)."""
    items, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch == "[") - (ch == "]") if ch in "[]" else 0
        if ch == "," and depth <= 0:
            items.append(cur)
            cur, depth = "", 0
        else:
            cur += ch
    return [*items, cur]


def check_strptime(item: str, fmt: str) -> None:
    """A date/timestamp format of ``--schema``: strptime directives pyarrow can parse."""
    bad = [d for d in re.findall(r"%(.?)", fmt) if d not in STRPTIME_DIRECTIVES]
    if not fmt or "%" not in fmt or bad:
        why = f"unsupported directive(s) {', '.join('%' + d for d in bad)}" if bad else "no directive"
        raise ValueError(
            f"--schema item {item!r}: the format {fmt!r} is not a strptime format ({why}); use the"
            f" directives {' '.join('%' + d for d in STRPTIME_DIRECTIVES if d != '%')}, e.g."
            " 'day:date[%Y/%m/%d]' or 'at:timestamp[%d.%m.%Y %H:%M]'"
        )


def parse_schema(text: str) -> Dict[str, str]:
    """``'id:int,d:date[%Y/%m/%d]'`` -> ``{"id": "int", "d": "date[%Y/%m/%d]"}``.

    The order of the columns is kept (``--header false`` names the columns from it)."""
    out: Dict[str, str] = {}
    for item in (p.strip() for p in _schema_items(text)):
        if not item:
            continue
        m = _ITEM.match(item)
        typ = m.group("typ").lower() if m else ""
        if m is None or typ not in TYPE_NAMES or not m.group("col").strip():
            raise ValueError(
                f"--schema item {item!r} must look like column:type with type one of"
                f" {', '.join(sorted(set(TYPE_NAMES)))} (e.g. --schema 'id:int,name:str'); a date or"
                " timestamp in another layout takes a strptime format: 'day:date[%Y/%m/%d]'"
            )
        kind, fmt = TYPE_NAMES[typ], m.group("fmt")
        if fmt is not None:
            if kind not in ("date", "timestamp"):
                raise ValueError(
                    f"--schema item {item!r}: only date and timestamp take a [format],"
                    " e.g. 'day:date[%Y/%m/%d]'"
                )
            check_strptime(item, fmt)
            kind = f"{kind}[{fmt}]"
        out[m.group("col").strip()] = kind
    return out


def parse_delimiter(text: str) -> str:
    named = {"tab": "\t", "\\t": "\t", "comma": ",", "semicolon": ";", "pipe": "|", "space": " "}
    value = named.get(text.lower(), text)
    if len(value) > 1:
        raise ValueError(
            f"--delimiter {text!r} must be one character (or tab, comma, semicolon, pipe, space)"
        )
    return value
