"""Dedicated Redis / memcached server processes for destructive cache tests.

``start_redis()`` and ``start_memcached()`` launch a private server on a free port of
127.0.0.1 and wait until it accepts connections. The returned :class:`Server` can be
stopped (SIGTERM), restarted on the same port, paused with SIGSTOP (a hung server: the
kernel still accepts connections, nothing answers) and resumed. Nothing here skips: a
missing binary or a server that does not come up raises, naming how to install it.

The shared servers on 6379 / 11211 (started by ``make services``) are only checked by
:func:`require_shared`; tests never stop them.
"""

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import IO, Callable, Iterator, List, Optional

import pytest

SHARED_REDIS = ("127.0.0.1", 6379)
SHARED_MEMCACHED = ("127.0.0.1", 11211)
SHARED_SERVERS = {"redis": SHARED_REDIS, "memcached": SHARED_MEMCACHED}
START_TIMEOUT_S = 15.0
SIGNAL_TIMEOUT_S = 10.0  # SIGSTOP/SIGCONT reach every thread in ms; the deadline only catches a hang


def free_port() -> int:
    """A TCP port nothing listens on right now (bound then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return True
    except OSError:
        return False


def wait_until(done: Callable[[], bool], timeout: float, what: str, poll_s: float = 0.005) -> None:
    """Poll ``done()`` until it is true; raise ``TimeoutError`` naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not reached within {timeout}s")
        time.sleep(poll_s)


def thread_states(pid: int) -> List[str]:
    """The scheduler state (``R``, ``S``, ``T``...) of every thread of ``pid``, from /proc.

    SIGSTOP is delivered to a process but each thread stops on its own (memcached's ten threads
    within a few ms), so "paused" means every thread is ``T``, not that the signal was sent.
    """
    states = []
    for task in glob.glob(f"/proc/{pid}/task/*/stat"):
        try:
            with open(task) as f:
                stat = f.read()
        except FileNotFoundError:  # the thread exited between glob and open
            continue
        states.append(stat[stat.rindex(")") + 2])  # "pid (comm) S ...": comm may hold spaces or ")"
    return states


def require_shared(kind: str) -> str:
    """Fail (never skip) unless the shared ``redis`` or ``memcached`` server answers; its address."""
    host, port = SHARED_SERVERS[kind]
    if not port_open(port, host, timeout=2.0):
        pytest.fail(
            f"the shared {kind} server is not reachable on {host}:{port}: run `make services`"
            " (bash scripts/services.sh) to start it",
            pytrace=False,
        )
    return f"{host}:{port}"


def _binary(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(
            f"{name} is not installed: run `make services` or `apt-get install {package}`"
            " (the cache failure tests start their own servers)"
        )
    return path


@dataclass
class Server:
    """One server subprocess on a fixed port; ``argv`` is re-run by :meth:`restart`."""

    kind: str
    port: int
    argv: List[str]
    proc: Optional["subprocess.Popen[bytes]"] = None
    log: IO[bytes] = field(default_factory=tempfile.TemporaryFile)
    paused: bool = False

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-4000:]

    def start(self) -> "Server":
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"{self.kind} on port {self.port} is already running")
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT)
        self.paused = False
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.kind} exited with {self.proc.returncode} before listening on {self.address}:"
                    f" {' '.join(self.argv)}\n{self.output()}"
                )
            if port_open(self.port):
                return self
            time.sleep(0.02)
        self.proc.kill()
        self.proc.wait()
        raise RuntimeError(f"{self.kind} did not listen on {self.address} within {START_TIMEOUT_S}s")

    def stop(self) -> None:
        """SIGTERM (after SIGCONT if paused) and wait; the port is free afterwards."""
        if self.proc is None or self.proc.poll() is not None:
            return
        if self.paused:
            self.resume()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        wait_until(lambda: not port_open(self.port, timeout=0.2), 5.0, f"{self.kind} port {self.port} closed")

    def restart(self) -> "Server":
        """Stop, then start again on the same port (the data is gone: no persistence)."""
        self.stop()
        return self.start()

    def pause(self) -> None:
        """SIGSTOP: a hung server. Connections are still accepted by the kernel; nothing answers.

        Returns once every thread is stopped: until then a request could still be answered.
        """
        assert self.proc is not None and self.proc.poll() is None, f"{self.kind} is not running"
        pid = self.proc.pid
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True
        wait_until(
            lambda: all(s == "T" for s in thread_states(pid)),
            SIGNAL_TIMEOUT_S,
            f"{self.kind} pid {pid} stopped",
        )

    def resume(self) -> None:
        """SIGCONT; returns once no thread is stopped any more."""
        assert self.proc is not None
        pid = self.proc.pid
        self.proc.send_signal(signal.SIGCONT)
        self.paused = False
        if self.proc.poll() is None:
            wait_until(
                lambda: "T" not in thread_states(pid), SIGNAL_TIMEOUT_S, f"{self.kind} pid {pid} running"
            )

    def cleanup(self) -> None:
        self.stop()
        self.log.close()


def _start_on_free_port(kind: str, argv_for: Callable[[int], List[str]], port: Optional[int]) -> Server:
    """Start on ``port``, or on a free port -- retried, since another process may take it first."""
    for attempt in range(3):
        chosen = port or free_port()
        server = Server(kind, chosen, argv_for(chosen))
        try:
            return server.start()
        except RuntimeError:
            server.log.close()
            if port is not None or attempt == 2:
                raise
    raise AssertionError("unreachable")


def start_redis(*extra: str, port: Optional[int] = None) -> Server:
    """A private ``redis-server`` without persistence on a free (or the given) port."""
    binary = _binary("redis-server", "redis-server")

    def argv(p: int) -> List[str]:
        argv = [binary, "--port", str(p), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        return [*argv, "--dir", tempfile.gettempdir(), *extra]

    return _start_on_free_port("redis", argv, port)


def start_memcached(*extra: str, port: Optional[int] = None) -> Server:
    """A private ``memcached`` (TCP only, 64 MB) on a free (or the given) port."""
    binary = _binary("memcached", "memcached")
    user = pwd.getpwuid(os.getuid()).pw_name  # memcached refuses to run as root without -u

    def argv(p: int) -> List[str]:
        return [binary, "-l", "127.0.0.1", "-p", str(p), "-U", "0", "-u", user, "-m", "64", *extra]

    return _start_on_free_port("memcached", argv, port)


def start(kind: str, *extra: str) -> Server:
    return {"redis": start_redis, "memcached": start_memcached}[kind](*extra)


def cache_url(kind: str, address: str) -> str:
    """The ``open_cache`` URL of a server (no options)."""
    return f"redis://{address}/0" if kind == "redis" else f"memcached://{address}"


@pytest.fixture(scope="module")
def redis_server() -> Iterator[Server]:
    """A dedicated redis-server for this test module (tests may stop, pause or restart it)."""
    server = start_redis()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture(scope="module")
def memcached_server() -> Iterator[Server]:
    """A dedicated memcached for this test module (tests may stop, pause or restart it)."""
    server = start_memcached()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture(scope="module")
def shared_redis() -> str:
    """``host:port`` of the shared Redis (6379); fails with the fix if it is down."""
    return require_shared("redis")


@pytest.fixture(scope="module")
def shared_memcached() -> str:
    """``host:port`` of the shared memcached (11211); fails with the fix if it is down."""
    return require_shared("memcached")
