"""Values, checksums and memory readings, used by the parent and by the spawned workers of part 2.
A value is a pure function of (seed, key), so the parent can hash what every worker must read; the
numpy kind exists so that workers can run without ever importing torch (torch is imported inside
the functions that need it, never at module level: a numpy worker imports this module).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


ARRAYS = ("torch", "numpy")


def make_value(array: str, seed: int, key: int, elems: int) -> Any:
    """The value of ``key`` as a torch tensor or, for workers that never import torch, a numpy array."""
    if array == "torch":
        return make_tensor(seed, key, elems)
    import numpy as np

    return np.random.default_rng(seed * 1_000_003 + key).random(elems, dtype=np.float32)


def make_tensor(seed: int, key: int, elems: int) -> torch.Tensor:
    """The value of ``key``: ``elems`` float32 in [0, 1) from a generator seeded by the key."""
    import torch

    g = torch.Generator().manual_seed(seed * 1_000_003 + key)
    return torch.rand(elems, generator=g)


def digest(t: Any) -> bytes:
    """blake2b over every byte of the tensor or array (reads the whole value)."""
    if hasattr(t, "numpy"):
        t = t.contiguous().numpy()
    import numpy as np

    return hashlib.blake2b(np.ascontiguousarray(t).data, digest_size=16).digest()


def smaps_rollup() -> dict[str, int]:
    """This process's ``/proc/self/smaps_rollup`` in kB (empty if the kernel lacks it)."""
    out: dict[str, int] = {}
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[2] == "kB":
                    out[parts[0].rstrip(":")] = int(parts[1])
    except OSError:
        pass
    return out


def mem_sample() -> dict[str, int]:
    """RSS, PSS and USS in kB (USS = Private_Clean + Private_Dirty)."""
    r = smaps_rollup()
    return {
        "rss": r.get("Rss", 0),
        "pss": r.get("Pss", 0),
        "uss": r.get("Private_Clean", 0) + r.get("Private_Dirty", 0),
    }


def vm_hwm_kb() -> int:
    """Peak RSS of this process so far, as the kernel tracks it."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0
