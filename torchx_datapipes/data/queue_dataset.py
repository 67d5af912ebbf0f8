"""``QueueDataset``: train on records while a transform job publishes them to a message queue.

::

    ds = QueueDataset("redis://127.0.0.1:6379/0?stream=train", group="train")
    loader = DataLoader(ds, batch_size=None, num_workers=2)   # under torchrun: every rank the same

Every DataLoader worker of every DDP rank is one consumer of the group: they share the stream
and each record goes to one of them (so ranks see different records and may see different
numbers of them: use ``torch.distributed.algorithms.Join`` or drop the last uneven steps).
A record is acknowledged only after the training loop received it: with ``num_workers=0`` when
the loop asks for the next record; from DataLoader workers once the main process has returned
every record of its message to the loop (``queue/receipts.py``). Records a dead consumer held
are taken by the others after ``claim_after_s``; iteration ends by itself once the group has
consumed as many records as the producer's end marker says. Tensors come back as torch
tensors with their dtype and shape.

Guarantee (docs/queue.md): with no failures, every record exactly once. Across a consumer
crash, at least once: the only duplicates are records the dead consumer had yielded from a
message it had not acked yet (in flight), and they are counted in ``stats()["redelivered"]``.
Copies of a message published twice (a producer restarted mid-unit, a publish retried across a
broker restart) are dropped and counted in ``stats()["duplicates"]``; a message redelivered after
it was done (its consumer died before the ack) is dropped and counted in ``stats()["stale"]``.
"""

import os
from typing import Any, Dict, Iterator, Optional

from torch.utils.data import IterableDataset, get_worker_info

from torchx_datapipes.queue.consumer import GroupConsumer, consumer_name
from torchx_datapipes.queue.ledger import Ledger
from torchx_datapipes.queue.registry import open_queue, parse
from torchx_datapipes.secrets import resolve


class QueueDataset(IterableDataset):
    """The records a producer job publishes to ``url``, consumed by consumer group ``group``."""

    def __init__(self, url: str, group: str = "train", claim_after_s: Optional[float] = None) -> None:
        super().__init__()
        sep = "&" if "?" in url else "?"
        self.url = url + (f"{sep}claim_after_s={claim_after_s:g}" if claim_after_s is not None else "")
        parse(self.url)  # refuse a bad URL here, not in a DataLoader worker
        if not group or any(c in group for c in " .*>/:"):
            raise ValueError(
                f"group {group!r} must be a non-empty name without spaces, '.', '*', '>', '/', ':'"
            )
        self.group = group
        self._local: Dict[str, int] = {}

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        info = get_worker_info()
        rank = os.environ.get("RANK", "0")
        name = consumer_name(f"r{rank}w{info.id if info is not None else 0}")
        # a DataLoader worker: the main process marks a message done once its loop has the records
        receipts = self.url if info is not None else None
        consumer = GroupConsumer(open_queue(resolve(self.url)), self.group, name, receipts=receipts)
        try:
            yield from consumer
        finally:
            s = consumer.stats
            for k, v in (
                ("delivered", s.delivered),
                ("redelivered", s.redelivered),
                ("duplicates", s.duplicates),
                ("stale", s.stale),
            ):
                self._local[k] = self._local.get(k, 0) + v

    def stats(self) -> Dict[str, Any]:
        """The group's counters, from the group log: every consumer that finished (any rank, any worker).

        ``delivered``: records yielded; ``redelivered``: of those, records redelivered after a consumer
        failure (the only possible duplicates); ``duplicates``: records dropped, of a message id published
        again; ``stale``: records dropped, of a message redelivered after it was done (its consumer died
        before its ack reached the broker);
        ``records_done``/``end_total``: the group's progress against the producer's end marker;
        ``local``: this process's own consumers (``num_workers=0``: the whole story of this rank).
        """
        broker = open_queue(resolve(self.url))
        try:
            ledger = Ledger(broker, self.group)
            ledger.sync()
            totals = {k: sum(int(r.get(k, 0)) for r in ledger.reports.values())
                      for k in ("delivered", "redelivered", "duplicates", "stale")}  # fmt: skip
            return {
                **totals,
                "consumers": len(ledger.reports),
                "records_done": sum(ledger.done_by_job.values()),
                "end_total": sum(ledger.ends.values()) if ledger.ends else None,
                "finished": ledger.finished(),
                "local": dict(self._local),
            }
        finally:
            broker.close()
