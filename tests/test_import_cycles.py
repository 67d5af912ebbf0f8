"""Issue 33: no import cycles, type-only imports included, in ``.importlinter`` (run by ``make lint``
too): ``formats/`` (``reading`` <-> ``base``/``registry``, before ``formats/readstate.py``) and
``data/`` (``dataset`` <-> ``node``) among them."""

import configparser
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_no_cycles_with_type_only_imports_counted() -> None:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / ".importlinter")
    assert cfg["importlinter"]["exclude_type_checking_imports"] == "False"
    ancestors = cfg["importlinter:contract:acyclic"]["ancestors"].split()
    assert {"torchx_datapipes.formats", "torchx_datapipes.data"} <= set(ancestors)
    lint = Path(sys.executable).with_name("lint-imports")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [str(lint), str(ROOT / ".importlinter")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout, out.stdout
