"""``StatsPartial``: the mergeable, serializable statistics of some records.

Each unit of work accumulates one partial over its batches; partials travel as bytes
(:meth:`StatsPartial.to_bytes`, a small binary format, never pickle) and one process merges
them all and calls :meth:`StatsPartial.result` for ``stats.json``.

Records that are not JSON objects (numbers, strings, lists, null at the top level) are
profiled as the values of a pseudo-field named ``"$value"`` (:data:`VALUE_FIELD`).
"""

from __future__ import annotations

import base64
import json
import struct
from itertools import chain
from operator import itemgetter
from typing import Any

from torchx_datapipes.stats.config import StatsConfig
from torchx_datapipes.stats.field import FieldAcc
from torchx_datapipes.stats.sketches import Blobs

SCHEMA_VERSION = 2
"""Version of the ``stats.json`` layout documented in ``docs/stats-schema.md``."""

VALUE_FIELD = "$value"

_MAGIC = b"TXDSTATS"
_FORMAT_VERSION = 1
_HEADER = struct.Struct("<HI")  # format version, JSON header length
_BLOB_LEN = struct.Struct("<Q")


class StatsPartial:
    """Statistics of the records seen so far; merge partials to combine disjoint inputs."""

    def __init__(self, config: StatsConfig) -> None:
        self.config = config
        self.records = 0
        self.fields: dict[str, FieldAcc] = {}
        for name in config.fields or ():
            self.fields[name] = FieldAcc(config)

    def update(self, records: list[Any]) -> None:
        """Add one batch of parsed records (dicts, or other JSON values for ``$value``)."""
        if not records:
            return
        self.records += len(records)
        dicts = [r for r in records if type(r) is dict]
        if len(dicts) != len(records):
            dicts = [r for r in records if isinstance(r, dict)]
            if len(dicts) != len(records):
                self._update_field(VALUE_FIELD, [r for r in records if not isinstance(r, dict)])
        if not dicts:
            return
        for key, values in _columns(dicts, self.config.fields):
            if key == VALUE_FIELD and self.config.fields is not None:
                continue  # a configured "$value" means non-object records, handled above
            self._update_field(key, values)

    def update_arrow(self, batch: Any) -> None:
        """Add one ``pyarrow.RecordBatch``, column by column: as ``update(batch.to_pylist())`` would."""
        if batch.num_rows == 0:
            return
        names = batch.schema.names
        if len(set(names)) != len(names):  # to_pylist keeps one value per repeated name
            self.update(batch.to_pylist())
            return
        from torchx_datapipes.stats import columnar  # pyarrow only when a columnar input is read

        self.records += batch.num_rows
        columnar.update_partial_fields(self.fields, self._new_field, batch)

    def _new_field(self, name: str) -> FieldAcc | None:
        if name == VALUE_FIELD and self.config.fields is not None:
            return None  # a configured "$value" means non-object records
        if self.config.fields is not None and name not in self.config.fields:
            return None
        acc = self.fields[name] = FieldAcc(self.config)
        return acc

    def _update_field(self, key: Any, values: list[Any]) -> None:
        name = key if isinstance(key, str) else str(key)
        acc = self.fields.get(name)
        if acc is None:
            if self.config.fields is not None and name not in self.config.fields:
                return
            acc = self.fields[name] = FieldAcc(self.config)
        acc.update(values)

    def merge(self, other: StatsPartial) -> None:
        """Add ``other``'s statistics to this partial; ``other`` is left unchanged."""
        if other.config != self.config:
            raise ValueError(
                f"cannot merge stats partials with different configs: {self.config} vs {other.config};"
                " compute all partials of one job with the same StatsConfig"
            )
        self.records += other.records
        for name, acc in other.fields.items():
            mine = self.fields.get(name)
            if mine is None:
                mine = self.fields[name] = FieldAcc(self.config)
            mine.merge(acc)

    def to_bytes(self) -> bytes:
        """Serialize: magic, version, a JSON header and the sketches' own serialized bytes."""
        blobs = Blobs()
        header = {
            "config": self.config.to_dict(),
            "records": self.records,
            "fields": {name: acc.state(blobs) for name, acc in self.fields.items()},
        }
        head = json.dumps(header, separators=(",", ":"), allow_nan=False).encode()
        parts = [_MAGIC, _HEADER.pack(_FORMAT_VERSION, len(head)), head]
        for blob in blobs.items:
            parts += [_BLOB_LEN.pack(len(blob)), blob]
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, data: bytes) -> StatsPartial:
        """Load a partial written by :meth:`to_bytes`; ``ValueError`` if the bytes are not one."""
        data = bytes(data)
        if not data.startswith(_MAGIC):
            raise ValueError("not a stats partial (bad magic bytes); pass bytes from StatsPartial.to_bytes()")
        try:
            header, blobs = _decode(data[len(_MAGIC) :])
            partial = cls(StatsConfig.from_dict(header["config"]))
            partial.records = int(header["records"])
            for name, state in header["fields"].items():
                partial.fields[name] = FieldAcc.from_state(state, blobs, partial.config)
        except (KeyError, TypeError, struct.error, json.JSONDecodeError, RuntimeError) as e:
            raise ValueError(f"corrupt or truncated stats partial ({type(e).__name__}: {e})") from e
        return partial

    def result(self) -> dict[str, Any]:
        """The statistics document: ``{"records": N, "config": {...}, "fields": {name: {...}}}``."""
        fields = {name: acc.result(self.records) for name, acc in self.fields.items()}
        for name, acc in self.fields.items():  # the quantile sketch itself: drift compares two of them
            if acc.numeric is not None and acc.numeric.moments.count:
                fields[name]["numeric"]["sketch"] = base64.b64encode(acc.numeric.kll.serialize()).decode()
                if _distinct_ints(acc, fields[name]) and "id-like" not in fields[name]["flags"]:
                    fields[name]["flags"].append("id-like")
        return {"records": self.records, "config": self.config.to_dict(), "fields": fields}


def _distinct_ints(acc: FieldAcc, f: dict[str, Any]) -> bool:
    """Integers, all distinct, as an exact sketch (it holds every value) shows: id-like (see stats.flags)."""
    from torchx_datapipes.stats.flags import ID_LIKE_MIN_COUNT

    kll = acc.numeric.kll if acc.numeric is not None else None
    if kll is None or kll.is_estimation_mode() or set(f["types"]) - {"int", "null"}:
        return False
    n = int(kll.n)
    return n >= ID_LIKE_MIN_COUNT and n == f["count"] and len({v for v, _ in kll}) == n


def _columns(dicts: list[dict[Any, Any]], fields: tuple[str, ...] | None) -> list[tuple[Any, list[Any]]]:
    """Each field's present values in this batch, in first-seen (or configured) field order.

    Fast path: when every record has the same keys (the usual JSON-Lines case), one C-level
    ``itemgetter`` pass plus a ``zip`` transpose replaces a Python loop per field.
    """
    keys = tuple(dicts[0]) if fields is None else fields
    if keys and (fields is not None or len(set(map(len, dicts))) == 1):
        try:
            if len(keys) == 1:
                return [(keys[0], list(map(itemgetter(keys[0]), dicts)))]
            return list(zip(keys, map(list, zip(*map(itemgetter(*keys), dicts), strict=True)), strict=True))
        except KeyError:
            pass  # some record lacks a key: take the general path
    if fields is None:
        keys = tuple(dict.fromkeys(chain.from_iterable(dicts)))
    return [(key, [r[key] for r in dicts if key in r]) for key in keys]


def _decode(body: bytes) -> tuple[dict[str, Any], Blobs]:
    version, head_len = _HEADER.unpack_from(body, 0)
    if version != _FORMAT_VERSION:
        raise ValueError(
            f"stats partial format version {version} is not supported (this build reads {_FORMAT_VERSION});"
            " recompute the partials with this version of torchx-datapipes"
        )
    pos = _HEADER.size
    header = json.loads(body[pos : pos + head_len])
    pos += head_len
    items = []
    while pos < len(body):
        (n,) = _BLOB_LEN.unpack_from(body, pos)
        pos += _BLOB_LEN.size
        if pos + n > len(body):
            raise ValueError("corrupt stats partial: truncated sketch bytes")
        items.append(body[pos : pos + n])
        pos += n
    return header, Blobs(items)
