"""The ``validate`` op: check every record against a schema, with statistics (spec, help, runner).

Manifest keys (``Keys``; the shared ones are ``io/manifest_schema.py``'s): ``_SUCCESS``
(``runner/validate.py``): ``records_described``, ``anomalies`` (how many), ``stats``,
``anomalies_json``, ``report``; its ``options`` add ``validate`` (``schema``, ``baseline``,
``fail_on``), ``stats`` and ``fn``. Commit records: ``records_out``, ``filtered``.
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
from torchx_datapipes.options.spec import REQUIRED, OpSpec, Option


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
        *io_options(INPUT_HELP, "output directory: stats.json, anomalies.json and report.html"),
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
            for o in data_options(
                4096,
                "records per batch (statistics and checks are vectorised per batch)",
                "raise (stop at the first unparseable record) or skip (count it, write it to"
                " OUTPUT/_errors/)",
                output_format=False,
            )
            if o.name != "schema"  # --schema is the validation schema here
        ),
        *ship_options(
            "where the client uploads the fn artifact (s3://... for clusters)",
            "how fn is shipped: cloudpickle, torch.package or module",
        ),
        *launch_options("/validate"),
        *RUNNER_ONLY,
    ),
)

_DOC = """Check every record against a schema while profiling the data; fail the job on anomalies (a CI gate).

Writes ``OUTPUT/stats.json`` (as the stats job), ``OUTPUT/anomalies.json`` (each anomaly with up
to 5 example records: file, line and value) and ``OUTPUT/report.html`` (anomalies first, then
baseline against current), whether the job then passes or fails; ``OUTPUT/_SUCCESS`` only when no
anomaly reaches ``--fail_on``. Make the schema with ``python -m torchx_datapipes.schema infer``;
see docs/validate.md.
"""

OP = OpDef(
    VALIDATE,
    help="check every record against a schema, with statistics",
    runner="torchx_datapipes.runner.validate:make_op",
    doc=_DOC,
    csv_types=None,  # validate's --schema is a schema file
    keys=Keys(
        manifest={
            "validate": (
                frozenset({ms.RECORDS_DESCRIBED, ms.ANOMALIES, ms.STATS, ms.ANOMALIES_JSON, ms.REPORT}),
                frozenset(),
            )
        },
        options={"validate": frozenset({ms.OPT_VALIDATE, ms.OPT_STATS, ms.OPT_FN})},
        records={"validate": (frozenset({ms.RECORDS_OUT, ms.FILTERED}), frozenset())},
    ),
)
