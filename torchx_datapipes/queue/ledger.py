"""A consumer group's shared state, kept on the group's log in the broker itself.

Every consumer of a group appends entries to one append-only log that every member reads in
the same order (a Redis stream, a RabbitMQ stream queue, a NATS JetStream stream), and replays
it into the same state:

- ``claim(id)``: the first consumer whose claim of a message id is in the log delivers it;
  another copy of the id (a message published twice: a producer restarted mid-unit, or a
  publish retried after a broker restart) is dropped and counted as a duplicate. The claim is
  decided by log order, so two consumers that get two copies at the same instant still agree;
- ``done(id, n)``: the message's ``n`` records were yielded; written *before* the broker ack,
  so a crash in between makes a redelivery that is dropped, never a record counted twice;
- ``end(job, total)``: the producer's end marker, recorded by whichever consumer received it.

The group is finished once the records done for a job reach its end marker's total.
"""

import time
import uuid
from typing import Dict, Set

import orjson

from torchx_datapipes.queue.base import Broker


class Ledger:
    def __init__(self, broker: Broker, group: str, wait_s: float = 60.0) -> None:
        self.broker, self.group, self.wait_s = broker, group, wait_s
        self.claims: Dict[str, str] = {}  # id -> the winning claim's nonce
        self.done: Dict[str, int] = {}  # id -> records
        self.done_by_job: Dict[str, int] = {}
        self.ends: Dict[str, int] = {}  # job -> total records
        self._nonces: Set[str] = set()

    def _apply(self, raw: bytes) -> None:
        e = orjson.loads(raw)
        k, mid = e["k"], e.get("id", "")
        if k == "c":
            self.claims.setdefault(mid, e["o"])
            self._nonces.add(e["o"])
        elif k == "d":
            self.claims.setdefault(mid, "")
            if mid not in self.done:
                self.done[mid] = int(e["n"])
                self.done_by_job[e["j"]] = self.done_by_job.get(e["j"], 0) + int(e["n"])
        elif k == "e":
            self.ends[e["j"]] = int(e["n"])

    def refresh(self, block_s: float = 0.0) -> int:
        entries = self.broker.log_read(self.group, block_s)
        for raw in entries:
            self._apply(raw)
        return len(entries)

    def _append(self, entry: Dict[str, object]) -> None:
        self.broker.log_append(self.group, orjson.dumps(entry))

    def claim(self, mid: str) -> bool:
        """True if this consumer delivers message ``mid`` (its claim is the first in the log)."""
        self.refresh()
        if mid in self.claims:
            return False
        nonce = uuid.uuid4().hex
        self._append({"k": "c", "id": mid, "o": nonce})
        deadline = time.monotonic() + self.wait_s
        while nonce not in self._nonces:
            if time.monotonic() > deadline:
                raise TimeoutError(f"claim of {mid} did not come back from the group log in {self.wait_s:g}s")
            self.refresh(0.05)
        return self.claims[mid] == nonce

    def mark_claimed(self, mid: str) -> None:
        """A redelivered message this consumer delivers: later copies of ``mid`` are duplicates."""
        if mid not in self.claims:
            self._append({"k": "c", "id": mid, "o": uuid.uuid4().hex})

    def is_done(self, mid: str) -> bool:
        self.refresh()
        return mid in self.done

    def mark_done(self, mid: str, job: str, n: int) -> None:
        self._append({"k": "d", "id": mid, "j": job, "n": n})

    def mark_end(self, job: str, total: int) -> None:
        self._append({"k": "e", "j": job, "n": total})

    def finished(self) -> bool:
        return any(self.done_by_job.get(job, 0) >= total for job, total in self.ends.items())

    def progress(self) -> Dict[str, object]:
        return {"done": dict(self.done_by_job), "ends": dict(self.ends), "messages_done": len(self.done)}
