"""Issue 23 as a user hits it, through ``torchx run -s local_cwd datapipes.transform``: a directory of
the user's own files refused before launch (with --overwrite, and a planted ``_errors`` symlink, and a
read-only output), literal names with glob characters and an escaped comma read as written (the
component's job, run in-process), a failed job that prints its record error once, readably (one
launch), and a job frozen (SIGSTOP) while another took its output over, which fails with "lease
lost" (two launches). The finer cases run in-process in test_output_safety.py.
"""

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import psutil
import pytest
from tdp_testutil import TORCHX, VENV_BIN, canon, read_output, records, run_component, run_torchx, write_jsonl

from torchx_datapipes.api import rank_error

REPO = str(Path(__file__).resolve().parents[1])  # the checkout under test, for the CLI and its ranks
FNS = """
import os
import time

def ident(r):
    return r

def slow(r):
    gate, deadline = os.environ.get("TDP_TEST_GATE"), time.monotonic() + 120
    while gate and os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.01)  # the test holds the job while the gate file exists
    time.sleep(0.002)
    return r

def bad(r):
    raise ValueError(f"cannot handle id {r['id']}")
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "fns.py").write_text(FNS)
    write_jsonl(tmp_path / "data/[x].jsonl", records(3, start=100))
    write_jsonl(tmp_path / "data/x.jsonl", records(4, start=200))
    write_jsonl(tmp_path / "data/a,b.jsonl", records(2, start=300))
    return tmp_path


def torchx(project: Path, *args: str) -> "subprocess.CompletedProcess[str]":
    cmd = ["run", "-s", "local_cwd", "datapipes.transform", "--fn", "fns.py:ident", "-j", "1x1", *args]
    return run_torchx(cmd, project, env={"PYTHONPATH": REPO})


def files(root: Path) -> Dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_cli_refuses_foreign_entries_a_reserved_symlink_and_a_read_only_output(project: Path) -> None:
    home = project / "home2"
    (home / "src").mkdir(parents=True)
    (home / "notes.txt").write_text("my notes\n")
    (home / "src/main.py").write_text("print('hi')\n")
    before = files(home)
    res = torchx(project, "--input", "data/x.jsonl", "--output", "home2", "--overwrite", "True")
    assert res.returncode != 0
    assert "holds 2 entries this product did not write: notes.txt, src/" in res.stderr, res.stderr
    assert "Choose another --output" in res.stderr and "Traceback" not in res.stderr
    assert files(home) == before and not (project / ".tdp").exists()  # refused before packaging

    out, elsewhere = project / "out", project / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    os.symlink(elsewhere, out / "_errors")
    res = torchx(project, "--input", "data/x.jsonl", "--output", "out", "--on_error", "skip")
    assert res.returncode != 0 and f"{out / '_errors'} is a symlink to {elsewhere}" in res.stderr, res.stderr
    assert os.listdir(elsewhere) == []

    ro = project / "ro"
    ro.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tdp-ro", str(ro)], check=True)
    try:
        res = torchx(project, "--input", "data/x.jsonl", "--output", "ro/out")
        assert res.returncode != 0
        assert (
            f"--output {ro}/out cannot be created: {ro} is not writable (a read-only filesystem)"
            in res.stderr
        )
    finally:
        subprocess.run(["umount", str(ro)], check=True)


def test_a_literal_name_with_glob_characters_and_an_escaped_comma_are_read_as_written(project: Path) -> None:
    # the component as torchx run calls it (it lists the input), then its runner command in this process
    run_component(project, "transform", fn="fns.py:ident", j="1x1", input="data/[x].jsonl,data/a\\,b.jsonl",
                  output="out/lit")  # fmt: skip
    got = read_output(project / "out/lit")
    assert canon(got) == canon(records(3, start=100) + records(2, start=300))  # not x.jsonl's


def test_a_failed_job_prints_its_record_error_once_readably(project: Path) -> None:
    logs = project / "logs"
    res = run_torchx(
        ["run", "-s", "local_cwd", "-cfg", f"log_dir={logs}", "datapipes.transform", "--fn", "fns.py:bad",
         "-j", "1x1", "--input", "data/x.jsonl", "--output", "out/bad"],
        project, env={"PYTHONPATH": REPO},
    )  # fmt: skip
    assert res.returncode != 0
    text = res.stdout + res.stderr
    assert text.count("record: {") == 1 and text.count("traceback of your function:") == 1, text
    assert "py_callstack" not in text and '\\"' not in text  # no YAML-escaped traceback
    assert "torchx_datapipes: rank 0 failed: RecordError: " in text
    assert "runner/engine.py" not in text  # no runner internals around the user's error
    # the YAML status carries a one-line summary with the fix
    assert "bad raised ValueError: cannot handle id 200 (fix: correct the record" in " ".join(text.split())
    # the Python API's JobFailedError shows the same block once (read from the job's log)
    log: List[str] = []
    for p in sorted(logs.glob("*/*/transform/0/stderr.log")):  # what runner.log_lines reads
        log += p.read_text().splitlines(keepends=True)
    block = rank_error(log)
    assert (
        block.startswith("torchx_datapipes: rank 0 failed: RecordError: ") and block.count("record: {") == 1
    )
    assert block.rstrip().endswith("and go on") and "fix: correct the record" in block
    assert not (project / "out/bad/_SUCCESS").exists()


def poll(fn: Callable[[], Optional[object]], deadline_s: float, what: str) -> object:
    deadline = time.time() + deadline_s
    while time.time() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out after {deadline_s}s waiting for {what}")


def ranks_of(cwd: Path, out: str) -> List[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline", "cwd"]):
        cmd = p.info["cmdline"] or []
        agent = len(cmd) > 1 and os.path.basename(cmd[1]) == "torchrun"
        if (
            p.info["cwd"] == str(cwd)
            and "torchx_datapipes.runner" in cmd
            and not agent
            and any(c.endswith(out) for c in cmd)
        ):
            found.append(p)
    return found


def test_a_job_frozen_while_another_took_its_output_over_fails_with_lease_lost(project: Path) -> None:
    write_jsonl(project / "data/many.jsonl", records(300))
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}", "PYTHONPATH": REPO,
           "TDP_LEASE_HEARTBEAT_S": "0.5"}  # fmt: skip
    base = ["run", "-s", "local_cwd", "datapipes.transform", "-j", "1x1", "--input", "data/many.jsonl",
            "--output", "out/L", "--unit_mb", "0.002"]  # fmt: skip
    gate = project / "gate"
    frozen = subprocess.Popen(
        [TORCHX, *base, "--fn", "fns.py:slow", "--env", f"TDP_TEST_GATE={gate}"], cwd=project, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lease = project / "out/L/_LEASE"
    units = project / "out/L/_units"
    try:
        poll(lambda: [u for u in units.glob("*.json") if not u.name.startswith(".")], 120, "a committed unit")
        gate.touch()  # hold the job (it must not finish before it is frozen), then freeze it
        (rank,) = poll(lambda: ranks_of(project, "out/L"), 30, "the rank")  # type: ignore[misc]
        rank.send_signal(signal.SIGSTOP)
        poll(lambda: time.time() - json.loads(lease.read_text())["heartbeat"] > 2.0, 30, "a stale lease")
        other = run_torchx([*base, "--fn", "fns.py:ident", "--overwrite", "True"], project, env=env)
        assert other.returncode == 0, other.stdout + other.stderr
        assert "taking over the output lease of job" in other.stdout + other.stderr
        gate.unlink()
        rank.send_signal(signal.SIGCONT)
        out, _ = frozen.communicate(timeout=180)
    finally:
        gate.unlink(missing_ok=True)
        if frozen.poll() is None:
            for p in ranks_of(project, "out/L"):
                p.send_signal(signal.SIGCONT)
            frozen.kill()
            frozen.wait()
    assert frozen.returncode != 0
    assert f"LeaseLostError: lease lost: the output lease of {project / 'out/L'} is now held by" in out, out
    assert "after completing the output (run " in out and "rank 0 failed: LeaseLostError: lease lost" in out
    assert canon(read_output(project / "out/L")) == canon(records(300))  # the other job's output stands
    assert json.loads((project / "out/L/_SUCCESS").read_text())["records_out"] == 300
