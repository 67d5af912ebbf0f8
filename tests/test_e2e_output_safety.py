"""Issue 23 as a user hits it, through ``torchx run -s local_cwd datapipes.transform``: a directory of
the user's own files refused before launch (with --overwrite, and a planted ``_errors`` symlink, and a
read-only output), literal names with glob characters and an escaped comma read as written (one
launch), and a failed job that prints its record error once, readably (one launch). The finer cases
run in-process in test_output_safety.py.
"""

import os
import subprocess
from pathlib import Path
from typing import Dict, List

import pytest
from tdp_testutil import canon, read_output, records, run_torchx, write_jsonl

from torchx_datapipes.api import rank_error

REPO = str(Path(__file__).resolve().parents[1])  # the checkout under test, for the CLI and its ranks
FNS = """
def ident(r):
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
    res = torchx(project, "--input", "data/[x].jsonl,data/a\\,b.jsonl", "--output", "out/lit")
    assert res.returncode == 0, res.stdout + res.stderr
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
