"""The transform op with a queue ``--output``: publish each unit's records instead of writing a part.

The engine runs unchanged on ``--state`` (its "output"): units claimed per slot, a commit record
per unit under ``--state/_units/``, the lease and ``_SUCCESS``. A unit's commit record is
written only after every message of the unit was accepted by the broker, so a relaunch or a
torchrun restart skips it and never publishes it again; a unit cut off mid-publication is
published again from its first record with the same message ids ``(job, unit, seq)``, whose
copies the broker (NATS) or the consumers (Redis, RabbitMQ) drop. The job id is made once per
``--state`` (a new one after ``--overwrite True``). At the commit, rank 0 publishes the end
marker with the total record count.
"""

import os
import sys
import uuid
from typing import Any, Callable, Dict, List, Optional

import orjson

from torchx_datapipes.formats.planning import Unit
from torchx_datapipes.formats.reading import UnitReader
from torchx_datapipes.io import manifest_schema as ms
from torchx_datapipes.io.fs import fs_and_path, join
from torchx_datapipes.io.layout import QUEUE_JOB
from torchx_datapipes.queue import Backpressure, Broker, UnitPublisher, open_queue, publish_end
from torchx_datapipes.runner.apply import Applier
from torchx_datapipes.runner.badrecords import ErrorSink
from torchx_datapipes.runner.context import PassContext
from torchx_datapipes.runner.memo import Memo, stats_delta, summarize
from torchx_datapipes.secrets import SECRET_OPTIONS, resolve, split_credentials, strip_options

JOB_FILE = QUEUE_JOB


def public(url: str) -> str:
    """The queue URL without password options or userinfo (for the fingerprint and the manifest)."""
    return strip_options(split_credentials(url)[0], SECRET_OPTIONS)


class QueueTransformOp:
    name = "transform"

    def __init__(
        self,
        fn: Callable[..., Any],
        queue: str,
        state: str,
        on_error: Any,
        max_backlog: int,
        memo: Optional[Memo] = None,
    ) -> None:
        self.fn, self.queue, self.state, self.on_error = fn, queue, state, on_error
        self.max_backlog, self.memo = max_backlog, memo
        self.job = ""
        self._broker: Optional[Broker] = None

    def options(self) -> Dict[str, Any]:
        return {ms.OPT_QUEUE: public(self.queue)}

    def broker(self) -> Broker:
        if self._broker is None:
            self._broker = open_queue(resolve(self.queue))
        return self._broker

    def run(self, ctx: PassContext) -> None:
        if ctx.rank == 0:
            self._ensure_job_id()
        ctx.barrier()
        self.job = self._read_job_id()
        ctx.run_pass("main", self.process)

    def _ensure_job_id(self) -> None:
        fs, path = fs_and_path(join(self.state, JOB_FILE))
        if not fs.exists(path):
            tmp = f"{path}.tmp-{os.getpid()}"
            fs.pipe_file(tmp, orjson.dumps({"job": uuid.uuid4().hex[:16]}))
            fs.mv(tmp, path)

    def _read_job_id(self) -> str:
        fs, path = fs_and_path(join(self.state, JOB_FILE))
        return str(orjson.loads(fs.cat_file(path))["job"])

    def process(self, unit: Unit, reader: UnitReader, sink: ErrorSink) -> Dict[str, Any]:
        broker = self.broker()
        pressure = Backpressure(broker, self.max_backlog)
        pub = UnitPublisher(broker, self.job, unit.index, pressure)
        applier = Applier(self.fn, self.on_error, self.memo)
        before = self.memo.stats() if self.memo else None
        for out in applier.run(reader.batches(), sink):
            for i, err in pub.add(out):
                sink.record_failed(applier.line_of(i), out[i], TypeError(err), stage="serialize")
        pub.close()
        meta: Dict[str, Any] = {
            ms.RECORDS_OUT: pub.records, ms.FILTERED: applier.filtered, ms.OUTPUTS: [], ms.FILES: [],
            ms.MESSAGES: pub.seq, ms.FIRST_PUBLISH_AT: pub.first_publish_at,
            ms.BACKPRESSURE_WAIT_S: round(pressure.waited_s, 3), ms.PEAK_BACKLOG: pressure.peak,
        }  # fmt: skip
        if self.memo is not None and before is not None:
            meta[ms.CACHE] = stats_delta(before, self.memo.stats())
        return meta

    def finalize(self, ctx: PassContext, metas: List[Dict[str, Any]]) -> Dict[str, Any]:
        total = sum(int(m[ms.RECORDS_OUT]) for m in metas)
        broker = self.broker()
        publish_end(broker, self.job, total)
        print(f"queue {broker.where}: end marker of job {self.job} published ({total:,} records)",
              file=sys.stderr, flush=True)  # fmt: skip
        broker.close()
        firsts = [m[ms.FIRST_PUBLISH_AT] for m in metas if m.get(ms.FIRST_PUBLISH_AT)]
        return {
            ms.RECORDS_OUT: total,
            ms.FILTERED: sum(m[ms.FILTERED] for m in metas),
            ms.OUTPUT: public(self.queue),
            ms.STATE: ctx.output,
            ms.QUEUE: {
                ms.QUEUE_JOB_ID: self.job,
                ms.QUEUE_MESSAGES: sum(int(m.get(ms.MESSAGES, 0)) for m in metas),
                ms.QUEUE_FIRST_PUBLISH_AT: min(firsts) if firsts else None,
                ms.QUEUE_MAX_BACKLOG: self.max_backlog,
                ms.QUEUE_WAIT_S: round(sum(m.get(ms.BACKPRESSURE_WAIT_S, 0.0) for m in metas), 3),
                ms.QUEUE_PEAK_BACKLOG: max((int(m.get(ms.PEAK_BACKLOG, 0)) for m in metas), default=0),
                ms.QUEUE_RECONNECTS: broker.reconnects,
            },
            **({ms.CACHE: summarize(self.memo, metas)} if self.memo is not None else {}),
        }  # fmt: skip
