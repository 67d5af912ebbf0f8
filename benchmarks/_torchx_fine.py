"""The ``torchx`` CLI with a 20 ms status poll, for timing jobs (``_common.torchx_cmd``).

``torchx run`` waits for the app by asking its status once a second (``Runner.wait(...,
wait_interval=1)`` in ``torchx/cli/cmd_run.py``), so its wall time is the job's rounded up to the
next poll: two runs of the same job differ by 0 or ~1 s, which swamps what the benchmarks compare
(a job's cost over a trivial DDP job, a few tenths of a second). Every torchx job of the
benchmarks, ours and the references alike, runs through this driver. Nothing else is changed.

usage: python benchmarks/_torchx_fine.py run -s local_cwd ...   (the arguments of ``torchx``)
"""

from __future__ import annotations

import sys
from typing import Any

from torchx.runner import api

POLL_S = 0.02
_wait = api.Runner.wait


def _fine_wait(self: api.Runner, app_handle: str, wait_interval: float = 10) -> Any:
    return _wait(self, app_handle, wait_interval=min(wait_interval, POLL_S))


if __name__ == "__main__":
    api.Runner.wait = _fine_wait  # type: ignore[method-assign]
    from torchx.cli.main import main

    sys.exit(main())
