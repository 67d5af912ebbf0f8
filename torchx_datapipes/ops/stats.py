"""The ``stats`` op: summary statistics and a report (its option spec, help and runner).

Manifest keys (``Keys``; the shared ones are ``io/manifest_schema.py``'s): ``_SUCCESS``
(``runner/stats.py``): ``records_described``, ``stats``, ``report``, ``markdown`` (the URLs of
``stats.json``, ``report.html``, ``stats.md``); its ``options`` add ``stats`` and ``fn``. Commit
records: ``records_out``, ``filtered``.
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

STATS = OpSpec(
    "stats",
    (
        *io_options(INPUT_HELP, "output directory"),
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
        *data_options(
            4096,
            "records per batch (statistics are accumulated per batch, vectorised)",
            "raise (stop at the first bad record) or skip (count it, write it to OUTPUT/_errors/)",
            output_format=False,
        ),
        *ship_options(
            "where the client uploads the fn artifact (s3://... for clusters)",
            "how fn is shipped: cloudpickle, torch.package or module",
        ),
        *launch_options("/stats"),
        *RUNNER_ONLY,
    ),
)

_DOC = """Compute one-pass, mergeable summary statistics of a data set and an HTML report.

Writes ``OUTPUT/stats.json`` (schema in docs/stats-schema.md), ``OUTPUT/report.html`` (a
self-contained page with a histogram per numeric field and a top-k chart per string field, for the
first 100 fields),
``OUTPUT/stats.md`` and ``OUTPUT/_SUCCESS`` last.
"""

OP = OpDef(
    STATS,
    help="summary statistics and a report",
    runner="torchx_datapipes.runner.stats:make_op",
    doc=_DOC,
    keys=Keys(
        manifest={
            "stats": (frozenset({ms.RECORDS_DESCRIBED, ms.STATS, ms.REPORT, ms.MARKDOWN}), frozenset())
        },
        options={"stats": frozenset({ms.OPT_STATS, ms.OPT_FN})},
        records={"stats": (frozenset({ms.RECORDS_OUT, ms.FILTERED}), frozenset())},
    ),
)
