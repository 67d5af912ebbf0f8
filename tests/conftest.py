"""Shared pytest fixtures. Plugins live in small modules beside this file."""

import atexit
import os
import shutil
import signal
import tempfile
from typing import Iterator

import pytest

pytest_plugins = ["s3_fixture", "cache_servers", "xdist_order"]

# Shared caches (redis://, memcached://) sign pickles with a per-user key made on first use under
# $XDG_CONFIG_HOME (torchx_datapipes/cache/shipping.py): the suite's own directory, never the real
# ~/.config, and the jobs the tests launch inherit it.
_CONFIG = tempfile.mkdtemp(prefix="tdp-test-config-")
os.environ["XDG_CONFIG_HOME"] = _CONFIG
atexit.register(shutil.rmtree, _CONFIG, True)


@pytest.fixture(autouse=True)
def _own_stop_signal_handlers() -> Iterator[None]:
    """Each test gets the SIGTERM/SIGINT handlers it started with back, whatever it ran in process.

    (TorchX's local scheduler installs handlers that raise an ``Exception`` and never removes them; a
    later test's forked ``multiprocessing.Pool`` worker then swallows ``Pool.terminate()``'s SIGTERM
    and the pool's exit hangs: seen once, in ``test_sqlite_concurrent_writers``.)
    """
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in saved.items():
        if handler is not None and signal.getsignal(sig) is not handler:
            signal.signal(sig, handler)
