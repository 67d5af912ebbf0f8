"""Elastic membership for real: two torchrun agents started separately (``-j 1:2x1``, one c10d
rendezvous on localhost), one joining a running job and one leaving it. Each agent runs the
torchrun command of the component's own AppDef. The output must be exact either way.
"""

import json
import textwrap
import uuid
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import pytest
from netns import Agent, torchrun_command, wait_for
from tdp_testutil import canon, make_dataset, read_output

from torchx_datapipes import components

pytestmark = pytest.mark.e2e

SLOW = textwrap.dedent(
    """
    import time

    def slow(rec):
        time.sleep(0.02)
        return rec
    """
)
N_FILES = 16  # one unit each; ~0.4 s of work per unit


@pytest.fixture
def job(tmp_path: Path) -> Dict[str, Any]:
    (tmp_path / "slow_fn.py").write_text(SLOW)
    recs = make_dataset(tmp_path / "data", [20] * N_FILES)
    return {"root": tmp_path, "records": recs}


@pytest.fixture
def agents() -> Iterator[List[Agent]]:
    started: List[Agent] = []
    yield started
    for a in started:
        a.kill()


def _command(root: Path, port: int, runner_args: List[str]) -> Tuple[str, Dict[str, str]]:
    app = components.transform(
        fn=f"{root / 'slow_fn.py'}:slow", input=str(root / "data/*.jsonl"), output=str(root / "out"),
        j="1:2x1", max_restarts=1, rdzv_port=port, artifact_store=str(root / "store"),
    )  # fmt: skip
    return torchrun_command(app, f"elastic-{uuid.uuid4().hex[:8]}", runner_args=runner_args)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _committed(out: Path) -> int:
    units = out / "_units"
    return len(list(units.glob("*.json"))) if units.exists() else 0


def _start(agents: List[Agent], root: Path, name: str, command: Tuple[str, Dict[str, str]]) -> Agent:
    cmd, env = command
    env = {**env, "LOGLEVEL": "INFO"}  # INFO: torchrun logs its rendezvous rounds
    a = Agent(name, ["bash", "-c", cmd], root / f"{name}.log", env=env).start()
    agents.append(a)
    return a


def test_a_second_agent_joins_a_running_job(job: Dict[str, Any], agents: List[Agent]) -> None:
    root: Path = job["root"]
    cmd = _command(root, _free_port(), ["--progress_s", "0"])
    first = _start(agents, root, "agent1", cmd)
    wait_for("agent 1 to commit a unit alone", lambda: _committed(root / "out") >= 1, 60)
    assert first.proc is not None and first.proc.poll() is None, first.output()
    second = _start(agents, root, "agent2", cmd)
    assert second.wait(90) == 0, second.output()
    assert first.wait(30) == 0, first.output()
    log = first.output()
    assert "Detected 1 new nodes" in log and "group_world_size=2" in log, f"no re-rendezvous:\n{log}"
    assert "restart_count=1" not in log, "a membership change must not cost a restart"
    got = read_output(root / "out")
    assert len(got) == len(job["records"]) and canon(got) == canon(job["records"])
    assert (root / "out/_SUCCESS").exists()


def test_an_agent_leaves_and_the_other_finishes(job: Dict[str, Any], agents: List[Agent]) -> None:
    root: Path = job["root"]
    # The collective timeout bounds how long the remaining rank waits for the one that left.
    cmd = _command(root, _free_port(), ["--progress_s", "0", "--timeout_s", "8"])
    first = _start(agents, root, "agent1", cmd)  # binds the rendezvous port: hosts the c10d store
    wait_for("agent 1 to start its rendezvous", lambda: "rendezvous" in first.output().lower() or
             _committed(root / "out") > 0, 30)  # fmt: skip
    second = _start(agents, root, "agent2", cmd)
    wait_for("agent 2 to run a rank", lambda: bool(second.ranks()), 60)
    start = _committed(root / "out")
    wait_for("a unit committed with both agents", lambda: _committed(root / "out") > start, 60)
    second.kill()
    assert first.wait(90) == 0, first.output()
    assert "group_world_size=2" in first.output()
    assert json.loads((root / "out/_SUCCESS").read_text())["world_size"] == 1  # finished alone
    got = read_output(root / "out")
    assert len(got) == len(job["records"]) and canon(got) == canon(job["records"])
    assert (root / "out/_SUCCESS").exists()
