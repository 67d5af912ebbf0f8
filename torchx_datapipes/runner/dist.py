"""Process-group set-up that survives torchrun restarts and membership changes, with a timeout on
every collective.

**Which store the workers get.** Workers reach a TCPStore at ``MASTER_ADDR:MASTER_PORT``. By
default (torch 2.13) that is one the agents share: created once by the first round's rank-0 agent
and handed, unchanged, to the workers of every later round (``DynamicRendezvousHandler
.next_rendezvous`` keeps ``_bootstrap_store_info``). That default breaks elastic jobs: an agent that
joins in a later round as a non-zero node waits forever (60 s, then fails) for ``MASTER_ADDR`` under
the new round's rendezvous prefix, because the old rank 0 never publishes it again. The component
therefore sets ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` when ``-j`` allows more than one node: each
round's rank-0 agent publishes a fresh port, the workers see ``TORCHELASTIC_USE_AGENT_STORE=False``
and our rank 0 hosts the store (as ``env://`` does). A one-node job keeps the agent's store, which is
up before the ranks start (with a store in rank 0 the other ranks retry their connection until it
listens: up to ~0.4 s). Both modes are supported here.

**Why every rendezvous round needs its own key space.** With the shared store, keys written by one
round (our plan, gloo's rank addresses, the unit-claim counters) are still there when the next round
starts; with gloo a stale key space gives ``Gloo connectFullMesh failed`` or a hang, and for the
plan or a claim counter it is silently wrong.

**Why ``TORCHELASTIC_RESTART_COUNT`` cannot name the round.** The agent sets it to
``max_restarts - remaining_restarts`` (``torch/distributed/elastic/agent/server/api.py``): it is
per agent, it does not change on a membership change ("membership changes do not count as
retries"), and an agent that joins later starts at 0 while the others may be at 1. Two rounds can
then share a prefix, and ranks of one round can disagree on it. The agent exposes no round number to
its workers (``TORCHELASTIC_RUN_ID`` is per job, not per round).

**How the ranks of a round agree on a fresh one** (:func:`agree_round`, before gloo is set up):

1. every worker process draws a nonce (uuid4) no other process ever had;
2. rank 0 takes the round number ``n = store.add("/tdp/rounds", 1)`` (only one rank 0 is alive per
   round, and the workers of a round start only after every agent stopped the previous round's, so
   ``n`` is new);
3. each other rank ``r`` writes its nonce to ``/tdp/hello/{r}`` and waits for ``/tdp/ack/{nonce}``;
4. rank 0 keeps reading every ``/tdp/hello/{r}`` and answering ``/tdp/ack/{that nonce} = n`` until
   each rank ``r`` has confirmed with ``/tdp/round_{n}/joined/{r}``. A ``hello`` left by a process
   of an earlier round only earns an ack nobody waits for; the confirmation key contains ``n``, so
   it cannot be stale either.

A counter every rank bumps once (``(value - 1) // world_size``) would be simpler but wrong: a rank
killed before its ``add`` shifts every later round by one. The round then uses
``PrefixStore("/tdp/round_{n}")`` for gloo, :meth:`Dist.share` and the claim counters. Under
torchrun with one rank, rank 0 still takes ``n``. :attr:`Dist.first_round` is false after a restart
or, with the shared store, after a membership change; with per-round stores ``n`` restarts at 1, so
the engine also treats a lease this job already held as "not the first round" before it lets
``--overwrite`` clear the output.
"""

import ctypes
import datetime
import os
import signal
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Optional

from torchx_datapipes.errors import DatapipesError

INIT_TIMEOUT_S = 300.0


@dataclass
class Dist:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    restart: int = 0
    initialized: bool = False
    store: Optional[Any] = None  # the round's PrefixStore once initialized (world_size > 1)
    round: int = 0  # this rendezvous round's number (1, 2, ...) once agreed; 0 outside torchrun

    @classmethod
    def from_env(cls) -> "Dist":
        env = os.environ
        return cls(
            rank=int(env.get("RANK", "0")),
            world_size=int(env.get("WORLD_SIZE", "1")),
            local_rank=int(env.get("LOCAL_RANK", "0")),
            restart=int(env.get("TORCHELASTIC_RESTART_COUNT", "0")),
        )

    @property
    def prefix(self) -> str:
        """The key prefix of this round's store (what :attr:`store` is under): one key space per round."""
        return round_prefix(self.round)

    @property
    def first_round(self) -> bool:
        """True in the job's first rendezvous round (no restart, no membership change yet)."""
        return self.restart == 0 and self.round <= 1

    def init(self, timeout_s: float = INIT_TIMEOUT_S) -> None:
        if self.initialized:
            return
        env = os.environ
        if self.world_size <= 1 and not ("MASTER_ADDR" in env and "TORCHELASTIC_RUN_ID" in env):
            return
        import torch.distributed as dist

        timeout = datetime.timedelta(seconds=timeout_s)
        # The agent hosts the store (torch's default) unless TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1,
        # which the component sets: then rank 0 of each round hosts a new one, as with env://.
        host = self.rank == 0 and env.get("TORCHELASTIC_USE_AGENT_STORE", "True") != "True"
        base = _store(env["MASTER_ADDR"], int(env["MASTER_PORT"]), self.world_size, host, timeout)
        self.round = agree_round(base, self.rank, self.world_size, timeout_s)
        if self.world_size <= 1:
            return  # alone in this round: no process group, no shared store needed
        store = dist.PrefixStore(self.prefix, base)
        dist.init_process_group(
            "gloo", store=store, rank=self.rank, world_size=self.world_size, timeout=timeout
        )
        self.store = store
        self.initialized = True

    def share(self, key: str, make: Callable[[], bytes], timeout_s: float = INIT_TIMEOUT_S) -> bytes:
        """Rank 0 runs ``make`` and every rank gets its bytes (through the store).

        If ``make`` fails on rank 0 the other ranks fail at once with its message instead of
        waiting ``timeout_s`` for it.
        """
        if self.store is None:
            return make()
        if self.rank == 0:
            try:
                data = make()
            except BaseException as e:
                self.store.set(key, b"E" + f"{type(e).__name__}: {e}".encode())
                raise
            self.store.set(key, b"D" + data)
            return data
        try:
            self.store.wait([key], datetime.timedelta(seconds=timeout_s))
        except RuntimeError as e:  # torch's DistStoreError is a RuntimeError
            raise DatapipesError(
                f"rank {self.rank}: rank 0 did not share {key!r} within {timeout_s:g}s (it lists the inputs,"
                " takes the output lease and plans the units); see rank 0's log, or raise --timeout_s"
            ) from e
        got = bytes(self.store.get(key))
        if got[:1] == b"E":
            raise DatapipesError(f"rank 0 could not start the job: {got[1:].decode(errors='replace')}")
        return got[1:]

    def barrier(self, timeout_s: float) -> None:
        """Wait for every rank; name the missing ranks after ``timeout_s`` instead of hanging."""
        if not self.initialized:
            return
        import torch.distributed as dist

        dist.monitored_barrier(timeout=datetime.timedelta(seconds=timeout_s), wait_all_ranks=True)

    def close(self) -> None:
        if self.initialized:
            import torch.distributed as dist

            dist.destroy_process_group()
            self.initialized = False


POLL_S = 0.02


def round_prefix(n: int) -> str:
    return f"/tdp/round_{n}"


def agree_round(store: Any, rank: int, world_size: int, timeout_s: float) -> int:
    """The ranks of one rendezvous round agree on a round number no earlier round used (see above)."""
    deadline = time.monotonic() + timeout_s
    if rank != 0:
        nonce = f"{uuid.uuid4().hex}-{os.getpid()}"
        store.set(f"/tdp/hello/{rank}", nonce)
        ack = f"/tdp/ack/{nonce}"
        try:
            store.wait([ack], datetime.timedelta(seconds=timeout_s))
        except RuntimeError as e:  # torch's DistStoreError is a RuntimeError
            raise DatapipesError(
                f"rank {rank}: rank 0 of this rendezvous round did not answer within {timeout_s:g}s"
                f" (store {os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}); see rank 0's"
                " log, or raise --timeout_s"
            ) from e
        n = int(bytes(store.get(ack)))
        store.set(f"/tdp/round_{n}/joined/{rank}", b"1")
        return n
    n = int(store.add("/tdp/rounds", 1))
    acked: dict[int, bytes] = {}
    pending = set(range(1, world_size))
    while pending:
        for r in sorted(pending):
            if store.check([f"/tdp/round_{n}/joined/{r}"]):
                pending.discard(r)
                continue
            if store.check([f"/tdp/hello/{r}"]):
                theirs = bytes(store.get(f"/tdp/hello/{r}"))
                if acked.get(r) != theirs:
                    store.set(f"/tdp/ack/{theirs.decode()}", str(n))
                    acked[r] = theirs
        if not pending:
            break
        if time.monotonic() > deadline:
            raise DatapipesError(
                f"rank 0: ranks {sorted(pending)} of a world of {world_size} did not join rendezvous"
                f" round {n} within {timeout_s:g}s; see their logs, or raise --timeout_s"
            )
        time.sleep(POLL_S)
    return n


_AGENTS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def die_with_agent() -> None:
    """Under a torchrun agent, make the kernel SIGKILL this rank when the agent dies (Linux).

    The parent is checked again after ``prctl``: an agent that died just before would otherwise
    leave this rank orphaned and running to the end.
    """
    parent = os.getppid()
    if not any(a in _cmdline(parent) for a in _AGENTS):
        return  # not started by torchrun (in-process runs, tests)
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        print(f"the torchrun agent (pid {parent}) is gone; this rank exits", file=sys.stderr, flush=True)
        os._exit(1)


BIND_RETRY_S = 90.0  # longer than TCP's TIME_WAIT (60 s on Linux)


def _store(addr: str, port: int, world_size: int, host: bool, timeout: datetime.timedelta) -> Any:
    """The round's TCPStore; rank 0 hosting it retries a port still busy for up to ``BIND_RETRY_S``.

    With per-round stores the agent picks ``MASTER_PORT`` by binding port 0 and closing it; the port
    can still be held (seen once in a two-node Slurm test: EADDRINUSE), while the other ranks keep
    retrying their connection for ``timeout``. So rank 0 retries the bind, then fails as before.
    """
    import torch.distributed as dist

    deadline = time.monotonic() + BIND_RETRY_S
    while True:
        try:
            return dist.TCPStore(addr, port, world_size, is_master=host, timeout=timeout)
        except RuntimeError as e:  # DistNetworkError
            if not host or "EADDRINUSE" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)
