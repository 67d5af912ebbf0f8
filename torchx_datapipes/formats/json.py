"""JSON documents (``.json``): an array of records, or one object, is read as records.

A ``.json`` file whose first line is a complete JSON value is JSON Lines (as many tools write
``.json``) and is planned, split and read as such. A document is one unit, read whole (orjson);
the location of a record is its index in the array, 1-based (``line`` in errors). Tagged
objects (formats/jsonl/codec.py: tensors, Decimal, dates) are read as their values, as in JSON Lines.
"""

from typing import TYPE_CHECKING, Any, List, Sequence

import orjson

from torchx_datapipes.errors import InputError
from torchx_datapipes.formats.base import (
    BOM,
    Batches,
    InputFormat,
    PlannedFile,
    ReadOptions,
    open_unit_stream,
    too_large,
)
from torchx_datapipes.formats.format import Format
from torchx_datapipes.formats.jsonl import dupkeys
from torchx_datapipes.formats.jsonl.bigints import TooDeep, loads_exact, may_hold_big_int
from torchx_datapipes.formats.jsonl.codec import TAG_BYTES, BadTag, decode_tags
from torchx_datapipes.formats.lines import JsonLinesFormat, json_type, show
from torchx_datapipes.formats.unit import Unit
from torchx_datapipes.io.streams import CorruptError, TruncatedError

if TYPE_CHECKING:
    from torchx_datapipes.formats.readstate import ReadState

_PEEK = 1 << 16
_DRAIN = 1 << 22


def _is_json_lines(path: str, size: int) -> bool:
    """The first line is a complete JSON value (not ``[`` opening an array over several lines)."""
    with open_unit_stream(path, size) as (fh, _):
        head = fh.read(_PEEK)
    head = head[len(BOM) :] if head.startswith(BOM) else head
    text = head.lstrip()
    if not text or text[:1] == b"[":
        return False
    first = text.split(b"\n", 1)[0]
    try:
        orjson.loads(first)
    except orjson.JSONDecodeError:
        return False
    return True


class JsonFormat(InputFormat):
    name = "json"
    extensions = (".json",)

    def plan(self, files: Sequence[PlannedFile], target: int, opts: ReadOptions) -> List[Unit]:
        units: List[Unit] = []
        lines = JsonLinesFormat()
        for path, size, mtime in files:
            if _is_json_lines(path, size):
                units.extend(lines.plan([(path, size, mtime)], target, opts))
            else:
                units.append(Unit(0, path, size, format=self.name, mtime=mtime))
        return units

    def read(self, reader: "ReadState") -> Batches:
        u = reader.unit
        limit = reader.max_record
        with open_unit_stream(u.path, u.size) as (fh, raw):
            try:
                data = fh.read(limit + len(BOM) + 1)  # never more than the record bound (and a BOM)
                size = len(data)
                while size > limit + len(BOM):  # over the bound: stream past the rest to measure it
                    more = len(fh.read(_DRAIN))
                    if not more:
                        break
                    size += more
            except (TruncatedError, CorruptError) as e:
                reader.cut(e, 0, raw.consumed)
                return
            reader.bytes_read = raw.consumed
        reader.bytes_done = u.nbytes
        if size - (len(BOM) if data.startswith(BOM) else 0) > limit:
            what = "the JSON document (a .json array or object is one record while read)"
            err = too_large(what, size, limit) + "; or convert the file to JSON Lines (one record per line)"
            reader.add_bad(1, err, show(data[:2000]) + " ...")
            return
        data = data[len(BOM) :] if data.startswith(BOM) else data
        if not data.strip():
            return
        try:
            doc: Any = loads_exact(data) if may_hold_big_int(data) else orjson.loads(data)
        except TooDeep as e:
            raise InputError(f"{u.path}: {e}") from e
        except (orjson.JSONDecodeError, ValueError, UnicodeDecodeError) as e:
            raise InputError(
                f"{u.path}: not a JSON document ({type(e).__name__}: {e}); a .json file must hold a"
                " JSON array of records, one object, or JSON Lines. Fix the file, or pass --format jsonl"
            ) from e
        if dupkeys.may_repeat(data, doc):  # objects that repeat a key: renamed (x, x.1), warned
            doc = _renamed(reader, data, doc)
        items = doc if isinstance(doc, list) else [doc]
        tagged = TAG_BYTES in data  # typed values as our writers tag them (formats/jsonl/codec.py)
        recs: List[Any] = []
        rows: List[int] = []
        for i, rec in enumerate(items, 1):
            if tagged:
                try:
                    rec = decode_tags(rec)
                except BadTag as e:
                    reader.add_bad(i, str(e), show(orjson.dumps(rec, default=str)))
                    continue
            if reader.objects_only and rec.__class__ is not dict:
                reader.add_bad(
                    i, f"expected a JSON object per array item, got {json_type(rec)}", show(orjson.dumps(rec))
                )
                continue
            recs.append(rec)
            rows.append(i)
            if len(recs) >= reader.batch_size:
                yield recs, rows
                recs, rows = [], []
        if recs:
            yield recs, rows


FORMAT = Format("json", input=JsonFormat, doc="a JSON array of objects (or one object) per file")


def _renamed(reader: "ReadState", data: bytes, doc: Any) -> Any:
    """``doc`` parsed again with the keys its objects repeat renamed; each item's renames warned."""
    new, found = dupkeys.renamed(data)
    if not found:
        return doc
    old_items = doc if isinstance(doc, list) else [doc]
    new_items = new if isinstance(new, list) else [new]
    for i, (old, item) in enumerate(zip(old_items, new_items, strict=True), 1):
        added = _added_keys(old, item)
        if added:
            reader.renamed(i, [(k.rsplit(".", 1)[0], k) for k in added], what="item")
    return new


def _added_keys(old: Any, new: Any) -> List[str]:
    """The keys of ``new``'s objects (at any depth) that the same objects of ``old`` lack."""
    if isinstance(new, dict) and isinstance(old, dict):
        out = [k for k in new if k not in old]
        for k, v in new.items():
            if k in old:
                out += _added_keys(old[k], v)
        return out
    if isinstance(new, list) and isinstance(old, list):
        return [k for a, b in zip(old, new) for k in _added_keys(a, b)]
    return []
