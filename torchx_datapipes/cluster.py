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
import re
import shutil
import subprocess
import sys
import tempfile
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


# ---- which torchrun a shared-filesystem job runs (slurm, lsf) ---------------------------------
TORCHRUN_ENV = "TORCHX_DATAPIPES_TORCHRUN"  # "node", or the path of the torchrun every node runs
NODE_TORCHRUN = "node"


def job_bindir(scheduler: str) -> Optional[str]:
    """The directory put first on the job's ``PATH`` for a shared-filesystem scheduler, or None.

    Slurm and LSF run the job with the submitting environment, on nodes that see the client's
    filesystem at the same paths. So by default the job runs the client's own ``torchrun``: the one
    next to this interpreter (a venv, conda env or the system's), by absolute path, whether or not
    the venv is activated. ``TORCHX_DATAPIPES_TORCHRUN=node`` leaves the nodes' own ``torchrun``
    (e.g. from an environment module) in charge; ``TORCHX_DATAPIPES_TORCHRUN=/path/to/torchrun``
    names another one. Refused here, before anything is submitted: a job whose ``torchrun`` neither
    this interpreter's directory nor the inherited ``PATH`` has (it would fail on the nodes with
    ``torchrun: command not found``).
    """
    choice = os.environ.get(TORCHRUN_ENV, "").strip()
    if choice == NODE_TORCHRUN:
        return None
    if choice:
        if os.path.basename(choice) != "torchrun" or not os.path.isabs(choice):
            raise OptionError(
                f"{TORCHRUN_ENV}={choice!r} must be {NODE_TORCHRUN!r} (the nodes' own torchrun) or the"
                " absolute path of a torchrun, e.g. /shared/venv/bin/torchrun"
            )
        if not os.access(choice, os.X_OK):
            raise OptionError(
                f"{TORCHRUN_ENV}={choice} is not an executable file on this machine, whose filesystem the"
                f" {scheduler} nodes share; fix the path, or set {TORCHRUN_ENV}={NODE_TORCHRUN} if only the"
                " nodes have it"
            )
        return os.path.dirname(choice)
    bindir = os.path.dirname(sys.executable)
    if os.access(os.path.join(bindir, "torchrun"), os.X_OK):
        return bindir
    if shutil.which("torchrun") is not None:  # the job inherits this PATH
        return None
    raise OptionError(
        f"a {scheduler} job runs torchrun from the submitting environment, but this python"
        f" ({sys.executable}) has no torchrun next to it and none is on PATH, so the job would fail on the"
        f" nodes with 'torchrun: command not found'. Run torchx from the environment that has torch (e.g."
        f" .venv/bin/torchx, or activate it), or set {TORCHRUN_ENV}=/path/to/torchrun (or"
        f" {TORCHRUN_ENV}={NODE_TORCHRUN} if the nodes provide their own)"
    )


# ---- memory per node (``--memMB``), from ranks x workers ------------------------------------
# Peak memory of one node of a transform job, measured with Slurm's accounting (sacct MaxRSS,
# jobacct_gather/linux: the summed RSS of the node's processes, what Slurm's OverMemoryKill
# enforces) on torch 2.13 CPU (docs/cluster.md "Memory per node"): the torchrun agent ~300 MB,
# each rank ~250 MB (torch itself), each forked worker (--num_workers > 1) ~175 MB.
MEM_AGENT_MB = 300
MEM_RANK_MB = 260
MEM_WORKER_MB = 180
MEM_HEADROOM = 1.5  # records in flight, the user's function and libraries
MEM_ROUND_MB = 256
META_MEM_FLOOR = "torchx_datapipes/mem_floor_mb"
_MEMORY_NOT_ENFORCED = frozenset({"ray"})  # TorchX's Ray actors get CPUs and GPUs, not memory


def memory_floor_mb(nproc_per_node: int, num_workers: int) -> int:
    """The measured fixed cost of one node: the agent, its ranks and their worker processes."""
    workers = num_workers if num_workers > 1 else 0  # one worker runs in the rank itself
    return MEM_AGENT_MB + nproc_per_node * (MEM_RANK_MB + workers * MEM_WORKER_MB)


def default_memory_mb(nproc_per_node: int, num_workers: int) -> int:
    """``--memMB`` when not given: the floor with headroom, rounded up to 256 MB."""
    want = memory_floor_mb(nproc_per_node, num_workers) * MEM_HEADROOM
    return int(-(-want // MEM_ROUND_MB) * MEM_ROUND_MB)


def check_memory(mem_mb: int, floor_mb: int, scheduler: Optional[str], given: str = "--memMB") -> None:
    """Refuse a job whose nodes get less memory than its measured floor, where memory is enforced."""
    if scheduler is None or Target(scheduler).uses_client_python or mem_mb <= 0 or mem_mb >= floor_mb:
        return
    if scheduler in _MEMORY_NOT_ENFORCED:
        return
    raise OptionError(
        f"{given} {mem_mb} is below the {floor_mb} MB that one node of this job needs before any data"
        f" (torchrun {MEM_AGENT_MB} MB + {MEM_RANK_MB} MB per rank + {MEM_WORKER_MB} MB per worker process"
        f" with --num_workers > 1, measured); {scheduler} would kill it out of memory. Raise --memMB"
        " (per node) or leave it unset (0: sized from -j and --num_workers), or run fewer ranks or workers"
        " per node"
    )


def oom_hint(handle: str, log_text: str = "") -> Optional[str]:
    """Why a job failed, when the scheduler reports it ran out of memory (Slurm), else None.

    Slurm reports ``OUT_OF_MEMORY`` in sacct when a memory cgroup killed a step, and writes
    ``exceeded memory limit`` into the step's log when its accounting (OverMemoryKill) did.
    """
    scheduler, _, rest = handle.partition("://")
    if scheduler != "slurm":
        return None
    job_id = rest.rsplit("/", 1)[-1]
    used = ""
    try:
        out = subprocess.run(
            ["sacct", "-n", "-P", "-j", job_id, "-o", "JobID,State,MaxRSS,ReqMem"],
            capture_output=True, text=True, timeout=30,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        out = ""
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) == 4 and parts[1].startswith("OUT_OF_MEMORY"):
            used = f"sacct: step {parts[0]} OUT_OF_MEMORY, MaxRSS {parts[2] or '?'} of {parts[3] or '?'}"
            break
    if not used:
        m = re.search(r"(StepId=\S+) exceeded memory limit \((\d+) > (\d+)\)", log_text)
        if m is None:
            return None
        rss, limit = int(m.group(2)) >> 20, int(m.group(3)) >> 20
        used = f"slurm: {m.group(1)} exceeded memory limit ({rss} MB > {limit} MB)"
    return (
        f"out of memory: raise --memMB ({used}). --memMB is the memory of one node, for its torchrun agent,"
        " every rank and every worker on it (see docs/cluster.md 'Memory per node')"
    )


# ---- Ray: a workspace TorchX may delete ------------------------------------------------------
_NOT_SHIPPED = (".git", ".venv", ".torchx", ".tdp", "__pycache__", "*.pyc")


def ray_workspace(image: str) -> str:
    """A fresh private directory for TorchX's Ray scheduler, which uploads ``role.image`` as the
    job's ``working_dir``, writes its driver into it and deletes it after submitting when it is
    under the temp dir. If ``image`` is a directory (code the job imports by name), it is copied
    in (without ``.git``, ``.venv``, ``.torchx``, ``.tdp``); the caller removes the copy."""
    path = tempfile.mkdtemp(prefix="tdp-ray-workspace-")
    if os.path.isdir(image):
        shutil.copytree(image, path, dirs_exist_ok=True, ignore=shutil.ignore_patterns(*_NOT_SHIPPED))
    return path


def check_ray_image(image: str, scheduler: Optional[str]) -> None:
    """Refuse ``--image`` a directory under the temp dir for Ray: TorchX would delete it."""
    if scheduler != "ray" or not os.path.isdir(image):
        return
    tmp = os.path.realpath(tempfile.gettempdir())
    if os.path.realpath(image).startswith(tmp + os.sep):
        raise OptionError(
            f"--image {image} is a directory under {tmp}, which TorchX's Ray scheduler deletes after"
            " submitting it as the job's working_dir. Keep --image unset and let torchx copy the workspace"
            " (--workspace DIR, the current directory by default), or use"
            " torchx_datapipes.api.run(app, 'ray'), which ships a private copy"
        )
