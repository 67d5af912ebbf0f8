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
import time
from dataclasses import asdict, dataclass
from typing import Any, Dict, Iterator, Optional

from torchx_datapipes.queue.base import Broker, Delivery
from torchx_datapipes.queue.codec import decode_header, decode_records
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

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        try:
            yield from self._records()
        finally:
            self.broker.close()

    def _records(self) -> Iterator[Dict[str, Any]]:
        spec = self.broker.spec
        n, block = int(spec.opt("prefetch")), float(spec.opt("block_s"))
        last_log = time.monotonic()
        while True:
            got = self.broker.fetch(self.group, self.name, n, block)
            if not got:
                got = self.broker.claim_stale(self.group, self.name, n)
            if not got:
                self.ledger.refresh()
                if self.ledger.finished():
                    return
                if time.monotonic() - last_log > self.idle_log_s:
                    last_log = time.monotonic()
                    print(f"queue {self.broker.where} group {self.group}: waiting for records"
                          f" ({self.ledger.progress()})", file=sys.stderr, flush=True)  # fmt: skip
                continue
            for d in got:
                yield from self._deliver(d)

    def _deliver(self, d: Delivery) -> Iterator[Dict[str, Any]]:
        header, offset = decode_header(d.body)
        mid = header.id
        if header.kind == "end":
            self.ledger.mark_end(header.job, header.records)
            self.broker.ack(self.group, d)
            return
        if d.redelivered:
            if self.ledger.is_done(mid):
                self._drop(d, header.records)
                return
            self.ledger.mark_claimed(mid)
        elif not self.ledger.claim(mid):
            self._drop(d, header.records)
            return
        records = decode_records(d.body, offset)
        if self.stats.first_record_at is None:
            self.stats.first_record_at = time.time()
        for r in records:
            self.stats.delivered += 1
            if d.redelivered:
                self.stats.redelivered += 1
            yield r
        self.ledger.mark_done(mid, header.job, header.records)
        self.broker.ack(self.group, d)
        self.stats.messages += 1

    def _drop(self, d: Delivery, records: int) -> None:
        self.stats.duplicates += records
        self.broker.ack(self.group, d)
