"""TorchX components of torchx_datapipes: ``transform``, ``split``, ``stats``, ``validate`` and ``tokenize``.

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
``torchx_datapipes.ops`` (one declarative spec per op, in its op module; ``tests/test_options.py`` keeps these
signatures and docstrings in sync with it). Bool options are typed ``str`` on purpose: TorchX
would turn ``--overwrite yes`` into ``False`` itself (``torchx.util.types.decode`` compares with
"true"), so the spec parses true/false/1/0/yes/no and refuses anything else.
"""

from typing import Dict, List, Optional

import torchx
from torchx import specs

import torchx_datapipes.appdef as _appdef
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
    """Apply a Python function to every record of a data set, exactly once, on every rank and worker.

    The function is packaged on the client into a sha256-pinned artifact; each slot (rank x worker)
    claims the next unit of the input, largest first (or, with ``--assign static``, every
    (ranks x workers)-th unit, DistributedSampler's rule, never padded), writes
    ``OUTPUT/part-NNNNN.jsonl`` per unit atomically, and rank 0 writes ``OUTPUT/_SUCCESS`` (a JSON
    manifest) last. Relaunching a failed job with the same output resumes from committed units.

    Args:
        fn: the function: ``my_file.py:clean``, ``my_pkg.module:clean`` or an artifact URL from
            ``torchx_datapipes.artifact.package``. Plain functions map (return a record), filter (return
            None) or flat-map (return a list); decorate with ``torchx_datapipes.batched`` or
            ``torchx_datapipes.pipeline`` for batch or DataPipe/torchdata.nodes functions.
        input: input files: a path, a glob such as 'data/*.jsonl', a directory, or several separated by
            commas (write a comma inside a name as \\,); an existing path is read as it is written even if
            it holds glob characters ([x].jsonl); local, s3:// or any fsspec URL. .gz and .zst are
            decompressed.
        output: output directory (local or fsspec URL), or a message queue URL that a training job consumes
            while the job runs: redis://host:6379/0?stream=NAME, amqp://user@host:5672/vhost?queue=NAME or
            nats://host:4222?stream=NAME (needs --state; see docs/queue.md)
        format: input format: auto (by extension; an unknown extension is refused), jsonl, json, csv, text,
            parquet, files (one record per file: images, audio, any blob) or webdataset (tar shards)
        output_format: jsonl, parquet or webdataset (tar shards)
        schema: CSV column types overriding inference, e.g. 'id:int,name:str' (int, float, bool, str, date,
            timestamp); a date or timestamp in another layout takes a strptime format in brackets (see
            docs/formats.md)
        na_values: CSV cells read as null, comma-separated (default: pandas' list: '', NA, N/A, null, NaN,
            ...)
        delimiter: CSV field delimiter: one character, or tab (default: ',' and tab for .tsv)
        header: whether CSV files start with a header row: true/false (also 1/0, yes/no); false: columns
            are named 0..n-1, or by --schema when it lists every column in order
        num_workers: worker processes per rank
        assign: which slot (rank x worker) runs which unit: dynamic (claim the next unit, largest first,
            from the job's store) or static (unit i on slot i mod slots); never changes the output
        batch_size: records per batch (the batch size of batched functions)
        on_error: raise (stop at the first bad record with file, line and traceback) or skip (write bad
            records to OUTPUT/_errors/ and go on)
        max_error_rate: with on_error=skip, fail the job when bad records / input records exceeds this (in
            [0, 1], default 0.1)
        max_restarts: torchrun restarts of failed ranks; restarted ranks skip committed units
        overwrite: replace an output that already has _SUCCESS: true/false (also 1/0, yes/no); deletes
            only what this product wrote, and a directory holding anything else is refused
        artifact_store: where the client uploads the function artifact (default ./.tdp/artifacts for local
            runs; use s3://... for clusters)
        backend: how the function is shipped: cloudpickle, torch.package or module (import it by name where
            the job runs; the code must be in the image/workspace)
        unit_mb: target size in MB of a unit of work
        max_record_mb: the largest input record in MiB (default 64): a longer line, CSV row, JSON document,
            tar member or file is a bad record naming its file, line and size (memory stays bounded by it)
        cache: memoize the function per record in a shared cache, keyed by (function sha256, record), so a
            rerun on the same data computes nothing: redis://host:6379/0, memcached://host:11211,
            sqlite:// (one machine: a private per-user /dev/shm/tdp-<uid>/cache.db) or memory:// (per
            process); options as a query, e.g. ?namespace=clean&ttl=86400. Pickled results load only
            under the cache's trust (?pickle=true, ?hmac_key_file=PATH; docs/cache.md). Passwords never
            go on the command line: use ?password_env=NAME (see docs/cache.md). The manifest reports
            hits and misses
        state: with a queue --output (required there): the directory or URL that holds the job's unit commit
            records, lease and _SUCCESS manifest, so a relaunch or restart never publishes a committed unit
            twice
        max_backlog: with a queue --output: the producer waits (and says so) while this many messages or more
            wait for the consumers, so a slow trainer never fills the broker's memory (0: no limit)
        name: job name, {experimentname}/{runname}
        image: image (e.g. docker) for non-local schedulers
        h: a registered named resource (takes precedence over cpu, gpu, memMB)
        cpu: number of cpus per replica
        gpu: number of gpus per replica
        memMB: cpu memory in MB per replica (node); 0: sized from -j and --num_workers (see docs/cluster.md)
        j: [{min_nnodes}:]{nnodes}x{nproc_per_node}: nodes and ranks per node
        env: environment variables for the job (e.g. ENV1=v1,ENV2=v2)
        mounts: mounts for the job's containers (type=<bind/volume>,src=/host,dst=/job[,readonly])
        rdzv_port: rendezvous port on rank 0's host for multi-node jobs
        max_retries: scheduler-level retries of the whole job (not honoured by local_cwd)
    """
    return _appdef.build_app("transform", locals())


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
    """Split a data set into named parts (train/val/test/...) reproducibly, for any -j.

    Writes ``OUTPUT/<split>/part-NNNNN.jsonl`` and ``OUTPUT/_SUCCESS`` with counts per split (and per
    class when stratified), the options and the seed. See docs/split.md for the guarantees.

    Args:
        input: input files: a path, a glob such as 'data/*.jsonl', a directory, or several separated by
            commas (write a comma inside a name as \\,); an existing path is read as it is written even if
            it holds glob characters ([x].jsonl); local, s3:// or any fsspec URL
        output: output directory
        fractions: named fractions in (0, 1] summing to 1, e.g. train=0.8,val=0.1,test=0.1
        key: field(s) whose value decides the split, e.g. id or user_id,session; default: the whole record
            (exact duplicates always land in the same split)
        method: hash (stable: a record's split depends only on seed and key, appending files moves nothing)
            or exact (exact counts by largest remainder; needs a counting pass)
        stratify: a class field; every class is split in the given proportions
        seed: changes the assignment; the same seed always gives the same split
        fn: optional transform applied before splitting (file.py:fn, pkg.module:fn or artifact URL)
        format: input format: auto (by extension; an unknown extension is refused), jsonl, json, csv, text,
            parquet, files (one record per file: images, audio, any blob) or webdataset (tar shards)
        output_format: jsonl, parquet or webdataset (tar shards)
        schema: CSV column types overriding inference, e.g. 'id:int,name:str' (int, float, bool, str, date,
            timestamp); a date or timestamp in another layout takes a strptime format in brackets (see
            docs/formats.md)
        na_values: CSV cells read as null, comma-separated (default: pandas' list: '', NA, N/A, null, NaN,
            ...)
        delimiter: CSV field delimiter: one character, or tab (default: ',' and tab for .tsv)
        header: whether CSV files start with a header row: true/false (also 1/0, yes/no); false: columns
            are named 0..n-1, or by --schema when it lists every column in order
        num_workers: worker processes per rank
        assign: which slot (rank x worker) runs which unit: dynamic (claim the next unit, largest first,
            from the job's store) or static (unit i on slot i mod slots); never changes the output
        batch_size: records per batch
        on_error: raise (stop at the first bad record) or skip (write bad records to OUTPUT/_errors/)
        max_error_rate: with on_error=skip, fail the job when bad records / input records exceeds this (in
            [0, 1], default 0.1)
        max_restarts: torchrun restarts of failed ranks; restarted ranks skip committed units
        overwrite: replace an output that already has _SUCCESS: true/false (also 1/0, yes/no); deletes
            only what this product wrote, and a directory holding anything else is refused
        artifact_store: where the client uploads the fn artifact (s3://... for clusters)
        backend: how fn is shipped: cloudpickle, torch.package or module
        unit_mb: target size in MB of a unit of work
        max_record_mb: the largest input record in MiB (default 64): a longer line, CSV row, JSON document,
            tar member or file is a bad record naming its file, line and size (memory stays bounded by it)
        name: job name, {experimentname}/{runname}
        image: image (e.g. docker) for non-local schedulers
        h: a registered named resource (takes precedence over cpu, gpu, memMB)
        cpu: number of cpus per replica
        gpu: number of gpus per replica
        memMB: cpu memory in MB per replica (node); 0: sized from -j and --num_workers (see docs/cluster.md)
        j: [{min_nnodes}:]{nnodes}x{nproc_per_node}: nodes and ranks per node
        env: environment variables for the job (e.g. ENV1=v1,ENV2=v2)
        mounts: mounts for the job's containers (type=<bind/volume>,src=/host,dst=/job[,readonly])
        rdzv_port: rendezvous port on rank 0's host for multi-node jobs
        max_retries: scheduler-level retries of the whole job (not honoured by local_cwd)
    """
    return _appdef.build_app("split", locals())


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
    """Compute one-pass, mergeable summary statistics of a data set and an HTML report.

    Writes ``OUTPUT/stats.json`` (schema in docs/stats-schema.md), ``OUTPUT/report.html`` (a
    self-contained page with a histogram per numeric field and a top-k chart per string field, for the
    first 100 fields),
    ``OUTPUT/stats.md`` and ``OUTPUT/_SUCCESS`` last.

    Args:
        input: input files: a path, a glob such as 'data/*.jsonl', a directory, or several separated by
            commas (write a comma inside a name as \\,); an existing path is read as it is written even if
            it holds glob characters ([x].jsonl); local, s3:// or any fsspec URL
        output: output directory
        fields: comma-separated fields to describe (default: every top-level field)
        quantiles: comma-separated quantiles in [0, 1] to report
        top_k: most frequent values to report per string field
        bins: bins of the equal-width histograms
        fn: optional transform applied first (stats of the transformed records)
        format: input format: auto (by extension; an unknown extension is refused), jsonl, json, csv, text,
            parquet, files (one record per file: images, audio, any blob) or webdataset (tar shards)
        schema: CSV column types overriding inference, e.g. 'id:int,name:str' (int, float, bool, str, date,
            timestamp); a date or timestamp in another layout takes a strptime format in brackets (see
            docs/formats.md)
        na_values: CSV cells read as null, comma-separated (default: pandas' list: '', NA, N/A, null, NaN,
            ...)
        delimiter: CSV field delimiter: one character, or tab (default: ',' and tab for .tsv)
        header: whether CSV files start with a header row: true/false (also 1/0, yes/no); false: columns
            are named 0..n-1, or by --schema when it lists every column in order
        num_workers: worker processes per rank
        assign: which slot (rank x worker) runs which unit: dynamic (claim the next unit, largest first,
            from the job's store) or static (unit i on slot i mod slots); never changes the output
        batch_size: records per batch (statistics are accumulated per batch, vectorised)
        on_error: raise (stop at the first bad record) or skip (count it, write it to OUTPUT/_errors/)
        max_error_rate: with on_error=skip, fail the job when bad records / input records exceeds this (in
            [0, 1], default 0.1)
        max_restarts: torchrun restarts of failed ranks; restarted ranks skip committed units
        overwrite: replace an output that already has _SUCCESS: true/false (also 1/0, yes/no); deletes
            only what this product wrote, and a directory holding anything else is refused
        artifact_store: where the client uploads the fn artifact (s3://... for clusters)
        backend: how fn is shipped: cloudpickle, torch.package or module
        unit_mb: target size in MB of a unit of work
        max_record_mb: the largest input record in MiB (default 64): a longer line, CSV row, JSON document,
            tar member or file is a bad record naming its file, line and size (memory stays bounded by it)
        name: job name, {experimentname}/{runname}
        image: image (e.g. docker) for non-local schedulers
        h: a registered named resource (takes precedence over cpu, gpu, memMB)
        cpu: number of cpus per replica
        gpu: number of gpus per replica
        memMB: cpu memory in MB per replica (node); 0: sized from -j and --num_workers (see docs/cluster.md)
        j: [{min_nnodes}:]{nnodes}x{nproc_per_node}: nodes and ranks per node
        env: environment variables for the job (e.g. ENV1=v1,ENV2=v2)
        mounts: mounts for the job's containers (type=<bind/volume>,src=/host,dst=/job[,readonly])
        rdzv_port: rendezvous port on rank 0's host for multi-node jobs
        max_retries: scheduler-level retries of the whole job (not honoured by local_cwd)
    """
    return _appdef.build_app("stats", locals())


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
    """Check every record against a schema while profiling the data; fail the job on anomalies (a CI gate).

    Writes ``OUTPUT/stats.json`` (as the stats job), ``OUTPUT/anomalies.json`` (each anomaly with up
    to 5 example records: file, line and value) and ``OUTPUT/report.html`` (anomalies first, then
    baseline against current), whether the job then passes or fails; ``OUTPUT/_SUCCESS`` only when no
    anomaly reaches ``--fail_on``. Make the schema with ``python -m torchx_datapipes.schema infer``;
    see docs/validate.md.

    Args:
        input: input files: a path, a glob such as 'data/*.jsonl', a directory, or several separated by commas
            (write a comma inside a name as \\,); an existing path is read as it is written even if it holds
            glob characters ([x].jsonl); local, s3:// or any fsspec URL
        output: output directory: stats.json, anomalies.json and report.html
        schema: the schema (JSON) to check every record against; make one with python -m
            torchx_datapipes.schema infer STATS_OUT -o schema.json
        baseline: a previous stats or validate output directory to check drift against (optional)
        fail_on: fail the job when an anomaly at or above this severity is found: error, warning or never
        fn: optional transform applied first (validates the transformed records)
        format: input format: auto (by extension; an unknown extension is refused), jsonl, json, csv, text,
            parquet, files (one record per file: images, audio, any blob) or webdataset (tar shards)
        na_values: CSV cells read as null, comma-separated (default: pandas' list: '', NA, N/A, null, NaN,
            ...)
        delimiter: CSV field delimiter: one character, or tab (default: ',' and tab for .tsv)
        header: whether CSV files start with a header row: true/false (also 1/0, yes/no); false: columns
            are named 0..n-1, or by --schema when it lists every column in order
        num_workers: worker processes per rank
        assign: which slot (rank x worker) runs which unit: dynamic (claim the next unit, largest first, from
            the job's store) or static (unit i on slot i mod slots); never changes the output
        batch_size: records per batch (statistics and checks are vectorised per batch)
        on_error: raise (stop at the first unparseable record) or skip (count it, write it to OUTPUT/_errors/)
        max_error_rate: with on_error=skip, fail the job when bad records / input records exceeds this (in [0,
            1], default 0.1)
        max_restarts: torchrun restarts of failed ranks; restarted ranks skip committed units
        overwrite: replace an output that already has _SUCCESS: true/false (also 1/0, yes/no); deletes only
            what this product wrote, and a directory holding anything else is refused
        artifact_store: where the client uploads the fn artifact (s3://... for clusters)
        backend: how fn is shipped: cloudpickle, torch.package or module
        unit_mb: target size in MB of a unit of work
        max_record_mb: the largest input record in MiB (default 64): a longer line, CSV row, JSON document,
            tar member or file is a bad record naming its file, line and size (memory stays bounded by it)
        name: job name, {experimentname}/{runname}
        image: image (e.g. docker) for non-local schedulers
        h: a registered named resource (takes precedence over cpu, gpu, memMB)
        cpu: number of cpus per replica
        gpu: number of gpus per replica
        memMB: cpu memory in MB per replica (node); 0: sized from -j and --num_workers (see docs/cluster.md)
        j: [{min_nnodes}:]{nnodes}x{nproc_per_node}: nodes and ranks per node
        env: environment variables for the job (e.g. ENV1=v1,ENV2=v2)
        mounts: mounts for the job's containers (type=<bind/volume>,src=/host,dst=/job[,readonly])
        rdzv_port: rendezvous port on rank 0's host for multi-node jobs
        max_retries: scheduler-level retries of the whole job (not honoured by local_cwd)
    """
    return _appdef.build_app("validate", locals())


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
    """Tokenize a text field of every record into Megatron indexed-dataset shards, exactly once.

    Each unit of the input becomes ``OUTPUT/part-NNNNN.bin`` + ``.idx`` (Megatron's ``MMIDIDX`` layout,
    opened by ``megatron.core.datasets.indexed_dataset.IndexedDataset(prefix)``): one sequence per
    document, documents in input order (files sorted, then lines) across parts in part order, the
    same bytes for any ``-j``. ``OUTPUT/part-NNNNN.lines.json`` maps each document to its input line;
    ``OUTPUT/_SUCCESS`` lists the shards with their token counts. Read them for training with
    ``torchx_datapipes.data.TokenDataset``; see docs/tokenize.md.

    Args:
        input: input files: a path, a glob such as 'data/*.jsonl', a directory, or several separated by commas
            (write a comma inside a name as \\,); an existing path is read as it is written even if it holds
            glob characters ([x].jsonl); local, s3:// or any fsspec URL. .gz and .zst are decompressed.
        output: output directory: OUTPUT/part-NNNNN.bin and .idx (Megatron's indexed dataset), one provenance
            file per shard and _SUCCESS
        tokenizer: required: a Hugging Face tokenizer.json (path or fsspec URL), loaded with the tokenizers
            library (pip install 'torchx-datapipes[tokenize]')
        field: the record field holding each document's text
        eos: a token appended to every document, e.g. '</s>' (default: none)
        dtype: token dtype of the shards: auto (uint16 when the vocabulary has fewer than 65,500 tokens, else
            int32, as Megatron's optimal_dtype), uint16, int32 or int64
        shard_mb: the largest .bin in MB: a unit whose tokens exceed it continues in part-NNNNN.pKKK.bin
        fn: optional transform applied first (its output records are tokenized)
        format: input format: auto (by extension; an unknown extension is refused), jsonl, json, csv, text,
            parquet, files (one record per file: images, audio, any blob) or webdataset (tar shards)
        schema: CSV column types overriding inference, e.g. 'id:int,name:str' (int, float, bool, str, date,
            timestamp); a date or timestamp in another layout takes a strptime format in brackets (see
            docs/formats.md)
        na_values: CSV cells read as null, comma-separated (default: pandas' list: '', NA, N/A, null, NaN,
            ...)
        delimiter: CSV field delimiter: one character, or tab (default: ',' and tab for .tsv)
        header: whether CSV files start with a header row: true/false (also 1/0, yes/no); false: columns are
            named 0..n-1, or by --schema when it lists every column in order
        num_workers: worker processes per rank
        assign: which slot (rank x worker) runs which unit: dynamic (claim the next unit, largest first, from
            the job's store) or static (unit i on slot i mod slots); never changes the output
        batch_size: records per batch (the batch encoded at once by encode_batch)
        on_error: raise (stop at the first bad record: unparseable, or without a text --field) or skip (write
            it to OUTPUT/_errors/ and go on)
        max_error_rate: with on_error=skip, fail the job when bad records / input records exceeds this (in [0,
            1], default 0.1)
        max_restarts: torchrun restarts of failed ranks; restarted ranks skip committed units
        overwrite: replace an output that already has _SUCCESS: true/false (also 1/0, yes/no); deletes only
            what this product wrote, and a directory holding anything else is refused
        artifact_store: where the client uploads the fn artifact (s3://... for clusters)
        backend: how fn is shipped: cloudpickle, torch.package or module
        unit_mb: target size in MB of a unit of work
        max_record_mb: the largest input record in MiB (default 64): a longer line, CSV row, JSON document,
            tar member or file is a bad record naming its file, line and size (memory stays bounded by it)
        name: job name, {experimentname}/{runname}
        image: image (e.g. docker) for non-local schedulers
        h: a registered named resource (takes precedence over cpu, gpu, memMB)
        cpu: number of cpus per replica
        gpu: number of gpus per replica
        memMB: cpu memory in MB per replica (node); 0: sized from -j and --num_workers (see docs/cluster.md)
        j: [{min_nnodes}:]{nnodes}x{nproc_per_node}: nodes and ranks per node
        env: environment variables for the job (e.g. ENV1=v1,ENV2=v2)
        mounts: mounts for the job's containers (type=<bind/volume>,src=/host,dst=/job[,readonly])
        rdzv_port: rendezvous port on rank 0's host for multi-node jobs
        max_retries: scheduler-level retries of the whole job (not honoured by local_cwd)
    """
    with _appdef.client_checks():
        arguments = _tokenize.check_together(locals())  # --eos and --dtype against the tokenizer
    return _appdef.build_app("tokenize", arguments)


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
