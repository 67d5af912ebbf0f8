"""NATS JetStream: ``nats://[user:pw@]host:4222?stream=NAME`` (``tls://`` for TLS).

- data: the JetStream stream ``NAME`` (subject ``tdpq.NAME``), file storage, **work-queue
  retention** (an acked message is removed, so the stream's size is the backlog) and a
  ``duplicate_window`` of one hour: every message carries ``Nats-Msg-Id: job/unit/seq``, so the
  **broker** drops a copy published within the window (a producer restarted mid-unit, a publish
  retried after a reconnect); the consumers' log drops any copy outside it;
- consumers of a group share the durable pull consumer ``GROUP`` (explicit acks, ``ack_wait =
  claim_after_s``: the broker redelivers what a consumer did not ack in time);
- the group log is the stream ``NAME_log_GROUP`` (limits retention), read with an ordered consumer.

The nats-py client is asyncio: each call runs on a private event loop of this object.
"""

import asyncio
import urllib.parse
from typing import Any, Dict, List, Optional, Sequence, Tuple

import nats
from nats import errors as nx
from nats.js import api
from nats.js import errors as jx

from torchx_datapipes.queue.base import Broker, Delivery
from torchx_datapipes.queue.url import QueueURL
from torchx_datapipes.secrets import resolve

DUPLICATE_WINDOW_S = 3600.0
WRONG_LAST_SEQUENCE = 10071  # JetStream's error code: another message was stored since the count


class NatsBroker(Broker):
    ERRORS = (
        nx.ConnectionClosedError, nx.NoServersError, nx.TimeoutError, nx.StaleConnectionError,
        nx.OutboundBufferLimitError, nx.NoRespondersError, jx.ServiceUnavailableError, asyncio.TimeoutError,
        jx.NoStreamResponseError,  # (JetStream not ready yet after a server restart: retried, not fatal)
        ConnectionError, OSError, TimeoutError,
    )  # fmt: skip
    START_HINT = "start NATS with JetStream (nats-server -js)"
    EXACT_LOG_READ = True  # (a block-0 read goes up to the log stream's last sequence at the call)

    def __init__(self, spec: QueueURL, log: Any = None) -> None:
        super().__init__(spec, log)
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._nc: Any = None
        self._js: Any = None
        self._subs: Dict[str, Any] = {}
        self._tails: Dict[str, Any] = {}
        self._log_next: Dict[str, int] = {}

    @property
    def subject(self) -> str:
        return f"tdpq.{self.spec.name}"

    def _run(self, coro: Any) -> Any:
        assert self._loop is not None
        return self._loop.run_until_complete(coro)

    def _connect(self) -> None:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        parts = urllib.parse.urlsplit(resolve(self.spec.url))
        server = f"{'tls' if parts.scheme == 'tls' else 'nats'}://{parts.netloc}"
        t = float(self.spec.opt("timeout"))

        async def connect() -> None:
            async def quiet(e: Exception) -> None:  # reconnects are reported by Broker._call
                pass

            try:  # (nats-py keeps retrying a refused first connect: bound it)
                self._nc = await asyncio.wait_for(
                    nats.connect(
                        server, connect_timeout=t, allow_reconnect=False, max_reconnect_attempts=0,
                        error_cb=quiet,
                    ),
                    t,
                )  # fmt: skip
            except asyncio.TimeoutError as e:
                where = f"{parts.hostname}:{parts.port}"
                raise ConnectionRefusedError(f"no NATS server answered at {where}") from e
            self._js = self._nc.jetstream(timeout=t)
            await self._ensure_stream(
                self.spec.name, [self.subject], api.RetentionPolicy.WORK_QUEUE, DUPLICATE_WINDOW_S
            )

        self._subs, self._tails = {}, {}
        self._run(connect())

    async def _ensure_stream(self, name: str, subjects: List[str], retention: Any, window: float) -> None:
        try:
            await self._js.stream_info(name)
        except jx.NotFoundError:
            cfg = api.StreamConfig(
                name=name, subjects=subjects, retention=retention, storage=api.StorageType.FILE,
                duplicate_window=window,
            )  # fmt: skip
            try:
                await self._js.add_stream(cfg)
            except jx.BadRequestError:  # created by another client meanwhile
                await self._js.stream_info(name)

    def _disconnect(self) -> None:
        nc, self._nc = self._nc, None
        tails, self._tails = list(self._tails.values()), {}
        self._subs = {}
        if nc is None or self._loop is None:
            return

        async def close() -> None:
            for sub in tails:  # (the ordered consumers' own tasks outlive nc.close otherwise)
                jsi = getattr(sub, "_jsi", None)
                for task in (getattr(jsi, "_hbtask", None), getattr(jsi, "_fctask", None)):
                    if task is not None:
                        task.cancel()
            await nc.close()

        try:
            self._run(asyncio.wait_for(close(), 2.0))
        except Exception:
            pass

    def close(self) -> None:
        super().close()
        loop, self._loop = self._loop, None
        if loop is not None and not loop.is_running():
            loop.close()

    def _forget(self) -> None:
        self._nc, self._loop = None, None

    def _publish(self, body: bytes, msg_id: str) -> None:
        t = float(self.spec.opt("timeout"))
        self._run(self._js.publish(self.subject, body, timeout=t, headers={"Nats-Msg-Id": msg_id}))

    def _backlog(self) -> int:
        return int(self._run(self._js.stream_info(self.spec.name)).state.messages)

    def _publish_bounded(self, body: bytes, msg_id: str, max_backlog: int) -> Tuple[bool, int]:
        t = float(self.spec.opt("timeout"))

        async def publish() -> Tuple[bool, int]:
            while True:  # compare-and-publish: stored only if no other producer published since the count
                state = (await self._js.stream_info(self.spec.name)).state
                if state.messages >= max_backlog:
                    return False, int(state.messages)
                headers = {"Nats-Msg-Id": msg_id, "Nats-Expected-Last-Sequence": str(state.last_seq)}
                try:
                    await self._js.publish(self.subject, body, timeout=t, headers=headers)
                    return True, int(state.messages)
                except jx.APIError as e:
                    if e.err_code != WRONG_LAST_SEQUENCE:
                        raise

        return self._run(publish())

    def _sub(self, group: str) -> Any:
        if group not in self._subs:
            cfg = api.ConsumerConfig(
                ack_policy=api.AckPolicy.EXPLICIT,
                ack_wait=float(self.spec.opt("claim_after_s")),
                max_deliver=-1,
            )
            self._subs[group] = self._run(
                self._js.pull_subscribe(self.subject, durable=group, stream=self.spec.name, config=cfg)
            )
        return self._subs[group]

    def _fetch(self, group: str, consumer: str, n: int, block_s: float) -> List[Delivery]:
        sub = self._sub(group)
        try:
            msgs = self._run(sub.fetch(n, timeout=block_s))
        except (nx.TimeoutError, asyncio.TimeoutError):
            if self._nc is None or not self._nc.is_connected:
                raise
            return []
        # the tag is the reply subject, not the Msg: an ack sent on whatever connection is open now (after a
        # reconnect the Msg's own client is closed) reaches JetStream, which acks by stream sequence
        return [Delivery(m.data, m.reply, m.metadata.num_delivered > 1) for m in msgs]

    def _touch(self, group: str, consumer: str, deliveries: List[Delivery]) -> None:
        async def touch() -> None:  # "+WPI" (work in progress) restarts the message's ack_wait
            for d in deliveries:
                await self._nc.publish(d.tag, b"+WPI")
            await self._nc.flush(timeout=float(self.spec.opt("timeout")))

        self._run(touch())

    def _ack(self, group: str, delivery: Delivery) -> None:
        # a request, so the ack is confirmed (JetStream answers an ack of a message already acked too)
        self._run(self._nc.request(delivery.tag, b"+ACK", timeout=float(self.spec.opt("timeout"))))

    def _log_stream(self, group: str) -> str:
        return f"{self.spec.name}_log_{group}"

    def _log_subject(self, group: str) -> str:
        return f"tdpq.{self.spec.name}.log.{group}"

    async def _ensure_log(self, group: str) -> None:
        await self._ensure_stream(
            self._log_stream(group), [self._log_subject(group)], api.RetentionPolicy.LIMITS, 0
        )

    def _log_append(self, group: str, data: bytes) -> None:
        async def append() -> None:
            if group not in self._tails:
                await self._ensure_log(group)
            await self._js.publish(self._log_subject(group), data, timeout=float(self.spec.opt("timeout")))

        self._run(append())

    def _log_read(self, group: str, block_s: float) -> List[bytes]:
        async def read() -> List[bytes]:
            sub = self._tails.get(group)
            if sub is None:
                await self._ensure_log(group)
                start = self._log_next.get(group, 1)
                cfg = api.ConsumerConfig(
                    deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start
                )
                sub = self._tails[group] = await self._js.subscribe(
                    self._log_subject(group), ordered_consumer=True, config=cfg
                )
            out: List[bytes] = []
            nxt = self._log_next.get(group, 1)
            # block_s 0: everything appended so far, up to the log stream's last sequence now
            last = 0 if block_s > 0 else (await self._js.stream_info(self._log_stream(group))).state.last_seq
            timeout = block_s if block_s > 0 else 5.0
            while block_s > 0 or nxt <= last:
                try:
                    m = await sub.next_msg(timeout=max(timeout, 0.001))
                except nx.TimeoutError:
                    break
                seq = m.metadata.sequence.stream
                if seq >= nxt:
                    out.append(m.data)
                    nxt = seq + 1
                if block_s > 0:
                    timeout = 0.0
            self._log_next[group] = nxt
            return out

        return self._run(read())

    def _log_trim(self, group: str) -> int:
        last = self._log_next.get(group, 1) - 1
        if last <= 1:
            return 0
        stream = self._log_stream(group)

        async def trim() -> int:
            before = (await self._js.stream_info(stream)).state.messages
            await self._js.purge_stream(stream, seq=last)  # (removes the sequences below ``last``)
            return int(before - (await self._js.stream_info(stream)).state.messages)

        return self._run(trim())

    def _delete(self, groups: Sequence[str]) -> None:
        async def delete() -> None:
            for name in [self.spec.name, *(self._log_stream(g) for g in groups)]:
                try:
                    await self._js.delete_stream(name)
                except jx.NotFoundError:
                    pass

        self._run(delete())
        # nothing re-created: the next call reconnects, and _connect adds the stream again
        self._disconnect()  # (cancels the log tails' tasks too)
        self._log_next = {}
        self._pid = None
