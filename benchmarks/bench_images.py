"""Benchmark: JPEGs decoded, resized to 64x64 and written as uint8 tensors (issue 10).

usage (from the repo root)::

    .venv/bin/python benchmarks/bench_images.py                  # 10,000 JPEGs, every method
    .venv/bin/python benchmarks/bench_images.py --n 500 --methods ours,pool2

The data: ``--n`` JPEGs of mixed sizes (sides 100..800 px, drawn per image from ``--seed``),
smooth random colour fields with texture and noise so that they compress like photos (about
40 KB each at quality 85, not flat colour), generated once under ``--workdir`` with a
``_DONE`` marker. The function (:mod:`image_transforms`) is the same for every method: Pillow
decodes the file's bytes, converts to RGB, resizes to 64x64 and returns
``{"image": uint8 (3, 64, 64), "name": stem, "label": n}``.

Methods:

- ``ours``: ``torchx run -s local_cwd torchx_datapipes.components:transform --input DIR
  --output OUT -j 1x2 --output_format parquet`` (the ``files`` format is picked for a directory
  of ``.jpg``); the tensors are a fixed-shape tensor column.
- ``ours-wds``: the same with ``--output_format webdataset``: one tar shard per unit, the tensor as
  a ``<key>.image.npy`` member (what the Pool(2) loop writes too: ``.npy``), no Parquet encoding.
- ``pool2``: a hand-written ``multiprocessing.Pool(2)`` loop; a task is a chunk of 500 files,
  written as one stacked ``(n, 3, 64, 64)`` ``.npy`` plus a ``.names`` file. Each worker is in a
  session of its own (``setsid``), as torchrun's ranks are: see :func:`_ref_pool2` for why.
- ``pool2-1s``: the same loop with both workers in the command's session (as usually written).
- ``litdata``: ``litdata.optimize(fn=path_to_tensor, inputs=paths, output_dir=OUT,
  num_workers=2, chunk_bytes="64MB")`` (its workers are spawned, in the command's session).

Columns: **wall s** is the whole command (interpreter start-up, imports, torchx launch);
**work s** is the processing alone, from each method's own clock: for the references, the time
around ``Pool.map``/``optimize`` inside the child (after its imports); for ours, the job's own
``wall_time_s`` in ``_SUCCESS`` (rank 0's engine, from its start through planning, the units
and the commit; the launch and imports aside). **slot s** (ours) is the busiest worker slot's
sum of unit times (``units[].wall_s``: read, decode, write and commit of its units), the
processing alone. **CPU s** is the user + system CPU time of the command's whole process tree
(``RUSAGE_CHILDREN``), which the other jobs of a shared machine do not inflate as they inflate
wall times; **load** is the 1-minute load average at the end of the run (2 cores: above 2,
other work was competing). **steady rec/s** = records / work s. The outputs are checked: every method wrote
``--n`` records, and the tensors of a few images are equal to the function's own result.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO_ROOT, Measurement, run_measured, torchx_cmd, torchx_log_tail, write_json  # noqa: E402

METHODS = ("ours", "ours-wds", "pool2", "pool2-1s", "litdata")
OURS = {"ours": "parquet", "ours-wds": "webdataset"}  # method -> --output_format
COMPONENT = "torchx_datapipes.components:transform"
FN = "benchmarks/image_transforms.py:record_to_tensor"
LITDATA_HINT = "not installed (make bench: pip install --no-deps litdata, see the Makefile)"

# ---------------------------------------------------------------------------------------------
# The data.
# ---------------------------------------------------------------------------------------------


def make_jpeg(i: int, seed: int) -> bytes:
    """Image ``i``: sides 100..800 px, a smooth colour field plus texture plus noise, JPEG q85."""
    import io

    from PIL import Image

    rng = np.random.default_rng([seed, i])
    w, h = (int(x) for x in rng.integers(100, 801, 2))
    bicubic, bilinear = Image.Resampling.BICUBIC, Image.Resampling.BILINEAR
    low = rng.integers(0, 256, (h // 64 + 2, w // 64 + 2, 3), dtype=np.uint8)
    mid = rng.integers(0, 256, (h // 8 + 2, w // 8 + 2, 3), dtype=np.uint8)
    a = np.asarray(Image.fromarray(low).resize((w, h), bicubic), np.int16) * 3 // 4
    a += np.asarray(Image.fromarray(mid).resize((w, h), bilinear), np.int16) // 4
    a += rng.normal(0, 6, (h, w, 3)).astype(np.int16)
    buf = io.BytesIO()
    Image.fromarray(np.clip(a, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=85)
    return buf.getvalue()


def _write_jpegs(args: tuple[int, int, int, str]) -> int:
    start, stop, seed, out = args
    n = 0
    for i in range(start, stop):
        data = make_jpeg(i, seed)
        Path(out, f"img_{i:05d}.jpg").write_bytes(data)
        n += len(data)
    return n


def ensure_images(n: int, seed: int, cache_root: Path) -> Path:
    """``cache_root/images-n{n}-s{seed}/jpg/`` (generated on first use; ``_DONE`` is written last)."""
    root = cache_root / f"images-n{n}-s{seed}"
    marker = root / "_DONE"  # beside jpg/, not in it: the input directory holds only images
    if marker.exists():
        return root / "jpg"
    shutil.rmtree(root, ignore_errors=True)
    (root / "jpg").mkdir(parents=True)
    from multiprocessing import Pool

    t0 = time.perf_counter()
    step = 250
    tasks = [(s, min(n, s + step), seed, str(root / "jpg")) for s in range(0, n, step)]
    with Pool(os.cpu_count() or 1) as pool:
        size = sum(pool.map(_write_jpegs, tasks))
    print(f"# generated {n} JPEGs ({size / 1e6:.0f} MB) in {time.perf_counter() - t0:.1f}s", flush=True)
    marker.write_text(json.dumps({"n": n, "seed": seed, "bytes": size}))
    return root / "jpg"


def image_paths(d: Path) -> list[str]:
    return sorted(str(p) for p in d.glob("*.jpg"))


# ---------------------------------------------------------------------------------------------
# The references. They run in a child interpreter: `bench_images.py _ref METHOD`.
# ---------------------------------------------------------------------------------------------


def _pool_chunk(args: tuple[list[str], str]) -> int:
    import image_transforms

    paths, out = args
    recs = [image_transforms.path_to_tensor(p) for p in paths]
    np.save(out + ".npy", np.stack([r["image"] for r in recs]))
    Path(out + ".names").write_text("\n".join(r["name"] for r in recs) + "\n")
    return len(recs)


def _ref_pool2(paths: list[str], out: Path, chunk: int, own_sessions: bool = True) -> int:
    """Pool(2); ``own_sessions``: each worker calls ``setsid()``, as torchrun starts each rank.

    Linux's autogroup scheduler (``/proc/sys/kernel/sched_autogroup_enabled``) shares the CPU
    between sessions first: on a busy machine two workers in one session get about the share of
    one process in its own. torchx's local scheduler and torchrun put every rank in a session of
    its own, so without this the reference would lose CPU to ours on a loaded machine.
    """
    from multiprocessing import Pool

    tasks = [
        (paths[s : s + chunk], str(out / f"chunk-{s // chunk:05d}")) for s in range(0, len(paths), chunk)
    ]
    with Pool(2, initializer=os.setsid if own_sessions else None) as pool:
        return sum(pool.map(_pool_chunk, tasks, chunksize=1))


def _ref_pool2_one_session(paths: list[str], out: Path, chunk: int) -> int:
    return _ref_pool2(paths, out, chunk, own_sessions=False)


def _ref_litdata(paths: list[str], out: Path, chunk: int) -> int:
    import image_transforms
    import litdata

    litdata.optimize(
        fn=image_transforms.path_to_tensor,
        inputs=paths,
        output_dir=str(out),
        num_workers=2,
        chunk_bytes="64MB",
    )
    return len(litdata.StreamingDataset(str(out)))


_REFS = {"pool2": _ref_pool2, "pool2-1s": _ref_pool2_one_session, "litdata": _ref_litdata}


def _ref_main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="bench_images.py _ref")
    ap.add_argument("method", choices=sorted(_REFS))
    ap.add_argument("--input", required=True, help="directory of *.jpg")
    ap.add_argument("--output", required=True, help="output directory (created)")
    ap.add_argument("--chunk", type=int, default=500, help="files per Pool task")
    a = ap.parse_args(argv)
    out = Path(a.output)
    out.mkdir(parents=True, exist_ok=True)
    paths = image_paths(Path(a.input))
    t0 = time.perf_counter()
    n = _REFS[a.method](paths, out, a.chunk)
    print(json.dumps({"records_out": n, "work_s": time.perf_counter() - t0}))
    return 0


# ---------------------------------------------------------------------------------------------
# Reading the outputs back (for the checks).
# ---------------------------------------------------------------------------------------------


def read_ours(out: Path, names: Sequence[str]) -> tuple[int, dict[str, np.ndarray]]:
    import pyarrow.parquet as pq

    from torchx_datapipes.formats.parquet.arrow import column_to_numpy

    table = pq.read_table([str(p) for p in sorted(out.glob("part-*.parquet"))], columns=["name", "image"])
    got = table.column("name").to_pylist()
    images = column_to_numpy(table.column("image"))
    return len(got), {k: images[got.index(k)] for k in names}


def read_pool2(out: Path, names: Sequence[str]) -> tuple[int, dict[str, np.ndarray]]:
    n, found = 0, {}
    for npy in sorted(out.glob("chunk-*.npy")):
        arr = np.load(npy)
        got = Path(str(npy)[: -len(".npy")] + ".names").read_text().split()
        n += len(arr)
        found.update({k: arr[got.index(k)] for k in names if k in got})
    return n, found


def read_litdata(out: Path, names: Sequence[str]) -> tuple[int, dict[str, np.ndarray]]:
    import litdata

    ds = litdata.StreamingDataset(str(out))
    found = {}
    for i in range(len(ds)):
        item = ds[i]
        if item["name"] in names:
            found[item["name"]] = np.asarray(item["image"])
    return len(ds), found


def read_ours_wds(out: Path, names: Sequence[str]) -> tuple[int, dict[str, np.ndarray]]:
    """With the ``webdataset`` package (the format's reference reader), not with our own."""
    import webdataset as wds

    n, found = 0, {}
    for sample in wds.WebDataset(sorted(str(p) for p in out.glob("part-*.tar")), shardshuffle=False):
        n += 1
        name = sample["name.txt"].decode() if "name.txt" in sample else json.loads(sample["name.json"])
        if name in names:
            found[name] = np.load(io.BytesIO(sample["image.npy"]), allow_pickle=False)
    return n, found


READERS = {
    "ours": read_ours,
    "ours-wds": read_ours_wds,
    "pool2": read_pool2,
    "pool2-1s": read_pool2,
    "litdata": read_litdata,
}


# ---------------------------------------------------------------------------------------------
# The harness.
# ---------------------------------------------------------------------------------------------


@dataclass
class Row:
    method: str
    records: int
    wall_s: Optional[float] = None
    work_s: Optional[float] = None
    slot_s: Optional[float] = None  # ours: the busiest worker slot's sum of unit times
    cpu_s: Optional[float] = None  # user + system CPU of the whole process tree
    load: Optional[float] = None  # the machine's 1-minute load average when the run ended
    ok: bool = True
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def steady(self) -> Optional[float]:
        return self.records / self.work_s if self.ok and self.work_s else None

    @property
    def end_to_end(self) -> Optional[float]:
        return self.records / self.wall_s if self.ok and self.wall_s else None


def _children_cpu() -> float:
    """CPU seconds of every waited-for descendant so far: each process tree is reaped level by level
    (torchx -> torchrun -> ranks -> workers; Pool and litdata join theirs), so it is all counted."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def busiest_slot_s(manifest: dict[str, Any]) -> float:
    """The busiest slot's sum of unit times: the processing alone, planning and commit aside."""
    per_slot: dict[int, float] = {}
    for u in manifest["units"]:
        per_slot[int(u["slot"])] = per_slot.get(int(u["slot"]), 0.0) + float(u["wall_s"])
    return max(per_slot.values())


def _cmd(method: str, images: Path, out: Path, a: argparse.Namespace) -> list[str]:
    if method in OURS:
        cmd = [*torchx_cmd(), "run", "-s", "local_cwd", COMPONENT, "--fn", FN, "--input", str(images)]
        cmd += ["--output", str(out), "-j", a.j, "--output_format", OURS[method], "--overwrite", "True"]
        return cmd + ["--unit_mb", str(a.unit_mb)] if a.unit_mb else cmd
    return [sys.executable, __file__, "_ref", method, "--input", str(images), "--output", str(out)]


def _failed(row: Row, m: Measurement, why: str) -> Row:
    row.ok, row.note = False, why
    print(f"\n!! {row.method} FAILED ({why}), rc={m.returncode}, {m.wall_s:.1f}s", file=sys.stderr)
    for line in [*m.tail().splitlines(), *torchx_log_tail(m).splitlines()]:
        print(f"   | {line}", file=sys.stderr)
    return row


def timeline(manifest: dict[str, Any]) -> dict[str, float]:
    """When (seconds after rank 0's engine started) the first unit started and each slot's last ended."""
    t0 = float(manifest["started_at"])
    ends: dict[int, float] = {}
    for u in manifest["units"]:
        ends[int(u["slot"])] = max(
            ends.get(int(u["slot"]), 0.0), float(u["started_at"]) + float(u["wall_s"]) - t0
        )
    first = min(float(u["started_at"]) for u in manifest["units"]) - t0
    return {
        "first_unit_s": first,
        "first_slot_end_s": min(ends.values()),
        "last_slot_end_s": max(ends.values()),
    }


def run_method(method: str, images: Path, n: int, a: argparse.Namespace) -> tuple[Row, Path]:
    out = a.workdir / "out" / method
    shutil.rmtree(out, ignore_errors=True)
    # the job must import this checkout's package (a worktree), not whatever the venv installed
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    cpu0 = _children_cpu()
    m = run_measured(_cmd(method, images, out, a), cwd=REPO_ROOT, env=env, timeout=a.timeout)
    row = Row(method, n, m.wall_s, cpu_s=_children_cpu() - cpu0, load=os.getloadavg()[0])
    if not m.ok:
        return _failed(row, m, "timed out" if m.timed_out else f"rc={m.returncode}"), out
    if method in OURS:
        if not (out / "_SUCCESS").exists():
            return _failed(row, m, "no _SUCCESS"), out
        manifest = json.loads((out / "_SUCCESS").read_text())
        row.work_s, row.slot_s = float(manifest["wall_time_s"]), busiest_slot_s(manifest)
        row.extra = {
            "units": len(manifest["units"]),
            "records_out": manifest["records_out"],
            **timeline(manifest),
        }
        row.note = (
            "start {first_unit_s:.2f}s, slots end {first_slot_end_s:.2f}-{last_slot_end_s:.2f}s".format(
                **row.extra
            )
        )
    else:
        got = m.last_json()
        if got is None:
            return _failed(row, m, "no counts"), out
        row.work_s = float(got["work_s"])
        row.extra = {"records_out": got["records_out"]}
    return row, out


def check_outputs(row: Row, out: Path, images: Path, sample: Sequence[str]) -> None:
    """Every record written; the sample's tensors equal the function's own result."""
    import image_transforms

    if not row.ok:
        return
    n, found = READERS[row.method](out, sample)
    if n != row.records:
        row.ok, row.note = False, f"read back {n} records, want {row.records}"
        return
    for name in sample:
        want = image_transforms.path_to_tensor(str(images / f"{name}.jpg"))["image"]
        if name not in found or found[name].shape != want.shape or not np.array_equal(found[name], want):
            row.ok, row.note = False, f"{name}: tensor differs or missing"
            return
    row.note = f"checked: {n} records, {len(sample)} tensors equal" + (f"; {row.note}" if row.note else "")


def _f(v: Optional[float], spec: str) -> str:
    return "-" if v is None else format(v, spec)


def print_table(rows: Sequence[Row], title: str) -> None:
    print(f"\n{title}")
    head = f"| {'method':<8} | {'records':>7} | {'wall s':>7} | {'work s':>7} | {'slot s':>6} | "
    head += f"{'CPU s':>6} | {'load':>4} | {'end-to-end rec/s':>16} | {'steady rec/s':>12} | note |"
    print(head)
    print("|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|")
    for r in rows:
        wall = _f(r.wall_s, ".2f") if r.ok else "FAILED"
        line = f"| {r.method:<8} | {r.records:>7} | {wall:>7} | {_f(r.work_s, '.2f'):>7} | "
        line += f"{_f(r.slot_s, '.2f'):>6} | {_f(r.cpu_s, '.1f'):>6} | {_f(r.load, '.1f'):>4} | "
        line += f"{_f(r.end_to_end, ',.0f'):>16} | {_f(r.steady, ',.0f'):>12} | "
        print(line + f"{r.note} |")


def verdict(rows: Sequence[Row]) -> list[str]:
    """The issue's targets, judged on each of our rows (Parquet output and WebDataset output)."""
    by = {r.method: r for r in rows if r.ok}
    pool, lit = by.get("pool2"), by.get("litdata")
    lines = []
    for method in OURS:
        ours = by.get(method)
        if ours is None:
            continue
        if pool and ours.steady and pool.steady and ours.wall_s and pool.wall_s:
            x = ours.steady / pool.steady
            met = "met" if x >= 0.9 else "NOT met"
            lines.append(f"{method}: steady state vs pool2: {x:.2f}x (target >= 0.9x: {met})")
            e2e = pool.wall_s / ours.wall_s
            lines.append(
                f"{method}: end to end vs pool2: {e2e:.2f}x (wall {ours.wall_s:.2f}s vs {pool.wall_s:.2f}s)"
            )
        if lit and ours.wall_s and lit.wall_s:
            x = lit.wall_s / ours.wall_s
            met = "met" if x > 1 else "NOT met"
            lines.append(f"{method}: end to end vs litdata: {x:.2f}x faster (target > 1x: {met})")
    return lines


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="JPEGs to 64x64 uint8 tensors: ours vs Pool(2) vs litdata.")
    ap.add_argument("--n", type=int, default=10_000, help="JPEGs to generate")
    ap.add_argument("--seed", type=int, default=0, help="generator seed")
    ap.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated subset of {METHODS}")
    ap.add_argument("--j", default="1x2", help="ours: torchx -j (1x2: two processes, as pool2)")
    ap.add_argument("--unit_mb", type=float, default=0.0, help="ours: --unit_mb (0: the component's default)")
    ap.add_argument("--check", type=int, default=3, help="images whose tensors are compared")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "tdp-bench-images")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per run before it is killed")
    ap.add_argument("--keep-output", action="store_true", help="keep the output directories")
    ap.add_argument("--json", type=Path, help="save the results here")
    a = ap.parse_args(argv)
    a.methods = [m for m in METHODS if m in {x.strip() for x in a.methods.split(",")}]
    return a


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "_ref":
        return _ref_main(argv[1:])
    a = parse_args(argv)
    a.workdir.mkdir(parents=True, exist_ok=True)
    os.chdir(REPO_ROOT)  # --fn is relative to the repo root, and local_cwd runs there
    images = ensure_images(a.n, a.seed, a.workdir / "data")
    size = sum(os.path.getsize(p) for p in image_paths(images))
    print(f"# {a.n} JPEGs, {size / 1e6:.0f} MB, in {images}; cpus={os.cpu_count()}", flush=True)
    idx = np.linspace(0, a.n - 1, max(1, a.check)).astype(int)
    sample = sorted({f"img_{i:05d}" for i in idx})
    rows = []
    for method in a.methods:
        if method == "litdata" and not _has("litdata"):
            rows.append(Row(method, a.n, ok=False, note=LITDATA_HINT))
            continue
        row, out = run_method(method, images, a.n, a)
        check_outputs(row, out, images, sample)
        print(
            f"# {method}: wall {_f(row.wall_s, '.2f')}s work {_f(row.work_s, '.2f')}s {row.note}", flush=True
        )
        rows.append(row)
        if not a.keep_output:
            shutil.rmtree(out, ignore_errors=True)
    print_table(rows, f"Images: {a.n} JPEGs -> uint8 (3, 64, 64), 2 processes each")
    for line in verdict(rows):
        print(f"# {line}")
    if a.json:
        write_json(
            a.json, {"n": a.n, "bytes": size, "rows": [{**r.__dict__, "steady": r.steady} for r in rows]}
        )
    return 0 if all(r.ok for r in rows) else 1


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


if __name__ == "__main__":
    sys.exit(main())
