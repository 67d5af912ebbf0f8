"""Connection resets with no process dying, against the real brokers: exactly once.

Every connection of the consumers (data, group log, heartbeat) goes through a TCP proxy that the
test resets mid-stream (an RST on both sides, as a broker-side reset or a NAT timeout does). The
broker then requeues what the consumers held (RabbitMQ at once, NATS after ``ack_wait``, Redis
keeps it pending), while the consumers still yield those records from memory: a redelivered
message whose claim belongs to a live consumer must wait for its done, never be delivered twice.
"""

import threading
import time
from typing import Any, Iterator, List, Tuple

import pytest
from queue_testutil import BROKERS, Worker, cleanup, finish, fresh_url, publish_units
from tcp_proxy import TcpProxy

from torchx_datapipes.queue import GroupConsumer, open_queue

PORTS = {"redis": 6379, "rabbitmq": 5672, "nats": 4222}


@pytest.fixture(params=sorted(BROKERS))
def proxied(request: pytest.FixtureRequest) -> Iterator[Tuple[str, str, TcpProxy]]:
    """(direct URL, URL through the proxy, the proxy)."""
    kind = request.param
    direct = fresh_url(kind, block_s=0.05, claim_after_s=10, batch=10, timeout=2)
    proxy = TcpProxy(PORTS[kind])
    proxy.start()
    via = direct.replace(f":{PORTS[kind]}", f":{proxy.port}")
    yield direct, via, proxy
    proxy.stop()
    cleanup(direct)


def _slow_consumer(url: str, seen: List[int], lock: threading.Lock) -> Tuple[GroupConsumer, Worker]:
    c = GroupConsumer(open_queue(url), "train")

    def run() -> None:
        for r in c:
            with lock:
                seen.append(r["id"])
            time.sleep(0.02)  # a trainer step: the reset lands while records are in flight

    w = Worker(run)
    w.start()
    return c, w


def _wait(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"{what}: not within {timeout}s"
        time.sleep(0.01)


def test_a_connection_reset_mid_stream_loses_nothing_and_duplicates_nothing(
    proxied: Tuple[str, str, TcpProxy],
) -> None:
    direct, via, proxy = proxied
    with open_queue(direct) as b:
        total = publish_units(b, "j", {0: 200, 1: 100})  # 30 messages of 10 records
        finish(b, "j", total)
    seen: List[int] = []
    lock = threading.Lock()
    consumers, workers = zip(*[_slow_consumer(via, seen, lock) for _ in range(2)])
    _wait(lambda: len(seen) >= 60, 60, "60 records consumed")
    before = proxy.accepted
    assert proxy.reset() > 0  # every connection of both consumers (data, logs, heartbeats)
    _wait(lambda: len(seen) >= 120, 60, "records after the first reset")
    _wait(lambda: proxy.accepted > before, 60, "the consumers reconnected")
    assert proxy.reset() > 0  # and once more, with claims re-made since
    for w in workers:
        w.get(120)  # both consumers end by themselves (and raised nothing)
    assert sorted(seen) == sorted([i for i in range(200)] + [100_000 + i for i in range(100)])
    assert len(seen) == len(set(seen)) == total
    assert sum(c.stats.delivered for c in consumers) == total
    print({k: [c.stats.to_dict()[k] for c in consumers] for k in ("delivered", "redelivered", "duplicates")})
