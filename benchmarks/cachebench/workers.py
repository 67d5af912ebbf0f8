"""Part 2, worker memory: ``spawn``ed worker processes each read the whole working set through
the cache, pass after pass, checking every value against the parent's hash and sampling their
own RSS / PSS / USS; then the harness that runs them once per provider, reads the server-side
counters around each run, and tables the memory against the per-process ``memory://`` cache.
The workers import this module by name (``cachebench.workers``, via the ``benchmarks``
directory the script puts on ``sys.path``, which spawn hands to the children); it must not
import torch at module level: numpy workers never import it.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .services import Env, describe_server, server_memory
from .shared import QUICK_NOTE, Sizes, cleanup, md_table, progress
from .values import digest, make_value, mem_sample, vm_hwm_kb

if TYPE_CHECKING:
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Barrier

RSS_TARGET_RATIO = 3.0


@dataclass(frozen=True)
class WorkerSpec:
    """What every worker of one run does (pickled to the spawned processes)."""

    url: str  # "" = no cache: generate every value every time
    array: str  # "torch": torch tensors (the worker imports torch); "numpy": numpy arrays, no torch
    items: int
    elems: int
    batch: int
    passes: int
    workers: int
    seed: int
    digests: tuple[bytes, ...]
    barrier_timeout: float


def _worker_run(spec: WorkerSpec, idx: int, barrier: Barrier) -> dict[str, Any]:
    if spec.array == "torch":
        import torch

        torch.set_num_threads(1)  # 4 workers on 2 cores: no intra-op threads on top
    from torchx_datapipes.cache import open_cache

    cache = open_cache(spec.url) if spec.url else None
    if cache is not None:
        cache.get_many([-1])  # connect / open the file before the baseline reading (-1: never stored)
    after_import = mem_sample()
    peak = dict(after_import)
    start = idx * spec.items // spec.workers  # each worker starts at its own offset, then wraps
    order = [*range(start, spec.items), *range(start)]
    hits: list[int] = []
    seconds: list[float] = []
    ok = bad = 0
    barrier.wait(spec.barrier_timeout)
    for _ in range(spec.passes):
        t0, n_hit = time.perf_counter(), 0
        for i in range(0, spec.items, spec.batch):
            batch = order[i : i + spec.batch]
            found = cache.get_many(batch) if cache is not None else {}
            fresh: dict[int, Any] = {}
            for k in batch:
                t = found.get(k)
                if t is None:
                    t = fresh[k] = make_value(spec.array, spec.seed, k, spec.elems)
                else:
                    n_hit += 1
                if digest(t) == spec.digests[k]:
                    ok += 1
                else:
                    bad += 1
            if cache is not None and fresh:
                cache.set_many(fresh)
            del found, fresh, t
            now = mem_sample()
            peak = {m: max(peak[m], now[m]) for m in peak}
        seconds.append(time.perf_counter() - t0)
        hits.append(n_hit)
        barrier.wait(spec.barrier_timeout)
    final = mem_sample()  # every worker is alive here (between two barriers)
    hwm = vm_hwm_kb()
    barrier.wait(spec.barrier_timeout)
    return {
        "worker": idx,
        "hits": hits,
        "seconds": seconds,
        "ok": ok,
        "bad": bad,
        "after_import_kb": after_import,
        "peak_kb": {**peak, "rss": max(peak["rss"], hwm)},
        "final_kb": final,
        "stats": cache.stats().as_dict() if cache is not None else {},
    }


def _worker(spec: WorkerSpec, idx: int, barrier: Barrier, out: Queue[dict[str, Any]]) -> None:
    """Entry point of a spawned worker: one result dict on ``out``, or its traceback."""
    try:
        out.put(_worker_run(spec, idx, barrier))
    except BaseException:
        barrier.abort()
        out.put({"worker": idx, "error": traceback.format_exc()})


def run_workers(spec: WorkerSpec, timeout: float) -> list[dict[str, Any]]:
    """Start ``spec.workers`` spawned workers, wait for their results (raise if one failed)."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(spec.workers)
    out: Queue[dict[str, Any]] = ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(spec, i, barrier, out), name=f"bench-cache-w{i}")
        for i in range(spec.workers)
    ]
    for p in procs:
        p.start()
    results: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(results) < spec.workers:
            try:
                results.append(out.get(timeout=1.0))
                continue
            except queue.Empty:
                pass
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead or time.monotonic() > deadline:
                why = f"{dead[0].name} exited with {dead[0].exitcode}" if dead else f"timeout {timeout:g}s"
                raise RuntimeError(f"workers for {spec.url or 'no cache'} failed: {why}")
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():  # only our own, stuck, worker processes
                p.kill()
                p.join()
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        raise RuntimeError(f"a worker failed ({spec.url or 'no cache'}):\n{errors[0]}")
    return sorted(results, key=lambda r: r["worker"])


# ---------------------------------------------------------------------------------------------
# Part 2 harness
# ---------------------------------------------------------------------------------------------


@dataclass
class WorkersRow:
    label: str
    provider: str
    results: list[dict[str, Any]] = field(default_factory=list)
    server: str = "-"

    def total(self, where: str, what: str) -> float:
        return sum(r[where][what] for r in self.results) / 1024  # kB -> MiB

    @property
    def growth_mib(self) -> float:
        return sum(r["peak_kb"]["rss"] - r["after_import_kb"]["rss"] for r in self.results) / 1024


def bench_workers(a: argparse.Namespace, sizes: Sizes, env: Env) -> dict[str, Any]:
    """Part 2, once per array kind in ``a.arrays``."""
    return {"runs": [{"array": array, **bench_workers_one(a, sizes, env, array)} for array in a.arrays]}


def bench_workers_one(a: argparse.Namespace, sizes: Sizes, env: Env, array: str) -> dict[str, Any]:
    """Part 2: ``a.workers`` spawned workers reading the working set twice through each cache."""
    from torchx_datapipes.cache import TensorCodec, open_cache

    seed = a.seed + 3
    progress(f"2 ({array}): hashing the {sizes.ws_items} expected values")
    digests = tuple(digest(make_value(array, seed, k, sizes.ws_elems)) for k in range(sizes.ws_items))
    runs: list[tuple[str, str, str, str]] = [("no cache (generate every time)", "none", "", "")]
    ns = f"bench_cache-{os.getpid()}-workers-{array}"
    for p in a.providers:
        if p == "sqlite":
            runs.append(("sqlite:// (default: no mmap)", p, env.url(p, ns, db="ws.db"), "ws.db"))
            url = env.url(p, ns, db="ws-mmap.db", extra=f"&mmap_bytes={1 << 30}")
            runs.append(("sqlite:// (`mmap_bytes=1GiB`)", p, url, "ws-mmap.db"))
        else:
            label = f"{p}://" + (" (private per worker)" if p == "memory" else "")
            runs.append((label, p, env.url(p, ns), ""))
    rows = []
    for label, p, url, db in runs:
        progress(f"2 ({array}): {label}, {a.workers} workers")
        spec = WorkerSpec(
            url,
            array,
            sizes.ws_items,
            sizes.ws_elems,
            sizes.ws_batch,
            sizes.passes,
            a.workers,
            seed,
            digests,
            600,
        )
        path = env.sqlite_dir / db if db else None
        before = server_memory(p, env, path)
        row = WorkersRow(label, p, run_workers(spec, a.timeout))
        row.server = describe_server(p, before, server_memory(p, env, path), env.sqlite_fs, sizes.ws_items)
        rows.append(row)
        if url and p != "memory":
            cleanup(open_cache(url), range(sizes.ws_items))
        if path is not None:
            for f in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
                f.unlink(missing_ok=True)
    encoded = len(TensorCodec().encode(make_value(array, seed, 0, sizes.ws_elems)))
    return {"rows": rows, "encoded": encoded}


def workers_tables(rows: Sequence[WorkersRow], sizes: Sizes, workers: int, quick: bool) -> str:
    heads = ["provider", *[f"pass {i + 1} hits" for i in range(sizes.passes)], "values verified"]
    heads += [f"pass {i + 1} s" for i in range(sizes.passes)]
    heads += ["RSS after import MiB (mean)", "peak RSS MiB (max worker)", "Σ peak RSS MiB", "Σ peak PSS MiB"]
    heads += ["Σ peak USS MiB", "Σ final PSS MiB", "Σ RSS growth MiB", "server side"]
    out = []
    asked = workers * sizes.ws_items
    for r in rows:
        res = r.results
        hits = [sum(x["hits"][i] for x in res) / asked for i in range(sizes.passes)]
        ok, bad = sum(x["ok"] for x in res), sum(x["bad"] for x in res)
        verified = f"{ok:,}/{ok + bad:,}" + (f" **{bad} WRONG**" if bad else "")
        secs = [max(x["seconds"][i] for x in res) for i in range(sizes.passes)]
        errs = sum(x["stats"].get("errors", 0) + x["stats"].get("rejected", 0) for x in res)
        srv = r.server + (f"; stats errors+rejected={errs}" if errs else "")
        cells = [r.label, *[f"{h:.1%}" for h in hits], verified, *[f"{s:.2f}" for s in secs]]
        cells += [f"{r.total('after_import_kb', 'rss') / len(res):.0f}"]
        cells += [f"{max(x['peak_kb']['rss'] for x in res) / 1024:.0f}"]
        cells += [f"{r.total('peak_kb', m):.0f}" for m in ("rss", "pss", "uss")]
        cells += [f"{r.total('final_kb', 'pss'):.0f}", f"{r.growth_mib:.0f}", srv]
        out.append(cells)
    text = md_table(heads, out)
    mem = next((r for r in rows if r.provider == "memory"), None)
    shared = [r for r in rows if r.provider not in ("memory", "none")]
    if mem is None or not shared:
        return text + "\n\n(target check needs memory:// and a shared provider)"
    text += (
        f"\n\nTarget: Σ worker peak RSS with a shared provider >= {RSS_TARGET_RATIO:g}x lower than with"
        f" memory:// (per-process dicts); Σ peak RSS memory:// = {mem.total('peak_kb', 'rss'):,.0f} MiB"
        f"{QUICK_NOTE if quick else ''}\n\n"
    )
    t_rows = []
    for r in shared:
        ratio = mem.total("peak_kb", "rss") / r.total("peak_kb", "rss")
        verdict = "PASS" if ratio >= RSS_TARGET_RATIO else "FAIL"
        pss = mem.total("peak_kb", "pss") / r.total("peak_kb", "pss")
        growth = f"{mem.growth_mib / r.growth_mib:.1f}x" if r.growth_mib > 0 else "-"
        t_rows.append([r.label, f"{ratio:.2f}x", verdict, f"{pss:.2f}x", growth])
    heads = ["provider", "Σ peak RSS ratio memory:// / provider", "target >= 3x", "Σ peak PSS ratio"]
    return text + md_table(heads + ["Σ RSS growth ratio (above after-import)"], t_rows)
