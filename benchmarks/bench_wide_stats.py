"""The stats job on wide tables: wall time against the number of columns (issue 32, item 8).

Each size is one JSON Lines file of ``--rows`` records by N columns, the columns cycling through
four kinds (a float, a small-cardinality int, a low-cardinality string and a unique string), so
every kind of chart is drawn. The job runs in-process through the runner's ``main`` (no launch,
one rank); the time is the whole job: reading, accumulating, merging, ``stats.json`` and the
report. An untimed 30-column job runs first (``--no_warmup`` to skip it), so that the first
size does not carry the process's imports. Use ``--profile N`` to print the top of a cProfile
of one size.

Non-goals: no warm-up and no repeats; on a shared machine run twice before trusting a difference
below ~15%. To measure another checkout, put it first on ``PYTHONPATH``.

    python benchmarks/bench_wide_stats.py --columns 30,789,3000,10000 --rows 300
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path


def write_table(path: Path, columns: int, rows: int) -> Path:
    """``rows`` records of ``columns`` fields: float, int (8 values), string (5 values), unique string."""
    with open(path, "w") as f:
        for r in range(rows):
            rec = {}
            for c in range(columns):
                kind = c % 4
                name = f"col_{c:05d}"
                if kind == 0:
                    rec[name] = (r * 7919 + c) % 1000 / 10.0
                elif kind == 1:
                    rec[name] = (r + c) % 8
                elif kind == 2:
                    rec[name] = f"cat_{(r + c) % 5}"
                else:
                    rec[name] = f"id_{c}_{r}"
            f.write(json.dumps(rec) + "\n")
    return path


def run_stats(columns: int, rows: int, workdir: Path, extra: list[str]) -> float:
    """Seconds of one in-process stats job on a fresh ``columns`` x ``rows`` table."""
    from torchx_datapipes.runner.main import main

    workdir.mkdir(parents=True, exist_ok=True)
    src = write_table(workdir / f"wide_{columns}.jsonl", columns, rows)
    out = workdir / f"out_{columns}"
    start = time.perf_counter()
    manifest = main(["stats", "--input", str(src), "--output", str(out), "--progress_s", "0", *extra])
    took = time.perf_counter() - start
    assert manifest is not None and (out / "report.html").exists()
    return took


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--columns", default="30,789,3000,10000", help="comma-separated column counts")
    p.add_argument("--rows", type=int, default=300, help="records per table")
    p.add_argument("--profile", type=int, default=0, help="profile the job of this many columns instead")
    p.add_argument(
        "--no_warmup", action="store_true", help="do not run an untimed 30-column job first (imports)"
    )
    p.add_argument("extra", nargs="*", help="options passed to the stats op (after --)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench_wide_stats_") as tmp:
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            run_stats(args.profile, args.rows, Path(tmp), args.extra)
            prof.disable()
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(40)
            print(buf.getvalue())
            return
        sizes = [int(x) for x in args.columns.split(",")]
        if not args.no_warmup:  # the first job in a process pays torch's, pyarrow's and matplotlib's imports
            run_stats(30, args.rows, Path(tmp) / "warmup", args.extra)
        base = None
        print(f"| columns | rows | stats job s | x the {sizes[0]}-column job |", flush=True)
        print("|---:|---:|---:|---:|", flush=True)
        for n in sizes:
            took = run_stats(n, args.rows, Path(tmp), args.extra)
            base = base or took
            print(f"| {n:,} | {args.rows} | {took:.1f} | {took / base:.1f} |", flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
