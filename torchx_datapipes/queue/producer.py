"""The producer side: records in batched messages with ids ``(job, unit, seq)``, and backpressure.

A unit's records are cut into messages of ``batch`` records (fewer when ``message_bytes`` is
reached or a partial message waited ``linger_s``), numbered ``seq = 0, 1, ...`` in output
order, so a unit redone after a crash produces the same ids and the consumers (or the broker,
for NATS) drop the copies of what was already published. A message is published only while the
backlog is below ``max_backlog`` messages, checked and published atomically with respect to the
other producer ranks (``Broker.publish_bounded``: a Lua script on Redis, an expected-last-sequence
publish on NATS, an exclusive-queue lock on RabbitMQ); while it is full the producer waits, and
says so.
"""

import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import orjson

from torchx_datapipes.queue.base import Broker
from torchx_datapipes.queue.codec import Header, encode, encode_record
from torchx_datapipes.queue.ledger import PRODUCER_LOG


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Backpressure:
    """Publishes while the broker's backlog is below ``max_backlog`` messages, else waits (logging every
    ``log_s``); with ``max_backlog`` 0, publishes at once."""

    def __init__(
        self, broker: Broker, max_backlog: int, log: Callable[[str], None] = _stderr, log_s: float = 10.0
    ):
        self.broker, self.max_backlog, self.log, self.log_s = broker, max_backlog, log, log_s
        self.waited_s = 0.0
        self.peak = 0
        self._last_log = -1e18

    def publish(self, body: bytes, msg_id: str) -> None:
        if self.max_backlog <= 0:
            self.broker.publish(body, msg_id)
            return
        start: Optional[float] = None
        delay = 0.01
        while True:
            published, n = self.broker.publish_bounded(body, msg_id, self.max_backlog)
            self.peak = max(self.peak, n + 1 if published else n)
            if published:
                break
            now = time.monotonic()
            if start is None:
                start = now
            if now - self._last_log >= self.log_s:
                self._last_log = now
                self.log(
                    f"queue {self.broker.where}: backlog {n} messages >= --max_backlog {self.max_backlog};"
                    f" waiting for the consumers ({now - start:.1f}s so far)"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.25)
        if start is not None:
            self.waited_s += time.monotonic() - start


class UnitPublisher:
    """Publishes one unit's records; :meth:`close` sends the last partial message."""

    def __init__(self, broker: Broker, job: str, unit: int, pressure: Backpressure) -> None:
        self.broker, self.job, self.unit, self.pressure = broker, job, unit, pressure
        spec = broker.spec
        self.batch = int(spec.opt("batch"))
        self.max_bytes = int(spec.opt("message_bytes"))
        self.linger_s = float(spec.opt("linger_s"))
        self.seq = 0
        self.records = 0
        self.first_publish_at: Optional[float] = None
        self._pending: List[bytes] = []
        self._bytes = 0
        self._since = 0.0

    def add(self, records: List[Dict[str, Any]]) -> List[Tuple[int, str]]:
        """Queue records for publication; returns ``(index, error)`` of records that cannot be encoded."""
        bad: List[Tuple[int, str]] = []
        for i, rec in enumerate(records):
            try:
                data = encode_record(rec)
            except (TypeError, ValueError) as e:
                bad.append((i, f"{type(e).__name__}: {e}"))
                continue
            if not self._pending:
                self._since = time.monotonic()
            self._pending.append(data)
            self._bytes += len(data)
            if len(self._pending) >= self.batch or self._bytes >= self.max_bytes:
                self.flush()
        if self._pending and time.monotonic() - self._since >= self.linger_s:
            self.flush()
        return bad

    def flush(self) -> None:
        if not self._pending:
            return
        n = len(self._pending)
        header = Header("data", self.job, self.unit, self.seq, n)
        body = encode(header, self._pending)
        self.pressure.publish(body, header.id)
        if self.first_publish_at is None:
            self.first_publish_at = time.time()
        self.seq += 1
        self.records += n
        self._pending, self._bytes = [], 0

    def close(self) -> int:
        self.flush()
        return self.records


def publish_end(broker: Broker, job: str, total: int) -> None:
    """The end marker: the job's total record count, in the stream's producer log every consumer reads
    (not in the queue, where one consumer would take it); consumers stop once their group has them all.
    """
    broker.log_append(PRODUCER_LOG, orjson.dumps({"k": "e", "j": job, "n": total}))
