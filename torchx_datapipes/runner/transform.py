"""The transform op: apply the user's function, write one part per unit."""

from typing import Any, Callable, Dict, List, Optional

from torchx_datapipes.io.bigints import find_big_int
from torchx_datapipes.io.formats import UnitReader
from torchx_datapipes.io.fs import join
from torchx_datapipes.io.units import Unit
from torchx_datapipes.io.writers import PartWriter, encode_checked, part_name
from torchx_datapipes.runner.apply import Applier
from torchx_datapipes.runner.badrecords import ErrorSink
from torchx_datapipes.runner.context import PassContext
from torchx_datapipes.runner.memo import Memo, stats_delta, summarize


class TransformOp:
    name = "transform"

    def __init__(
        self,
        fn: Callable[..., Any],
        output: str,
        output_format: str,
        on_error: Any,
        memo: Optional[Memo] = None,
    ) -> None:
        self.fn, self.output, self.output_format, self.on_error = fn, output, output_format, on_error
        self.memo = memo

    def options(self) -> Dict[str, Any]:
        return {}

    def run(self, ctx: PassContext) -> None:
        ctx.run_pass("main", self.process)

    def process(self, unit: Unit, reader: UnitReader, sink: ErrorSink) -> Dict[str, Any]:
        rel = part_name(unit.index, self.output_format)
        writer = PartWriter(join(self.output, rel), self.output_format)
        applier = Applier(self.fn, self.on_error, self.memo)
        before = self.memo.stats() if self.memo else None
        try:
            for out in applier.run(reader.batches(), sink):
                if self.output_format == "jsonl":
                    encoded, bad = encode_checked(out)
                    for i, err in bad:
                        sink.record_failed(applier.line_of(i), out[i], TypeError(err), stage="serialize")
                    writer.write_encoded(encoded)
                else:
                    _write_rows(writer, out, applier, sink)
            writer.commit()
        except BaseException:
            writer.abort()
            raise
        meta: Dict[str, Any] = {"records_out": writer.records, "filtered": applier.filtered, "outputs": [rel]}
        meta["files"] = [writer.file_sum(rel)]
        if self.memo is not None and before is not None:
            meta["cache"] = stats_delta(before, self.memo.stats())
        return meta

    def finalize(self, ctx: PassContext, metas: List[Dict[str, Any]]) -> Dict[str, Any]:
        return {
            "records_out": sum(m["records_out"] for m in metas),
            "filtered": sum(m["filtered"] for m in metas),
            "output": self.output,
            **({"cache": summarize(self.memo, metas)} if self.memo is not None else {}),
        }


def _write_rows(writer: PartWriter, out: List[Any], applier: Applier, sink: ErrorSink) -> None:
    """Parquet rows; a record with an integer beyond 64 bits is refused by name (file, line, field)."""
    try:
        writer.write(out)
        return
    except (OverflowError, ValueError, TypeError):  # pyarrow.ArrowInvalid is a ValueError
        fields = {i: f for i, f in ((i, find_big_int(r)) for i, r in enumerate(out)) if f}
        if not fields:
            raise
    for i, field in fields.items():
        e = TypeError(
            f"field {field}: integer beyond 64 bits; Parquet stores at most 64-bit integers."
            " Write --output_format jsonl (exact) or convert the field to str in your function"
        )
        sink.record_failed(applier.line_of(i), out[i], e, stage="serialize")
    writer.write([r for i, r in enumerate(out) if i not in fields])
