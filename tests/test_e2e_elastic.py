"""Elastic membership for real: two torchrun agents started separately (``-j 1:2x1``, one c10d
rendezvous on localhost), one joining a running job and one leaving it. Each agent runs the
torchrun command of the component's own AppDef. The output must be exact either way.

Nothing here assumes a job is still running because enough time passed: each rank process
transforms one unit's records, then blocks until the test opens a gate (a file), which it does only
once it observed the membership change it is about to assert on.
"""

import json
import uuid
from pathlib import Path
from typing import Any, Dict, Iterator, List, Tuple

import pytest
from netns import GATE_ENV, Agent, gated_fn_source, torchrun_command, wait_for
from tdp_testutil import canon, make_dataset, read_output

from torchx_datapipes import components

pytestmark = pytest.mark.e2e

UNIT_RECORDS = 20
N_FILES = 16  # one unit each


@pytest.fixture
def job(tmp_path: Path) -> Dict[str, Any]:
    (tmp_path / "gated_fn.py").write_text(gated_fn_source(UNIT_RECORDS))
    recs = make_dataset(tmp_path / "data", [UNIT_RECORDS] * N_FILES)
    return {"root": tmp_path, "records": recs}


@pytest.fixture
def agents() -> Iterator[List[Agent]]:
    started: List[Agent] = []
    yield started
    for a in started:
        a.kill()


def _command(root: Path, port: int, runner_args: List[str]) -> Tuple[str, Dict[str, str]]:
    app = components.transform(
        fn=f"{root / 'gated_fn.py'}:gated", input=str(root / "data/*.jsonl"), output=str(root / "out"),
        j="1:2x1", max_restarts=1, rdzv_port=port, artifact_store=str(root / "store"),
    )  # fmt: skip
    return torchrun_command(app, f"elastic-{uuid.uuid4().hex[:8]}", runner_args=runner_args)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _unit_metas(out: Path) -> List[Path]:
    """The committed units' records (not the ``.tmp-*`` names they are written under first)."""
    units = out / "_units"
    return [p for p in units.glob("*.json") if not p.name.startswith(".")] if units.exists() else []


def _committed(out: Path) -> int:
    return len(_unit_metas(out))


def _committed_by(out: Path, rank: int) -> int:
    """Units committed by ``rank`` (rank 1 exists only in a two-node round)."""
    return sum(1 for p in _unit_metas(out) if json.loads(p.read_text()).get("rank") == rank)


def _open_gate(root: Path) -> None:
    (root / "gate").touch()


def _start(agents: List[Agent], root: Path, name: str, command: Tuple[str, Dict[str, str]]) -> Agent:
    cmd, env = command
    env = {**env, "LOGLEVEL": "INFO", GATE_ENV: str(root / "gate")}  # INFO: torchrun logs its rounds
    a = Agent(name, ["bash", "-c", cmd], root / f"{name}.log", env=env).start()
    agents.append(a)
    return a


def test_a_second_agent_joins_a_running_job(job: Dict[str, Any], agents: List[Agent]) -> None:
    root: Path = job["root"]
    cmd = _command(root, _free_port(), ["--progress_s", "0"])
    first = _start(agents, root, "agent1", cmd)
    wait_for("agent 1 to commit a unit alone", lambda: _committed(root / "out") >= 1, 90)
    assert _committed(root / "out") == 1, "agent 1's rank commits one unit, then waits at the gate"
    assert first.proc is not None and first.proc.poll() is None, first.output()  # gated: still running
    second = _start(agents, root, "agent2", cmd)
    # The join, observed: agent 1 saw the new node and agent 2 runs a rank of the new round.
    wait_for("agent 1 to detect agent 2", lambda: "Detected 1 new nodes" in first.output(), 90)
    wait_for("agent 2 to run a rank", lambda: bool(second.ranks()) or second.proc.poll() is not None, 90)
    assert second.proc is not None and second.proc.poll() is None, second.output()
    _open_gate(root)
    assert second.wait(120) == 0, second.output()
    assert first.wait(60) == 0, first.output()
    log = first.output()
    assert "group_world_size=2" in log, f"no re-rendezvous:\n{log}"
    assert "restart_count=1" not in log, "a membership change must not cost a restart"
    got = read_output(root / "out")
    assert len(got) == len(job["records"]) and canon(got) == canon(job["records"])
    assert json.loads((root / "out/_SUCCESS").read_text())["world_size"] == 2


def test_an_agent_leaves_and_the_other_finishes(job: Dict[str, Any], agents: List[Agent]) -> None:
    root: Path = job["root"]
    # The collective timeout bounds how long the remaining rank waits for the one that left.
    cmd = _command(root, _free_port(), ["--progress_s", "0", "--timeout_s", "8"])
    first = _start(agents, root, "agent1", cmd)  # binds the rendezvous port: hosts the c10d store
    wait_for("agent 1 to run a rank", lambda: bool(first.ranks()) or first.proc.poll() is not None, 60)
    second = _start(agents, root, "agent2", cmd)
    wait_for("agent 2 to run a rank", lambda: bool(second.ranks()) or second.proc.poll() is not None, 90)
    assert second.proc is not None and second.proc.poll() is None, second.output()
    # Both ranks of the two-node round commit their first unit, then wait at the (closed) gate.
    wait_for("a unit committed with both agents", lambda: _committed_by(root / "out", 1) >= 1, 90)
    assert first.proc is not None and first.proc.poll() is None, first.output()
    second.kill()
    _open_gate(root)
    assert first.wait(120) == 0, first.output()
    assert "group_world_size=2" in first.output()
    assert json.loads((root / "out/_SUCCESS").read_text())["world_size"] == 1  # finished alone
    got = read_output(root / "out")
    assert len(got) == len(job["records"]) and canon(got) == canon(job["records"])
    assert (root / "out/_SUCCESS").exists()
