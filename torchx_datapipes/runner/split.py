"""The split op: ``OUT/<split>/part-NNNNN.jsonl`` for every unit and split, identical for any -j.

``method=hash`` without ``--stratify`` is one pass. ``method=exact`` or ``--stratify`` first run a
``count`` pass (records per unit, per class, and for hash+stratify each record's hash in a side file
``_split/hashes-NNNNN.bin``, removed at commit); after a barrier every rank builds the same assigner
from the committed counts. Both passes see the same records: ``--fn`` runs in both, and records
that fail to parse, fail in ``fn`` or lack the key/stratify field are dropped by both (only the main
pass routes them to ``_errors/`` under skip; under raise the first stops the job with file and line).
Every unit writes one part per split, empty or not, so the files depend on the input alone.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import orjson

from torchx_datapipes.formats.commit import main_meta_names
from torchx_datapipes.formats.planning import Unit
from torchx_datapipes.formats.reading import UnitReader
from torchx_datapipes.formats.writing import PartWriter, encode_checked, part_name, writer_class
from torchx_datapipes.io import manifest_schema as ms
from torchx_datapipes.io.checksum import write_file, write_summed
from torchx_datapipes.io.fs import fs_and_path, join, read_bytes
from torchx_datapipes.io.layout import ERRORS_DIR, unit_file
from torchx_datapipes.runner.apply import Applier
from torchx_datapipes.runner.badrecords import ErrorSink, OnError, RecordError
from torchx_datapipes.runner.context import PassContext
from torchx_datapipes.runner.engine import RunConfig
from torchx_datapipes.split import (
    ExactAssigner,
    Fractions,
    KeySpec,
    MissingKeyError,
    StratifiedHashAssigner,
    assign_hash,
    class_labels,
    hash_keys,
    parse_fractions,
    parse_key,
)
from torchx_datapipes.split.profile import SplitProfile, split_drift
from torchx_datapipes.split.stratified import small_class_warnings

SIDE_DIR = "_split"
PROFILE = "profile"  # _units/NNNNN.profile: the unit's per-split profiles (split hygiene)
Batch = tuple[list[Any], Sequence[int], bool]  # records, lines, whether lines map 1:1 to the records


class SplitOp:
    name = "split"

    def __init__(
        self, cfg: RunConfig, fractions: Fractions, key: KeySpec | None, method: str, seed: int,
        stratify: str | None, fn: Callable[..., Any] | None = None,
    ) -> None:  # fmt: skip
        if method not in ("hash", "exact"):
            raise ValueError(f"--method must be hash or exact, got {method!r}")
        self.cfg, self.fractions, self.key, self.method = cfg, fractions, key, method
        self.seed, self.stratify, self.fn = seed, stratify or None, fn
        self.exact: ExactAssigner | None = None
        self.strat_hash: StratifiedHashAssigner | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace, cfg: RunConfig, fn: Callable[..., Any] | None) -> SplitOp:
        return cls(
            cfg, parse_fractions(args.fractions), parse_key(args.key), args.method, args.seed,
            (args.stratify or "").strip() or None, fn,
        )  # fmt: skip

    def options(self) -> dict[str, Any]:
        key, stratify = str(self.key) if self.key else "", self.stratify or ""
        return {ms.OPT_FRACTIONS: str(self.fractions), ms.OPT_METHOD: self.method, ms.OPT_SEED: self.seed,
                ms.OPT_KEY: key, ms.OPT_STRATIFY: stratify}  # fmt: skip

    # -- passes ---------------------------------------------------------------------------
    def run(self, ctx: PassContext) -> None:
        if self.method == "exact" or self.stratify:  # counting pass first
            ctx.run_pass("count", self.count_unit)
            ctx.barrier()
            self._build_assigner(ctx)
        ctx.run_pass("main", self.split_unit)

    def _build_assigner(self, ctx: PassContext) -> None:
        metas = ctx.load_metas("count")
        if self.method == "exact":
            counts: list[Any] = [m[ms.CLASS_COUNTS] if self.stratify else m[ms.COUNT] for m in metas]
            self.exact = ExactAssigner(counts, self.fractions, self.seed, stratified=bool(self.stratify))
            return
        # hash + stratify: rank 0 sorts every class's hashes once and ships the thresholds
        url = join(self.cfg.output, SIDE_DIR, "thresholds.json")
        if ctx.rank == 0:
            per_class: dict[str, list[np.ndarray]] = {}
            for m in metas:
                data = np.frombuffer(read_bytes(join(self.cfg.output, m[ms.HASHES])), dtype=np.uint64)
                start = 0
                for c, n in m[ms.CLASS_COUNTS].items():
                    per_class.setdefault(c, []).append(data[start : start + n])
                    start += n
            merged = {c: np.concatenate(parts) for c, parts in per_class.items()}
            assigner = StratifiedHashAssigner.from_hashes(merged, self.fractions)
            write_file(url, orjson.dumps(assigner.to_dict()))
        ctx.barrier()
        self.strat_hash = StratifiedHashAssigner.from_dict(orjson.loads(read_bytes(url)))

    def count_unit(self, unit: Unit, reader: UnitReader, sink: ErrorSink) -> dict[str, Any]:
        # a private sink: raises like the main pass under raise, and never writes _errors/ files
        quiet = ErrorSink(reader, sink.policy, sink.output, sink.fn_name)
        n = 0
        classes: Counter[str] = Counter()
        hashes: dict[str, list[np.ndarray]] = {}
        for recs, lines, exact in self._stream(reader, quiet)[0]:
            recs, lines, h, cls = self._label(recs, lines, exact, quiet, reader)
            n += len(recs)
            if cls is not None:
                classes.update(cls)
                if h is not None and len(cls):
                    uniq, inverse = np.unique(np.array(cls), return_inverse=True)
                    for j, c in enumerate(uniq.tolist()):
                        hashes.setdefault(c, []).append(h[inverse.reshape(-1) == j])
        meta: dict[str, Any] = {ms.COUNT: n}
        if self.stratify:
            meta[ms.CLASS_COUNTS] = {c: classes[c] for c in sorted(classes)}
        if self.method == "hash" and self.stratify:
            rel = f"{SIDE_DIR}/hashes-{unit.name}.bin"
            empty = np.empty(0, dtype=np.uint64)
            data = [np.concatenate(hashes[c]) if c in hashes else empty for c in meta[ms.CLASS_COUNTS]]
            written = write_summed(self.cfg.output, rel, np.concatenate([empty, *data]).tobytes())
            meta[ms.HASHES], meta[ms.FILES] = rel, [written]
        return meta

    def split_unit(self, unit: Unit, reader: UnitReader, sink: ErrorSink) -> dict[str, Any]:
        names, fmt = self.fractions.names, self.cfg.output_format
        rels = [part_name(unit.index, fmt, prefix=s) for s in names]
        writers = [PartWriter(join(self.cfg.output, r), fmt, key_prefix=unit.name) for r in rels]
        per_class: Counter[tuple[int, str]] = Counter()
        profiles = [SplitProfile() for _ in names]  # split hygiene: each split's drift from the whole
        stream, applier = self._stream(reader, sink)
        start = 0
        try:
            for recs, lines, exact in stream:
                recs, lines, h, cls = self._label(recs, lines, exact, sink, reader)
                if not recs:
                    continue
                ids = self._assign(unit, start, recs, h, cls)
                start += len(recs)
                if cls is not None:
                    per_class.update(zip(ids.tolist(), cls))
                for k, prof in enumerate(profiles):
                    prof.update([r for r, s in zip(recs, ids.tolist()) if s == k])
                self._write(writers, recs, ids.tolist(), lines if exact else [lines[0]] * len(recs), sink)
            for w in writers:
                w.commit()
        except BaseException:
            for w in writers:
                w.abort()
            raise
        meta: dict[str, Any] = {
            ms.RECORDS_OUT: sum(w.records for w in writers),
            ms.FILTERED: applier.filtered if applier is not None else 0,
            ms.COUNTS: {s: w.records for s, w in zip(names, writers)},
            ms.OUTPUTS: rels,
            ms.FILES: [s for w, r in zip(writers, rels) for s in w.file_sums(r)],
        }
        state = orjson.dumps({n: p.state() for n, p in zip(names, profiles)})
        meta[ms.FILES].append(write_summed(self.cfg.output, unit_file(unit.name, PROFILE), state))
        meta[ms.PROFILE] = unit_file(unit.name, PROFILE)
        for w, r in zip(writers, rels):  # each part's schema or field types, under its name
            for key, per_part in w.commit_meta(r).items():
                meta.setdefault(key, {}).update(per_part)
        if self.stratify:
            table: dict[str, dict[str, int]] = {}
            for (s, c), k in sorted(per_class.items(), key=lambda x: (x[0][1], x[0][0])):
                table.setdefault(c, dict.fromkeys(names, 0))[names[s]] = k
            meta[ms.CLASS_COUNTS] = table
        return meta

    # -- pieces ---------------------------------------------------------------------------
    def _stream(self, reader: UnitReader, sink: ErrorSink) -> tuple[Iterator[Batch], Applier | None]:
        """Batches of records to split (after ``fn``), their input lines, and the Applier if any."""
        if self.fn is None:

            def plain() -> Iterator[Batch]:
                for recs, lines in reader.batches():
                    sink.drain_parse_errors()
                    yield recs, lines, True
                sink.drain_parse_errors()

            return plain(), None
        applier = Applier(self.fn, sink.policy)
        current: list[Sequence[int]] = [[0]]

        def tracked() -> Iterator[tuple[list[Any], Sequence[int]]]:
            for recs, lines in reader.batches():
                current[0] = lines or [0]
                yield recs, lines

        def transformed() -> Iterator[Batch]:
            for out in applier.run(tracked(), sink):
                yield out, current[0], False  # fn output records do not map 1:1 to input lines

        return transformed(), applier

    def _label(
        self, recs: list[Any], lines: Sequence[int], exact: bool, sink: ErrorSink, reader: UnitReader
    ) -> tuple[list[Any], Sequence[int], np.ndarray | None, list[str] | None]:
        """Hashes (hash method) and classes (stratified); records lacking a field go to the sink."""
        want_hash, field = self.method == "hash", self.stratify
        try:
            cls = class_labels(recs, field) if field else None
            return recs, lines, hash_keys(recs, self.key, self.seed) if want_hash else None, cls
        except (MissingKeyError, TypeError):
            pass
        keep: list[int] = []
        for i, r in enumerate(recs):  # slow path: find every bad record of the batch
            try:
                if field:
                    class_labels([r], field)
                if want_hash:
                    hash_keys([r], self.key, self.seed)
                keep.append(i)
            except (MissingKeyError, TypeError) as e:
                self._bad(sink, reader, lines, i if exact else None, r, e)
        recs = [recs[i] for i in keep]
        lines = [lines[i] for i in keep] if exact else lines
        cls = class_labels(recs, field) if field else None
        return recs, lines, hash_keys(recs, self.key, self.seed) if want_hash else None, cls

    def _bad(
        self, sink: ErrorSink, reader: UnitReader, lines: Sequence[int], i: int | None, rec: Any, e: Exception
    ) -> None:
        line = lines[i] if i is not None else lines[0]
        if sink.policy is not OnError.RAISE:
            sink.record_failed(line, rec, e, stage="split")
            return
        path, at = reader.location(line)  # a group of files: the record's own file
        if i is not None:
            where = f"{path}, line {at}"
        else:
            (first, a), (last, b) = reader.location(lines[0]), reader.location(lines[-1])
            where = (
                f"{first}, a record fn made from lines {a}-{b}"
                if first == last
                else f"a record fn made from {first} line {a} to {last} line {b}"
            )
        what = str(e).replace("record 0 of the batch", "the record").replace(" at index 0 of the batch", "")
        raise RecordError(
            f"{where}: cannot split: {type(e).__name__}: {what}\n  fix: correct the"
            f" record or --key/--stratify, or rerun with --on_error skip to write such records to"
            f" {join(self.cfg.output, ERRORS_DIR)}/ and go on"
        )

    def _assign(
        self, unit: Unit, start: int, recs: list[Any], h: np.ndarray | None, cls: list[str] | None
    ) -> np.ndarray:
        if self.exact is not None:
            return self.exact.assign(unit.index, start, cls, len(recs))
        assert h is not None
        if self.strat_hash is not None:
            assert cls is not None
            return self.strat_hash.assign(h, cls)
        return assign_hash(h, self.fractions)

    def _write(
        self,
        writers: list[PartWriter],
        recs: list[Any],
        ids: list[int],
        lines: Sequence[int],
        sink: ErrorSink,
    ) -> None:
        items: list[Any] = recs
        written: list[Any] = recs  # the records of items
        if self.cfg.output_format == "jsonl":  # encode once, then route the lines
            items, bad = encode_checked(recs)
            for i, err in bad:
                sink.record_failed(lines[i], recs[i], TypeError(err), stage="serialize")
            drop = {i for i, _ in bad}
            if drop:
                ids = [s for i, s in enumerate(ids) if i not in drop]
                written = [r for i, r in enumerate(recs) if i not in drop]
        buckets: list[list[Any]] = [[] for _ in writers]
        where: list[list[int]] = [[] for _ in writers]  # bucket position -> index in recs
        for j, (item, s) in enumerate(zip(items, ids)):
            buckets[s].append(item)
            where[s].append(j)
        for w, b, idx in zip(writers, buckets, where):
            if self.cfg.output_format == "jsonl":
                w.write_encoded(b, [written[j] for j in idx])
                continue
            for i, err in w.write(b):
                sink.record_failed(lines[idx[i]], recs[idx[i]], TypeError(err), stage="serialize")

    # -- commit ---------------------------------------------------------------------------
    def finalize(self, ctx: PassContext, metas: list[dict[str, Any]]) -> dict[str, Any]:
        names = self.fractions.names
        splits = {s: sum(int(m[ms.COUNTS][s]) for m in metas) for s in names}
        classes: dict[str, dict[str, int]] = {}
        for m in metas:
            for c, row in m.get(ms.CLASS_COUNTS, {}).items():
                acc = classes.setdefault(c, dict.fromkeys(names, 0))
                for s, k in row.items():
                    acc[s] += int(k)
        classes = {c: classes[c] for c in sorted(classes)}
        total = sum(splits.values())
        per_class = {c: tuple(row[s] for s in names) for c, row in classes.items()}
        warnings = small_class_warnings(self.fractions, total, tuple(splits.values()), per_class)
        profiles = {s: SplitProfile() for s in names}
        for m in metas:
            if m.get(ms.PROFILE):
                for s, state in orjson.loads(read_bytes(join(self.cfg.output, m[ms.PROFILE]))).items():
                    profiles[s].merge(SplitProfile.from_state(state))
        drift, drift_warnings = split_drift(profiles)
        warnings = [*warnings, *drift_warnings]
        for w in warnings:
            print(f"warning: {w}", file=sys.stderr, flush=True)
        unified = writer_class(self.cfg.output_format).finalize_job(
            self.cfg.output, metas, main_meta_names(ctx.units)
        )
        fs, root = fs_and_path(join(self.cfg.output, SIDE_DIR))
        if fs.exists(root):
            fs.rm(root, recursive=True)
        out: dict[str, Any] = {
            **unified, ms.RECORDS_OUT: total, ms.FILTERED: sum(int(m.get(ms.FILTERED, 0)) for m in metas),
            ms.SPLITS: splits, ms.FRACTIONS: self.fractions.as_dict(), ms.METHOD: self.method,
            ms.SEED: self.seed,
            ms.SPLIT_KEY: list(self.key.fields) if self.key else None, ms.STRATIFY: self.stratify,
            ms.WARNINGS: warnings, ms.OUTPUT: self.cfg.output, ms.DRIFT: drift,
        }  # fmt: skip
        if self.stratify:
            out[ms.CLASSES] = classes
        return out


make_op = SplitOp.from_args  # the runner of ops/split.py
