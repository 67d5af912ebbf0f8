"""Read-ahead: a daemon thread producing the next items into a bounded queue.

The consumer's generator stops the thread in ``finally`` (an abandoned iterator is closed when
it is garbage collected), and the thread never blocks for long on a full queue, so neither an
early ``break`` nor exit hangs. At interpreter exit an ``atexit`` hook stops and joins the
threads of iterators still alive: a daemon thread left inside native code (a decoder, torch)
while the interpreter finalizes can abort the process ("terminate called without an active
exception", seen once in the suite). An exception in the thread is re-raised in the consumer.
"""

import atexit
import queue
import threading
from typing import Callable, Dict, Iterator, TypeVar

T = TypeVar("T")
_POLL_S = 0.1
_EXIT_JOIN_S = 10.0
_LIVE: Dict[threading.Thread, threading.Event] = {}  # read-ahead threads not yet stopped


@atexit.register
def _stop_all() -> None:
    live = list(_LIVE.items())
    for _, stop in live:
        stop.set()
    for thread, _ in live:
        thread.join(_EXIT_JOIN_S)


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
    """The items of ``make()``, produced up to ``depth`` ahead by a thread (inline if depth is 0)."""
    if depth <= 0:
        yield from make()
        return
    q: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()
    thread = threading.Thread(target=_produce, args=(make, q, stop), daemon=True, name="tdp-read-ahead")
    _LIVE[thread] = stop
    thread.start()
    try:
        while True:
            item = q.get()
            if isinstance(item, _Done):
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item  # type: ignore[misc]
    finally:
        stop.set()
        while thread.is_alive():
            try:
                q.get_nowait()
            except queue.Empty:
                thread.join(_POLL_S)
        _LIVE.pop(thread, None)
