"""Dataset statistics (a TFDV/StatisticsGen-like profile) for the ``stats`` job.

Each unit of work accumulates a :class:`StatsPartial` over batches of parsed JSON records;
partials are merged (in any order) and :func:`write_reports` renders the result as a
self-contained ``report.html`` and a Markdown ``stats.md``. The ``stats.json`` layout is
documented and versioned (:data:`SCHEMA_VERSION`) in ``docs/stats-schema.md``.

Moments (mean, std, sum, min, max) and counts are exact up to float64 rounding; quantiles,
histograms, large distinct counts and large top-k lists come from Apache DataSketches and
carry their error bounds in the output.

Non-goals: this is not a data validator (no schema inference or anomaly detection), and it
does not recurse into nested objects (only their type is counted).
"""

from torchx_datapipes.stats.config import StatsConfig
from torchx_datapipes.stats.partial import SCHEMA_VERSION, VALUE_FIELD, StatsPartial
from torchx_datapipes.stats.report import write_reports

__all__ = ["SCHEMA_VERSION", "VALUE_FIELD", "StatsConfig", "StatsPartial", "write_reports"]
