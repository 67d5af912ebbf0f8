"""The artifact store from the user's side: large-artifact warnings and ``gc`` (issue 12, item 16)."""

import datetime
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import fsspec
import pytest

from torchx_datapipes import artifact
from torchx_datapipes.artifact import gc
from torchx_datapipes.artifact.__main__ import main as artifact_main
from torchx_datapipes.artifact.size import ENV_VAR

DAY = 86400.0


def _make_big(n: int) -> Callable[[Any], Any]:
    table = os.urandom(n)  # captured data: what the warning is about
    small = "tag"

    def lookup(x: Any) -> Any:
        return (table[x % len(table)], small)

    return lookup


def test_a_large_artifact_warns_with_its_size_and_culprit(tmp_path: Path) -> None:
    fn = _make_big(12_000_000)
    with pytest.warns(UserWarning) as record:
        ref = artifact.package(fn, str(tmp_path))
    (message,) = [str(w.message) for w in record if "warning limit" in str(w.message)]
    assert ref.url in message and "12.0 MB, over the 10 MB warning limit" in message
    assert "lookup.__closure__['table'] (12.0 MB)" in message and "'small'" not in message
    assert "Load big data inside the function" in message and ENV_VAR in message
    assert artifact.load(ref.url)(3)[1] == "tag"  # a warning, not a refusal


def test_the_warning_limit_is_configurable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fn = _make_big(2_000_000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        artifact.package(fn, str(tmp_path))  # under the 10 MB default
        artifact.package(_make_big(12_000_000), str(tmp_path), warn_mb=0)  # 0: never
        monkeypatch.setenv(ENV_VAR, "50")
        artifact.package(_make_big(12_000_000), str(tmp_path))
    monkeypatch.setenv(ENV_VAR, "1")
    with pytest.warns(UserWarning, match="over the 1 MB warning limit"):
        artifact.package(fn, str(tmp_path))
    with pytest.warns(UserWarning, match="over the 1.5 MB warning limit"):
        artifact.package(_make_big(1_600_000), str(tmp_path), warn_mb=1.5)  # the argument wins
    monkeypatch.setenv(ENV_VAR, "ten")
    with pytest.raises(ValueError, match=f"{ENV_VAR}='ten' is not a number"):
        artifact.package(fn, str(tmp_path))


def _age(path: Path, days: float) -> None:
    t = time.time() - days * DAY
    os.utime(path, (t, t))


def _set_created(sidecar: Path, days: float) -> None:
    meta = json.loads(sidecar.read_text())
    when = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=days)
    meta["created"] = meta["packaged"] = when.isoformat(timespec="seconds")
    sidecar.write_text(json.dumps(meta))


def _store_with_ages(store: Path) -> dict[str, Path]:
    """old (sidecar 30 days), old_mtime (no sidecar, file 20 days), fresh, and other files."""
    old = Path(artifact.package(lambda x: x + 1, str(store)).url)
    _set_created(old.with_suffix(".json"), 30)  # the sidecar's time wins over the file's
    old_mtime = Path(artifact.package(lambda x: x + 2, str(store), "cloudpickle").url)
    old_mtime.with_suffix(".json").unlink()
    _age(old_mtime, 20)
    fresh = Path(artifact.package(lambda x: x + 3, str(store)).url)
    _age(fresh, 30)  # an old mtime (copied store) but a fresh sidecar: kept
    tmp = store / f"{'e' * 64}.pkl.tmp-123-456"  # an interrupted write
    tmp.write_bytes(b"partial")
    _age(tmp, 9)
    notes = store / "README.txt"  # not ours: never touched, whatever its age
    notes.write_text("team notes")
    _age(notes, 400)
    return {"old": old, "old_mtime": old_mtime, "fresh": fresh, "tmp": tmp, "notes": notes}


def test_gc_removes_old_artifacts_and_their_sidecars(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    files = _store_with_ages(store)
    before = sorted(p.name for p in store.iterdir())
    assert artifact_main(["gc", "--store", str(store), "--keep-days", "7", "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert sorted(p.name for p in store.iterdir()) == before  # a dry run removes nothing
    assert "would remove 4 file(s)" in dry and f"would remove {files['old']}" in dry

    assert artifact_main(["gc", "--store", str(store), "--keep-days", "7"]) == 0
    out = capsys.readouterr().out
    gone = [files["old"], files["old"].with_suffix(".json"), files["old_mtime"], files["tmp"]]
    assert not any(p.exists() for p in gone)
    for p in gone:
        assert f"removed {p} (" in out
    assert "30.0 days old by sidecar" in out and "20.0 days old by mtime" in out
    assert (
        files["fresh"].exists() and files["fresh"].with_suffix(".json").exists() and files["notes"].exists()
    )
    assert artifact.load(str(files["fresh"]))(1) == 4
    assert "removed 4 file(s)" in out and "kept 2 file(s)" in out


def test_gc_on_an_fsspec_store_with_an_injected_clock() -> None:
    store = "memory://txdp-gc/store"
    ref = artifact.package(len, store)
    fs = fsspec.filesystem("memory")
    later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=3)
    assert gc.collect(store, 5, now=lambda: later).removed == []
    report = gc.collect(store, 2, now=lambda: later)
    assert sorted(r.url for r in report.removed) == sorted([ref.url, f"{store}/{ref.sha256}.json"])
    assert not fs.exists(ref.url) and report.freed > 0


def test_gc_errors_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nowhere"):
        gc.collect(str(tmp_path / "nowhere"), 7)
    with pytest.raises(ValueError, match="--keep-days must be >= 0, got -1"):
        gc.collect(str(tmp_path), -1)


def test_python_m_artifact_gc_and_show(tmp_path: Path) -> None:
    store = tmp_path / "store"
    ref = artifact.package(len, str(store))
    _set_created(store / f"{ref.sha256}.json", 10)
    cmd = [sys.executable, "-m", "torchx_datapipes.artifact"]
    show = subprocess.run([*cmd, "show", ref.url], capture_output=True, text=True, check=True, timeout=120)
    assert json.loads(show.stdout)["header"]["backend"] == "cloudpickle"
    run = subprocess.run(
        [*cmd, "gc", "--store", str(store), "--keep-days", "3"], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert f"removed {ref.url}" in run.stdout and list(store.iterdir()) == []
    bad = subprocess.run([*cmd, "gc", "--store", str(store)], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--keep-days" in bad.stderr


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert artifact_main(["gc", "--store", str(tmp_path / "nowhere"), "--keep-days", "1"]) == 1
    assert capsys.readouterr().err.startswith(f"error: artifact store {tmp_path / 'nowhere'} does not exist")
    missing = str(tmp_path / ("ab" * 32 + ".pkl"))
    assert artifact_main(["show", missing]) == 1
    assert f"artifact not found: {missing}" in capsys.readouterr().err


def test_an_artifact_packaged_again_is_kept(tmp_path: Path) -> None:
    """A job launched today on an old artifact re-packages it: gc must not pull it away."""
    fn = _make_big(10)
    ref = artifact.package(fn, str(tmp_path))
    sidecar = tmp_path / f"{ref.sha256}.json"
    _set_created(sidecar, 30)
    first = json.loads(sidecar.read_text())["created"]
    assert artifact.package(fn, str(tmp_path)) == ref
    meta = json.loads(sidecar.read_text())
    assert meta["created"] == first and meta["packaged"] > first
    assert gc.collect(str(tmp_path), 7).removed == [] and Path(ref.url).exists()
