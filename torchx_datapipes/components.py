"""TorchX components of torchx_datapipes: ``transform``, ``split``, ``stats``, ``validate``, ``tokenize``,
``dedup`` and ``decontaminate``.

Run them with ``torchx run -s local_cwd torchx_datapipes.components:transform --help``
(or the short names ``datapipes.transform`` ...). Each returns an AppDef that launches the
generic runner (``python -m torchx_datapipes.runner``) under torchrun, so the same job runs
on local_cwd, Kubernetes, Slurm and every other TorchX scheduler.

What depends on the scheduler is decided by the client (docs/cluster.md): the client's venv goes
on ``PATH`` where the job sees it (``local_cwd``, and Slurm/LSF, whose nodes share the filesystem);
``--memMB`` defaults to a size derived from ranks x workers; relative local paths are made
absolute where the job shares the client's filesystem (local_cwd, Slurm, LSF) and refused
elsewhere (Kubernetes, Docker, Batch ...: cluster jobs need URLs every node can reach, e.g.
``s3://``, and ``--artifact_store``); ``--dryrun`` packages the function but uploads nothing.
The image must contain torch and this package (``examples/Dockerfile``).

TorchX executes this file's source, so it uses absolute imports only and must not use
``from __future__ import annotations``.

Every argument is checked on the client before anything launches, against the option spec in
``torchx_datapipes.ops`` (one declarative spec per op, in its op module). Each function here is only
the signature TorchX reads from this file (``tests/test_options.py`` checks it against the spec); its
docstring, TorchX's ``--help``, is written from the op's ``doc`` and option help
(``OpDef.component_doc``). Bool options are typed ``str`` on purpose: TorchX
would turn ``--overwrite yes`` into ``False`` itself (``torchx.util.types.decode`` compares with
"true"), so the spec parses true/false/1/0/yes/no and refuses anything else.
"""

from typing import Dict, List, Optional

import torchx
from torchx import specs

import torchx_datapipes.appdef as _appdef
import torchx_datapipes.ops.decontaminate as _decontaminate
import torchx_datapipes.ops.tokenize as _tokenize

# TorchX execs this file inside ``torchx.specs.finder``'s own globals for ``components.py:NAME``
# paths, where the finder's linter is a function named ``validate(path, function_name)``: our
# ``validate`` component would replace it for the rest of the process (the next lint then fails
# with "missing argument 'schema'"). Keep the linter to hand it back its own calls (see the end).
_FINDER_LINTER = None
if __name__ == "torchx.specs.finder":  # pragma: no cover - only inside TorchX's exec
    _FINDER_LINTER = getattr(globals().get("validate"), "_tdp_linter", globals().get("validate"))


def transform(
    fn: str,
    input: str,
    output: str,
    format: str = "auto",
    output_format: str = "jsonl",
    schema: Optional[str] = None,
    na_values: Optional[str] = None,
    delimiter: Optional[str] = None,
    header: str = "True",
    num_workers: int = 1,
    assign: str = "dynamic",
    batch_size: int = 1024,
    on_error: str = "raise",
    max_error_rate: float = 0.1,
    max_restarts: int = 0,
    overwrite: str = "False",
    artifact_store: Optional[str] = None,
    backend: str = "cloudpickle",
    unit_mb: float = 64.0,
    max_record_mb: float = 64.0,
    cache: Optional[str] = None,
    state: Optional[str] = None,
    max_backlog: int = 1000,
    name: str = "/transform",
    image: str = torchx.IMAGE,
    h: Optional[str] = None,
    cpu: int = 2,
    gpu: int = 0,
    memMB: int = 0,
    j: str = "1x2",
    env: Optional[Dict[str, str]] = None,
    mounts: Optional[List[str]] = None,
    rdzv_port: int = 29500,
    max_retries: int = 0,
) -> specs.AppDef:
    return _appdef.build_app("transform", locals())


transform.__doc__ = _appdef.component_doc("transform")


def split(
    input: str,
    output: str,
    fractions: str = "train=0.8,val=0.1,test=0.1",
    key: Optional[str] = None,
    method: str = "hash",
    stratify: Optional[str] = None,
    seed: int = 0,
    fn: Optional[str] = None,
    format: str = "auto",
    output_format: str = "jsonl",
    schema: Optional[str] = None,
    na_values: Optional[str] = None,
    delimiter: Optional[str] = None,
    header: str = "True",
    num_workers: int = 1,
    assign: str = "dynamic",
    batch_size: int = 1024,
    on_error: str = "raise",
    max_error_rate: float = 0.1,
    max_restarts: int = 0,
    overwrite: str = "False",
    artifact_store: Optional[str] = None,
    backend: str = "cloudpickle",
    unit_mb: float = 64.0,
    max_record_mb: float = 64.0,
    name: str = "/split",
    image: str = torchx.IMAGE,
    h: Optional[str] = None,
    cpu: int = 2,
    gpu: int = 0,
    memMB: int = 0,
    j: str = "1x2",
    env: Optional[Dict[str, str]] = None,
    mounts: Optional[List[str]] = None,
    rdzv_port: int = 29500,
    max_retries: int = 0,
) -> specs.AppDef:
    return _appdef.build_app("split", locals())


split.__doc__ = _appdef.component_doc("split")


def stats(
    input: str,
    output: str,
    fields: Optional[str] = None,
    quantiles: str = "0.01,0.05,0.25,0.5,0.75,0.95,0.99",
    top_k: int = 20,
    bins: int = 30,
    fn: Optional[str] = None,
    format: str = "auto",
    schema: Optional[str] = None,
    na_values: Optional[str] = None,
    delimiter: Optional[str] = None,
    header: str = "True",
    num_workers: int = 1,
    assign: str = "dynamic",
    batch_size: int = 4096,
    on_error: str = "raise",
    max_error_rate: float = 0.1,
    max_restarts: int = 0,
    overwrite: str = "False",
    artifact_store: Optional[str] = None,
    backend: str = "cloudpickle",
    unit_mb: float = 64.0,
    max_record_mb: float = 64.0,
    name: str = "/stats",
    image: str = torchx.IMAGE,
    h: Optional[str] = None,
    cpu: int = 2,
    gpu: int = 0,
    memMB: int = 0,
    j: str = "1x2",
    env: Optional[Dict[str, str]] = None,
    mounts: Optional[List[str]] = None,
    rdzv_port: int = 29500,
    max_retries: int = 0,
) -> specs.AppDef:
    return _appdef.build_app("stats", locals())


stats.__doc__ = _appdef.component_doc("stats")


def validate(
    input: str,
    output: str,
    schema: str,
    baseline: Optional[str] = None,
    fail_on: str = "error",
    fn: Optional[str] = None,
    format: str = "auto",
    na_values: Optional[str] = None,
    delimiter: Optional[str] = None,
    header: str = "True",
    num_workers: int = 1,
    assign: str = "dynamic",
    batch_size: int = 4096,
    on_error: str = "raise",
    max_error_rate: float = 0.1,
    max_restarts: int = 0,
    overwrite: str = "False",
    artifact_store: Optional[str] = None,
    backend: str = "cloudpickle",
    unit_mb: float = 64.0,
    max_record_mb: float = 64.0,
    name: str = "/validate",
    image: str = torchx.IMAGE,
    h: Optional[str] = None,
    cpu: int = 2,
    gpu: int = 0,
    memMB: int = 0,
    j: str = "1x2",
    env: Optional[Dict[str, str]] = None,
    mounts: Optional[List[str]] = None,
    rdzv_port: int = 29500,
    max_retries: int = 0,
) -> specs.AppDef:
    return _appdef.build_app("validate", locals())


validate.__doc__ = _appdef.component_doc("validate")


def tokenize(
    input: str,
    output: str,
    tokenizer: Optional[str] = None,
    field: str = "text",
    eos: Optional[str] = None,
    dtype: str = "auto",
    shard_mb: float = 1024.0,
    fn: Optional[str] = None,
    format: str = "auto",
    schema: Optional[str] = None,
    na_values: Optional[str] = None,
    delimiter: Optional[str] = None,
    header: str = "True",
    num_workers: int = 1,
    assign: str = "dynamic",
    batch_size: int = 1024,
    on_error: str = "raise",
    max_error_rate: float = 0.1,
    max_restarts: int = 0,
    overwrite: str = "False",
    artifact_store: Optional[str] = None,
    backend: str = "cloudpickle",
    unit_mb: float = 64.0,
    max_record_mb: float = 64.0,
    name: str = "/tokenize",
    image: str = torchx.IMAGE,
    h: Optional[str] = None,
    cpu: int = 2,
    gpu: int = 0,
    memMB: int = 0,
    j: str = "1x2",
    env: Optional[Dict[str, str]] = None,
    mounts: Optional[List[str]] = None,
    rdzv_port: int = 29500,
    max_retries: int = 0,
) -> specs.AppDef:
    with _appdef.client_checks():
        arguments = _tokenize.check_together(locals())  # --eos and --dtype against the tokenizer
    return _appdef.build_app("tokenize", arguments)


tokenize.__doc__ = _appdef.component_doc("tokenize")


def dedup(
    input: str,
    output: str,
    field: str = "text",
    method: str = "near",
    threshold: float = 0.8,
    ngram: int = 5,
    action: str = "drop",
    cluster_field: str = "dedup_cluster",
    verify: str = "True",
    partitions: int = 0,
    fn: Optional[str] = None,
    format: str = "auto",
    output_format: str = "jsonl",
    schema: Optional[str] = None,
    na_values: Optional[str] = None,
    delimiter: Optional[str] = None,
    header: str = "True",
    num_workers: int = 1,
    assign: str = "dynamic",
    batch_size: int = 1024,
    on_error: str = "raise",
    max_error_rate: float = 0.1,
    max_restarts: int = 0,
    overwrite: str = "False",
    artifact_store: Optional[str] = None,
    backend: str = "cloudpickle",
    unit_mb: float = 64.0,
    max_record_mb: float = 64.0,
    name: str = "/dedup",
    image: str = torchx.IMAGE,
    h: Optional[str] = None,
    cpu: int = 2,
    gpu: int = 0,
    memMB: int = 0,
    j: str = "1x2",
    env: Optional[Dict[str, str]] = None,
    mounts: Optional[List[str]] = None,
    rdzv_port: int = 29500,
    max_retries: int = 0,
) -> specs.AppDef:
    return _appdef.build_app("dedup", locals())


dedup.__doc__ = _appdef.component_doc("dedup")


def decontaminate(
    input: str,
    output: str,
    reference: Optional[str] = None,
    field: str = "text",
    reference_field: Optional[str] = None,
    ngram: int = 13,
    partitions: int = 0,
    fn: Optional[str] = None,
    format: str = "auto",
    output_format: str = "jsonl",
    schema: Optional[str] = None,
    na_values: Optional[str] = None,
    delimiter: Optional[str] = None,
    header: str = "True",
    num_workers: int = 1,
    assign: str = "dynamic",
    batch_size: int = 1024,
    on_error: str = "raise",
    max_error_rate: float = 0.1,
    max_restarts: int = 0,
    overwrite: str = "False",
    artifact_store: Optional[str] = None,
    backend: str = "cloudpickle",
    unit_mb: float = 64.0,
    max_record_mb: float = 64.0,
    name: str = "/decontaminate",
    image: str = torchx.IMAGE,
    h: Optional[str] = None,
    cpu: int = 2,
    gpu: int = 0,
    memMB: int = 0,
    j: str = "1x2",
    env: Optional[Dict[str, str]] = None,
    mounts: Optional[List[str]] = None,
    rdzv_port: int = 29500,
    max_retries: int = 0,
) -> specs.AppDef:
    with _appdef.client_checks():
        arguments = _decontaminate.check_together(locals())  # --reference is required
    return _appdef.build_app("decontaminate", arguments)


decontaminate.__doc__ = _appdef.component_doc("decontaminate")


if _FINDER_LINTER is not None:  # pragma: no cover - only inside TorchX's exec (see the top)
    import functools

    _component, _linter = validate, _FINDER_LINTER

    def _dispatch(*args, **kwargs):  # type: ignore[no-untyped-def]
        # the linter is called as validate(path, function_name); the component always with keywords
        if len(args) == 2 and not kwargs and all(isinstance(a, str) for a in args):
            return _linter(*args)
        return _component(*args, **kwargs)

    _dispatch._tdp_linter = _linter  # type: ignore[attr-defined]
    globals()["validate"] = functools.wraps(_component)(_dispatch)  # no second "def validate": the linter
    # reads this file's AST and must find the component's own signature
