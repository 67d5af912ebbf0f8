"""Choose a broker by URL: ``open_queue("redis://127.0.0.1:6379/0?stream=train")``.

Layered like the cache registry (``cache/registry.py``) and fsspec's: a table of import
strings (``import torchx_datapipes`` never imports redis, pika or nats), :func:`register_queue`
for code, and the entry-point group ``torchx_datapipes.queue`` for third-party packages::

    [project.entry-points."torchx_datapipes.queue"]
    kafka = "my_pkg.kafka:KafkaBroker"     # a Broker subclass

A missing client library raises ``ImportError`` with the ``pip install`` line of its extra. The
layers themselves are the shared :class:`torchx_datapipes.plugins.Registry`.
"""

from typing import Dict, Tuple, Type, Union

from torchx_datapipes.plugins import Registry
from torchx_datapipes.queue.base import Broker
from torchx_datapipes.queue.url import QueueURL
from torchx_datapipes.secrets import mask_url

ENTRY_POINT_GROUP = "torchx_datapipes.queue"
_P = "torchx_datapipes.queue.providers."
_KNOWN: Dict[str, str] = {
    "redis": _P + "redis:RedisBroker",
    "rediss": _P + "redis:RedisBroker",
    "amqp": _P + "rabbitmq:RabbitBroker",
    "amqps": _P + "rabbitmq:RabbitBroker",
    "nats": _P + "nats:NatsBroker",
    "tls": _P + "nats:NatsBroker",
}
EXTRAS: Dict[str, Tuple[str, str]] = {  # module -> (extra, what)
    _P + "redis": ("redis", "redis"),
    _P + "rabbitmq": ("rabbitmq", "pika"),
    _P + "nats": ("nats", "nats-py"),
}
BROKERS: Registry[Type[Broker]] = Registry("queue scheme", ENTRY_POINT_GROUP, _KNOWN, EXTRAS)


def register_queue(scheme: str, cls: Union[str, Type[Broker]], clobber: bool = False) -> None:
    """Make ``scheme://`` URLs open ``cls`` (a Broker subclass or ``"module:Class"``)."""
    BROKERS.register(scheme, cls, clobber)


def schemes() -> Tuple[str, ...]:
    return BROKERS.names()


def is_queue_url(url: str) -> bool:
    """Whether ``url`` names a queue (by its scheme), not a directory."""
    scheme, sep, _ = url.partition("://")
    return bool(sep) and scheme.lower() in schemes()


def broker_class(scheme: str) -> Type[Broker]:
    """The Broker class of a scheme (imports its module, and so its client library, now: a missing one
    raises ``MissingExtraError``, an ImportError naming the extra to install)."""
    return BROKERS.load(scheme)


def parse(url: str) -> QueueURL:
    """Check a queue URL (syntax, scheme, options) without importing its client or connecting."""
    spec = QueueURL.parse(url)
    if spec.scheme not in schemes():
        raise ValueError(
            f"queue URL {mask_url(url)!r}: unknown scheme {spec.scheme!r}; known: {', '.join(schemes())}"
        )
    return spec


def open_queue(url: str) -> Broker:
    """A broker client for ``url`` (connects lazily, on first use, in the calling process)."""
    spec = parse(url)
    return broker_class(spec.scheme)(spec)
