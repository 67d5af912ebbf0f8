"""Benchmark: skewed units, dynamic vs static unit assignment vs the ideal (issue 13).

usage (from the repo root; also ``benchmarks/bench_transform.py --skew ...``)::

    .venv/bin/python benchmarks/bench_skew.py                   # 40 units x 200 records
    .venv/bin/python benchmarks/bench_skew.py --units 8 --records 5 --cost-us 200 --configs 1x2

Workloads (one JSONL file per unit, so one file is one unit; every file has the same number of
records and about the same bytes, so the byte size says nothing about the cost):

- ``skew``: each record carries ``cost_us``, drawn from an exponential distribution with mean
  ``--cost-us`` (records of varying cost); ``--heavy-frac`` (10%) of the units, chosen by
  ``--seed``, cost ``--heavy-x`` (10x) more per record.
- ``uniform``: every record costs exactly ``--cost-us``.

The transform (:mod:`skew_transforms`) burns ``cost_us`` of its own thread's CPU time, so the
total CPU work is known exactly: ``work = sum(cost_us)``. The ideal job time is
``work / min(slots, cpus)`` (slots = ranks x workers; on a machine with fewer cores than slots
the slots share the cores). Each configuration (``-j 1x2``; ``-j 1x2 --num_workers 2``) runs
once per ``--assign`` mode; the table reports the job's own wall time (``wall_time_s`` in the
manifest: rank 0's engine, from start to commit, no launch cost), the whole ``torchx run`` wall
time, and job time / ideal. The parts of every mode must be byte-identical (checked).

Until the component has an ``assign`` parameter only ``static`` exists: the dynamic column is
skipped, and the harness says why.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import random
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO_ROOT, run_measured, torchx_cmd, torchx_log_tail, write_json  # noqa: E402

COMPONENT = "torchx_datapipes.components:transform"
FN = "benchmarks/skew_transforms.py:burn"
CONFIGS = {"1x2": ["-j", "1x2"], "1x2w2": ["-j", "1x2", "--num_workers", "2"]}
MODES = ("static", "dynamic")
WORKLOADS = ("skew", "uniform")


@dataclass
class Workload:
    name: str
    path: Path
    records: int
    work_s: float  # total CPU work of the transform, by construction
    heavy: list[int] = field(default_factory=list)  # indices of the heavy units


def make_workload(name: str, root: Path, a: argparse.Namespace) -> Workload:
    """Write ``--units`` files of ``--records`` records each; deterministic for a seed."""
    rng = random.Random(f"{a.seed}-{name}")
    path = root / f"{name}-u{a.units}-r{a.records}-c{a.cost_us:g}-s{a.seed}"
    n_heavy = max(1, round(a.units * a.heavy_frac)) if name == "skew" else 0
    heavy = sorted(rng.sample(range(a.units), n_heavy))
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    work_us = 0
    for u in range(a.units):
        lines = []
        for i in range(a.records):
            if name == "uniform":
                cost = int(a.cost_us)
            else:
                cost = int(min(rng.expovariate(1 / a.cost_us), 20 * a.cost_us))
                cost *= a.heavy_x if u in heavy else 1
            work_us += cost
            lines.append(json.dumps({"id": u * a.records + i, "unit": u, "cost_us": cost}))
        (path / f"part-{u:05d}.jsonl").write_text("\n".join(lines) + "\n")
    return Workload(name, path, a.units * a.records, work_us / 1e6, heavy)


def has_assign() -> Optional[str]:
    """``None`` when the component takes ``--assign``, else why the dynamic column is skipped."""
    from torchx_datapipes import components

    if "assign" in inspect.signature(components.transform).parameters:
        return None
    return "the transform component has no `assign` parameter yet (only static assignment exists)"


def parts_digest(out: Path) -> str:
    """sha256 over the names and bytes of every part, in name order: byte-identical outputs match."""
    h = hashlib.sha256()
    for p in sorted(out.rglob("part-*")):
        h.update(str(p.relative_to(out)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


@dataclass
class Row:
    workload: str
    config: str
    mode: str
    slots: int
    ok: bool
    job_s: Optional[float] = None  # the manifest's wall_time_s
    total_s: Optional[float] = None  # the whole torchx run
    ideal_s: Optional[float] = None
    digest: str = ""
    note: str = ""

    @property
    def vs_ideal(self) -> Optional[float]:
        return self.job_s / self.ideal_s if self.job_s and self.ideal_s else None


def run_one(w: Workload, config: str, mode: Optional[str], a: argparse.Namespace) -> Row:
    out = a.workdir / "out" / f"{w.name}-{config}-{mode or 'default'}"
    shutil.rmtree(out, ignore_errors=True)
    args = CONFIGS[config]
    slots = int(args[1].split("x")[1]) * (int(args[3]) if "--num_workers" in args else 1)
    cmd = [*torchx_cmd(), "run", "-s", "local_cwd", COMPONENT, "--fn", FN, "--input", f"{w.path}/*.jsonl"]
    cmd += ["--output", str(out), *args, "--overwrite", "True"]
    if mode is not None:
        cmd += ["--assign", mode]
    m = run_measured(cmd, cwd=REPO_ROOT, timeout=a.timeout)
    ideal = w.work_s / min(slots, os.cpu_count() or 1)
    row = Row(w.name, config, mode or "static", slots, m.ok, total_s=m.wall_s, ideal_s=ideal)
    success = out / "_SUCCESS"
    if not m.ok or not success.exists():
        row.ok, row.note = False, "timed out" if m.timed_out else f"rc={m.returncode}, no _SUCCESS"
        print(
            f"!! {w.name}/{config}/{mode} FAILED: {row.note}\n{m.tail()}\n{torchx_log_tail(m)}",
            file=sys.stderr,
        )
        return row
    manifest = json.loads(success.read_text())
    row.job_s = float(manifest["wall_time_s"])
    if manifest.get("records_in") != w.records:
        row.ok, row.note = False, f"records_in={manifest.get('records_in')} != {w.records}"
    row.digest = parts_digest(out)
    if not a.keep_output:
        shutil.rmtree(out, ignore_errors=True)
    return row


def _fmt(v: Optional[float], spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def print_rows(rows: list[Row]) -> None:
    print(f"\n{'workload':<8} {'config':<6} {'slots':>5} {'assign':<7} {'job s':>7} {'torchx s':>9}", end="")
    print(f" {'ideal s':>8} {'job/ideal':>9} {'vs static':>9}  note")
    static = {(r.workload, r.config): r for r in rows if r.mode == "static" and r.ok}
    for r in rows:
        s = static.get((r.workload, r.config))
        speed = f"{s.job_s / r.job_s:.2f}x" if s and s.job_s and r.job_s and r.mode != "static" else "-"
        print(
            f"{r.workload:<8} {r.config:<6} {r.slots:>5} {r.mode:<7} {_fmt(r.job_s):>7} {_fmt(r.total_s):>9}",
            end="",
        )
        print(f" {_fmt(r.ideal_s):>8} {_fmt(r.vs_ideal):>9} {speed:>9}  {r.note}")


def judge(rows: list[Row]) -> None:
    """The issue's targets in the note column: skew dynamic <= 1.15x ideal, uniform >= 0.98x static."""
    static = {(r.workload, r.config): r for r in rows if r.mode == "static" and r.ok}
    for r in rows:
        s = static.get((r.workload, r.config))
        if r.mode != "dynamic" or not r.ok or r.job_s is None:
            continue
        if r.workload == "skew" and r.vs_ideal is not None:
            r.note += f"target <=1.15x ideal: {'met' if r.vs_ideal <= 1.15 else 'MISSED'}"
        elif r.workload == "uniform" and s is not None and s.job_s:
            speed = s.job_s / r.job_s
            r.note += f"target >=0.98x static: {'met' if speed >= 0.98 else 'MISSED'}"


def check_identical(rows: list[Row]) -> list[str]:
    """Every mode and config of a workload must write the same parts (names and bytes)."""
    problems = []
    for w in {r.workload for r in rows}:
        digests = {(r.config, r.mode): r.digest for r in rows if r.workload == w and r.ok}
        if len(set(digests.values())) > 1:
            problems.append(f"{w}: parts differ between runs: {digests}")
    return problems


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="Skewed units: dynamic vs static assignment vs the ideal.")
    ap.add_argument("--units", type=int, default=40, help="units (= files) per workload")
    ap.add_argument("--records", type=int, default=200, help="records per unit")
    ap.add_argument("--cost-us", type=float, default=500.0, help="mean CPU cost of a light record, µs")
    ap.add_argument("--heavy-frac", type=float, default=0.1, help="fraction of heavy units (skew)")
    ap.add_argument("--heavy-x", type=int, default=10, help="how much more a heavy unit's records cost")
    ap.add_argument("--seed", type=int, default=13, help="chooses the heavy units and the record costs")
    ap.add_argument("--configs", default=",".join(CONFIGS), help=f"subset of {','.join(CONFIGS)}")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help=f"subset of {','.join(WORKLOADS)}")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "tdp-bench-skew")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per run before it is killed")
    ap.add_argument("--keep-output", action="store_true", help="keep the output directories")
    ap.add_argument("--json", type=Path, help="save the results here")
    a = ap.parse_args(argv)
    a.configs = [c for c in a.configs.split(",") if c]
    a.workloads = [w for w in a.workloads.split(",") if w]
    for name, chosen, known in (("configs", a.configs, CONFIGS), ("workloads", a.workloads, WORKLOADS)):
        if not chosen or set(chosen) - set(known):
            ap.error(f"--{name} {','.join(chosen)!r}: choose from {','.join(known)}")
    return a


def main(argv: Sequence[str] | None = None) -> int:
    a = parse_args(argv)
    a.workdir.mkdir(parents=True, exist_ok=True)
    os.chdir(REPO_ROOT)  # the --fn path is relative to the repo root
    no_dynamic = has_assign()
    modes: list[Optional[str]] = [None] if no_dynamic else list(MODES)
    if no_dynamic:
        print(f"# dynamic column skipped: {no_dynamic}")
    rows, work = [], {}
    for name in a.workloads:
        w = make_workload(name, a.workdir / "data", a)
        work[name] = w.work_s
        print(f"# {name}: {w.records} records in {a.units} units, CPU work {w.work_s:.2f}s", end="")
        print(f", heavy units {w.heavy}")
        for config in a.configs:
            for mode in modes:
                r = run_one(w, config, mode, a)
                print(
                    f"# {name} {config} {r.mode}: job {_fmt(r.job_s)}s, ideal {_fmt(r.ideal_s)}s", flush=True
                )
                rows.append(r)
    judge(rows)
    print_rows(rows)
    problems = check_identical(rows)
    for p in problems:
        print(f"!! {p}", file=sys.stderr)
    if a.json:
        meta = {"args": {k: str(v) for k, v in vars(a).items()}, "cpus": os.cpu_count(), "work_s": work}
        meta["dynamic_skipped"] = no_dynamic
        write_json(a.json, {"meta": meta, "rows": [{**r.__dict__, "vs_ideal": r.vs_ideal} for r in rows]})
        print(f"\n# results saved to {a.json}")
    return 1 if problems or not all(r.ok for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
