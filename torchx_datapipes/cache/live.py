"""Per-process state of a cache: what is rebuilt in each process and never pickled.

A cache pickles only its configuration. Its connections, counters, circuit breaker and
warnings live in attributes named ``_live*``: :meth:`ProcessLocal.__getstate__` drops them and
:meth:`ProcessLocal._live` rebuilds them lazily the first time the object is used in a process
(checked by pid), so one cache object works in DataLoader workers under fork, spawn and
forkserver, in torchrun ranks, and inside a cloudpickle or torch.package artifact.

Fork: a child never closes a connection it inherited (that could shut the parent's socket, e.g.
a Redis client's); the inherited per-thread connections stay referenced in ``_INHERITED`` so that
garbage collection does not close them either, and the child opens its own.
"""

import os
import threading
from typing import Any, Dict, List, Set

_INHERITED: List[Any] = []


class ProcessLocal:
    """Attributes named ``_live*`` belong to one process; ``_live_conn`` to one thread of it.

    Subclasses set ``self._live_pid = -1`` in ``__init__`` and build their per-process state in
    :meth:`_fresh_process_state`.
    """

    _live_pid: int

    def _fresh_process_state(self) -> None:
        """Build this process's own state (called by :meth:`_live`; ``_live_lock`` exists)."""

    def _live(self) -> None:
        """(Re)build per-process state when first used in this process.

        Counters, breaker and warnings are per process (guarded by ``_live_lock``); connections
        are per thread (``_live_conn``), because sqlite connections and pymemcache clients must
        not be shared by threads.
        """
        pid = os.getpid()
        if self._live_pid != pid:
            live = [k for k in self.__dict__ if k.startswith("_live")]
            if self._live_pid != -1:  # forked: keep the parent's connections alive, unused
                _INHERITED.extend(self.__dict__[k] for k in live if k.startswith("_live_tls"))
            for k in live:
                del self.__dict__[k]
            self._live_tls = threading.local()
            self._live_lock = threading.Lock()
            self._live_warned: Set[str] = set()
            self._fresh_process_state()
            self._live_pid = pid

    @property
    def _live_conn(self) -> Any:
        """This thread's connection (None until the backend opens one)."""
        return getattr(self._live_tls, "conn", None)

    @_live_conn.setter
    def _live_conn(self, conn: Any) -> None:
        self._live_tls.conn = conn

    def __getstate__(self) -> Dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_live")}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._live_pid = -1
