"""A call run in a daemon thread now, its result (or exception) collected later."""

import threading
from typing import Callable, Generic, Optional, TypeVar

T = TypeVar("T")


class Background(Generic[T]):
    """``fn()`` starts in a daemon thread; :meth:`result` waits for it and returns or re-raises.

    Daemon: a rank that fails meanwhile (a rendezvous timeout, a signal) exits without waiting
    for work nobody will use.
    """

    def __init__(self, fn: Callable[[], T], name: str = "tdp-background") -> None:
        self._fn = fn
        self._value: Optional[T] = None
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller of result()
            self._error = e

    def result(self) -> T:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]
