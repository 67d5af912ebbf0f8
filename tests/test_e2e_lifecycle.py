"""Job lifecycle through the real ``torchx run -s local_cwd``: ranks die with their torchrun agent."""

import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Callable, List, Optional

import psutil
import pytest
from tdp_testutil import TORCHX, VENV_BIN, canon, make_dataset, manifest, read_output, run_torchx

pytestmark = pytest.mark.e2e

SLOW = textwrap.dedent(
    """
    import time

    def slow(rec):
        time.sleep(0.01)
        return rec
    """
)


def job_processes(cwd: Path, what: Callable[[List[str]], bool]) -> List[psutil.Process]:
    """This test's processes (local_cwd runs them in the test's directory) that ``what`` selects."""
    found = []
    for p in psutil.process_iter(["cmdline", "cwd"]):
        cmd = p.info["cmdline"] or []
        if p.info["cwd"] == str(cwd) and any("out/agent" in c for c in cmd) and what(cmd):
            found.append(p)
    return found


def is_agent(cmd: List[str]) -> bool:
    return len(cmd) > 1 and os.path.basename(cmd[1]) == "torchrun"


def is_rank(cmd: List[str]) -> bool:
    return "torchx_datapipes.runner" in cmd and not is_agent(cmd)


def poll(fn: Callable[[], Optional[object]], deadline_s: float, what: str) -> object:
    deadline = time.time() + deadline_s
    while time.time() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out after {deadline_s}s waiting for {what}")


def test_killing_the_agent_kills_its_ranks_and_the_relaunch_resumes_exactly(tmp_path: Path) -> None:
    recs = make_dataset(tmp_path / "data", [300, 300])
    (tmp_path / "my_slow.py").write_text(SLOW)
    args = [
        "run", "-s", "local_cwd", "torchx_datapipes.components:transform", "--fn", "my_slow.py:slow",
        "--input", "data/*.jsonl", "--output", "out/agent", "-j", "1x2", "--unit_mb", "0.005",
        "--rdzv_port", "29641",
    ]  # fmt: skip
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}"}
    client = subprocess.Popen(
        [TORCHX, *args], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    out = tmp_path / "out/agent"
    try:
        units = out / "_units"
        poll(lambda: units.exists() and len(list(units.glob("*.json"))) >= 2, 120, "two committed units")
        agents = job_processes(tmp_path, is_agent)
        ranks = job_processes(tmp_path, is_rank)
        assert len(agents) == 1 and len(ranks) == 2, ([a.cmdline() for a in agents], len(ranks))
        os.kill(agents[0].pid, signal.SIGKILL)
        poll(lambda: not [r for r in ranks if r.is_running() and r.status() != psutil.STATUS_ZOMBIE], 30,
             "the ranks to die with their agent")  # fmt: skip
        assert not (out / "_SUCCESS").exists()
        client.communicate(timeout=120)
    finally:
        if client.poll() is None:
            client.kill()
            client.communicate()
    assert client.returncode != 0
    # the relaunch takes over the dead job's lease at once (its rank 0 is gone) and resumes
    res = run_torchx(args, tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert canon(read_output(out)) == canon(recs)
    m = manifest(out)
    assert m["records_in"] == m["records_out"] == len(recs)
    assert not (out / "_LEASE").exists()
