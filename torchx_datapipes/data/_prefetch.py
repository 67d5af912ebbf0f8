"""Read-ahead: a pooled daemon thread producing the next items into a bounded queue.

Read-ahead threads are pooled per process and never exit: a thread that read Parquet and then
exited inside a forked DataLoader worker crashed the worker in Arrow's bundled jemalloc per-thread
cleanup (``je_tsd_cleanup`` from ``__nptl_deallocate_tsd``, from a core dump; about 1 in 20
resumed epochs in a stress loop, whatever the Arrow memory pool). A job runs on an idle pooled
thread, or on a new one when none is idle; a forked child starts with an empty pool (the parent's
threads do not exist in it).

The consumer's generator stops its job in ``finally`` (an abandoned iterator is closed when it is
garbage collected) and waits until the thread is idle again; the job never blocks for long on a
full queue, so neither an early ``break`` nor exit hangs. At interpreter exit an ``atexit`` hook
stops the jobs of iterators still alive and waits for them: a daemon thread left inside native
code (a decoder, torch) while the interpreter finalizes can abort the process ("terminate called
without an active exception", seen once in the suite); an idle one waits on a lock, which is safe.
An exception in the job is re-raised in the consumer.
"""

import atexit
import os
import queue
import threading
from typing import Callable, Dict, Iterator, List, TypeVar

T = TypeVar("T")
_POLL_S = 0.1
_EXIT_JOIN_S = 10.0
THREAD_NAME = "tdp-read-ahead"


class _Worker:
    """One pooled thread: runs the jobs put in ``jobs``, one at a time; ``idle`` set between jobs."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self.idle = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name=THREAD_NAME)
        self.thread.start()

    def _run(self) -> None:
        while True:
            job = self.jobs.get()
            try:
                job()
            finally:
                del job  # nothing of a finished job stays referenced by an idle thread
                self.idle.set()


_LOCK = threading.Lock()
_IDLE: List[_Worker] = []  # pooled threads with no job
_LIVE: Dict[_Worker, threading.Event] = {}  # pooled threads running a job, with its stop event


def _reset_in_child() -> None:
    global _LOCK, _IDLE, _LIVE
    _LOCK, _IDLE, _LIVE = threading.Lock(), [], {}


os.register_at_fork(after_in_child=_reset_in_child)


def _start(job: Callable[[], None], stop: threading.Event) -> _Worker:
    with _LOCK:
        worker = _IDLE.pop() if _IDLE else None
    if worker is None:
        worker = _Worker()
    worker.idle.clear()
    with _LOCK:
        _LIVE[worker] = stop
    worker.jobs.put(job)
    return worker


def _release(worker: _Worker) -> None:
    with _LOCK:
        _LIVE.pop(worker, None)
        _IDLE.append(worker)


@atexit.register
def _stop_all() -> None:
    with _LOCK:
        live = list(_LIVE.items())
    for _, stop in live:
        stop.set()
    for worker, _ in live:
        worker.idle.wait(_EXIT_JOIN_S)


class _Done:
    pass


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def _produce(make: Callable[[], Iterator[T]], q: "queue.Queue[object]", stop: threading.Event) -> None:
    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    try:
        for item in make():
            if not put(item):
                return
        put(_Done())
    except BaseException as e:  # noqa: BLE001 - handed to the consumer, which re-raises it
        put(_Failed(e))


def read_ahead(make: Callable[[], Iterator[T]], depth: int) -> Iterator[T]:
    """The items of ``make()``, produced up to ``depth`` ahead by a pooled thread (inline if 0)."""
    if depth <= 0:
        yield from make()
        return
    q: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()
    worker = _start(lambda: _produce(make, q, stop), stop)
    try:
        while True:
            try:
                item = q.get(timeout=_POLL_S)
            except queue.Empty:
                if worker.thread.is_alive():
                    continue
                raise RuntimeError(  # a forked child continuing its parent's iterator
                    "the read-ahead thread of this iterator does not exist in this process:"
                    " create the iterator in the process that reads it"
                ) from None
            if isinstance(item, _Done):
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item  # type: ignore[misc]
    finally:
        stop.set()
        while not worker.idle.is_set() and worker.thread.is_alive():
            try:
                q.get_nowait()
            except queue.Empty:
                worker.idle.wait(_POLL_S)
        if worker.thread.is_alive():
            _release(worker)
