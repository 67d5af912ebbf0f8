"""The broker ABC: a small abstract core per backend, the retry/reconnect policy once, here.

A backend implements ``_connect``/``_disconnect``, ``_publish`` (returns once the broker has
the message), ``_backlog``, ``_fetch``/``_ack`` for a consumer group, ``_claim_stale`` where the
broker does not redeliver by itself, and an append-only **group log** (``_log_append`` /
``_log_read``, in one total order every reader sees) on which ``queue/ledger.py`` keeps the
group's shared state (claims, records done, the end marker). Everything public (``publish``,
``fetch``, ...) goes through :meth:`Broker._call`, which reconnects after a broker restart or a
network failure for up to ``reconnect_s`` and then raises :class:`QueueUnavailableError` with
the URL (password hidden) and the fix.

A client is per process: after a fork the child opens its own connection (the parent's
socket is never shared), which makes one object usable by DataLoader workers and forked ranks.
"""

import os
import sys
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple, Type, TypeVar

from torchx_datapipes.errors import DatapipesError
from torchx_datapipes.queue.url import QueueURL
from torchx_datapipes.secrets import mask_url

T = TypeVar("T")


class QueueUnavailableError(DatapipesError, ConnectionError):
    """The broker cannot be reached (or stayed unreachable for ``reconnect_s``)."""


@dataclass
class Delivery:
    """One message handed to a consumer: its body, the broker's handle and whether it was redelivered."""

    body: bytes
    tag: Any
    redelivered: bool


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Broker(ABC):
    """One queue (a Redis stream, a RabbitMQ queue, a NATS JetStream stream) and its groups' logs."""

    ERRORS: Tuple[Type[BaseException], ...] = (ConnectionError, TimeoutError, OSError)
    START_HINT = "start the broker"
    # _log_read(group, 0) returns every entry appended before the call (no marker needed to read up to now)
    EXACT_LOG_READ = False

    def __init__(self, spec: QueueURL, log: Optional[Callable[[str], None]] = None) -> None:
        self.spec = spec
        self.log = log or _stderr
        self.reconnects = 0
        self._pid: Optional[int] = None

    # -- the abstract core ------------------------------------------------------------------
    @abstractmethod
    def _connect(self) -> None: ...

    @abstractmethod
    def _disconnect(self) -> None:
        """Drop the connection; never raises (the broker may be gone)."""

    @abstractmethod
    def _publish(self, body: bytes, msg_id: str) -> None:
        """Send one message; return once the broker has accepted (and, if configured, persisted) it."""

    @abstractmethod
    def _backlog(self) -> int:
        """Messages in the queue not yet consumed (what --max_backlog bounds)."""

    @abstractmethod
    def _publish_bounded(self, body: bytes, msg_id: str, max_backlog: int) -> Tuple[bool, int]:
        """Publish only if the backlog is below ``max_backlog``, atomically with respect to other
        producers (several ranks publish to one queue): (published, the backlog counted before)."""

    @abstractmethod
    def _fetch(self, group: str, consumer: str, n: int, block_s: float) -> List[Delivery]: ...

    @abstractmethod
    def _ack(self, group: str, delivery: Delivery) -> None: ...

    def _claim_stale(self, group: str, consumer: str, n: int, idle_s: float) -> List[Delivery]:
        """Messages other consumers held for ``idle_s`` without acking (brokers that redeliver: [])."""
        return []

    def _touch(self, group: str, consumer: str, deliveries: List[Delivery]) -> None:  # noqa: B027
        """Keep ``deliveries`` held by ``consumer`` (a live one) from being redelivered; called by its
        heartbeat thread on another connection. Brokers that redeliver only on a closed connection: no-op."""

    @abstractmethod
    def _log_append(self, group: str, data: bytes) -> None: ...

    @abstractmethod
    def _log_read(self, group: str, block_s: float) -> List[bytes]:
        """Group log entries after the last one this client read, in log order (waits up to ``block_s``
        for one; with 0, what has arrived: :meth:`Ledger.sync` reads up to a marker it appends)."""

    def _log_trim(self, group: str) -> int:
        """Remove the log entries before the last one this client read; how many (0: cannot trim)."""
        return 0

    @abstractmethod
    def _delete(self, groups: Sequence[str]) -> None:
        """Remove the queue and the logs of ``groups`` (tests, benchmarks, a fresh run)."""

    # -- the template -----------------------------------------------------------------------
    @property
    def where(self) -> str:
        return self.spec.masked

    def _ensure(self) -> None:
        if self._pid != os.getpid():
            if self._pid is not None:  # a forked child: forget the parent's connection, never close it
                self._forget()
            self._connect()
            self._pid = os.getpid()

    def _forget(self) -> None:  # noqa: B027 (optional hook)
        """After a fork: drop references to the parent's connection without touching its socket."""

    def _call(self, label: str, fn: Callable[..., T], *args: Any) -> T:
        deadline: Optional[float] = None
        delay = 0.05
        while True:
            try:
                self._ensure()
                return fn(*args)
            except self.ERRORS as e:
                now = time.monotonic()
                if deadline is None:
                    deadline = now + float(self.spec.opt("reconnect_s"))
                    self.log(
                        f"queue {self.where}: {label} failed ({type(e).__name__}: {mask_url(str(e))});"
                        f" reconnecting for up to {self.spec.opt('reconnect_s'):g}s"
                    )
                self._drop()
                if now >= deadline:
                    raise self._gave_up(label, e) from e
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _drop(self) -> None:
        self._disconnect()
        self._pid = None
        self.reconnects += 1

    def _gave_up(self, label: str, e: BaseException) -> QueueUnavailableError:
        """The error after ``reconnect_s`` of failures: "start the broker" only if a fresh connection fails
        too; a broker that answers is named as such, with the error that kept failing."""
        what = f"{label} kept failing for {self.spec.opt('reconnect_s'):g}s"
        probe = type(self)(self.spec, log=lambda msg: None)
        try:
            probe.ping()
        except QueueUnavailableError:
            return self.unavailable(e, what)
        finally:
            probe.close()
        return QueueUnavailableError(
            f"queue broker {self.where} answers, but {what} on fresh connections:"
            f" {type(e).__name__}: {mask_url(str(e))}. Fix: look in the broker's log for why it refuses"
            " (permissions, limits, a queue or stream declared with other settings), or report it"
        )

    def unavailable(self, e: BaseException, what: str = "cannot be reached") -> QueueUnavailableError:
        return QueueUnavailableError(
            f"queue broker {self.where} {what}: {type(e).__name__}: {mask_url(str(e))}."
            f" Fix: {self.START_HINT}"
            " (scripts/services.sh starts Redis, RabbitMQ and NATS on this machine), or correct host, port"
            " and credentials in the URL (passwords: ?password_env=NAME)"
        )

    def ping(self) -> None:
        """Connect once and ask the backlog, without retrying (:class:`QueueUnavailableError`)."""
        try:
            self._ensure()
            self._backlog()
        except self.ERRORS as e:
            self._drop()
            raise self.unavailable(e) from e

    def publish(self, body: bytes, msg_id: str) -> None:
        self._call("publish", self._publish, body, msg_id)

    def backlog(self) -> int:
        return self._call("backlog", self._backlog)

    def publish_bounded(self, body: bytes, msg_id: str, max_backlog: int) -> Tuple[bool, int]:
        return self._call("publish", self._publish_bounded, body, msg_id, max_backlog)

    def fetch(self, group: str, consumer: str, n: int, block_s: float) -> List[Delivery]:
        return self._call("fetch", self._fetch, group, consumer, n, block_s)

    def ack(self, group: str, delivery: Delivery) -> None:
        self._call("ack", self._ack, group, delivery)

    def claim_stale(self, group: str, consumer: str, n: int) -> List[Delivery]:
        return self._call(
            "claim", self._claim_stale, group, consumer, n, float(self.spec.opt("claim_after_s"))
        )

    def touch(self, group: str, consumer: str, deliveries: List[Delivery]) -> None:
        self._call("touch", self._touch, group, consumer, deliveries)

    def log_append(self, group: str, data: bytes) -> None:
        self._call("log append", self._log_append, group, data)

    def log_read(self, group: str, block_s: float) -> List[bytes]:
        return self._call("log read", self._log_read, group, block_s)

    def log_trim(self, group: str) -> int:
        return self._call("log trim", self._log_trim, group)

    def delete(self, groups: Sequence[str] = ("train",)) -> None:
        """Remove the queue, its producer log and its groups' logs (every group's on Redis)."""
        self._call("delete", self._delete, (*groups, "_producer"))

    def close(self) -> None:
        if self._pid == os.getpid():
            self._disconnect()
        self._pid = None

    def __enter__(self) -> "Broker":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
