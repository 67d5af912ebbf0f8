"""The ``split`` op: a reproducible train/val/test split (its option spec, help and runner).

Manifest keys (``Keys``; the shared ones are ``io/manifest_schema.py``'s):

- ``_SUCCESS`` (``runner/split.py``): ``records_out``, ``filtered``, ``splits`` (records per split),
  ``fractions``, ``method``, ``seed``, ``key`` (the key fields or null), ``stratify``,
  ``warnings``, ``output``, ``drift``; with ``--stratify`` ``classes`` (class -> records per
  split); with Parquet ``parquet_schema``, with JSON Lines or WebDataset ``field_types``, with
  megatron ``megatron``. Its ``options`` add ``fractions``, ``method``, ``seed``, ``key``, ``stratify``.
- commit records, main pass: ``records_out``, ``filtered``, ``counts`` (records per split),
  ``outputs`` (one part per split), ``profile`` (the ``_units/NNNNN.profile`` side file); with
  Parquet ``schemas``, with JSON Lines or WebDataset ``field_types``; with ``--stratify``
  ``class_counts`` (class -> records per split).
- commit records, counting pass (``_units/NNNNN.count.json``; ``--method exact`` or
  ``--stratify``): ``count``; with ``--stratify`` ``class_counts`` (class -> records); with hash +
  stratify ``hashes`` (the ``_split/`` side file).
"""

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
from torchx_datapipes.options.spec import OpSpec, Option

SPLIT = OpSpec(
    "split",
    (
        *io_options(INPUT_HELP, "output directory"),
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
        *data_options(
            1024,
            "records per batch",
            "raise (stop at the first bad record) or skip (write bad records to OUTPUT/_errors/)",
        ),
        *ship_options(
            "where the client uploads the fn artifact (s3://... for clusters)",
            "how fn is shipped: cloudpickle, torch.package or module",
        ),
        *launch_options("/split"),
        *RUNNER_ONLY,
    ),
)

_DOC = """Split a data set into named parts (train/val/test/...) reproducibly, for any -j.

Writes ``OUTPUT/<split>/part-NNNNN.jsonl`` and ``OUTPUT/_SUCCESS`` with counts per split (and per
class when stratified), the options and the seed. See docs/split.md for the guarantees.
"""

OP = OpDef(
    SPLIT,
    help="train/val/test split",
    runner="torchx_datapipes.runner.split:make_op",
    doc=_DOC,
    keys=Keys(
        manifest={
            "split": (
                frozenset(
                    {
                        ms.RECORDS_OUT,
                        ms.FILTERED,
                        ms.SPLITS,
                        ms.FRACTIONS,
                        ms.METHOD,
                        ms.SEED,
                        ms.SPLIT_KEY,
                        ms.STRATIFY,
                        ms.WARNINGS,
                        ms.OUTPUT,
                        ms.DRIFT,
                    }
                ),
                frozenset({ms.CLASSES, ms.PARQUET_SCHEMA, ms.FIELD_TYPES, ms.MEGATRON}),
            ),
        },
        options={
            "split": frozenset({ms.OPT_FRACTIONS, ms.OPT_METHOD, ms.OPT_SEED, ms.OPT_KEY, ms.OPT_STRATIFY})
        },
        records={
            "split": (
                frozenset({ms.RECORDS_OUT, ms.FILTERED, ms.COUNTS, ms.OUTPUTS, ms.PROFILE}),
                frozenset({ms.SCHEMAS, ms.FIELD_TYPES, ms.CLASS_COUNTS}),
            ),
            "split_count": (frozenset({ms.COUNT}), frozenset({ms.CLASS_COUNTS, ms.HASHES})),
        },
    ),
)
