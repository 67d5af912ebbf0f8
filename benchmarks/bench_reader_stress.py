"""Stress loop: the Parquet reader's resumed epochs in forked DataLoader workers (issue 29, item 6).

usage (from the repo root)::

    .venv/bin/python benchmarks/bench_reader_stress.py                      # 100 loops + 100 with jemalloc
    .venv/bin/python benchmarks/bench_reader_stress.py --loops 2 --reference-loops 2   # a smoke run

Why: commit b4e7933 made the Parquet reader allocate Arrow memory from the system allocator unless
the user chose a pool (``ARROW_DEFAULT_MEMORY_POOL``), because a forked DataLoader worker crashed
when its read-ahead thread exited, in Arrow's bundled jemalloc per-thread cleanup (about 4% of
resumed epochs in a stress loop). This is that stress loop, kept. The system pool turned out not
to be enough (the crash came back in a loop of the suite's own reader test, 3 of 60 resumed
epochs); read-ahead threads are now pooled and never exit (``torchx_datapipes/data/_prefetch.py``),
and that loop gave 0 of 80.

The output is written once, in-process by the product (the transform, one rank, ``--num_workers
2``, ``--output_format parquet``) from ``--parts`` JSONL files of ids: record ``i`` is ``{"id": i,
"tokens": int32[512]}`` (:func:`readerbench.data.token_record`); it is cached under ``--workdir``.

Each loop is a FRESH SUBPROCESS (this file with ``--child``), so a crash is counted, not fatal:
``OutputDataset(shuffle=True, seed=loop)`` through ``StatefulDataLoader(batch_size, num_workers=2,
multiprocessing_context="fork")``; after ``stop`` batches (it varies with the loop) the loader's
``state_dict()`` is taken and its iterator shut down (its workers' read-ahead threads are stopped
mid-epoch), then a NEW loader over a new dataset loads the state and reads the rest of the epoch
(the resumed epoch is where the crash showed). Checked per loop: every id of the output exactly once
over the two halves; every worker process of both loaders exited with code 0 (a worker that dies
while exiting is invisible to the DataLoader once it stopped watching, so its exit code is read);
the subprocess exited with 0 and reported. Which allocator the WORKERS used is read in the workers
(the collate function records ``pyarrow.default_memory_pool().backend_name`` after reading).

Counted per loop: a crash (the subprocess or a worker killed by a signal other than the SIGTERM the
DataLoader sends to a worker that did not exit within 5 s, or a DataLoader error naming a worker
that was killed or exited unexpectedly), a wrong result (ids missing or repeated), another failure
(a timeout, a worker terminated or exiting non-zero, any other error). Core dumps are switched off
in the subprocess (``RLIMIT_CORE`` 0): a hundred torch cores would fill a disk.

Rows: ``default`` (``ARROW_DEFAULT_MEMORY_POOL`` unset: the reader's choice, the system allocator)
for ``--loops`` loops, and each ``--references`` pool forced through ``ARROW_DEFAULT_MEMORY_POOL``
(the way a user chooses a pool, which the reader leaves alone) for ``--reference-loops`` loops. The
loops of all rows are interleaved (loop 0 of each row, then loop 1, ...), so load that drifts on a
shared machine hits every row alike; the same loop index stops at the same batch with the same seed
in every row. Seconds per loop: the subprocess's wall time (interpreter, torch import, both loaders)
and the two loaders' own time, medians. The machine's load average is printed before and after.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO_ROOT, run_measured, write_json  # noqa: E402

POOLS = ("jemalloc", "mimalloc", "system")
CRASH_WORDS = ("killed by signal", "exited unexpectedly")
CHILD_ONLY = ("child", "stop", "seed", "json", "crash_at_exit")  # options not saved with the results


# --------------------------------------------------------------------------------------------
# The child: one loop (a head of the epoch, state_dict, a resumed loader for the rest).
# --------------------------------------------------------------------------------------------


def _collate(batch: list[dict[str, Any]]) -> dict[str, Any]:
    """``default_collate`` plus the Arrow pool of the worker that read the batch."""
    import pyarrow as pa
    from torch.utils.data import default_collate

    out: dict[str, Any] = default_collate(batch)
    out["__pool__"] = pa.default_memory_pool().backend_name
    return out


def _workers_exit(it: Any, codes: list[Optional[int]]) -> None:
    """Shut the iterator's workers down (idempotent; the DataLoader raises if one died meanwhile)
    and add their exit codes to ``codes``, also when it raised."""
    workers = list(getattr(it, "_workers", []))
    try:
        it._shutdown_workers()
    finally:
        for w in workers:
            w.join(timeout=10)
        codes += [w.exitcode for w in workers]


def _crash_at_exit(worker_id: int) -> None:
    """A worker that kills itself with SIGSEGV as it exits (after serving everything), as the
    jemalloc crash did: for the tests, which check that such a loop is counted as a crash."""
    from multiprocessing import util

    util.Finalize(None, os.kill, (os.getpid(), signal.SIGSEGV), exitpriority=0)


def child(
    out: str, stop: int, seed: int, batch_size: int, num_workers: int, window: int, crash: bool = False
) -> dict[str, Any]:
    """One loop in this (fresh) process; returns what :func:`classify` needs."""
    import pyarrow as pa
    from torchdata.stateful_dataloader import StatefulDataLoader

    from torchx_datapipes.data import OutputDataset

    def loader() -> Any:
        ds = OutputDataset(out, shuffle=True, seed=seed, shuffle_window=window)
        return StatefulDataLoader(
            ds, batch_size=batch_size, num_workers=num_workers, multiprocessing_context="fork",
            collate_fn=_collate, worker_init_fn=_crash_at_exit if crash else None,
        )  # fmt: skip

    rep: dict[str, Any] = {"ids": [], "pools": [], "worker_exitcodes": [], "error": None, "stop": stop}
    pools: set[str] = set()
    t0 = time.perf_counter()
    try:
        head = loader()
        rep["expected"] = len(head.dataset)
        it = iter(head)
        try:
            for _ in range(stop):
                b = next(it)
                rep["ids"] += b["id"].tolist()
                pools.add(b["__pool__"])
            state = head.state_dict()
        finally:
            _workers_exit(it, rep["worker_exitcodes"])
        del it, head
        rest = loader()
        rest.load_state_dict(state)
        it = iter(rest)
        try:
            for b in it:  # at the end the iterator shuts its workers down (and raises if one died)
                rep["ids"] += b["id"].tolist()
                pools.add(b["__pool__"])
        finally:
            _workers_exit(it, rep["worker_exitcodes"])
    except Exception as e:  # reported to the parent, which counts it
        rep["error"] = f"{type(e).__name__}: {e}"
    rep["seconds"] = time.perf_counter() - t0
    rep["pools"] = sorted(pools)
    rep["main_pool"] = pa.default_memory_pool().backend_name
    return rep


def _child_main(a: argparse.Namespace) -> None:
    import faulthandler
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # inherited by the forked workers
    faulthandler.enable()  # a fatal signal prints the Python stacks to stderr
    rep = child(str(a.child), a.stop, a.seed, a.batch_size, a.num_workers, a.shuffle_window, a.crash_at_exit)
    ids = rep.pop("ids")
    want = rep["expected"] if "expected" in rep else a.records
    seen = set(ids)
    rep.update(records=len(ids), missing=len(set(range(want)) - seen), repeated=len(ids) - len(seen))
    rep["foreign"] = len(seen - set(range(want)))
    print(json.dumps(rep), flush=True)


# --------------------------------------------------------------------------------------------
# The parent: write the output once, run the loops, count.
# --------------------------------------------------------------------------------------------


@dataclass
class Loop:
    """One loop's outcome."""

    row: str
    index: int
    verdict: str  # "ok", "crash", "wrong", "other"
    wall_s: float
    read_s: Optional[float]
    pools: list[str]
    detail: str = ""


@dataclass
class Row:
    """A row of the table: one allocator setting."""

    name: str  # "default" or the forced pool
    env: Optional[str]  # ARROW_DEFAULT_MEMORY_POOL, None = unset
    loops: list[Loop] = field(default_factory=list)

    def count(self, verdict: str) -> int:
        return sum(1 for lp in self.loops if lp.verdict == verdict)

    @property
    def pools(self) -> str:
        seen = sorted({p for lp in self.loops for p in lp.pools})
        return "+".join(seen) or "-"


def _signame(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


def classify(rc: int, timed_out: bool, rep: Optional[dict[str, Any]], stderr_tail: str) -> tuple[str, str]:
    """``(verdict, detail)`` of one loop from its exit code, its report and its stderr."""
    if timed_out:
        return "other", "timed out (killed)"
    if rc < 0:
        return "crash", f"the loop's process was killed by {_signame(-rc)}"
    if rep is None:
        crash = any(w in stderr_tail for w in CRASH_WORDS)
        return ("crash" if crash else "other"), f"exit code {rc}, no report: {stderr_tail[-300:]}"
    codes = rep.get("worker_exitcodes", [])
    killed = [c for c in codes if c is not None and c < 0 and c != -signal.SIGTERM]
    if killed:
        return "crash", "worker exit codes " + ", ".join(f"{c} ({_signame(-c)})" for c in killed)
    err = rep.get("error")
    if err:
        return ("crash" if any(w in err for w in CRASH_WORDS) else "other"), err[:300]
    bad = [c for c in codes if c != 0]
    if bad:
        return "other", f"worker exit codes {bad} (a SIGTERM: a worker did not exit within 5 s)"
    if rep["missing"] or rep["repeated"] or rep["foreign"]:
        return "wrong", (
            f"{rep['records']} records of {rep['expected']}: {rep['missing']} ids missing, "
            f"{rep['repeated']} repeated, {rep['foreign']} not in the output (stop {rep['stop']})"
        )
    if rc != 0:
        return "other", f"exit code {rc} after a good report: {stderr_tail[-300:]}"
    return "ok", ""


def write_output(root: Path, records: int, parts: int) -> Path:
    """The Parquet output (the transform in-process), written on first use."""
    out = root / "ours"
    if (out / "_SUCCESS").exists():
        return out
    import shutil

    from readerbench import data

    shutil.rmtree(root, ignore_errors=True)
    sys.path.insert(0, str(REPO_ROOT / "tests"))
    from tdp_testutil import run_op, write_jsonl

    per = -(-records // parts)
    for k in range(parts):
        ids = range(k * per, min(records, (k + 1) * per))
        write_jsonl(root / "input" / f"ids-{k:03d}.jsonl", [{"id": i} for i in ids])
    t0 = time.perf_counter()
    run_op("transform", str(root / "input"), out, "--output_format", "parquet", "--num_workers", "2",
           fn=data.token_record)  # fmt: skip
    print(
        f"# wrote {records} records in {parts} Parquet parts in {time.perf_counter() - t0:.1f} s", flush=True
    )
    return out


def stop_at(index: int, batches: int) -> int:
    """The batch after which loop ``index`` takes the state: spread over the epoch, never 0 or the end."""
    return 1 + (index * 7) % max(1, batches - 1)


def run_loop(a: argparse.Namespace, out: Path, row: Row, index: int) -> Loop:
    batches = -(-a.records // a.batch_size)
    stop = stop_at(index, batches)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(out), "--stop", str(stop)]
    cmd += ["--seed", str(index), "--records", str(a.records), "--batch-size", str(a.batch_size)]
    cmd += ["--num-workers", str(a.num_workers), "--shuffle-window", str(a.shuffle_window)]
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if row.env is not None:
        env["ARROW_DEFAULT_MEMORY_POOL"] = row.env
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    m = run_measured(cmd, cwd=REPO_ROOT, env=env, timeout=a.timeout)
    rep = m.last_json()
    verdict, detail = classify(m.returncode, m.timed_out, rep, m.tail())
    read_s = rep.get("seconds") if rep else None
    loop = Loop(row.name, index, verdict, m.wall_s, read_s, list(rep.get("pools", [])) if rep else [], detail)
    if verdict != "ok":
        log = a.workdir / "stress-logs" / f"{row.name}-{index:04d}.stderr"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(m.stderr)
        loop.detail += f" [stderr: {log}]"
        print(f"# loop {index} {row.name}: {verdict.upper()}: {loop.detail}", flush=True)
    return loop


def _median(xs: Sequence[Optional[float]]) -> str:
    vals = [x for x in xs if x is not None]
    return f"{statistics.median(vals):.2f}" if vals else "-"


def print_table(rows: Sequence[Row]) -> None:
    print(
        "\n| ARROW_DEFAULT_MEMORY_POOL | allocator in the workers | loops | crashes | wrong results"
        " | other failures | s/loop (process) | s/loop (the two loaders) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        env = "unset (the reader's default)" if r.env is None else f"`{r.env}` (forced)"
        print(
            f"| {env} | {r.pools} | {len(r.loops)} | {r.count('crash')} | {r.count('wrong')} | "
            f"{r.count('other')} | {_median([lp.wall_s for lp in r.loops])} | "
            f"{_median([lp.read_s for lp in r.loops])} |"
        )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="Stress loop of resumed Parquet epochs in forked DataLoader workers."
    )
    ap.add_argument("--loops", type=int, default=100, help="loops with the reader's default allocator")
    ap.add_argument("--references", default="jemalloc", help=f"pools forced for reference rows ({POOLS})")
    ap.add_argument("--reference-loops", type=int, default=100, help="loops per reference pool (0: none)")
    ap.add_argument("--records", type=int, default=6000, help="records of the output")
    ap.add_argument("--parts", type=int, default=6, help="Parquet parts (input files)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--num-workers", type=int, default=2)
    ap.add_argument("--shuffle-window", type=int, default=1024, help="small: many read-ahead segments")
    ap.add_argument("--timeout", type=float, default=180, help="seconds per loop before it is killed")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "tdp-bench")
    ap.add_argument("--json", type=Path, help="save the results here")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # run one loop over this output
    ap.add_argument("--stop", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--crash-at-exit", action="store_true", help=argparse.SUPPRESS)  # tests: workers SIGSEGV
    a = ap.parse_args(argv)
    refs = [p.strip() for p in a.references.split(",") if p.strip()]
    bad = sorted(set(refs) - set(POOLS))
    if bad:
        ap.error(f"unknown --references {bad}; choose from {','.join(POOLS)}")
    a.references = refs if a.reference_loops > 0 else []
    return a


def main(argv: Sequence[str] | None = None) -> list[Row]:
    a = parse_args(argv)
    if a.child is not None:
        _child_main(a)
        return []
    started = datetime.datetime.now(datetime.timezone.utc)
    load0 = os.getloadavg()
    out = write_output(a.workdir / "stress-data" / f"tokens-n{a.records}-p{a.parts}", a.records, a.parts)
    rows = [Row("default", None)] + [Row(p, p) for p in a.references]
    wanted = {"default": a.loops, **{p: a.reference_loops for p in a.references}}
    print(
        f"# {started:%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs, load average {load0[0]:.2f} {load0[1]:.2f}"
        f" {load0[2]:.2f}; {a.records} records, {a.parts} parts, batch {a.batch_size},"
        f" num_workers {a.num_workers} (fork)",
        flush=True,
    )
    t0 = time.perf_counter()
    for i in range(max(wanted.values(), default=0)):
        for row in rows:
            if i < wanted[row.name]:
                row.loops.append(run_loop(a, out, row, i))
        if (i + 1) % 10 == 0:
            done = " ".join(f"{r.name} {len(r.loops)}: {r.count('crash')} crashes" for r in rows)
            print(f"# {i + 1} loops, {time.perf_counter() - t0:.0f} s: {done}", flush=True)
    load1 = os.getloadavg()
    print_table(rows)
    print(
        f"\n{time.perf_counter() - t0:.0f} s in all; load average at the end {load1[0]:.2f} {load1[1]:.2f}"
        f" {load1[2]:.2f}"
    )
    for r in rows:
        for lp in r.loops:
            if lp.verdict != "ok":
                print(f"failed: {r.name} loop {lp.index}: {lp.verdict}: {lp.detail}")
    if a.json:
        write_json(
            a.json,
            {
                "started": started.isoformat(),
                "load_before": load0,
                "load_after": load1,
                "args": {k: v for k, v in vars(a).items() if k not in CHILD_ONLY},
                "rows": [
                    {
                        "name": r.name,
                        "env": r.env,
                        "pools": r.pools,
                        "loops": len(r.loops),
                        "crashes": r.count("crash"),
                        "wrong": r.count("wrong"),
                        "other": r.count("other"),
                        "loop_details": [asdict(lp) for lp in r.loops],
                    }
                    for r in rows
                ],
            },
        )
    return rows


if __name__ == "__main__":
    main()
