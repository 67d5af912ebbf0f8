"""End to end: a trainer under torchrun (2 ranks x 2 DataLoader workers) consumes a producer job
(``torchx run ... datapipes.transform --output redis://...?stream=... --state ... -j 1x2``) while it runs.

1. every record arrives exactly once, with its tensor types, and iteration ends by itself;
2. a consumer rank killed mid-stream (torchrun restarts the trainer: fresh consumers join the group)
   and the broker restarted mid-stream: no record lost, duplicates only those counted as redelivered.
"""

import glob
import json
import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import Dict, List, Optional

import pytest
from cache_servers import start_redis
from tdp_testutil import VENV_BIN, make_dataset, run_torchx

import torchx_datapipes
from torchx_datapipes.queue import open_queue
from torchx_datapipes.queue.ledger import Ledger

pytestmark = pytest.mark.e2e

REPO = str(Path(torchx_datapipes.__file__).resolve().parents[1])
TRAINER = str(Path(__file__).with_name("queue_e2e_trainer.py"))
FN = (
    "import torch\n\ndef f(r):\n"
    "    return {'id': r['id'], 'x': torch.full((3, 4), r['id'] % 7, dtype=torch.float64)}\n"
)


def env(**extra: str) -> Dict[str, str]:
    path = os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")]))  # this checkout's package
    return {**os.environ, "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}", "PYTHONPATH": path, **extra}


def start_trainer(url: str, out: Path, restarts: int = 0, **extra: str) -> "subprocess.Popen[bytes]":
    out.mkdir(parents=True, exist_ok=True)
    cmd = [os.path.join(VENV_BIN, "torchrun"), "--standalone", "--nproc_per_node", "2",
           "--max_restarts", str(restarts), TRAINER, url, str(out)]  # fmt: skip
    log = open(out / "trainer.log", "wb")
    return subprocess.Popen(cmd, cwd=out, env=env(**extra), stdout=log, stderr=subprocess.STDOUT)


def wait_for(cond, timeout: float, what: str, proc: Optional["subprocess.Popen[bytes]"] = None) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: the trainer exited with {proc.returncode} first")
        assert time.monotonic() < deadline, f"{what}: not within {timeout}s"
        time.sleep(0.05)


# the producer rank that reaches record 100 (in the smallest unit, claimed last) dies in the first attempt
KILLER = (
    "import os, signal\nimport torch\n\ndef f(r):\n"
    "    if r['id'] == 100 and os.environ.get('TORCHELASTIC_RESTART_COUNT') == '0':\n"
    "        os.kill(os.getpid(), signal.SIGKILL)\n"
    "    return {'id': r['id'], 'x': torch.full((3, 4), r['id'] % 7, dtype=torch.float64)}\n"
)


def produce_args(url: str, fn: str = "f.py:f", *extra: str) -> List[str]:
    return ["run", "-s", "local_cwd", "datapipes.transform", "--fn", fn, "--input", "data",
            "--output", url, "--state", "state", "-j", "1x2", "--unit_mb", "0.02", *extra]  # fmt: skip


def produce(project: Path, url: str) -> "subprocess.CompletedProcess[str]":
    return run_torchx(produce_args(url), project, env=env(), timeout=300)


def ids(out: Path) -> List[int]:
    return [int(x) for p in sorted(glob.glob(str(out / "ids-*.txt"))) for x in Path(p).read_text().split()]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    make_dataset(tmp_path / "data", [500] * 8)
    (tmp_path / "f.py").write_text(FN)
    return tmp_path


def test_trainer_consumes_a_running_producer_job_exactly_once(project: Path) -> None:
    url = f"redis://127.0.0.1:6379/0?stream=tdpe_{uuid.uuid4().hex[:10]}&block_s=0.05"
    out = project / "trainer"
    trainer = start_trainer(url, out)
    try:
        wait_for(lambda: len(glob.glob(str(out / "ready-*"))) == 2, 60, "trainer ranks ready", trainer)
        r = produce(project, url)
        assert r.returncode == 0, r.stderr[-3000:]
        assert trainer.wait(timeout=120) == 0, (out / "trainer.log").read_text()[-3000:]
    finally:
        if trainer.poll() is None:
            trainer.kill()
    got = ids(out)
    assert sorted(got) == list(range(4000))  # exactly once over 2 ranks x 2 workers
    assert len(glob.glob(str(out / "done-*.json"))) == 2  # both ranks' iteration ended by itself
    from torchx_datapipes.data import QueueDataset

    stats = QueueDataset(url).stats()
    assert stats["delivered"] == 4000 and stats["duplicates"] == 0 and stats["redelivered"] == 0
    assert stats["consumers"] == 4 and stats["finished"]
    with open_queue(url) as b:
        b.delete()


def test_consumer_rank_killed_producer_rank_killed_and_broker_restarted(
    project: Path, tmp_path: Path
) -> None:
    """A trainer rank dies (torchrun restarts the trainer), a producer rank dies (torchrun restarts the
    producer, which resumes without republishing committed units) and Redis restarts, all mid-stream."""
    (project / "killer.py").write_text(KILLER)
    data = tmp_path / "redis-data"
    data.mkdir()
    server = start_redis("--appendonly", "yes", "--appendfsync", "always", "--dir", str(data))
    url = f"redis://{server.address}/0?stream=tdpe_fault&block_s=0.05&claim_after_s=2&batch=32"
    out = project / "trainer"
    trainer = start_trainer(url, out, restarts=1, TDP_KILL_RANK1_AFTER="300", TDP_SLEEP_S="0.002")
    try:
        wait_for(lambda: len(glob.glob(str(out / "ready-*-a0"))) == 2, 60, "trainer ranks ready", trainer)
        producer = subprocess.Popen(
            [os.path.join(VENV_BIN, "torchx"), *produce_args(url, "killer.py:f", "--max_restarts", "1")],
            cwd=project, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            watcher = Ledger(open_queue(url), "train")

            def done() -> int:
                watcher.refresh()
                return sum(watcher.done_by_job.values())

            wait_for(
                lambda: glob.glob(str(out / "ready-*-a1")) and done() >= 1500, 120, "records after the kill"
            )
            server.restart()  # persisted with appendfsync always: nothing acknowledged is lost
            watcher.broker.close()
            assert producer.wait(timeout=180) == 0, producer.stdout.read()[-3000:] if producer.stdout else ""
        finally:
            if producer.poll() is None:
                producer.kill()
        assert trainer.wait(timeout=180) == 0, (out / "trainer.log").read_text()[-3000:]
        from torchx_datapipes.data import QueueDataset

        stats = QueueDataset(url).stats()  # the group's counters, from the log the restarted broker kept
    finally:
        if trainer.poll() is None:
            trainer.kill()
        server.cleanup()
    got = ids(out)
    assert set(got) == set(range(4000))  # no record lost
    assert len(glob.glob(str(out / "done-*-a1.json"))) == 2  # the restarted ranks ended by themselves
    extra = len(got) - len(set(got))
    assert extra <= stats["redelivered"], (extra, stats)  # duplicates: only in-flight records, counted
    assert stats["finished"] and stats["records_done"] == 4000
    manifest = json.loads((project / "state" / "_SUCCESS").read_text())
    attempts = [u["attempt"] for u in manifest["units"]]
    assert 0 in attempts and 1 in attempts, attempts  # the producer was restarted after committing units
    republished = sum(u["records_out"] for u in manifest["units"] if u["attempt"] == 1)
    # copies only of units that had not committed; the killed trainer rank's messages done but not yet
    # acked come back to the others as stale redeliveries, dropped and counted apart (a CI run under load
    # saw 256 dropped against 253 republished when both were one counter)
    assert stats["duplicates"] <= republished, (republished, stats)
