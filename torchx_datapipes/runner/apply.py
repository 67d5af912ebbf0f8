"""Apply a user function of any declared kind to a unit's record stream."""

from typing import Any, Callable, Iterable, Iterator, List, Optional, Sequence, Tuple, cast

from torchx_datapipes.kinds import FnKind, kind_of
from torchx_datapipes.runner.badrecords import ErrorSink, OnError, RecordError
from torchx_datapipes.runner.memo import Memo, materialize

Batches = Iterator[Tuple[List[Any], Sequence[int]]]


def fn_name(fn: Any) -> str:
    inner = getattr(fn, "fn", fn)
    return getattr(inner, "__qualname__", None) or type(inner).__name__


class Applier:
    """Runs ``fn`` over batches; counts filtered records; sends failures to the sink."""

    def __init__(self, fn: Callable[..., Any], on_error: OnError, memo: Optional[Memo] = None) -> None:
        self.fn, self.kind, self.on_error, self.memo = fn, kind_of(fn), on_error, memo
        self.filtered = 0

    def run(self, batches: Batches, sink: ErrorSink) -> Iterator[List[Any]]:
        """Yield output batches."""
        if self.kind is FnKind.RECORD:
            for recs, lines in batches:
                sink.drain_parse_errors()
                yield self._per_record(recs, lines, sink)
        elif self.kind is FnKind.BATCHED:
            for recs, lines in batches:
                sink.drain_parse_errors()
                yield self._batched(recs, lines, sink)
        else:
            yield from self._pipeline(batches, sink)
        sink.drain_parse_errors()

    def _per_record(self, recs: List[Any], lines: Sequence[int], sink: ErrorSink) -> List[Any]:
        if self.memo is not None:
            return self._memoized(self.memo, recs, lines, sink)
        fn, out = self.fn, cast(List[Any], [])
        append, extend = out.append, out.extend
        filtered = 0
        for i, rec in enumerate(recs):
            try:
                r = fn(rec)
                if r is None:
                    filtered += 1
                elif isinstance(r, dict):
                    append(r)
                elif isinstance(r, (list, tuple, Iterator)):
                    extend(r)
                else:
                    append(r)
            except Exception as e:
                sink.record_failed(lines[i], rec, e)
        self.filtered += filtered
        return out

    def _memoized(self, memo: Memo, recs: List[Any], lines: Sequence[int], sink: ErrorSink) -> List[Any]:
        """Per-record with the cache: one get_many for the batch, the function on misses, one set_many."""
        keys = memo.keys(recs)
        cached = memo.lookup(keys)
        out: List[Any] = []
        fresh = []
        for i, rec in enumerate(recs):
            if i in cached:
                r = cached[i]
            else:
                try:
                    r = materialize(self.fn(rec))
                except Exception as e:
                    sink.record_failed(lines[i], rec, e)
                    continue
                fresh.append((keys[i], r))
            if r is None:
                self.filtered += 1
            elif isinstance(r, (list, tuple)):
                out.extend(r)
            else:
                out.append(r)
        memo.store(fresh)
        return out

    def _batched(self, recs: List[Any], lines: Sequence[int], sink: ErrorSink) -> List[Any]:
        try:
            return list(self.fn(recs))
        except Exception as e:
            if self.on_error is OnError.RAISE or len(recs) == 1:
                sink.record_failed(lines[0], recs[0] if len(recs) == 1 else f"<batch of {len(recs)}>", e)
                return []
        # isolate the bad records: retry one at a time
        out: List[Any] = []
        for rec, line in zip(recs, lines):
            try:
                out.extend(self.fn([rec]))
            except Exception as e:
                sink.record_failed(line, rec, e)
        return out

    def _pipeline(self, batches: Batches, sink: ErrorSink) -> Iterator[List[Any]]:
        def records() -> Iterator[Any]:
            for recs, _ in batches:
                sink.drain_parse_errors()
                yield from recs

        source: Any
        if self.kind is FnKind.DATAPIPE:
            from torch.utils.data.datapipes.iter import IterableWrapper

            source = IterableWrapper(records(), deepcopy=False)
        else:
            from torchdata.nodes import IterableWrapper as NodeWrapper

            source = NodeWrapper(records())
        try:
            result: Iterable[Any] = self.fn(source)
            if self.kind is FnKind.NODES and not isinstance(result, list):
                from torchdata.nodes import BaseNode, Loader

                if isinstance(result, BaseNode):
                    result = Loader(result)
            buf: List[Any] = []
            for rec in result:
                buf.append(rec)
                if len(buf) >= 1024:
                    yield buf
                    buf = []
            yield buf
        except RecordError:
            raise
        except Exception as e:
            raise RecordError(
                f"{sink.path}: pipeline function {fn_name(self.fn)} raised {type(e).__name__}: {e}\n"
                "  a pipeline consumes the whole unit, so a failure cannot be pinned to one record and"
                " --on_error skip cannot route it; handle bad records inside the pipeline (e.g. a filter)"
                " or use a per-record function"
            ) from e
