"""``python -m torchx_datapipes.runner``: one rank of a job (see :mod:`torchx_datapipes.runner.main`)."""

import atexit
import gc
import os
import sys
import threading

# Importing torch builds a million objects, and the cyclic collector walks them again and again while
# it does (~0.13 s of a rank's start here). Collect nothing while importing, then move what the
# imports built out of the collector's reach (gc.freeze: they live as long as the process anyway, and
# forked workers then share those pages instead of copying them when a collection touches them).
gc.disable()

from torchx_datapipes.errors import DatapipesError  # noqa: E402
from torchx_datapipes.runner.main import main, print_error  # noqa: E402

gc.freeze()
gc.enable()


def exit_now(code: int = 0) -> None:
    """Exit without the interpreter's module teardown, once the rank's work is committed.

    With torch loaded, freeing every module at exit costs ~0.3 s per rank, and the job (torchrun,
    then the torchx client) waits for the slowest rank to exit. What a normal exit would still do
    is done here first: other non-daemon threads are joined, the ``atexit`` handlers run (logging's
    flush, the user's own), and stdout/stderr are flushed. Only a successful run exits this way; an
    exception takes the normal path (torch elastic's error file, exit code 1; a traceback unless it
    is one of our own errors, which is printed once, readably).
    """
    for t in threading.enumerate():
        if t is not threading.current_thread() and not t.daemon:
            t.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: nothing more can be said
            pass
    os._exit(code)


if __name__ == "__main__":
    try:
        main()
    except (
        DatapipesError
    ) as e:  # a complete message (file, line, the user's traceback, the fix): print it once
        print_error(e)
        sys.exit(1)
    exit_now(0)
