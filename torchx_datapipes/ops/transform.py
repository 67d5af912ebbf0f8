"""The ``transform`` op: apply the user's function to every record (its option spec, help and runner).

Manifest keys (``Keys``; the shared ones are ``io/manifest_schema.py``'s):

- ``_SUCCESS`` (``runner/transform.py``): ``records_out``, ``filtered``, ``output``; with Parquet
  ``parquet_schema``, with JSON Lines or WebDataset ``field_types``, with megatron ``megatron``;
  with ``--cache`` ``cache``.
- ``_SUCCESS`` of a transform to a queue (``runner/queue_output.py``): ``records_out``,
  ``filtered``, ``output`` (the queue URL without credentials), ``state`` (the ``--state``
  directory), ``queue`` (``job``, ``messages``, ``first_publish_at``, ``max_backlog``,
  ``backpressure_wait_s``, ``peak_backlog``, ``reconnects``); with ``--cache`` ``cache``. Its
  ``options`` add ``queue``.
- commit records: ``records_out``, ``filtered``, ``outputs``; with Parquet ``schemas``, with JSON
  Lines or WebDataset ``field_types``, with ``--cache`` ``cache``. To a queue: ``records_out``,
  ``filtered``, ``outputs`` (empty), ``messages``, ``first_publish_at``, ``backpressure_wait_s``,
  ``peak_backlog``; with ``--cache`` ``cache``.
"""

from typing import Any

from torchx_datapipes.io import manifest_schema as ms
from torchx_datapipes.ops import Keys, OpDef
from torchx_datapipes.ops.common import (
    INPUT_HELP,
    RUNNER_ONLY,
    data_options,
    io_options,
    launch_options,
    ship_options,
)
from torchx_datapipes.options import checks as c
from torchx_datapipes.options.spec import REQUIRED, OpSpec, Option

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
        *io_options(INPUT_HELP + ". .gz and .zst are decompressed.", _TRANSFORM_OUTPUT_HELP),
        *data_options(
            1024,
            "records per batch (the batch size of batched functions)",
            "raise (stop at the first bad record with file, line and traceback) or skip (write bad records to"
            " OUTPUT/_errors/ and go on)",
        ),
        *ship_options(
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
        *launch_options("/transform"),
        *RUNNER_ONLY,
    ),
)

_DOC = """Apply a Python function to every record of a data set, exactly once, on every rank and worker.

The function is packaged on the client into a sha256-pinned artifact; each slot (rank x worker)
claims the next unit of the input, largest first (or, with ``--assign static``, every
(ranks x workers)-th unit, DistributedSampler's rule, never padded), writes
``OUTPUT/part-NNNNN.jsonl`` per unit atomically, and rank 0 writes ``OUTPUT/_SUCCESS`` (a JSON
manifest) last. Relaunching a failed job with the same output resumes from committed units.
"""


def commit_dir(args: Any) -> str:
    """``--output``, or ``--state`` when the output is a message queue (runner/queue_output.py)."""
    from torchx_datapipes.queue.registry import is_queue_url
    from torchx_datapipes.secrets import mask_url

    queue = is_queue_url(args.output)
    if queue != (args.state is not None):
        raise ValueError(
            "--state DIR_OR_URL goes with a queue --output (redis://, amqp://, nats://) and only there;"
            f" got --output {mask_url(args.output)} and --state {args.state}"
        )
    return str(args.state if queue else args.output)


OP = OpDef(
    TRANSFORM,
    help="apply a function to every record",
    runner="torchx_datapipes.runner.transform:make_op",
    needs_fn=True,
    doc=_DOC,
    commit_dir=f"{__name__}:commit_dir",
    keys=Keys(
        manifest={
            "transform": (
                frozenset({ms.RECORDS_OUT, ms.FILTERED, ms.OUTPUT}),
                frozenset({ms.PARQUET_SCHEMA, ms.FIELD_TYPES, ms.MEGATRON, ms.CACHE}),
            ),
            "transform_queue": (
                frozenset({ms.RECORDS_OUT, ms.FILTERED, ms.OUTPUT, ms.STATE, ms.QUEUE}),
                frozenset({ms.CACHE}),
            ),
        },
        options={"transform": frozenset(), "transform_queue": frozenset({ms.OPT_QUEUE})},
        records={
            "transform": (
                frozenset({ms.RECORDS_OUT, ms.FILTERED, ms.OUTPUTS}),
                frozenset({ms.SCHEMAS, ms.FIELD_TYPES, ms.CACHE}),
            ),
            "transform_queue": (
                frozenset(
                    {
                        ms.RECORDS_OUT,
                        ms.FILTERED,
                        ms.OUTPUTS,
                        ms.MESSAGES,
                        ms.FIRST_PUBLISH_AT,
                        ms.BACKPRESSURE_WAIT_S,
                        ms.PEAK_BACKLOG,
                    }
                ),
                frozenset({ms.CACHE}),
            ),
        },
    ),
)
