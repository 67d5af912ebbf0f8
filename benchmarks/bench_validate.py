"""Benchmark: ``validate`` against ``stats`` alone, and against TFDV or evidently, in one run.

usage (from the repo root)::

    .venv/bin/python benchmarks/bench_validate.py                       # 2M and 8M rows
    .venv/bin/python benchmarks/bench_validate.py --rows 2000000        # one size
    .venv/bin/python benchmarks/bench_validate.py --rows 20000 --json r.json --ref-python none
    .venv/bin/python benchmarks/bench_validate.py --ref-python /tmp/evid/bin/python   # evidently's venv

The reference lives in its own throwaway venv (evidently 0.7 needs ``pandas<3``, which the dev
environment does not have; TFDV pins TensorFlow and Beam)::

    python3 -m venv /tmp/evid && /tmp/evid/bin/pip install evidently "pandas<3"

Per size the same two generated CSV tables (``reference`` and ``current``: 7 penguin-like columns,
``current`` with its bill length and species mix shifted) are used by every method, each
run as a whole subprocess (wall time; peak RSS summed over the process tree):

- ``ddp-job``: a trivial ``torchx run -s local_cwd dist.ddp -j 1x2`` (the launch floor; ``--j``
  sets the ``-j`` of it and of every job).
- ``stats``: ``torchx run ... components:stats`` on ``current``.
- ``validate``: ``torchx run ... components:validate`` on ``current`` with the schema inferred from
  ``reference``'s stats and ``--baseline`` that stats output (``--fail_on never``).
- ``ours-e2e``: ``stats`` on ``reference`` + ``schema infer`` + ``validate``: what the references do.
- ``tfdv``: ``generate_statistics_from_csv`` on both tables, ``infer_schema``, ``validate_statistics``
  (with the reference as the drift baseline), if ``tensorflow_data_validation`` imports in
  ``--ref-python``; else ``evidently``: ``pandas.read_csv`` of both and ``Report([DataDriftPreset()])``.

The check's own cost is ``validate``'s job time (``_SUCCESS`` ``wall_time_s``, launch excluded)
over ``stats``' job time: the issue's target is under +15%. The launch floor is what any torchx job
pays; if it exceeds the reference's whole time at a size, the crossover size (where our per-row
cost plus the floor meets the reference's) is reported instead of a win.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import textwrap
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO_ROOT, BenchRow, measure_ddp_job, print_table, run_measured, torchx_cmd  # noqa: E402

SIZES = (2_000_000, 8_000_000)
_CHUNK = 500_000


def make_table(path: Path, rows: int, seed: int, shift: float) -> None:
    """A penguin-like CSV written in chunks with pyarrow (memory flat in ``rows``)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pacsv

    rng = np.random.default_rng(seed)
    species = np.array(["Adelie", "Chinstrap", "Gentoo"])
    islands = np.array(["Biscoe", "Dream", "Torgersen"])
    with pacsv.CSVWriter(str(path), _schema()) as w:
        for start in range(0, rows, _CHUNK):
            n = min(_CHUNK, rows - start)
            p = np.array([0.45, 0.2, 0.35]) + shift * np.array([-0.2, 0.0, 0.2])
            sex = rng.choice(np.array(["male", "female", ""]), n, p=[0.48, 0.48, 0.04])
            cols = {
                "id": np.arange(start, start + n),
                "species": species[rng.choice(3, n, p=p / p.sum())],
                "island": islands[rng.integers(0, 3, n)],
                "bill_length_mm": np.round(rng.normal(44 + 3 * shift, 5.5, n), 1),
                "body_mass_g": rng.integers(2700, 6300, n),
                "year": rng.integers(2007, 2010, n),
                "sex": sex,
            }
            w.write_table(pa.table({k: pa.array(v) for k, v in cols.items()}, schema=_schema()))


def _schema() -> Any:
    import pyarrow as pa

    return pa.schema([("id", pa.int64()), ("species", pa.string()), ("island", pa.string()),
                      ("bill_length_mm", pa.float64()), ("body_mass_g", pa.int64()), ("year", pa.int64()),
                      ("sex", pa.string())])  # fmt: skip


def job(op: str, inp: Path, out: Path, *extra: str, j: str) -> list[str]:
    return [*torchx_cmd(), "run", "-s", "local_cwd", f"torchx_datapipes.components:{op}", "--input", str(inp),
            "--output", str(out), "-j", j, "--overwrite", "True", *extra]  # fmt: skip


def job_row(name: str, rows: int, cmd: list[str], out: Path, workdir: Path) -> BenchRow:
    env = {"PYTHONPATH": str(REPO_ROOT)}
    m = run_measured(cmd, cwd=workdir, env=env, timeout=3600)
    ok = m.ok and (out / "_SUCCESS").exists()
    row = BenchRow(name, "", rows, m.wall_s, m.peak_rss_mb, ok=ok)
    if ok:
        manifest = json.loads((out / "_SUCCESS").read_text())
        row.extra["job_s"] = manifest["wall_time_s"]
        row.records_out = manifest["records_in"]
        row.note = f"job {manifest['wall_time_s']:.2f}s"
        if (out / "anomalies.json").exists():
            kinds = sorted(
                {f"{a['field']}:{a['kind']}" for a in json.loads((out / "anomalies.json").read_text())}
            )
            row.extra["anomalies"] = kinds
            row.note += f"; {len(kinds)} anomalies"
    else:
        row.note = m.tail(5).replace("\n", " | ")[-300:]
    return row


_EVIDENTLY = textwrap.dedent(
    """
    import json, sys, time
    import pandas as pd
    from evidently import Report
    from evidently.presets import DataDriftPreset
    ref, cur = pd.read_csv(sys.argv[1]), pd.read_csv(sys.argv[2])
    snap = Report([DataDriftPreset()]).run(reference_data=ref, current_data=cur)
    d = snap.dict()
    scores, count = [], None
    for m in d.get("metrics", []):
        v = m.get("value")
        cfg = json.dumps(m.get("config", m.get("metric_id", "")), default=str)
        if isinstance(v, (int, float)) and "ValueDrift" in cfg:
            scores.append((str(m.get("config", {}).get("column") or cfg), float(v)))
        elif isinstance(v, dict) and "DriftedColumnsCount" in cfg:
            count = v
    print(json.dumps({"records_in": len(cur), "drift_scores": scores, "drifted_columns": count,
                      "anomalies": [c for c, v in scores if v >= 0.1]}))
    """
)

_TFDV = textwrap.dedent(
    """
    import json, sys
    import tensorflow_data_validation as tfdv
    ref = tfdv.generate_statistics_from_csv(sys.argv[1])
    cur = tfdv.generate_statistics_from_csv(sys.argv[2])
    schema = tfdv.infer_schema(ref)
    for f in schema.feature:
        if f.type == 2 or f.type == 3:  # INT / FLOAT: a JS drift comparator, as ours
            f.drift_comparator.jensen_shannon_divergence.threshold = 0.01
        else:
            f.drift_comparator.infinity_norm.threshold = 0.1
    anomalies = tfdv.validate_statistics(cur, schema, previous_statistics=ref)
    found = sorted(f"{k}:{v.short_description}" for k, v in anomalies.anomaly_info.items())
    print(json.dumps({"records_in": int(cur.datasets[0].num_examples), "anomalies": found}))
    """
)


def reference_kind(python: Optional[str]) -> Optional[str]:
    if not python:
        return None
    for kind, module in (("tfdv", "tensorflow_data_validation"), ("evidently", "evidently")):
        m = run_measured([python, "-c", f"import {module}"], timeout=300)
        if m.ok:
            return kind
    return None


def reference_row(kind: str, python: str, ref: Path, cur: Path, rows: int, workdir: Path) -> BenchRow:
    script = workdir / f"ref_{kind}.py"
    script.write_text(_TFDV if kind == "tfdv" else _EVIDENTLY)
    m = run_measured([python, str(script), str(ref), str(cur)], timeout=3600)
    got = m.last_json() if m.ok else None
    row = BenchRow(kind, "", rows, m.wall_s, m.peak_rss_mb, ok=m.ok and got is not None)
    if got is not None:
        row.records_out = got.get("records_in")
        row.extra.update(got)
        row.note = f"{len(got.get('anomalies', []))} findings"
    else:
        row.note = m.tail(5).replace("\n", " | ")[-300:]
    return row


def crossover(ours: BenchRow, floor_s: float, ref: BenchRow) -> Optional[float]:
    """Rows at which ``floor + rows * ours_per_row`` equals ``rows * ref_per_row`` (None: never)."""
    if not (ours.ok and ref.ok and ours.wall_s and ref.wall_s):
        return None
    ours_per_row = max(ours.wall_s - floor_s, 1e-9) / ours.records
    ref_per_row = ref.wall_s / ref.records
    if ref_per_row <= ours_per_row:
        return None
    return floor_s / (ref_per_row - ours_per_row)


def run_size(rows: int, args: argparse.Namespace, kind: Optional[str], floor: BenchRow) -> dict[str, Any]:
    work = Path(args.workdir) / f"rows-{rows}"
    work.mkdir(parents=True, exist_ok=True)
    ref, cur = work / "reference.csv", work / "current.csv"
    for path, seed, shift in ((ref, 1, 0.0), (cur, 2, 0.5)):
        if not path.exists():
            make_table(path, rows, seed, shift)
    base_cmd = job("stats", ref, work / "ref_stats", j=args.j)
    base = job_row("stats(reference)", rows, base_cmd, work / "ref_stats", work)
    infer_cmd = [sys.executable, "-m", "torchx_datapipes.schema", "infer", str(work / "ref_stats")]
    infer = run_measured([*infer_cmd, "-o", str(work / "schema.json")], env={"PYTHONPATH": str(REPO_ROOT)})
    stats = job_row("stats", rows, job("stats", cur, work / "stats", j=args.j), work / "stats", work)
    val_cmd = job("validate", cur, work / "val", "--schema", str(work / "schema.json"), "--baseline",
                  str(work / "ref_stats"), "--fail_on", "never", j=args.j)  # fmt: skip
    val = job_row("validate", rows, val_cmd, work / "val", work)
    e2e = BenchRow("ours-e2e", "", rows, None, None, ok=base.ok and infer.ok and val.ok)
    if e2e.ok:
        assert base.wall_s is not None and val.wall_s is not None
        e2e.wall_s = base.wall_s + infer.wall_s + val.wall_s
        e2e.peak_rss_mb = max(base.peak_rss_mb or 0, infer.peak_rss_mb or 0, val.peak_rss_mb or 0)
        e2e.note = "stats(reference) + infer + validate"
    rows_out = [floor, base, stats, val, e2e]
    refrow = None
    if kind and args.ref_python:
        refrow = reference_row(kind, args.ref_python, ref, cur, rows, work)
        rows_out.append(refrow)
    overhead = None
    if stats.ok and val.ok:
        overhead = val.extra["job_s"] / stats.extra["job_s"] - 1
    result: dict[str, Any] = {
        "rows": rows,
        "check_overhead": overhead,
        "rows_table": [r.__dict__ for r in rows_out],
    }
    if refrow is not None and floor.wall_s is not None:
        result["crossover_rows"] = crossover(e2e, 2 * floor.wall_s, refrow)  # two jobs: two launches
        result["faster_than_reference"] = bool(e2e.ok and refrow.ok and e2e.wall_s < refrow.wall_s)  # type: ignore[operator]
    print_table(rows_out, title=f"{rows:,} rows")
    if overhead is not None:
        print(f"validate adds {100 * overhead:+.1f}% to the stats job's own time (target < +15%)")
    if not args.keep:
        for name in ("reference.csv", "current.csv"):
            (work / name).unlink(missing_ok=True)
    return result


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, action="append", help=f"table size(s); default {SIZES}")
    p.add_argument("--workdir", default=str(REPO_ROOT / "bench-data" / "validate"))
    ref_help = "python of a venv with tensorflow_data_validation or evidently ('none': skip)"
    p.add_argument("--ref-python", default=os.environ.get("BENCH_REF_PYTHON", ""), help=ref_help)
    p.add_argument("--j", default="1x2", help="torchx -j of every job and of the launch floor")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--keep", action="store_true", help="keep the generated CSV tables")
    return p.parse_args(argv)


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    args.ref_python = "" if args.ref_python == "none" else args.ref_python
    kind = reference_kind(args.ref_python)
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    fm = measure_ddp_job(args.j, workdir=Path(args.workdir))
    floor = BenchRow("ddp-job", "", 0, fm.wall_s, fm.peak_rss_mb, ok=fm.ok, note="launch floor")
    results = [run_size(rows, args, kind, floor) for rows in (args.rows or SIZES)]
    payload = {"reference": kind or "none", "launch_floor_s": fm.wall_s, "sizes": results,
               "machine": {"cpus": os.cpu_count(), "load_avg": os.getloadavg()}}  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(payload, indent=2, default=str))
    if not args.keep:
        shutil.rmtree(Path(args.workdir), ignore_errors=True)
    return 0 if all(r["check_overhead"] is not None for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
