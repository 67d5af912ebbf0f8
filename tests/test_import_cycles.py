"""Issue 33: no import cycles, type-only imports included (``.importlinter-typing``)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_no_cycles_with_type_only_imports_counted() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [str(lint), str(ROOT / ".importlinter-typing")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 kept, 0 broken" in out.stdout, out.stdout
