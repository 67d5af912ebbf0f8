"""Helpers for the queue tests: the three brokers of this machine, fresh stream names, threads."""

import threading
import uuid
from typing import Any, Callable, Dict, List

import torch

from torchx_datapipes.queue import Backpressure, Broker, UnitPublisher, open_queue, publish_end

BROKERS: Dict[str, str] = {
    "redis": "redis://127.0.0.1:6379/0?stream={name}",
    "rabbitmq": "amqp://guest:guest@127.0.0.1:5672/%2F?queue={name}",
    "nats": "nats://127.0.0.1:4222?stream={name}",
}


def fresh_url(kind: str, **options: Any) -> str:
    url = BROKERS[kind].format(name=f"tdpt_{uuid.uuid4().hex[:12]}")
    return url + "".join(f"&{k}={v}" for k, v in options.items())


def records(unit: int, n: int) -> List[Dict[str, Any]]:
    return [{"id": unit * 100_000 + i, "x": torch.full((2, 3), i, dtype=torch.int16)} for i in range(n)]


def publish_units(broker: Broker, job: str, units: Dict[int, int], max_backlog: int = 0) -> int:
    """Publish ``units`` (unit -> record count) and return the total."""
    pressure = Backpressure(broker, max_backlog)
    total = 0
    for unit, n in units.items():
        pub = UnitPublisher(broker, job, unit, pressure)
        assert pub.add(records(unit, n)) == []
        total += pub.close()
    return total


def finish(broker: Broker, job: str, total: int) -> None:
    publish_end(broker, job, total)


class Worker(threading.Thread):
    """Runs ``fn`` in a thread and keeps its result or exception."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.fn, self.result, self.error = fn, None, None

    def run(self) -> None:
        try:
            self.result = self.fn()
        except BaseException as e:  # noqa: BLE001 (re-raised by get)
            self.error = e

    def get(self, timeout: float) -> Any:
        self.join(timeout)
        assert not self.is_alive(), f"worker still running after {timeout}s"
        if self.error is not None:
            raise self.error
        return self.result


def cleanup(url: str, groups: tuple = ("train",)) -> None:
    with open_queue(url) as b:
        b.delete(groups)
