"""The consumer side of a group: fetch, dedupe, yield, then ack (``QueueDataset`` runs one per worker).

Per message: an end marker is recorded in the group log and acked. A first delivery is
claimed in the log (a second copy of its id is dropped as a duplicate); a redelivery (the
broker's flag, or an XAUTOCLAIM of a message a dead consumer held) is delivered again unless
its id is already done, and counted as redelivered. Records are yielded one by one; the
message is marked done in the log and acked only when the consumer asks for the record after
its last one. Iteration ends once the group's done records reach the end marker's total.
"""

import os
import socket
import sys
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Dict, Iterator, Optional, Tuple

from torchx_datapipes.queue.base import Broker, Delivery
from torchx_datapipes.queue.codec import Header, decode_header, decode_records
from torchx_datapipes.queue.ledger import Ledger


@dataclass
class ConsumerStats:
    delivered: int = 0  # records yielded (redelivered ones included)
    redelivered: int = 0  # records yielded from a message redelivered after a consumer failure
    duplicates: int = 0  # records dropped: a second copy of a message id already claimed or done
    messages: int = 0
    first_record_at: Optional[float] = None  # epoch seconds

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def consumer_name(extra: str = "") -> str:
    return f"{socket.gethostname()}-{os.getpid()}{'-' + extra if extra else ''}"


class GroupConsumer:
    def __init__(
        self, broker: Broker, group: str, name: Optional[str] = None, idle_log_s: float = 30.0
    ) -> None:
        self.broker, self.group = broker, group
        self.name = name or consumer_name()
        self.ledger = Ledger(broker, group)
        self.stats = ConsumerStats()
        self.idle_log_s = idle_log_s
        self.held: Dict[Any, Delivery] = {}  # unacked deliveries (the heartbeat keeps them ours)
        self.lock = threading.Lock()

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        beat = Heartbeat(self.broker, self.group, self.name, self.held, self.lock)
        beat.start()
        try:
            yield from self._records()
        finally:
            beat.stop()
            try:  # best effort: a consumer that is being killed may not get this far
                counts = self.stats.to_dict()
                counts.pop("first_record_at")
                self.ledger.report(self.name, counts)
            except Exception:
                pass
            self.broker.close()

    def _records(self) -> Iterator[Dict[str, Any]]:
        spec = self.broker.spec
        n, block = int(spec.opt("prefetch")), float(spec.opt("block_s"))
        last_log = time.monotonic()
        idle_since: Optional[int] = None  # log position when this consumer last ran out of messages
        while True:
            got = self.broker.fetch(self.group, self.name, n, block)
            if not got:
                got = self.broker.claim_stale(self.group, self.name, n)
            if not got:
                if idle_since is None:
                    self.ledger.sync()
                    idle_since = self.ledger.applied
                self.ledger.refresh()
                if self.ledger.finished() or self.ledger.covered(self.name, idle_since):
                    return
                if time.monotonic() - last_log > self.idle_log_s:
                    last_log = time.monotonic()
                    print(f"queue {self.broker.where} group {self.group}: waiting for records"
                          f" ({self.ledger.progress()})", file=sys.stderr, flush=True)  # fmt: skip
                continue
            idle_since = None
            with self.lock:
                self.held.update((id(d), d) for d in got)
            # claim every fetched message before yielding any: while this generator waits to be asked
            # again, the other consumers see who holds what (Ledger.covered)
            accepted = [a for a in (self._accept(d) for d in got) if a is not None]
            for d, header, offset in accepted:
                yield from self._deliver(d, header, offset)

    def _accept(self, d: Delivery) -> Optional[Tuple[Delivery, Header, int]]:
        """The message to deliver, or None for a copy of a message id already claimed or done."""
        header, offset = decode_header(d.body)
        mid = header.id
        if header.kind == "end":  # (end markers go to the producer's log; a queued one is recorded too)
            self.ledger.mark_end(header.job, header.records)
            self._ack(d)
            return None
        if d.redelivered:
            if self.ledger.is_done(mid):
                self._drop(d, header.records)
                return None
            self.ledger.mark_claimed(mid, self.name, header.job, header.records)
        elif not self.ledger.claim(mid, self.name, header.job, header.records):
            self._drop(d, header.records)
            return None
        return d, header, offset

    def _deliver(self, d: Delivery, header: Header, offset: int) -> Iterator[Dict[str, Any]]:
        records = decode_records(d.body, offset)
        if self.stats.first_record_at is None:
            self.stats.first_record_at = time.time()
        for r in records:
            self.stats.delivered += 1
            if d.redelivered:
                self.stats.redelivered += 1
            yield r
        self.ledger.mark_done(header.id, header.job, header.records)
        self._ack(d)
        self.stats.messages += 1

    def _ack(self, d: Delivery) -> None:
        self.broker.ack(self.group, d)
        with self.lock:
            self.held.pop(id(d), None)

    def _drop(self, d: Delivery, records: int) -> None:
        self.stats.duplicates += records
        self._ack(d)


class Heartbeat(threading.Thread):
    """Every ``claim_after_s / 4``: a heartbeat in the group log, and the held messages kept ours.

    On its own connection (a client is not thread-safe). It keeps a live consumer's messages
    from being taken over while its generator waits to be asked for the next record (a slow
    trainer, a DataLoader asking another worker); a dead consumer's stop with it.
    """

    def __init__(self, broker: Broker, group: str, name: str, held: Dict[Any, Delivery], lock: Any) -> None:
        super().__init__(daemon=True, name=f"tdp-queue-heartbeat-{name}")
        self.spec, self.kind, self.group, self.name = broker.spec, type(broker), group, name
        self.held, self.lock = held, lock
        self.every_s = max(0.25, float(broker.spec.opt("claim_after_s")) / 4)
        self._stop_event = threading.Event()

    def run(self) -> None:
        broker = self.kind(self.spec, log=lambda msg: None)
        ledger = Ledger(broker, self.group)
        parent = os.getppid()
        try:
            while os.getppid() == parent:  # a DataLoader worker whose trainer died is dead too: no beat
                try:
                    with self.lock:
                        held = list(self.held.values())
                    if held:
                        broker.touch(self.group, self.name, held)
                    ledger.heartbeat(self.name)
                except Exception:  # the broker is away: the consumer's own calls report it
                    pass
                if self._stop_event.wait(self.every_s):
                    return
        finally:
            broker.close()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)
