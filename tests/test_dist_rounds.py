"""``runner.dist.agree_round``: the ranks of a rendezvous round agree on a key space no earlier round
used, on a real TCPStore, even when an earlier round left keys behind or lost a rank early."""

import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List

import orjson
import pytest
import torch.distributed as dist
from tdp_testutil import make_dataset, run_op

from torchx_datapipes.errors import DatapipesError
from torchx_datapipes.runner.dist import Dist, agree_round


@pytest.fixture(autouse=True)
def keep_signals() -> Iterator[None]:
    """A run under a (fake) torchrun ignores SIGTERM/SIGINT after its commit: give pytest them back."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for s, h in saved.items():
        signal.signal(s, h)


def _store(port: int = 0, master: bool = False) -> Any:
    return dist.TCPStore("127.0.0.1", port, 1, is_master=master, wait_for_workers=False)


def _round(server: Any, world: int, ranks: List[int], timeout_s: float = 10.0) -> Dict[int, Any]:
    got: Dict[int, Any] = {}

    def one(rank: int) -> None:
        try:
            got[rank] = agree_round(_store(server.port), rank, world, timeout_s)
        except Exception as e:  # collected and asserted by the caller
            got[rank] = e

    threads = [threading.Thread(target=one, args=(r,)) for r in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s + 5)
    return got


def test_every_round_gets_a_fresh_number_all_ranks_agree() -> None:
    server = _store(master=True)
    seen = []
    for world in (2, 3, 1, 2):
        got = _round(server, world, list(range(world)))
        assert len(set(got.values())) == 1, got
        seen.append(got[0])
    assert seen == [1, 2, 3, 4]


def test_stale_hello_of_a_dead_rank_does_not_confuse_the_next_round() -> None:
    server = _store(master=True)
    # an earlier round: rank 1 said hello and died before rank 0 answered; rank 0 never ran
    server.set("/tdp/hello/1", "deadbeef-1")
    server.add("/tdp/rounds", 1)
    got = _round(server, 2, [0, 1])
    assert got == {0: 2, 1: 2}, got
    # a bigger round right after: agreed again, on the next number
    got = _round(server, 3, [0, 1, 2])
    assert got == {0: 3, 1: 3, 2: 3}, got


def test_a_missing_rank_is_named_after_the_timeout() -> None:
    server = _store(master=True)
    got = _round(server, 3, [0, 1], timeout_s=1.0)
    assert isinstance(got[0], DatapipesError) and "ranks [2]" in str(got[0]), got
    assert got[1] == 1  # rank 1 was answered; only rank 0 waits for the missing one


def test_first_round_is_false_after_a_restart_or_a_new_round() -> None:
    assert Dist(round=1).first_round and Dist().first_round
    assert not Dist(round=2).first_round
    assert not Dist(restart=1, round=1).first_round


@pytest.mark.parametrize("agent_store", ["True", "False"])
def test_init_under_torchrun_in_both_store_modes(monkeypatch: pytest.MonkeyPatch, agent_store: str) -> None:
    """World of one under torchrun: with the agent's store it connects, else rank 0 hosts one."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = _store(port, master=True) if agent_store == "True" else None
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(server.port if server else port))
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "t")
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", agent_store)
    d = Dist()
    d.init(timeout_s=5)
    assert d.round == 1 and d.store is None and not d.initialized


@pytest.mark.parametrize("later_round", [False, True])
def test_overwrite_clears_only_in_the_first_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], later_round: bool
) -> None:
    """A membership change keeps ``TORCHELASTIC_RESTART_COUNT`` at 0: rank 0 of the new round finds
    the lease its job left behind (SIGTERM does not release it) and must resume, not clear."""
    make_dataset(tmp_path / "d", [10, 10, 10])
    out = tmp_path / "out"
    run_op("transform", str(tmp_path / "d/*.jsonl"), out, "--unit_mb", "0.001", fn=_identity)
    (out / "_SUCCESS").unlink()  # committed units, no manifest: a job stopped mid-run
    (out / "_LEASE").unlink(missing_ok=True)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "app-elastic")
    if later_round:
        body = {"job_id": "app-elastic", "host": socket.gethostname(), "pid": os.getpid(), "token": "t0",
                "heartbeat": time.time()}  # fmt: skip
        (out / "_LEASE").write_bytes(orjson.dumps(body))
    capfd.readouterr()
    m = run_op("transform", str(tmp_path / "d/*.jsonl"), out, "--unit_mb", "0.001", "--overwrite", "True",
               fn=_identity)  # fmt: skip
    err = capfd.readouterr().err
    assert m["records_out"] == 30
    assert ("resumed: skipped" in err) == later_round, err


def _identity(r: Any) -> Any:
    return r
