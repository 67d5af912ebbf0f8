"""Shared AppDef building for the components: ``dist.ddp`` plus what a data job needs.

We reuse TorchX's ``dist.ddp`` (rendezvous, ``-j`` parsing, resources, mounts) and add
torchrun's ``--max_restarts`` (ddp has none; ``local_cwd`` ignores ``max_retries``).
"""

import contextlib
import os
import shlex
import sys
from typing import Any, Dict, Iterator, List, Mapping, Optional

from torchx import specs
from torchx.components.dist import ddp
from torchx.specs.finder import ComponentValidationException

from torchx_datapipes import artifact
from torchx_datapipes.errors import DatapipesError
from torchx_datapipes.io.fs import check_io_disjoint, split_patterns
from torchx_datapipes.io.inputs.planning import check_input_formats
from torchx_datapipes.io.lease import refuse_if_held
from torchx_datapipes.io.manifest import has_success, success_url
from torchx_datapipes.options import SPECS, OptionError
from torchx_datapipes.secrets import mask_url, public_url

RUNNER_MODULE = "torchx_datapipes.runner"
META_OUTPUT = "torchx_datapipes/output"
META_OP = "torchx_datapipes/op"


class InvalidArgumentError(ComponentValidationException, ValueError):
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


def build_app(op: str, arguments: Mapping[str, Any]) -> specs.AppDef:
    """The AppDef of ``op`` from the component's arguments, every one checked here, before launch."""
    spec = SPECS[op]
    with client_checks():
        values = spec.check(arguments)
        validate_io(values["input"], values["output"], values["overwrite"])
        check_input_formats(values["input"], values["format"])
        validate_cache(values.get("cache"))
        if values.get("cache"):  # the secret goes to a 0600 file (or stays in the job's env), never on argv
            values["cache"] = public_url(values["cache"], values["artifact_store"] or default_store())
        fn_arg = fn_args(values["fn"], values["artifact_store"], values["backend"])
    args = [*spec.runner_args(values), *fn_arg]
    v = values
    return runner_app(
        op, args, v["output"], v["name"], v["image"], v["h"], v["cpu"], v["gpu"], v["memMB"], v["j"],
        v["env"],
        v["mounts"], v["rdzv_port"], v["max_restarts"], v["max_retries"],
    )  # fmt: skip


def default_store() -> str:
    """Where the client uploads artifacts for local runs (set ``artifact_store`` for clusters)."""
    return os.path.join(os.getcwd(), ".tdp", "artifacts")


def resolve_fn(fn: str, store: Optional[str], backend: str) -> artifact.ArtifactRef:
    """``--fn``: an artifact URL, ``file.py:fn`` or ``pkg.module:fn`` -> an uploaded artifact."""
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
    if backend == "module":
        return artifact.package(fn, store, backend="module")
    return artifact.package(artifact.resolve_spec(fn), store, backend=backend)


def _is_remote(url: str) -> bool:
    return "://" in url and not url.startswith("file://")


def validate_io(input: str, output: str, overwrite: bool) -> None:
    """Fail before launch when local inputs are missing or the output is already complete."""
    if not split_patterns(input):
        raise ValueError("--input is empty; pass a glob such as 'data/*.jsonl'")
    check_io_disjoint(split_patterns(input), output)
    if not _is_remote(output):
        refuse_if_held(output)
    if not overwrite and _complete(output):
        raise FileExistsError(
            f"{success_url(output)} exists: the output is complete. Pass --overwrite True to replace it"
        )


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
    # The client's interpreter directory goes first on PATH: on local schedulers torchrun and
    # python then come from the environment that built the job even if it is not activated;
    # elsewhere the directory does not exist and PATH lookup falls through to the image's.
    bindir = shlex.quote(os.path.dirname(sys.executable))
    restarts = f"--max_restarts {int(max_restarts)} " if max_restarts else ""
    role.args[-1] = f'PATH={bindir}:"$PATH" torchrun {restarts}{cmd[len("torchrun ") :]}'
    role.name = op
    app.metadata = {META_OUTPUT: output, META_OP: op}
    return app


def fn_args(fn: Optional[str], store: Optional[str], backend: str) -> List[str]:
    """Runner arguments for an optional ``--fn``."""
    if not fn:
        return []
    ref = resolve_fn(fn, store, backend)
    return ["--artifact", ref.url, "--sha256", ref.sha256]


def validate_cache(url: Optional[str]) -> None:
    """Check a ``--cache`` URL on the client (syntax, scheme, options) without opening it."""
    if not url:
        return
    from torchx_datapipes.cache.registry import CacheURL, cache_class
    from torchx_datapipes.secrets import SECRET_OPTIONS, split_credentials, strip_options

    cache_class(CacheURL.parse(strip_options(split_credentials(url)[0], SECRET_OPTIONS)).scheme)
