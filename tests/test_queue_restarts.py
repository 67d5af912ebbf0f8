"""Broker restarts with no process dying, against private persisting NATS and RabbitMQ servers: exactly
once. (Redis restarts are covered end to end in tests/test_e2e_queue.py, with a private Redis.)

The consumers hold records in memory while the broker goes down; they keep yielding them, reconnect
(for up to ``reconnect_s``), mark them done and ack on the new connection (NATS: by reply subject;
RabbitMQ: the broker returned them, and the copies wait for the owner's done); what the broker
redelivers after the restart is dropped or parked, never delivered twice.
"""

import threading
import time
from typing import Iterator, List, Tuple

import pytest
from queue_servers import PrivateBroker
from queue_testutil import Worker, finish, fresh_url, publish_units

from torchx_datapipes.queue import GroupConsumer, QueueUnavailableError, open_queue

PORTS = {"rabbitmq": 5672, "nats": 4222}


@pytest.fixture(scope="module", params=sorted(PORTS))
def broker(request: pytest.FixtureRequest) -> Iterator[PrivateBroker]:
    server = PrivateBroker(request.param).start()
    yield server
    server.cleanup()


def _url(server: PrivateBroker, **options: object) -> str:
    return fresh_url(server.kind, **options).replace(f":{PORTS[server.kind]}", f":{server.port}")


def _consumers(url: str, n: int, step_s: float) -> Tuple[List[GroupConsumer], List[Worker], List[int]]:
    seen: List[int] = []
    lock = threading.Lock()
    consumers, workers = [], []
    for _ in range(n):
        c = GroupConsumer(open_queue(url), "train")

        def run(c: GroupConsumer = c) -> None:
            for r in c:
                with lock:
                    seen.append(r["id"])
                time.sleep(step_s)

        w = Worker(run)
        w.start()
        consumers.append(c)
        workers.append(w)
    return consumers, workers, seen


def _wait(cond: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"{what}: not within {timeout}s"
        time.sleep(0.01)


def test_a_broker_restart_mid_stream_is_exactly_once(broker: PrivateBroker) -> None:
    url = _url(broker, block_s=0.05, claim_after_s=10, batch=10, timeout=2, reconnect_s=90)
    with open_queue(url) as b:
        total = publish_units(b, "j", {0: 200, 1: 100})
        finish(b, "j", total)
    consumers, workers, seen = _consumers(url, 2, 0.02)
    _wait(lambda: len(seen) >= 60, 60, "60 records consumed")
    broker.restart()  # the consumers hold records in memory across it
    for w in workers:
        w.get(180)
    expected = sorted([i for i in range(200)] + [100_000 + i for i in range(100)])
    assert sorted(seen) == expected and len(seen) == len(set(seen)) == total
    assert sum(c.broker.reconnects for c in consumers) >= 2
    with open_queue(url) as b:
        assert b.backlog() == 0  # every message acked, the returned copies too
        b.delete(("train",))


def test_a_broker_that_answers_but_refuses_is_not_called_down(broker: PrivateBroker) -> None:
    """An error that outlasts reconnect_s while the broker answers names the real cause, not "start it"."""
    url = _url(broker, timeout=1, reconnect_s=1)
    b = open_queue(url)
    b.ping()

    def refuse() -> None:
        raise ConnectionError("the broker refused the request (simulated)")

    with pytest.raises(QueueUnavailableError) as e:
        b._call("ack", refuse)
    msg = str(e.value)
    assert "answers" in msg and "simulated" in msg and "Fix: start" not in msg
    b.close()
