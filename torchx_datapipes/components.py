"""TorchX components of torchx_datapipes: ``transform``, ``split`` and ``stats``.

Run them with ``torchx run -s local_cwd torchx_datapipes.components:transform --help``
(or the short names ``datapipes.transform`` ...). Each returns an AppDef that launches the
generic runner (``python -m torchx_datapipes.runner``) under torchrun, so the same job runs
on local_cwd, Kubernetes, Slurm and every other TorchX scheduler.

TorchX executes this file's source, so it uses absolute imports only and must not use
``from __future__ import annotations``.
"""

from typing import Dict, List, Optional

import torchx
from torchx import specs

import torchx_datapipes.appdef as _appdef


def transform(
    fn: str,
    input: str,
    output: str,
    format: str = "auto",
    output_format: str = "jsonl",
    num_workers: int = 1,
    batch_size: int = 1024,
    on_error: str = "raise",
    max_error_rate: float = 1.0,
    max_restarts: int = 0,
    overwrite: bool = False,
    artifact_store: Optional[str] = None,
    backend: str = "cloudpickle",
    unit_mb: float = 64.0,
    name: str = "/transform",
    image: str = torchx.IMAGE,
    h: Optional[str] = None,
    cpu: int = 2,
    gpu: int = 0,
    memMB: int = 1024,
    j: str = "1x2",
    env: Optional[Dict[str, str]] = None,
    mounts: Optional[List[str]] = None,
    rdzv_port: int = 29500,
    max_retries: int = 0,
) -> specs.AppDef:
    """Apply a Python function to every record of a data set, exactly once, on every rank and worker.

    The function is packaged on the client into a sha256-pinned artifact; each rank takes every
    (ranks x workers)-th unit of the input (DistributedSampler's rule, never padded), writes
    ``OUTPUT/part-NNNNN.jsonl`` per unit atomically, and rank 0 writes ``OUTPUT/_SUCCESS`` (a JSON
    manifest) last. Relaunching a failed job with the same output resumes from committed units.

    Args:
        fn: the function: ``my_file.py:clean``, ``my_pkg.module:clean`` or an artifact URL from
            ``torchx_datapipes.artifact.package``. Plain functions map (return a record), filter
            (return None) or flat-map (return a list); decorate with ``torchx_datapipes.batched``
            or ``torchx_datapipes.pipeline`` for batch or DataPipe/torchdata.nodes functions.
        input: input files: a path, a glob such as 'data/*.jsonl', a directory, or several separated
            by commas; local, s3:// or any fsspec URL. .gz and .zst are decompressed.
        output: output directory (local or fsspec URL)
        format: input format: auto (by extension), jsonl, csv, text or parquet
        output_format: jsonl or parquet
        num_workers: worker processes per rank
        batch_size: records per batch (the batch size of batched functions)
        on_error: raise (stop at the first bad record with file, line and traceback) or skip (write
            bad records to OUTPUT/_errors/ and go on)
        max_error_rate: with on_error=skip, fail the job when bad records / input records exceeds this
        max_restarts: torchrun restarts of failed ranks; restarted ranks skip committed units
        overwrite: replace an output that already has _SUCCESS
        artifact_store: where the client uploads the function artifact (default ./.tdp/artifacts for
            local runs; use s3://... for clusters)
        backend: how the function is shipped: cloudpickle, torch.package or module (import it by name
            where the job runs; the code must be in the image/workspace)
        unit_mb: target size in MB of a unit of work (large text files are split at line boundaries)
        name: job name, {experimentname}/{runname}
        image: image (e.g. docker) for non-local schedulers
        h: a registered named resource (takes precedence over cpu, gpu, memMB)
        cpu: number of cpus per replica
        gpu: number of gpus per replica
        memMB: cpu memory in MB per replica
        j: [{min_nnodes}:]{nnodes}x{nproc_per_node}: nodes and ranks per node
        env: environment variables for the job (e.g. ENV1=v1,ENV2=v2)
        mounts: mounts for the job's containers (type=<bind/volume>,src=/host,dst=/job[,readonly])
        rdzv_port: rendezvous port on rank 0's host for multi-node jobs
        max_retries: scheduler-level retries of the whole job (not honoured by local_cwd)
    """
    _appdef.validate_io(input, output, overwrite)
    ref = _appdef.resolve_fn(fn, artifact_store, backend)
    args = [
        *("--input", input, "--output", output, "--artifact", ref.url, "--sha256", ref.sha256),
        *("--format", format, "--output_format", output_format, "--num_workers", str(num_workers)),
        *("--batch_size", str(batch_size), "--on_error", on_error, "--max_error_rate", str(max_error_rate)),
        *("--unit_mb", str(unit_mb)),
        *_appdef.bool_flag("overwrite", overwrite),
    ]
    return _appdef.runner_app(
        "transform", args, output, name, image, h, cpu, gpu, memMB, j, env, mounts, rdzv_port,
        max_restarts, max_retries,
    )  # fmt: skip
