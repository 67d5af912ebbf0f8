"""The two data sets of the reader benchmark and the copies each reader reads.

Every copy holds the same arrays: record ``i`` is made by :func:`token_record` or
:func:`image_record` from ``numpy.random.default_rng(i)``, so any reader's record can be checked
against the generator.

- ``ours``: made BY THE PRODUCT: an input of ``--parts`` JSONL files of ids, the transform run
  in-process (``runner.main``, one rank, ``--num_workers 2``) with ``--output_format parquet``.
- ``litdata``: ``litdata.optimize(fn=..., inputs=range(n), num_workers=2, chunk_bytes="64MB",
  start_method="fork")``.
- ``hf``: HF ``datasets`` cannot read our tensor columns (``arrow.fixed_shape_tensor`` has no
  ``datasets`` dtype: ``Dataset.from_parquet`` raises ``ValueError``), so it is written with
  ``Dataset.from_generator`` over our Parquet parts (the same arrays, read back with pyarrow),
  with features ``List(int32, length=512)`` / ``Array3D((3, 64, 64), uint8)``.

Copies are cached under ``WORKDIR/reader-data/<name>-n<N>`` with a ``_DONE`` marker written last
(it also records how long each copy took to write), so an interrupted preparation is redone.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

TESTS = Path(__file__).resolve().parents[2] / "tests"


def token_record(rec: dict[str, Any]) -> dict[str, Any]:
    """The transform of the token data set: ``{"id", "tokens": int32[512]}``."""
    i = int(rec["id"])
    return {"id": i, "tokens": np.random.default_rng(i).integers(0, 50_000, 512, dtype=np.int32)}


def image_record(rec: dict[str, Any]) -> dict[str, Any]:
    """The transform of the image data set: ``{"id", "image": uint8[3, 64, 64], "label"}``."""
    i = int(rec["id"])
    img = np.random.default_rng(i).integers(0, 256, (3, 64, 64), dtype=np.uint8)
    return {"id": i, "image": img, "label": i % 10}


def _token_by_index(i: int) -> dict[str, Any]:  # litdata's optimize passes the input itself
    return token_record({"id": i})


def _image_by_index(i: int) -> dict[str, Any]:
    return image_record({"id": i})


@dataclass(frozen=True)
class Spec:
    """One data set: its size, transform and tensor field."""

    name: str
    records: int
    tensor: str  # the tensor field
    payload_bytes: int  # tensor bytes per record
    fn: Callable[[dict[str, Any]], dict[str, Any]]
    by_index: Callable[[int], dict[str, Any]]

    def expected(self, i: int) -> np.ndarray:
        """The tensor of record ``i``, from the generator."""
        return np.asarray(self.fn({"id": i})[self.tensor])


def spec(name: str, records: int) -> Spec:
    if name == "tokens":
        return Spec(name, records, "tokens", 512 * 4, token_record, _token_by_index)
    if name == "images":
        return Spec(name, records, "image", 3 * 64 * 64, image_record, _image_by_index)
    raise ValueError(f"unknown data set {name!r}; choose tokens or images")


@dataclass(frozen=True)
class Copies:
    """Where each reader's copy of one data set lives, and how long writing it took."""

    root: Path
    write_s: dict[str, float]

    @property
    def ours(self) -> Path:
        return self.root / "ours"

    @property
    def ours_wds(self) -> Path:
        return self.root / "ours-wds"

    @property
    def litdata(self) -> Path:
        return self.root / "litdata"

    @property
    def hf(self) -> Path:
        return self.root / "hf"

    def hf_arrow_files(self) -> list[str]:
        """The Arrow files ``Dataset.from_generator`` wrote (memory-mapped by ``Dataset.from_file``)."""
        files: list[str] = json.loads((self.hf / "files.json").read_text())
        return files

    def parquet_parts(self) -> list[str]:
        """Our Parquet parts, in unit order (from the manifest: no listing)."""
        man = json.loads((self.ours / "_SUCCESS").read_text())
        return [str(self.ours / rel) for unit in man["units"] for rel in unit["outputs"]]


@contextlib.contextmanager
def _quiet(log: Path) -> Iterator[None]:
    """Send fds 1 and 2 (also those of spawned children) to ``log``: litdata and HF print
    progress bars; on failure the log's tail is printed."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log, "ab") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
        try:
            yield
        except BaseException:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            print("\n".join(log.read_text(errors="replace").splitlines()[-30:]), file=sys.stderr)
            raise
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def _write_ours(s: Spec, root: Path, parts: int, fmt: str = "parquet") -> None:
    sys.path.insert(0, str(TESTS))
    from tdp_testutil import run_op, write_jsonl

    if not (root / "input").exists():
        per = -(-s.records // parts)
        for k in range(parts):
            ids = range(k * per, min(s.records, (k + 1) * per))
            write_jsonl(root / "input" / f"ids-{k:03d}.jsonl", [{"id": i} for i in ids])
    out = root / ("ours" if fmt == "parquet" else f"ours-{'wds' if fmt == 'webdataset' else fmt}")
    run_op(
        "transform", str(root / "input"), out, "--output_format", fmt, "--num_workers", "2", fn=s.fn,
    )  # fmt: skip


def _write_litdata(s: Spec, out: Path) -> None:
    from litdata import optimize

    # fork: spawned workers would re-import torch (~2 s each here); optimize also sets the
    # process's default start method to the one it uses.
    optimize(fn=s.by_index, inputs=list(range(s.records)), output_dir=str(out), chunk_bytes="64MB",
             num_workers=2, start_method="fork")  # fmt: skip


def _hf_features(s: Spec) -> Any:
    import datasets as hfd

    if s.name == "tokens":
        return hfd.Features({"id": hfd.Value("int64"), "tokens": hfd.List(hfd.Value("int32"), length=512)})
    return hfd.Features(
        {"id": hfd.Value("int64"), "image": hfd.Array3D((3, 64, 64), "uint8"), "label": hfd.Value("int64")}
    )


def _parquet_records(files: list[str]) -> Iterator[dict[str, Any]]:
    """Our parts read back with pyarrow, one record (numpy tensors) at a time."""
    import pyarrow.parquet as pq

    for f in files:
        for batch in pq.ParquetFile(f).iter_batches(batch_size=1024):
            cols = {}
            for name in batch.schema.names:
                col = batch.column(name)
                cols[name] = col.to_numpy_ndarray() if hasattr(col, "to_numpy_ndarray") else col.to_pylist()
            for j in range(batch.num_rows):
                yield {k: v[j] for k, v in cols.items()}


def _write_hf(s: Spec, parts: list[str], out: Path) -> None:
    import datasets as hfd

    ds = hfd.Dataset.from_generator(
        _parquet_records, gen_kwargs={"files": parts}, features=_hf_features(s), cache_dir=str(out / "cache")
    )
    files = [c["filename"] for c in ds.cache_files]
    (out / "files.json").write_text(json.dumps(files))


def _import_writers() -> None:
    sys.path.insert(0, str(TESTS))
    import datasets  # noqa: F401
    import litdata  # noqa: F401
    import tdp_testutil  # noqa: F401

    import torchx_datapipes.runner.main  # noqa: F401


def prepare(s: Spec, cache: Path, parts: int) -> Copies:
    """The three copies of ``s`` under ``cache``, written on first use (then cached)."""
    root = cache / f"{s.name}-n{s.records}-p{parts}"
    marker = root / "_DONE"
    if marker.exists() and not any((root / "ours" / "_index").glob("*.sums")):
        marker.unlink()  # a cache from before parts had block checksums: write every copy again
    if marker.exists():
        copies = Copies(root, json.loads(marker.read_text())["write_s"])
        # a cache from before the WebDataset copy, or from before its parts had offset indexes
        if "ours-wds" not in copies.write_s or not (copies.ours_wds / "_index").is_dir():
            _add_wds(s, copies, parts, marker)
        return copies
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    copies = Copies(root, {})
    log = root / "prepare.log"
    _import_writers()  # import costs are not write time
    t0 = time.perf_counter()
    with _quiet(log):
        _write_ours(s, root, parts)
    copies.write_s["ours"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    with _quiet(log):
        _write_litdata(s, copies.litdata)
    copies.write_s["litdata"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    with _quiet(log):
        _write_hf(s, copies.parquet_parts(), copies.hf)
    copies.write_s["hf"] = time.perf_counter() - t0
    _add_wds(s, copies, parts, marker)
    return copies


def _add_wds(s: Spec, copies: Copies, parts: int, marker: Path) -> None:
    """Our WebDataset copy (``--output_format webdataset``: tensors as ``.npy`` members)."""
    _import_writers()
    shutil.rmtree(copies.ours_wds, ignore_errors=True)
    t0 = time.perf_counter()
    with _quiet(copies.root / "prepare.log"):
        _write_ours(s, copies.root, parts, "webdataset")
    copies.write_s["ours-wds"] = time.perf_counter() - t0
    marker.write_text(json.dumps({"records": s.records, "parts": parts, "write_s": copies.write_s}))
