"""Process-group set-up that survives torchrun restarts, with a timeout on every collective.

With gloo on torch 2.13 a worker that dies after ``init_process_group`` leaves a stale
store behind and the restarted group fails in ``connectFullMesh``. Prefixing the store
with the restart attempt gives every attempt a clean key space.
"""

import datetime
import os
from dataclasses import dataclass

INIT_TIMEOUT_S = 300.0


@dataclass
class Dist:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    restart: int = 0
    initialized: bool = False

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
        self.initialized = True

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
