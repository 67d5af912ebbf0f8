"""Commit safety in-process: verified resume, error-rate default, disk-full clean-up, plan once, lease."""

import errno
import json
import os
import signal
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import orjson
import pytest
from fsspec.implementations.local import LocalFileOpener
from tdp_testutil import canon, make_dataset, read_output, run_op

from torchx_datapipes.errors import DatapipesError, OutputExistsError
from torchx_datapipes.io import lease as lease_mod
from torchx_datapipes.io.lease import LeaseHeldError, LeaseLostError
from torchx_datapipes.runner import commit as commit_mod
from torchx_datapipes.runner.badrecords import OnError
from torchx_datapipes.runner.dist import Dist
from torchx_datapipes.runner.engine import Engine, RunConfig
from torchx_datapipes.runner.transform import TransformOp


def identity(r: Any) -> Any:
    return r


def always_fails(r: Any) -> Any:
    raise ValueError(f"bad record {r['id']}")


def transform(tmp: Path, inp: str, out: str, *extra: str, fn: Any = identity) -> Dict[str, Any]:
    return run_op("transform", inp, tmp / out, "--unit_mb", "0.001", *extra, fn=fn)


def lines_present(out: Path) -> int:
    return sum(len(p.read_bytes().splitlines()) for p in out.glob("part-*.jsonl"))


def no_tmp_files(root: Path) -> List[str]:
    return [str(p) for p in root.rglob(".tmp-*")]


# -- item 4: committed parts are verified ------------------------------------------------------
def test_resume_redoes_a_deleted_part_and_a_garbage_part(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    recs = make_dataset(tmp_path / "d", [60, 45])
    out = tmp_path / "out"
    first = transform(tmp_path, str(tmp_path / "d/*.jsonl"), "out")
    assert len(first["units"]) >= 4
    unit = json.loads((out / "_units/00000.json").read_text())
    assert unit["files"][0]["path"] == "part-00000.jsonl" and unit["files"][0]["size"] > 0
    assert len(unit["files"][0]["xxh3_128"]) == 32
    # the job "crashed" before _SUCCESS; meanwhile one part vanished and two were damaged
    (out / "_SUCCESS").unlink()
    (out / "part-00001.jsonl").unlink()
    size = (out / "part-00002.jsonl").stat().st_size
    (out / "part-00002.jsonl").write_bytes(b"x" * size)  # same size: only the checksum can tell
    (out / "part-00003.jsonl").write_bytes(b'{"garbage": true}\n')
    capfd.readouterr()
    m = transform(tmp_path, str(tmp_path / "d/*.jsonl"), "out")
    err = capfd.readouterr().err
    assert "redoing committed unit 00001" in err and "part-00001.jsonl is missing" in err
    assert "redoing committed unit 00002" in err and "checksum" in err
    assert "redoing committed unit 00003" in err and "bytes, the commit record says" in err
    assert canon(read_output(out)) == canon(recs)
    assert m["records_out"] == lines_present(out) == len(recs) == m["records_in"]


def test_final_commit_fails_naming_a_part_that_vanished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_dataset(tmp_path / "d", [30, 20])
    out = tmp_path / "out"
    original = Engine.run_pass

    def run_then_lose_a_part(self: Engine, pass_name: str, fn: Any) -> None:
        original(self, pass_name, fn)
        (out / "part-00001.jsonl").unlink()

    monkeypatch.setattr(Engine, "run_pass", run_then_lose_a_part)
    with pytest.raises(DatapipesError, match=r"part-00001\.jsonl is missing"):
        transform(tmp_path, str(tmp_path / "d/*.jsonl"), "out")
    assert not (out / "_SUCCESS").exists()


def test_stats_partial_and_errors_part_are_verified_on_resume(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    (d / "a.jsonl").write_bytes(b'{"v": 1}\nnot json\n{"v": 3}\n')
    first = run_op("stats", str(d / "a.jsonl"), tmp_path / "s", "--on_error", "skip", "--max_error_rate", "1")
    meta = json.loads((tmp_path / "s/_units/00000.json").read_text())
    assert {f["path"] for f in meta["files"]} == {"_units/00000.stats", "_errors/part-00000.jsonl"}
    (tmp_path / "s/_SUCCESS").unlink()
    (tmp_path / "s/_units/00000.stats").write_bytes(b"garbage")
    again = run_op("stats", str(d / "a.jsonl"), tmp_path / "s", "--on_error", "skip", "--max_error_rate", "1")
    assert again["records_in"] == first["records_in"] == 3 and again["bad"] == 1
    assert json.loads((tmp_path / "s/stats.json").read_text())["records"] == 2


# -- item 8: the error-rate default ------------------------------------------------------------
def test_all_bad_records_fail_by_default_and_pass_with_max_error_rate_1(tmp_path: Path) -> None:
    make_dataset(tmp_path / "d", [20])
    with pytest.raises(DatapipesError) as info:
        transform(tmp_path, str(tmp_path / "d/*.jsonl"), "o1", "--on_error", "skip", fn=always_fails)
    msg = str(info.value)
    assert "20 of 20 records were bad" in msg and "--max_error_rate 0.1" in msg
    assert str(tmp_path / "o1/_errors") in msg and "rerun with a higher --max_error_rate" in msg
    assert not (tmp_path / "o1/_SUCCESS").exists()
    m = transform(
        tmp_path,
        str(tmp_path / "d/*.jsonl"),
        "o2",
        "--on_error",
        "skip",
        "--max_error_rate",
        "1.0",
        fn=always_fails,
    )
    assert (m["records_in"], m["bad"], m["records_out"]) == (20, 20, 0)


def test_lost_bytes_count_against_the_error_rate(tmp_path: Path) -> None:
    metas = [{"records_in": 100, "bad": 0, "lost_bytes": 300}, {"records_in": 0, "bad": 0}]
    with pytest.raises(DatapipesError, match="300 of 1,000 input bytes were lost"):
        commit_mod.check_error_rate(metas, 1000, 0.1, str(tmp_path))
    assert commit_mod.check_error_rate(metas, 1000, 0.5, str(tmp_path)) == pytest.approx(0.3)


# -- item 13: disk full ------------------------------------------------------------------------
def _fail_writes_to(monkeypatch: pytest.MonkeyPatch, needle: str) -> None:
    original = LocalFileOpener.write

    def write(self: LocalFileOpener, *args: Any, **kwargs: Any) -> Any:
        if needle in self.path:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(LocalFileOpener, "write", write)


def test_disk_full_in_a_worker_names_the_part_and_leaves_no_temp_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_dataset(tmp_path / "d", [40, 40])
    _fail_writes_to(monkeypatch, "part-00003.jsonl")
    with pytest.raises(OSError) as info:
        transform(tmp_path, str(tmp_path / "d/*.jsonl"), "out", "--num_workers", "2")
    assert info.value.errno == errno.ENOSPC
    assert f"No space left on device while writing {tmp_path / 'out/part-00003.jsonl'}" in str(info.value)
    assert no_tmp_files(tmp_path / "out") == []
    assert not (tmp_path / "out/_SUCCESS").exists() and not (tmp_path / "out/_LEASE").exists()


@pytest.mark.parametrize(
    "op,needle", [("transform", "_errors/"), ("stats", ".stats"), ("transform", "_units/")]
)
def test_disk_full_on_side_files_names_them_and_leaves_no_temp_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, op: str, needle: str
) -> None:
    d = tmp_path / "d"
    d.mkdir()
    (d / "a.jsonl").write_bytes(b'{"v": 1}\nnot json\n' * 20)
    _fail_writes_to(monkeypatch, needle)
    extra = ("--on_error", "skip", "--max_error_rate", "1", "--num_workers", "2", "--unit_mb", "0.0001")
    with pytest.raises(OSError, match=f"No space left on device while writing {tmp_path / 'out'}/.*{needle}"):
        run_op(op, str(d / "a.jsonl"), tmp_path / "out", *extra, fn=identity if op == "transform" else None)
    assert no_tmp_files(tmp_path / "out") == []


def test_a_failing_close_of_a_part_names_it_and_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_dataset(tmp_path / "d", [10])
    original = LocalFileOpener.close

    def close(self: LocalFileOpener) -> None:
        original(self)
        if "part-00000" in self.path:
            raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))

    monkeypatch.setattr(LocalFileOpener, "close", close)
    with pytest.raises(OSError, match=f"quota exceeded while writing {tmp_path / 'out/part-00000.jsonl'}"):
        transform(tmp_path, str(tmp_path / "d/*.jsonl"), "out")
    assert no_tmp_files(tmp_path / "out") == [] and not (tmp_path / "out/part-00000.jsonl").exists()


# -- item 5: plan once -------------------------------------------------------------------------
class FakeDist(Dist):
    """Two ranks in one process: the store is a dict, barriers are no-ops."""

    def init(self, timeout_s: float = 0.0) -> None:
        self.initialized = True

    def barrier(self, timeout_s: float) -> None:
        pass

    def close(self) -> None:
        pass


class DictStore:
    def __init__(self) -> None:
        self.data: Dict[str, bytes] = {}

    def set(self, key: str, value: bytes) -> None:
        self.data[key] = value

    def get(self, key: str) -> bytes:
        return self.data[key]

    def wait(self, keys: List[str], timeout: Any) -> None:
        if not all(k in self.data for k in keys):
            raise RuntimeError(f"Wait timeout after {timeout}")


def engine_for(rank: int, store: DictStore, inp: Path, out: Path) -> Engine:
    cfg = RunConfig(op="transform", inputs=(str(inp),), output=str(out), sha256="x", unit_mb=0.001)
    dist = FakeDist(rank=rank, world_size=2, store=store, initialized=True)
    return Engine(cfg, TransformOp(identity, str(out), "jsonl", OnError.RAISE), dist=dist)


def test_every_rank_uses_rank0s_plan_even_if_the_input_grows(tmp_path: Path) -> None:
    make_dataset(tmp_path / "d", [50])
    inp, out = tmp_path / "d/part-0.jsonl", tmp_path / "out"
    store = DictStore()
    rank0 = engine_for(0, store, inp, out)
    rank0.plan()
    try:
        with inp.open("ab") as fh:  # appended while rank 1 was still starting
            fh.write(b'{"id": 999}\n' * 100)
        rank1 = engine_for(1, store, inp, out)
        rank1.plan()
        assert rank1.units == rank0.units and rank1.inputs == rank0.inputs
        assert rank1.fingerprint == rank0.fingerprint
        assert rank1.inputs[0][1] < inp.stat().st_size
    finally:
        assert rank0.lease is not None
        rank0.lease.release()


def test_a_planning_failure_on_rank0_fails_the_other_ranks_at_once(tmp_path: Path) -> None:
    store = DictStore()
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(FileNotFoundError):
        engine_for(0, store, missing, tmp_path / "out").plan()
    with pytest.raises(
        DatapipesError, match=r"rank 0 could not start the job: FileNotFoundError: .*nope\.jsonl"
    ):
        engine_for(1, store, missing, tmp_path / "out").plan()


@pytest.fixture
def keep_signals() -> Iterator[None]:
    """Runs under a (fake) torchrun ignore SIGTERM/SIGINT after the commit: give pytest its handlers back."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for s, h in saved.items():
        signal.signal(s, h)


def test_a_rank0_that_never_plans_times_out_with_a_message(tmp_path: Path) -> None:
    make_dataset(tmp_path / "d", [5])
    with pytest.raises(DatapipesError, match="rank 0 did not share 'plan' within .* raise --timeout_s"):
        engine_for(1, DictStore(), tmp_path / "d/part-0.jsonl", tmp_path / "out").plan()


# -- item 12: the output lease ------------------------------------------------------------------
def write_lease(out: Path, job: str, pid: int, age_s: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    body = {"job_id": job, "host": lease_mod.socket.gethostname(), "pid": pid, "token": "t0",
            "heartbeat": time.time() - age_s}  # fmt: skip
    (out / "_LEASE").write_bytes(orjson.dumps(body))


def test_a_live_lease_refuses_a_second_job_naming_the_owner(tmp_path: Path) -> None:
    make_dataset(tmp_path / "d", [10])
    write_lease(tmp_path / "out", "other-job-42", os.getpid(), age_s=1.0)
    with pytest.raises(LeaseHeldError) as info:
        transform(tmp_path, str(tmp_path / "d/*.jsonl"), "out")
    msg = str(info.value)
    assert "job other-job-42" in msg and f"pid {os.getpid()}" in msg
    assert "a lease older than 60s is taken over" in msg
    assert not list((tmp_path / "out").glob("part-*")) and not (tmp_path / "out/_units").exists()
    assert json.loads((tmp_path / "out/_LEASE").read_text())["job_id"] == "other-job-42"


@pytest.mark.parametrize("age_s,pid", [(3600.0, os.getpid()), (1.0, 2**22 + 12345)], ids=["stale", "dead"])
def test_a_stale_or_dead_lease_is_taken_over(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], age_s: float, pid: int
) -> None:
    recs = make_dataset(tmp_path / "d", [10])
    write_lease(tmp_path / "out", "dead-job", pid, age_s=age_s)
    transform(tmp_path, str(tmp_path / "d/*.jsonl"), "out")
    assert "taking over the output lease of job dead-job" in capfd.readouterr().out
    assert canon(read_output(tmp_path / "out")) == canon(recs)
    assert not (tmp_path / "out/_LEASE").exists() and not list((tmp_path / "out").glob("_LEASE*"))


def test_a_restart_of_the_same_job_reuses_its_lease(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keep_signals: None
) -> None:
    make_dataset(tmp_path / "d", [10])
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "app-7")
    write_lease(tmp_path / "out", "app-7", os.getpid(), age_s=1.0)
    m = transform(tmp_path, str(tmp_path / "d/*.jsonl"), "out")
    assert m["records_out"] == 10 and m["job"]["run_id"] == "app-7"


def test_heartbeat_refreshes_and_a_lost_lease_blocks_the_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(lease_mod.HEARTBEAT_ENV, "0.05")
    out = str(tmp_path / "out")
    held = lease_mod.Lease.acquire(out, job="a")
    held.start_heartbeat()
    try:
        first = lease_mod.read_holder(out)
        deadline = time.time() + 10
        while (now := lease_mod.read_holder(out)) is not None and first is not None:
            if now.heartbeat > first.heartbeat or time.time() > deadline:
                break
            time.sleep(0.02)
        assert now is not None and first is not None and now.heartbeat > first.heartbeat
        held.check()
        write_lease(tmp_path / "out", "b", os.getpid(), age_s=0.0)  # another job took over
        with pytest.raises(LeaseLostError, match="now held by job b"):
            held.check()
    finally:
        held.release()
    assert lease_mod.read_holder(out) is not None  # b's lease stays


# -- item 11(c): a restarted rank that finds its own job complete succeeds ------------------------
def test_restarted_rank_finds_its_own_output_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], keep_signals: None
) -> None:
    make_dataset(tmp_path / "d", [10])
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "app-1")
    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN
    first = transform(tmp_path, str(tmp_path / "d/*.jsonl"), "out")
    # item 11(b): _SUCCESS is in place, so a late SIGTERM/SIGINT no longer fails the rank
    assert (
        signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    )
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    capfd.readouterr()
    again: Optional[Dict[str, Any]] = transform(tmp_path, str(tmp_path / "d/*.jsonl"), "out")
    assert "output already complete" in capfd.readouterr().err
    assert again == first
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "app-2")  # a different job, restarted or not: refused
    with pytest.raises(OutputExistsError, match="--overwrite True"):
        transform(tmp_path, str(tmp_path / "d/*.jsonl"), "out")
    # The same job at restart 0 (a requeued Slurm job, a round after a membership change, which does
    # not count as a restart): complete on every rank alike, --overwrite or not. Before, rank 0 refused
    # or (with --overwrite) ran the job again while the other ranks returned: it waited for them 300 s.
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "app-1")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    for extra in ((), ("--overwrite", "True")):
        capfd.readouterr()
        assert transform(tmp_path, str(tmp_path / "d/*.jsonl"), "out", *extra) == first
        assert "output already complete" in capfd.readouterr().err


def test_split_resume_redoes_a_damaged_parquet_part(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    import pyarrow.parquet as pq

    make_dataset(tmp_path / "d", [80, 60])
    args = ("--fractions", "train=0.8,val=0.2", "--stratify", "label", "--output_format", "parquet")
    args += ("--unit_mb", "0.002")
    first = run_op("split", str(tmp_path / "d"), tmp_path / "o", *args)
    out = tmp_path / "o"
    meta = json.loads((out / "_units/00001.json").read_text())
    parts = [  # block sums beside them, and the split profile
        f["path"]
        for f in meta["files"]
        if not f["path"].endswith(".sums") and not f["path"].startswith("_units/")
    ]
    assert parts == ["train/part-00001.parquet", "val/part-00001.parquet"]
    (out / "_SUCCESS").unlink()
    (out / "train/part-00001.parquet").write_bytes(b"PAR1 garbage PAR1")
    capfd.readouterr()
    again = run_op("split", str(tmp_path / "d"), tmp_path / "o", *args)
    err = capfd.readouterr().err
    assert "redoing committed unit 00001 (" in err and "train/part-00001.parquet" in err
    assert "redoing committed unit 00000 (" not in err
    assert again["splits"] == first["splits"]
    rows = sum(pq.read_table(p).num_rows for p in out.glob("*/part-*.parquet"))
    assert rows == again["records_out"] == 140


def test_handstarted_torchrun_jobs_without_rdzv_id_are_told_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    assert lease_mod.run_identity() is None
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "app-3")
    assert lease_mod.run_identity() == lease_mod.job_id() == "app-3"
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")  # torchrun's default: the same in every job
    assert lease_mod.run_identity() == f"none@{lease_mod.socket.gethostname()}:{os.getppid()}"


def test_a_live_lease_is_refused_on_the_client_before_launch(tmp_path: Path) -> None:
    """The component refuses an output a live job writes, before packaging or launch; a dead lease is fine."""
    from torchx_datapipes import components
    from torchx_datapipes.appdef import InvalidArgumentError

    make_dataset(tmp_path / "d", [3])
    write_lease(tmp_path / "out", "other-job-42", os.getpid(), age_s=1.0)
    args = dict(input=str(tmp_path / "d"), output=str(tmp_path / "out"), artifact_store=str(tmp_path / "s"))
    with pytest.raises(InvalidArgumentError, match="being written by job other-job-42"):
        components.transform(fn="os.path:basename", backend="module", **args)
    assert not (tmp_path / "s").exists()
    write_lease(tmp_path / "out", "dead-job", 2**22 + 12345, age_s=1.0)
    app = components.transform(fn="os.path:basename", backend="module", **args)
    assert app.roles[0].entrypoint


def test_a_lease_whose_rank0_is_a_zombie_is_dead(tmp_path: Path) -> None:
    """A killed rank 0 whose agent died too stays a zombie until reaped: its lease is a dead job's."""
    import subprocess

    from torchx_datapipes.io.lease import refuse_if_held

    child = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline, "the child never exited"
        time.sleep(0.01)
    try:
        write_lease(tmp_path / "out", "zombie-job", child.pid, age_s=1.0)
        refuse_if_held(str(tmp_path / "out"))  # no LeaseHeldError: the holder has exited
    finally:
        child.wait()
