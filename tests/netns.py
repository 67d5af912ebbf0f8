"""Test helpers for jobs with more than one torchrun agent: the component's own torchrun command,
agents started and killed as process groups, and test hosts made of network namespaces.

``torchrun_command`` takes the command a scheduler would run from the AppDef (macros filled in the
way ``local_cwd`` fills them). ``Agent`` runs one such command (one "node") in its own session so
the test can kill the whole agent, or only its rank, and always cleans up. ``HostNet`` builds a
bridge and N network namespaces joined to it by veth pairs (``10.213.X.0/24``, unique names per
test run), each namespace a host with its own hostname and ``/etc/hosts`` (``unshare --uts
--mount`` + a bind-mounted hosts file), which torchrun's c10d rendezvous needs to decide which
agent hosts the store (see DESIGN.md "Multi-host on one machine").
"""

import os
import random
import shlex
import signal
import subprocess
import textwrap
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from torchx.specs import AppDef, macros

RANK0_ENV = "TORCHX_RANK0_HOST"
# Elastic rounds fast enough for a test: torchrun waits last_call_timeout (30 s) for more nodes once
# the minimum is there, and notices a dead node after keep_alive_interval * keep_alive_max_attempt.
# 10 s, not 3: on a busy machine a live agent's heartbeat came more than 3 s late, a joining agent took
# it for dead and formed a round of its own (two rank 0s, one job: test_an_agent_leaves_...).
FAST_RDZV = "last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=10,join_timeout=60"


GATE_ENV = "TDP_TEST_GATE"


def gated_fn_source(open_records: int, sleep_s: float = 0.0) -> str:
    """A module with a transform ``gated`` that passes the first ``open_records`` records of its
    process, then waits until the file named by ``$TDP_TEST_GATE`` exists.

    A restarted rank is a new process, with a fresh count. A test that must observe a job while it
    is still running (a join, a kill) holds it at the gate and opens the gate once it has observed
    what it waited for, instead of assuming that the job has not finished yet. The deadline only
    bounds a failing test.
    """
    return textwrap.dedent(
        f"""
        import os
        import time

        _seen = 0

        def gated(rec):
            global _seen
            _seen += 1
            time.sleep({sleep_s!r})
            if _seen > {open_records}:
                gate, deadline = os.environ["{GATE_ENV}"], time.monotonic() + 300
                while not os.path.exists(gate):
                    if time.monotonic() > deadline:
                        raise TimeoutError("the test never opened the gate " + gate)
                    time.sleep(0.02)
            return rec
        """
    )


def torchrun_command(
    app: AppDef, app_id: str, rdzv_conf: Optional[str] = FAST_RDZV, runner_args: Sequence[str] = ()
) -> Tuple[str, Dict[str, str]]:
    """The shell command and the env of the AppDef's single role, with its macros applied.

    ``rdzv_conf`` is passed to torchrun and ``runner_args`` are appended to the runner's own
    arguments (the command ends with them).
    """
    (role,) = app.roles
    values = macros.Values(img_root="", app_id=app_id, replica_id="0", rank0_env=RANK0_ENV)
    role = values.apply(role)
    assert role.entrypoint == "bash" and role.args[0] == "-c", (role.entrypoint, role.args)
    cmd = role.args[1]
    assert " torchrun " in f" {cmd}", cmd
    if rdzv_conf:
        cmd = cmd.replace("torchrun ", f"torchrun --rdzv_conf {rdzv_conf} ", 1)
    return " ".join([cmd, *(shlex.quote(a) for a in runner_args)]), dict(role.env)


def _children(pid: int) -> List[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(p) for p in fh.read().split()]
    except OSError:
        return []


def descendants(pid: int) -> List[int]:
    out: List[int] = []
    todo = [pid]
    while todo:
        kids = _children(todo.pop())
        out.extend(kids)
        todo.extend(kids)
    return out


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def wait_for(what: str, cond: Callable[[], bool], timeout_s: float, poll_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what}")
        time.sleep(poll_s)


@dataclass
class Agent:
    """One torchrun agent (a "node") started from a shell command in its own session."""

    name: str
    argv: List[str]
    log: Path
    env: Dict[str, str] = field(default_factory=dict)
    cwd: Optional[Path] = None
    proc: Optional["subprocess.Popen[bytes]"] = None

    def start(self) -> "Agent":
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as fh:
            self.proc = subprocess.Popen(
                self.argv, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, **self.env},
                cwd=self.cwd, start_new_session=True,
            )  # fmt: skip
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def ranks(self) -> List[int]:
        """Pids of this agent's rank processes (``-m torchx_datapipes.runner`` children of torchrun)."""
        return [
            p
            for p in descendants(self.pid)
            if "torchx_datapipes.runner" in cmdline(p) and "torchrun" not in cmdline(p)
        ]

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait(self, timeout_s: float) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired as e:
            raise AssertionError(f"agent {self.name} still up after {timeout_s:g}s:\n{self.output()}") from e

    def kill(self) -> None:
        """SIGKILL the agent's whole session (agent and ranks); safe to call twice."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)


def run(cmd: Sequence[str], check: bool = True) -> "subprocess.CompletedProcess[str]":
    res = subprocess.run(list(cmd), capture_output=True, text=True)
    if check and res.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} failed ({res.returncode}): {res.stderr.strip()}")
    return res


def can_make_namespaces() -> Optional[str]:
    """None if this process can create network namespaces, else the reason it cannot."""
    if os.geteuid() != 0:
        return f"needs root to create network namespaces (euid {os.geteuid()})"
    for tool in ("ip", "unshare", "mount", "hostname"):
        if run(["sh", "-c", f"command -v {tool}"], check=False).returncode != 0:
            return f"{tool} is not installed"
    probe = f"tdpprobe{uuid.uuid4().hex[:6]}"
    res = run(["ip", "netns", "add", probe], check=False)
    if res.returncode != 0:
        return f"cannot create a network namespace: {res.stderr.strip()}"
    run(["ip", "netns", "del", probe], check=False)
    return None


@dataclass
class Host:
    name: str  # hostname inside the namespace
    netns: str
    addr: str


def unused_subnet() -> int:
    """A ``10.213.X.0/24`` that no interface on this machine uses (other test hosts may be up)."""
    used = run(["ip", "-o", "-4", "addr", "show"], check=False).stdout
    free = [x for x in range(100, 200) if f"10.213.{x}." not in used]
    return random.choice(free)


@dataclass
class HostNet:
    """A bridge ``br`` on ``10.213.{subnet}.0/24`` with hosts ``h1..hN`` at ``.11, .12, ...``.

    The bridge itself has ``.1`` (so the root namespace, where a moto server may listen, is
    reachable from every host). Names carry a per-run token, so parallel or leftover runs never
    collide; :meth:`close` removes everything and is safe after a partial :meth:`open`.
    """

    workdir: Path
    n_hosts: int = 2
    token: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    subnet: int = field(default_factory=lambda: unused_subnet())
    hosts: List[Host] = field(default_factory=list)
    _links: List[str] = field(default_factory=list)

    @property
    def bridge(self) -> str:
        return f"tdpbr{self.token}"

    @property
    def gateway(self) -> str:
        return f"10.213.{self.subnet}.1"

    @property
    def hosts_file(self) -> Path:
        return self.workdir / "hosts"

    def open(self) -> "HostNet":
        self.workdir.mkdir(parents=True, exist_ok=True)
        run(["ip", "link", "add", self.bridge, "type", "bridge"])
        self._links.append(self.bridge)
        run(["ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge])
        run(["ip", "link", "set", self.bridge, "up"])
        for i in range(1, self.n_hosts + 1):
            host = Host(name=f"h{i}", netns=f"tdp{self.token}h{i}", addr=f"10.213.{self.subnet}.{10 + i}")
            run(["ip", "netns", "add", host.netns])
            self.hosts.append(host)
            outside, inside = f"tdp{self.token}v{i}", f"tdp{self.token}p{i}"
            run(["ip", "link", "add", outside, "type", "veth", "peer", "name", inside])
            self._links.append(outside)
            run(["ip", "link", "set", outside, "master", self.bridge])
            run(["ip", "link", "set", outside, "up"])
            run(["ip", "link", "set", inside, "netns", host.netns])
            ns = ["ip", "netns", "exec", host.netns]
            run([*ns, "ip", "addr", "add", f"{host.addr}/24", "dev", inside])
            run([*ns, "ip", "link", "set", inside, "up"])
            run([*ns, "ip", "link", "set", "lo", "up"])
        lines = ["127.0.0.1 localhost", *(f"{h.addr} {h.name}" for h in self.hosts)]
        self.hosts_file.write_text("\n".join(lines) + "\n")
        return self

    def argv(self, host: Host, command: str) -> List[str]:
        """Run ``command`` (shell) on ``host``: its namespace, hostname and ``/etc/hosts``."""
        inner = (
            f"hostname {host.name} && mount --bind {shlex.quote(str(self.hosts_file))} /etc/hosts"
            f" && exec bash -c {shlex.quote(command)}"
        )
        return ["ip", "netns", "exec", host.netns, "unshare", "--uts", "--mount", "bash", "-c", inner]

    def close(self) -> None:
        for host in self.hosts:
            # anything still running in the namespace dies with it
            pids = run(["ip", "netns", "pids", host.netns], check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            run(["ip", "netns", "del", host.netns], check=False)
        for link in reversed(self._links):
            run(["ip", "link", "del", link], check=False)
        self.hosts.clear()
        self._links.clear()


def leftovers(token_prefix: str = "tdp") -> List[str]:
    """Namespaces and links whose names start with ``token_prefix`` (for leak checks)."""
    ns = [line.split()[0] for line in run(["ip", "netns", "list"], check=False).stdout.splitlines() if line]
    links = [
        line.split(":")[1].strip().split("@")[0]
        for line in run(["ip", "-o", "link", "show"], check=False).stdout.splitlines()
        if ":" in line
    ]
    return [n for n in [*ns, *links] if n.startswith(token_prefix)]
