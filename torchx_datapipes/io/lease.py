"""The output lease: one job at a time writes an output directory.

Rank 0 creates ``OUT/_LEASE`` exclusively at start (job id, host, pid, heartbeat time), a daemon
thread refreshes the heartbeat, the commit checks the lease is still ours, and it is released
after ``_SUCCESS`` (or when rank 0 fails). A second job is refused at once, naming the owner.
A lease whose heartbeat is older than ``stale_s()`` (or whose process is gone, on this host) is
taken over; a restart of the same job (same torchrun run id) takes its own lease back.
"""

import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any, Dict, Optional

import orjson

from torchx_datapipes.errors import DatapipesError
from torchx_datapipes.io.checksum import write_file
from torchx_datapipes.io.fs import fs_and_path, join
from torchx_datapipes.io.layout import LEASE, STALE_LEASE_PREFIX, SUCCESS

HEARTBEAT_ENV = "TDP_LEASE_HEARTBEAT_S"
DEFAULT_HEARTBEAT_S = 20.0


def heartbeat_s() -> float:
    return float(os.environ.get(HEARTBEAT_ENV, DEFAULT_HEARTBEAT_S))


def stale_s() -> float:
    """A lease not refreshed for this long belongs to a dead job (3 heartbeats)."""
    return 3 * heartbeat_s()


class LeaseHeldError(DatapipesError):
    """Another live job owns the output."""


class LeaseLostError(DatapipesError):
    """Our lease was taken over while we ran (we were presumed dead)."""


@dataclass(frozen=True)
class Holder:
    job_id: str
    host: str
    pid: int
    token: str
    heartbeat: float

    def describe(self) -> str:
        age = time.time() - self.heartbeat
        return f"job {self.job_id} (host {self.host}, pid {self.pid}, last heartbeat {age:.0f}s ago)"


def run_identity() -> Optional[str]:
    """This torchrun job's id, the same in every rank and restart; None outside torchrun.

    torchx passes its app id as ``--rdzv_id``. A hand-started torchrun without ``--rdzv_id`` has the
    run id "none" in every job, so the agent (the rank's parent, kept across restarts) is added.
    """
    run_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if not run_id:
        return None
    return run_id if run_id != "none" else f"none@{socket.gethostname()}:{os.getppid()}"


def job_id() -> str:
    """The job that takes the lease: the torchrun job, else one id per process (in-process runs)."""
    return run_identity() or _LOCAL_ID


_LOCAL_ID = f"local-{uuid.uuid4().hex[:12]}"


class Lease:
    def __init__(self, output: str, holder: Holder) -> None:
        self.output, self.holder = output, holder
        self.url = join(output, LEASE)
        self._stop = threading.Event()
        self.busy = threading.Lock()  # held by each heartbeat; hold it to fork without a beat in flight
        self._thread: Optional[threading.Thread] = None
        self.lost: Optional[str] = None
        self.retaken = False  # True when this job already held the lease (a restart or a new round)

    # -- taking ---------------------------------------------------------------------------
    @classmethod
    def acquire(cls, output: str, job: Optional[str] = None) -> "Lease":
        me = Holder(job or job_id(), socket.gethostname(), os.getpid(), uuid.uuid4().hex, time.time())
        lease = cls(output, me)
        for _ in range(3):
            if lease._create():
                return lease
            current = read_holder(output)
            if current is None:
                continue  # released in between, or being written: try again
            if current.job_id == me.job_id:  # a restart of the same job takes its own lease back
                lease._write()
                lease.retaken = True
                return lease
            why = _dead(current)
            if why is None:
                raise LeaseHeldError(
                    f"{output} is being written by {current.describe()}; refusing to run two jobs on"
                    f" one output. Wait for it, or choose another --output. If that job is dead, rerun:"
                    f" a lease older than {stale_s():.0f}s is taken over (or delete {lease.url})"
                )
            print(f"taking over the output lease of {current.describe()}: {why}", flush=True)
            lease._retire(current)
        raise LeaseHeldError(f"could not take the output lease {lease.url}: other jobs keep taking it")

    def _body(self) -> bytes:
        return orjson.dumps({**asdict(self.holder), "heartbeat": time.time()})

    def _create(self) -> bool:
        fs, path = fs_and_path(self.url)
        fs.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            with fs.open(path, "xb") as fh:
                fh.write(self._body())
        except FileExistsError:
            return False
        except (ValueError, NotImplementedError):  # no exclusive create here: write, then read back
            if fs.exists(path):
                return False
            self._write()
        current = read_holder(self.output)
        return current is not None and current.token == self.holder.token

    def _write(self) -> None:
        write_file(self.url, self._body())

    def _retire(self, current: Holder) -> None:
        """Move a dead job's lease aside (one taker wins the rename)."""
        fs, path = fs_and_path(self.url)
        try:
            fs.mv(path, f"{os.path.dirname(path)}/{STALE_LEASE_PREFIX}{current.token}")
        except (FileNotFoundError, OSError):
            pass

    # -- holding --------------------------------------------------------------------------
    def check(self) -> None:
        """Raise unless the lease is still ours (called before the commit)."""
        current = read_holder(self.output)
        if self.lost or current is None or current.token != self.holder.token:
            who = current.describe() if current is not None else "nobody (the lease file is gone)"
            raise LeaseLostError(
                f"lease lost: the output lease {self.url} is now held by {who}: this job was presumed dead"
                f" (no heartbeat for {stale_s():.0f}s) and must not commit. Rerun when the other job is done"
            )

    def start_heartbeat(self) -> None:
        self._thread = threading.Thread(target=self._beat, name="tdp-lease", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(heartbeat_s()):
            try:
                with self.busy:
                    current = read_holder(self.output)
                    if current is None or current.token != self.holder.token:
                        self.lost = current.describe() if current else "lease file removed"
                        return
                    self._write()
            except OSError as e:  # a transient storage error: the next beat tries again
                print(f"warning: cannot refresh the output lease {self.url}: {e}", flush=True)

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        current = read_holder(self.output)
        if current is not None and current.token == self.holder.token:
            fs, path = fs_and_path(self.url)
            fs.rm(path)


def refuse_if_held(output: str) -> None:
    """On the client, before launch: refuse an output a live job is writing (a dead job's lease is fine)."""
    current = read_holder(output)
    if current is not None and _dead(current) is None:
        raise LeaseHeldError(
            f"{output} is being written by {current.describe()}; refusing to launch a second job on"
            f" one output. Wait for it, or choose another --output. If that job is dead, rerun: a lease"
            f" older than {stale_s():.0f}s is taken over (or delete {join(output, LEASE)})"
        )


def read_holder(output: str) -> Optional[Holder]:
    """The lease's holder, or None if there is no lease (or it is being written)."""
    fs, path = fs_and_path(join(output, LEASE))
    try:
        with fs.open(path, "rb") as fh:
            data: Dict[str, Any] = orjson.loads(fh.read())
        return Holder(str(data["job_id"]), str(data["host"]), int(data["pid"]), str(data["token"]),
                      float(data["heartbeat"]))  # fmt: skip
    except FileNotFoundError:
        return None
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return _unreadable(fs, path)


def _unreadable(fs: Any, path: str) -> Optional[Holder]:
    """A lease being written (or garbage): its age is the file's mtime."""
    try:
        mtime = float(fs.info(path).get("mtime") or 0.0)
    except FileNotFoundError:
        return None
    return Holder("<unknown: unreadable lease>", "?", -1, "?", mtime)


def _dead(h: Holder) -> Optional[str]:
    """Why the holder is dead, or None if it may be alive."""
    age = time.time() - h.heartbeat
    if age > stale_s():
        return f"no heartbeat for {age:.0f}s (stale after {stale_s():.0f}s)"
    if h.host == socket.gethostname() and h.pid > 0 and not _alive(h.pid):
        return f"process {h.pid} on this host has exited"
    return None


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs on this host; a zombie (exited, not yet reaped: its parent, the torchrun
    agent, may have been killed too) is dead."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc: trust kill(0)
    return state not in (b"Z", b"X")


def lease_lost(output: str, token: str, holder: bool = False, flagged: Optional[str] = None) -> Optional[str]:
    """Why this job no longer owns ``output`` (naming the job that does), or None if it still may.

    ``token`` is the job's lease token (rank 0 shares it with the plan); ``holder`` is True in rank 0
    (and its worker processes), which has not released the lease, so a missing lease means it was
    taken; another rank sees a missing lease as lost only if ``_SUCCESS`` names another run.
    ``flagged``: what the heartbeat thread saw.
    """
    try:
        current = read_holder(output)
    except OSError:
        return None
    if current is not None and flagged is None and current.token in (token, "?"):  # "?": being written
        return None
    completed = _success_run(output) if current is None else None
    if not holder and current is None and (completed is None or completed == (run_identity() or "")):
        return None
    if current is not None:
        who = current.describe()
    else:
        run = f" (run {completed})" if completed else ""
        done = f" after completing the output{run}" if completed is not None else ""
        who = f"nobody now: the job that took it over has released it{done}"
    return (
        f"lease lost: the output lease of {output} is now held by {who}. This job was presumed dead"
        f" (no heartbeat for {stale_s():.0f}s: frozen, e.g. by SIGSTOP, or cut off from the storage) and"
        f" another job took the output over. Rerun once that job is done, or choose another --output"
    )


def _success_run(output: str) -> Optional[str]:
    """The run id in ``OUT/_SUCCESS`` ('' if it names none), or None without a readable ``_SUCCESS``."""
    try:
        fs, path = fs_and_path(join(output, SUCCESS))
        with fs.open(path, "rb") as fh:
            job = orjson.loads(fh.read()).get("job") or {}
    except (OSError, orjson.JSONDecodeError, AttributeError):
        return None
    return str(job.get("run_id") or "")
