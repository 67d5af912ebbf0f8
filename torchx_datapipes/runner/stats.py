"""The stats op: each unit accumulates a mergeable partial; rank 0 merges and reports.

Partials are stored beside the unit's commit record (``_units/NNNNN.stats``), so a
restarted or relaunched job merges committed partials instead of recomputing them.
"""

import argparse
from typing import Any, Callable, Dict, List, Optional

import orjson

from torchx_datapipes.formats.planning import Unit
from torchx_datapipes.formats.reading import UnitReader
from torchx_datapipes.io import manifest as mf
from torchx_datapipes.io import manifest_schema as ms
from torchx_datapipes.io.checksum import write_file, write_summed
from torchx_datapipes.io.fs import join, read_bytes
from torchx_datapipes.io.layout import unit_file
from torchx_datapipes.runner.apply import Applier
from torchx_datapipes.runner.badrecords import ErrorSink
from torchx_datapipes.runner.context import PassContext
from torchx_datapipes.runner.engine import RunConfig
from torchx_datapipes.stats import SCHEMA_VERSION, StatsConfig, StatsPartial, write_reports

STATS_JSON = "stats.json"


class StatsOp:
    name = "stats"

    def __init__(
        self, config: StatsConfig, output: str, fn: Optional[Callable[..., Any]], on_error: Any
    ) -> None:
        self.config, self.output, self.fn, self.on_error = config, output, fn, on_error

    @classmethod
    def from_args(
        cls, args: argparse.Namespace, cfg: RunConfig, fn: Optional[Callable[..., Any]]
    ) -> "StatsOp":
        config = StatsConfig.parse(args.fields or None, args.quantiles or None, args.top_k, args.bins)
        return cls(config, cfg.output, fn, cfg.on_error)

    def options(self) -> Dict[str, Any]:
        return {ms.OPT_STATS: self.config.to_dict(), ms.OPT_FN: self.fn is not None}

    def run(self, ctx: PassContext) -> None:
        if self.config.fields and self.fn is None:  # every rank, before any work: a typo fails fast
            from torchx_datapipes.stats.fieldcheck import check_fields

            check_fields(self.config.fields, ctx.units)
        ctx.run_pass("main", self.process)

    def partial_url(self, unit: Unit) -> str:
        return join(self.output, unit_file(unit.name, "stats"))

    def process(self, unit: Unit, reader: UnitReader, sink: ErrorSink) -> Dict[str, Any]:
        partial = StatsPartial(self.config)
        filtered = 0
        if self.fn is not None:
            applier = Applier(self.fn, self.on_error)
            for out in applier.run(reader.batches(), sink):
                partial.update(out)
            filtered = applier.filtered
        elif reader.columnar:  # typed Arrow batches: numpy arrays into the accumulators, no dicts
            for batch, _ in reader.arrow_batches():
                sink.drain_parse_errors()
                partial.update_arrow(batch)
            sink.drain_parse_errors()
        else:
            reader.objects_only = False  # a profile describes any JSON value (as field $value)
            for recs, _ in reader.batches():
                sink.drain_parse_errors()
                partial.update(recs)
            sink.drain_parse_errors()
        written = write_summed(self.output, unit_file(unit.name, "stats"), partial.to_bytes())
        return {ms.RECORDS_OUT: partial.records, ms.FILTERED: filtered, ms.FILES: [written]}

    def finalize(self, ctx: PassContext, metas: List[Dict[str, Any]]) -> Dict[str, Any]:
        doc = self.merged_doc(ctx, metas)
        write_file(join(self.output, STATS_JSON), orjson.dumps(doc, option=orjson.OPT_INDENT_2))
        write_reports(doc, self.output)
        return {
            ms.RECORDS_DESCRIBED: doc["records"],
            ms.STATS: join(self.output, STATS_JSON),
            ms.REPORT: join(self.output, "report.html"),
            ms.MARKDOWN: join(self.output, "stats.md"),
        }

    def merged_doc(self, ctx: PassContext, metas: List[Dict[str, Any]]) -> Dict[str, Any]:
        """Every unit's partial merged, in unit order, with the job's header: the stats.json document."""
        merged = StatsPartial(self.config)
        for unit in ctx.units:  # unit order: the merge is deterministic for any -j
            merged.merge(StatsPartial.from_bytes(read_bytes(self.partial_url(unit))))
        doc = merged.result()
        records_in = sum(m[ms.RECORDS_IN] for m in metas)
        bad = sum(m[ms.BAD] for m in metas)
        inputs = [{ms.INPUT_PATH: p, ms.INPUT_SIZE: s} for p, s in ctx.inputs]
        # the manifest fields the other ops write (``_SUCCESS`` itself is written after this file)
        base = mf.base_manifest(self.name, inputs, ctx.options)
        manifest = {k: base[k] for k in (ms.VERSION, ms.OP, ms.CREATED, ms.OPTIONS, ms.VERSIONS)}
        doc.update(
            {
                "schema_version": SCHEMA_VERSION,
                "records_in": records_in,
                "bad_records": bad,
                "filtered": sum(m[ms.FILTERED] for m in metas),
                "inputs": inputs,
                "world_size": ctx.world_size,
                "artifact": {"url": ctx.artifact, "sha256": ctx.sha256},
                "manifest": {**manifest, ms.NUM_WORKERS: ctx.num_workers},
            }
        )
        return doc


make_op = StatsOp.from_args  # the runner of ops/stats.py
