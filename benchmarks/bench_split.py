"""Benchmark: an 80/10/10 hash split of JSONL, ours versus the obvious alternatives.

usage (from the repo root)::

    .venv/bin/python benchmarks/bench_split.py --quick        # 200k records only
    .venv/bin/python benchmarks/bench_split.py                # + 2M records (steady state)
    .venv/bin/python benchmarks/bench_split.py --data DIR     # your *.jsonl (2M = DIR repeated)

Each method runs as a whole subprocess (wall time includes interpreter start-up and imports) on
the same input files, keyed by ``id``:

- ``pool2``: a hand-written streaming hash split with ``multiprocessing.Pool(2)``, one task per
  input file: orjson-parse each line, ``xxh3_64(orjson(rec["id"]), seed)``, compare the top 53
  bits with the 0.8/0.9 boundaries and append the *raw line* to that file's train/val/test file.
- ``hf``: HF ``datasets`` ``load_dataset("json")`` + ``train_test_split(test_size=0.2)`` + a
  second ``train_test_split(test_size=0.5)`` of the 20% (it is 2-way only) + ``to_json`` x 3.
  It is a seeded random permutation, not a hash split (no stability under appends).
- ``ddp-job``: a trivial ``torchx run -s local_cwd dist.ddp -j 1x2`` (the fixed cost of launching).
- ``ours-1x2``: ``torchx run -s local_cwd torchx_datapipes.components:split ... -j 1x2
  --overwrite True``; counts come from ``<out>/_SUCCESS``.

Unless ``--quick``, everything also runs on ``--steady-n`` (2M) records and the steady-state rate
``(N2 - N1) / (T2 - T1)`` cancels start-up. Peak RSS: see ``benchmarks/_common.py``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    REPO_ROOT,
    BenchRow,
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

METHODS = ("pool2", "hf", "ours-1x2")
FRACTIONS = "train=0.8,val=0.1,test=0.1"
SEED = 0
FLUSH = 8192

# --------------------------------------------------------------------------------------------
# Reference implementations, run in a child interpreter: `bench_split.py _ref METHOD ...`.
# --------------------------------------------------------------------------------------------


def split_file(src: str, out: str) -> list[int]:
    """Hash-split one file into ``out/{train,val,test}/<name>``; records per split."""
    import orjson
    import xxhash

    names = ("train", "val", "test")
    cuts = (int(0.8 * 2**53), int(0.9 * 2**53))
    base = os.path.basename(src)
    fhs = []
    for n in names:
        os.makedirs(os.path.join(out, n), exist_ok=True)
        fhs.append(open(os.path.join(out, n, base), "wb"))
    bufs: list[list[bytes]] = [[], [], []]
    counts = [0, 0, 0]
    loads, dumps, h = orjson.loads, orjson.dumps, xxhash.xxh3_64_intdigest
    with open(src, "rb") as fin:
        for line in fin:
            if not line.strip():
                continue
            u = h(dumps(loads(line)["id"]), SEED) >> 11
            s = 0 if u < cuts[0] else 1 if u < cuts[1] else 2
            bufs[s].append(line if line.endswith(b"\n") else line + b"\n")
            if len(bufs[s]) >= FLUSH:
                fhs[s].write(b"".join(bufs[s]))
                counts[s] += len(bufs[s])
                bufs[s].clear()
    for s, fh in enumerate(fhs):
        fh.write(b"".join(bufs[s]))
        counts[s] += len(bufs[s])
        fh.close()
    return counts


def _ref_pool2(files: list[str], out: Path) -> dict[str, Any]:
    from multiprocessing import Pool

    with Pool(2) as pool:
        per_file = pool.starmap(split_file, [(f, str(out)) for f in files])
    counts = [sum(c[i] for c in per_file) for i in range(3)]
    return {"records_in": sum(counts), "records_out": sum(counts), "splits": counts}


def _ref_hf(files: list[str], out: Path) -> dict[str, Any]:
    from datasets import load_dataset

    ds = load_dataset("json", data_files=files, split="train", cache_dir=str(out / ".hf_cache"))
    first = ds.train_test_split(test_size=0.2, seed=SEED)
    rest = first["test"].train_test_split(test_size=0.5, seed=SEED)
    parts = {"train": first["train"], "val": rest["train"], "test": rest["test"]}
    for name, part in parts.items():
        part.to_json(str(out / f"{name}.jsonl"), lines=True)
    counts = [len(p) for p in parts.values()]
    return {"records_in": len(ds), "records_out": sum(counts), "splits": counts}


_REFS = {"pool2": _ref_pool2, "hf": _ref_hf}


def _ref_main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="bench_split.py _ref")
    ap.add_argument("method", choices=sorted(_REFS))
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    a = ap.parse_args(argv)
    out = Path(a.output)
    out.mkdir(parents=True, exist_ok=True)
    print(json.dumps(_REFS[a.method](input_files(a.input), out)))
    return 0


# --------------------------------------------------------------------------------------------
# The harness.
# --------------------------------------------------------------------------------------------


def _report_failure(what: str, m: Measurement) -> None:
    print(f"\n!! {what} FAILED rc={m.returncode} after {m.wall_s:.1f}s: {' '.join(m.cmd)}", file=sys.stderr)
    for line in (m.tail() + "\n" + torchx_log_tail(m)).splitlines():
        print(f"   | {line}", file=sys.stderr)


def run_method(a: argparse.Namespace, method: str, corpus: Path, n: int) -> BenchRow:
    out = a.workdir / "out" / f"{method}-{n}"
    if method == "ours-1x2":
        cmd = [*torchx_cmd(), "run", "-s", "local_cwd", "torchx_datapipes.components:split"]
        cmd += ["--input", f"{corpus}/*.jsonl", "--output", str(out), "--fractions", FRACTIONS]
        cmd += ["--key", "id", "--seed", str(SEED), "-j", "1x2", "--overwrite", "True"]
    else:
        cmd = [sys.executable, __file__, "_ref", method, "--input", str(corpus), "--output", str(out)]
    env = {"HF_DATASETS_DISABLE_PROGRESS_BARS": "1", "HF_HUB_OFFLINE": "1"}

    def once() -> Measurement:
        shutil.rmtree(out, ignore_errors=True)
        return run_measured(cmd, cwd=REPO_ROOT, env=env, timeout=a.timeout)

    m = best_of(a.repeat, once)
    row = BenchRow(method, "80/10/10", n, m.wall_s, m.peak_rss_mb, ok=m.ok)
    counts: Optional[dict[str, Any]] = None
    if method == "ours-1x2" and (out / "_SUCCESS").exists():
        man = json.loads((out / "_SUCCESS").read_text())
        counts = {"records_out": man["records_out"], "splits": list(man["splits"].values())}
    elif method != "ours-1x2":
        counts = m.last_json()
    if not m.ok or counts is None:
        row.ok, row.note = False, "timed out" if m.timed_out else f"rc={m.returncode}"
        _report_failure(f"{method}/{n}", m)
    else:
        row.records_out = counts["records_out"]
        row.note = "/".join(map(str, counts["splits"])) + ("" if row.records_out == n else " records_out!")
    if not a.keep_output:
        shutil.rmtree(out, ignore_errors=True)
    return row


def _ratio(a: Optional[float], b: Optional[float]) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def _steady(small: list[BenchRow], big: list[BenchRow]) -> dict[str, float]:
    by = {r.method: r for r in small}
    out = {}
    for b in big:
        s = by.get(b.method)
        if s and s.ok and b.ok and s.wall_s and b.wall_s and b.wall_s > s.wall_s:
            out[b.method] = (b.records - s.records) / (b.wall_s - s.wall_s)
    return out


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = bench_parser("Benchmark an 80/10/10 hash split: ours vs Pool(2) vs HF.", METHODS)
    return parse_bench_args(ap, argv, METHODS)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "_ref":
        return _ref_main(argv[1:])
    a = parse_args(argv)
    a.workdir.mkdir(parents=True, exist_ok=True)
    os.chdir(REPO_ROOT)
    found = select_corpora(a.data, a.n, a.k, a.seed, a.steady_n, a.quick, a.workdir / "data")
    corpora = [(c.path, c.records) for c in found]
    methods = list(a.methods)
    if "hf" in methods and importlib.util.find_spec("datasets") is None:
        print("# hf: datasets not installed (pip install 'torchx-datapipes[bench]')")
        methods.remove("hf")
    print(f"# cpus={os.cpu_count()} python={sys.version.split()[0]} peak RSS={rss_source()}")
    rows: list[BenchRow] = []
    if "ours-1x2" in methods:
        m = measure_ddp_job("1x2", workdir=a.workdir)
        rows.append(BenchRow("ddp-job-1x2", "-", 0, m.wall_s, m.peak_rss_mb, ok=m.ok))
    per_size: list[list[BenchRow]] = []
    for path, n in corpora:
        per_size.append([])
        for method in methods:
            r = run_method(a, method, path, n)
            print(f"# {method:<9} {n:>8}: {r.wall_s or 0:6.2f}s {r.note}", flush=True)
            per_size[-1].append(r)
            rows.append(r)
    print_table(rows, title=f"Results (peak RSS: {rss_source()}; note = train/val/test counts)")
    steady = _steady(per_size[0], per_size[1]) if len(per_size) > 1 else {}
    if steady:
        print(f"\nSteady state = (N2 - N1) / (T2 - T1), N1={corpora[0][1]}, N2={corpora[1][1]}")
        for meth, rate in steady.items():
            print(f"{meth:<10} {rate:>12,.0f} rec/s")
    if "ours-1x2" in methods:
        print("\nours-1x2 vs           end-to-end speed ratio (>1 = ours faster)")
        for rs in per_size:
            by = {r.method: r for r in rs}
            o = by["ours-1x2"]
            p, h = by.get("pool2"), by.get("hf")
            print(
                f"  {o.records:>9} records: vs pool2 {_ratio(p.wall_s if p else None, o.wall_s)},"
                f" vs hf {_ratio(h.wall_s if h else None, o.wall_s)}"
            )
        if steady:
            o_rate = steady.get("ours-1x2")
            print(
                f"  steady state: vs pool2 {_ratio(o_rate, steady.get('pool2'))},"
                f" vs hf {_ratio(o_rate, steady.get('hf'))}"
            )
    if a.json:
        write_json(a.json, {"rows": rows, "steady": steady, "cpus": os.cpu_count(), "rss": rss_source()})
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
