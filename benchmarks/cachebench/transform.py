"""Part 3, ``transform --cache``: the transform runner in this process on a generated corpus,
for a light and a heavy example function, without a cache and then with each shared provider
twice: cold (every record computed and stored) and warm (a rerun served from the cache).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _common import ensure_corpus, load_fn

from .services import Env
from .shared import Sizes, md_table, progress


def run_transform(
    data: Path, out: Path, artifact_args: list[str], cache_url: str
) -> tuple[float, dict[str, Any]]:
    """The transform runner in this process (1 rank, 1 worker): wall seconds and the manifest."""
    from torchx_datapipes.runner.main import main as runner_main

    args = ["transform", "--input", str(data), "--output", str(out), "--progress_s", "0", *artifact_args]
    t0 = time.perf_counter()
    manifest = runner_main([*args, *(["--cache", cache_url] if cache_url else [])])
    dt = time.perf_counter() - t0
    shutil.rmtree(out, ignore_errors=True)
    assert manifest is not None
    return dt, manifest


def bench_transform_cache(a: argparse.Namespace, sizes: Sizes, env: Env) -> dict[str, Any]:
    """``transform --cache``: no cache vs a cold cache (first run) vs a warm one (a rerun)."""
    from torchx_datapipes import artifact
    from torchx_datapipes.cache import open_cache

    n = 20_000 if a.quick else 200_000
    data = ensure_corpus(n, 4, 0, Path(tempfile.gettempdir()) / "tdp-bench-data")
    rows = []
    for name in ("light", "heavy"):
        ref = artifact.package(load_fn(f"examples/transforms.py:{name}"), str(env.sqlite_dir / "store"))
        art = ["--artifact", ref.url, "--sha256", ref.sha256]
        out = env.sqlite_dir / "out"
        progress(f"3: {name} without a cache")
        base, _ = run_transform(data, out, art, "")
        rows.append({"fn": name, "cache": "none", "run": "-", "seconds": base, "records": n, "hits": 0})
        for p in a.providers:
            if p == "memory":
                continue  # a per-process dict does not survive the job: nothing to rerun against
            url = env.url(p, f"bench_cache-{os.getpid()}-transform-{name}", db="transform.db")
            for run in ("cold", "warm"):
                progress(f"3: {name} {p}:// {run}")
                dt, m = run_transform(data, out, art, url)
                c = m["cache"]
                rows.append(
                    {
                        "fn": name,
                        "cache": p,
                        "run": run,
                        "seconds": dt,
                        "records": n,
                        "hits": c["hits"],
                        "errors": c["errors"],
                        "vs_none": base / dt,
                    }
                )
            open_cache(url).clear()
    return {"rows": rows, "records": n}


def transform_table(rows: Sequence[dict[str, Any]]) -> str:
    body = [
        [
            r["fn"],
            "no cache" if r["cache"] == "none" else f"{r['cache']}://",
            r["run"],
            f"{r['seconds']:.2f}",
            f"{r['records'] / r['seconds']:,.0f}",
            f"{r['hits']:,}",
            "1.00x" if r["cache"] == "none" else f"{r['vs_none']:.2f}x",
        ]
        for r in rows
    ]
    return md_table(["fn", "cache", "run", "s", "records/s", "cache hits", "vs no cache"], body)
