"""A private two-node Slurm test cluster on this machine (Debian's Slurm 22.05 packages).

Each node is a host of :class:`netns.HostNet` (a network namespace with its own hostname ``h1``,
``h2`` and ``/etc/hosts``, so node names resolve where the job runs: torchrun's rendezvous host
is the first node's name) running one ``slurmd -N hN``. ``slurmctld``, ``slurmdbd`` (accounting,
which TorchX's ``sacct`` calls need) and a private ``munged`` run in the root namespace; the
controller listens on the bridge address. slurmdbd stores into the MariaDB at 127.0.0.1:3306 (root,
no password) in a database of its own per cluster (``tdp_slurm_acct_<token>``, dropped at stop).

Everything lives under one private directory (config, state, logs, munge key and socket); every
daemon is started here and stopped by its pid in :meth:`SlurmCluster.stop`, which also cancels the
cluster's jobs and deletes the namespaces (anything still running in them dies). Clients find the
cluster through ``SLURM_CONF`` (:attr:`SlurmCluster.env`).

Needs root (namespaces, daemons) and the packages ``slurmctld slurmd slurm-client slurmdbd munge``
(``scripts/services.sh`` installs them).
"""

import os
import shutil
import signal
import socket
import subprocess
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from netns import Host, HostNet, run, unused_subnet, wait_for

PACKAGES = ("slurmctld", "slurmd", "sbatch", "sacct", "sacctmgr", "slurmdbd", "munged", "mysql")
NODE_CPUS = 4  # per node: a few jobs at once (cons_tres counts them; the machine has 2 cores)
NODE_MEM_MB = 8000  # per node (RealMemory): the jobs' --mem must fit


def missing_tools() -> List[str]:
    return [t for t in PACKAGES if shutil.which(t) is None and not os.path.exists(f"/usr/sbin/{t}")]


def _tool(name: str) -> str:
    found = shutil.which(name) or f"/usr/sbin/{name}"
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return int(s.getsockname()[1])


def _mysql(sql: str) -> None:
    run(["mysql", "-h", "127.0.0.1", "-P", "3306", "-u", "root", "-e", sql])


@dataclass
class SlurmCluster:
    workdir: Path
    n_nodes: int = 2
    net: HostNet = field(init=False)
    procs: Dict[str, "subprocess.Popen[bytes]"] = field(default_factory=dict)
    ctld_port: int = 0
    dbd_port: int = 0

    def __post_init__(self) -> None:
        self.net = HostNet(self.workdir / "net", n_hosts=self.n_nodes, subnet=unused_subnet())

    @property
    def name(self) -> str:
        return f"tdp{self.net.token}"

    @property
    def database(self) -> str:
        return f"tdp_slurm_acct_{self.net.token}"

    @property
    def conf(self) -> Path:
        return self.workdir / "etc" / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.workdir / "munge" / "munge.socket"

    @property
    def env(self) -> Dict[str, str]:
        """What a client needs to talk to this cluster (sbatch, squeue, sacct, torchx)."""
        return {"SLURM_CONF": str(self.conf)}

    @property
    def nodes(self) -> List[str]:
        return [h.name for h in self.net.hosts]

    # ---- start -------------------------------------------------------------------------
    def start(self, timeout_s: float = 60) -> "SlurmCluster":
        try:
            self._start(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout_s: float) -> None:
        for d in ("etc", "munge", "state", "spool", "log"):
            (self.workdir / d).mkdir(parents=True, exist_ok=True)
        self.net.open()
        self.ctld_port, self.dbd_port = _free_port(), _free_port()
        self._start_munge()
        self._write_config()
        _mysql(f"CREATE DATABASE IF NOT EXISTS {self.database}")
        self._spawn("slurmdbd", [_tool("slurmdbd"), "-D"])  # reads slurmdbd.conf next to SLURM_CONF
        wait_for("slurmdbd's port", lambda: _port_open("127.0.0.1", self.dbd_port), timeout_s, 0.1)
        self._spawn("slurmctld", [_tool("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        wait_for("slurmctld's port", lambda: _port_open(self.net.gateway, self.ctld_port), timeout_s, 0.1)
        for host in self.net.hosts:
            (self.workdir / "spool" / host.name).mkdir(exist_ok=True)
            cmd = f"exec {_tool('slurmd')} -D -N {host.name} -f {self.conf}"
            self._spawn(f"slurmd-{host.name}", self._node_argv(host, cmd))
        wait_for("every node idle", self._all_idle, timeout_s, 0.2)

    def _node_argv(self, host: Host, command: str) -> List[str]:
        """``command`` on ``host``, as :meth:`HostNet.argv` but keeping this machine's ``/sys`` (slurmd
        needs ``/sys/fs/cgroup``, which ``ip netns exec`` would hide behind a fresh sysfs)."""
        argv = self.net.argv(host, command)
        assert argv[:4] == ["ip", "netns", "exec", host.netns], argv
        return ["nsenter", f"--net=/var/run/netns/{host.netns}", *argv[4:]]

    def _spawn(self, name: str, argv: List[str]) -> None:
        log = open(self.workdir / "log" / f"{name}.out", "wb")
        env = {**os.environ, **self.env}
        self.procs[name] = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        log.close()

    def _start_munge(self) -> None:
        key = self.workdir / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        (self.workdir / "munge").chmod(0o711)
        m = self.workdir / "munge"
        self._spawn(
            "munged",
            [
                _tool("munged"), "-F", "--force", f"--socket={self.munge_socket}", f"--key-file={key}",
                f"--pid-file={m / 'munged.pid'}", f"--log-file={m / 'munged.log'}",
                f"--seed-file={m / 'munged.seed'}",
            ],
        )  # fmt: skip
        wait_for("munged's socket", self.munge_socket.exists, 20, 0.05)

    def _write_config(self) -> None:
        w, gw = self.workdir, self.net.gateway
        me = socket.gethostname().split(".")[0]
        auth = f"AuthType=auth/munge\nAuthInfo=socket={self.munge_socket}\n"
        # cred_expire is how long a job step's credential is valid (slurmd refuses a task launch after it:
        # "Job credential expired") and also how long a requeued job (--max_retries) waits to start again
        # (default 120 s). 10 s was too short on a busy machine: a requeued batch step's launch reached
        # slurmd 17 s after the batch started, and the job failed.
        ctld_auth = f"AuthType=auth/munge\nAuthInfo=socket={self.munge_socket},cred_expire=30\n"
        nodes = "\n".join(
            f"NodeName={h.name} NodeAddr={h.addr} CPUs={NODE_CPUS} RealMemory={NODE_MEM_MB} State=UNKNOWN"
            for h in self.net.hosts
        )
        self.conf.write_text(
            textwrap.dedent(
                f"""\
                ClusterName={self.name}
                SlurmctldHost={me}({gw})
                SlurmctldPort={self.ctld_port}
                SlurmdPort=6818
                SlurmUser=root
                SlurmdUser=root
                StateSaveLocation={w / "state"}
                SlurmdSpoolDir={w / "spool"}/%n
                SlurmctldPidFile={w / "state" / "slurmctld.pid"}
                SlurmdPidFile={w / "spool"}/slurmd-%n.pid
                SlurmctldLogFile={w / "log" / "slurmctld.log"}
                SlurmdLogFile={w / "log"}/slurmd-%n.log
                ProctrackType=proctrack/linuxproc
                TaskPlugin=task/none
                SelectType=select/cons_tres
                SelectTypeParameters=CR_Core_Memory
                SlurmdParameters=config_overrides
                JobAcctGatherType=jobacct_gather/linux
                JobAcctGatherFrequency=1
                JobAcctGatherParams=OverMemoryKill
                AccountingStorageType=accounting_storage/slurmdbd
                AccountingStorageHost=127.0.0.1
                AccountingStoragePort={self.dbd_port}
                AccountingStoragePass={self.munge_socket}
                MailProg=/bin/true
                ReturnToService=2
                SchedulerType=sched/backfill
                SchedulerParameters=bf_interval=1,sched_interval=1
                MinJobAge=300
                KillWait=5
                InactiveLimit=0
                MpiDefault=none
                """
            )
            + ctld_auth
            + nodes
            + f"\nPartitionName=debug Nodes={','.join(self.nodes)} Default=YES MaxTime=30 State=UP\n"
        )
        dbd = self.workdir / "etc" / "slurmdbd.conf"
        dbd.write_text(
            textwrap.dedent(
                f"""\
                DbdHost=localhost
                DbdAddr=127.0.0.1
                DbdPort={self.dbd_port}
                SlurmUser=root
                PidFile={w / "state" / "slurmdbd.pid"}
                LogFile={w / "log" / "slurmdbd.log"}
                StorageType=accounting_storage/mysql
                StorageHost=127.0.0.1
                StoragePort=3306
                StorageUser=root
                StorageLoc={self.database}
                """
            )
            + auth
        )
        dbd.chmod(0o600)

    def _all_idle(self) -> bool:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited ({proc.returncode}):\n{self.logs()}")
        res = self.cmd(["sinfo", "-h", "-N", "-o", "%N %t"], check=False)
        states = dict(line.split() for line in res.stdout.splitlines() if line.strip())
        return len(states) == self.n_nodes and all(s == "idle" for s in states.values())

    # ---- use ---------------------------------------------------------------------------
    def cmd(self, argv: List[str], check: bool = True) -> "subprocess.CompletedProcess[str]":
        res = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **self.env})
        if check and res.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({res.returncode}): {res.stderr.strip()}")
        return res

    def logs(self, tail: int = 40) -> str:
        out = []
        for p in sorted((self.workdir / "log").glob("*")):
            lines = p.read_text(errors="replace").splitlines()[-tail:]
            out.append(f"--- {p.name}\n" + "\n".join(lines))
        return "\n".join(out)

    # ---- stop --------------------------------------------------------------------------
    def stop(self) -> None:
        """Cancel the jobs, stop every daemon by its pid, delete the namespaces and the database."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            self.cmd(["scancel", "--full", "--quiet", "--partition", "debug"], check=False)
        self.net.close()  # slurmd and any job step in a namespace die here
        for name in reversed(list(self.procs)):
            _stop(self.procs[name])
        self.procs.clear()
        try:
            _mysql(f"DROP DATABASE IF EXISTS {self.database}")
        except RuntimeError:
            pass


def _stop(proc: "subprocess.Popen[bytes]", grace_s: float = 10) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_job(cluster: SlurmCluster, job_id: str, timeout_s: float) -> str:
    """The final sacct state of ``job_id`` (polled with a deadline)."""
    final = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL"}
    state: Optional[str] = None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        res = cluster.cmd(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State"], check=False)
        states = [s.split()[0] for s in res.stdout.split() if s]
        state = states[0] if states else None
        if state in final:
            return state
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} still {state} after {timeout_s:g}s:\n{cluster.logs()}")


def main() -> None:
    """``python tests/slurm_cluster.py DIR``: start a cluster under DIR, print its ``SLURM_CONF``,
    and stop it (every daemon by its pid) on SIGTERM or SIGINT."""
    import sys

    cluster = SlurmCluster(Path(sys.argv[1]))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        cluster.start()
        print(f"export SLURM_CONF={cluster.conf}", flush=True)
        while True:
            signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
