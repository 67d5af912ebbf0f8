"""Which slot runs which unit: dynamic claiming (the default) or today's strided assignment.

``--assign dynamic``: every slot (rank x worker) claims the next unit of a shared claim order
with one atomic ``add(key, 1)`` on a per-pass counter, so fast slots take more units and slow
ones fewer. The order is the plan sorted largest first (longest-processing-time rule, by
``Unit.nbytes``, ties by index), the same on every rank. Two counter backends share one
interface:

- ``StoreCounters``: the job's own rendezvous store (torchrun's TCPStore, under the rendezvous
  round's prefix, ``Dist.prefix`` in ``runner/dist.py``). A forked worker never uses its parent's
  socket: the first call in a new process opens a fresh ``TCPStore`` client with the same prefix.
- ``LocalCounters``: ``multiprocessing.Value`` counters created before the workers fork (one
  rank, no store).

A new torchrun attempt or rendezvous round has a fresh prefix, so its counters start at 0; units
committed by an earlier attempt are skipped by the engine, and a unit claimed by a rank that died is claimed
again. ``--assign static`` keeps ``units[slot::slots]`` exactly. The assignment never changes
the output (parts are per unit), so it is not part of the job fingerprint: a static run can be
resumed dynamically and the other way round.
"""

import datetime
import multiprocessing as mp
import os
from typing import Any, Dict, Iterator, List, Optional, Protocol, Sequence

from torchx_datapipes.formats.planning import Unit, assign

ASSIGN_MODES = ("dynamic", "static")
COUNTER_NAMES = ("records", "units", "bytes")  # job-wide progress counters, per pass


def claim_order(units: Sequence[Unit]) -> List[Unit]:
    """Largest first (by bytes covered), ties by unit index: deterministic on every rank."""
    return sorted(units, key=lambda u: (-u.nbytes, u.index))


class Counters(Protocol):
    """Named job-wide integer counters: ``add`` returns the new value (``add(name, 0)`` reads)."""

    def add(self, name: str, n: int) -> int: ...


class StoreCounters:
    """Counters in the job's store (``Dist.store``); reconnects after a fork (never shares a socket)."""

    def __init__(self, store: Any, prefix: str, timeout_s: float, namespace: str = "claim") -> None:
        self.prefix, self.timeout_s, self.namespace = prefix, timeout_s, namespace
        self._store: Any = store
        self._pid: Optional[int] = os.getpid()

    def store(self) -> Any:
        if self._pid is None:  # made for a worker to be forked: it adopts the client (premade)
            self._pid = os.getpid()
        elif self._pid != os.getpid():  # a forked worker: open its own client
            self._store, self._pid = open_store(self.prefix, self.timeout_s), os.getpid()
        return self._store

    def premade(self, n: int) -> List["StoreCounters"]:
        """Counters on ``n`` new clients, connected now, each for one worker process about to be forked.

        A forked worker must not build a store client itself: its parent may host the job's store
        (rank 0 does, see ``Dist.init``), and a fork copies no threads but the forking one, so a
        lock held by the server's threads at that instant stays held in the child forever (seen:
        a worker hung in ``TCPStore(...)``, the job with it). The parent never uses these clients.
        """
        out = []
        for _ in range(n):
            c = StoreCounters(
                open_store(self.prefix, self.timeout_s), self.prefix, self.timeout_s, self.namespace
            )
            c._pid = None
            out.append(c)
        return out

    def add(self, name: str, n: int) -> int:
        return int(self.store().add(f"{self.namespace}/{name}", n))

    def fresh(self) -> "StoreCounters":
        """Counters on a client of their own (for a thread that must not share the engine's socket)."""
        return StoreCounters(
            open_store(self.prefix, self.timeout_s), self.prefix, self.timeout_s, self.namespace
        )


def open_store(prefix: str, timeout_s: float) -> Any:
    """A new client of torchrun's store (``MASTER_ADDR``/``MASTER_PORT``) under ``prefix``."""
    import torch.distributed as dist

    try:
        addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    except KeyError as e:
        raise RuntimeError(
            f"dynamic claiming needs the job's store, but {e.args[0]} is not set (not under torchrun?);"
            " rerun with --assign static"
        ) from e
    timeout = datetime.timedelta(seconds=timeout_s)
    base = dist.TCPStore(addr, port, None, is_master=False, timeout=timeout, wait_for_workers=False)
    return dist.PrefixStore(prefix, base)


class LocalCounters:
    """Counters shared by the forked workers of one process (create before the fork)."""

    def __init__(self, names: Sequence[str]) -> None:
        ctx = mp.get_context("fork")
        self._values: Dict[str, Any] = {n: ctx.Value("q", 0, lock=True) for n in names}

    def add(self, name: str, n: int) -> int:
        v = self._values[name]
        with v.get_lock():
            v.value += n
            return int(v.value)


def counter_names(pass_name: str) -> List[str]:
    return [f"{pass_name}/next"] + [f"{pass_name}/{c}" for c in COUNTER_NAMES]


class Claimer:
    """Yields the units one slot runs in a pass: claimed from shared counters, or strided."""

    def __init__(
        self,
        units: Sequence[Unit],
        pass_name: str,
        mode: str,
        counters: Optional[Counters],
        slot: int,
        slots: int,
    ) -> None:
        if mode not in ASSIGN_MODES:
            raise ValueError(f"--assign must be one of {', '.join(ASSIGN_MODES)}; got {mode!r}")
        if mode == "dynamic" and counters is None:
            raise ValueError("dynamic claiming needs shared counters (the job's store or a local backend)")
        self.pass_name, self.mode, self.counters = pass_name, mode, counters
        self.slot, self.slots = slot, slots
        self.order = claim_order(units) if mode == "dynamic" else assign(units, slot, slots)

    def __iter__(self) -> Iterator[Unit]:
        if self.mode == "static":
            yield from self.order
            return
        assert self.counters is not None
        while True:
            pos = self.counters.add(f"{self.pass_name}/next", 1) - 1
            if pos >= len(self.order):
                return
            yield self.order[pos]

    def report(self, records: int, units: int, nbytes: int) -> None:
        """Add this slot's progress to the job-wide counters (read by rank 0's progress thread)."""
        if self.counters is None:
            return
        for name, n in (("records", records), ("units", units), ("bytes", nbytes)):
            if n:
                self.counters.add(f"{self.pass_name}/{name}", n)
