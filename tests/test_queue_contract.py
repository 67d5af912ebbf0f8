"""One contract suite, run against every broker of this machine (Redis Streams, RabbitMQ, NATS JetStream).

The brokers are started by scripts/services.sh; a broker that is down fails these tests, never skips them.
"""

import math
import multiprocessing as mp
import os
import signal
import threading
import time
from typing import Any, Dict, Iterator, List

import pytest
import torch
from queue_testutil import BROKERS, Worker, cleanup, finish, fresh_url, publish_units, records

from torchx_datapipes.queue import (
    Backpressure,
    GroupConsumer,
    QueueUnavailableError,
    UnitPublisher,
    open_queue,
    parse,
)
from torchx_datapipes.queue.codec import Header, decode_records, encode, encode_record


@pytest.fixture(params=sorted(BROKERS))
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    u = fresh_url(request.param, block_s=0.05, claim_after_s=3)
    with open_queue(u) as b:
        b.ping()  # a broker that is down fails here, naming the fix
    yield u
    cleanup(u)


def consume(url: str, group: str = "train") -> GroupConsumer:
    return GroupConsumer(open_queue(url), group)


def test_types_round_trip_through_the_broker(url: str) -> None:
    rec: Dict[str, Any] = {
        "img": torch.arange(24, dtype=torch.uint8).reshape(2, 3, 4), "f64": torch.tensor([0.5, -1.0],
        dtype=torch.float64), "scalar": torch.tensor(7), "big": 2**70, "nan": float("nan"), "inf": -math.inf,
        "raw.bin": b"\x00\xff", "txt": "héllo", "cls": 3, "id": "007", "none": None,
        "nested": {"a": [1, 2.5]},
    }  # fmt: skip
    with open_queue(url) as b:
        pub = UnitPublisher(b, "j", 0, Backpressure(b, 0))
        assert pub.add([rec]) == []
        finish(b, "j", pub.close())
    got = list(consume(url))
    assert len(got) == 1
    out = got[0]
    assert set(out) == set(rec)
    for k in ("img", "f64", "scalar"):
        assert (
            isinstance(out[k], torch.Tensor) and out[k].dtype == rec[k].dtype and out[k].shape == rec[k].shape
        )
        assert torch.equal(out[k], rec[k])
    assert out["big"] == 2**70 and math.isnan(out["nan"]) and out["inf"] == -math.inf
    assert out["raw.bin"] == b"\x00\xff" and out["txt"] == "héllo" and out["cls"] == 3 and out["id"] == "007"
    assert out["none"] is None and out["nested"] == {"a": [1, 2.5]}


def test_codec_never_pickles_and_refuses_object_arrays() -> None:
    import numpy as np

    body = encode(Header("data", "j", 1, 2, 1), [encode_record({"x": np.zeros((2,), dtype=np.float32)})])
    assert b"pickle" not in body and decode_records(body)[0]["x"].dtype == torch.float32
    with pytest.raises(TypeError, match="pickle"):
        encode_record({"x": np.array([object()], dtype=object)})


def test_each_record_goes_to_one_consumer_and_iteration_ends_by_itself(url: str) -> None:
    with open_queue(url) as b:
        total = publish_units(b, "j", {0: 700, 1: 300, 2: 5})
    consumers = [consume(url) for _ in range(3)]
    workers = [Worker(lambda c=c: [r["id"] for r in c]) for c in consumers]
    for w in workers:
        w.start()
    with open_queue(url) as b:
        finish(b, "j", total)  # the end marker after the consumers started
    ids: List[int] = [i for w in workers for i in w.get(60)]
    assert len(ids) == total == len(set(ids)) == 1005
    assert sum(c.stats.delivered for c in consumers) == total
    assert all(c.stats.duplicates == 0 and c.stats.redelivered == 0 for c in consumers)


def test_copies_of_a_message_id_are_delivered_once(url: str) -> None:
    """A unit republished after a producer crash (its first attempt cut off after 2 messages)."""
    with open_queue(url) as b:
        pressure = Backpressure(b, 0)
        partial = UnitPublisher(b, "j", 0, pressure)
        partial.batch = 10
        partial.add(records(0, 20))  # seq 0 and 1, then the "crash"
        again = UnitPublisher(b, "j", 0, pressure)
        again.batch = 10
        again.add(records(0, 35))
        total = again.close() + publish_units(b, "j", {1: 10})
        finish(b, "j", total)
        finish(b, "j", total)  # a producer restarted after its end marker: one more copy
    a, c = consume(url), consume(url)
    wa, wc = Worker(lambda: [r["id"] for r in a]), Worker(lambda: [r["id"] for r in c])
    wa.start(), wc.start()
    ids = wa.get(60) + wc.get(60)
    assert sorted(ids) == sorted([i for i in range(35)] + [100_000 + i for i in range(10)])
    dropped = a.stats.duplicates + c.stats.duplicates
    # NATS drops the copies itself (Nats-Msg-Id); with the others the consumers drop the copies they
    # read: a batch of copies still unread when the job is seen complete is never read (one CI run
    # counted 10 of 20), so the count is 0, 10 or 20 and only the ids above are the guarantee.
    assert dropped == 0 if url.startswith("nats") else dropped in (10, 20)


def _consume_then_hang(url: str, path: str, ready: Any) -> None:
    it = iter(consume(url))
    with open(path, "w") as f:
        f.write(" ".join(str(next(it)["id"]) for _ in range(3)))
    ready.set()
    time.sleep(3600)  # holds its messages, acks nothing, until SIGKILL


def test_records_of_a_dead_consumer_reach_the_others(url: str, tmp_path: Any) -> None:
    with open_queue(url) as b:
        total = publish_units(b, "j", {0: 600})
        finish(b, "j", total)
    ctx = mp.get_context("fork")
    ready = ctx.Event()
    dead = ctx.Process(target=_consume_then_hang, args=(url, str(tmp_path / "first"), ready))
    dead.start()
    try:
        assert ready.wait(60), "the first consumer did not get its records"
    finally:
        os.kill(dead.pid, signal.SIGKILL)  # dies holding messages it yielded 3 records of
        dead.join(30)
    first = [int(i) for i in (tmp_path / "first").read_text().split()]
    survivor = consume(url)
    t = time.monotonic()
    ids = [r["id"] for r in survivor]
    assert time.monotonic() - t < 30
    assert sorted(ids) == list(range(600))  # no loss; the 3 in-flight records come again
    assert set(first) <= set(ids)
    assert survivor.stats.redelivered >= 3 and survivor.stats.duplicates == 0


def test_backpressure_bounds_the_backlog(url: str) -> None:
    logs: List[str] = []
    with open_queue(url) as b:
        pressure = Backpressure(b, 3, log=logs.append, log_s=0.0)
        pub = UnitPublisher(b, "j", 0, pressure)
        pub.batch = 10
        producer = Worker(lambda: (pub.add(records(0, 100)), pub.close())[1])
        producer.start()
        deadline = time.monotonic() + 30
        while not logs:  # the producer reached the limit and waits (polled, with a deadline)
            assert time.monotonic() < deadline and producer.is_alive()
            time.sleep(0.01)
        with open_queue(url) as b2:  # (a client per thread: brokers are not thread-safe)
            assert b2.backlog() <= 3
            finish_later = Worker(lambda: list(consume(url)))
            finish_later.start()
            assert producer.get(60) == 100
            finish(b2, "j", 100)
            assert len(finish_later.get(60)) == 100
        assert pressure.peak <= 3 and "--max_backlog 3" in logs[0]


@pytest.mark.parametrize("kind", sorted(BROKERS))
def test_an_unreachable_broker_is_refused_with_the_url_and_the_fix(kind: str) -> None:
    u = (
        BROKERS[kind]
        .format(name="s")
        .replace("127.0.0.1:", "user:s3cret@127.0.0.1:")
        .replace("guest:guest@", "")
    )
    u = u.replace(":6379", ":1").replace(":5672", ":1").replace(":4222", ":1") + "&timeout=1"
    with pytest.raises(QueueUnavailableError) as e:
        open_queue(u).ping()
    msg = str(e.value)
    assert "s3cret" not in msg and "***@127.0.0.1:1" in msg and "scripts/services.sh" in msg
    assert isinstance(e.value, ConnectionError)


def test_url_checks() -> None:
    assert parse("redis://h:1/0?stream=a&batch=5").opt("batch") == 5
    with pytest.raises(ValueError, match=r"\?stream=NAME"):
        parse("redis://h:1/0")
    with pytest.raises(ValueError, match="unknown option 'bogus'"):
        parse("nats://h:1?stream=a&bogus=1")
    with pytest.raises(ValueError, match="must be > 0"):
        parse("nats://h:1?stream=a&batch=0")
    with pytest.raises(ValueError, match="unknown scheme"):
        parse("kafka://h:9092?stream=a")


def test_backpressure_is_bounded_with_several_producers(url: str) -> None:
    """Two producer ranks publish at once: the backlog never passes --max_backlog (check and publish are
    one step on the broker), sampled all along by a third client."""
    stop, samples = threading.Event(), []
    held: set = set()  # producers refused a publish at least once

    def sample() -> None:
        with open_queue(url) as b:
            while not stop.is_set():
                samples.append(b.backlog())

    def produce(unit: int) -> Backpressure:
        with open_queue(url) as b:
            # the first refused publish logs at once: this producer is held at the limit
            pressure = Backpressure(b, 3, log=lambda msg: held.add(unit))
            pub = UnitPublisher(b, "j", unit, pressure)
            pub.batch = 5
            assert pub.add(records(unit, 100)) == [] and pub.close() == 100
            return pressure

    sampler = Worker(sample)
    sampler.start()
    producers = [Worker(lambda u=u: produce(u)) for u in (0, 1)]
    for p in producers:
        p.start()
    deadline = time.monotonic() + 60
    # both producers are held at the limit (polled; under load one producer may connect only after the
    # other filled the queue, and a consumer started then could keep it from ever being held)
    while len(held) < 2:
        assert time.monotonic() < deadline, f"producers held at --max_backlog: {sorted(held)} of [0, 1]"
        time.sleep(0.01)
    consumer = Worker(lambda: [r["id"] for r in consume(url)])
    consumer.start()
    pressures = [p.get(120) for p in producers]
    with open_queue(url) as b:
        finish(b, "j", 200)
    ids = consumer.get(120)
    stop.set()
    sampler.get(30)
    assert sorted(ids) == sorted([i for i in range(100)] + [100_000 + i for i in range(100)])
    assert (
        max(samples) <= 3 and all(p.peak <= 3 for p in pressures) and all(p.waited_s > 0 for p in pressures)
    )
