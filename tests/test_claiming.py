"""Dynamic unit claiming in-process: local counters shared by forked workers, largest first."""

import io
import json
import os
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
from tdp_testutil import make_dataset, part_bytes, run_op

from torchx_datapipes.formats.planning import Unit
from torchx_datapipes.options import OptionError
from torchx_datapipes.runner.badrecords import RecordError
from torchx_datapipes.runner.claim import Claimer, LocalCounters, StoreCounters, claim_order, counter_names
from torchx_datapipes.runner.dist import Dist
from torchx_datapipes.runner.main import summary
from torchx_datapipes.runner.progress import JobProgress, Progress

SIZES = [300, 20, 40, 10, 120, 5, 60, 30]  # records per file: very different units


def upper(r: Dict[str, Any]) -> Any:
    return {**r, "text": r["text"].upper()}


def unit_records(out: Path) -> List[Dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((out / "_units").glob("*.json"))]


def test_claim_order_is_largest_first_ties_by_index() -> None:
    units = [Unit(i, f"f{i}", n) for i, n in enumerate([5, 9, 5, 1, 9])]
    assert [u.index for u in claim_order(units)] == [1, 4, 0, 2, 3]


def test_local_claimer_hands_every_unit_out_once() -> None:
    units = [Unit(i, f"f{i}", 10 + i) for i in range(7)]
    counters = LocalCounters(counter_names("main"))
    a = Claimer(units, "main", "dynamic", counters, 0, 2)
    b = Claimer(units, "main", "dynamic", counters, 1, 2)
    ia, ib = iter(a), iter(b)
    got = [next(ia).index, next(ib).index, next(ib).index, next(ia).index]
    got += [u.index for u in ia] + [u.index for u in ib]
    assert got == [6, 5, 4, 3, 2, 1, 0]  # interleaved claims of one order, nothing twice
    static = Claimer(units, "main", "static", None, 1, 3)
    assert [u.index for u in static] == [1, 4]  # today's units[slot::slots]


def test_two_workers_claim_dynamically_and_output_is_identical(tmp_path: Path) -> None:
    inp = str(tmp_path / "d/*.jsonl")
    make_dataset(tmp_path / "d", SIZES)
    one = run_op("transform", inp, tmp_path / "one", "--assign", "static", fn=upper)
    two = run_op("transform", inp, tmp_path / "two", "--num_workers", "2", fn=upper)
    assert part_bytes(tmp_path / "two") == part_bytes(tmp_path / "one")
    assert two["assign"] == "dynamic" and one["assign"] == "static"
    recs = unit_records(tmp_path / "two")
    assert sorted(r["unit"]["index"] for r in recs) == list(range(len(SIZES)))
    assert {r["slot"] for r in recs} <= {0, 1} and all(r["rank"] == 0 for r in recs)
    assert all(r["worker"] == r["slot"] and r["attempt"] == 0 for r in recs)
    assert sum(two["slots"].values()) == len(SIZES) and set(two["slots"]) <= {"0", "1"}
    assert one["slots"] == {"0": len(SIZES)}
    assert [u["slot"] for u in two["units"]] == [r["slot"] for r in recs]  # the manifest says who ran what
    assert "units run per slot (dynamic): slot " in summary(two)
    assert two["job"]["fingerprint"] == one["job"]["fingerprint"]  # assign is not part of the job


def test_a_static_run_resumes_dynamically_without_recomputing(tmp_path: Path) -> None:
    make_dataset(tmp_path / "d", [4, 4, 4])
    calls = tmp_path / "calls"
    calls.mkdir()

    def flaky(r: Dict[str, Any]) -> Any:
        (calls / str(r["id"])).touch()
        if r["id"] == 9 and not (calls / "healed").exists():
            raise RuntimeError("transient")
        return r

    inp = str(tmp_path / "d/*.jsonl")
    with pytest.raises(RecordError):
        run_op("transform", inp, tmp_path / "out", "--assign", "static", fn=flaky)
    assert sorted(p.name for p in (tmp_path / "out/_units").glob("*.json")) == ["00000.json", "00001.json"]
    for p in calls.iterdir():
        p.unlink()
    (calls / "healed").touch()
    m = run_op("transform", inp, tmp_path / "out", "--num_workers", "2", fn=flaky)
    assert {p.name for p in calls.iterdir()} == {"healed", "8", "9", "10", "11"}
    assert m["records_out"] == 12 and m["assign"] == "dynamic"


def test_assign_is_checked(tmp_path: Path) -> None:
    make_dataset(tmp_path / "d", [3])
    with pytest.raises(OptionError, match=r"--assign must be one of dynamic, static; got 'random'"):
        run_op("transform", str(tmp_path / "d/*.jsonl"), tmp_path / "o", "--assign", "random", fn=upper)


def test_job_progress_reads_the_shared_counters() -> None:
    counters = LocalCounters(counter_names("main"))
    for name, n in (("units", 3), ("records", 5000), ("bytes", 250_000)):
        counters.add(f"main/{name}", n)
    now = [100.0]
    out = io.StringIO()
    jp = JobProgress("main job", "main", counters, 12, 1_000_000, 0.01, out=out, clock=lambda: now[0])
    now[0] = 110.0
    line = jp.line(*jp.read(), now[0])
    assert line == "[main job] 3/12 units, 5,000 records, 500 rec/s, 25% of 1.0 MB, ETA 30s"
    jp.start()
    jp.stop()


def test_in_process_progress_lines_are_job_wide(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from torchx_datapipes import artifact
    from torchx_datapipes.runner.main import main

    make_dataset(tmp_path / "d", SIZES)
    ref = artifact.package(slow_upper, str(tmp_path / "store"))
    main(["transform", "--input", str(tmp_path / "d/*.jsonl"), "--output", str(tmp_path / "o"),
          "--artifact", ref.url, "--num_workers", "2", "--progress_s", "0.05"])  # fmt: skip
    err = capsys.readouterr().err
    assert f"/{len(SIZES)} units," in err and "[main job]" in err
    assert "units run per slot (dynamic)" in err


def slow_upper(r: Dict[str, Any]) -> Any:
    import time

    time.sleep(0.0005)
    return {**r, "text": r["text"].upper()}


def _claim_in_child(counters: StoreCounters, units: List[Unit], slot: int, q: Any) -> None:
    claimer = Claimer(units, "main", "dynamic", counters, slot, 2)
    got = []
    for u in claimer:
        got.append(u.index)
        claimer.report(10, 1, u.nbytes)
    q.put((slot, os.getpid(), got, counters.store() is not PARENT_STORE[0]))


PARENT_STORE: List[Any] = [None]


def _store_master(monkeypatch: pytest.MonkeyPatch) -> Tuple[Any, int]:
    """A TCPStore server on a free port, as torchrun's, with MASTER_ADDR/MASTER_PORT pointing at it."""
    import socket
    from datetime import timedelta

    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    master = dist.TCPStore("127.0.0.1", port, None, is_master=True, timeout=timedelta(seconds=30))
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    return master, port


def test_store_claimer_reconnects_after_fork(monkeypatch: pytest.MonkeyPatch) -> None:
    """The store backend as under torchrun: forked slots open their own client with the round's prefix."""
    import multiprocessing as mp

    import torch.distributed as dist

    master, port = _store_master(monkeypatch)
    parent = dist.PrefixStore("/tdp/round_3", dist.TCPStore("127.0.0.1", port, None, is_master=False))
    PARENT_STORE[0] = parent
    counters = StoreCounters(parent, Dist(round=3).prefix, 30.0)
    units = [Unit(i, f"f{i}", 100 - i) for i in range(9)]
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_claim_in_child, args=(counters, units, s, q)) for s in (0, 1)]
    for p in procs:
        p.start()
    results = [q.get(timeout=30) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    claimed = sorted(i for _, _, got, _ in results for i in got)
    assert claimed == list(range(9))  # every unit once, over both slots
    assert all(own for *_, own in results)  # each child used a client of its own
    assert master.add("/tdp/round_3/claim/main/next", 0) == 9 + 2  # 9 claims, one past the end per slot
    jp = JobProgress("main job", "main", counters.fresh(), 9, sum(u.nbytes for u in units), 1.0)
    units_done, records, nbytes = jp.read()
    assert (units_done, records, nbytes) == (9, 90, sum(u.nbytes for u in units))
    assert not master.check(["claim/main/next"])  # nothing outside the attempt's prefix


def _claim_with_premade(counters: StoreCounters, units: List[Unit], slot: int, q: Any) -> None:
    from torchx_datapipes.runner import claim as claim_mod

    def refuse(*_: Any) -> Any:
        raise AssertionError("a forked worker built a store client")

    claim_mod.open_store = refuse  # type: ignore[assignment]  # this child only
    got = [u.index for u in Claimer(units, "main", "dynamic", counters, slot, 2)]
    q.put((slot, got))


def test_premade_clients_serve_forked_workers_without_a_new_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """A forked worker of a process that hosts the store must not build a client (it hung once, in CI)."""
    import multiprocessing as mp

    master, _ = _store_master(monkeypatch)
    parent = StoreCounters(master, Dist(round=1).prefix, 30.0)
    per_slot = parent.premade(2)
    assert len({id(c._store) for c in per_slot}) == 2 and all(c._store is not master for c in per_slot)
    units = [Unit(i, f"f{i}", 100 - i) for i in range(7)]
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_claim_with_premade, args=(per_slot[s], units, s, q)) for s in (0, 1)]
    for p in procs:
        p.start()
    results = [q.get(timeout=30) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    assert sorted(i for _, got in results for i in got) == list(range(7))


def test_no_option_is_a_prefix_of_torchx_runs_own() -> None:
    """argparse abbreviations see the whole command line: ``--assign`` must not shadow ``torchx run``'s."""
    import argparse

    from torchx.cli.cmd_run import CmdRun

    parser = argparse.ArgumentParser()
    CmdRun().add_arguments(parser)
    own = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
    from torchx_datapipes.ops import SPECS

    for spec in SPECS.values():
        for opt in spec.options:
            if opt.name == "h":  # dist.ddp's own named-resource option, kept as TorchX spells it
                continue
            clash = [o for o in own if o.startswith(f"--{opt.name}") and o != f"--{opt.name}"]
            assert not clash, f"{spec.op} --{opt.name} is a prefix of torchx run's {clash}"
    assert any(o.name == "assign" for o in SPECS["transform"].options)


def test_a_long_unit_reports_records_midway() -> None:
    shared: List[int] = []
    now = [0.0]
    p = Progress("main", 0, 0.0, clock=lambda: now[0], share=shared.append, share_s=1.0)
    p.update(100, 10)
    now[0] = 1.5
    p.update(50, 20)
    p.update(25, 30)
    assert shared == [150] and p.unshared() == 25 and p.unshared() == 0
