"""Choose an input format by name or by file extension.

Layered like fsspec's registry and ``cache/registry.py``: a table of import strings (so
importing torchx_datapipes never imports pyarrow or webdataset), :func:`register_format` for
code, and the entry-point group ``torchx_datapipes.formats`` for third-party packages::

    [project.entry-points."torchx_datapipes.formats"]
    myfmt = "my_pkg.formats:MyFormat"     # an InputFormat subclass (name, extensions, read)

Adding a built-in format is one module under ``io/inputs/`` plus one line in ``_KNOWN``.
"""

import importlib
import posixpath
import re
import urllib.parse
from importlib.metadata import entry_points
from typing import Dict, FrozenSet, Iterable, List, Optional, Tuple, Type, Union

from torchx_datapipes.io.inputs.base import InputFormat, ReadOptions, extra_hint, stem_of

ENTRY_POINT_GROUP = "torchx_datapipes.formats"
_P = "torchx_datapipes.io.inputs."
# name -> (import string, pip extra that provides its dependencies or "")
_KNOWN: Dict[str, Tuple[str, str]] = {
    "jsonl": (_P + "lines:JsonLinesFormat", ""),
    "json": (_P + "json:JsonFormat", ""),
    "text": (_P + "lines:TextFormat", ""),
    "csv": (_P + "csv:CsvFormat", "parquet"),
    "parquet": (_P + "parquet:ParquetFormat", "parquet"),
    "files": (_P + "files:FilesFormat", ""),
    "webdataset": (_P + "webdataset:WebDatasetFormat", ""),
}
ALIASES = {"ndjson": "jsonl", "txt": "text", "tsv": "csv", "wds": "webdataset", "tar": "webdataset"}
_REGISTERED: Dict[str, Union[str, Type[InputFormat]]] = {}


def register_format(name: str, cls: Union[str, Type[InputFormat]], clobber: bool = False) -> None:
    """Make ``--format name`` (and ``cls.extensions`` under auto) read with ``cls`` or ``"module:Class"``."""
    if not clobber and name in format_names():
        raise ValueError(f"input format {name!r} is already registered; pass clobber=True to replace it")
    _REGISTERED[name] = cls
    _CACHE.clear()
    _TABLES.clear()


def format_names() -> Tuple[str, ...]:
    eps = {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return tuple(sorted({*_KNOWN, *_REGISTERED, *eps}))


def builtin_format_names() -> Tuple[str, ...]:
    """The formats this package ships (docs/options.md and the component help list them)."""
    return tuple(sorted(_KNOWN))


_CACHE: Dict[str, Type[InputFormat]] = {}


def format_class(name: str) -> Type[InputFormat]:
    """The InputFormat class for a name or alias (imports its module now)."""
    name = ALIASES.get(name.lower(), name.lower())
    if name in _CACHE:
        return _CACHE[name]
    target: Union[str, Type[InputFormat], None] = _REGISTERED.get(name)
    extra = ""
    if target is None and name in _KNOWN:
        target, extra = _KNOWN[name]
    if target is None:
        for ep in entry_points(group=ENTRY_POINT_GROUP, name=name):
            target = ep.value
    if target is None:
        raise ValueError(f"unknown input format {name!r}; use one of auto, {', '.join(format_names())}")
    if isinstance(target, str):
        module, _, attr = target.partition(":")
        try:
            target = getattr(importlib.import_module(module), attr)
        except ImportError as e:
            if extra:
                raise extra_hint(extra, e.name or module) from e
            raise
    _CACHE[name] = target  # type: ignore[assignment]
    return target  # type: ignore[return-value]


# extension -> format, and the extensions longest first; built once per set of registered names:
# listing entry points scans every installed distribution (~12 ms here), and planning 10,000
# images asked for the table once per file (issue 10's images benchmark: 2.5 s per 200 files)
_TABLES: Dict[FrozenSet[str], Tuple[Dict[str, str], Tuple[str, ...], bool]] = {}


def _extension_table() -> Tuple[Dict[str, str], Tuple[str, ...], bool]:
    """``(extension -> format, extensions longest first, whether every extension starts with a dot)``."""
    key = frozenset(_REGISTERED)
    if key not in _TABLES:
        table: Dict[str, str] = {}
        for name in format_names():
            try:
                cls = format_class(name)
            except ImportError:
                continue
            for ext in cls.extensions:
                table.setdefault(ext, name)
        dotted = all(ext.startswith(".") for ext in table)
        _TABLES[key] = table, tuple(sorted(table, key=len, reverse=True)), dotted
    return _TABLES[key]


def _by_extension() -> Dict[str, str]:
    return dict(_extension_table()[0])


def detect_format(path: str) -> Optional[str]:
    """The format that owns the file's extension (after any compression suffix), or None."""
    base = posixpath.basename(stem_of(path)).lower()
    table, longest_first, dotted = _extension_table()
    # the longest matching suffix wins (".tar" under ".tar.gz", ".csv" under "x.1.csv"): with
    # extensions that start with a dot, that is the suffix from the first dot that is one
    if dotted:
        dot = base.find(".", 1)
        while dot > 0:
            if base[dot:] in table:
                return table[base[dot:]]
            dot = base.find(".", dot + 1)
        return None
    for ext in longest_first:
        if base.endswith(ext) and len(base) > len(ext):
            return table[ext]
    return None


def known_extensions() -> List[str]:
    return sorted(_by_extension())


def unknown_extension_error(path: str) -> ValueError:
    by_fmt: Dict[str, List[str]] = {}
    for ext, name in _by_extension().items():
        by_fmt.setdefault(name, []).append(ext)
    listing = "; ".join(f"{n}: {' '.join(sorted(e))}" for n, e in sorted(by_fmt.items()))
    return ValueError(
        f"{path}: unknown input extension; no format owns it. Formats: {listing}."
        f" Pass --format to force one (e.g. --format jsonl), or remove the file from --input"
    )


def resolve(path: str, fmt: str) -> str:
    """The format name to read ``path`` with: ``fmt`` forced, or detected under ``auto``."""
    if fmt != "auto":
        return format_class(fmt).name
    found = detect_format(path)
    if found is None:
        raise unknown_extension_error(path)
    return found


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


def formats_of(paths: Iterable[str], fmt: str) -> Dict[str, str]:
    return {p: resolve(p, fmt) for p in paths}
