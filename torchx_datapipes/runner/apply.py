"""Apply a user function of any declared kind to a unit's record stream.

The Applier also remembers which input line each record of the batch it last yielded came
from, so a failure after the function (serialisation) names the right line. Per-record
functions keep a short list of breakpoints, one per record that did not map to exactly one
output (filtered, failed, flat-mapped), so a plain map costs nothing; a batched function that
changed the batch length is re-run record by record only when a line is asked for.
"""

import bisect
from typing import Any, Callable, Iterable, Iterator, List, Optional, Sequence, Tuple, cast

from torchx_datapipes.kinds import FnKind, kind_of
from torchx_datapipes.runner.badrecords import ErrorSink, OnError, RecordError
from torchx_datapipes.runner.memo import Memo, materialize

Batches = Iterator[Tuple[List[Any], Sequence[int]]]
Break = Tuple[int, int, int]  # (first output index, input index, step): output j -> input k + step*(j - o)
_ONE_TO_ONE: List[Break] = [(0, 0, 1)]


def _first(b: Break) -> int:
    return b[0]


def fn_name(fn: Any) -> str:
    inner = getattr(fn, "fn", fn)
    return getattr(inner, "__qualname__", None) or type(inner).__name__


class Applier:
    """Runs ``fn`` over batches; counts filtered records; sends failures to the sink."""

    def __init__(self, fn: Callable[..., Any], on_error: OnError, memo: Optional[Memo] = None) -> None:
        self.fn, self.kind, self.on_error, self.memo = fn, kind_of(fn), on_error, memo
        self.filtered = 0
        # where the last yielded batch came from: its input records and lines, and the breakpoints
        self._recs: List[Any] = []
        self._lines: Sequence[int] = ()
        self._breaks: Optional[List[Break]] = _ONE_TO_ONE

    def line_of(self, j: int) -> int:
        """The (unit-local) input line of output record ``j`` of the last batch; 0 if it is unknown."""
        if not self._lines:
            return 0
        if self._breaks is None:
            self._breaks = self._rerun_breaks()
            if self._breaks is None:
                return self._lines[0]
        breaks = self._breaks
        o, k, step = breaks[bisect.bisect_right(breaks, j, key=_first) - 1]
        i = k + step * (j - o)
        return self._lines[i] if 0 <= i < len(self._lines) else self._lines[-1]

    def _rerun_breaks(self) -> Optional[List[Break]]:
        """A batched function changed the batch length: count each record's outputs (on error only)."""
        breaks: List[Break] = [(0, 0, 1)]
        n = 0
        try:
            for i, rec in enumerate(self._recs):
                breaks.append((n, i, 0))
                n += len(list(self.fn([rec])))
                breaks.append((n, i + 1, 1))
        except Exception:
            return None
        return breaks

    def _origin(self, recs: List[Any], lines: Sequence[int], breaks: Optional[List[Break]]) -> None:
        self._recs, self._lines, self._breaks = recs, lines, breaks or _ONE_TO_ONE

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
        breaks: List[Break] = [(0, 0, 1)]
        mark = breaks.append
        filtered = 0
        for i, rec in enumerate(recs):
            try:
                r = fn(rec)
                if r is None:
                    filtered += 1
                    mark((len(out), i + 1, 1))
                elif isinstance(r, dict):
                    append(r)
                elif isinstance(r, (list, tuple, Iterator)):
                    mark((len(out), i, 0))
                    extend(r)
                    mark((len(out), i + 1, 1))
                else:
                    append(r)
            except Exception as e:
                mark((len(out), i + 1, 1))
                sink.record_failed(lines[i], rec, e)
        self.filtered += filtered
        self._origin(recs, lines, breaks)
        return out

    def _memoized(self, memo: Memo, recs: List[Any], lines: Sequence[int], sink: ErrorSink) -> List[Any]:
        """Per-record with the cache: one get_many for the batch, the function on misses, one set_many."""
        keys = memo.keys(recs)
        cached = memo.lookup(keys)
        out: List[Any] = []
        breaks: List[Break] = [(0, 0, 1)]
        fresh = []
        for i, rec in enumerate(recs):
            if i in cached:
                r = cached[i]
            else:
                try:
                    r = materialize(self.fn(rec))
                except Exception as e:
                    breaks.append((len(out), i + 1, 1))
                    sink.record_failed(lines[i], rec, e)
                    continue
                fresh.append((keys[i], r))
            if r is None:
                self.filtered += 1
                breaks.append((len(out), i + 1, 1))
            elif isinstance(r, (list, tuple)):
                breaks.append((len(out), i, 0))
                out.extend(r)
                breaks.append((len(out), i + 1, 1))
            else:
                out.append(r)
        memo.store(fresh)
        self._origin(recs, lines, breaks)
        return out

    def _batched(self, recs: List[Any], lines: Sequence[int], sink: ErrorSink) -> List[Any]:
        try:
            got = list(self.fn(recs))
            self._origin(recs, lines, _ONE_TO_ONE)
            if len(got) != len(recs):
                self._breaks = None  # worked out only if a line is asked for
            return got
        except Exception as e:
            if self.on_error is OnError.RAISE or len(recs) == 1:
                sink.record_failed(lines[0], recs[0] if len(recs) == 1 else f"<batch of {len(recs)}>", e)
                return []
        # isolate the bad records: retry one at a time
        out: List[Any] = []
        breaks: List[Break] = [(0, 0, 1)]
        for i, (rec, line) in enumerate(zip(recs, lines)):
            breaks.append((len(out), i, 0))
            try:
                out.extend(self.fn([rec]))
            except Exception as e:
                sink.record_failed(line, rec, e)
            breaks.append((len(out), i + 1, 1))
        self._origin(recs, lines, breaks)
        return out

    def _pipeline(self, batches: Batches, sink: ErrorSink) -> Iterator[List[Any]]:
        self._origin([], (), None)  # a pipeline's outputs cannot be traced to input lines

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
                f"{sink.where}: pipeline function {fn_name(self.fn)} raised {type(e).__name__}: {e}\n"
                "  a pipeline consumes the whole unit, so a failure cannot be pinned to one record and"
                " --on_error skip cannot route it; handle bad records inside the pipeline (e.g. a filter)"
                " or use a per-record function"
            ) from e
