"""Live preprocessing through a message queue: a transform job feeds a training job while it runs.

``torchx run ... datapipes.transform --output redis://127.0.0.1:6379/0?stream=train --state DIR``
publishes the records; ``torchx_datapipes.data.QueueDataset(url, group="train")`` consumes them
in a training job. One API over pluggable brokers chosen by URL (``queue/registry.py``):
Redis Streams, RabbitMQ, NATS JetStream. See docs/queue.md for the guarantees per backend.

Non-goals: this is not a general message bus (one producer job feeds one consumer group per
stream), and there is no Kafka backend (no Kafka server to test against here; docs/queue.md
says what one would need).
"""

from torchx_datapipes.queue.base import Broker, Delivery, QueueUnavailableError
from torchx_datapipes.queue.codec import Header, MessageFormatError
from torchx_datapipes.queue.consumer import ConsumerStats, GroupConsumer
from torchx_datapipes.queue.producer import Backpressure, UnitPublisher, publish_end
from torchx_datapipes.queue.registry import is_queue_url, open_queue, parse, register_queue, schemes
from torchx_datapipes.queue.url import QueueURL

__all__ = [
    "Backpressure", "Broker", "ConsumerStats", "Delivery", "GroupConsumer", "Header", "MessageFormatError",
    "QueueURL", "QueueUnavailableError", "UnitPublisher", "is_queue_url", "open_queue", "parse",
    "publish_end", "register_queue", "schemes",
]  # fmt: skip
