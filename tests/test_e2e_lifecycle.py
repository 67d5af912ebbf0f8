"""Job lifecycle through the real ``torchx run -s local_cwd``: the output lease, ranks die with the agent."""

import json
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
    import os
    import time

    def slow(rec):
        # the test holds the job at its next record while the gate file exists
        deadline = time.time() + 120
        while os.path.exists(os.environ["TDP_TEST_GATE"]) and time.time() < deadline:
            time.sleep(0.01)
        time.sleep(0.003)
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


def test_lease_refuses_a_second_job_then_a_killed_agent_takes_its_ranks_and_the_relaunch_resumes(
    tmp_path: Path,
) -> None:
    recs = make_dataset(tmp_path / "data", [600, 600])
    (tmp_path / "my_slow.py").write_text(SLOW)
    gate = tmp_path / "gate"
    gate.touch()

    def args(port: int) -> List[str]:
        return [
            "run", "-s", "local_cwd", "torchx_datapipes.components:transform", "--fn", "my_slow.py:slow",
            "--input", "data/*.jsonl", "--output", "out/agent", "-j", "1x2", "--unit_mb", "0.01",
            "--rdzv_port", str(port), "--env", f"TDP_TEST_GATE={gate}",
        ]  # fmt: skip

    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}"}
    client = subprocess.Popen(
        [TORCHX, *args(29641)], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    out = tmp_path / "out/agent"
    try:
        units = out / "_units"
        poll(lambda: (out / "_LEASE").exists(), 120, "the first job's lease")
        owner = json.loads((out / "_LEASE").read_text())["job_id"]
        # item 12: a second job on the same output is refused at once, naming the first
        second = run_torchx(args(29642), tmp_path)
        assert second.returncode != 0
        refused = second.stdout + second.stderr
        assert f"is being written by job {owner}" in refused and "a lease older than" in refused, refused
        assert not (out / "_SUCCESS").exists()
        gate.unlink()
        # item 11: killing the torchrun agent takes its ranks with it
        poll(lambda: len([u for u in units.glob("*.json") if not u.name.startswith(".")]) >= 2, 120,
             "two committed units")  # fmt: skip
        gate.touch()  # hold the job again: it cannot finish before the kill, however slow the machine
        agents = job_processes(tmp_path, is_agent)
        ranks = job_processes(tmp_path, is_rank)
        assert len(agents) == 1 and len(ranks) == 2, ([a.cmdline() for a in agents], len(ranks))
        os.kill(agents[0].pid, signal.SIGKILL)
        poll(lambda: not [r for r in ranks if r.is_running() and r.status() != psutil.STATUS_ZOMBIE], 30,
             "the ranks to die with their agent")  # fmt: skip
        assert not (out / "_SUCCESS").exists()
        client.communicate(timeout=120)
    finally:
        gate.unlink(missing_ok=True)
        if client.poll() is None:
            client.kill()
            client.communicate()
    assert client.returncode != 0
    # the relaunch takes over the dead job's lease at once (its rank 0 is gone) and resumes exactly
    res = run_torchx(args(29643), tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert canon(read_output(out)) == canon(recs)
    m = manifest(out)
    assert m["records_in"] == m["records_out"] == len(recs)
    assert not (out / "_LEASE").exists()
