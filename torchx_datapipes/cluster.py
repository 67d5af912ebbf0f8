"""Local paths in a job's arguments, for the scheduler that will run it (see docs/cluster.md).

The runner resolves relative paths against its own working directory, which is the client's
only on ``local_cwd`` (and, by convention, Slurm/LSF, which start jobs in the submit directory
of a shared filesystem). So the client makes local paths absolute where the job shares its
filesystem (same meaning, and the spec no longer depends on the cwd), and refuses relative
ones where it does not: a pod cannot see the client's working directory, and the job would
fail late with "no input files", or write its output inside a container that is then deleted.
Absolute local paths pass everywhere: they may be ``--mounts`` destinations or a shared volume.
"""

import os
from typing import Any, Dict, Mapping, Optional

from torchx_datapipes.options import OptionError
from torchx_datapipes.target import Target

_WHY = "Cluster jobs need URLs every node can reach"


def is_local(path: str) -> bool:
    """A path on this machine's filesystem (no scheme; ``file://`` URLs are already absolute)."""
    return "://" not in path


def place_paths(values: Mapping[str, Any], where: Target) -> Dict[str, Any]:
    """``values`` with local relative paths absolute, or an error when ``where`` cannot see them."""
    out = dict(values)
    out["input"] = ",".join(
        _place(p.strip(), "input", where, "s3://bucket/data/*.jsonl")
        for p in str(values["input"]).split(",")
        if p.strip()
    )
    out["output"] = _place(values["output"], "output", where, "s3://bucket/out")
    fn: Optional[str] = values.get("fn")
    if fn and "://" not in fn and _is_artifact_path(fn):
        out["fn"] = _place(fn, "fn", where, "s3://bucket/artifacts/<sha256>.pkl")
    store: Optional[str] = values.get("artifact_store")
    if store:
        out["artifact_store"] = _place(store, "artifact_store", where, "s3://bucket/artifacts")
    elif fn and not where.shares_client_fs and not _is_artifact_url(fn):
        raise OptionError(
            f"--fn {fn} would be packaged into the default store ./.tdp/artifacts on this machine, which"
            f" a {where.scheduler} job cannot read. {_WHY}: pass --artifact_store s3://bucket/artifacts"
            " (or another store this machine can write and every node can read)"
        )
    return out


def _place(path: str, option: str, where: Target, example: str) -> str:
    if not is_local(path) or os.path.isabs(path):
        return path
    if where.shares_client_fs:
        return os.path.abspath(os.path.expanduser(path))
    raise OptionError(
        f"--{option} {path!r} is a path relative to this machine's working directory, which a"
        f" {where.scheduler} job cannot see (its processes run on other nodes or in containers)."
        f" {_WHY}, e.g. --{option} {example}, or an absolute path that every node mounts"
        " (see --mounts)"
    )


def _is_artifact_path(fn: str) -> bool:
    """``--fn path/to/<sha256>.pkl`` (an artifact file), not ``file.py:fn`` or ``pkg.mod:fn``."""
    return _is_artifact_url(fn) and ":" not in fn


def _is_artifact_url(fn: str) -> bool:
    from torchx_datapipes.artifact.store import is_artifact_url

    return is_artifact_url(fn)
