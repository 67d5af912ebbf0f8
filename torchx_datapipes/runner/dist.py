"""Process-group set-up that survives torchrun restarts, with a timeout on every collective.

With gloo on torch 2.13 a worker that dies after ``init_process_group`` leaves a stale
store behind and the restarted group fails in ``connectFullMesh``. Prefixing the store
with the restart attempt gives every attempt a clean key space.
"""

import ctypes
import datetime
import os
import signal
import sys
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
    store: Optional[Any] = None  # the attempt's PrefixStore once initialized (world_size > 1)

    @classmethod
    def from_env(cls) -> "Dist":
        env = os.environ
        return cls(
            rank=int(env.get("RANK", "0")),
            world_size=int(env.get("WORLD_SIZE", "1")),
            local_rank=int(env.get("LOCAL_RANK", "0")),
            restart=int(env.get("TORCHELASTIC_RESTART_COUNT", "0")),
        )

    def init(self, timeout_s: float = INIT_TIMEOUT_S) -> None:
        if self.world_size <= 1 or self.initialized:
            return
        import torch.distributed as dist

        timeout = datetime.timedelta(seconds=timeout_s)
        base = dist.TCPStore(
            os.environ["MASTER_ADDR"],
            int(os.environ["MASTER_PORT"]),
            self.world_size,
            is_master=False,
            timeout=timeout,
        )
        store = dist.PrefixStore(f"/tdp/attempt_{self.restart}", base)
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
