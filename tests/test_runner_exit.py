"""``python -m torchx_datapipes.runner`` exits without the interpreter's teardown once its work is
committed (``runner.__main__.exit_now``), yet does what a normal exit would: the user's atexit
handlers and non-daemon threads finish, and stderr is flushed. A failure exits the normal way."""

import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

from torchx_datapipes import artifact


def _run(tmp_path: Path, fn: Any) -> "subprocess.CompletedProcess[str]":
    (tmp_path / "in.jsonl").write_text('{"a": 1}\n{"a": 2}\n')
    ref = artifact.package(fn, str(tmp_path / "store"))
    cmd = [
        sys.executable,
        "-m",
        "torchx_datapipes.runner",
        "transform",
        "--input",
        str(tmp_path / "in.jsonl"),
    ]
    cmd += [
        "--output",
        str(tmp_path / "out"),
        "--artifact",
        ref.url,
        "--sha256",
        ref.sha256,
        "--progress_s",
        "0",
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_a_committed_run_exits_0_after_atexit_handlers_and_threads(tmp_path: Path) -> None:
    marks = str(tmp_path / "marks")

    def fn(rec: Dict[str, Any]) -> Dict[str, Any]:
        import atexit
        import threading
        import time

        def mark(what: str) -> None:
            with open(marks, "a") as f:
                f.write(what + "\n")

        if rec["a"] == 1:
            atexit.register(mark, "atexit")
            threading.Thread(target=lambda: (time.sleep(0.3), mark("thread"))).start()  # non-daemon
        return rec

    res = _run(tmp_path, fn)
    assert res.returncode == 0, res.stderr
    assert f"output: {tmp_path / 'out'}" in res.stderr  # the last lines reached the log
    assert (tmp_path / "out" / "_SUCCESS").exists()
    lines: List[str] = Path(marks).read_text().split()
    assert sorted(lines) == ["atexit", "thread"] and lines[0] == "thread"  # threads joined before atexit


def test_a_failed_run_exits_1_with_the_traceback(tmp_path: Path) -> None:
    def fn(rec: Dict[str, Any]) -> Dict[str, Any]:
        raise RuntimeError(f"bad record {rec['a']}")

    res = _run(tmp_path, fn)
    assert res.returncode == 1, res.stderr
    assert "RuntimeError: bad record 1" in res.stderr
    assert not (tmp_path / "out" / "_SUCCESS").exists()
