"""The consumer side of a group: fetch, dedupe, yield, then ack (``QueueDataset`` runs one per worker).

Per message: an end marker is recorded in the group log and acked. A first delivery is
claimed in the log (a copy of a claimed id is treated as a redelivery). A redelivery (the
broker's flag, or an XAUTOCLAIM) is dropped if its id is done; if its claim belongs to a live
consumer (a connection reset made the broker requeue what that consumer still yields, or this
consumer's own), it is *parked*: held unacked, kept ours by the heartbeat, acked and dropped
once the owner marks it done, taken over and delivered only if the owner stops beating
(:meth:`Ledger.silent`); with no owner, it is taken over at once. A taken-over message is
counted as redelivered. Records are yielded one by one. Who marks a message done:

- the consumer itself, when it is asked for the record after the message's last one (it runs
  in the training loop's process: ``num_workers=0``, or a consumer used directly);
- with ``receipts`` (a DataLoader worker): the *main* process, once its loop received every
  record of the message (``queue/receipts.py``); the worker acks the message when it reads that
  ``done`` in the group log, and waits for its messages' ``done`` before it ends.

Iteration ends once the group's done records reach the end marker's total.
"""

import os
import socket
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any, Dict, Iterator, List, Optional, Tuple

from torchx_datapipes.queue.base import Broker, Delivery
from torchx_datapipes.queue.codec import Header, decode_header, decode_records
from torchx_datapipes.queue.ledger import DEAD_AFTER_BEATS, Ledger
from torchx_datapipes.queue.receipts import Receipted, pickled_tokens

# a worker that yielded this many records and saw none of its receipts pickled is behind a
# collate_fn that rebuilds the records: it goes back to acking when it moves past a message
NO_RECEIPTS_AFTER = 64


@dataclass
class ConsumerStats:
    delivered: int = 0  # records yielded (redelivered ones included)
    redelivered: int = 0  # records yielded from a message redelivered after a consumer failure
    duplicates: int = 0  # records dropped: a message id published again (a producer's retry or redone unit)
    # records dropped: a message redelivered after it was done (its consumer died between the done in
    # the group log and the broker ack; with receipts, between the trainer's done and its worker's ack)
    stale: int = 0
    messages: int = 0
    first_record_at: Optional[float] = None  # epoch seconds

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def consumer_name(extra: str = "") -> str:
    """Unique per consumer, also for several consumers in one process (claims and liveness are per name)."""
    return f"{socket.gethostname()}-{os.getpid()}{'-' + extra if extra else ''}-{uuid.uuid4().hex[:6]}"


class GroupConsumer:
    def __init__(
        self,
        broker: Broker,
        group: str,
        name: Optional[str] = None,
        idle_log_s: float = 30.0,
        receipts: Optional[str] = None,
    ) -> None:
        """``receipts``: the URL the main process opens to mark messages done (a DataLoader worker)."""
        self.broker, self.group = broker, group
        self.name = name or consumer_name()
        self.ledger = Ledger(broker, group, me=self.name)
        self.stats = ConsumerStats()
        self.idle_log_s = idle_log_s
        self.held: Dict[Any, Delivery] = {}  # unacked deliveries (the heartbeat keeps them ours)
        self.lock = threading.Lock()
        self.receipts = receipts
        self.worker = receipts is not None  # a DataLoader worker (its parent is the trainer)
        self.awaiting: Dict[str, Tuple[Delivery, Header]] = {}  # yielded, waiting for the main's done
        self.parked: Dict[int, Tuple[Delivery, Header, int]] = {}  # redelivered, owner alive: not delivered
        self._yielded = 0
        self._parent = os.getppid()

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        beat = Heartbeat(self.broker, self.group, self.name, self.held, self.lock, self.worker)
        beat.start()
        ended = False
        try:
            yield from self._records()
            ended = True
        finally:
            if ended and (self.awaiting or self.parked):
                # the last records may still be in this worker's unfinished batch: end now (the batch goes
                # out) and wait for their receipts (and parked copies' done) in a thread the worker process
                # joins before it exits
                threading.Thread(target=self._finish, args=(beat,), name="tdp-queue-drain").start()
            else:
                self._close(beat, ended)

    def _finish(self, beat: "Heartbeat") -> None:
        try:
            self._drain()
        finally:
            self._close(beat, True)

    def _close(self, beat: "Heartbeat", ended: bool = False) -> None:
        beat.stop()
        try:  # best effort: a consumer that is being killed may not get this far
            counts = self.stats.to_dict()
            counts.pop("first_record_at")
            self.ledger.report(self.name, counts)
            if ended and self.ledger.finished():
                self.ledger.compact()  # the group log shrinks to what is still needed (ledger.py)
        except Exception:
            pass
        self.broker.close()

    def _records(self) -> Iterator[Dict[str, Any]]:
        spec = self.broker.spec
        n, block = int(spec.opt("prefetch")), float(spec.opt("block_s"))
        last_log = time.monotonic()
        idle_since: Optional[int] = None  # log position when this consumer last ran out of messages
        while True:
            if self.worker and os.getppid() != self._parent:
                return  # a DataLoader worker whose trainer died: fetch and claim nothing more
            self._settle()
            for item in self._unpark():
                yield from self._deliver(*item)
            got = self.broker.fetch(self.group, self.name, n, block)
            if not got:
                got = self.broker.claim_stale(self.group, self.name, n)
            if not got:
                if idle_since is None:
                    self.ledger.sync()
                    idle_since = self.ledger.applied
                self.ledger.refresh()
                if self.ledger.finished() or self.ledger.covered(self.name, idle_since, self._mine()):
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
        if not d.redelivered:
            if self.ledger.claim(mid, self.name, header.job, header.records):
                return d, header, offset
            # a copy of a claimed id (a producer's retry; or the same message again after a broker restart,
            # unflagged): dropped once done, parked while its owner lives, taken over if it died
        else:
            self.ledger.sync()
        verdict = self._verdict(mid, header)
        if verdict == "drop":
            self._drop(d, header.records)
            return None
        if verdict == "park":
            self.parked[id(d)] = (d, header, offset)
            return None
        return d, header, offset

    def _verdict(self, mid: str, header: Header, take: bool = True) -> str:
        """For a redelivered message: "drop" (done), "park" (its owner is alive) or "deliver" (this consumer
        took it over: no owner, or one silent for DEAD_AFTER_BEATS of this consumer's heartbeats); with
        ``take`` False (after the last record), "release" instead of taking it over."""
        while True:
            if self.ledger.is_done(mid, header.job):
                return "drop"
            holder = self.ledger.holders.get(mid)
            if holder is not None and self.ledger.silent(holder[0]) < DEAD_AFTER_BEATS:
                return "park"
            if not take:
                return "release"
            prev = self.ledger.claims.get(mid, "")
            if self.ledger.claim(mid, self.name, header.job, header.records, prev=prev):
                return "deliver"
            # another consumer took it over first (or it is done): decide again on what the log says now

    def _unpark(self, take: bool = True) -> List[Tuple[Delivery, Header, int]]:
        """Parked messages whose owner marked them done are acked and dropped; those whose owner went
        silent are taken over and returned for delivery (``take`` False: released to the group, unacked:
        this connection's close, the broker's ack timeout or XAUTOCLAIM hands them to another consumer)."""
        if not self.parked:
            return []
        self.ledger.refresh()
        out: List[Tuple[Delivery, Header, int]] = []
        for key, (d, header, offset) in list(self.parked.items()):
            verdict = self._verdict(header.id, header, take)
            if verdict == "park":
                continue
            del self.parked[key]
            if verdict == "drop":
                self._drop(d, header.records)
            elif verdict == "release":
                with self.lock:
                    self.held.pop(id(d), None)  # (the heartbeat no longer keeps it ours)
            else:
                out.append((d, header, offset))
        return out

    def _deliver(self, d: Delivery, header: Header, offset: int) -> Iterator[Dict[str, Any]]:
        records = decode_records(d.body, offset)
        if self.stats.first_record_at is None:
            self.stats.first_record_at = time.time()
        receipt = self.receipts
        if receipt is not None:
            tok = [(receipt, self.group, self.name, header.job, header.id, header.records, 1)]
        for r in records:
            self.stats.delivered += 1
            if d.redelivered:
                self.stats.redelivered += 1
            if receipt is not None:
                self._yielded += 1
                yield Receipted(r, tok)
            else:
                yield r
        self.stats.messages += 1
        if receipt is not None and self.receipts is not None:
            self.awaiting[header.id] = (d, header)
        else:
            self.ledger.mark_done(header.id, header.job, header.records)
            self._ack(d)

    def _mine(self) -> Dict[str, int]:
        """Records per job this consumer yielded and still waits receipts for."""
        out: Dict[str, int] = {}
        for _d, header in self.awaiting.values():
            out[header.job] = out.get(header.job, 0) + header.records
        return out

    def _settle(self) -> None:
        """Ack the messages the main process marked done (receipts), or, when no receipt ever left this
        process after :data:`NO_RECEIPTS_AFTER` records (a collate_fn rebuilt them), ack as before."""
        if not self.awaiting:
            return
        if self.receipts is not None and self._yielded >= NO_RECEIPTS_AFTER and pickled_tokens() == 0:
            print(
                f"torchx_datapipes: QueueDataset {self.broker.where}: no record reached the main process"
                " as it was yielded (a collate_fn that rebuilds records drops their receipts), so records"
                " are acknowledged when this worker moves past them, as with num_workers=0; a trainer"
                " killed may then lose the records still queued in its DataLoader. Fix: the default"
                " collate_fn, or one that returns the records' own dict objects",
                file=sys.stderr,
                flush=True,
            )
            self.receipts = None
            for d, header in list(self.awaiting.values()):
                self.ledger.mark_done(header.id, header.job, header.records)
                self._ack(d)
            self.awaiting.clear()
            return
        self.ledger.refresh()
        for mid in [m for m, (_d, h) in self.awaiting.items() if self.ledger.is_done(m, h.job)]:
            d, _header = self.awaiting.pop(mid)
            self._ack(d)

    def _drain(self) -> None:
        """After the last record: wait until the main process received what this consumer yielded (polling
        the group log; a trainer that died ends the wait, and its messages go to the group again)."""
        block = max(0.05, float(self.broker.spec.opt("block_s")))
        while self.awaiting or self.parked:
            if self.worker and os.getppid() != self._parent:
                return
            self._settle()
            # a parked copy is acked once its owner marks it done; one whose owner died is released
            # (closing this connection, or the broker's own redelivery, hands it to the group again)
            self._unpark(take=False)
            if self.awaiting or self.parked:
                self.ledger.refresh(block)

    def _ack(self, d: Delivery) -> None:
        self.broker.ack(self.group, d)
        with self.lock:
            self.held.pop(id(d), None)

    def _drop(self, d: Delivery, records: int) -> None:
        if d.redelivered:
            self.stats.stale += records
        else:
            self.stats.duplicates += records
        self._ack(d)


class Heartbeat(threading.Thread):
    """Every ``claim_after_s / 4``: a heartbeat in the group log, and the held messages kept ours.

    On its own connection (a client is not thread-safe). It keeps a live consumer's messages
    from being taken over while its generator waits to be asked for the next record (a slow
    trainer, a DataLoader asking another worker); a dead consumer's stop with it.
    """

    def __init__(
        self,
        broker: Broker,
        group: str,
        name: str,
        held: Dict[Any, Delivery],
        lock: Any,
        worker: bool = False,
    ) -> None:
        """``worker``: a DataLoader worker, which stops beating once its trainer (its parent) died."""
        super().__init__(daemon=True, name=f"tdp-queue-heartbeat-{name}")
        self.worker = worker
        self.spec, self.kind, self.group, self.name = broker.spec, type(broker), group, name
        self.held, self.lock = held, lock
        self.every_s = max(0.25, float(broker.spec.opt("claim_after_s")) / 4)
        self._stop_event = threading.Event()

    def run(self) -> None:
        broker = self.kind(self.spec, log=lambda msg: None)
        ledger = Ledger(broker, self.group)
        parent = os.getppid()
        try:
            # a DataLoader worker whose trainer died is dead too: no beat (a consumer in the training
            # process itself beats on, even if its parent shell went away)
            while not self.worker or os.getppid() == parent:
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
