"""Shared parts of the benchmark scripts (bench_transform, bench_split, bench_stats).

What is measured, and how:

- **wall s**: ``time.perf_counter()`` from just before ``Popen`` to the child's exit (seen
  within a few ms: the loop blocks in ``wait``), so it includes interpreter start-up, imports
  and, for torchx, scheduling and its 1 s status polling.
- **peak RSS MB**: with ``psutil``, the RSS of every process in the tree (the child and all
  its descendants, re-enumerated every ``REFRESH_S``) is read every ``POLL_S`` and the peak of
  the *sum* is kept. The sum double-counts pages shared between processes (forked
  copy-on-write pages, shared libraries), so it is an upper bound on real memory use, and
  peaks shorter than ``POLL_S`` can be missed.
  Without psutil, each command is run under a small wrapper interpreter and the figure is
  ``getrusage(RUSAGE_CHILDREN).ru_maxrss`` in that wrapper: the largest *single* waited-for
  descendant, not a sum (the table marks it ``max1``).

Non-goals: no CPU pinning, no warm-up runs and no statistics beyond best-of-N; on a shared
2-core machine, run twice and compare before trusting a difference below ~10%.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import hashlib
import importlib.util
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Optional

__all__ = [
    "BenchRow",
    "Measurement",
    "REPO_ROOT",
    "best_of",
    "ensure_corpus",
    "load_fn",
    "load_module",
    "measure_ddp_job",
    "print_table",
    "rss_source",
    "run_measured",
    "torchx_cmd",
    "torchx_log_tail",
    "write_json",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
POLL_S = 0.1
REFRESH_S = 0.5
TAIL_LINES = 25

try:
    import psutil
except ImportError:  # the `bench` extra is optional; fall back to getrusage
    psutil = None


@dataclass(frozen=True)
class Measurement:
    """One measured subprocess run."""

    cmd: tuple[str, ...]
    wall_s: float
    returncode: int
    peak_rss_mb: Optional[float]
    stdout: str
    stderr: str
    timed_out: bool = False
    walls: list[float] = field(default_factory=list)  # every run's wall time (best_of)

    @property
    def median_s(self) -> float:
        return statistics.median(self.walls) if self.walls else self.wall_s

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def tail(self, n: int = TAIL_LINES) -> str:
        """Last ``n`` lines of stderr (stdout when stderr is empty), for failure reports."""
        text = self.stderr.strip() or self.stdout.strip()
        return "\n".join(text.splitlines()[-n:])

    def last_json(self) -> Optional[dict[str, Any]]:
        """The last stdout line that parses as a JSON object, if any."""
        for line in reversed(self.stdout.strip().splitlines()):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                return obj
        return None


@dataclass
class BenchRow:
    """One line of the results table."""

    method: str
    transform: str
    records: int
    wall_s: Optional[float]
    peak_rss_mb: Optional[float] = None
    ok: bool = True
    skipped: bool = False
    records_out: Optional[int] = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def records_per_s(self) -> Optional[float]:
        if not self.ok or not self.wall_s or not self.records:
            return None
        return self.records / self.wall_s


def rss_source() -> str:
    """How peak RSS is measured: ``tree-sum`` (psutil) or ``max1`` (getrusage fallback)."""
    return "tree-sum" if psutil is not None else "max1"


class _TreeSampler:
    """Peak of the summed RSS of a process tree.

    Enumerating descendants scans all of /proc, so it is done every ``REFRESH_S`` only; the
    known processes' RSS is read every ``POLL_S``. This keeps the sampler's own CPU use small
    on a 2-core machine; a process that lives shorter than ``REFRESH_S`` may be missed.
    """

    def __init__(self, pid: int) -> None:
        self.root = psutil.Process(pid)
        self.procs: list[Any] = [self.root]
        self.next_refresh = 0.0
        self.peak = 0

    def sample(self) -> None:
        now = time.perf_counter()
        if now >= self.next_refresh:
            try:
                self.procs = [self.root, *self.root.children(recursive=True)]
            except psutil.Error:
                return
            self.next_refresh = now + REFRESH_S
        total = 0
        for p in self.procs:
            try:
                total += p.memory_info().rss
            except psutil.Error:  # exited since the last enumeration
                pass
        self.peak = max(self.peak, total)


def _kill_tree(pid: int) -> None:
    """SIGKILL the process group led by ``pid`` (which we started) and, with psutil, any
    descendant that moved to another group or session."""
    stragglers = []
    if psutil is not None:
        try:
            stragglers = psutil.Process(pid).children(recursive=True)
        except psutil.Error:
            pass
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for p in stragglers:
        try:
            p.kill()
        except psutil.Error:
            pass


# Runs argv[1:] and writes {"rc", "maxrss_kb"} as JSON to the path in RUSAGE_OUT.
_RUSAGE_WRAPPER = textwrap.dedent(
    """
    import json, os, resource, subprocess, sys
    rc = subprocess.call(sys.argv[1:])
    kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    with open(os.environ["RUSAGE_OUT"], "w") as f:
        json.dump({"rc": rc, "maxrss_kb": kb}, f)
    sys.exit(rc)
    """
)


def run_measured(
    cmd: Sequence[str],
    *,
    cwd: Optional[os.PathLike[str] | str] = None,
    env: Optional[Mapping[str, str]] = None,
    timeout: Optional[float] = None,
) -> Measurement:
    """Run ``cmd`` to completion; return wall time, exit code, output and peak RSS of its tree.

    The child gets its own process group so that a timeout kills the whole tree it started.
    """
    cmd = tuple(str(c) for c in cmd)
    full_env = {**os.environ, **(env or {})}
    # Put this interpreter's bin dir first on PATH, as an activated venv would: torchx's
    # dist.ddp launches `torchrun` by name.
    bindir = str(Path(sys.executable).parent)
    full_env["PATH"] = os.pathsep.join([bindir, full_env.get("PATH", "")])
    with tempfile.TemporaryDirectory(prefix="bench-run-") as tmp:
        out_p, err_p, ru_p = (Path(tmp) / n for n in ("stdout", "stderr", "rusage.json"))
        argv: tuple[str, ...] = cmd
        if psutil is None:
            argv = (sys.executable, "-c", _RUSAGE_WRAPPER, *cmd)
            full_env["RUSAGE_OUT"] = str(ru_p)
        timed_out = False
        with open(out_p, "wb") as out_f, open(err_p, "wb") as err_f:
            t0 = time.perf_counter()
            proc = subprocess.Popen(
                argv, cwd=cwd, env=full_env, stdout=out_f, stderr=err_f, start_new_session=True
            )
            sampler = _TreeSampler(proc.pid) if psutil is not None else None
            while True:
                if sampler is not None:
                    sampler.sample()
                try:
                    proc.wait(timeout=POLL_S)  # returns as soon as the child exits
                    break
                except subprocess.TimeoutExpired:
                    pass
                if timeout is not None and time.perf_counter() - t0 > timeout:
                    timed_out = True
                    _kill_tree(proc.pid)
                    proc.wait()
                    break
            wall = time.perf_counter() - t0
        peak_mb: Optional[float] = sampler.peak / 2**20 if sampler is not None and sampler.peak else None
        if psutil is None and ru_p.exists():
            peak_mb = json.loads(ru_p.read_text())["maxrss_kb"] / 1024
        return Measurement(
            cmd=cmd,
            wall_s=wall,
            returncode=proc.returncode if not timed_out else -9,
            peak_rss_mb=peak_mb,
            stdout=out_p.read_text(errors="replace"),
            stderr=err_p.read_text(errors="replace"),
            timed_out=timed_out,
        )


def torchx_log_tail(m: Measurement, cwd: Path = REPO_ROOT, n: int = TAIL_LINES) -> str:
    """The replicas' stderr tails of a torchx job, found from the ``ui_url`` that it printed.

    ``torchx run`` only prints the app status on failure; the traceback is in the log dir.
    """
    found = re.findall(r"ui_url: file://(\S+)", m.stdout + m.stderr)
    if not found:
        return ""
    parts = []
    for log in sorted((cwd / found[-1]).glob("*/*/stderr.log")):
        lines = log.read_text(errors="replace").strip().splitlines()[-n:]
        if lines:
            parts.append(f"== {log} ==\n" + "\n".join(lines))
    return "\n".join(parts)


def best_of(repeat: int, run: Callable[[], Measurement]) -> Measurement:
    """Run ``run`` up to ``repeat`` times and keep the fastest successful run (its ``walls`` holds
    every run's wall time, for medians).

    Stops at the first failure and returns it, so a broken method is not retried.
    """
    best: Optional[Measurement] = None
    walls: list[float] = []
    for _ in range(max(1, repeat)):
        m = run()
        if not m.ok:
            return m
        walls.append(m.wall_s)
        if best is None or m.wall_s < best.wall_s:
            best = m
    assert best is not None
    return dataclasses.replace(best, walls=walls)


def torchx_cmd() -> list[str]:
    """The ``torchx`` CLI of this interpreter's environment, polling the job's status every 20 ms
    instead of every second (``_torchx_fine.py``: the CLI's own wall times are rounded up to whole
    polls)."""
    return [sys.executable, str(Path(__file__).with_name("_torchx_fine.py"))]


_DDP_SCRIPT = textwrap.dedent(
    """
    import torch.distributed as dist
    dist.init_process_group("gloo")
    dist.barrier()
    dist.destroy_process_group()
    """
)


def measure_ddp_job(
    j: str = "1x2", *, workdir: Path, cwd: Path = REPO_ROOT, timeout: float = 600
) -> Measurement:
    """Wall time of a trivial TorchX DDP job: the fixed cost of launching anything with torchx.

    Runs ``torchx run -s local_cwd dist.ddp -j J --script S`` where ``S`` only does
    ``init_process_group("gloo")`` + ``barrier()``.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    script = workdir / "trivial_ddp.py"
    script.write_text(_DDP_SCRIPT)
    cmd = [*torchx_cmd(), "run", "-s", "local_cwd", "dist.ddp", "-j", j, "--script", str(script)]
    return run_measured(cmd, cwd=cwd, timeout=timeout)


def load_module(path: os.PathLike[str] | str, name: Optional[str] = None) -> ModuleType:
    """Import a Python file by path (registered in ``sys.modules`` so it pickles by reference)."""
    path = Path(path).resolve()
    name = name or f"_bench_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}: not a Python file")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def load_fn(spec: str) -> Callable[..., Any]:
    """Resolve ``path/to/file.py:name`` (relative to the cwd) to the function."""
    path, sep, name = spec.rpartition(":")
    if not sep or not path or not name:
        raise ValueError(f"expected 'path/to/file.py:function', got {spec!r}")
    fn = getattr(load_module(path), name, None)
    if not callable(fn):
        raise ValueError(f"{name!r} in {path} is not a function (from {spec!r})")
    return fn


def ensure_corpus(n: int, k: int, seed: int, cache_root: Path) -> Path:
    """The generated corpus ``(n, k, seed)`` under ``cache_root``, generating it on first use.

    A ``_DONE`` marker is written last, so an interrupted generation is redone.
    """
    out = cache_root / f"corpus-n{n}-k{k}-s{seed}"
    marker = out / "_DONE"
    if marker.exists():
        return out
    if out.exists():
        shutil.rmtree(out)
    gen = load_module(REPO_ROOT / "examples" / "gen_corpus.py")
    t0 = time.perf_counter()
    paths = gen.generate(n, k, out, seed)
    size = sum(Path(p).stat().st_size for p in paths)
    print(f"# generated {n} records in {k} files ({size / 1e6:.1f} MB) in {time.perf_counter() - t0:.1f}s")
    marker.write_text(json.dumps({"n": n, "k": k, "seed": seed, "bytes": size}))
    return out


def _fmt(v: Optional[float], spec: str) -> str:
    return "-" if v is None else format(v, spec)


def print_table(rows: Sequence[BenchRow], title: str = "", file: Any = None) -> None:
    """Print ``rows`` as a fixed-width table (failed rows show FAILED and their note)."""
    file = file or sys.stdout
    if title:
        print(f"\n{title}", file=file)
    head = f"{'method':<22} {'transform':<9} {'records':>9} {'wall s':>8} {'records/s':>10} "
    head += f"{'peak RSS MB':>11}  note"
    print(head, file=file)
    print("-" * len(head), file=file)
    for r in rows:
        wall = "skipped" if r.skipped else _fmt(r.wall_s, ".2f") if r.ok else "FAILED"
        line = f"{r.method:<22} {r.transform:<9} {r.records:>9} {wall:>8} "
        line += f"{_fmt(r.records_per_s, ',.0f'):>10} {_fmt(r.peak_rss_mb, '.0f'):>11}  {r.note}"
        print(line.rstrip(), file=file)


def write_json(path: os.PathLike[str] | str, payload: Mapping[str, Any]) -> None:
    """Save results (dataclasses are converted with ``asdict``)."""

    def default(o: Any) -> Any:
        if isinstance(o, BenchRow):
            return {**asdict(o), "records_per_s": o.records_per_s}
        if isinstance(o, Path):
            return str(o)
        raise TypeError(f"not JSON serialisable: {type(o).__name__}")

    Path(path).write_text(json.dumps(payload, indent=2, default=default) + "\n")


# --------------------------------------------------------------------------------------------
# Corpora shared by every benchmark: the generated 200k / 2M corpora, or --data repeated.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Corpus:
    """An input directory and its record count."""

    path: Path
    records: int


def input_files(input_dir: str) -> list[str]:
    """The ``*.jsonl`` files of a corpus directory, sorted."""
    files = sorted(glob.glob(os.path.join(input_dir, "*.jsonl")))
    if not files:
        raise FileNotFoundError(f"no *.jsonl files in {input_dir}")
    return files


def count_records(path: Path) -> int:
    """Non-empty lines over ``path/*.jsonl`` (every record is one line)."""
    n = 0
    for f in input_files(str(path)):
        with open(f, "rb") as fh:
            n += sum(1 for line in fh if line.strip())
    return n


def repeat_corpus(src: Corpus, times: int, cache_root: Path) -> Corpus:
    """``src`` with each file's content repeated ``times`` times (cached under ``cache_root``)."""
    key = hashlib.sha1(str(src.path.resolve()).encode()).hexdigest()[:10]  # stable across runs
    out = cache_root / f"repeat{times}-{key}"
    marker = out / "_DONE"
    if not marker.exists():
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        for f in input_files(str(src.path)):
            with open(f, "rb") as fin, open(out / Path(f).name, "wb") as fout:
                for _ in range(times):
                    fin.seek(0)
                    shutil.copyfileobj(fin, fout, 1 << 24)
        marker.write_text(json.dumps({"source": str(src.path), "times": times}))
    return Corpus(out, src.records * times)


def select_corpora(
    data: Path | None, n: int, k: int, seed: int, steady_n: int, quick: bool, cache: Path
) -> list[Corpus]:
    """The small corpus and, unless ``quick``, the large one for the steady-state figure."""
    small = (
        Corpus(data, count_records(data)) if data is not None else Corpus(ensure_corpus(n, k, seed, cache), n)
    )
    if quick or steady_n <= small.records:
        return [small]
    if data is not None:
        return [small, repeat_corpus(small, -(-steady_n // small.records), cache)]
    return [small, Corpus(ensure_corpus(steady_n, k, seed, cache), steady_n)]


def bench_parser(description: str, methods: Sequence[str]) -> argparse.ArgumentParser:
    """The options every benchmark shares (corpus, methods, repeats, output)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--data", type=Path, help="existing directory of *.jsonl (default: generate)")
    ap.add_argument("--n", type=int, default=200_000, help="records to generate (without --data)")
    ap.add_argument("--k", type=int, default=4, help="files to generate")
    ap.add_argument("--seed", type=int, default=12345, help="generator seed")
    ap.add_argument("--steady-n", type=int, default=2_000_000, help="records of the large run")
    ap.add_argument("--quick", action="store_true", help="only the small corpus (no steady state)")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "tdp-bench")
    ap.add_argument(
        "--methods", default=",".join(methods), help=f"comma-separated subset of {','.join(methods)}"
    )
    ap.add_argument("--repeat", type=int, default=1, help="runs per measurement; the fastest is kept")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per run before it is killed")
    ap.add_argument("--keep-output", action="store_true", help="keep the output directories")
    ap.add_argument("--json", type=Path, help="save the results here")
    return ap


def parse_bench_args(
    ap: argparse.ArgumentParser, argv: Sequence[str] | None, methods: Sequence[str]
) -> argparse.Namespace:
    """Parse, and turn ``--methods`` into the known methods in their canonical order."""
    a = ap.parse_args(argv)
    chosen = [m.strip() for m in a.methods.split(",") if m.strip()]
    bad = sorted(set(chosen) - set(methods))
    if bad:
        ap.error(f"unknown --methods {bad}; choose from {','.join(methods)}")
    a.methods = [m for m in methods if m in chosen]
    return a
