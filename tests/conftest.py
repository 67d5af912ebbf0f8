"""Shared pytest fixtures. Plugins live in small modules beside this file."""

import atexit
import os
import shutil
import tempfile

pytest_plugins = ["s3_fixture", "cache_servers", "xdist_order"]

# Shared caches (redis://, memcached://) sign pickles with a per-user key made on first use under
# $XDG_CONFIG_HOME (torchx_datapipes/cache/shipping.py): the suite's own directory, never the real
# ~/.config, and the jobs the tests launch inherit it.
_CONFIG = tempfile.mkdtemp(prefix="tdp-test-config-")
os.environ["XDG_CONFIG_HOME"] = _CONFIG
atexit.register(shutil.rmtree, _CONFIG, True)
