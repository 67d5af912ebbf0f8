"""A queue URL parsed once, at the boundary, into a frozen :class:`QueueURL`.

``redis://host:6379/0?stream=NAME``, ``amqp://user:pw@host:5672/vhost?queue=NAME``,
``nats://host:4222?stream=NAME``. The name option is ``stream`` or ``queue`` (either works
with every broker). Options common to every broker:

==================  =========  =====================================================================
option              default    meaning
==================  =========  =====================================================================
``batch``           8192       records per message (the producer sends fewer when a message is full)
``message_bytes``   524288     bytes per message before it is sent (a larger record goes alone)
``linger_s``        0.5        longest a partial message waits for more records before it is sent
``claim_after_s``   30         records a consumer held this long without acking go to another one
``prefetch``        2          messages a consumer takes at once
``block_s``         0.2        how long a fetch waits for a message
``reconnect_s``     120        how long a client keeps reconnecting to a broker that went away
``timeout``         3          connect/socket timeout in seconds
==================  =========  =====================================================================

Passwords never go on a command line: ``?password_env=NAME`` or, from the client,
an inline ``user:pw@`` turned into ``?password_file=`` (``torchx_datapipes/secrets.py``).
"""

import re
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Callable, Dict

from torchx_datapipes.secrets import SECRET_OPTIONS, mask_url

OPTION_TYPES: Dict[str, Callable[[str], Any]] = {
    "stream": str,
    "queue": str,
    "batch": int,
    "message_bytes": int,
    "linger_s": float,
    "claim_after_s": float,
    "prefetch": int,
    "block_s": float,
    "reconnect_s": float,
    "timeout": float,
    **{name: str for name in SECRET_OPTIONS},
}
DEFAULTS: Dict[str, Any] = {
    "batch": 8192,
    "message_bytes": 512 * 1024,
    "linger_s": 0.5,
    "claim_after_s": 30.0,
    "prefetch": 2,
    "block_s": 0.2,
    "reconnect_s": 120.0,
    "timeout": 3.0,
}
_NAME = re.compile(r"[A-Za-z0-9_\-]{1,200}")


@dataclass(frozen=True)
class QueueURL:
    """``scheme://[user:pw@]host:port/path?stream=NAME&option=value``."""

    url: str  # as given (may hold a password: never print it unmasked)
    scheme: str
    netloc: str
    path: str
    name: str
    options: Dict[str, Any] = field(default_factory=dict)

    @property
    def masked(self) -> str:
        return mask_url(self.url)

    def opt(self, name: str) -> Any:
        return self.options.get(name, DEFAULTS.get(name))

    @classmethod
    def parse(cls, url: str) -> "QueueURL":
        parts = urllib.parse.urlsplit(url)
        shown = mask_url(url)
        options: Dict[str, Any] = {}
        for key, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
            if key not in OPTION_TYPES:
                raise ValueError(
                    f"queue URL {shown!r}: unknown option {key!r}; valid: {', '.join(OPTION_TYPES)}"
                )
            try:
                options[key] = OPTION_TYPES[key](value)
            except ValueError as e:
                raise ValueError(f"queue URL {shown!r}: option {key}={value!r} is not valid: {e}") from e
            if key in DEFAULTS and options[key] <= 0:
                raise ValueError(f"queue URL {shown!r}: option {key}={value!r} must be > 0")
        name = options.pop("stream", None) or options.pop("queue", None)
        if not name:
            raise ValueError(
                f"queue URL {shown!r} names no stream: add ?stream=NAME (redis, nats) or ?queue=NAME (amqp),"
                " e.g. redis://127.0.0.1:6379/0?stream=train"
            )
        if not _NAME.fullmatch(name):
            raise ValueError(
                f"queue URL {shown!r}: stream name {name!r} must be 1-200 letters, digits, '_' or '-'"
            )
        return cls(url, parts.scheme.lower(), parts.netloc, parts.path, name, options)
