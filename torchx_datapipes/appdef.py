"""Shared AppDef building for the components: ``dist.ddp`` plus what a data job needs.

We reuse TorchX's ``dist.ddp`` (rendezvous, ``-j`` parsing, resources, mounts) and add
torchrun's ``--max_restarts`` (ddp has none; ``local_cwd`` ignores ``max_retries``).
What depends on where the job runs (the ``PATH`` prefix, local paths, uploading the function)
follows :func:`torchx_datapipes.target.current`; see docs/cluster.md.
"""

import contextlib
import os
import shlex
import sys
from typing import Any, Dict, Iterator, List, Mapping, Optional

from torchx import specs
from torchx.components.dist import ddp, parse_nnodes
from torchx.specs.finder import ComponentValidationException

from torchx_datapipes import artifact
from torchx_datapipes import target as _target
from torchx_datapipes.cluster import (
    META_MEM_FLOOR,
    META_RELATIVE,
    check_memory,
    check_ray_image,
    default_memory_mb,
    encode_relative,
    job_bindir,
    memory_floor_mb,
    place_paths,
)
from torchx_datapipes.errors import DatapipesError
from torchx_datapipes.formats.planning import check_input_formats
from torchx_datapipes.formats.registry import SHIPPED_ENV, check_format_options, shipped
from torchx_datapipes.formats.spec import encode_spec
from torchx_datapipes.io.fs import InputFile, check_disjoint, check_io_disjoint, split_patterns
from torchx_datapipes.io.lease import refuse_if_held
from torchx_datapipes.io.manifest import has_success, success_url
from torchx_datapipes.io.ownership import check_writable, refuse_foreign
from torchx_datapipes.ops import SPECS, get_op
from torchx_datapipes.options import OptionError
from torchx_datapipes.secrets import mask_url

RUNNER_MODULE = "torchx_datapipes.runner"
META_OUTPUT = "torchx_datapipes/output"
META_OP = "torchx_datapipes/op"
META_CLIENT_BIN = "torchx_datapipes/client_bin"  # the PATH prefix (local_cwd, slurm, lsf), when applied


class InvalidArgumentError(DatapipesError, ComponentValidationException, ValueError):
    """A component argument failed a client-side check; ``torchx run`` prints just this line."""


@contextlib.contextmanager
def client_checks() -> Iterator[None]:
    """Turn validation failures into one-line errors (no traceback from the TorchX CLI)."""
    try:
        yield
    except InvalidArgumentError:
        raise
    except (ValueError, TypeError, OSError, ImportError, AttributeError, DatapipesError) as e:
        name = "" if isinstance(e, OptionError) else f"{type(e).__name__}: "
        raise InvalidArgumentError(mask_url(f"{name}{e}")) from e


def component_doc(op: str) -> str:
    """The docstring of the ``components.py`` function of ``op`` (``OpDef.component_doc``)."""
    return get_op(op).component_doc()


def build_app(op: str, arguments: Mapping[str, Any]) -> specs.AppDef:
    """The AppDef of ``op`` from the component's arguments, every one checked here, before launch."""
    spec = SPECS[op]
    where = _target.current()
    relative: Dict[str, str] = {}
    with client_checks():
        values = place_paths(spec.check(arguments), where, relative)
        if "format" in values:
            check_format_options(values["format"], {
                "schema": bool(values["schema"]), "na_values": values["na_values"] is not None,
                "delimiter": bool(values["delimiter"]), "header": not values["header"],
            })  # fmt: skip
        ship = shipped([values.get("format"), values.get("output_format")])  # formats registered from code
        if ship:
            values["env"] = {**(values["env"] or {}), SHIPPED_ENV: ship}
        commit_dir = _commit_dir(op, values, where)  # --state for a queue --output (docs/queue.md)
        local = validate_io(values["input"], commit_dir, values["overwrite"], where.shares_client_fs)
        if local is not None:  # elsewhere local paths are the job's mounts: the runner checks them
            check_input_formats(values["input"], values["format"], files=local)
            if values.get("fields") and not values.get("fn"):  # stats --fields: names the input has
                from torchx_datapipes.stats.fieldcheck import check_local_fields

                fmt = encode_spec(values["format"], values["schema"] or "", values["na_values"],
                                  values["delimiter"] or "", values["header"])  # fmt: skip
                check_local_fields(values["fields"], local, fmt, values["unit_mb"])
        validate_cache(values.get("cache"))
        if values.get("cache"):  # secrets (password, HMAC key) go to 0600 files or the job's env, never argv
            from torchx_datapipes.cache.shipping import public_cache_url

            values["cache"] = public_cache_url(values["cache"], values["artifact_store"] or default_store())
        fn_arg = fn_args(
            values.get("fn"), values.get("artifact_store"), values.get("backend", "cloudpickle"), where.dryrun
        )
    args = [*spec.runner_args(values), *fn_arg]
    v = values
    nproc = parse_nnodes(v["j"])[2]
    floor = memory_floor_mb(nproc, int(v.get("num_workers") or 1))
    if not v["memMB"]:
        v["memMB"] = default_memory_mb(nproc, int(v.get("num_workers") or 1))
    app = runner_app(
        op, args, commit_dir, v["name"], v["image"], v["h"], v["cpu"], v["gpu"], v["memMB"], v["j"],
        v["env"],
        v["mounts"], v["rdzv_port"], v["max_restarts"], v["max_retries"],
    )  # fmt: skip
    app.metadata[META_MEM_FLOOR] = str(floor)
    with client_checks():
        check_ray_image(v["image"], where.scheduler)
        if v["h"] is None:  # a named resource brings its own memory
            check_memory(v["memMB"], floor, where.scheduler)
    if relative and where.scheduler is None:  # for api.run's check (cluster.check_scheduler)
        app.metadata[META_RELATIVE] = encode_relative(relative)
    if where.uses_client_python:
        return app
    with client_checks():
        return for_scheduler(app, where.scheduler)


def _commit_dir(op: str, values: Dict[str, Any], where: _target.Target) -> str:
    """Where the job commits: ``--output``, or ``--state`` when the output is a message queue."""
    if op != "transform":
        return str(values["output"])
    from torchx_datapipes.queue.client import prepare_output

    store = values["artifact_store"] or default_store()
    return prepare_output(values, where.shares_client_fs, where.dryrun, store)


def default_store() -> str:
    """Where the client uploads artifacts for local runs (set ``artifact_store`` for clusters)."""
    return os.path.join(os.getcwd(), ".tdp", "artifacts")


def resolve_fn(fn: str, store: Optional[str], backend: str, dryrun: bool = False) -> artifact.ArtifactRef:
    """``--fn``: an artifact URL, ``file.py:fn`` or ``pkg.module:fn`` -> an uploaded artifact.

    A dry run packages and hashes the function but uploads nothing; an upload to a remote store
    is announced on stderr first, and a failed one is a one-line error naming the store and the fix.
    """
    store = store or default_store()
    if artifact.is_artifact_url(fn):
        if not _is_remote(fn) and not os.path.exists(fn):
            raise FileNotFoundError(f"--fn artifact {fn} does not exist; package it with artifact.package()")
        sha = artifact.sha256_of_url(fn)
        return artifact.ArtifactRef(url=fn, sha256=sha, backend="?", python="", torch="", cloudpickle="")
    if ":" not in fn:
        raise ValueError(
            f"--fn {fn!r} must look like my_file.py:clean, my_pkg.module:clean or an artifact URL"
        )
    if os.getcwd() not in sys.path:  # like `python -m`: the user's project modules resolve from the cwd
        sys.path.insert(0, os.getcwd())
    obj = fn if backend == "module" else artifact.resolve_spec(fn)
    announced: List[artifact.ArtifactRef] = []

    def announce(ref: artifact.ArtifactRef, nbytes: int) -> None:
        announced.append(ref)
        what = f"fn {fn} -> {mask_url(ref.url)} (sha256 {ref.sha256}, {nbytes} bytes)"
        if dryrun:
            print(f"torchx_datapipes: dry run: packaged {what}; not uploaded", file=sys.stderr)
        elif _is_remote(ref.url):
            print(f"torchx_datapipes: uploading {what}", file=sys.stderr)

    try:
        return artifact.package(obj, store, backend=backend, upload=not dryrun, before_upload=announce)
    except Exception as e:
        if not announced:  # packaging itself failed: the backend's own message says why
            raise
        raise InvalidArgumentError(_upload_failure(announced[0].url, store, e)) from e


def _upload_failure(url: str, store: str, e: Exception) -> str:
    fix = "give this machine write access to it"
    if store.startswith("s3://"):
        fix += (
            " (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE; AWS_ENDPOINT_URL for a non-AWS"
            " endpoint)"
        )
    return mask_url(
        f"could not upload the fn artifact to {url}: {type(e).__name__}: {e}. {fix[0].upper()}{fix[1:]},"
        " or pass --artifact_store a store this machine can write and every node can read"
        " (--dryrun uploads nothing)"
    )


def _is_remote(url: str) -> bool:
    return "://" in url and not url.startswith("file://")


def validate_io(input: str, output: str, overwrite: bool, local_fs: bool = True) -> Optional[List[InputFile]]:
    """Fail before launch when local inputs are missing or the output is complete, unwritable or not ours.

    With ``local_fs=False`` (a job that does not see this machine's files) local paths are the
    job's (mounts), so they are compared by their roots, not listed or opened here, and None is
    returned; else the local input files, listed once for every client check.
    """
    if not split_patterns(input):
        raise ValueError("--input is empty; pass a glob such as 'data/*.jsonl'")
    if not local_fs:
        check_disjoint([], output, split_patterns(input))
        if not overwrite and _is_remote(output) and _complete(output):
            raise FileExistsError(
                f"{success_url(output)} exists: the output is complete. Pass --overwrite True to replace it"
            )
        return None
    files = check_io_disjoint(split_patterns(input), output)
    if not _is_remote(output):
        check_writable(output)  # creatable and writable by this user
        refuse_if_held(output)
        refuse_foreign(output, overwrite)  # nothing in it that we did not write
    if not overwrite and _complete(output):
        raise FileExistsError(
            f"{success_url(output)} exists: the output is complete. Pass --overwrite True to replace it"
        )
    return files


def _complete(output: str) -> bool:
    """Whether ``output`` has ``_SUCCESS``; remote stores we cannot reach from here are left to the runner."""
    if not _is_remote(output):
        return has_success(output)
    try:
        return has_success(output)
    except Exception:  # no credentials/network on the client: the runner refuses it at start instead
        return False


def runner_app(
    op: str,
    runner_args: List[str],
    output: str,
    name: str,
    image: str,
    h: Optional[str],
    cpu: int,
    gpu: int,
    memMB: int,
    j: str,
    env: Optional[Dict[str, str]],
    mounts: Optional[List[str]],
    rdzv_port: int,
    max_restarts: int,
    max_retries: int,
) -> specs.AppDef:
    env = dict(env or {})
    env.setdefault("PYTHONUNBUFFERED", "1")
    # Per-round worker stores when there can be more than one agent: with torch's shared agent store
    # an agent joining an elastic job in a later round hangs on MASTER_ADDR (see runner/dist.py). One
    # node keeps torch's default: the agent's store is up before the ranks start, whereas a store
    # hosted by rank 0 makes the other ranks retry their connection (up to ~0.4 s of a job here).
    if parse_nnodes(j)[1] > 1:
        env.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    app = ddp(
        op,
        *runner_args,
        m=RUNNER_MODULE,
        image=image,
        name=name,
        h=h,
        cpu=cpu,
        gpu=gpu,
        memMB=memMB,
        j=j,
        env=env,
        max_retries=max_retries,
        rdzv_port=rdzv_port,
        mounts=mounts,
    )
    role = app.roles[0]
    cmd = role.args[-1]
    assert cmd.startswith("torchrun "), cmd
    restarts = f"--max_restarts {int(max_restarts)} " if max_restarts else ""
    role.args[-1] = f"torchrun {restarts}{cmd[len('torchrun ') :]}"
    role.name = op
    app.metadata = {META_OUTPUT: output, META_OP: op}
    return for_scheduler(app, "local_cwd")


def _path_prefix(bindir: str) -> str:
    return f'PATH={shlex.quote(bindir)}:"$PATH" '


def for_scheduler(app: specs.AppDef, scheduler: Optional[str]) -> specs.AppDef:
    """Which ``torchrun`` the job runs: a ``PATH`` prefix where the client's can be seen.

    On local_cwd the client's interpreter directory goes first on ``PATH``, so torchrun and
    python come from the environment that built the job even when it is not activated
    (``.venv/bin/torchx run -s local_cwd ...``). Slurm and LSF nodes share the client's filesystem
    and run the job with its environment: the client's torchrun goes first there too, unless
    ``TORCHX_DATAPIPES_TORCHRUN`` says otherwise, and a job whose torchrun the nodes cannot find is
    refused here (:func:`torchx_datapipes.cluster.job_bindir`). Every other scheduler runs the
    image's torchrun: the client's path would mean nothing there, so it is not baked into the
    spec. Idempotent; changes ``app`` in place and returns it.
    """
    role = app.roles[0]
    old = app.metadata.pop(META_CLIENT_BIN, None)
    if old is not None and role.args[-1].startswith(_path_prefix(old)):
        role.args[-1] = role.args[-1][len(_path_prefix(old)) :]
    where = _target.Target(scheduler)
    bindir: Optional[str] = None
    if where.uses_client_python:
        bindir = os.path.dirname(sys.executable)
    elif where.shares_client_fs:
        bindir = job_bindir(str(scheduler))
    if bindir is not None:
        role.args[-1] = _path_prefix(bindir) + role.args[-1]
        app.metadata[META_CLIENT_BIN] = bindir
    return app


def fn_args(fn: Optional[str], store: Optional[str], backend: str, dryrun: bool = False) -> List[str]:
    """Runner arguments for an optional ``--fn`` (packaged but not uploaded on a dry run)."""
    if not fn:
        return []
    ref = resolve_fn(fn, store, backend, dryrun)
    return ["--artifact", ref.url, "--sha256", ref.sha256]


def validate_cache(url: Optional[str]) -> None:
    """Check a ``--cache`` URL on the client (syntax, scheme, options) without opening it."""
    if not url:
        return
    from torchx_datapipes.cache.registry import CacheURL, cache_class
    from torchx_datapipes.secrets import SECRET_OPTIONS, split_credentials, strip_options

    cache_class(CacheURL.parse(strip_options(split_credentials(url)[0], SECRET_OPTIONS)).scheme)
