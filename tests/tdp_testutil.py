"""Helpers shared by the runner and end-to-end tests."""

import gzip
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import orjson

VENV_BIN = os.path.dirname(sys.executable)
TORCHX = os.path.join(VENV_BIN, "torchx")


def records(n: int, start: int = 0) -> List[Dict[str, Any]]:
    words = ["alpha", "Beta", "gamma", "delta", "EPS", "zeta", "eta", "theta"]
    return [
        {
            "id": i,
            "text": " ".join(words[(i * 7 + k) % len(words)] for k in range(3 + i % 5)),
            "x": i * 0.5,
            "label": i % 3,
        }
        for i in range(start, start + n)
    ]


def write_jsonl(path: Path, recs: Sequence[Any], compress: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = b"".join(orjson.dumps(r) + b"\n" for r in recs)
    if compress:
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def make_dataset(root: Path, sizes: Sequence[int]) -> List[Dict[str, Any]]:
    """JSONL files ``part-K.jsonl`` with the given record counts; returns all records."""
    out: List[Dict[str, Any]] = []
    for k, n in enumerate(sizes):
        recs = records(n, start=len(out))
        write_jsonl(root / f"part-{k}.jsonl", recs)
        out.extend(recs)
    return out


def read_output(out: Path, sub: str = "") -> List[Any]:
    """All records of the committed parts (sorted part order)."""
    base = out / sub if sub else out
    recs: List[Any] = []
    for p in sorted(base.glob("part-*.jsonl")):
        recs.extend(orjson.loads(line) for line in p.read_bytes().splitlines() if line)
    return recs


def part_bytes(out: Path, sub: str = "") -> Dict[str, bytes]:
    base = out / sub if sub else out
    return {p.name: p.read_bytes() for p in sorted(base.glob("part-*"))}


def output_files(out: Path) -> Dict[str, bytes]:
    """Every output file but the manifest and commit records (parts, side tables, indexes), by path."""
    skip = ("_SUCCESS", "_units/", "_LEASE")
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and not str(p.relative_to(out)).startswith(skip)
    }


def canon(recs: Sequence[Any]) -> List[str]:
    return sorted(json.dumps(r, sort_keys=True) for r in recs)


def run_torchx(
    args: Sequence[str], cwd: Path, env: Optional[Dict[str, str]] = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """``torchx run -s local_cwd ...`` as a user would type it, in ``cwd``."""
    full_env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}", **(env or {})}
    return subprocess.run(
        [TORCHX, *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout
    )


def manifest(out: Path) -> Dict[str, Any]:
    return json.loads((out / "_SUCCESS").read_text())


def run_op(op: str, inp: str, out: Path, *extra: str, fn: Optional[Any] = None) -> Dict[str, Any]:
    """The runner in-process: ``main([op, --input, --output, ...])``, packaging ``fn`` beside ``out``."""
    from torchx_datapipes import artifact
    from torchx_datapipes.runner.main import main

    args = [op, "--input", inp, "--output", str(out), "--progress_s", "0"]
    if fn is not None:
        ref = artifact.package(fn, str(out.parent / "store"))
        args += ["--artifact", ref.url, "--sha256", ref.sha256]
    manifest = main([*args, *extra])
    assert manifest is not None
    return manifest


def run_component(cwd: Path, op: str, *extra: str, **params: Any) -> Dict[str, Any]:
    """``torchx run -s local_cwd datapipes.<op> --param value ...`` in ``cwd``, but without the launch.

    The component builds the job in ``cwd`` as the ``torchx`` client does (it checks the options and
    packages and stores ``fn``); then the runner command of the job's role (what torchrun starts on every
    rank: ``-m torchx_datapipes.runner <op> ...``) runs in this process in ``cwd``, as one rank, with
    ``extra`` appended. What was imported from ``cwd`` (the user's ``fn`` file) is forgotten afterwards.
    Returns the manifest.
    """
    from torchx_datapipes import components
    from torchx_datapipes.runner.main import main

    path, before, old = list(sys.path), set(sys.modules), os.getcwd()
    os.chdir(cwd)  # local_cwd runs the job in the client's directory too
    try:
        app = getattr(components, op)(**params)
        (role,) = app.roles
        assert role.entrypoint == "bash", role
        cmd = shlex.split(role.args[-1])
        got = main([*cmd[cmd.index("torchx_datapipes.runner") + 1 :], "--progress_s", "0", *extra])
    finally:
        os.chdir(old)
        sys.path[:] = path
        for name in set(sys.modules) - before:
            if str(getattr(sys.modules[name], "__file__", None) or "").startswith(str(cwd)):
                del sys.modules[name]
    assert got is not None
    return got
