"""Broker faults and cleanup, against the real brokers: ``delete()`` leaves nothing behind."""

from typing import Iterator

import pytest
from pika import exceptions as px
from queue_testutil import BROKERS, finish, fresh_url, publish_units

from torchx_datapipes.queue import GroupConsumer, open_queue


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
