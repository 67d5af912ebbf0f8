"""Which code travels with an artifact, and which code a ``module`` artifact is pinned to.

* A package installed outside site-packages (``pip install --target DIR``, ``PYTHONPATH``)
  has dist-info metadata: it is pickled by reference, only the user's own code by value
  (issue 12, item 16).
* A ``module`` artifact pins the sha256 of the code it names, so editing the module changes
  the artifact's sha256 (the job fingerprint) and a runner refuses code that changed since
  packaging (issue 12, item 3).
"""

import json
import os
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
from pickle_safety import run_fresh
from tdp_testutil import make_dataset, read_output

from torchx_datapipes import artifact
from torchx_datapipes.artifact.modules import distribution_of, is_user_module, user_modules
from torchx_datapipes.errors import ArtifactError
from torchx_datapipes.runner.main import main

DIST = "txdp_fakedist"
CHANGED = "the module changed since the job was packaged"


def _fake_distribution(target: Path, version: str = "1.0") -> Path:
    """What ``pip install --target target txdp_fakedist`` leaves: the package and its dist-info."""
    pkg = target / DIST
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from txdp_fakedist.core import Doubler, double\n")
    (pkg / "core.py").write_text(
        "class Doubler:\n    def __call__(self, x):\n        return 2 * x\n\n"
        "def double(x):\n    return Doubler()(x)\n"
    )
    info = target / f"{DIST}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DIST}\nVersion: {version}\n")
    files = [f"{DIST}/__init__.py", f"{DIST}/core.py", f"{info.name}/METADATA", f"{info.name}/RECORD"]
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files))
    return info


def _forget(*names: str) -> None:
    for name in list(sys.modules):
        if name.split(".")[0] in names:
            del sys.modules[name]


@pytest.fixture
def target_and_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """A ``--target`` directory with txdp_fakedist and a user project using it, both on sys.path."""
    target, project = tmp_path / "target", tmp_path / "project"
    _fake_distribution(target)
    project.mkdir()
    (project / "txdp_userside.py").write_text(
        "import txdp_fakedist\n\ndef plus_one_doubled(x):\n    return txdp_fakedist.double(x) + 1\n"
    )
    monkeypatch.syspath_prepend(str(target))
    monkeypatch.syspath_prepend(str(project))
    yield target, project
    _forget(DIST, "txdp_userside")


def test_a_distribution_installed_with_target_is_pickled_by_reference(
    target_and_project: tuple[Path, Path], tmp_path: Path
) -> None:
    target, _ = target_and_project
    import txdp_fakedist  # type: ignore[import-not-found]
    import txdp_fakedist.core  # type: ignore[import-not-found]
    import txdp_userside  # type: ignore[import-not-found]

    assert distribution_of(txdp_fakedist.core) is not None and not is_user_module(txdp_fakedist.core)
    assert is_user_module(txdp_userside)
    assert user_modules(txdp_userside.plus_one_doubled) == ["txdp_userside"]
    ref = artifact.package(txdp_userside.plus_one_doubled, str(tmp_path / "store"))
    data = Path(ref.url).read_bytes()
    assert b"txdp_userside.py" in data  # the user's code travels by value ...
    assert b"core.py" not in data and b"Doubler" not in data  # ... the installed package by name
    # the runner has the distribution (its image), not the user's project
    (tmp_path / "runner").mkdir()
    code = f"from torchx_datapipes import artifact; print(artifact.load({ref.url!r})(20))"
    proc = run_fresh(code, cwd=tmp_path / "runner", extra_path=[str(target)])
    assert proc.stdout.strip().splitlines()[-1] == "41"


def test_an_editable_checkout_is_still_user_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """dist-info whose RECORD does not list the sources (``pip install -e``): by value."""
    target = tmp_path / "editable"
    info = _fake_distribution(target)
    (info / "RECORD").write_text(f"{info.name}/METADATA,,\n{info.name}/RECORD,,\n")
    monkeypatch.syspath_prepend(str(target))
    try:
        import txdp_fakedist.core

        assert is_user_module(txdp_fakedist.core)
        assert "txdp_fakedist.core" in user_modules(txdp_fakedist.double)
    finally:
        _forget(DIST)


def _write_module(path: Path, body: str) -> None:
    path.write_text(f"import txdp_pin_helper\n\ndef fn(r):\n{body}\n")


def _pins(url: str) -> dict[str, Any]:
    return json.loads(Path(url).read_bytes().split(b"\n", 1)[1])  # type: ignore[no-any-return]


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "txdp_pin_helper.py").write_text("TAG = 'v1'\n")
    _write_module(ws / "txdp_pin_mod.py", "    return {**r, 'tag': txdp_pin_helper.TAG, 'y': 1}")
    monkeypatch.chdir(ws)
    monkeypatch.syspath_prepend(str(ws))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # edits within one second must be seen
    yield ws
    _forget("txdp_pin_mod", "txdp_pin_helper")


@pytest.mark.parametrize("spec", ["txdp_pin_mod.py:fn", "txdp_pin_mod:fn"])
def test_module_artifact_sha_follows_the_code(workspace: Path, tmp_path: Path, spec: str) -> None:
    store = str(tmp_path / "store")
    first = artifact.package(spec, store, "module")
    assert artifact.package(spec, store, "module").sha256 == first.sha256  # same code, same artifact
    pins = _pins(first.url)
    assert set(pins["sources"]) == {spec.split(":")[0], "txdp_pin_helper"}
    _write_module(workspace / "txdp_pin_mod.py", "    return {**r, 'y': 2}")
    _forget("txdp_pin_mod")
    edited = artifact.package(spec, store, "module")
    assert edited.sha256 != first.sha256
    (workspace / "txdp_pin_helper.py").write_text("TAG = 'v2'\n")  # a helper module counts too
    assert artifact.package(spec, store, "module").sha256 != edited.sha256


def test_module_artifact_refuses_code_changed_since_packaging(workspace: Path, tmp_path: Path) -> None:
    ref = artifact.package("txdp_pin_mod.py:fn", str(tmp_path / "store"), "module")
    assert artifact.load(ref.url, ref.sha256)({"a": 1}) == {"a": 1, "tag": "v1", "y": 1}
    _forget("txdp_pin_mod", "txdp_pin_helper")
    (workspace / "txdp_pin_helper.py").write_text("TAG = 'edited'\n")
    with pytest.raises(ArtifactError, match=CHANGED) as info:
        artifact.load(ref.url, ref.sha256)
    message = str(info.value)
    assert "txdp_pin_helper.py" in message and "Re-run the command to package it again" in message


def test_module_artifact_pins_the_distribution_version(
    target_and_project: tuple[Path, Path], tmp_path: Path
) -> None:
    target, _ = target_and_project
    ref = artifact.package("txdp_fakedist.core:double", str(tmp_path / "store"), "module")
    assert _pins(ref.url)["distribution"] == {"name": DIST, "version": "1.0"}
    assert artifact.load(ref.url)(4) == 8
    meta = target / f"{DIST}-1.0.dist-info" / "METADATA"
    meta.write_text(meta.read_text().replace("Version: 1.0", "Version: 2.0"))  # another image
    with pytest.raises(ArtifactError, match=f"{CHANGED}.*{DIST} 1.0.*{DIST} 2.0"):
        artifact.load(ref.url)


def _run(inp: Path, out: Path, ref: artifact.ArtifactRef) -> dict[str, Any]:
    args = ["transform", "--input", str(inp), "--output", str(out), "--progress_s", "0", "--unit_mb", "0.001"]
    manifest = main([*args, "--artifact", ref.url, "--sha256", ref.sha256])
    assert manifest is not None
    return manifest


def test_relaunch_after_editing_the_module_redoes_the_units(
    workspace: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The issue's report: a relaunch after an edit skipped committed units (mixed output)."""
    inp, out, store = tmp_path / "in", tmp_path / "out", str(tmp_path / "store")
    make_dataset(inp, [40, 40, 40])
    spec = "txdp_pin_mod.py:fn"
    old = artifact.package(spec, store, "module")
    _run(inp, out, old)
    (out / "_SUCCESS").unlink()  # the job died after committing every unit, before _SUCCESS
    _forget("txdp_pin_mod", "txdp_pin_helper")  # each launch is a fresh runner process
    capfd.readouterr()
    _run(inp, out, old)  # control: the same code resumes and skips the committed units
    assert "skipped" in capfd.readouterr().err
    (out / "_SUCCESS").unlink()

    _write_module(workspace / "txdp_pin_mod.py", "    return {**r, 'tag': 'new', 'y': 2}")
    _forget("txdp_pin_mod", "txdp_pin_helper")
    with pytest.raises(ArtifactError, match=CHANGED):  # the old command line, the new code
        _run(inp, out, old)
    new = artifact.package(spec, store, "module")  # what re-running the command does
    assert new.sha256 != old.sha256
    _forget("txdp_pin_mod", "txdp_pin_helper")
    manifest = _run(inp, out, new)
    assert "skipped" not in capfd.readouterr().err
    recs = read_output(out)
    assert len(recs) == manifest["records_out"] == 120
    assert {(r["tag"], r["y"]) for r in recs} == {("new", 2)}
    assert manifest["artifact"]["sha256"] == new.sha256 and os.path.exists(out / "_SUCCESS")


def test_a_changed_target_is_refused_before_its_code_runs(workspace: Path, tmp_path: Path) -> None:
    ref = artifact.package("txdp_pin_mod:fn", str(tmp_path / "store"), "module")
    _forget("txdp_pin_mod", "txdp_pin_helper")
    marker = tmp_path / "ran"
    source = f"open({str(marker)!r}, 'w').close()\ndef fn(r):\n    return r\n"
    (workspace / "txdp_pin_mod.py").write_text(source)
    with pytest.raises(ArtifactError, match=f"{CHANGED}: .*txdp_pin_mod.py"):
        artifact.load(ref.url)
    assert not marker.exists() and "txdp_pin_mod" not in sys.modules


def test_an_installed_namespace_package_is_not_taken_by_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``import google.protobuf`` then ``google.protobuf.X``: the global is the namespace ``google``."""
    target = tmp_path / "target"
    (target / "txdp_ns" / "inner").mkdir(parents=True)  # no __init__.py: a namespace package
    (target / "txdp_ns" / "inner" / "__init__.py").write_text("def triple(x):\n    return 3 * x\n")
    info = target / "txdp_ns_inner-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: txdp-ns-inner\nVersion: 1.0\n")
    (info / "RECORD").write_text(
        f"txdp_ns/inner/__init__.py,,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n"
    )
    user = tmp_path / "user"
    user.mkdir()
    (user / "txdp_ns_user.py").write_text(
        "import txdp_ns.inner\n\ndef f(x):\n    return txdp_ns.inner.triple(x)\n"
    )
    monkeypatch.syspath_prepend(str(target))
    monkeypatch.syspath_prepend(str(user))
    try:
        import txdp_ns  # type: ignore[import-not-found]
        import txdp_ns_user  # type: ignore[import-not-found]

        assert getattr(txdp_ns, "__file__", None) is None and not is_user_module(txdp_ns)
        assert user_modules(txdp_ns_user.f) == ["txdp_ns_user"]
        ref = artifact.package(txdp_ns_user.f, str(tmp_path / "store"))
        assert (
            b"triple" in Path(ref.url).read_bytes() and b"inner/__init__.py" not in Path(ref.url).read_bytes()
        )
        (user / "txdp_user_ns_own").mkdir()  # the user's own namespace package stays by value
        (user / "txdp_user_ns_own" / "m.py").write_text("X = 1\n")
        import txdp_user_ns_own  # type: ignore[import-not-found]

        assert is_user_module(txdp_user_ns_own)
    finally:
        _forget("txdp_ns", "txdp_ns_user", "txdp_user_ns_own")


@pytest.mark.e2e
def test_torchx_run_backend_module_relaunch_after_an_edit(tmp_path: Path) -> None:
    """As a user: ``torchx run ... --backend module``, the job dies before ``_SUCCESS``, edit, rerun.

    The first job (built by the component as ``torchx run`` builds it) runs in this process; the
    relaunch after the edit is a real launch.
    """
    from tdp_testutil import run_component, run_torchx

    make_dataset(tmp_path / "data", [30, 30])
    mod = tmp_path / "my_mod.py"
    mod.write_text("def fn(r):\n    return {**r, 'v': 1}\n")
    opts = {"fn": "my_mod.py:fn", "backend": "module", "input": "data/*.jsonl", "output": "out", "j": "1x1",
            "artifact_store": str(tmp_path / "store")}  # fmt: skip
    assert run_component(tmp_path, "transform", **opts)["records_out"] == 60
    assert {r["v"] for r in read_output(tmp_path / "out")} == {1}
    (tmp_path / "out" / "_SUCCESS").unlink()
    mod.write_text("def fn(r):\n    return {**r, 'v': 'edited'}\n")
    args = ["run", "-s", "local_cwd", "torchx_datapipes.components:transform"]
    args += [f"--{k}={v}" for k, v in opts.items()]
    res = run_torchx(args, tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert {r["v"] for r in read_output(tmp_path / "out")} == {"edited"}
