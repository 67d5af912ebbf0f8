"""Artifact size, package time and fresh-process load time, per backend.

Usage: ``python benchmarks/bench_artifact.py [--repeat 5]``

Two user transforms, written to a temp project that the loading process cannot import:

* ``small``: a 3-line function.
* ``large``: a 600-line module (200 helper functions) whose transform also reads a
  10,000-entry lookup table built at import time.

*package* is the in-process time of ``artifact.package`` into a fresh local store (median);
*load* is the time of ``artifact.load`` + first call inside a fresh interpreter (median),
and *process* the wall time of that whole interpreter (imports included).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from torchx_datapipes import artifact  # noqa: E402

SMALL = "def small(record):\n    record['n'] = len(record['text'])\n    return record\n"


def _large_source(n_helpers: int = 200) -> str:
    lines = ["TABLE = {f'k{i}': i * i for i in range(10_000)}", ""]
    for i in range(n_helpers):
        lines += [f"def helper_{i}(x):", f"    y = x + {i}", f"    return y * 2 - {i}", ""]
    lines += ["def large(record):", "    v = record['n']"]
    lines += [f"    v = helper_{i}(v)" for i in range(0, n_helpers, 10)]
    lines += ["    record['n'] = v + TABLE['k7']", "    return record", ""]
    return "\n".join(lines)


LOAD = """
import json, sys, time
from torchx_datapipes import artifact
t0 = time.perf_counter()
fn = artifact.load(sys.argv[1])
fn({"text": "abc", "n": 3})
print(json.dumps({"load_s": time.perf_counter() - t0}))
"""


def _load_fresh(url: str, cwd: str) -> tuple[float, float]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONSAFEPATH": "1"}
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", LOAD, url], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    wall = time.perf_counter() - t0
    return json.loads(out.stdout)["load_s"], wall


def _measure(obj: Any, backend: str, tmp: Path, repeat: int, cwd: str) -> dict[str, Any]:
    package_s, url = [], ""
    for i in range(repeat):
        store = tmp / f"store-{backend}-{i}-{id(obj)}"
        t0 = time.perf_counter()
        url = artifact.package(obj, str(store), backend).url
        package_s.append(time.perf_counter() - t0)
    loads = [_load_fresh(url, cwd) for _ in range(repeat)]
    return {
        "size_B": os.path.getsize(url),
        "package_ms": 1000 * statistics.median(package_s),
        "load_ms": 1000 * statistics.median(x[0] for x in loads),
        "process_ms": 1000 * statistics.median(x[1] for x in loads),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench_artifact_") as tmp_dir:
        tmp = Path(tmp_dir)
        proj = tmp / "proj"
        proj.mkdir()
        (proj / "bench_small.py").write_text(SMALL)
        (proj / "bench_large.py").write_text(_large_source())
        sys.path.insert(0, str(proj))
        import bench_large  # type: ignore[import-not-found]
        import bench_small  # type: ignore[import-not-found]

        sys.path.remove(str(proj))
        rows = []
        for label, fn, spec, lines in [
            ("small", bench_small.small, "bench_small.py:small", SMALL.count("\n")),
            ("large", bench_large.large, "bench_large.py:large", _large_source().count("\n")),
        ]:
            for backend in artifact.BACKENDS:
                os.chdir(proj)  # module specs are relative to the cwd (the workspace)
                obj = spec if backend == "module" else fn
                cwd = str(proj) if backend == "module" else str(tmp)
                rows.append(
                    {
                        "fn": f"{label} ({lines} lines)",
                        "backend": backend,
                        **_measure(obj, backend, tmp, args.repeat, cwd),
                    }
                )
                os.chdir(REPO)
    header = (
        f"{'function':<20} {'backend':<14} {'size (B)':>10} {'package (ms)':>13}"
        f" {'load (ms)':>10} {'process (ms)':>13}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['fn']:<20} {r['backend']:<14} {r['size_B']:>10,} {r['package_ms']:>13.1f}"
            f" {r['load_ms']:>10.1f} {r['process_ms']:>13.0f}"
        )
    print(
        f"\nPython {sys.version.split()[0]}, repeat={args.repeat}, medians; load = artifact.load + first call"
    )


if __name__ == "__main__":
    main()
