"""Two test hosts in network namespaces (own hostname and /etc/hosts, joined by a bridge), each
running the torchrun command of the component's AppDef for ``-j 2x1`` with the c10d rendezvous on
host 1, and one host's rank SIGKILLed mid-run with ``--max_restarts 1``: the output is exact.

Variant A shares a local directory; variant B shares nothing but an S3 API (moto bound to the
bridge address): inputs, output and the artifact store are ``s3://``. Needs root (``ip netns``).
"""

import os
import signal
import socket
import uuid
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List

import fsspec
import orjson
import pytest
from netns import (
    GATE_ENV,
    RANK0_ENV,
    Agent,
    HostNet,
    can_make_namespaces,
    gated_fn_source,
    leftovers,
    torchrun_command,
    wait_for,
)
from s3_fixture import S3Server, serve_s3
from tdp_testutil import canon, records

from torchx_datapipes import components

pytestmark = [pytest.mark.multihost, pytest.mark.e2e]

_WHY_NOT = can_make_namespaces()
if _WHY_NOT is not None:
    pytestmark.append(pytest.mark.skip(reason=f"multi-host tests need network namespaces: {_WHY_NOT}"))

# Each rank process passes its first unit's records, then waits at a gate the test opens once it has
# killed a rank: the job is still running when the kill comes, however slow the machine.
PER_FILE = 20
SLOW = gated_fn_source(PER_FILE, sleep_s=0.01)
N_FILES = 12  # one unit per file


@pytest.fixture
def net(tmp_path: Path) -> Iterator[HostNet]:
    hn = HostNet(tmp_path / "net")
    try:
        yield hn.open()
    finally:
        hn.close()
        left = leftovers(f"tdp{hn.token}") + leftovers(hn.bridge)
        assert not left, f"namespaces or links left behind: {left}"


@pytest.fixture
def agents() -> Iterator[List[Agent]]:
    started: List[Agent] = []
    yield started
    for a in started:
        a.kill()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _dataset(write: Callable[[str, bytes], None]) -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []
    for k in range(N_FILES):
        recs = records(PER_FILE, start=len(out))
        write(f"part-{k}.jsonl", b"".join(orjson.dumps(r) + b"\n" for r in recs))
        out.extend(recs)
    return out


def _run_two_hosts(
    net: HostNet, agents: List[Agent], logs: Path, fn: str, inp: str, out: str, store: str,
    env: Dict[str, str], committed: Callable[[], int], victim_host: int,
) -> None:  # fmt: skip
    app = components.transform(
        fn=fn, input=inp, output=out, j="2x1", max_restarts=1, rdzv_port=_free_port(), artifact_store=store
    )
    cmd, role_env = torchrun_command(app, f"mh-{uuid.uuid4().hex[:8]}", runner_args=["--timeout_s", "60"])
    # as on a cluster: every node is told where rank 0 (the rendezvous) is
    gate = logs / "gate"
    host_env = {**role_env, **env, RANK0_ENV: net.hosts[0].name, "LOGLEVEL": "INFO", GATE_ENV: str(gate)}
    for host in net.hosts:
        cwd = logs / f"cwd-{host.name}"  # each host its own empty working directory
        cwd.mkdir()
        argv = net.argv(host, cmd)
        agents.append(Agent(host.name, argv, logs / f"{host.name}.log", env=host_env, cwd=cwd).start())
    victim = agents[victim_host]
    wait_for("a committed unit", lambda: committed() >= 1, 90)
    wait_for(f"a rank on {victim.name}", lambda: bool(victim.ranks()), 30)
    (pid,) = victim.ranks()
    assert all(a.proc is not None and a.proc.poll() is None for a in agents), "the job is held at the gate"
    os.kill(pid, signal.SIGKILL)
    gate.touch()
    for a in agents:
        assert a.wait(120) == 0, f"{a.name} failed:\n{a.output()}"
    both = "".join(a.output() for a in agents)
    assert "restart_count=1" in both, f"the killed rank was never restarted:\n{both}"
    for a in agents:  # one job across both hosts, whose worker store lives on one of them
        assert "group_world_size=2" in a.output() and "master_addr=h" in a.output(), a.output()


@pytest.mark.parametrize("worker_store", ["per_round", "agent_shared"])
def test_two_hosts_shared_directory_kill_a_rank(
    net: HostNet, agents: List[Agent], tmp_path: Path, worker_store: str
) -> None:
    """``agent_shared``: torch's default store, kept across rounds, where the two agents' restart
    counts differ after the kill (1 and 0): the round handshake must still give one key space."""
    env = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"} if worker_store == "agent_shared" else {}
    shared = tmp_path / "shared"
    (shared / "data").mkdir(parents=True)
    (shared / "slow_fn.py").write_text(SLOW)
    recs = _dataset(lambda name, data: (shared / "data" / name).write_bytes(data) and None)
    out = shared / "out"

    def committed() -> int:
        units = out / "_units"  # not the .tmp-* names a unit's record is written under first
        return len([p for p in units.glob("*.json") if not p.name.startswith(".")]) if units.exists() else 0

    _run_two_hosts(
        net, agents, tmp_path, f"{shared / 'slow_fn.py'}:gated", str(shared / "data/*.jsonl"), str(out),
        str(shared / "store"), env, committed, victim_host=1,
    )  # fmt: skip
    got = [orjson.loads(ln) for p in sorted(out.glob("part-*.jsonl")) for ln in p.read_bytes().splitlines()]
    assert len(got) == len(recs) and canon(got) == canon(recs)
    assert orjson.loads((out / "_SUCCESS").read_bytes())["world_size"] == 2


@pytest.fixture
def bridge_s3(net: HostNet) -> Iterator[S3Server]:
    with serve_s3(host=net.gateway, bucket=f"tdp-mh-{net.token}") as server:
        yield server


def test_two_hosts_no_shared_filesystem_s3_kill_a_rank(
    net: HostNet, agents: List[Agent], tmp_path: Path, bridge_s3: S3Server
) -> None:
    s3 = bridge_s3
    fs = fsspec.filesystem("s3", skip_instance_cache=True)

    def put(name: str, data: bytes) -> None:
        with fs.open(s3.url("data", name), "wb") as fh:
            fh.write(data)

    recs = _dataset(put)
    (tmp_path / "slow_fn.py").write_text(SLOW)  # the client's file: packaged into the s3 artifact store
    out = s3.url("out")

    def committed() -> int:
        fs.invalidate_cache()
        return len(fs.glob(f"{out}/_units/*.json"))

    _run_two_hosts(
        net, agents, tmp_path, f"{tmp_path / 'slow_fn.py'}:gated", s3.url("data/*.jsonl"), out,
        s3.url("store"), dict(s3.env), committed, victim_host=0,
    )  # fmt: skip
    fs.invalidate_cache()
    got = []
    for p in sorted(fs.glob(f"{out}/part-*.jsonl")):
        got.extend(orjson.loads(line) for line in fs.cat(p).splitlines() if line)
    assert len(got) == len(recs) and canon(got) == canon(recs)
    assert orjson.loads(fs.cat(f"{out}/_SUCCESS"))["world_size"] == 2
    assert not list(tmp_path.rglob("part-*")), "a part was written to the local disk"
