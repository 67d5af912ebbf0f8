"""What an op gets from the engine: a ``PassContext``, not the whole ``Engine``.

Ops run their passes, wait for every rank and read a pass's commit records through it, and
``finalize`` (rank 0, after every unit committed) reads the plan and the job's settings from it.
"""

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple

from torchx_datapipes.formats.planning import Unit
from torchx_datapipes.formats.reading import UnitReader
from torchx_datapipes.runner.badrecords import ErrorSink


class UnitFn(Protocol):
    def __call__(self, unit: Unit, reader: UnitReader, sink: ErrorSink) -> Dict[str, Any]: ...


class RunPass(Protocol):
    """``run_pass(name, fn)`` over the units, or ``run_pass(name, fn, tasks)`` over other tasks."""

    def __call__(self, pass_name: str, fn: UnitFn, tasks: Optional[Sequence[Unit]] = None) -> None: ...


@dataclass(frozen=True)
class PassContext:
    output: str
    rank: int
    world_size: int
    num_workers: int
    artifact: Optional[str]
    sha256: Optional[str]
    units: List[Unit]  # the plan, in unit order (the same on every rank)
    inputs: List[Tuple[str, int]]  # (url, size) of every input file as planned
    options: Dict[str, Any]  # the options that change the output (fingerprint, manifest)
    run_pass: RunPass  # run fn on every unit (or task) this rank's slots claim
    barrier: Callable[[], None]  # wait for every rank (with the job's timeout)
    load_metas: Callable[[str], List[Dict[str, Any]]]  # every unit's commit record of a pass
