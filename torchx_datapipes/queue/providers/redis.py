"""Redis Streams: ``redis://[:pw@]host:6379/0?stream=NAME`` (``rediss://`` for TLS).

- data: the stream ``NAME``; a consumer group per ``group`` (XREADGROUP), records of a consumer
  that died are taken over with XAUTOCLAIM after ``claim_after_s``;
- an acked message is deleted (XACK + XDEL in one MULTI), so XLEN is the backlog and the
  stream's memory stays bounded by ``--max_backlog``; a stream therefore feeds one group;
- the group log is the stream ``NAME:log:GROUP``.

Nothing is lost over a Redis restart only if Redis persists: ``appendonly yes`` with
``appendfsync always`` (``everysec`` can lose the last second of messages and acks).
"""

from typing import Any, List, Optional, Sequence, Tuple

import redis
from redis import exceptions as rx
from redis.backoff import NoBackoff
from redis.retry import Retry

from torchx_datapipes.queue.base import Broker, Delivery
from torchx_datapipes.queue.url import QueueURL
from torchx_datapipes.secrets import SECRET_OPTIONS, resolve, strip_options

_FIELD = b"m"
LOG_PAGE = 10_000
# check-then-publish in one step: several producer ranks never push the backlog past --max_backlog
_BOUNDED_XADD = """
local n = redis.call('XLEN', KEYS[1])
if n >= tonumber(ARGV[1]) then return {0, n} end
redis.call('XADD', KEYS[1], '*', 'm', ARGV[2], 'id', ARGV[3])
return {1, n}
"""


class RedisBroker(Broker):
    ERRORS = (rx.ConnectionError, rx.TimeoutError, ConnectionError, TimeoutError, OSError)
    EXACT_LOG_READ = True
    START_HINT = "start Redis (redis-server --port 6379)"

    def __init__(self, spec: QueueURL, log: Any = None) -> None:
        super().__init__(spec, log)
        self._r: Optional[redis.Redis] = None
        self._groups: set = set()
        self._log_pos: dict = {}

    def _connect(self) -> None:
        url = strip_options(resolve(self.spec.url), SECRET_OPTIONS)
        url = url.split("?", 1)[0]
        t = float(self.spec.opt("timeout"))
        block = float(self.spec.opt("block_s"))
        self._r = redis.Redis.from_url(
            url,
            socket_connect_timeout=t,
            socket_timeout=t + block + 1,
            retry_on_timeout=False,
            retry=Retry(NoBackoff(), 0),
        )
        self._r.ping()
        self._groups = set()

    def _disconnect(self) -> None:
        r, self._r = self._r, None
        if r is not None:
            try:
                r.close()
            except Exception:
                pass

    def _forget(self) -> None:
        self._r = None

    @property
    def r(self) -> redis.Redis:
        assert self._r is not None
        return self._r

    def _publish(self, body: bytes, msg_id: str) -> None:
        self.r.xadd(self.spec.name, {_FIELD: body, b"id": msg_id.encode()})

    def _backlog(self) -> int:
        return int(self.r.xlen(self.spec.name))

    def _publish_bounded(self, body: bytes, msg_id: str, max_backlog: int) -> Tuple[bool, int]:
        got: Any = self.r.eval(_BOUNDED_XADD, 1, self.spec.name, max_backlog, body, msg_id)
        return bool(got[0]), int(got[1])

    def _group(self, group: str) -> None:
        if group in self._groups:
            return
        try:
            self.r.xgroup_create(self.spec.name, group, id="0", mkstream=True)
        except rx.ResponseError as e:
            if "BUSYGROUP" not in str(e):
                raise
        self._groups.add(group)

    def _fetch(self, group: str, consumer: str, n: int, block_s: float) -> List[Delivery]:
        self._group(group)
        got: Any = self.r.xreadgroup(
            group, consumer, {self.spec.name: ">"}, count=n, block=max(1, int(block_s * 1000))
        )
        return [Delivery(f[_FIELD], mid, False) for _, entries in got or [] for mid, f in entries if f]

    def _claim_stale(self, group: str, consumer: str, n: int, idle_s: float) -> List[Delivery]:
        self._group(group)
        out: Any = self.r.xautoclaim(self.spec.name, group, consumer, int(idle_s * 1000), "0-0", count=n)
        return [Delivery(f[_FIELD], mid, True) for mid, f in out[1] if f]

    def _touch(self, group: str, consumer: str, deliveries: List[Delivery]) -> None:
        # XCLAIM to the same consumer resets the entries' idle time: XAUTOCLAIM leaves them alone
        self.r.xclaim(self.spec.name, group, consumer, 0, [d.tag for d in deliveries], justid=True)

    def _ack(self, group: str, delivery: Delivery) -> None:
        pipe = self.r.pipeline(transaction=True)
        pipe.xack(self.spec.name, group, delivery.tag)
        pipe.xdel(self.spec.name, delivery.tag)
        pipe.execute()

    def _log_key(self, group: str) -> str:
        return f"{self.spec.name}:log:{group}"

    def _log_append(self, group: str, data: bytes) -> None:
        self.r.xadd(self._log_key(group), {_FIELD: data})

    def _log_read(self, group: str, block_s: float) -> List[bytes]:
        key = self._log_key(group)
        pos = self._log_pos.get(group, "0-0")
        block = int(block_s * 1000) if block_s > 0 else None
        out: List[bytes] = []
        while True:  # (block 0: until the log is exhausted, so a read returns all appended before it)
            got: Any = self.r.xread({key: pos}, count=LOG_PAGE, block=block)
            n = 0
            for _, entries in got or []:
                for mid, f in entries:
                    out.append(f[_FIELD])
                    pos = mid
                    n += 1
            self._log_pos[group] = pos
            if n < LOG_PAGE or block is not None:
                return out

    def _log_trim(self, group: str) -> int:
        pos = self._log_pos.get(group)
        return int(self.r.xtrim(self._log_key(group), minid=pos, approximate=False)) if pos else 0

    def _delete(self, groups: Sequence[str]) -> None:
        keys = [self.spec.name, *self.r.scan_iter(match=f"{self.spec.name}:log:*")]
        self.r.delete(*keys)
