"""Receipts: a queue record counts as consumed once the *training loop* has it, not the worker.

A DataLoader worker hands records to the main process through a result queue, and is asked
for more before the main process has taken the last ones (``prefetch_factor``), so a worker
that acked a message when it moved past its last record lost that record if the trainer died
with it still queued (issue 29). The worker cannot know when the main process returns an item
to the loop; only code in the main process can. So:

- the worker yields each record as a :class:`Receipted` dict carrying a receipt token (which
  message, which consumer). Pickled for the result queue, it becomes a **plain dict** in the
  main process (the user's type is untouched) and :func:`_received` runs there, in the process
  that will hand the record to the loop;
- the main process's :class:`Receipts` holds each unpickled item until the DataLoader's
  iterator has returned it (an out-of-order item waits in the iterator's reorder buffer,
  ``_task_info``), then, once every record of a message was returned, appends ``done`` for
  the message to the group log from a thread of its own (its own broker connection);
- the worker acks the broker message when it reads that ``done`` in the log (a delivery tag is
  only valid on the connection that fetched it), and waits for its messages' ``done`` before
  it ends.

A killed trainer therefore loses nothing: what it had not returned to the loop is never
``done`` and is redelivered to the group. Fallbacks, both documented in docs/queue.md: when the
unpickling happens where the iterator cannot be seen (``pin_memory=True`` unpickles in the pin
thread), an item counts as returned when it reaches the trainer process; a ``collate_fn`` that
rebuilds the records drops the tokens, which the worker notices (no token ever pickled) and it
then acks as before, when it moves past a message, with one warning.
"""

import atexit
import os
import sys
import threading
import time
import weakref
from types import FrameType
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

Token = Tuple[str, str, str, str, str, int, int]  # url, group, consumer, job, message id, records, here

# tokens this process sent through a pickle (a worker's evidence receipts flow); collate registered
_STATE = {"pickled": 0, "collate": 0}


def pickled_tokens() -> int:
    return _STATE["pickled"]


class Receipted(dict):
    """A record on its way from a DataLoader worker to the main process, with its receipt tokens."""

    __slots__ = ("tokens",)

    def __init__(self, data: Any = (), tokens: Sequence[Token] = ()) -> None:
        super().__init__(data)
        self.tokens: List[Token] = list(tokens)
        if not _STATE["collate"]:
            _register_collate()

    def __copy__(self) -> "Receipted":  # default_convert / default_collate copy a mutable mapping
        return Receipted(self, self.tokens)

    def __reduce__(self) -> Any:
        _STATE["pickled"] += len(self.tokens)
        return (_received, (self.tokens, dict(self)))


def _collate_receipted(batch: List[Receipted], *, collate_fn_map: Any = None) -> Receipted:
    """default_collate of records with receipts: the batch collated as plain dicts, every token kept."""
    from torch.utils.data._utils import collate

    out = collate.collate([dict(r) for r in batch], collate_fn_map=collate_fn_map)
    tokens: List[Token] = [t for r in batch for t in r.tokens]
    return Receipted(out, tokens)


def _register_collate() -> None:
    """default_collate looks a type up in its map before it copies a mapping (which would keep only the
    first record's tokens). Done when a worker makes its first receipt, so that importing the queue
    package (the torchx client does) never imports torch."""
    from torch.utils.data._utils import collate

    collate.default_collate_fn_map.setdefault(Receipted, _collate_receipted)
    _STATE["collate"] = 1


def _received(tokens: List[Token], data: Dict[str, Any]) -> Dict[str, Any]:
    """Unpickling in the main process: note the receipt, give the loop the plain dict."""
    receipts().received(tokens, data, _dataloader_iter())
    return data


def _dataloader_iter() -> Any:
    """The multi-process DataLoader iterator unpickling this item (None when it cannot be seen)."""
    from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

    f: Optional[FrameType] = sys._getframe(2)
    for _ in range(8):
        if f is None:
            return None
        if f.f_code.co_name in ("_try_get_data", "_get_data", "_next_data"):
            it = f.f_locals.get("self")
            if isinstance(it, _MultiProcessingDataLoaderIter):
                return it
        f = f.f_back
    return None


class _Pending:
    __slots__ = ("tokens", "data", "it", "rcvd")

    def __init__(self, tokens: List[Token], data: Any, it: Any) -> None:
        self.tokens, self.data = tokens, data
        # a weak reference: holding the iterator would keep its workers alive after the loop let it go
        self.it = weakref.ref(it) if it is not None else None
        self.rcvd = int(it._rcvd_idx) if it is not None else -1


_GONE, _WAIT, _RETURNED = 0, 1, 2


def _state(p: _Pending, buffered: Dict[int, Optional[Set[int]]]) -> int:
    """Whether the iterator has handed ``p``'s item to the loop (it is no longer in the iterator's
    reorder buffer, and the iterator moved past the index it was waiting for when it got the item)."""
    if p.it is None:
        return _RETURNED
    it = p.it()
    if it is None:  # the loop let its iterator go (a ``break``): what it had not returned is redelivered
        return _GONE
    key = id(it)
    if key not in buffered:
        buffered[key] = _buffered(it)
    held = buffered[key]
    if held is None or id(p.data) in held:
        return _WAIT
    return _RETURNED if int(it._rcvd_idx) > p.rcvd or not it._in_order else _WAIT


def _buffered(it: Any) -> Optional[Set[int]]:
    """The items in the iterator's reorder buffer (None: the main thread kept changing it)."""
    for _ in range(5):
        try:
            return {id(v[1]) for v in list(it._task_info.values()) if len(v) == 2}
        except RuntimeError:  # changed size during iteration
            continue
    return None


class Receipts(threading.Thread):
    """The main process's receipts: items unpickled, returned to the loop, messages done in the log."""

    def __init__(self, every_s: float = 0.02) -> None:
        super().__init__(daemon=True, name="tdp-queue-receipts")
        self.every_s = every_s
        self.lock = threading.Lock()
        self.pending: List[_Pending] = []
        self.counts: Dict[Tuple[str, str, str, str], int] = {}  # (url, group, consumer, id) -> returned
        self.committed = 0
        self._ledgers: Dict[Tuple[str, str], Any] = {}
        self._wake = threading.Event()

    def received(self, tokens: List[Token], data: Any, it: Any) -> None:
        with self.lock:
            self.pending.append(_Pending(tokens, data, it))
        if not self.is_alive():
            self.start()
        if it is None:
            self._wake.set()

    def run(self) -> None:
        while True:
            self._wake.wait(self.every_s)
            self._wake.clear()
            try:
                self.settle()
            except Exception as e:  # the broker is away: the next round retries (nothing is lost)
                print(
                    f"torchx_datapipes: queue receipts: {type(e).__name__}: {e}", file=sys.stderr, flush=True
                )
                time.sleep(0.5)

    def settle(self) -> int:
        """Commit what the loop has received; returns the number of messages marked done."""
        buffered: Dict[int, Optional[Set[int]]] = {}
        with self.lock:
            states = [(p, _state(p, buffered)) for p in self.pending]
            self.pending = [p for p, st in states if st == _WAIT]
        ready = [p for p, st in states if st == _RETURNED]
        if not ready:
            return 0
        done: List[Tuple[str, str, str, str, int]] = []
        for p in ready:
            for url, group, consumer, job, mid, n, k in p.tokens:
                key = (url, group, consumer, mid)
                got = self.counts.get(key, 0) + k
                if got >= n:
                    self.counts.pop(key, None)
                    done.append((url, group, job, mid, n))
                else:
                    self.counts[key] = got
        for url, group, job, mid, n in done:
            self._ledger(url, group).mark_done(mid, job, n)
        self.committed += len(done)
        return len(done)

    def _ledger(self, url: str, group: str) -> Any:
        from torchx_datapipes.queue.ledger import Ledger
        from torchx_datapipes.queue.registry import open_queue
        from torchx_datapipes.secrets import resolve

        key = (url, group)
        if key not in self._ledgers:
            self._ledgers[key] = Ledger(open_queue(resolve(url)), group)
        return self._ledgers[key]


_RECEIPTS: Dict[int, Receipts] = {}
_LOCK = threading.Lock()


def _at_exit() -> None:
    """The trainer is exiting: commit what its loop received (the committer thread is a daemon)."""
    r = _RECEIPTS.get(os.getpid())
    if r is not None:
        try:
            r.settle()
        except Exception:
            pass


atexit.register(_at_exit)


def receipts() -> Receipts:
    """This process's receipts (a forked child gets its own)."""
    pid = os.getpid()
    r = _RECEIPTS.get(pid)
    if r is None:
        with _LOCK:
            r = _RECEIPTS.get(pid)
            if r is None:
                r = _RECEIPTS[pid] = Receipts()
    return r
