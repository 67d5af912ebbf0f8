"""Broker faults and cleanup, against the real brokers: ``delete()`` leaves nothing behind."""

import multiprocessing as mp
import os
import signal
import time
from typing import Any, Iterator

import pytest
from pika import exceptions as px
from queue_testutil import BROKERS, Worker, cleanup, finish, fresh_url, publish_units, records

from torchx_datapipes.queue import Backpressure, GroupConsumer, UnitPublisher, open_queue


@pytest.fixture(params=sorted(BROKERS))
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    yield fresh_url(request.param, block_s=0.05, claim_after_s=1)


def _left_behind(url: str) -> list:
    """What of the queue, its producer log and its group log still exists on the broker."""
    b = open_queue(url)
    name = b.spec.name
    if url.startswith("redis"):
        import redis

        r = redis.Redis.from_url(url.split("?", 1)[0])
        return [k.decode() for k in r.scan_iter(match=f"{name}*")]
    if url.startswith("amqp"):
        import pika

        left = []
        conn = pika.BlockingConnection(pika.URLParameters("amqp://guest:guest@127.0.0.1:5672/%2F"))
        try:
            for q in (name, f"{name}.log.train", f"{name}.log._producer"):
                ch = conn.channel()
                try:
                    ch.queue_declare(q, passive=True)
                    left.append(q)
                    ch.close()
                except px.ChannelClosedByBroker:  # 404: gone
                    pass
        finally:
            conn.close()
        return left
    import asyncio

    import nats

    async def streams() -> list:
        nc = await nats.connect("nats://127.0.0.1:4222")
        try:
            return [s for s in await nc.jetstream().streams_info() if s.config.name.startswith(name)]
        finally:
            await nc.close()

    return [s.config.name for s in asyncio.new_event_loop().run_until_complete(streams())]


def test_delete_removes_the_queue_and_every_log(url: str) -> None:
    with open_queue(url) as b:
        total = publish_units(b, "j", {0: 30})
        finish(b, "j", total)
    assert sorted(r["id"] for r in GroupConsumer(open_queue(url), "train")) == list(range(30))
    assert _left_behind(url)  # the queue and its logs exist
    with open_queue(url) as b:
        b.delete(("train",))
    assert _left_behind(url) == []


def _log_entries(url: str, group: str = "train") -> int:
    """Entries in the group's log on the broker now."""
    name = open_queue(url).spec.name
    if url.startswith("redis"):
        import redis

        return int(redis.Redis.from_url(url.split("?", 1)[0]).xlen(f"{name}:log:{group}"))
    import asyncio

    import nats

    async def count() -> int:
        nc = await nats.connect("nats://127.0.0.1:4222")
        try:
            return int((await nc.jetstream().stream_info(f"{name}_log_{group}")).state.messages)
        finally:
            await nc.close()

    return asyncio.new_event_loop().run_until_complete(count())


@pytest.mark.parametrize("kind", ["nats", "redis"])  # (RabbitMQ streams cannot be trimmed by a client)
def test_the_group_log_is_trimmed_once_the_group_finished(kind: str) -> None:
    url = fresh_url(kind, block_s=0.05, claim_after_s=1, batch=10)
    try:
        with open_queue(url) as b:
            total = publish_units(b, "j", {0: 1000, 1: 1000})  # 200 messages: 400 claims and dones
            finish(b, "j", total)
        consumers = [GroupConsumer(open_queue(url), "train") for _ in range(2)]
        workers = [Worker(lambda c=c: [r["id"] for r in c]) for c in consumers]
        for w in workers:
            w.start()
        ids = [i for w in workers for i in w.get(120)]
        assert sorted(ids) == sorted([i for i in range(1000)] + [100_000 + i for i in range(1000)])
        assert _log_entries(url) <= 20  # the compaction entry, the last reports and heartbeats
        # what was trimmed is still known: a late copy of a finished job's message is dropped, and a new
        # consumer of the group ends at once with every consumer's report
        with open_queue(url) as b:
            pub = UnitPublisher(b, "j", 0, Backpressure(b, 0))
            pub.batch = 10
            assert pub.add(records(0, 10)) == [] and pub.close() == 10
        late = GroupConsumer(open_queue(url), "train")
        assert list(late) == [] and late.ledger.finished()
        assert late.stats.duplicates == (0 if kind == "nats" else 10)  # (NATS drops it on publish)
        reported = {c.name for c in consumers}
        assert reported <= set(late.ledger.reports)
        assert sum(late.ledger.reports[c]["delivered"] for c in reported) == 2000
    finally:
        cleanup(url)


def _done_then_die(url: str, ready: Any) -> None:
    """Consumes one message, marks it done in the group log, and hangs before its broker ack."""
    c = GroupConsumer(open_queue(url), "train")
    mark_done = c.ledger.mark_done

    def done_then_hang(mid: str, job: str, n: int) -> None:
        mark_done(mid, job, n)
        ready.set()
        time.sleep(3600)  # SIGKILLed here: done in the group log, never acked on the broker

    c.ledger.mark_done = done_then_hang  # type: ignore[method-assign]
    for _ in c:
        pass


@pytest.mark.parametrize("kind", ["nats", "rabbitmq", "redis"])
def test_a_done_message_that_comes_back_is_counted_stale_not_duplicate(kind: str) -> None:
    """``stats()['stale']``: a consumer died between the done and the ack, and the broker redelivered
    that message; ``['duplicates']`` stays for ids published twice (docs/queue.md)."""
    url = fresh_url(kind, block_s=0.05, claim_after_s=1, batch=10, prefetch=1)
    try:
        with open_queue(url) as b:
            total = publish_units(b, "j", {0: 10, 1: 10})  # one message per unit
        ready = mp.get_context("fork").Event()
        dead = mp.get_context("fork").Process(target=_done_then_die, args=(url, ready))
        dead.start()
        try:
            assert ready.wait(60), "the first consumer did not mark its message done"
        finally:
            os.kill(dead.pid, signal.SIGKILL)  # type: ignore[arg-type]
            dead.join(30)
        assert dead.exitcode == -signal.SIGKILL
        with open_queue(url) as sb:
            survivor = GroupConsumer(sb, "train")
            w = Worker(lambda: [r["id"] for r in survivor])
            w.start()
            deadline = time.monotonic() + 60
            while survivor.stats.stale < 10 and time.monotonic() < deadline:  # it was handed over
                time.sleep(0.05)
            assert survivor.stats.stale == 10, survivor.stats
            with open_queue(url) as b:
                finish(b, "j", total)  # (no end marker before: the survivor waits for the redelivery)
            ids = sorted(w.get(60))
        units = [[u * 100_000 + i for i in range(10)] for u in (0, 1)]
        assert ids in units, ids  # the other unit's records, once (the dead one's came back stale)
        assert survivor.stats.duplicates == 0 and survivor.stats.redelivered == 0, survivor.stats
    finally:
        cleanup(url)
