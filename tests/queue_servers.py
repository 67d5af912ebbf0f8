"""Private, persisting NATS (JetStream) and RabbitMQ servers for broker-restart tests.

Each runs on free ports with its own data directory, so a test can stop and start it while the
shared brokers (4222, 5672) keep serving the other tests. ``stop`` waits until the server process
is gone and its port closed; ``start`` until the port accepts connections (both with deadlines).
A missing binary fails, naming the Debian package; nothing skips.
"""

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

from cache_servers import free_port, port_open, wait_until

START_TIMEOUT_S = 90.0  # RabbitMQ boots in 3-5 s here, more on a loaded machine
STOP_TIMEOUT_S = 60.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie child counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class PrivateBroker:
    def __init__(self, kind: str) -> None:
        if shutil.which({"nats": "nats-server", "rabbitmq": "rabbitmq-server"}[kind]) is None:
            raise RuntimeError(f"{kind} is not installed: apt-get install {kind}-server")
        self.kind = kind
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix=f"tdp-{kind}-"))
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.log = open(self.dir / "server.log", "ab")
        self.starts = 0
        if kind == "rabbitmq":
            self.dist_port = free_port()
            for sub in ("mnesia", "log"):
                (self.dir / sub).mkdir()
            shutil.chown(self.dir, "rabbitmq", "rabbitmq")
            for p in self.dir.rglob("*"):
                shutil.chown(p, "rabbitmq", "rabbitmq")

    def _argv_env(self) -> "tuple[List[str], Dict[str, str]]":
        if self.kind == "nats":
            store = str(self.dir / "js")
            argv = ["nats-server", "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", store]
            return argv, dict(os.environ)
        d = str(self.dir)
        env = {
            **os.environ,
            "RABBITMQ_NODENAME": f"tdp{self.port}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": f"{d}/mnesia",
            "RABBITMQ_LOG_BASE": f"{d}/log",
            "RABBITMQ_ENABLED_PLUGINS_FILE": f"{d}/plugins",
            "RABBITMQ_CONFIG_FILE": f"{d}/rabbitmq",
            "RABBITMQ_PID_FILE": f"{d}/pid",
        }
        return ["rabbitmq-server"], env

    def pid(self) -> Optional[int]:
        """The server's own process (RabbitMQ's Erlang VM runs as its user: its pid file tells)."""
        if self.kind == "rabbitmq":
            try:
                return int((self.dir / "pid").read_text().split()[0])
            except (FileNotFoundError, ValueError, IndexError):
                return None
        return self.proc.pid if self.proc is not None else None

    def start(self) -> "PrivateBroker":
        argv, env = self._argv_env()
        if self.kind == "rabbitmq":
            (self.dir / "pid").unlink(missing_ok=True)
        self.proc = subprocess.Popen(argv, env=env, stdout=self.log, stderr=subprocess.STDOUT, cwd=self.dir)
        self.starts += 1
        deadline = time.monotonic() + START_TIMEOUT_S
        while not port_open(self.port):
            if self.kind == "nats" and self.proc.poll() is not None:
                log = self.dir / "server.log"
                raise RuntimeError(f"{self.kind} exited with {self.proc.returncode}: see {log}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.kind} did not listen on {self.port} within {START_TIMEOUT_S}s")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        """SIGTERM the server; wait until it is gone and its port closed (SIGKILL after the deadline)."""
        pid = self.pid()
        if pid is not None and _alive(pid):
            os.kill(pid, signal.SIGTERM)
            try:
                wait_until(lambda: not _alive(pid), STOP_TIMEOUT_S, f"{self.kind} pid {pid} exited", 0.05)
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                wait_until(lambda: not _alive(pid), 10, f"{self.kind} pid {pid} killed", 0.05)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        wait_until(lambda: not port_open(self.port, timeout=0.2), 10, f"{self.kind} port {self.port} closed")

    def restart(self) -> None:
        self.stop()
        self.start()

    def cleanup(self) -> None:
        self.stop()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
