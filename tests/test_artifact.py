"""Contract tests for torchx_datapipes.artifact: every backend x every callable kind x stores.

Artifacts are loaded in fresh interpreters (``pickle_safety.run_fresh``) whose cwd is empty
and whose sys.path does not contain the user's project, as on a remote runner.
"""

import functools
import hashlib
import json
import pickle
import shutil
import socket
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any, Iterator

import cloudpickle
import fsspec
import pytest
from pickle_safety import ChildReport, assert_pickle_safe, run_fresh

from torchx_datapipes import artifact, kind_of
from torchx_datapipes.artifact.modules import user_modules
from torchx_datapipes.errors import (
    ArtifactError,
    ArtifactIntegrityError,
    ArtifactNotFoundError,
    ArtifactVersionError,
    NotSerializableError,
)

DATA = Path(__file__).resolve().parent / "data" / "artifact_v1"

HELPERS_SRC = """
SCALE = 10

def scale(x):
    return x * SCALE
"""

TRANSFORMS_SRC = """
import functools
import txdp_user_helpers
from txdp_user_helpers import scale
from torchx_datapipes import batched

def plain(x):
    return x + 1

def uses_helper(x):
    return txdp_user_helpers.scale(x) + scale(1)

def add(x, k):
    return x + k

def make_closure(k):
    def closure(x):
        return x * k
    return closure

def make_lambda():
    return lambda x: x - 1

class Scaler:
    def __init__(self, k):
        self.k = k
    def __call__(self, x):
        return scale(x) * self.k

class Tools:
    @staticmethod
    def double(x):
        return 2 * x

@batched
def batch_fn(xs):
    return [x * 3 for x in xs]

class FakedIdentity:
    # fakes identity like accelerate's DataLoaderAdapter did
    def __init__(self, inner):
        self.inner = inner
    @property
    def __class__(self):
        return type(self.inner)

class FakedIdentityWithReduce(FakedIdentity):
    # the accelerate PR #3074 repair: pickles again, but still lies about its class
    def __reduce__(self):
        return (FakedIdentityWithReduce, (self.inner,))
"""

MAIN_SCRIPT = """
import json, sys
from torchx_datapipes import artifact, batched

def double(x):
    return 2 * x

@batched
def main_batch(xs):
    return [x + 100 for x in xs]

class MainCallable:
    def __call__(self, x):
        return x * 7

store = sys.argv[1] if len(sys.argv) > 1 else {store!r}
out = {{}}
for name, fn in [("main_fn", double), ("main_batched", main_batch), ("main_instance", MainCallable())]:
    out[name] = artifact.package(fn, store).url
    try:
        artifact.package(fn, store, "torch.package")
        out[name + ":tp"] = "packaged"
    except artifact.ArtifactError as e:
        out[name + ":tp"] = str(e)
print(json.dumps(out))
"""

# Loads each artifact in a fresh interpreter and reports what calling it gives.
LOADER = """
import json
from torchx_datapipes import artifact, kind_of
cases = json.loads({cases!r})
out = {{}}
for name, (url, arg) in cases.items():
    fn = artifact.load(url)
    out[name] = {{"result": fn(arg), "kind": kind_of(fn).value}}
print(json.dumps(out))
"""


def _import_user_project(root: Path) -> Any:
    (root / "txdp_user_helpers.py").write_text(HELPERS_SRC)
    (root / "txdp_user_transforms.py").write_text(TRANSFORMS_SRC)
    sys.path.insert(0, str(root))
    try:
        import txdp_user_transforms  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(root))  # like a script's directory: gone from the runner
    return txdp_user_transforms


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A user project importable in this process only (and never in children)."""
    root = tmp_path_factory.mktemp("userproj")
    yield _import_user_project(root)
    for name in ("txdp_user_transforms", "txdp_user_helpers"):
        sys.modules.pop(name, None)


def _kinds(t: Any) -> dict[str, tuple[Any, Any, Any, str]]:
    """name -> (callable, argument, expected result, expected kind)."""
    return {
        "plain": (t.plain, 1, 2, "record"),
        "helper_module": (t.uses_helper, 2, 30, "record"),
        "lambda": (t.make_lambda(), 5, 4, "record"),
        "closure": (t.make_closure(4), 3, 12, "record"),
        "partial": (functools.partial(t.add, k=7), 1, 8, "record"),
        "instance": (t.Scaler(2), 3, 60, "record"),
        "batched": (t.batch_fn, [1, 2], [3, 6], "batched"),
    }


TORCH_PACKAGE_UNSUPPORTED = {"lambda", "closure"}


def _load_in_child(cases: dict[str, tuple[str, Any]], cwd: Path) -> dict[str, Any]:
    proc = run_fresh(LOADER.format(cases=json.dumps(cases)), cwd=cwd)
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("backend", ["cloudpickle", "torch.package"])
def test_round_trip_each_callable_kind(project: Any, backend: str, tmp_path: Path) -> None:
    store = tmp_path / "store"
    cases, expected = {}, {}
    for name, (fn, arg, result, kind) in _kinds(project).items():
        if backend == "torch.package" and name in TORCH_PACKAGE_UNSUPPORTED:
            with pytest.raises(ArtifactError, match="backend='cloudpickle'"):
                artifact.package(fn, str(store), backend)
            continue
        ref = artifact.package(fn, str(store), backend)
        assert (ref.backend, ref.url) == (backend, artifact.package(fn, str(store), backend).url)
        cases[name] = (ref.url, arg)
        expected[name] = {"result": result, "kind": kind}
    (tmp_path / "empty").mkdir()
    assert _load_in_child(cases, tmp_path / "empty") == expected


def test_module_backend_resolves_in_the_workspace(project: Any, tmp_path: Path, monkeypatch: Any) -> None:
    workspace = Path(project.__file__).parent
    monkeypatch.chdir(workspace)
    store = tmp_path / "store"
    specs = {
        "file": ("txdp_user_transforms.py:uses_helper", 2, 30),
        "attr_path": ("txdp_user_transforms.py:Tools.double", 4, 8),
        "instance": ("txdp_user_transforms.py:Scaler", 3, None),
    }
    cases = {
        name: (artifact.package(spec, str(store), "module").url, arg)
        for name, (spec, arg, _) in specs.items()
    }
    assert Path(cases["file"][0]).stat().st_size < 600  # a reference + source pins, no code
    out = _load_in_child({k: v for k, v in cases.items() if k != "instance"}, cwd=workspace)
    assert out == {"file": {"result": 30, "kind": "record"}, "attr_path": {"result": 8, "kind": "record"}}


def test_module_backend_rejects_what_does_not_resolve(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="does not resolve on the client"):
        artifact.package("no_such_module_xyz:fn", str(tmp_path), "module")
    with pytest.raises(TypeError, match="spec string"):
        artifact.package(len, str(tmp_path), "module")


def test_functions_defined_in_main(tmp_path: Path) -> None:
    store = tmp_path / "store"
    script_dir = tmp_path / "script"
    script_dir.mkdir()
    proc = run_fresh(MAIN_SCRIPT.format(store=str(store)), cwd=script_dir)
    urls = json.loads(proc.stdout.strip().splitlines()[-1])
    for name in ("main_fn", "main_batched", "main_instance"):
        assert "__main__" in urls[name + ":tp"] and "backend='cloudpickle'" in urls[name + ":tp"]
    cases = {
        "main_fn": (urls["main_fn"], 4),
        "main_batched": (urls["main_batched"], [1]),
        "inst": (urls["main_instance"], 2),
    }
    (tmp_path / "elsewhere").mkdir()
    assert _load_in_child(cases, tmp_path / "elsewhere") == {
        "main_fn": {"result": 8, "kind": "record"},
        "main_batched": {"result": [101], "kind": "batched"},
        "inst": {"result": 14, "kind": "record"},
    }


def test_user_modules_are_by_value_and_installed_ones_by_reference(project: Any) -> None:
    assert user_modules(project.uses_helper) == ["txdp_user_helpers", "txdp_user_transforms"]
    assert user_modules(json.dumps) == [] and user_modules(functools.partial(pickle.dumps, protocol=2)) == []
    before = cloudpickle.list_registry_pickle_by_value()
    artifact.package(project.plain, "memory://txdp-test/byvalue")
    assert cloudpickle.list_registry_pickle_by_value() == before  # registration is undone
    ref = artifact.package(json.dumps, "memory://txdp-test/byref")
    assert len(fsspec.open(ref.url, "rb").open().read()) < 200  # a name, not code
    assert artifact.load(ref.url) is json.dumps


def test_memory_store_sidecar_and_determinism(project: Any) -> None:
    ref = artifact.package(project.batch_fn, "memory://txdp-test/mem")
    assert ref == artifact.package(project.batch_fn, "memory://txdp-test/mem/")
    assert artifact.is_artifact_url(ref.url) and artifact.sha256_of_url(ref.url) == ref.sha256
    with fsspec.open(ref.url, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == ref.sha256
    with fsspec.open(f"memory://txdp-test/mem/{ref.sha256}.json") as f:
        meta = json.load(f)
    assert meta["qualname"] == "batch_fn" and meta["module"] == "txdp_user_transforms"
    assert {meta[k] for k in ("backend", "python", "torch", "cloudpickle")} == {
        ref.backend,
        ref.python,
        ref.torch,
        ref.cloudpickle,
    }
    assert "created" in meta
    fn = artifact.load(ref.url, ref.sha256)
    assert fn([2]) == [6] and kind_of(fn).value == "batched"


def test_s3_store_through_moto(project: Any, s3_server: Any, tmp_path: Path) -> None:
    store = s3_server.url("artifacts")
    ref = artifact.package(project.uses_helper, store)  # plain env: AWS_ENDPOINT_URL_S3
    assert ref.url.startswith("s3://") and artifact.load(ref.url, ref.sha256)(1) == 20
    ref2 = artifact.package(project.plain, store, storage_options=s3_server.storage_options)
    assert artifact.load(ref2.url, storage_options=s3_server.storage_options)(1) == 2
    fs = fsspec.filesystem("s3", skip_instance_cache=True, **s3_server.storage_options)
    assert fs.exists(f"{s3_server.bucket}/artifacts/{ref.sha256}.json")
    (tmp_path / "child").mkdir()
    out = _load_in_child({"s3": (ref.url, 3)}, tmp_path / "child")  # the child reaches moto through env
    assert out == {"s3": {"result": 40, "kind": "record"}}
    with pytest.raises(ArtifactNotFoundError):
        artifact.load(s3_server.url("artifacts", "0" * 64 + ".pkl"))


def test_tampered_bytes_fail_before_unpickling(project: Any, tmp_path: Path) -> None:
    ref = artifact.package(project.plain, str(tmp_path))
    path = Path(ref.url)
    marker = tmp_path / "pwned"
    header = path.read_bytes().split(b"\n", 1)[0] + b"\n"
    evil = pickle.dumps(functools.partial(Path.touch, marker))  # would run on unpickle + call
    path.write_bytes(header + evil)
    with pytest.raises(ArtifactIntegrityError) as info:
        artifact.load(ref.url, ref.sha256)
    assert (
        info.value.expected == ref.sha256 and info.value.actual == hashlib.sha256(header + evil).hexdigest()
    )
    with pytest.raises(ArtifactIntegrityError):
        artifact.load(ref.url)  # the basename pins the hash too
    assert not marker.exists()


def test_missing_artifact_names_url_and_shared_store(tmp_path: Path) -> None:
    url = str(tmp_path / ("ab" * 32 + ".pkl"))
    with pytest.raises(ArtifactNotFoundError, match="s3://") as info:
        artifact.load(url)
    assert url in str(info.value) and isinstance(info.value, FileNotFoundError)


def test_unpicklable_captures_are_named(project: Any, tmp_path: Path) -> None:
    sock = socket.socket()
    lock = threading.Lock()
    try:

        def make() -> Any:
            conn = sock

            def clean(x: Any) -> Any:
                return conn.send(x)

            return clean

        with pytest.raises(
            NotSerializableError, match=r"clean\.__closure__\['conn'\]: socket\.socket"
        ) as info:
            artifact.package(make(), str(tmp_path))
        assert "inside the function" in str(info.value) and info.value.__cause__ is not None
        assert list(tmp_path.iterdir()) == []  # nothing uploaded
        glob_fn = _function_with_global_lock(lock)
        with pytest.raises(NotSerializableError, match=r"clean\.__globals__\['lock'\]: _thread\.lock"):
            artifact.check_serializable(glob_fn)
        scaler = project.Scaler(1)
        scaler.pool = {"primary": lock}
        with pytest.raises(NotSerializableError, match=r"Scaler\.pool\['primary'\]: _thread\.lock"):
            artifact.check_serializable(scaler, "torch.package")
        with pytest.raises(NotSerializableError, match=r"partial\(add\)\.keywords\['k'\]: socket\.socket"):
            artifact.check_serializable(functools.partial(project.add, k=sock))
    finally:
        sock.close()


def _function_with_global_lock(lock: Any) -> Any:
    namespace: dict[str, Any] = {"lock": lock}
    exec("def clean(x):\n    with lock:\n        return x\n", namespace)
    return namespace["clean"]


@pytest.mark.parametrize(
    "field,forged,message",
    [("python", "3.9.18", "Python 3.9.18"), ("cloudpickle", "2.2.1", "cloudpickle 2.2.1")],
)
def test_version_mismatch_is_refused(
    project: Any, tmp_path: Path, field: str, forged: str, message: str
) -> None:
    ref = artifact.package(project.plain, str(tmp_path))
    header_line, payload = Path(ref.url).read_bytes().split(b"\n", 1)
    header = json.loads(header_line[len(b"TXDP-ARTIFACT ") :])
    header[field] = forged
    data = b"TXDP-ARTIFACT " + json.dumps(header).encode() + b"\n" + payload
    sha = hashlib.sha256(data).hexdigest()
    forged_path = tmp_path / f"{sha}.pkl"
    forged_path.write_bytes(data)
    here = getattr(ref, field)
    with pytest.raises(ArtifactVersionError, match=message) as info:
        artifact.load(str(forged_path), sha)
    assert here in str(info.value)


def test_unknown_backend_lists_valid_ones(tmp_path: Path) -> None:
    for call in (
        lambda: artifact.package(len, str(tmp_path), "dill"),
        lambda: artifact.check_serializable(len, "dill"),
    ):
        with pytest.raises(ValueError, match="cloudpickle, torch.package, module"):
            call()


def test_not_an_artifact(tmp_path: Path) -> None:
    path = tmp_path / ("cd" * 32 + ".pkl")
    path.write_bytes(b"\x80\x05hello")
    with pytest.raises(ArtifactIntegrityError):
        artifact.load(str(path))
    with pytest.raises(ArtifactError, match="not a torchx_datapipes artifact"):
        artifact.load(str(path), hashlib.sha256(path.read_bytes()).hexdigest())


def test_url_helpers() -> None:
    sha = "0123456789abcdef" * 4
    assert artifact.is_artifact_url(f"s3://b/p/{sha}.pkl") and artifact.is_artifact_url(f"/x/{sha}.pt")
    assert not artifact.is_artifact_url(f"/x/{sha}.json") and not artifact.is_artifact_url("/x/fn.pkl")
    assert artifact.sha256_of_url(f"memory://s/{sha}.ref") == sha
    with pytest.raises(ValueError, match="not an artifact URL"):
        artifact.sha256_of_url("s3://b/model.pkl")


def test_resolve_spec(project: Any, tmp_path: Path, monkeypatch: Any) -> None:
    pkg = tmp_path / "txdp_specpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text(
        "class K:\n    @staticmethod\n    def m(x):\n        return -x\nVALUE = 3\nobj = abs\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert artifact.resolve_spec("txdp_specpkg.mod:K.m")(2) == -2
    assert artifact.resolve_spec("txdp_specpkg/mod.py:obj") is abs
    assert artifact.resolve_spec("json:dumps") is json.dumps
    with pytest.raises(ValueError, match="pkg.module:fn"):
        artifact.resolve_spec("no_colon")
    with pytest.raises(AttributeError, match="'nope'"):
        artifact.resolve_spec("txdp_specpkg.mod:nope")
    with pytest.raises(TypeError, match="not a callable"):
        artifact.resolve_spec("txdp_specpkg.mod:VALUE")
    with pytest.raises(FileNotFoundError, match="missing.py"):
        artifact.resolve_spec("missing.py:fn")
    with pytest.raises(ImportError, match="txdp_nomod"):
        artifact.resolve_spec("txdp_nomod:fn")


def test_artifacts_from_format_1_still_load(tmp_path: Path) -> None:
    manifest = json.loads((DATA / "manifest.json").read_text())
    call = manifest["call"]
    workspace = tmp_path / "workspace"  # the module backend resolves relative to the runner's cwd
    shutil.copytree(DATA / "legacy_src", workspace / "legacy_src")
    cases = {}
    for backend in artifact.BACKENDS:
        entry = manifest[backend]
        url = str(DATA / "store" / entry["file"])
        same_python = entry["python"].split(".")[:2] == list(map(str, sys.version_info[:2]))
        if backend == "cloudpickle" and not same_python:
            with pytest.raises(ArtifactVersionError):
                artifact.load(url, entry["sha256"])
            continue
        cases[backend] = (url, call["input"])
    out = _load_in_child(cases, workspace)
    assert out == {b: {"result": call["output"], "kind": call["kind"]} for b in cases}


SMALL_CLASS_SRC = textwrap.dedent(
    """
    class Tally:
        def __init__(self):
            self.counts = {"a": 2, "b": 5}
        def total(self):
            return sum(self.counts.values())
    def make():
        return Tally()
    """
)


def test_pickle_safety_helper_on_a_small_class() -> None:
    reports = assert_pickle_safe(SMALL_CLASS_SRC, check="x.total()")
    assert set(reports) == {"pickle", "cloudpickle", "torch.package"}
    assert all(isinstance(r, ChildReport) and r.result == 7 for r in reports.values())
    assert reports["pickle"].resolved_is_type and reports["torch.package"].resolved_is_type


def test_pickle_safety_helper_catches_a_faked_class(project: Any) -> None:
    """DESIGN "Faking __class__": it breaks pickling, and the __reduce__ repair still lies."""
    with pytest.raises(NotSerializableError, match="wrong class"):
        assert_pickle_safe(project.FakedIdentity(project.Scaler(1)), backends=("cloudpickle",))
    with pytest.raises(AssertionError, match="identity is faked"):
        assert_pickle_safe(project.FakedIdentityWithReduce(project.Scaler(1)), backends=("pickle",))
