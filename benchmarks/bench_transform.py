"""Benchmark: a record transform over JSONL, ours versus the obvious alternatives.

usage (from the repo root)::

    .venv/bin/python benchmarks/bench_transform.py --quick          # 200k records only
    .venv/bin/python benchmarks/bench_transform.py                  # + 2M records (steady state)
    .venv/bin/python benchmarks/bench_transform.py --data /work/shared/bench/data --only light
    .venv/bin/python benchmarks/bench_transform.py --skew [bench_skew options]   # see bench_skew.py

Each method runs as a whole subprocess (wall time includes interpreter start-up and imports)
on the same input files, once per transform (``light`` ~1 us/record, ``heavy`` ~70 us/record
of pure Python, from ``examples/transforms.py``):

- ``plain``: one process, orjson read -> fn -> orjson write, file by file.
- ``pool2``: ``multiprocessing.Pool(2)``, one task per input file, each worker reads its file
  and writes its own output file (the reference the issue compares against).
- ``ddp-job``: a trivial ``torchx run -s local_cwd dist.ddp -j 1x2`` job that only does
  ``init_process_group("gloo")`` + ``barrier()``: the fixed cost of launching anything with
  torchx (measured once; it does not depend on the data).
- ``ours-1x2``: ``torchx run -s local_cwd torchx_datapipes.components:transform ... -j 1x2``;
  succeeds only if torchx exits 0 and ``<out>/_SUCCESS`` exists.
- ``ours-1x1w2``: the same with ``-j 1x1 --num_workers 2``.
- ``hf``: HF ``datasets`` ``load_dataset("json")`` + ``.map(fn, num_proc=2)`` + ``.to_json``.
- ``ray``: Ray Data ``read_json`` + ``map`` + ``write_json`` on a 2-CPU local cluster.

Steady state: unless ``--quick``, everything also runs on a corpus of ``--steady-n`` records
(2M), and the rate after start-up is ``(N2 - N1) / (T2 - T1)``, which cancels the fixed
start-up cost. With ``--data DIR`` the large corpus is DIR's files repeated (so both sizes have
the same bytes per record; ids repeat, which the transforms ignore).

Peak RSS is the peak of the summed RSS of the process tree (see ``benchmarks/_common.py``).

Wall times: the fastest of ``--repeat`` runs, and (for ours against the trivial DDP job) also the
difference of the medians. Both torchx jobs run through ``benchmarks/_torchx_fine.py``, the torchx
CLI polling the job's status every 20 ms instead of every second, so a difference of a few tenths
of a second is not rounded to 0 or 1 s.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
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
    load_fn,
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

METHODS = ("plain", "pool2", "ddp-job", "ours-1x2", "ours-1x1w2", "hf", "ray")
TRANSFORMS = ("light", "heavy")
TRANSFORMS_FILE = "examples/transforms.py"
COMPONENT = "torchx_datapipes.components:transform"
BENCH_HINT = "not installed (pip install 'torchx-datapipes[bench]')"
RAY_HINT = "not installed (pip install 'ray[data]'; not part of the bench extra)"
FLUSH_LINES = 8192

# ---------------------------------------------------------------------------------------------
# Reference implementations. They run in a child interpreter: `bench_transform.py _ref METHOD`.
# ---------------------------------------------------------------------------------------------


def transform_file(fn_spec: str, src: str, dst: str) -> tuple[int, int]:
    """orjson-read ``src`` line by line, apply the function, orjson-write ``dst``; (in, out)."""
    import orjson

    fn = load_fn(fn_spec)
    n_in = n_out = 0
    buf: list[bytes] = []
    dumps, opt = orjson.dumps, orjson.OPT_APPEND_NEWLINE
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        for line in fin:
            if not line.strip():
                continue
            n_in += 1
            rec = fn(orjson.loads(line))
            if rec is not None:
                buf.append(dumps(rec, option=opt))
                if len(buf) >= FLUSH_LINES:
                    fout.write(b"".join(buf))
                    n_out += len(buf)
                    buf.clear()
        fout.write(b"".join(buf))
        n_out += len(buf)
    return n_in, n_out


def _ref_plain(fn_spec: str, files: list[str], out: Path) -> tuple[int, int]:
    counts = [transform_file(fn_spec, f, str(out / Path(f).name)) for f in files]
    return sum(c[0] for c in counts), sum(c[1] for c in counts)


def _ref_pool2(fn_spec: str, files: list[str], out: Path) -> tuple[int, int]:
    from multiprocessing import Pool

    with Pool(2) as pool:
        counts = pool.starmap(transform_file, [(fn_spec, f, str(out / Path(f).name)) for f in files])
    return sum(c[0] for c in counts), sum(c[1] for c in counts)


def _ref_hf(fn_spec: str, files: list[str], out: Path) -> tuple[int, int]:
    from datasets import load_dataset

    fn = load_fn(fn_spec)
    ds = load_dataset("json", data_files=files, split="train", cache_dir=str(out / ".hf_cache"))
    n_in = len(ds)
    ds = ds.map(fn, num_proc=2)
    ds.to_json(str(out / "part-00000.jsonl"), lines=True)
    return n_in, len(ds)


def _ref_ray(fn_spec: str, files: list[str], out: Path) -> tuple[int, int]:
    import ray

    fn = load_fn(fn_spec)
    # the function's module was loaded from a file; Ray's workers must get it by value
    ray.cloudpickle.register_pickle_by_value(sys.modules[fn.__module__])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray.data.read_json(files).map(fn).write_json(str(out / "ray"))
    n_out = 0
    for p in Path(out / "ray").glob("*.json*"):
        with open(p, "rb") as f:
            n_out += sum(1 for line in f if line.strip())
    return -1, n_out  # Ray does not report the input count without a second pass


_REFS: dict[str, Callable[[str, list[str], Path], tuple[int, int]]] = {
    "plain": _ref_plain,
    "pool2": _ref_pool2,
    "hf": _ref_hf,
    "ray": _ref_ray,
}


def _ref_main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="bench_transform.py _ref")
    ap.add_argument("method", choices=sorted(_REFS))
    ap.add_argument("--fn", required=True, help="path/to/file.py:function")
    ap.add_argument("--input", required=True, help="directory of *.jsonl files")
    ap.add_argument("--output", required=True, help="output directory (created)")
    a = ap.parse_args(argv)
    out = Path(a.output)
    out.mkdir(parents=True, exist_ok=True)
    n_in, n_out = _REFS[a.method](a.fn, input_files(a.input), out)
    print(json.dumps({"records_in": n_in, "records_out": n_out}))
    return 0


# ---------------------------------------------------------------------------------------------
# The harness.
# ---------------------------------------------------------------------------------------------


def _ours_args(method: str) -> list[str]:
    return {"ours-1x2": ["-j", "1x2"], "ours-1x1w2": ["-j", "1x1", "--num_workers", "2"]}[method]


def _ddp_j(method: str) -> str:
    return "1x1" if method == "ours-1x1w2" else "1x2"


def _success_counts(out: Path) -> Optional[dict[str, Any]]:
    marker = out / "_SUCCESS"
    if not marker.exists():
        return None
    try:
        return json.loads(marker.read_text() or "{}")
    except ValueError:
        return {}


def _report_failure(what: str, m: Measurement, why: str) -> None:
    print(f"\n!! {what} FAILED ({why}), rc={m.returncode}, {m.wall_s:.1f}s", file=sys.stderr)
    print(f"   cmd: {' '.join(m.cmd)}", file=sys.stderr)
    for line in m.tail().splitlines():
        print(f"   | {line}", file=sys.stderr)
    for line in torchx_log_tail(m).splitlines():
        print(f"   > {line}", file=sys.stderr)
    sys.stderr.flush()


class Harness:
    """Runs one method on one corpus with one transform and turns it into a ``BenchRow``."""

    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.ddp: dict[str, BenchRow] = {}

    def run(self, method: str, transform: str, corpus: Corpus) -> BenchRow:
        out = self.workdir / "out" / f"{method}-{transform}-{corpus.records}"
        shutil.rmtree(out, ignore_errors=True)
        fn_spec = f"{TRANSFORMS_FILE}:{transform}"
        if method.startswith("ours"):
            cmd = [*torchx_cmd(), "run", "-s", "local_cwd", self.args.component, "--fn", fn_spec]
            cmd += ["--input", f"{corpus.path}/*.jsonl", "--output", str(out), *_ours_args(method)]
            cmd += ["--overwrite", "True"]
        else:
            cmd = [sys.executable, __file__, "_ref", method, "--fn", fn_spec]
            cmd += ["--input", str(corpus.path), "--output", str(out)]
        env = {"HF_DATASETS_DISABLE_PROGRESS_BARS": "1", "HF_HUB_OFFLINE": "1", "RAY_DEDUP_LOGS": "0"}

        def once() -> Measurement:
            shutil.rmtree(out, ignore_errors=True)
            return run_measured(cmd, cwd=REPO_ROOT, env=env, timeout=self.args.timeout)

        m = best_of(self.args.repeat, once)
        extra = {"cmd": m.cmd, "walls": m.walls, "median_s": m.median_s}
        row = BenchRow(method, transform, corpus.records, m.wall_s, m.peak_rss_mb, extra=extra)
        counts = _success_counts(out) if method.startswith("ours") else m.last_json()
        if not m.ok:
            row.ok, row.note = False, "timed out" if m.timed_out else f"rc={m.returncode}"
            _report_failure(f"{method}/{transform}/{corpus.records}", m, row.note)
        elif counts is None:
            row.ok, row.note = False, "no _SUCCESS" if method.startswith("ours") else "no counts"
            _report_failure(f"{method}/{transform}/{corpus.records}", m, row.note)
        else:
            row.records_out = counts.get("records_out")
            n_in = counts.get("records_in")
            if n_in not in (None, -1, corpus.records):
                row.note = f"records_in={n_in}!"
            if row.records_out is not None and row.records_out != corpus.records:
                row.note += f" records_out={row.records_out}"
        if not self.args.keep_output:
            shutil.rmtree(out, ignore_errors=True)
        return row

    def ddp_job(self, j: str) -> BenchRow:
        """The trivial DDP job for ``-j j``, measured on first use."""
        if j not in self.ddp:
            m = best_of(self.args.repeat, lambda: measure_ddp_job(j, workdir=self.workdir))
            extra = {"walls": m.walls, "median_s": m.median_s}
            row = BenchRow(f"ddp-job-{j}", "-", 0, m.wall_s, m.peak_rss_mb, ok=m.ok, extra=extra)
            if not m.ok:
                row.note = "timed out" if m.timed_out else f"rc={m.returncode}"
                _report_failure(f"ddp-job {j}", m, row.note)
            self.ddp[j] = row
        return self.ddp[j]


def _missing(method: str) -> Optional[str]:
    if method == "hf" and importlib.util.find_spec("datasets") is None:
        return BENCH_HINT
    if method == "ray" and importlib.util.find_spec("ray") is None:
        return RAY_HINT
    return None


def _steady_rows(small: list[BenchRow], big: list[BenchRow]) -> list[dict[str, Any]]:
    by_key = {(r.method, r.transform): r for r in small}
    out = []
    for b in big:
        s = by_key.get((b.method, b.transform))
        if s is None or not (s.ok and b.ok) or s.wall_s is None or b.wall_s is None:
            continue
        dt, dn = b.wall_s - s.wall_s, b.records - s.records
        # T2 <= T1 means noise swamped the difference (e.g. a loaded machine): no estimate.
        rate = dn / dt if dt > 0 else None
        startup = s.wall_s - s.records / rate if rate else None
        out.append({"method": b.method, "transform": b.transform, "rate": rate, "startup_s": startup})
    return out


def _print_steady(steady: list[dict[str, Any]], n1: int, n2: int) -> None:
    print(f"\nSteady state: records/s after start-up = (N2 - N1) / (T2 - T1), N1={n1}, N2={n2}")
    print(f"{'method':<22} {'transform':<9} {'steady rec/s':>13} {'implied start-up s':>19}")
    for s in steady:
        rate = "n/a (T2<=T1)" if s["rate"] is None else f"{s['rate']:,.0f}"
        startup = "-" if s["startup_s"] is None else f"{s['startup_s']:.2f}"
        print(f"{s['method']:<22} {s['transform']:<9} {rate:>13} {startup:>19}")


def _ratio(a: Optional[float], b: Optional[float]) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def _print_comparison(rows: list[BenchRow], ddp: dict[str, BenchRow], steady: list[dict[str, Any]]) -> None:
    """Ours versus the Pool(2) reference and versus the trivial DDP job."""
    ours = [r for r in rows if r.method.startswith("ours")]
    if not ours:
        return
    pool = {(r.transform, r.records): r for r in rows if r.method == "pool2"}
    rates = {(s["method"], s["transform"]): s["rate"] for s in steady}
    print("\nOurs vs pool2 (records/s ratio, >1 = ours faster) and vs the trivial DDP job (same -j)")
    head = f"{'method':<12} {'transform':<9} {'records':>9} {'vs pool2':>9} {'steady vs pool2':>16} "
    head += f"{'ours - ddp s':>13} {'median':>7} {'rec/s w/o launch':>17}"
    print(head)
    for r in ours:
        p = pool.get((r.transform, r.records))
        d = ddp.get(_ddp_j(r.method))
        steady_ratio = _ratio(rates.get((r.method, r.transform)), rates.get(("pool2", r.transform)))
        extra = "-", "-", "-"
        if r.ok and d is not None and d.ok and r.wall_s is not None and d.wall_s is not None:
            net = r.wall_s - d.wall_s  # the fastest runs of each; and the medians of the runs
            median = r.extra.get("median_s", r.wall_s) - d.extra.get("median_s", d.wall_s)
            extra = f"{net:.2f}", f"{median:.2f}", f"{r.records / net:,.0f}" if net > 0 else "-"
        line = f"{r.method:<12} {r.transform:<9} {r.records:>9} "
        line += f"{_ratio(r.records_per_s, p.records_per_s if p else None):>9} {steady_ratio:>16} "
        print(line + f"{extra[0]:>13} {extra[1]:>7} {extra[2]:>17}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = bench_parser("Benchmark a record transform: ours vs plain loop, Pool(2), HF datasets, Ray.", METHODS)
    ap.add_argument("--only", choices=TRANSFORMS, help="run one transform only")
    ap.add_argument("--component", default=COMPONENT, help="torchx component for ours")
    return parse_bench_args(ap, argv, METHODS)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "_ref":
        return _ref_main(argv[1:])
    if "--skew" in argv:  # skewed units, dynamic vs static assignment: benchmarks/bench_skew.py
        import bench_skew

        return bench_skew.main([x for x in argv if x != "--skew"])
    a = parse_args(argv)
    a.workdir.mkdir(parents=True, exist_ok=True)
    os.chdir(REPO_ROOT)  # the --fn path and local_cwd are relative to the repo root
    corpora = select_corpora(a.data, a.n, a.k, a.seed, a.steady_n, a.quick, a.workdir / "data")
    transforms = [a.only] if a.only else list(TRANSFORMS)
    print(f"# corpora: {', '.join(f'{c.path} ({c.records} records)' for c in corpora)}")
    print(f"# cpus={os.cpu_count()} python={sys.version.split()[0]} peak RSS={rss_source()}")

    h = Harness(a, a.workdir)
    runnable = []
    for m in a.methods:
        why = _missing(m)
        if why:
            print(f"# {m}: {why}")
        elif m != "ddp-job":
            runnable.append(m)
    if "ddp-job" in a.methods or any(m.startswith("ours") for m in a.methods):
        for j in sorted({_ddp_j(m) for m in a.methods if m.startswith("ours")} | {"1x2"}):
            r = h.ddp_job(j)
            print(f"# ddp-job -j {j}: {r.wall_s:.2f}s {'ok' if r.ok else 'FAILED'}", flush=True)

    per_size: list[list[BenchRow]] = []
    for c in corpora:
        rows = []
        for t in transforms:
            for m in runnable:
                t0 = time.perf_counter()
                r = h.run(m, t, c)
                rate = f"{r.records_per_s:,.0f} rec/s" if r.records_per_s else "FAILED"
                print(f"# {m:<11} {t:<6} {c.records:>8}: {time.perf_counter() - t0:6.1f}s {rate}", flush=True)
                rows.append(r)
        per_size.append(rows)

    ddp_rows = list(h.ddp.values())
    all_rows = ddp_rows + [r for rows in per_size for r in rows]
    skipped = [BenchRow(m, "-", 0, None, ok=False, skipped=True, note=_missing(m) or "") for m in a.methods]
    print_table([*all_rows, *[s for s in skipped if s.note]], title=f"Results (peak RSS: {rss_source()})")
    steady = _steady_rows(per_size[0], per_size[1]) if len(per_size) > 1 else []
    if steady:
        _print_steady(steady, corpora[0].records, corpora[1].records)
    ddp_by_j = {r.method.removeprefix("ddp-job-"): r for r in ddp_rows}
    _print_comparison(all_rows, ddp_by_j, steady)
    if a.json:
        meta = {"corpora": [c.__dict__ for c in corpora], "cpus": os.cpu_count(), "rss": rss_source()}
        write_json(a.json, {"meta": meta, "rows": all_rows, "steady": steady})
        print(f"\n# results saved to {a.json}")
    failed = [r for r in all_rows if not r.ok]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
