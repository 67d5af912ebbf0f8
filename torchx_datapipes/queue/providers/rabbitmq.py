"""RabbitMQ: ``amqp://user:pw@host:5672/vhost?queue=NAME`` (``amqps://`` for TLS).

- data: a durable **quorum** queue ``NAME`` (replicated, persistent, with a delivery count);
  messages are persistent and published with publisher confirms (``mandatory``), so
  ``publish`` returns once the broker has them;
- consumers share the queue (each message to one of them; ``basic.get``, ``prefetch`` at a time);
  the broker requeues a consumer's unacked messages, flagged ``redelivered``, as soon as its
  connection closes (a killed process) or misses heartbeats (``claim_after_s``);
- the group log is the durable **stream** queue ``NAME.log.GROUP`` (RabbitMQ >= 3.9), declared,
  appended to and read on a **second connection**: the broker closes a whole connection on some
  stream errors (541 INTERNAL_ERROR or 506 "stream not found" on a just-declared stream, 540 when
  pika rejects a stream delivery), and closing the data connection would requeue the messages this
  consumer holds. A failed log connection is re-opened (bounded retries) without touching the data
  connection.

A queue feeds one group (each message goes to one consumer of the queue). RabbitMQ has no
broker-side dedup without a plugin: copies of a message id are dropped by the consumers.
"""

import time
import urllib.parse
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, TypeVar

import pika
from pika import exceptions as px

from torchx_datapipes.queue.base import Broker, Delivery
from torchx_datapipes.queue.url import QueueURL
from torchx_datapipes.secrets import resolve

T = TypeVar("T")
LOG_TRIES = 20  # a just-declared stream is briefly refused (406/506): retried on a fresh channel


class RabbitBroker(Broker):
    ERRORS = (
        px.AMQPConnectionError,
        px.AMQPChannelError,
        px.ChannelWrongStateError,
        ConnectionError,
        OSError,
    )
    START_HINT = "start RabbitMQ (rabbitmq-server -detached)"

    def __init__(self, spec: QueueURL, log: Any = None) -> None:
        super().__init__(spec, log)
        self._conn: Optional[pika.BlockingConnection] = None
        self._ch: Any = None
        self._gen = 0
        self._lconn: Optional[pika.BlockingConnection] = None  # the group logs' own connection
        self._lch: Any = None  # its channel for appends (publisher confirms)
        self._logs: Dict[str, Any] = {}  # group -> channel tailing the log
        self._log_inbox: Dict[str, List[Tuple[int, bytes]]] = {}
        self._log_next: Dict[str, int] = {}  # group -> next stream offset to read
        self._declared: Set[str] = set()  # group logs declared on the log connection

    def _params(self) -> pika.URLParameters:
        parts = urllib.parse.urlsplit(resolve(self.spec.url))
        params = pika.URLParameters(f"{parts.scheme}://{parts.netloc}{parts.path or '/'}")
        t = float(self.spec.opt("timeout"))
        params.socket_timeout = t
        params.blocked_connection_timeout = max(t, 30.0)
        params.connection_attempts = 1
        # No AMQP heartbeats: a BlockingConnection answers them only inside its own calls, so a consumer
        # whose trainer is slow (or a DataLoader worker waiting for its turn) would be disconnected and
        # its messages requeued. A dead process closes its socket, and the broker requeues at once.
        params.heartbeat = 0
        return params

    def _connect(self) -> None:
        self._conn = pika.BlockingConnection(self._params())
        self._gen += 1
        self._ch = self._conn.channel()
        self._ch.confirm_delivery()
        self._ch.queue_declare(self.spec.name, durable=True, arguments={"x-queue-type": "quorum"})

    def _disconnect(self) -> None:
        self._log_reset()
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def _forget(self) -> None:
        self._conn, self._lconn = None, None

    # -- the group logs' connection -----------------------------------------------------------
    def _log_reset(self) -> None:
        conn, self._lconn, self._lch = self._lconn, None, None
        self._logs, self._log_inbox, self._declared = {}, {}, set()
        if conn is not None:
            try:
                conn.close()
            except Exception:  # (pika rejects pending stream deliveries on close: 540, harmless here)
                pass

    def _on_log(self, fn: Callable[[], T]) -> T:
        """``fn`` on the log connection, re-opened (bounded) when the broker closes it; the data connection
        and the messages it holds are never touched. Still failing: raised to Broker._call."""
        delay = 0.02
        for attempt in range(LOG_TRIES):
            try:
                if self._lconn is None or not self._lconn.is_open:
                    self._log_reset()
                    self._lconn = pika.BlockingConnection(self._params())
                    self._lch = self._lconn.channel()
                    self._lch.confirm_delivery()
                return fn()
            except self.ERRORS:
                if attempt == LOG_TRIES - 1:
                    raise
                self._log_reset()
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
        raise AssertionError("unreachable")

    def _publish(self, body: bytes, msg_id: str) -> None:
        props = pika.BasicProperties(delivery_mode=2, message_id=msg_id)
        self._ch.basic_publish("", self.spec.name, body, properties=props, mandatory=True)

    def _backlog(self) -> int:
        return int(self._ch.queue_declare(self.spec.name, passive=True).method.message_count)

    def _publish_bounded(self, body: bytes, msg_id: str, max_backlog: int) -> Tuple[bool, int]:
        # count and publish under a lock shared by the producers: an exclusive queue, which only one
        # connection can hold (others get 405 RESOURCE_LOCKED) and which the broker removes with the
        # connection, so a producer that dies holding it blocks nobody
        lock = self._lock_publishing()
        try:
            n = self._backlog()
            if n >= max_backlog:
                return False, n
            self._publish(body, msg_id)
            return True, n
        finally:
            lock.queue_delete(self._lock_queue())
            lock.close()

    def _lock_queue(self) -> str:
        return f"{self.spec.name}.publish-lock"

    def _lock_publishing(self) -> Any:
        assert self._conn is not None
        deadline = time.monotonic() + float(self.spec.opt("reconnect_s"))
        delay = 0.002
        while True:
            ch = self._conn.channel()
            try:
                ch.queue_declare(self._lock_queue(), exclusive=True)
                return ch
            except px.ChannelClosedByBroker as e:
                if e.reply_code != 405 or time.monotonic() > deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def _pump(self, ready: Any, block_s: float) -> None:
        conn = self._lconn
        assert conn is not None
        deadline = time.monotonic() + block_s
        conn.process_data_events(time_limit=0)
        while not ready() and time.monotonic() < deadline:
            conn.process_data_events(time_limit=max(0.0, deadline - time.monotonic()))

    def _fetch(self, group: str, consumer: str, n: int, block_s: float) -> List[Delivery]:
        # basic.get, not basic.consume: the broker never pushes a message into a consumer that is not
        # asking (a DataLoader worker waiting for its turn would hold it unclaimed)
        deadline = time.monotonic() + block_s
        out: List[Delivery] = []
        while len(out) < n:
            method, _props, body = self._ch.basic_get(self.spec.name, auto_ack=False)
            if method is None:
                left = deadline - time.monotonic()
                if out or left <= 0:
                    break
                time.sleep(min(0.02, left))
                continue
            out.append(Delivery(body, (self._gen, method.delivery_tag), bool(method.redelivered)))
        return out

    def _ack(self, group: str, delivery: Delivery) -> None:
        gen, tag = delivery.tag
        if gen != self._gen:  # its connection is gone: the broker requeued it (a redelivery, deduped)
            return
        self._ch.basic_ack(tag)

    def _log_queue(self, group: str) -> str:
        return f"{self.spec.name}.log.{group}"

    def _on_fresh_channel(self, group: str, fn: Callable[[Any], T]) -> T:
        """``fn(channel)`` on a new channel, retried (bounded) when the broker closes that channel: a
        refused declare or consume of the group log closes only its own channel, never the connection
        that holds this consumer's unacked messages (closing it would requeue them)."""
        assert self._lconn is not None
        delay = 0.02
        for attempt in range(LOG_TRIES):
            ch = self._lconn.channel()
            try:
                return fn(ch)
            except px.ChannelClosedByBroker as e:
                if attempt == LOG_TRIES - 1:
                    raise px.AMQPChannelError(
                        f"the group log {self._log_queue(group)!r} was refused {LOG_TRIES} times: {e}"
                    ) from e
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
        raise AssertionError("unreachable")

    def _declare_log(self, group: str, ch: Any) -> Any:
        ch.queue_declare(self._log_queue(group), durable=True, arguments={"x-queue-type": "stream"})
        return ch

    def _log_append(self, group: str, data: bytes) -> None:
        def append() -> None:
            if group not in self._logs and group not in self._declared:
                self._on_fresh_channel(group, lambda ch: self._declare_log(group, ch).close())
                self._declared.add(group)
            self._lch.basic_publish(
                "", self._log_queue(group), data, properties=pika.BasicProperties(delivery_mode=2)
            )

        self._on_log(append)

    def _tail(self, group: str) -> None:
        if group in self._logs:
            return
        inbox = self._log_inbox.setdefault(group, [])

        def on_entry(c: Any, method: Any, props: Any, body: bytes) -> None:
            inbox.append((int((props.headers or {}).get("x-stream-offset", -1)), body))
            c.basic_ack(method.delivery_tag)

        def consume(ch: Any) -> Any:
            self._declare_log(group, ch)
            ch.basic_qos(prefetch_count=2000)
            start = self._log_next.get(group, 0)
            ch.basic_consume(self._log_queue(group), on_entry, arguments={"x-stream-offset": start})
            return ch

        self._logs[group] = self._on_fresh_channel(group, consume)

    def _log_read(self, group: str, block_s: float) -> List[bytes]:
        def pump() -> List[Tuple[int, bytes]]:
            self._tail(group)
            inbox = self._log_inbox[group]
            self._pump(lambda: bool(inbox), block_s)  # (block_s 0: what has arrived; Ledger.sync reads all)
            return inbox

        inbox = self._on_log(pump)
        out: List[bytes] = []
        nxt = self._log_next.get(group, 0)
        for offset, body in inbox:
            if offset >= nxt:  # a stream may redeliver from the chunk start after a reconnect
                out.append(body)
                nxt = offset + 1
        inbox.clear()
        self._log_next[group] = nxt
        return out

    def _delete(self, groups: Sequence[str]) -> None:
        self._ch.queue_delete(self.spec.name)
        for g in groups:
            self._ch.queue_delete(self._log_queue(g))
        self._log_next = {}
        # nothing re-declared: the next call reconnects, and _connect declares the queue again
        self._disconnect()
        self._pid = None
