"""The transform op: apply the user's function, write one part per unit."""

from typing import Any, Callable, Dict, List, Optional

from torchx_datapipes.formats.commit import main_meta_names
from torchx_datapipes.formats.planning import Unit
from torchx_datapipes.formats.reading import UnitReader
from torchx_datapipes.formats.writing import PartWriter, encode_checked, part_name, writer_class
from torchx_datapipes.io import manifest_schema as ms
from torchx_datapipes.io.fs import join
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
        writer = PartWriter(join(self.output, rel), self.output_format, key_prefix=unit.name)
        applier = Applier(self.fn, self.on_error, self.memo)
        before = self.memo.stats() if self.memo else None
        try:
            for out in applier.run(reader.batches(), sink):
                if self.output_format == "jsonl":  # the hot path: encode, then write the lines
                    encoded, bad = encode_checked(out)
                    writer.write_encoded(encoded, out, (i for i, _ in bad))
                else:
                    bad = writer.write(out)
                for i, err in bad:
                    sink.record_failed(applier.line_of(i), out[i], TypeError(err), stage="serialize")
            writer.commit()
        except BaseException:
            writer.abort()
            raise
        meta: Dict[str, Any] = {
            ms.RECORDS_OUT: writer.records,
            ms.FILTERED: applier.filtered,
            ms.OUTPUTS: [rel],
        }
        meta[ms.FILES] = writer.file_sums(rel)
        meta.update(writer.commit_meta(rel))
        if self.memo is not None and before is not None:
            meta[ms.CACHE] = stats_delta(before, self.memo.stats())
        return meta

    def finalize(self, ctx: PassContext, metas: List[Dict[str, Any]]) -> Dict[str, Any]:
        unified = writer_class(self.output_format).finalize_job(
            self.output, metas, main_meta_names(ctx.units)
        )
        return {
            **unified,
            ms.RECORDS_OUT: sum(m[ms.RECORDS_OUT] for m in metas),
            ms.FILTERED: sum(m[ms.FILTERED] for m in metas),
            ms.OUTPUT: self.output,
            **({ms.CACHE: summarize(self.memo, metas)} if self.memo is not None else {}),
        }


def make_op(args: Any, cfg: Any, fn: Optional[Callable[..., Any]]) -> Any:
    """The transform's runner op (``ops/transform.py``): parts, or a queue when ``--state`` is given."""
    assert fn is not None
    memo = None
    if args.cache:
        from torchx_datapipes import artifact
        from torchx_datapipes.kinds import kind_of
        from torchx_datapipes.runner.apply import fn_name

        sha = args.sha256 or artifact.sha256_of_url(args.artifact)
        memo = Memo(args.cache, sha, kind_of(fn), fn_name(fn))
    if args.state is not None:  # a queue --output: publish instead of writing parts
        from torchx_datapipes.runner.queue_output import QueueTransformOp

        return QueueTransformOp(fn, args.output, cfg.output, cfg.on_error, args.max_backlog, memo)
    return TransformOp(fn, cfg.output, cfg.output_format, cfg.on_error, memo)
