"""The option specs of ``transform``, ``split`` and ``stats``: every option's type, default,
accepted values and help, once. ``components.py`` mirrors them literally (TorchX reads its
signatures); ``tests/test_options.py`` keeps the two in sync.
"""

from typing import Any, Dict, Tuple

import torchx

from torchx_datapipes.options import checks as c
from torchx_datapipes.options.spec import REQUIRED, OpSpec, Option

DEFAULT_MAX_ERROR_RATE = 0.1
DEFAULT_MAX_RECORD_MB = 64.0
_MAX_RECORD_HELP = (
    "the largest input record in MiB (default 64): a longer line, CSV row, JSON document, tar member or"
    " file is a bad record naming its file, line and size (memory stays bounded by it)"
)

_INPUT_HELP = (
    "input files: a path, a glob such as 'data/*.jsonl', a directory, or several separated by commas"
    " (write a comma inside a name as \\,); an existing path is read as it is written even if it holds"
    " glob characters ([x].jsonl); local, s3:// or any fsspec URL"
)


_FORMAT_HELP = (
    "input format: auto (by extension; an unknown extension is refused), jsonl, json, csv, text, parquet,"
    " files (one record per file: images, audio, any blob) or webdataset (tar shards)"
)
_SCHEMA_HELP = (
    "CSV column types overriding inference, e.g. 'id:int,name:str' (int, float, bool, str, date, timestamp);"
    " a date or timestamp in another layout takes a strptime format in brackets (see docs/formats.md)"
)
_NA_HELP = "CSV cells read as null, comma-separated (default: pandas' list: '', NA, N/A, null, NaN, ...)"
_DELIMITER_HELP = "CSV field delimiter: one character, or tab (default: ',' and tab for .tsv)"
_HEADER_HELP = (
    "whether CSV files start with a header row: true/false (also 1/0, yes/no); false: columns are"
    " named 0..n-1, or by --schema when it lists every column in order"
)


def _input_format(value: Any) -> None:
    from torchx_datapipes.formats.registry import input_class

    if value != "auto":
        try:
            input_class(value)
        except ValueError as e:
            raise ValueError(f"must be auto or a known input format ({e})") from e


def _output_format(value: Any) -> None:
    """Any writer the registry knows (built-in, entry point, or register_writer): none is hard-coded."""
    from torchx_datapipes.formats.writing import writer_class

    try:
        writer_class(value)
    except ValueError as e:
        raise ValueError(f"must be a known output format ({e})") from e
    except ImportError as e:
        raise ValueError(f"must be an output format whose writer imports ({e})") from e


def _schema(value: Any) -> None:
    from torchx_datapipes.formats.spec import parse_schema

    try:
        parse_schema(value)
    except ValueError as e:
        raise ValueError(f"must be a list of column:type ({e})") from e


def _delimiter(value: Any) -> None:
    from torchx_datapipes.formats.spec import parse_delimiter

    try:
        parse_delimiter(value)
    except ValueError as e:
        raise ValueError(f"must be one character ({e})") from e


def _io(input_help: str, output_help: str) -> Tuple[Option, ...]:
    return (
        Option("input", "str", REQUIRED, input_help, check=c.non_empty),
        Option("output", "str", REQUIRED, output_help, check=c.non_empty),
    )


def _data(
    batch_size: int, batch_help: str, on_error_help: str, output_format: bool = True
) -> Tuple[Option, ...]:
    fmt = (
        (
            Option(
                "output_format",
                "str",
                "jsonl",
                "jsonl, parquet or webdataset (tar shards)",
                check=_output_format,
            ),
        )
        if output_format
        else ()
    )
    return (
        Option("format", "str", "auto", _FORMAT_HELP, check=_input_format),
        *fmt,
        Option("schema", "str", None, _SCHEMA_HELP, optional=True, check=_schema),
        Option("na_values", "str", None, _NA_HELP, optional=True),
        Option("delimiter", "str", None, _DELIMITER_HELP, optional=True, check=_delimiter),
        Option("header", "bool", True, _HEADER_HELP),
        Option("num_workers", "int", 1, "worker processes per rank", check=c.at_least(1)),
        Option(
            "assign",
            "str",
            "dynamic",
            "which slot (rank x worker) runs which unit: dynamic (claim the next unit, largest first, from"
            " the job's store) or static (unit i on slot i mod slots); never changes the output",
            choices=c.ASSIGN,
        ),
        Option("batch_size", "int", batch_size, batch_help, check=c.at_least(1)),
        Option("on_error", "str", "raise", on_error_help, choices=c.ON_ERROR),
        Option(
            "max_error_rate",
            "float",
            DEFAULT_MAX_ERROR_RATE,
            "with on_error=skip, fail the job when bad records / input records exceeds this (in [0, 1],"
            " default 0.1)",
            check=c.fraction,
        ),
        Option(
            "max_restarts",
            "int",
            0,
            "torchrun restarts of failed ranks; restarted ranks skip committed units",
            check=c.at_least(0),
            runner=False,
        ),
        Option(
            "overwrite",
            "bool",
            False,
            "replace an output that already has _SUCCESS: true/false (also 1/0, yes/no); deletes only what"
            " this product wrote, and a directory holding anything else is refused",
        ),
    )


def _ship(store_help: str, backend_help: str) -> Tuple[Option, ...]:
    return (
        Option("artifact_store", "str", None, store_help, optional=True, runner=False),
        Option("backend", "str", "cloudpickle", backend_help, choices=c.BACKENDS, runner=False),
        Option("unit_mb", "float", 64.0, "target size in MB of a unit of work", check=c.positive),
        Option("max_record_mb", "float", DEFAULT_MAX_RECORD_MB, _MAX_RECORD_HELP, check=c.positive),
    )


def _Launch(name: str, type: str, default: Any, help: str, **kw: Any) -> Option:  # noqa: N802
    """A launcher option: a component parameter that the runner never sees."""
    return Option(name, type, default, help, runner=False, **kw)


def _launch(name: str) -> Tuple[Option, ...]:
    return (
        _Launch("name", "str", name, "job name, {experimentname}/{runname}"),
        _Launch("image", "str", torchx.IMAGE, "image (e.g. docker) for non-local schedulers"),
        _Launch(
            "h",
            "str",
            None,
            "a registered named resource (takes precedence over cpu, gpu, memMB)",
            optional=True,
        ),
        _Launch("cpu", "int", 2, "number of cpus per replica", check=c.at_least(1)),
        _Launch("gpu", "int", 0, "number of gpus per replica", check=c.at_least(0)),
        _Launch(
            "memMB",
            "int",
            0,
            "cpu memory in MB per replica (node); 0: sized from -j and --num_workers (see docs/cluster.md)",
            check=c.at_least(0),
        ),
        _Launch(
            "j",
            "str",
            "1x2",
            "[{min_nnodes}:]{nnodes}x{nproc_per_node}: nodes and ranks per node",
            check=c.j_spec,
        ),
        _Launch(
            "env", "dict", None, "environment variables for the job (e.g. ENV1=v1,ENV2=v2)", optional=True
        ),
        _Launch(
            "mounts",
            "list",
            None,
            "mounts for the job's containers (type=<bind/volume>,src=/host,dst=/job[,readonly])",
            optional=True,
        ),
        _Launch(
            "rdzv_port", "int", 29500, "rendezvous port on rank 0's host for multi-node jobs", check=c.port
        ),
        _Launch(
            "max_retries",
            "int",
            0,
            "scheduler-level retries of the whole job (not honoured by local_cwd)",
            check=c.at_least(0),
        ),
    )


# Options the runner takes that no component parameter maps to one-to-one.
_RUNNER_ONLY = (
    Option(
        "artifact",
        "str",
        None,
        "artifact URL made by torchx_datapipes.artifact",
        optional=True,
        component=False,
    ),
    Option("sha256", "str", None, "pinned sha256 of the artifact", optional=True, component=False),
    Option(
        "timeout_s", "float", 6 * 3600.0, "timeout of collectives, seconds", check=c.positive, component=False
    ),
    Option(
        "progress_s",
        "float",
        5.0,
        "seconds between progress lines (0: none)",
        check=c.non_negative,
        component=False,
    ),
)

# A message queue as the transform's output (docs/queue.md): the options it adds.
_TRANSFORM_OUTPUT_HELP = (
    "output directory (local or fsspec URL), or a message queue URL that a training job consumes while"
    " the job runs: redis://host:6379/0?stream=NAME, amqp://user@host:5672/vhost?queue=NAME or"
    " nats://host:4222?stream=NAME (needs --state; see docs/queue.md)"
)
_QUEUE_OPTIONS = (
    Option(
        "state",
        "str",
        None,
        "with a queue --output (required there): the directory or URL that holds the job's unit commit"
        " records, lease and _SUCCESS manifest, so a relaunch or restart never publishes a committed unit"
        " twice",
        optional=True,
    ),
    Option(
        "max_backlog",
        "int",
        1000,
        "with a queue --output: the producer waits (and says so) while this many messages or more wait"
        " for the consumers, so a slow trainer never fills the broker's memory (0: no limit)",
        check=c.at_least(0),
    ),
)

TRANSFORM = OpSpec(
    "transform",
    (
        Option(
            "fn",
            "str",
            REQUIRED,
            "the function: ``my_file.py:clean``, ``my_pkg.module:clean`` or an artifact URL from"
            " ``torchx_datapipes.artifact.package``. Plain functions map (return a record), filter"
            " (return None)"
            " or flat-map (return a list); decorate with ``torchx_datapipes.batched`` or"
            " ``torchx_datapipes.pipeline`` for batch or DataPipe/torchdata.nodes functions.",
            check=c.non_empty,
            runner=False,
        ),
        *_io(_INPUT_HELP + ". .gz and .zst are decompressed.", _TRANSFORM_OUTPUT_HELP),
        *_data(
            1024,
            "records per batch (the batch size of batched functions)",
            "raise (stop at the first bad record with file, line and traceback) or skip (write bad records to"
            " OUTPUT/_errors/ and go on)",
        ),
        *_ship(
            "where the client uploads the function artifact (default ./.tdp/artifacts for local runs; use"
            " s3://... for clusters)",
            "how the function is shipped: cloudpickle, torch.package or module (import it by name"
            " where the job"
            " runs; the code must be in the image/workspace)",
        ),
        Option(
            "cache",
            "str",
            None,
            "memoize the function per record in a shared cache, keyed by (function sha256, record),"
            " so a rerun on"
            " the same data computes nothing: redis://host:6379/0, memcached://host:11211, sqlite://"
            " (one machine: a private per-user /dev/shm/tdp-<uid>/cache.db) or memory:// (per process);"
            " options as a query, e.g. ?namespace=clean&ttl=86400. Pickled results load only under the"
            " cache's trust (?pickle=true, ?hmac_key_file=PATH; docs/cache.md)."
            " Passwords never go on the command line: use ?password_env=NAME (see docs/cache.md)."
            " The manifest"
            " reports hits and misses",
            optional=True,
        ),
        *_QUEUE_OPTIONS,
        *_launch("/transform"),
        *_RUNNER_ONLY,
    ),
)

SPLIT = OpSpec(
    "split",
    (
        *_io(_INPUT_HELP, "output directory"),
        Option(
            "fractions",
            "str",
            "train=0.8,val=0.1,test=0.1",
            "named fractions in (0, 1] summing to 1, e.g. train=0.8,val=0.1,test=0.1",
            check=c.fractions,
        ),
        Option(
            "key",
            "str",
            None,
            "field(s) whose value decides the split, e.g. id or user_id,session; default: the whole"
            " record (exact"
            " duplicates always land in the same split)",
            optional=True,
            check=c.key_fields,
        ),
        Option(
            "method",
            "str",
            "hash",
            "hash (stable: a record's split depends only on seed and key, appending files moves"
            " nothing) or exact"
            " (exact counts by largest remainder; needs a counting pass)",
            choices=c.SPLIT_METHODS,
        ),
        Option(
            "stratify",
            "str",
            None,
            "a class field; every class is split in the given proportions",
            optional=True,
        ),
        Option(
            "seed",
            "int",
            0,
            "changes the assignment; the same seed always gives the same split",
            check=c.between(0, (1 << 64) - 1),
        ),
        Option(
            "fn",
            "str",
            None,
            "optional transform applied before splitting (file.py:fn, pkg.module:fn or artifact URL)",
            optional=True,
            runner=False,
        ),
        *_data(
            1024,
            "records per batch",
            "raise (stop at the first bad record) or skip (write bad records to OUTPUT/_errors/)",
        ),
        *_ship(
            "where the client uploads the fn artifact (s3://... for clusters)",
            "how fn is shipped: cloudpickle, torch.package or module",
        ),
        *_launch("/split"),
        *_RUNNER_ONLY,
    ),
)

STATS = OpSpec(
    "stats",
    (
        *_io(_INPUT_HELP, "output directory"),
        Option(
            "fields",
            "str",
            None,
            "comma-separated fields to describe (default: every top-level field)",
            optional=True,
            check=c.stats_fields,
        ),
        Option(
            "quantiles",
            "str",
            "0.01,0.05,0.25,0.5,0.75,0.95,0.99",
            "comma-separated quantiles in [0, 1] to report",
            check=c.quantiles,
        ),
        Option(
            "top_k", "int", 20, "most frequent values to report per string field", check=c.between(1, 100_000)
        ),
        Option("bins", "int", 30, "bins of the equal-width histograms", check=c.between(1, 10_000)),
        Option(
            "fn",
            "str",
            None,
            "optional transform applied first (stats of the transformed records)",
            optional=True,
            runner=False,
        ),
        *_data(
            4096,
            "records per batch (statistics are accumulated per batch, vectorised)",
            "raise (stop at the first bad record) or skip (count it, write it to OUTPUT/_errors/)",
            output_format=False,
        ),
        *_ship(
            "where the client uploads the fn artifact (s3://... for clusters)",
            "how fn is shipped: cloudpickle, torch.package or module",
        ),
        *_launch("/stats"),
        *_RUNNER_ONLY,
    ),
)


def _schema_file(value: Any) -> None:
    """A local schema must load (checked key by key); a remote one is checked by the runner."""
    from torchx_datapipes.schema.model import Schema

    if "://" not in value or value.startswith("file://"):
        Schema.load(value)


def _stats_output(value: Any) -> None:
    from torchx_datapipes.schema.compare import load_stats

    if "://" not in value or value.startswith("file://"):
        load_stats(value)


VALIDATE = OpSpec(
    "validate",
    (
        *_io(_INPUT_HELP, "output directory: stats.json, anomalies.json and report.html"),
        Option(
            "schema",
            "str",
            REQUIRED,
            "the schema (JSON) to check every record against; make one with python -m"
            " torchx_datapipes.schema infer STATS_OUT -o schema.json",
            check=_schema_file,
        ),
        Option(
            "baseline",
            "str",
            None,
            "a previous stats or validate output directory to check drift against (optional)",
            optional=True,
            check=_stats_output,
        ),
        Option(
            "fail_on",
            "str",
            "error",
            "fail the job when an anomaly at or above this severity is found: error, warning or never",
            choices=("error", "warning", "never"),
        ),
        Option(
            "fn",
            "str",
            None,
            "optional transform applied first (validates the transformed records)",
            optional=True,
            runner=False,
        ),
        *(
            o
            for o in _data(
                4096,
                "records per batch (statistics and checks are vectorised per batch)",
                "raise (stop at the first unparseable record) or skip (count it, write it to"
                " OUTPUT/_errors/)",
                output_format=False,
            )
            if o.name != "schema"  # --schema is the validation schema here
        ),
        *_ship(
            "where the client uploads the fn artifact (s3://... for clusters)",
            "how fn is shipped: cloudpickle, torch.package or module",
        ),
        *_launch("/validate"),
        *_RUNNER_ONLY,
    ),
)

SPECS: Dict[str, OpSpec] = {s.op: s for s in (TRANSFORM, SPLIT, STATS, VALIDATE)}
