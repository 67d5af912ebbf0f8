"""Python API: live callables to AppDefs, and ``run()`` that waits and returns the manifest.

from torchx_datapipes import api
app = api.transform(lambda r: {**r, "n": len(r["text"].split())}, input="data/*.jsonl",
                    output="out/n", j="1x2")
result = api.run(app)          # local_cwd by default; raises JobFailedError on failure
result.manifest["records_out"]
"""

import dataclasses
import os
import re
import shutil
import signal
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Union

from torchx import specs

from torchx_datapipes import artifact, components
from torchx_datapipes.appdef import META_OP, META_OUTPUT, build_app, default_store, for_scheduler
from torchx_datapipes.cluster import META_MEM_FLOOR, check_memory, check_scheduler, oom_hint, ray_workspace
from torchx_datapipes.errors import DatapipesError
from torchx_datapipes.io.fs import join, join_patterns, read_bytes
from torchx_datapipes.io.manifest import read_manifest
from torchx_datapipes.kinds import FnKind, kind_of
from torchx_datapipes.ops import builtin_op_names
from torchx_datapipes.ops.defaults import config_dirs, with_defaults

Fn = Union[Callable[..., Any], str]


class JobFailedError(DatapipesError):
    """The job ended in a state other than SUCCEEDED; the message carries the job's error."""


@dataclass(frozen=True)
class RunResult:
    app_handle: str
    state: str
    output: Optional[str]
    manifest: Optional[Dict[str, Any]]
    log_dir: Optional[str]
    result: Optional[Dict[str, Any]] = None  # parsed stats.json for stats jobs

    @property
    def status(self) -> str:
        """The final state, e.g. ``SUCCEEDED`` (same as ``state``)."""
        return self.state

    @property
    def stats(self) -> Optional[Dict[str, Any]]:
        """The parsed ``stats.json`` of a stats job (same as ``result``)."""
        return self.result

    @property
    def succeeded(self) -> bool:
        return self.state == "SUCCEEDED"


def _fn_arg(fn: Fn, artifact_store: Optional[str], backend: str) -> str:
    """A live callable is packaged here; strings pass through to the component."""
    if isinstance(fn, str):
        return fn
    ref = artifact.package(fn, artifact_store or default_store(), backend=backend)
    return ref.url


def _given(**kwargs: Any) -> Dict[str, Any]:
    """The arguments the caller passed (``None`` means "not passed" for the API's own defaults)."""
    return {k: v for k, v in kwargs.items() if v is not None}


def transform(
    fn: Fn,
    input: Union[str, List[str]],
    output: str,
    j: Optional[str] = None,
    artifact_store: Optional[str] = None,
    backend: Optional[str] = None,
    **kwargs: Any,
) -> specs.AppDef:
    """Build the transform AppDef; ``fn`` may be a live callable (lambda, closure, ...).

    ``cache="redis://host:6379/0"`` (or memcached://, sqlite:///path, memory://) memoizes a
    per-record ``fn`` keyed by (function sha256, record); see ``components.transform``.
    Arguments not passed come from ``[component:datapipes.transform]`` in ``.torchxconfig``
    (as with ``torchx run``), then from the component's defaults.
    """
    given = _given(j=j, artifact_store=artifact_store, backend=backend)
    args = with_defaults("transform", {"input": _inputs(input), "output": output, **given, **kwargs})
    args.pop("fn", None)
    cache = args.get("cache")
    if cache is not None and not isinstance(cache, str):
        raise TypeError(
            f"cache= takes a cache URL string (e.g. 'redis://host:6379/0?namespace=x'), got"
            f" {type(cache).__name__}: every rank opens the cache from the URL"
        )
    if cache and callable(fn) and kind_of(fn) is not FnKind.RECORD:
        raise ValueError(
            f"cache= memoizes per-record functions, but {getattr(fn, '__qualname__', fn)!r} is a"
            f" {kind_of(fn).value} function; drop cache= or cache inside the function"
        )
    fn_arg = _fn_arg(fn, args.get("artifact_store"), args.get("backend") or "cloudpickle")
    return components.transform(fn=fn_arg, **args)


def run(
    app: specs.AppDef,
    scheduler: str = "local_cwd",
    cfg: Optional[Dict[str, Any]] = None,
    wait: bool = True,
    log_dir: Optional[str] = None,
) -> RunResult:
    """Submit ``app``; by default wait and return the manifest, raising ``JobFailedError`` on failure.

    Scheduler options come from ``cfg`` then ``.torchxconfig`` in the working directory.
    Logs go to ``log_dir`` (default ``.torchx/logs``) for local schedulers.
    """
    from torchx.runner import get_runner
    from torchx.runner.config import apply

    cfg = dict(cfg or {})
    if log_dir:
        cfg["log_dir"] = log_dir
    apply(scheduler, cfg, dirs=config_dirs())  # torchx's default dirs are fixed at its import
    if scheduler.startswith("local"):
        cfg.setdefault("log_dir", os.path.abspath(os.path.join(".torchx", "logs")))
    output = app.metadata.get(META_OUTPUT)
    check_scheduler(app.metadata, scheduler)  # client-relative paths: refused where the job cannot see them
    for_scheduler(app, scheduler)  # the client's torchrun on PATH where the job can see it
    if app.metadata.get(META_MEM_FLOOR):
        check_memory(app.roles[0].resource.memMB, int(app.metadata[META_MEM_FLOOR]), scheduler)
    # TorchX's Ray scheduler ships role.image (a directory) as the job's working_dir, writes into it
    # and deletes it after submitting if it is under the temp dir: give it a private copy we own.
    workspace = ray_workspace(app.roles[0].image) if scheduler == "ray" else None
    handlers = _signal_handlers()
    try:
        if workspace is not None:
            app = dataclasses.replace(app, roles=[dataclasses.replace(app.roles[0], image=workspace)])
        with get_runner() as runner:
            handle = runner.run(app, scheduler, cfg=cfg)
            if not wait:
                return RunResult(handle, "SUBMITTED", output, None, cfg.get("log_dir"))
            status = runner.wait(handle, wait_interval=0.5)
            state = status.state.name if status is not None else "UNKNOWN"
            if state != "SUCCEEDED":
                raise JobFailedError(_failure_message(runner, handle, state, status, cfg.get("log_dir")))
    finally:
        if wait:
            _restore_signal_handlers(handlers)
        if workspace is not None:
            shutil.rmtree(workspace, ignore_errors=True)
    manifest = read_manifest(output) if output else None
    result = None
    if output and app.metadata.get(META_OP) in ("stats", "validate"):
        import orjson

        result = orjson.loads(read_bytes(join(output, "stats.json")))
    return RunResult(handle, state, output, manifest, cfg.get("log_dir"), result)


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _signal_handlers() -> Dict[int, Any]:
    return {s: signal.getsignal(s) for s in _STOP_SIGNALS}


def _restore_signal_handlers(handlers: Dict[int, Any]) -> None:
    """Give the caller its SIGTERM/SIGINT handlers back after a waited run.

    TorchX's local scheduler installs handlers that raise ``SignalException`` (an ``Exception``) in
    the submitting process, to stop its children, and never removes them. Left in place, they are
    inherited by the caller's forked processes: a ``multiprocessing.Pool`` worker then swallows the
    SIGTERM of ``Pool.terminate()`` (its task loop catches ``Exception``), and the pool's exit hangs.
    After ``wait=True`` the job's processes are gone, so the handlers have nothing left to stop. With
    ``wait=False`` they stay: they still stop the running job's processes.
    """
    if threading.current_thread() is not threading.main_thread():
        return  # signal.signal works in the main thread only (and torchx installs nothing elsewhere)
    for sig, handler in handlers.items():
        if handler is not None and signal.getsignal(sig) is not handler:
            signal.signal(sig, handler)


def _error_text(structured: str) -> str:
    """The message of torch elastic's error file (``{"message": {"message": ...}}``), else the raw text."""
    if not structured or structured == "<NONE>":
        return ""
    try:
        import json

        msg = json.loads(structured)["message"]
        return str(msg["message"] if isinstance(msg, dict) else msg)
    except (ValueError, KeyError, TypeError):
        return structured


_RANK_ERROR = re.compile(r"^(?P<prefix>.*?)torchx_datapipes: rank \d+ failed: ")
_TORCH_LOG = re.compile(r"^[WEI]\d{4} \d")  # torch's own log lines (torchrun, after the rank exits)


def rank_error(lines: List[str]) -> str:
    """The first error a rank printed with ``runner.main.print_error`` (its tee prefix removed), or ''."""
    for i, line in enumerate(lines):
        m = _RANK_ERROR.match(line)
        if m is None:
            continue
        prefix = m.group("prefix")
        block = [line[len(prefix) :].rstrip("\n")]
        for nxt in lines[i + 1 : i + 200]:
            if (prefix and not nxt.startswith(prefix)) or (not prefix and _TORCH_LOG.match(nxt)):
                break
            rest = nxt[len(prefix) :].rstrip("\n")
            if prefix and _TORCH_LOG.match(rest):
                break
            block.append(rest)
        return "\n".join(block).rstrip()
    return ""


def _failure_message(runner: Any, handle: str, state: str, status: Any, log_dir: Optional[str]) -> str:
    msg = f"job {handle} ended {state}"
    if status is not None and getattr(status, "msg", "") not in ("", "<NONE>"):
        msg += f": {status.msg}"
    errors = []
    top = _error_text(str(getattr(status, "structured_error_msg", "") or ""))
    if top:
        errors.append(top)
    for role in getattr(status, "roles", []) or []:
        for rep in getattr(role, "replicas", []) or []:
            err = _error_text(str(getattr(rep, "structured_error_msg", "") or ""))
            if err and err not in errors:
                errors.append(err)
    try:
        role = runner.describe(handle).roles[0].name
        lines = list(runner.log_lines(handle, role, k=0, streams=None))
    except Exception:  # logs are a courtesy; the state above is the truth
        lines = []
    ours = rank_error(lines)
    if ours:  # our own error, printed once by the rank (its one-line summary is in ``errors``)
        msg += "\n" + ours
    else:
        if errors:
            msg += "\n" + "\n".join(errors[:2])
        if lines:
            msg += "\n--- last log lines ---\n" + "".join(lines[-30:])
    hint = oom_hint(handle, "".join(lines))
    if hint:
        msg = f"{msg.splitlines()[0]}\n{hint}\n" + "\n".join(msg.splitlines()[1:])
    if log_dir:
        msg += f"\nlogs: {log_dir}"
    return msg


def _csv(value: Any) -> Any:
    """Python-friendly forms of the CLI's compact strings: lists/tuples and dicts become ``a,b`` / ``k=v``."""
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return value


def _inputs(input: Union[str, List[str]]) -> str:
    """A list of inputs as ``--input`` takes it: a comma inside a name is escaped (``\\,``)."""
    if isinstance(input, (list, tuple)):
        return join_patterns([str(p) for p in input])
    return str(input)


def _optional_fn(op: str, fn: Optional[Fn], given: Dict[str, Any]) -> Dict[str, Any]:
    """The component arguments of split/stats: ``.torchxconfig`` defaults, then the caller's
    arguments in their CLI form (``key=["a", "b"]``, ``fields=[...]`` work too), and ``fn``
    packaged if it is live."""
    args = with_defaults(op, {k: _csv(v) for k, v in given.items()})
    if fn is not None:
        args["fn"] = _fn_arg(fn, args.get("artifact_store"), args.get("backend") or "cloudpickle")
    return args


def app(
    op: str,
    input: Union[str, List[str]],
    output: str,
    fn: Optional[Fn] = None,
    **kwargs: Any,
) -> specs.AppDef:
    """Build the AppDef of any op the registry knows (``torchx_datapipes.ops``): a built-in one, one
    registered with ``register_op`` or one from a plug-in's entry point, e.g.
    ``api.run(api.app("dedup", "data/*.jsonl", "out/dedup", threshold=0.8))``.

    Arguments are the op's options (its component's, in Python forms: lists and dicts work for the
    CLI's ``a,b`` and ``k=v`` strings); arguments not passed come from ``[component:datapipes.OP]``
    in ``.torchxconfig``, then from the op's defaults; ``fn`` may be a live callable. A built-in op
    goes through its component function (``components.py``), any other through the same builder.
    """
    args = _optional_fn(op, fn, {"input": _inputs(input), "output": output, **kwargs})
    if op in builtin_op_names():
        return getattr(components, op)(**args)  # type: ignore[no-any-return]
    return build_app(op, args)


def split(
    input: Union[str, List[str]],
    output: str,
    fractions: Union[str, Dict[str, float], None] = None,
    fn: Optional[Fn] = None,
    j: Optional[str] = None,
    artifact_store: Optional[str] = None,
    backend: Optional[str] = None,
    **kwargs: Any,
) -> specs.AppDef:
    """Build the split AppDef; ``fn`` (optional) may be a live callable applied before splitting.

    Arguments not passed come from ``[component:datapipes.split]`` in ``.torchxconfig``, then
    from the component's defaults (``fractions`` train=0.8,val=0.1,test=0.1).
    """
    given = _given(fractions=fractions, j=j, artifact_store=artifact_store, backend=backend)
    return app("split", input, output, fn, **given, **kwargs)


def stats(
    input: Union[str, List[str]],
    output: str,
    fn: Optional[Fn] = None,
    j: Optional[str] = None,
    artifact_store: Optional[str] = None,
    backend: Optional[str] = None,
    **kwargs: Any,
) -> specs.AppDef:
    """Build the stats AppDef; ``api.run(app).result`` is the parsed stats.json.

    Arguments not passed come from ``[component:datapipes.stats]`` in ``.torchxconfig``, then
    from the component's defaults.
    """
    given = _given(j=j, artifact_store=artifact_store, backend=backend)
    return app("stats", input, output, fn, **given, **kwargs)


def validate(
    input: Union[str, List[str]],
    output: str,
    schema: str,
    baseline: Optional[str] = None,
    fail_on: Optional[str] = None,
    j: Optional[str] = None,
    **kwargs: Any,
) -> specs.AppDef:
    """Build the validate AppDef (docs/validate.md): ``api.run`` raises ``JobFailedError`` listing the
    anomalies when one reaches ``fail_on``; OUTPUT/anomalies.json and report.html are written either way.

    Arguments not passed come from ``[component:datapipes.validate]`` in ``.torchxconfig``, then
    from the component's defaults.
    """
    given = _given(baseline=baseline, fail_on=fail_on, j=j)
    return app("validate", input, output, schema=schema, **given, **kwargs)


def tokenize(
    input: Union[str, List[str]],
    output: str,
    tokenizer: str,
    fn: Optional[Fn] = None,
    j: Optional[str] = None,
    **kwargs: Any,
) -> specs.AppDef:
    """Build the tokenize AppDef (docs/tokenize.md): Megatron ``.bin``/``.idx`` shards of ``--field``;
    ``api.run(app).manifest["tokens"]`` is the token count. Read them with ``data.TokenDataset``.

    Arguments not passed come from ``[component:datapipes.tokenize]`` in ``.torchxconfig``, then
    from the component's defaults.
    """
    return app("tokenize", input, output, fn, tokenizer=tokenizer, **_given(j=j), **kwargs)


def dedup(
    input: Union[str, List[str]],
    output: str,
    method: Optional[str] = None,
    threshold: Optional[float] = None,
    action: Optional[str] = None,
    fn: Optional[Fn] = None,
    j: Optional[str] = None,
    **kwargs: Any,
) -> specs.AppDef:
    """Build the dedup AppDef (docs/dedup.md): near (``method="near"``, MinHash LSH verified by exact
    Jaccard at ``threshold``) or exact duplicates, dropped or annotated (``action``);
    ``api.run(app).manifest["dedup"]`` holds the counts.

    Arguments not passed come from ``[component:datapipes.dedup]`` in ``.torchxconfig``, then from
    the component's defaults (near, 0.8, drop).
    """
    given = _given(method=method, threshold=threshold, action=action, j=j)
    return app("dedup", input, output, fn, **given, **kwargs)


def decontaminate(
    input: Union[str, List[str]],
    output: str,
    reference: Union[str, List[str]],
    ngram: Optional[int] = None,
    fn: Optional[Fn] = None,
    j: Optional[str] = None,
    **kwargs: Any,
) -> specs.AppDef:
    """Build the decontaminate AppDef (docs/dedup.md): drop every input record sharing a word n-gram
    (``ngram`` words, default 13) with a ``reference`` record; ``api.run(app).manifest["decontaminate"]``
    holds the counts.

    Arguments not passed come from ``[component:datapipes.decontaminate]`` in ``.torchxconfig``, then
    from the component's defaults.
    """
    return app(
        "decontaminate", input, output, fn, reference=_inputs(reference), **_given(ngram=ngram, j=j), **kwargs
    )
