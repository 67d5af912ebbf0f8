"""Live preprocessing through a message queue vs the file path (issue 21), references in the same run.

Per broker (Redis Streams, RabbitMQ, NATS JetStream) and for the file path:

1. **small records** (``--records``, default 1M): the transform op (``runner.main`` in-process,
   one producer process, ``--num_workers 1``) publishes to the queue while a consumer process
   (``GroupConsumer``, what each ``QueueDataset`` worker runs) consumes; end to end = from the
   producer's start to the last record consumed. The file path: the same op writes Parquet,
   then ``OutputDataset`` reads it all (transform, then read). Also: the first record's latency
   after the producer's first unit started.
2. **images** (``--images``, default 10,000 64x64x3 uint8 tensors made by the function): records/s
   and the trainer's time waiting on data (blocked in ``next()``) with ``--step-ms`` of "training"
   per record.
3. **backpressure**: a consumer 10x slower than the producer, ``--max-backlog`` messages: the
   peak backlog and the broker's memory for it (Redis ``used_memory`` above its idle level, NATS
   stream bytes; RabbitMQ's queue memory is not visible over AMQP, so only its backlog).

Both sides run on this machine: 2 cores shared with other sessions, so figures move by 10-30%
between runs; torchx/torchrun launch costs (~5 s per job here) are equal for both paths and
left out (everything runs in-process or in forked processes).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import shutil
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

BROKERS = {
    "redis": "redis://127.0.0.1:6379/0?stream={name}",
    "rabbitmq": "amqp://guest:guest@127.0.0.1:5672/%2F?queue={name}",
    "nats": "nats://127.0.0.1:4222?stream={name}",
}


def small(r: Dict[str, Any]) -> Dict[str, Any]:
    return {"id": r["id"], "label": r["id"] % 10, "score": r["id"] * 0.5}


def image(r: Dict[str, Any]) -> Dict[str, Any]:
    import torch

    g = torch.Generator().manual_seed(int(r["id"]))
    return {"id": r["id"], "img": torch.randint(0, 256, (3, 64, 64), dtype=torch.uint8, generator=g)}


def make_input(root: Path, n: int, files: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    per = (n + files - 1) // files
    for k in range(files):
        lo, hi = k * per, min(n, (k + 1) * per)
        (root / f"part-{k:03d}.jsonl").write_text("".join(f'{{"id":{i}}}\n' for i in range(lo, hi)))
    return root


def produce(fn: Any, inp: Path, output: str, work: Path, extra: List[str]) -> Dict[str, Any]:
    from torchx_datapipes import artifact
    from torchx_datapipes.runner.main import main

    ref = artifact.package(fn, str(work / "store"))
    args = ["transform", "--input", str(inp), "--output", output, "--artifact", ref.url,
            "--sha256", ref.sha256, "--progress_s", "0", "--unit_mb", "1", "--num_workers", "1",
            "--assign", "static", *extra]  # fmt: skip
    m = main(args)
    assert m is not None
    return m


def _consume(url: str, step_s: float, result: Any) -> None:
    from torchx_datapipes.queue import GroupConsumer, open_queue

    c = GroupConsumer(open_queue(url), "bench")
    n, wait = 0, 0.0
    it = iter(c)
    t = time.perf_counter()
    while True:
        try:
            next(it)
        except StopIteration:
            break
        now = time.perf_counter()
        wait += now - t
        n += 1
        if step_s:
            time.sleep(step_s)
        t = time.perf_counter()
    result.put({"records": n, "first_record_at": c.stats.first_record_at, "ended_at": time.time(),
                "wait_s": wait, "duplicates": c.stats.duplicates})  # fmt: skip


class MemoryProbe(threading.Thread):
    """Samples the broker's backlog and memory every 50 ms while a run goes on."""

    def __init__(self, kind: str, url: str) -> None:
        super().__init__(daemon=True)
        self.kind, self.url = kind, url
        self.stop_event = threading.Event()
        self.peak_backlog = 0
        self.peak_bytes: Optional[int] = None
        self.base: Optional[int] = None

    def _bytes(self, b: Any) -> Optional[int]:
        if self.kind == "redis":
            return int(b.r.info("memory")["used_memory"])
        if self.kind == "nats":
            return int(b._run(b._js.stream_info(b.spec.name)).state.bytes)
        return None

    def run(self) -> None:
        from torchx_datapipes.queue import open_queue

        b = open_queue(self.url)
        b.backlog()
        self.base = self._bytes(b) if self.kind == "redis" else 0
        while not self.stop_event.wait(0.05):
            self.peak_backlog = max(self.peak_backlog, b.backlog())
            v = self._bytes(b)
            if v is not None:
                self.peak_bytes = max(self.peak_bytes or 0, v)
        b.close()


def queue_run(kind: str, fn: Any, inp: Path, work: Path, step_s: float = 0.0, max_backlog: int = 1000,
              options: str = "") -> Dict[str, Any]:  # fmt: skip
    from torchx_datapipes.queue import open_queue

    url = BROKERS[kind].format(name=f"tdpb_{uuid.uuid4().hex[:10]}") + "&block_s=0.05" + options
    ctx = mp.get_context("fork")
    result = ctx.Queue()
    probe = MemoryProbe(kind, url)
    consumer = ctx.Process(target=_consume, args=(url, step_s, result))
    t0 = time.time()
    consumer.start()  # the trainer is up before the producer starts
    probe.start()
    try:
        state = str(work / f"state-{uuid.uuid4().hex[:8]}")
        m = produce(fn, inp, url, work, ["--state", state, "--max_backlog", str(max_backlog)])
        got = result.get(timeout=3600)
        consumer.join(60)
    finally:
        if consumer.is_alive():
            consumer.kill()
        probe.stop_event.set()
        probe.join(10)
    with open_queue(url) as b:
        b.delete(("bench",))
    first_unit = min(u["started_at"] for u in m["units"])
    return {
        "path": kind, "records": got["records"], "expected": m["records_out"],
        "duplicates": got["duplicates"], "end_to_end_s": round(got["ended_at"] - t0, 3),
        "records_per_s": round(got["records"] / (got["ended_at"] - t0)),
        "first_record_after_first_unit_s": round(got["first_record_at"] - first_unit, 3),
        "trainer_wait_s": round(got["wait_s"], 3), "peak_backlog": probe.peak_backlog,
        "broker_bytes_peak": (probe.peak_bytes - (probe.base or 0)) if probe.peak_bytes is not None else None,
        "max_backlog": max_backlog,
    }  # fmt: skip


def file_run(fn: Any, inp: Path, work: Path, step_s: float = 0.0) -> Dict[str, Any]:
    from torchx_datapipes.data import OutputDataset

    out = work / "files-out"
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.time()
    m = produce(fn, inp, str(out), work, ["--output_format", "parquet"])
    produced = time.time()
    n, wait, first = 0, 0.0, None
    it = iter(OutputDataset(str(out)))
    t = time.perf_counter()
    for _ in it:
        wait += time.perf_counter() - t
        first = first or time.time()
        n += 1
        if step_s:
            time.sleep(step_s)
        t = time.perf_counter()
    end = time.time()
    first_unit = min(u["started_at"] for u in m["units"])
    return {
        "path": "files (parquet, then OutputDataset)", "records": n, "expected": m["records_out"],
        "duplicates": 0,
        "end_to_end_s": round(end - t0, 3), "records_per_s": round(n / (end - t0)),
        "transform_s": round(produced - t0, 3),
        "first_record_after_first_unit_s": round((first or end) - first_unit, 3),
        "trainer_wait_s": round(wait, 3),
    }  # fmt: skip


def table(title: str, rows: List[Dict[str, Any]], cols: List[str]) -> str:
    lines = [f"\n{title}", " | ".join(cols), " | ".join("---" for _ in cols)]
    lines += [" | ".join(str(r.get(c, "")) for c in cols) for r in rows]
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--images", type=int, default=10_000)
    ap.add_argument(
        "--step-ms", type=float, default=0.0, help="the trainer's 'training' time per image record"
    )
    ap.add_argument("--slow-records", type=int, default=20_000, help="records of the backpressure run")
    ap.add_argument("--max-backlog", type=int, default=20)
    ap.add_argument("--brokers", default="redis,rabbitmq,nats")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    brokers = [b for b in a.brokers.split(",") if b]
    work = Path(tempfile.mkdtemp(prefix="tdp-bench-queue-"))
    out: Dict[str, Any] = {"machine": "2 cores shared with other sessions; one run, no repeats"}
    try:
        inp = make_input(work / "small", a.records, 8)
        rows = [file_run(small, inp, work)] + [queue_run(k, small, inp, work) for k in brokers]
        out["small"] = rows
        print(table(f"{a.records:,} small records, end to end (producer start -> last record consumed)", rows,
                    ["path", "records", "end_to_end_s", "records_per_s", "first_record_after_first_unit_s",
                     "duplicates"]))  # fmt: skip
        imgs = make_input(work / "images", a.images, 8)
        step = a.step_ms / 1000
        rows = [file_run(image, imgs, work, step)] + [queue_run(k, image, imgs, work, step) for k in brokers]
        out["images"] = rows
        print(table(f"{a.images:,} 64x64x3 uint8 image tensors (trainer step {a.step_ms} ms/record)", rows,
                    ["path", "records", "end_to_end_s", "records_per_s", "trainer_wait_s",
                     "first_record_after_first_unit_s"]))  # fmt: skip
        slow_in = make_input(work / "slow", a.slow_records, 4)
        per_record_s = out["small"][1]["end_to_end_s"] / max(1, a.records) if brokers else 0.0
        step_s = max(10 * per_record_s, 2e-5)  # a consumer ~10x slower than the producer's pace
        rows = [queue_run(k, small, slow_in, work, step_s, a.max_backlog, "&batch=64") for k in brokers]
        out["backpressure"] = {"consumer_step_s": step_s, "rows": rows}
        print(table(f"backpressure: consumer {step_s * 1e6:.0f} us/record (~10x slower), --max_backlog "
                    f"{a.max_backlog} messages of 64 records", rows,
                    ["path", "records", "peak_backlog", "max_backlog", "broker_bytes_peak",
                     "end_to_end_s"]))  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if a.json:
        a.json.write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
