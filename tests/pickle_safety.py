"""Round-trip objects through pickle, cloudpickle and torch.package into a fresh interpreter.

Use :func:`assert_pickle_safe` for anything that crosses a process boundary: shipped user
functions, caches, datasets, DataPipes (torch's DataLoader re-pickles them with plain
``pickle`` for spawned workers). Each backend loads in its own new interpreter whose cwd
is an empty directory and whose ``sys.path`` holds only ``torchx_datapipes`` and the
installed packages, so nothing works by accident because the parent's modules were
importable. The child checks:

* type identity: ``type(x) is C`` where ``C`` is looked up by qualified name in the child
  (by import for ``pickle``; through the package's importer for ``torch.package``; for
  classes cloudpickle rebuilt by value there is no name to look up, so only the names are
  compared), and that ``type(x)`` and ``x.__class__`` agree -- a ``__class__`` property
  that fakes identity fails;
* behaviour: ``check(x)`` evaluated in the child equals ``check(obj)`` in the parent.

Example::

    SOURCE = '''
    class Counter:
        def __init__(self): self.n = 2
        def total(self): return self.n * 10
    def make(): return Counter()
    '''
    assert_pickle_safe(SOURCE, check="x.total()")            # -> 20 in each child
    assert_pickle_safe(my_cache, check=lambda c: c.get("k"), backends=("pickle",))
"""

import hashlib
import importlib
import os
import pickle
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, Union

import torchx_datapipes
from torchx_datapipes import artifact

ALL_BACKENDS = ("pickle", "cloudpickle", "torch.package")
PACKAGE_ROOT = str(Path(torchx_datapipes.__file__).resolve().parent.parent)
Check = Union[str, Callable[[Any], Any], None]
_UNSET: Any = object()


@dataclass(frozen=True)
class ChildReport:
    """What the fresh interpreter saw after loading the object."""

    backend: str
    type_module: str
    type_qualname: str
    class_module: str
    class_qualname: str
    type_is_class: bool
    resolved_is_type: bool | None  # None: the class has no importable name (cloudpickle by value)
    result: Any


def run_fresh(
    code: str, *, cwd: str | os.PathLike[str], extra_path: Sequence[str] = (), timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``python -c code`` in a new interpreter with ``PYTHONPATH`` = torchx_datapipes + extra_path.

    Raises ``AssertionError`` with the child's output if it exits non-zero.
    """
    return _finish(_start_fresh(code, cwd=cwd, extra_path=extra_path), timeout)


def _start_fresh(
    code: str, *, cwd: str | os.PathLike[str], extra_path: Sequence[str] = ()
) -> "subprocess.Popen[str]":
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = os.pathsep.join([PACKAGE_ROOT, *extra_path])
    env["PYTHONSAFEPATH"] = "1"  # no '' / script dir on sys.path: the cwd is not importable either
    return subprocess.Popen(
        [sys.executable, "-c", code], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def _finish(proc: "subprocess.Popen[str]", timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    if proc.returncode != 0:
        raise AssertionError(f"child failed ({proc.returncode}):\n{out}\n{err}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


_CHILD = r"""
import importlib, pickle, re, sys
from torchx_datapipes import artifact
from torchx_datapipes.artifact import tpackage_backend as _tpackage
backend, obj_path, check_path, out_path = {args!r}

def lookup(module, qualname):
    obj = module
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj

data = open(obj_path, "rb").read()
if backend == "pickle":
    x = pickle.loads(data)
    cls = lookup(importlib.import_module(type(x).__module__), type(x).__qualname__)
elif backend == "cloudpickle":
    x = artifact.load(obj_path)
    try:
        cls = lookup(importlib.import_module(type(x).__module__), type(x).__qualname__)
    except ImportError:
        cls = None  # rebuilt by value: no importable name
else:
    header_end = data.index(b"\n") + 1
    imp = _tpackage.importer(data[header_end:])
    x = imp.load_pickle(_tpackage.PACKAGE, _tpackage.RESOURCE)
    plain = re.sub(r"^<torch_package_\d+>\.", "", type(x).__module__)
    cls = lookup(imp.import_module(plain), type(x).__qualname__)

check = artifact.load(check_path) if check_path.endswith(".pkl") else open(check_path).read()
result = check(x) if callable(check) else (eval(check, {{"x": x}}) if check else None)
report = dict(
    type_module=re.sub(r"^<torch_package_\d+>\.", "", type(x).__module__),
    type_qualname=type(x).__qualname__,
    class_module=re.sub(r"^<torch_package_\d+>\.", "", x.__class__.__module__),
    class_qualname=x.__class__.__qualname__,
    type_is_class=type(x) is x.__class__,
    resolved_is_type=None if cls is None else cls is type(x),
    result=result,
)
with open(out_path, "wb") as f:
    pickle.dump(report, f)
"""


def _import_source(source: str, workdir: Path, factory: str) -> tuple[Any, str]:
    """Write ``source`` as a uniquely named module, import it, return (factory(), its dir)."""
    name = "_pickle_safety_" + hashlib.sha256(source.encode()).hexdigest()[:12]
    src_dir = workdir / "src"
    src_dir.mkdir()
    (src_dir / f"{name}.py").write_text(source)
    sys.path.insert(0, str(src_dir))
    try:
        module = importlib.import_module(name)
    finally:
        sys.path.remove(str(src_dir))  # stays in sys.modules, as a user's module would
    return getattr(module, factory)(), str(src_dir)


def _module_root(obj: Any) -> list[str]:
    """The sys.path entry that makes ``type(obj)``'s module importable (for plain pickle)."""
    module = sys.modules.get(type(obj).__module__)
    path = getattr(module, "__file__", None)
    if module is None or not path:
        return []
    root = Path(path).resolve().parent
    for _ in range(module.__name__.count(".")):
        root = root.parent
    return [str(root)]


def _dump(obj: Any, backend: str, workdir: Path) -> str:
    if backend == "pickle":
        target = workdir / "obj.pickle"
        target.write_bytes(pickle.dumps(obj))
        return str(target)
    return artifact.package(obj, str(workdir / "store"), backend=backend).url


def assert_pickle_safe(
    obj: Any,
    check: Check = None,
    backends: Sequence[str] = ALL_BACKENDS,
    *,
    expected: Any = _UNSET,
    factory: str = "make",
) -> Mapping[str, ChildReport]:
    """Assert ``obj`` survives each backend into a fresh interpreter, same type, same behaviour.

    Args:
        obj: the object, or Python *source* of a module whose ``factory()`` returns it. Source
            is written to a temp dir as a user module that the children cannot import, so
            cloudpickle must ship it by value and torch.package must intern it. (``pickle``
            always stores classes by name, so its child gets that module dir on sys.path --
            as DataLoader workers have the parent's modules.)
        check: ``callable(x) -> plain data`` (shipped with cloudpickle) or an expression in
            ``x`` (e.g. ``"x.get('a')"``), evaluated in each child; ``None`` only loads.
        backends: any of ``"pickle"``, ``"cloudpickle"``, ``"torch.package"``.
        expected: the value ``check`` must give; default ``check(obj)`` in this process.
        factory: the zero-argument function to call when ``obj`` is source.

    Returns:
        the :class:`ChildReport` of each backend, for further assertions.
    """
    unknown = sorted(set(backends) - set(ALL_BACKENDS))
    if unknown:
        raise ValueError(f"unknown backends {unknown}; valid: {ALL_BACKENDS}")
    reports: dict[str, ChildReport] = {}
    with tempfile.TemporaryDirectory(prefix="pickle_safety_") as tmp:
        workdir = Path(tmp)
        src_path: list[str] = []
        if isinstance(obj, str):
            obj, src_dir = _import_source(obj, workdir, factory)
            src_path = [src_dir]
        if expected is _UNSET:
            expected = None if check is None else (check(obj) if callable(check) else eval(check, {"x": obj}))
        if callable(check):
            check_path = artifact.package(check, str(workdir / "checks")).url
        else:
            check_path = str(workdir / "check.txt")
            Path(check_path).write_text(check or "")
        children: dict[str, subprocess.Popen[str]] = {}
        try:  # one fresh interpreter per backend, started together (each imports torch: seconds)
            for backend in backends:
                obj_path = _dump(obj, backend, workdir)
                out_path = workdir / f"report-{backend}.pkl"
                cwd = workdir / f"cwd-{backend.replace('.', '_')}"
                cwd.mkdir()
                extra = (src_path or _module_root(obj)) if backend == "pickle" else []
                code = _CHILD.format(args=(backend, obj_path, check_path, str(out_path)))
                children[backend] = _start_fresh(code, cwd=cwd, extra_path=extra)
            for backend, child in children.items():
                _finish(child, 120)
                with open(workdir / f"report-{backend}.pkl", "rb") as f:
                    reports[backend] = ChildReport(backend=backend, **pickle.load(f))
        finally:
            for child in children.values():
                if child.poll() is None:
                    child.kill()
                    child.communicate()
    for report in reports.values():
        _assert_report(obj, report, expected)
    return reports


def _assert_report(obj: Any, report: ChildReport, expected: Any) -> None:
    cls = type(obj)
    where = f"[{report.backend}]"
    assert report.type_is_class, f"{where} type(x) is not x.__class__: identity is faked"
    assert (report.type_module, report.type_qualname) == (cls.__module__, cls.__qualname__), (
        f"{where} loaded a {report.type_module}.{report.type_qualname},"
        f" expected {cls.__module__}.{cls.__qualname__}"
    )
    assert (report.class_module, report.class_qualname) == (cls.__module__, cls.__qualname__), where
    assert report.resolved_is_type in (True, None), f"{where} type(x) is not the class its name resolves to"
    if report.backend != "cloudpickle":
        assert report.resolved_is_type is True, f"{where} {cls.__qualname__} could not be resolved by name"
    assert report.result == expected, f"{where} check gave {report.result!r}, expected {expected!r}"
