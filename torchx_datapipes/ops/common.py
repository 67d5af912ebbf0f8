"""Option groups shared by the ops' specs (input/output, data, shipping, launch, runner-only).

Each op module (``ops/transform.py``, ...) composes its :class:`OpSpec` from these.
"""

from typing import Any, Tuple

from torchx_datapipes.options import checks as c
from torchx_datapipes.options.spec import REQUIRED, Deferred, Option

DEFAULT_MAX_ERROR_RATE = 0.1
DEFAULT_MAX_RECORD_MB = 64.0
_MAX_RECORD_HELP = (
    "the largest input record in MiB (default 64): a longer line, CSV row, JSON document, tar member or"
    " file is a bad record naming its file, line and size (memory stays bounded by it)"
)

INPUT_HELP = (
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


def io_options(input_help: str, output_help: str) -> Tuple[Option, ...]:
    return (
        Option("input", "str", REQUIRED, input_help, check=c.non_empty),
        Option("output", "str", REQUIRED, output_help, check=c.non_empty),
    )


def data_options(
    batch_size: int, batch_help: str, on_error_help: str, output_format: bool = True
) -> Tuple[Option, ...]:
    fmt = (
        (
            Option(
                "output_format",
                "str",
                "jsonl",
                "jsonl, parquet, webdataset (tar shards) or megatron (.bin/.idx: token ids per record, read"
                " by TokenDataset)",
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


def ship_options(store_help: str, backend_help: str) -> Tuple[Option, ...]:
    return (
        Option("artifact_store", "str", None, store_help, optional=True, runner=False),
        Option("backend", "str", "cloudpickle", backend_help, choices=c.BACKENDS, runner=False),
        Option("unit_mb", "float", 64.0, "target size in MB of a unit of work", check=c.positive),
        Option("max_record_mb", "float", DEFAULT_MAX_RECORD_MB, _MAX_RECORD_HELP, check=c.positive),
    )


def _Launch(name: str, type: str, default: Any, help: str, **kw: Any) -> Option:  # noqa: N802
    """A launcher option: a component parameter that the runner never sees."""
    return Option(name, type, default, help, runner=False, **kw)


def launch_options(name: str) -> Tuple[Option, ...]:
    return (
        _Launch("name", "str", name, "job name, {experimentname}/{runname}"),
        _Launch("image", "str", Deferred("torchx:IMAGE"), "image (e.g. docker) for non-local schedulers"),
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
RUNNER_ONLY = (
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
