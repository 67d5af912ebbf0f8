"""The validate op: profile the input as ``stats`` does and check every record against a schema.

Each unit stores its stats partial and its anomalies (``_units/NNNNN.stats`` and ``.anom``);
rank 0 merges both in unit order, compares with an optional baseline, and writes
``stats.json``, ``anomalies.json`` and ``report.html`` (each atomically) before deciding: with
an anomaly at or above ``--fail_on`` the job fails and its error lists them (no ``_SUCCESS``).
"""

import argparse
from typing import Any, Callable, Dict, List, Optional

import orjson

from torchx_datapipes.formats.planning import Unit
from torchx_datapipes.formats.reading import UnitReader
from torchx_datapipes.io import manifest_schema as ms
from torchx_datapipes.io.checksum import write_file, write_summed
from torchx_datapipes.io.fs import join, read_bytes
from torchx_datapipes.io.layout import unit_file
from torchx_datapipes.runner.apply import Applier
from torchx_datapipes.runner.badrecords import ErrorSink
from torchx_datapipes.runner.context import PassContext
from torchx_datapipes.runner.engine import RunConfig
from torchx_datapipes.runner.stats import STATS_JSON, StatsOp
from torchx_datapipes.schema.anomalies import Found, at_or_above
from torchx_datapipes.schema.check import RecordChecker
from torchx_datapipes.schema.check_arrow import check_arrow
from torchx_datapipes.schema.compare import load_stats
from torchx_datapipes.schema.fast import snapshot, suspects
from torchx_datapipes.schema.model import Schema
from torchx_datapipes.schema.validate import AnomaliesFoundError, build, failure_message
from torchx_datapipes.stats import StatsConfig, StatsPartial

ANOMALIES_JSON = "anomalies.json"
_JSON_OPTS = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY
REPORT_HTML = "report.html"


class ValidateOp(StatsOp):
    name = "validate"

    def __init__(
        self,
        schema_url: str,
        baseline: Optional[str],
        fail_on: str,
        output: str,
        fn: Optional[Callable[..., Any]],
        on_error: Any,
    ) -> None:
        super().__init__(StatsConfig(), output, fn, on_error)
        self.schema_url, self.baseline_url, self.fail_on = schema_url, baseline, fail_on
        self.schema = Schema.load(schema_url)  # before any work: a bad schema fails every rank at once
        self.baseline = load_stats(baseline) if baseline else None

    @classmethod
    def from_args(
        cls, args: argparse.Namespace, cfg: RunConfig, fn: Optional[Callable[..., Any]]
    ) -> "ValidateOp":
        return cls(args.schema, args.baseline, args.fail_on, cfg.output, fn, cfg.on_error)

    def options(self) -> Dict[str, Any]:
        return {
            ms.OPT_VALIDATE: {
                ms.OPT_VALIDATE_SCHEMA: self.schema.to_dict(),
                ms.OPT_VALIDATE_BASELINE: self.baseline_url,
                ms.OPT_VALIDATE_FAIL_ON: self.fail_on,
            },
            ms.OPT_STATS: self.config.to_dict(),
            ms.OPT_FN: self.fn is not None,
        }

    def run(self, ctx: PassContext) -> None:
        ctx.run_pass("main", self.process)

    def process(self, unit: Unit, reader: UnitReader, sink: ErrorSink) -> Dict[str, Any]:
        partial, checker = StatsPartial(self.config), RecordChecker(self.schema)
        filtered = 0
        if self.fn is not None:
            applier = Applier(self.fn, self.on_error)
            for out in applier.run(reader.batches(), sink):  # transformed records have no line of their own
                partial.update(out)
                checker.check_records(out, lambda i: (unit.path, 0))
            filtered = applier.filtered
        elif reader.columnar:
            for batch, lines in reader.arrow_batches():
                sink.drain_parse_errors()
                before = snapshot(partial)
                partial.update_arrow(batch)
                names = suspects(self.schema, checker.kinds, partial, before, batch.num_rows)
                if names:
                    check_arrow(checker, batch, _locator(reader, lines), names)
            sink.drain_parse_errors()
        else:
            for recs, lines in reader.batches():
                sink.drain_parse_errors()
                before = snapshot(partial)
                partial.update(recs)
                # the profile just updated says which columns may break a rule: only those are walked
                names = suspects(self.schema, checker.kinds, partial, before, len(recs))
                if names:
                    checker.check_records(recs, _locator(reader, lines), names)
            sink.drain_parse_errors()
        files = [
            write_summed(self.output, unit_file(unit.name, "stats"), partial.to_bytes()),
            write_summed(self.output, unit_file(unit.name, "anom"), orjson.dumps(checker.found.state())),
        ]
        return {ms.RECORDS_OUT: partial.records, ms.FILTERED: filtered, ms.FILES: files}

    def finalize(self, ctx: PassContext, metas: List[Dict[str, Any]]) -> Dict[str, Any]:
        from torchx_datapipes.schema.report import write_report

        doc = self.merged_doc(ctx, metas)
        found = Found()
        for unit in ctx.units:  # unit order: the first examples in input order, for any -j
            found.merge(
                Found.from_state(orjson.loads(read_bytes(join(self.output, unit_file(unit.name, "anom")))))
            )
        anomalies, drifts = build(self.schema, doc, found, self.baseline)
        doc["validate"] = {
            "schema": self.schema_url,
            "baseline": self.baseline_url,
            "anomalies": len(anomalies),
        }
        write_file(join(self.output, STATS_JSON), orjson.dumps(doc, option=_JSON_OPTS))
        write_file(join(self.output, ANOMALIES_JSON), orjson.dumps(anomalies, option=_JSON_OPTS))
        write_report(
            join(self.output, REPORT_HTML), doc, self.baseline, drifts, anomalies, "Validation report"
        )
        failing = at_or_above(anomalies, self.fail_on)
        if failing:
            raise AnomaliesFoundError(failure_message(failing, self.fail_on, self.output, self.schema_url))
        return {
            ms.RECORDS_DESCRIBED: doc["records"],
            ms.ANOMALIES: len(anomalies),
            ms.STATS: join(self.output, STATS_JSON),
            ms.ANOMALIES_JSON: join(self.output, ANOMALIES_JSON),
            ms.REPORT: join(self.output, REPORT_HTML),
        }


def _locator(reader: UnitReader, lines: Any) -> Callable[[int], Any]:
    return lambda i: reader.location(lines[i])


make_op = ValidateOp.from_args  # the runner of ops/validate.py
