"""Local paths in a job's arguments, for the scheduler that will run it (see docs/cluster.md).

The runner resolves relative paths against its own working directory, which is the client's
only on ``local_cwd`` (and, by convention, Slurm/LSF, which start jobs in the submit directory
of a shared filesystem). So the client makes local paths absolute where the job shares its
filesystem (same meaning, and the spec no longer depends on the cwd), and refuses relative
ones where it does not: a pod cannot see the client's working directory, and the job would
fail late with "no input files", or write its output inside a container that is then deleted.
Absolute local paths pass everywhere: they may be ``--mounts`` destinations or a shared volume.

An AppDef built for an unknown target (outside the TorchX runner) records in its metadata which
options were relative on the client (:data:`META_RELATIVE`); ``api.run`` refuses it for a
scheduler that does not share the client's filesystem (:func:`check_scheduler`).
"""

import os
from typing import Any, Dict, Mapping, Optional

from torchx_datapipes.io.fs import join_patterns, split_patterns
from torchx_datapipes.options import OptionError
from torchx_datapipes.target import Target

_WHY = "Cluster jobs need URLs every node can reach"
META_RELATIVE = "torchx_datapipes/client_relative"  # "option=value;..." made absolute on the client
_EXAMPLES = {
    "input": "s3://bucket/data/*.jsonl",
    "output": "s3://bucket/out",
    "fn": "s3://bucket/artifacts/<sha256>.pkl",
    "artifact_store": "s3://bucket/artifacts",
}


def is_local(path: str) -> bool:
    """A path on this machine's filesystem (no scheme; ``file://`` URLs are already absolute)."""
    return "://" not in path


def place_paths(values: Mapping[str, Any], where: Target, relative: Dict[str, str]) -> Dict[str, Any]:
    """``values`` with local relative paths absolute, or an error when ``where`` cannot see them.

    ``relative`` receives ``option -> value as given`` for every path made absolute, and
    ``artifact_store`` when ``--fn`` goes to the default store on this machine.
    """
    out = dict(values)

    def place(option: str, path: str) -> str:
        placed = _place(path, option, where)
        if placed != path:
            relative[option] = ",".join(filter(None, [relative.get(option), path]))
        return placed

    out["input"] = join_patterns([place("input", p) for p in split_patterns(str(values["input"]))])
    out["output"] = place("output", values["output"])
    fn: Optional[str] = values.get("fn")
    if fn and "://" not in fn and _is_artifact_path(fn):
        out["fn"] = place("fn", fn)
    store: Optional[str] = values.get("artifact_store")
    if store:
        out["artifact_store"] = place("artifact_store", store)
    elif fn and (not _is_artifact_url(fn) or _in_default_store(out["fn"])):
        if not where.shares_client_fs:
            raise OptionError(_default_store_message(fn, str(where.scheduler)))
        relative["artifact_store"] = DEFAULT_STORE
    return out


DEFAULT_STORE = "./.tdp/artifacts"  # appdef.default_store(), relative to the cwd


def _in_default_store(path: str) -> bool:
    """An artifact packaged into the client's default store (e.g. by ``api.transform(lambda ...)``)."""
    return is_local(path) and os.path.dirname(os.path.abspath(path)) == os.path.abspath(DEFAULT_STORE)


def _default_store_message(fn: str, scheduler: str) -> str:
    return (
        f"--fn {fn} would be packaged into the default store {DEFAULT_STORE} on this machine, which a"
        f" {scheduler} job cannot read. {_WHY}: pass --artifact_store s3://bucket/artifacts (or another"
        " store this machine can write and every node can read)"
    )


def _place(path: str, option: str, where: Target) -> str:
    if not is_local(path) or os.path.isabs(path):
        return path
    if where.shares_client_fs:
        return os.path.abspath(os.path.expanduser(path))
    raise OptionError(_relative_message(option, path, str(where.scheduler)))


def _relative_message(option: str, path: str, scheduler: str) -> str:
    return (
        f"--{option} {path!r} is a path relative to this machine's working directory, which a"
        f" {scheduler} job cannot see (its processes run on other nodes or in containers)."
        f" {_WHY}, e.g. --{option} {_EXAMPLES[option]}, or an absolute path that every node mounts"
        " (see --mounts)"
    )


def encode_relative(relative: Mapping[str, str]) -> str:
    return ";".join(f"{k}={v}" for k, v in relative.items())


def check_scheduler(metadata: Mapping[str, str], scheduler: str, fn: str = "the function") -> None:
    """Refuse an AppDef whose client-relative paths (or default store) ``scheduler`` cannot see."""
    if Target(scheduler).shares_client_fs or not metadata.get(META_RELATIVE):
        return
    option, _, value = metadata[META_RELATIVE].split(";", 1)[0].partition("=")
    if option == "artifact_store":
        raise OptionError(_default_store_message(fn, scheduler))
    raise OptionError(_relative_message(option, value.split(",", 1)[0], scheduler))


def _is_artifact_path(fn: str) -> bool:
    """``--fn path/to/<sha256>.pkl`` (an artifact file), not ``file.py:fn`` or ``pkg.mod:fn``."""
    return _is_artifact_url(fn) and ":" not in fn


def _is_artifact_url(fn: str) -> bool:
    from torchx_datapipes.artifact.store import is_artifact_url

    return is_artifact_url(fn)
