"""Dynamic claiming through real ``torchx run`` launches: skew, and kills with --max_restarts 1."""

import json
import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Set, Tuple

import pytest
from tdp_testutil import TORCHX, VENV_BIN, make_dataset, manifest, part_bytes, read_output, run_torchx

pytestmark = pytest.mark.e2e

FNS = textwrap.dedent(
    """
    import os
    import time

    from torchx_datapipes import pipeline

    def costly(rec):
        # the cost is keyed on a field; the big unit starts only once the other slot runs a small one, so
        # neither a late-starting rank nor load can make the assignment below depend on timing
        if rec["heavy"]:
            deadline = time.monotonic() + 120
            while not os.path.exists("small-started") and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.01)
        else:
            if not os.path.exists("small-started"):
                open("small-started", "w").close()
            time.sleep(0.0005)
        return rec

    @pipeline
    def counted(source):
        # marks its pid, and logs "first-id pid" when it has run a whole unit
        log = os.environ["TDP_TEST_LOG"]
        marker = os.path.join(log, "pids", str(os.getpid()))
        if not os.path.exists(marker):
            open(marker, "w").close()
        first = None
        gate = os.path.join(log, "gate")  # the test holds the job while this file exists
        for rec in source:
            if first is None:
                first = rec["id"]
            deadline = time.monotonic() + 120
            while os.path.exists(gate) and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.006)
            yield rec
        with open(os.path.join(log, "done.log"), "a") as fh:
            fh.write(f"{first} {os.getpid()}\\n")
    """
)


def _skewed(root: Path) -> None:
    """One big slow file (part-0) and eight small fast ones; static puts the big one and 4 more on slot 0."""
    recs = [{"id": i, "heavy": True, "text": "x" * 40} for i in range(240)]
    data = root / "data"
    data.mkdir(parents=True)
    (data / "part-0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    for k in range(1, 9):
        small = [{"id": 1000 * k + i, "heavy": False, "text": "y"} for i in range(100)]
        (data / f"part-{k}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in small))


def test_dynamic_gives_the_big_unit_a_slot_of_its_own(tmp_path: Path) -> None:
    """Skewed units: static puts the big unit and four small ones on slot 0; dynamic runs the big one
    alone while the other slot takes all eight small ones. (How much faster that is, is measured in
    benchmarks/bench_skew.py, not asserted here: wall times move with the machine's load.)"""
    _skewed(tmp_path)
    (tmp_path / "fns.py").write_text(FNS)
    walls: Dict[str, float] = {}
    for assign in ("static", "dynamic"):
        (tmp_path / "small-started").unlink(missing_ok=True)
        args = [
            "run", "-s", "local_cwd", "torchx_datapipes.components:transform", "--fn", "fns.py:costly",
            "--input", "data/*.jsonl", "--output", f"out/{assign}", "-j", "1x2", "--assign", assign,
        ]  # fmt: skip
        res = run_torchx(args, tmp_path)
        assert res.returncode == 0, res.stdout + res.stderr
        m = manifest(tmp_path / "out" / assign)
        assert m["assign"] == assign and sum(m["slots"].values()) == 9
        walls[assign] = m["wall_time_s"]
    print(f"wall time: {walls}")
    # static: slot 0 runs the big unit (2.4 s) and 4 small ones, slot 1 the other 4; dynamic: the big one
    # alone on a slot while the other runs the eight small ones (~0.05 s each)
    assert part_bytes(tmp_path / "out/dynamic") == part_bytes(tmp_path / "out/static")
    assert manifest(tmp_path / "out/static")["slots"] == {"0": 5, "1": 4}
    dyn = manifest(tmp_path / "out/dynamic")
    big = next(u for u in dyn["units"] if u["unit"] == 0)
    assert dyn["slots"][str(big["slot"])] == 1, dyn["slots"]  # the other slot took all the small ones


def _wait_for(cond: Any, proc: subprocess.Popen, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen (torchx exit {proc.poll()})")


def _running(pids: Path, units: Path, after: int) -> Callable[[], bool]:
    """Two live processes run the function and ``after`` units have committed."""
    return lambda: len(_alive(pids)) >= 2 and len(_committed(units)) >= after


def _committed(units: Path) -> List[Path]:
    """Committed unit records, not the ``.tmp-*`` names they are written under first."""
    return [u for u in units.glob("*.json") if not u.name.startswith(".")] if units.exists() else []


def _alive(pids: Path) -> List[int]:
    return [int(p.name) for p in sorted(pids.iterdir()) if Path(f"/proc/{p.name}").exists()]


def _completions(log: Path) -> List[Tuple[int, int]]:
    text = (log / "done.log").read_text() if (log / "done.log").exists() else ""
    return [(int(a), int(b)) for a, b in (line.split() for line in text.splitlines())]


def test_kills_with_dynamic_claiming_give_exact_output(tmp_path: Path) -> None:
    """Several trials in one test, each a real launch with --max_restarts 1."""
    recs = make_dataset(tmp_path / "data", [50] * 10)
    (tmp_path / "fns.py").write_text(FNS)
    first_ids = {50 * k for k in range(10)}
    trials = [  # (-j, num_workers, units committed before the kill)
        ("1x2", "1", 2),  # a rank
        ("1x2", "2", 4),  # a forked worker (the rank's pool breaks, torchrun restarts both ranks)
    ]  # each trial is two launches of torchrun's workers (~15 s here): two keep make test short
    for n, (j, workers, after) in enumerate(trials):
        log = tmp_path / f"log{n}"
        (log / "pids").mkdir(parents=True)
        out = f"out/{n}"
        args = [
            "run", "-s", "local_cwd", "torchx_datapipes.components:transform", "--fn", "fns.py:counted",
            "--input", "data/*.jsonl", "--output", out, "-j", j, "--num_workers", workers,
            "--max_restarts", "1", "--env", f"TDP_TEST_LOG={log}",
        ]  # fmt: skip
        env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}"}
        proc = subprocess.Popen(
            [TORCHX, *args], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        ready = _running(log / "pids", tmp_path / out / "_units", after)
        _wait_for(ready, proc, f"trial {n}: {after} committed units with 2 live processes")
        (log / "gate").touch()  # hold the job: the victim is still running when it is killed
        before: Set[int] = {int(p.name) for p in (log / "pids").iterdir()}
        os.kill(_alive(log / "pids")[0], signal.SIGKILL)
        (log / "gate").unlink()
        text, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0 and "SUCCEEDED" in text, f"trial {n}:\n{text}"
        assert len(list((log / "pids").iterdir())) > len(before), f"trial {n}: nothing was restarted"
        assert read_output(tmp_path / out) == recs, f"trial {n}: output not exact"
        m = manifest(tmp_path / out)
        assert sum(m["slots"].values()) == 10 and m["records_out"] == len(recs)
        assert {u["attempt"] for u in m["units"]} == {0, 1}, f"trial {n}: {m['units']}"
        # no unit ran twice to completion: every unit committed by attempt 0 ran once; the only
        # repeats allowed are units whose function had finished in a process of attempt 0 that was
        # killed before it committed (its record then says attempt 1), at most one per such process
        done = _completions(log)
        assert {u for u, _ in done} == first_ids, f"trial {n}: {done}"
        attempt = {50 * u["unit"]: u["attempt"] for u in m["units"]}  # by the unit's first id
        by_unit: Dict[int, List[int]] = {}
        for u, pid in done:
            by_unit.setdefault(u, []).append(pid)
        repeats = {u: p for u, p in by_unit.items() if len(p) > 1}
        for u, pids in repeats.items():
            assert len(pids) == 2 and pids[0] in before and pids[1] not in before, f"trial {n}: {by_unit}"
            assert attempt[u] == 1, f"trial {n}: unit {u} committed by attempt 0 and ran again"
        assert len(repeats) <= len(before), f"trial {n}: {repeats}"
        for u, pids in by_unit.items():
            if attempt[u] == 0:
                assert pids[0] in before and len(pids) == 1, f"trial {n}: unit {u}: {pids}"
