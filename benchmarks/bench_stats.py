"""Benchmark: dataset statistics over JSONL, ours versus pandas and plain Python loops.

usage (from the repo root)::

    .venv/bin/python benchmarks/bench_stats.py --quick          # 200k records only
    .venv/bin/python benchmarks/bench_stats.py                  # + 2M records (steady state)
    .venv/bin/python benchmarks/bench_stats.py --data DIR       # DIR/*.jsonl (+ DIR repeated)
    .venv/bin/python benchmarks/bench_stats.py --typed-csv      # 2M-row typed CSV vs pandas.read_csv
    .venv/bin/python benchmarks/bench_stats.py --typed-csv --typed-rows 50000   # a quick check

Every method runs as a whole subprocess on the same files (wall time includes interpreter
start-up and imports; peak RSS is the summed RSS of the process tree, see ``_common.py``):

- ``plain``: one process, one pass, ``orjson.loads`` per line; per field the count, and for
  numbers mean/min/max, for strings an exact distinct set. Much less than ours computes.
- ``pool2``: the same loop in ``multiprocessing.Pool(2)``, one task per file, merged at the end
  (the reference of the issue's steady-state target).
- ``pandas``: ``read_json(lines=True)`` per file + ``concat``, then ``describe()``,
  ``quantile([...])``, ``nunique()`` and ``value_counts().head(20)`` per string column.
- ``ddp-job``: a trivial ``torchx run -s local_cwd dist.ddp -j 1x2`` job (barrier only): the
  fixed cost of launching anything with torchx.
- ``ours-1x2``: ``torchx run -s local_cwd torchx_datapipes.components:stats ... -j 1x2
  --overwrite True`` (moments, KLL quantiles + histograms, HLL distinct, frequent items, the
  HTML report); succeeds only if torchx exits 0, ``_SUCCESS`` exists and it described N records.
- ``ours-1x1w2``: the same with ``-j 1x1 --num_workers 2``.

``--typed-csv`` runs ``ddp-job`` (the launch floor: wall and peak RSS of a job that does nothing),
``pandas-csv`` (``pandas.read_csv`` defaults + ``describe()`` and the same extras, see
``_typed_csv.py``), ``ours-1x2`` and ``ours-1x1w2`` on one generated CSV corpus of
``--typed-rows`` rows (mixed int/float/NA/year/bool/date/string columns, ``--k`` files); the note of
our rows says whether the CSV reader typed the numeric columns.

Steady state (unless ``--quick``): ``(N2 - N1) / (T2 - T1)`` between the 200k and 2M corpora,
which cancels the fixed start-up cost; ratios are against ``pool2`` and ``pandas``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Sequence
from multiprocessing import Pool
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    REPO_ROOT,
    BenchRow,
    Corpus,
    Measurement,
    bench_parser,
    best_of,
    input_files,
    measure_ddp_job,
    parse_bench_args,
    print_table,
    rss_source,
    run_measured,
    select_corpora,
    torchx_cmd,
    torchx_log_tail,
    write_json,
)
from _typed_csv import csv_files, ensure_typed_csv, pandas_profile, ref_pandas_csv, typed_note  # noqa: E402

METHODS = ("plain", "pool2", "pandas", "ddp-job", "ours-1x2", "ours-1x1w2")
TYPED_METHODS = ("ddp-job", "pandas-csv", "ours-1x2", "ours-1x1w2")
COMPONENT = "torchx_datapipes.components:stats"

# ---------------------------------------------------------------------------------------------
# Reference implementations, run in a child interpreter: `bench_stats.py _ref METHOD --input D`.
# Each prints one JSON line {"records_in": n, ...} last.
# ---------------------------------------------------------------------------------------------
FieldAcc = list[Any]  # [count, n_numeric, sum, min, max, set of strings]


def loop_file(path: str) -> tuple[int, dict[str, FieldAcc]]:
    """One pass over ``path``: per field count; numbers sum/min/max; strings a distinct set."""
    import orjson

    acc: dict[str, FieldAcc] = {}
    n = 0
    with open(path, "rb") as f:
        for line in f:
            if not line.strip():
                continue
            n += 1
            for k, v in orjson.loads(line).items():
                a = acc.get(k)
                if a is None:
                    a = acc[k] = [0, 0, 0.0, math.inf, -math.inf, set()]
                if v is None:
                    continue
                a[0] += 1
                t = type(v)
                if t is int or t is float:
                    a[1] += 1
                    a[2] += v
                    if v < a[3]:
                        a[3] = v
                    if v > a[4]:
                        a[4] = v
                elif t is str:
                    a[5].add(v)
    return n, acc


def _merge(parts: Sequence[tuple[int, dict[str, FieldAcc]]]) -> dict[str, Any]:
    total = 0
    acc: dict[str, FieldAcc] = {}
    for n, part in parts:
        total += n
        for k, b in part.items():
            a = acc.setdefault(k, [0, 0, 0.0, math.inf, -math.inf, set()])
            a[0] += b[0]
            a[1] += b[1]
            a[2] += b[2]
            a[3], a[4] = min(a[3], b[3]), max(a[4], b[4])
            a[5] |= b[5]
    fields = {
        k: {
            "count": a[0],
            "mean": a[2] / a[1] if a[1] else None,
            "min": a[3] if a[1] else None,
            "max": a[4] if a[1] else None,
            "distinct": len(a[5]),
        }
        for k, a in acc.items()
    }
    return {"records_in": total, "fields": fields}


def _ref_plain(files: list[str]) -> dict[str, Any]:
    return _merge([loop_file(f) for f in files])


def _ref_pool2(files: list[str]) -> dict[str, Any]:
    with Pool(2) as pool:
        return _merge(pool.map(loop_file, files, chunksize=1))


def _ref_pandas(files: list[str]) -> dict[str, Any]:
    import pandas as pd

    return pandas_profile(pd.concat([pd.read_json(f, lines=True) for f in files], ignore_index=True))


def _ref_main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="bench_stats.py _ref")
    ap.add_argument("method", choices=("plain", "pool2", "pandas", "pandas-csv"))
    ap.add_argument("--input", required=True)
    a = ap.parse_args(argv)
    files = csv_files(a.input) if a.method == "pandas-csv" else input_files(a.input)
    t0 = time.perf_counter()
    refs = {"plain": _ref_plain, "pool2": _ref_pool2, "pandas": _ref_pandas, "pandas-csv": ref_pandas_csv}
    out = refs[a.method](files)
    out["compute_s"] = round(time.perf_counter() - t0, 3)
    print(json.dumps(out, default=str))
    return 0


# ---------------------------------------------------------------------------------------------
# Harness
# ---------------------------------------------------------------------------------------------


def _ours_args(method: str) -> list[str]:
    return {"ours-1x2": ["-j", "1x2"], "ours-1x1w2": ["-j", "1x1", "--num_workers", "2"]}[method]


def _report_failure(what: str, m: Measurement, why: str) -> None:
    print(f"\n!! {what} FAILED ({why}), rc={m.returncode}, {m.wall_s:.1f}s", file=sys.stderr)
    print(f"   cmd: {' '.join(m.cmd)}", file=sys.stderr)
    for line in m.tail().splitlines():
        print(f"   | {line}", file=sys.stderr)
    for line in torchx_log_tail(m).splitlines():
        print(f"   > {line}", file=sys.stderr)
    sys.stderr.flush()


def _ours_counts(out: Path) -> Optional[dict[str, Any]]:
    if not (out / "_SUCCESS").exists() or not (out / "stats.json").exists():
        return None
    manifest = json.loads((out / "_SUCCESS").read_text())
    doc = json.loads((out / "stats.json").read_text())
    return {
        "records_in": manifest.get("records_in"),
        "records_out": doc.get("records"),
        "job_s": manifest.get("wall_time_s"),  # inside the ranks: excludes the torchx/torchrun launch
        "typed": typed_note(doc),
    }


def run_method(a: argparse.Namespace, method: str, corpus: Corpus) -> BenchRow:
    out = a.workdir / "out" / f"{method}-{corpus.records}"
    if method.startswith("ours"):
        pattern = "*.csv" if a.typed_csv else "*.jsonl"
        cmd = [*torchx_cmd(), "run", "-s", "local_cwd", COMPONENT, "--input", f"{corpus.path}/{pattern}"]
        cmd += ["--output", str(out), *_ours_args(method), "--overwrite", "True"]
    else:
        cmd = [sys.executable, __file__, "_ref", method, "--input", str(corpus.path)]

    def once() -> Measurement:
        shutil.rmtree(out, ignore_errors=True)
        return run_measured(cmd, cwd=REPO_ROOT, timeout=a.timeout)

    m = best_of(a.repeat, once)
    row = BenchRow(method, "stats", corpus.records, m.wall_s, m.peak_rss_mb, extra={"cmd": m.cmd})
    counts = _ours_counts(out) if method.startswith("ours") else m.last_json()
    if not m.ok:
        row.ok, row.note = False, "timed out" if m.timed_out else f"rc={m.returncode}"
        _report_failure(f"{method}/{corpus.records}", m, row.note)
    elif counts is None:
        row.ok, row.note = False, "no _SUCCESS" if method.startswith("ours") else "no output"
        _report_failure(f"{method}/{corpus.records}", m, row.note)
    else:
        n_in = counts.get("records_in")
        row.records_out = counts.get("records_out", n_in)
        if n_in != corpus.records or row.records_out != corpus.records:
            row.ok, row.note = False, f"records_in={n_in} described={row.records_out}"
        for key in ("compute_s", "job_s"):  # the time spent on the data, without start-up
            if counts.get(key) is not None:
                row.extra[key] = counts[key]
                row.note = (row.note + f" {key}={counts[key]:.2f}").strip()
        if a.typed_csv and counts.get("typed"):
            row.note = (row.note + f" {counts['typed']}").strip()
    if not a.keep_output:
        shutil.rmtree(out, ignore_errors=True)
    return row


def steady_rates(small: list[BenchRow], big: list[BenchRow]) -> dict[str, float]:
    by = {r.method: r for r in small}
    rates: dict[str, float] = {}
    for b in big:
        s = by.get(b.method)
        if s is None or not (s.ok and b.ok) or s.wall_s is None or b.wall_s is None:
            continue
        dt = b.wall_s - s.wall_s
        rates[b.method] = (b.records - s.records) / dt if dt > 0 else math.inf
    return rates


def _ratio(a: Optional[float], b: Optional[float]) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def print_comparison(
    per_size: list[list[BenchRow]], steady: dict[str, float], n: Sequence[int], pandas: str = "pandas"
) -> None:
    if steady:
        print(f"\nSteady state: records/s after start-up = (N2 - N1) / (T2 - T1), N1={n[0]}, N2={n[1]}")
        print(f"{'method':<12} {'steady rec/s':>13} {'vs pool2':>9} {'vs pandas':>10}")
        for method, rate in steady.items():
            vp, vd = _ratio(rate, steady.get("pool2")), _ratio(rate, steady.get("pandas"))
            print(f"{method:<12} {rate:>13,.0f} {vp:>9} {vd:>10}")
    print("\nEnd to end (wall-time ratio of the reference to ours, >1 = ours faster; RSS ours/ref)")
    print(f"{'method':<12} {'records':>9} {'vs pool2':>9} {'vs pandas':>10} {'RSS/pandas':>11}")
    for rows in per_size:
        by = {r.method: r for r in rows}
        for r in rows:
            if not r.method.startswith("ours") or not r.ok or not r.wall_s:
                continue
            p, d = by.get("pool2"), by.get(pandas)
            vp = _ratio(p.wall_s, r.wall_s) if p and p.ok else "-"
            vd = _ratio(d.wall_s, r.wall_s) if d and d.ok else "-"
            rss = _ratio(r.peak_rss_mb, d.peak_rss_mb) if d and d.ok else "-"
            print(f"{r.method:<12} {r.records:>9} {vp:>9} {vd:>10} {rss:>11}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    typed = "--typed-csv" in (sys.argv[1:] if argv is None else argv)
    methods = TYPED_METHODS if typed else METHODS
    ap = bench_parser("Benchmark stats: ours vs pandas, a plain loop and Pool(2).", methods)
    ap.add_argument("--typed-csv", action="store_true", help="a typed CSV corpus vs pandas.read_csv")
    ap.add_argument("--typed-rows", type=int, default=2_000_000, help="rows of the --typed-csv corpus")
    return parse_bench_args(ap, argv, methods)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "_ref":
        return _ref_main(argv[1:])
    a = parse_args(argv)
    a.workdir.mkdir(parents=True, exist_ok=True)
    os.chdir(REPO_ROOT)
    if a.typed_csv:
        cs = [Corpus(ensure_typed_csv(a.typed_rows, a.k, a.seed, a.workdir / "data"), a.typed_rows)]
    else:
        cs = select_corpora(a.data, a.n, a.k, a.seed, a.steady_n, a.quick, a.workdir / "data")
    print(f"# corpora: {', '.join(f'{c.path} ({c.records} records)' for c in cs)}")
    print(f"# cpus={os.cpu_count()} python={sys.version.split()[0]} peak RSS={rss_source()}", flush=True)
    rows: list[BenchRow] = []
    if "ddp-job" in a.methods:
        m = best_of(a.repeat, lambda: measure_ddp_job("1x2", workdir=a.workdir))
        rows.append(BenchRow("ddp-job-1x2", "-", 0, m.wall_s, m.peak_rss_mb, ok=m.ok))
        print(f"# ddp-job -j 1x2: {m.wall_s:.2f}s {'ok' if m.ok else 'FAILED'}", flush=True)
    per_size: list[list[BenchRow]] = []
    for c in cs:
        size_rows = []
        for method in a.methods:
            if method == "ddp-job":
                continue
            r = run_method(a, method, c)
            rate = f"{r.records_per_s:,.0f} rec/s" if r.records_per_s else "FAILED"
            rss = f"{r.peak_rss_mb:,.0f} MB" if r.peak_rss_mb else "-"
            print(f"# {method:<11} {c.records:>8}: {r.wall_s or 0:6.2f}s {rate} peak {rss}", flush=True)
            size_rows.append(r)
        per_size.append(size_rows)
    all_rows = rows + [r for s in per_size for r in s]
    print_table(all_rows, title=f"Results (peak RSS: {rss_source()})")
    steady = steady_rates(per_size[0], per_size[1]) if len(per_size) > 1 else {}
    print_comparison(per_size, steady, [c.records for c in cs], "pandas-csv" if a.typed_csv else "pandas")
    if a.json:
        meta = {"corpora": [str(c.path) for c in cs], "cpus": os.cpu_count(), "rss": rss_source()}
        write_json(a.json, {"meta": meta, "rows": all_rows, "steady": steady})
        print(f"\n# results saved to {a.json}")
    return 1 if any(not r.ok for r in all_rows) else 0


if __name__ == "__main__":
    sys.exit(main())
