"""Issue 23, in-process (runner ``main([...])`` and the component): what ``--overwrite`` may delete,
foreign entries refused, reserved names that are symlinks, a lost lease named, reports written
atomically, our errors printed once, literal names with glob characters and escaped commas, and an
unwritable output refused on the client. The user-facing launches are in test_e2e_output_safety.py.
"""

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

import orjson
import pytest
from fsspec.implementations.local import LocalFileOpener
from tdp_testutil import canon, make_dataset, read_output, records, run_op, write_jsonl

from torchx_datapipes import artifact
from torchx_datapipes.io import lease as lease_mod
from torchx_datapipes.io.lease import LeaseLostError
from torchx_datapipes.io.ownership import (
    ForeignOutputError,
    OutputNotWritableError,
    ReservedPathError,
    check_writable,
    scan,
)


def identity(r: Any) -> Any:
    return r


def transform(tmp: Path, out: str, *extra: str, fn: Any = identity) -> Dict[str, Any]:
    return run_op("transform", str(tmp / "d/*.jsonl"), tmp / out, "--unit_mb", "0.001", *extra, fn=fn)


def tree(root: Path) -> Dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# -- defect 1: --overwrite deletes only what we wrote; foreign entries are refused -----------------
def test_overwrite_refuses_a_directory_of_the_users_files_and_deletes_nothing(tmp_path: Path) -> None:
    make_dataset(tmp_path / "d", [20, 10])
    home = tmp_path / "home2"
    (home / "src").mkdir(parents=True)
    (home / "notes.txt").write_text("my notes\n")
    (home / "src/main.py").write_text("print('hi')\n")
    before = tree(home)
    with pytest.raises(ForeignOutputError) as info:
        transform(tmp_path, "home2", "--overwrite", "True")
    msg = str(info.value)
    assert f"--output {home} is not empty" in msg and "notes.txt, src/" in msg
    assert "--overwrite True deletes only what this product wrote" in msg
    assert "Choose another --output" in msg and "move those entries out of it" in msg
    assert tree(home) == before and sorted(os.listdir(home)) == ["notes.txt", "src"]


def test_a_users_own_part_file_is_never_replaced(tmp_path: Path) -> None:
    """Without --overwrite too: a bare part-00000.jsonl with no record of ours is the user's."""
    make_dataset(tmp_path / "d", [5])
    out = tmp_path / "out"
    out.mkdir()
    (out / "part-00000.jsonl").write_text('{"mine": 1}\n')
    for extra in ([], ["--overwrite", "True"]):
        with pytest.raises(ForeignOutputError, match="part-00000.jsonl"):
            transform(tmp_path, "out", *extra)
        assert (out / "part-00000.jsonl").read_text() == '{"mine": 1}\n'
        assert os.listdir(out) == ["part-00000.jsonl"]


def test_overwrite_of_our_output_clears_ours_but_refuses_once_the_user_added_a_file(tmp_path: Path) -> None:
    recs = make_dataset(tmp_path / "d", [30, 20])
    out = tmp_path / "out"
    first = transform(tmp_path, "out")
    assert len(first["units"]) >= 3
    (out / "part-00099.jsonl").write_text('{"old": 1}\n')  # a part of an earlier, larger run of ours
    second = transform(tmp_path, "out", "--overwrite", "True")
    assert not (out / "part-00099.jsonl").exists() and canon(read_output(out)) == canon(recs)
    assert second["job"]["fingerprint"] == first["job"]["fingerprint"]
    (out / "README.md").write_text("what this output is\n")
    success = (out / "_SUCCESS").read_bytes()
    with pytest.raises(ForeignOutputError, match="1 entry this product did not write: README.md"):
        transform(tmp_path, "out", "--overwrite", "True")
    assert (out / "_SUCCESS").read_bytes() == success and canon(read_output(out)) == canon(recs)


def test_a_part_written_before_its_record_is_ours_on_resume(tmp_path: Path) -> None:
    """A job killed between a part's rename and its commit record: the relaunch resumes, no refusal."""
    recs = make_dataset(tmp_path / "d", [30, 20])
    out = tmp_path / "out"
    transform(tmp_path, "out")
    (out / "_SUCCESS").unlink()
    for p in (out / "_units").glob("0*.json"):
        if p.name != "00000.json":
            p.unlink()  # only unit 0 committed; parts 1.. are on disk without records
    assert scan(str(out)).foreign == []
    m = transform(tmp_path, "out")
    assert canon(read_output(out)) == canon(recs) and m["records_out"] == len(recs)
    (out / "_SUCCESS").unlink()
    for p in (out / "_units").iterdir():
        p.unlink()  # no unit committed, the lease released: the (empty) _units/ the job made first marks it
    assert scan(str(out)).foreign == []
    m = transform(tmp_path, "out")
    assert canon(read_output(out)) == canon(recs) and m["records_out"] == len(recs)


def test_split_subdirectories_are_ours_and_a_foreign_file_inside_one_is_named(tmp_path: Path) -> None:
    make_dataset(tmp_path / "d", [40])
    out = tmp_path / "sp"
    run_op("split", str(tmp_path / "d/*.jsonl"), out, "--unit_mb", "0.001")
    assert scan(str(out)).foreign == []
    run_op("split", str(tmp_path / "d/*.jsonl"), out, "--unit_mb", "0.001", "--overwrite", "True")
    (out / "train/keep.txt").write_text("x")
    with pytest.raises(ForeignOutputError, match="train/keep.txt"):
        run_op("split", str(tmp_path / "d/*.jsonl"), out, "--unit_mb", "0.001", "--overwrite", "True")
    assert (out / "train/keep.txt").exists() and (out / "_SUCCESS").exists()


def test_an_output_that_is_a_file_is_refused(tmp_path: Path) -> None:
    make_dataset(tmp_path / "d", [3])
    (tmp_path / "f").write_text("x")
    with pytest.raises(ForeignOutputError, match="is a file, not a directory"):
        transform(tmp_path, "f")


# -- defect 7: a reserved name that is a symlink ---------------------------------------------------
@pytest.mark.parametrize("name", ["_errors", "_units", "_SUCCESS", "_LEASE"])
def test_a_symlink_at_a_reserved_name_is_refused_before_anything_is_written(
    tmp_path: Path, name: str
) -> None:
    make_dataset(tmp_path / "d", [10])
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    os.symlink(elsewhere, out / name)
    with pytest.raises(ReservedPathError) as info:
        transform(tmp_path, "out", "--on_error", "skip", "--max_error_rate", "1", fn=lambda r: 1 / 0)
    msg = str(info.value)
    assert f"{out / name} is a symlink to {elsewhere}" in msg and f"Remove {out / name}" in msg
    assert os.listdir(elsewhere) == [] and sorted(os.listdir(out)) == [name]
    (out / name).unlink()
    (out / name).mkdir() if name in ("_SUCCESS", "_LEASE") else (out / name).write_text("")
    with pytest.raises(ReservedPathError, match="reserves"):
        transform(tmp_path, "out")


# -- defect 7: a lost lease is named, not a FileNotFoundError --------------------------------------
def test_a_job_whose_lease_was_taken_over_fails_with_lease_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While this job was frozen another took the output over: it holds the lease and cleared our temp
    files, so our part's rename fails. The error says so (the new owner), not FileNotFoundError."""
    make_dataset(tmp_path / "d", [10])
    out = tmp_path / "out"

    def taken_over_midway(r: Dict[str, Any]) -> Dict[str, Any]:
        if r["id"] == 3:
            body = {"job_id": "the-other-job", "host": "h2", "pid": 4242, "token": "t-other",
                    "heartbeat": time.time()}  # fmt: skip
            (out / "_LEASE").write_bytes(orjson.dumps(body))
            for tmp in out.glob(".tmp-*"):
                tmp.unlink()
        return r

    monkeypatch.setenv(lease_mod.HEARTBEAT_ENV, "3600")  # no beat notices it first
    with pytest.raises(LeaseLostError) as info:
        transform(tmp_path, "out", "--unit_mb", "64", fn=taken_over_midway)
    msg = str(info.value)
    assert msg.startswith(f"lease lost: the output lease of {out} is now held by job the-other-job (host h2")
    assert "without committing (FileNotFoundError" in msg and "Rerun once that job is done" in msg
    assert isinstance(info.value.__cause__, FileNotFoundError)
    assert json.loads((out / "_LEASE").read_text())["job_id"] == "the-other-job"  # theirs stays


# -- defect 7: disk full while writing report.html -------------------------------------------------
def test_disk_full_on_report_html_names_it_and_leaves_no_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_dataset(tmp_path / "d", [20])
    original = LocalFileOpener.write
    calls: List[int] = []

    def write(self: LocalFileOpener, data: Any) -> Any:
        if "report.html" in self.path:
            calls.append(1)
            original(self, bytes(data)[:100])  # part of the page is on disk, then the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return original(self, data)

    monkeypatch.setattr(LocalFileOpener, "write", write)
    out = tmp_path / "st"
    with pytest.raises(OSError) as info:
        run_op("stats", str(tmp_path / "d/*.jsonl"), out, "--unit_mb", "0.001")
    assert calls and info.value.errno == errno.ENOSPC
    assert f"No space left on device while writing {out / 'report.html'}" in str(info.value)
    assert not (out / "report.html").exists() and not list(out.rglob(".tmp-*"))
    assert not (out / "_SUCCESS").exists()


# -- defect 7: a failed rank prints our error once, readably ---------------------------------------
def test_a_record_error_is_printed_once_and_the_error_file_is_one_line(tmp_path: Path) -> None:
    make_dataset(tmp_path / "d", [3])

    def bad(r: Dict[str, Any]) -> Dict[str, Any]:
        raise ValueError(f"cannot handle {r['id']}")

    ref = artifact.package(bad, str(tmp_path / "store"))
    err_file = tmp_path / "error.json"
    cmd = [sys.executable, "-m", "torchx_datapipes.runner", "transform", "--input", str(tmp_path / "d"),
           "--output", str(tmp_path / "out"), "--artifact", ref.url, "--progress_s", "0"]  # fmt: skip
    repo = str(Path(__file__).resolve().parents[1])  # this checkout's package, whatever is installed
    env = {**os.environ, "TORCHELASTIC_ERROR_FILE": str(err_file), "PYTHONPATH": repo}
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    err = res.stderr
    assert err.count("cannot handle 0") == 2  # the record error's first line and its traceback's last
    assert err.count("record: {") == 1 and err.count("fix: correct the record") == 1
    assert err.count("Traceback (most recent call last)") == 1  # the user's function's, no runner frames
    assert "torchx_datapipes: rank 0 failed: RecordError: " in err and "runner/engine.py" not in err
    data = json.loads(err_file.read_text())["message"]
    assert "py_callstack" not in data["extraInfo"] and "\n" not in data["message"]
    assert data["message"].startswith("RecordError: ") and "part-0.jsonl, line 1: " in data["message"]
    assert "bad raised ValueError: cannot handle 0 (fix:" in data["message"]
    assert "(fix: correct the record" in data["message"]


# -- defect 6: glob characters and commas in real names --------------------------------------------
def test_an_existing_literal_name_wins_over_its_glob_and_a_comma_is_escaped(tmp_path: Path) -> None:
    d = tmp_path / "data"
    write_jsonl(d / "[x].jsonl", records(3, start=100))
    write_jsonl(d / "x.jsonl", records(4, start=200))
    write_jsonl(d / "a,b.jsonl", records(2, start=300))
    out = tmp_path / "o"
    run_op("transform", f"{d}/[x].jsonl,{d}/a\\,b.jsonl", out, fn=identity)
    assert canon(read_output(out)) == canon(records(3, start=100) + records(2, start=300))
    m = json.loads((out / "_SUCCESS").read_text())
    assert [Path(i["path"]).name for i in m["inputs"]] == ["[x].jsonl", "a,b.jsonl"]
    (d / "[x].jsonl").unlink()  # gone: the pattern is a glob again, and matches x.jsonl
    run_op("transform", f"{d}/[x].jsonl", out, "--overwrite", "True", fn=identity)
    assert canon(read_output(out)) == canon(records(4, start=200))


# -- defect 8 (and 1): the client refuses before launch --------------------------------------------
def test_the_client_refuses_foreign_entries_and_an_unwritable_output(tmp_path: Path) -> None:
    from torchx_datapipes import components
    from torchx_datapipes.appdef import InvalidArgumentError

    make_dataset(tmp_path / "d", [3])
    store = tmp_path / "s"
    home = tmp_path / "home2"
    home.mkdir()
    (home / "notes.txt").write_text("x")
    args = dict(input=str(tmp_path / "d"), artifact_store=str(store), backend="module")
    with pytest.raises(InvalidArgumentError, match="ForeignOutputError: .*notes.txt"):
        components.transform(fn="os.path:basename", output=str(home), overwrite=True, **args)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(InvalidArgumentError, match=f"cannot be created: {tmp_path / 'afile'} is a file"):
        components.transform(fn="os.path:basename", output=str(tmp_path / "afile/out"), **args)
    assert not store.exists()  # refused before packaging


def test_a_read_only_output_is_refused_naming_the_path(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    mounted = os.geteuid() == 0  # root writes through any mode: a read-only filesystem stops it
    if mounted:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tdp-ro", str(ro)], check=True)
    else:
        ro.chmod(0o555)
    try:
        with pytest.raises(OutputNotWritableError) as info:
            check_writable(str(ro))
        why = "a read-only filesystem" if mounted else "no write permission"
        assert f"--output {ro} is not writable ({why})" in str(info.value)
        with pytest.raises(OutputNotWritableError, match=f"cannot be created: {ro} is not writable"):
            check_writable(str(ro / "new/out"))
    finally:
        if mounted:
            subprocess.run(["umount", str(ro)], check=True)
        else:
            ro.chmod(0o755)


def test_lease_lost_names_the_run_that_completed_the_output_after_releasing_it(tmp_path: Path) -> None:
    out = tmp_path / "out"
    mine = lease_mod.Lease.acquire(str(out), job="frozen-job")
    (out / "_LEASE").unlink()  # taken over, and released after the other job's _SUCCESS
    (out / "_SUCCESS").write_text(json.dumps({"job": {"run_id": "transform-abc123"}}))
    token = mine.holder.token
    why = lease_mod.lease_lost(str(out), token, holder=True)
    assert why is not None and why.startswith(f"lease lost: the output lease of {out} is now held by nobody")
    assert "after completing the output (run transform-abc123)" in why
    other_rank = lease_mod.lease_lost(str(out), token) or ""
    assert "after completing the output (run transform-abc123)" in other_rank
    (out / "_SUCCESS").unlink()
    assert lease_mod.lease_lost(str(out), token) is None  # rank > 0: released by our own rank 0 (it failed)
    assert lease_mod.lease_lost(str(out), token, holder=True) is not None
