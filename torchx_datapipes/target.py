"""Where the AppDef being built will run: the scheduler, and whether this is a dry run.

A TorchX component is a plain function and is not told the scheduler. But ``torchx run`` (and
``Runner.run_component``/``dryrun_component`` in Python) always call it from
``torchx.runner.api.Runner.dryrun_component(component, args, scheduler, ...)``; a real run goes
through ``run_component`` first. :func:`current` reads those two frames, so the component can
(1) put the client's interpreter directory on ``PATH`` only where the job can see it (this
machine, or a shared-filesystem cluster: :func:`torchx_datapipes.cluster.job_bindir`),
(2) refuse relative local paths where the job cannot see this machine's working directory, and
(3) package the function without uploading it on ``--dryrun``.

When the AppDef is built outside the TorchX runner (``components.transform(...)`` called
directly) the target is unknown and the component behaves as for ``local_cwd``;
``torchx_datapipes.api.run`` then fixes the ``PATH`` prefix for the scheduler it submits to
(:func:`torchx_datapipes.appdef.for_scheduler`). :func:`targeting` sets the target explicitly.
"""

import contextlib
import contextvars
import os
import sys
from dataclasses import dataclass
from types import FrameType
from typing import Iterator, Optional

# The job's processes run on the client machine, from the client's working directory, with the
# client's environment: the client's venv is the job's interpreter.
CLIENT_PROCESS_SCHEDULERS = frozenset({"local_cwd"})
# The job sees the client's filesystem at the same absolute paths (HPC clusters share /home and
# scratch; Slurm starts jobs in the submit directory): relative paths are made absolute.
SHARED_FS_SCHEDULERS = CLIENT_PROCESS_SCHEDULERS | {"slurm", "lsf"}

_TORCHX_RUNNER_API = os.path.join("torchx", "runner", "api.py")


@dataclass(frozen=True)
class Target:
    """The scheduler an AppDef is built for (``None``: unknown) and whether it is a dry run."""

    scheduler: Optional[str] = None
    dryrun: bool = False

    @property
    def uses_client_python(self) -> bool:
        """Whether the job's processes can run the client's interpreter (unknown counts as yes)."""
        return self.scheduler is None or self.scheduler in CLIENT_PROCESS_SCHEDULERS

    @property
    def shares_client_fs(self) -> bool:
        """Whether local paths on the client mean the same files in the job (unknown counts as yes)."""
        return self.scheduler is None or self.scheduler in SHARED_FS_SCHEDULERS


_explicit: contextvars.ContextVar[Optional[Target]] = contextvars.ContextVar("tdp_target", default=None)


@contextlib.contextmanager
def targeting(scheduler: Optional[str], dryrun: bool = False) -> Iterator[Target]:
    """Build AppDefs inside this block for ``scheduler`` (overrides what the call stack says)."""
    target = Target(scheduler, dryrun)
    token = _explicit.set(target)
    try:
        yield target
    finally:
        _explicit.reset(token)


def current() -> Target:
    """The target of the component being called: explicit, else from TorchX's runner frames."""
    explicit = _explicit.get()
    if explicit is not None:
        return explicit
    return from_stack(sys._getframe(1))


def from_stack(frame: Optional[FrameType]) -> Target:
    """``scheduler`` from ``Runner.dryrun_component``'s frame; a real run has ``run_component`` above."""
    scheduler: Optional[str] = None
    running = False
    while frame is not None:
        code = frame.f_code
        if code.co_filename.endswith(_TORCHX_RUNNER_API):
            if code.co_name == "dryrun_component" and scheduler is None:
                value = frame.f_locals.get("scheduler")
                scheduler = value if isinstance(value, str) else None
            elif code.co_name == "run_component":
                running = True
        frame = frame.f_back
    if scheduler is None:
        return Target()
    return Target(scheduler, dryrun=not running)
