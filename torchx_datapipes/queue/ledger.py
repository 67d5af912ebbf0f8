"""A consumer group's shared state, kept on the group's log in the broker itself.

Every consumer of a group appends entries to one append-only log that every member reads in
the same order (a Redis stream, a RabbitMQ stream queue, a NATS JetStream stream), and replays
it into the same state:

- ``claim(id, prev)``: a claim names the claim it replaces (``prev``: none for a first claim);
  the first claim in log order that names the current owner wins, so two consumers that get two
  copies at the same instant still agree. Another copy of a claimed id (a message published
  twice: a producer restarted mid-unit, or a publish retried after a broker restart) or a
  redelivery of it (its owner's connection dropped, so the broker requeued what the owner still
  yields) waits until the owner marks it done, then is dropped and counted as a duplicate; it is
  taken over (``prev`` = the owner's claim) only once the owner stopped beating
  (:meth:`Ledger.silent`);
- ``done(id, n)``: the message's ``n`` records were yielded; written *before* the broker ack,
  so a crash in between makes a redelivery that is dropped, never a record counted twice;
- ``end(job, total)``: the producer's end marker, in the stream's producer log
  (:data:`PRODUCER_LOG`) that every consumer of every group reads, so no consumer can hold it;
- ``heartbeat(consumer)``: written every ``claim_after_s / 4`` by a thread of each consumer, so
  the others know which claimed-but-not-done messages are held by a live consumer. Liveness is
  counted in log order, never with clocks: a holder is presumed dead once the reader's *own*
  heartbeats appear :data:`DEAD_AFTER_BEATS` times after the holder's last entry (a broker
  outage stalls both alike).

**Retention.** When a consumer ends with the group finished and nothing in flight (every job the
log names has all its records done), it appends ``F`` (the finished jobs' totals and the
consumers' reports) and trims the log before the last entry it read (:meth:`Ledger.compact`):
what is trimmed is only about finished jobs, and ``F`` stands for it (any later copy of a
message of a finished job is dropped). A reader that lagged behind the trim applies ``F`` and
what follows. Brokers whose log cannot be trimmed from a client (RabbitMQ streams) keep the
whole log until ``delete()``.

The group is finished once the records done for a job reach its end marker's total. A
consumer with nothing left to fetch may also stop once the rest is in flight at *live*
consumers (:meth:`Ledger.covered`): a DataLoader asks its workers in turn, so a worker that
waited for a sibling's ack would wait for itself.
"""

import time
import uuid
from typing import Any, Dict, List, Optional, Set, Tuple

import orjson

from torchx_datapipes.queue.base import Broker

PRODUCER_LOG = "_producer"  # the stream's own log: the producers' end markers, read by every group
DEAD_AFTER_BEATS = 3  # a holder silent for this many of the reader's own heartbeats is presumed dead


class Ledger:
    def __init__(self, broker: Broker, group: str, wait_s: float = 60.0, me: Optional[str] = None) -> None:
        """``me``: the consumer reading (its heartbeats are the clock of :meth:`silent`)."""
        self.broker, self.group, self.wait_s, self.me = broker, group, wait_s, me
        self.claims: Dict[str, str] = {}  # id -> the winning claim's nonce
        self.done: Dict[str, int] = {}  # id -> records
        self.done_by_job: Dict[str, int] = {}
        self.ends: Dict[str, int] = {}  # job -> total records
        self.reports: Dict[str, Dict[str, int]] = {}  # consumer -> its last stats report
        self.holders: Dict[str, Tuple[str, str, int]] = {}  # claimed id -> (consumer, job, records)
        # consumer -> log position of its last heartbeat (a claim is no sign of life: a DataLoader worker
        # orphaned by a killed trainer may still claim a message it already fetched, but beats no more)
        self.alive_at: Dict[str, int] = {}
        self.applied = 0  # entries read so far (a position in log order, no clocks)
        self.finished_jobs: Dict[str, int] = {}  # job -> total, from compaction entries
        self.jobs_seen: Set[str] = set()  # jobs named by a claim or a done
        self.compactions = 0  # compaction entries read
        self.since_compaction = 0  # entries read after the last compaction entry
        self.my_beats = 0  # heartbeats of ``me`` read so far
        self.seen_beat: Dict[str, int] = {}  # consumer -> my_beats when its last entry was read
        self._nonces: Set[str] = set()

    def _apply(self, raw: bytes) -> None:
        e = orjson.loads(raw)
        self.applied += 1
        k, mid, who = e["k"], e.get("id", ""), e.get("c")
        self.since_compaction += 1
        if who is not None:
            self.seen_beat[who] = self.my_beats
        if k in ("c", "d"):
            self.jobs_seen.add(e["j"])
        if k == "c":
            self._nonces.add(e["o"])
            if e["j"] in self.finished_jobs:
                pass  # a late copy of a finished job's message: never delivered
            elif mid not in self.done and e.get("p", "") == self.claims.get(mid, ""):
                self.claims[mid] = e["o"]  # the first claim naming the current owner (none: a first claim)
                self.holders[mid] = (who, e["j"], int(e["n"]))
        elif k == "d":
            self.holders.pop(mid, None)
            if mid not in self.done:
                self.done[mid] = int(e["n"])
                self.done_by_job[e["j"]] = self.done_by_job.get(e["j"], 0) + int(e["n"])
        elif k == "e":
            self.ends[e["j"]] = int(e["n"])
        elif k == "s":
            self.reports[e["c"]] = e["s"]
        elif k == "h":
            self.alive_at[who] = self.applied
            if who == self.me:
                self.my_beats += 1
        elif k == "m":
            self._nonces.add(e["o"])
        elif k == "F":
            self._apply_compaction(e)

    def _apply_compaction(self, e: Dict[str, Any]) -> None:
        for job, total in e["jobs"].items():
            self.finished_jobs[job] = self.ends[job] = int(total)
            self.done_by_job[job] = max(self.done_by_job.get(job, 0), int(total))
        for mid in [m for m, h in self.holders.items() if h[1] in self.finished_jobs]:
            del self.holders[mid]
        for consumer, stats in e["r"].items():
            self.reports.setdefault(consumer, stats)
        self.compactions += 1
        self.since_compaction = 0

    def refresh(self, block_s: float = 0.0) -> int:
        """Read what the group's log and the producer's log (end markers) hold now."""
        entries = self.broker.log_read(self.group, block_s)
        for raw in [*self.broker.log_read(PRODUCER_LOG, 0.0), *entries]:
            self._apply(raw)
        return len(entries)

    def sync(self) -> None:
        """Read both logs up to now exactly: where a read returns all that is in the log (Redis, NATS), one
        read; else append a marker to each and read until both come back."""
        if self.broker.EXACT_LOG_READ:
            self.refresh()
            return
        nonces = [uuid.uuid4().hex, uuid.uuid4().hex]
        self.broker.log_append(PRODUCER_LOG, orjson.dumps({"k": "m", "o": nonces[0]}))
        self._append({"k": "m", "o": nonces[1]})
        self._wait(nonces, "a sync marker")

    def _wait(self, nonces: List[str], what: str) -> None:
        deadline = time.monotonic() + self.wait_s
        compactions = self.compactions
        while not all(n in self._nonces for n in nonces):
            if self.compactions > compactions and self.broker.EXACT_LOG_READ:
                self.refresh()  # all that is in the log now: an entry still missing was trimmed by a
                if not all(n in self._nonces for n in nonces):  # compaction, so it was about a finished job
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} did not come back from the group log in {self.wait_s:g}s")
            self.refresh(0.05)
            for raw in self.broker.log_read(PRODUCER_LOG, 0.0):
                self._apply(raw)

    def _append(self, entry: Dict[str, object]) -> None:
        self.broker.log_append(self.group, orjson.dumps(entry))

    def claim(self, mid: str, consumer: str, job: str, n: int, prev: str = "") -> bool:
        """True if ``consumer`` now delivers message ``mid``: its claim is the first in log order that names
        the current owner's claim (``prev``: "" for a first claim, else the claim it takes over)."""
        if not prev:
            self.refresh()
            if mid in self.claims or self.is_done(mid, job):
                return False
        nonce = uuid.uuid4().hex
        self._append({"k": "c", "id": mid, "o": nonce, "p": prev, "c": consumer, "j": job, "n": n})
        self._wait([nonce], f"the claim of {mid}")
        return self.claims.get(mid) == nonce and not self.is_done(mid, job)

    def silent(self, consumer: str) -> int:
        """How many heartbeats of ``me`` the log holds after ``consumer``'s last entry (0 for ``me``)."""
        if consumer == self.me:
            return 0
        return self.my_beats - self.seen_beat.get(consumer, 0)

    def heartbeat(self, consumer: str) -> None:
        self._append({"k": "h", "c": consumer})

    def is_done(self, mid: str, job: str) -> bool:
        """Message ``mid`` of ``job`` was done (as far as this reader has read)."""
        return mid in self.done or job in self.finished_jobs

    def quiescent(self) -> bool:
        """Every job the log names is finished and no message is in flight."""
        jobs = self.jobs_seen | set(self.ends)
        return not self.holders and all(self.done_by_job.get(j, 0) >= self.ends.get(j, 1 << 62) for j in jobs)

    def compact(self) -> int:
        """If the group is quiescent: append ``F`` and trim the log before the last entry read (entries
        removed; 0 where the broker cannot trim, or when nothing was read since the last ``F``)."""
        if not self.broker.EXACT_LOG_READ:
            return 0
        self.sync()
        if not self.ends or not self.quiescent() or self.since_compaction == 0:
            return 0
        jobs = {j: self.ends[j] for j in self.jobs_seen | set(self.ends)}
        self._append({"k": "F", "jobs": jobs, "r": self.reports})
        return self.broker.log_trim(self.group)

    def mark_done(self, mid: str, job: str, n: int) -> None:
        self._append({"k": "d", "id": mid, "j": job, "n": n})

    def mark_end(self, job: str, total: int) -> None:
        self._append({"k": "e", "j": job, "n": total})

    def report(self, consumer: str, stats: Dict[str, int]) -> None:
        """A consumer's counters, kept in the log so that ``QueueDataset.stats()`` sees every rank's."""
        self._append({"k": "s", "c": consumer, "s": stats})

    def finished(self) -> bool:
        return any(self.done_by_job.get(job, 0) >= total for job, total in self.ends.items())

    def covered(self, me: str, since: int, mine: Optional[Dict[str, int]] = None) -> bool:
        """Every job with an end marker is done, or the rest is held by consumers (not ``me``) that showed
        life (a heartbeat) after log position ``since``: a consumer that died holding messages beats no
        more, so the others wait for the broker to hand its messages over. ``mine``: records
        (per job) ``me`` yielded and waits receipts for (they may sit in its DataLoader's unfinished
        batch, which only ending this consumer sends)."""
        if not self.ends:
            return False
        held: Dict[str, int] = dict(mine or {})
        for consumer, job, n in self.holders.values():
            if consumer != me and self.alive_at.get(consumer, -1) > since:
                held[job] = held.get(job, 0) + n
        return all(self.done_by_job.get(j, 0) + held.get(j, 0) >= t for j, t in self.ends.items())

    def progress(self) -> Dict[str, object]:
        return {"done": dict(self.done_by_job), "ends": dict(self.ends), "messages_done": len(self.done)}
