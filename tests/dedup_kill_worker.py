"""One rank of a dedup job that SIGKILLs itself in its first label-propagation task, once per job.

``torchrun ... tests/dedup_kill_worker.py dedup --input ... --output ...`` with ``TDP_DEDUP_KILL_MARK``
naming a file that does not exist yet: the first rank to reach pass ``cc1`` creates it (atomically,
so only one rank dies) and kills itself with SIGKILL, after the map, pairs and verify passes and
their spill files committed. torchrun (``--max_restarts 1``) then restarts the ranks, which resume.
"""

import os
import signal
import sys
from typing import Any

from torchx_datapipes.runner.dedup_graph import Graph

_original = Graph.propagate_task


def _die_once(self: Graph, *args: Any) -> Any:
    try:
        fd = os.open(os.environ["TDP_DEDUP_KILL_MARK"], os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return _original(self, *args)
    os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)
    return None  # not reached


Graph.propagate_task = _die_once  # type: ignore[method-assign, assignment]

if __name__ == "__main__":
    from torchx_datapipes.runner.main import main

    main(sys.argv[1:])
