"""Importable helpers for the cache holder tests.

DataLoader workers started by spawn or forkserver unpickle the dataset, so its class must be
importable by name: the sources live here, not in a test file. Each source call appends one
line ``<pid> <index>`` to a log file opened with ``O_APPEND``, so calls made in any process
are counted in the parent.
"""

import os
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch.utils.data import Dataset, MapDataPipe


def value(i: int) -> Dict[str, Any]:
    """The item at index ``i`` of every test source."""
    return {"i": i, "x": torch.arange(4, dtype=torch.float32) + 10 * i, "s": f"item-{i}"}


class CallLog:
    """Records calls from any process: one ``O_APPEND`` write of one line per call."""

    def __init__(self, path: "str | os.PathLike[str]") -> None:
        self.path = str(path)

    def record(self, what: Any) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{os.getpid()} {what}\n".encode())
        finally:
            os.close(fd)

    def calls(self) -> List[Tuple[int, str]]:
        """``(pid, what)`` of every call so far."""
        if not os.path.exists(self.path):
            return []
        lines = Path(self.path).read_text().splitlines()
        return [(int(pid), what) for pid, what in (line.split(" ", 1) for line in lines)]

    def indices(self) -> List[int]:
        return sorted(int(what) for _, what in self.calls())


class _Counting:
    """``n`` items; every ``__getitem__`` call is logged."""

    def __init__(self, n: int, log_path: "str | os.PathLike[str]") -> None:
        self.n = n
        self.log = CallLog(log_path)

    def __getitem__(self, i: int) -> Dict[str, Any]:
        if not 0 <= i < self.n:
            raise IndexError(i)
        self.log.record(i)
        return value(i)

    def __len__(self) -> int:
        return self.n


class CountingDataset(_Counting, Dataset):
    """A map-style dataset of ``n`` items that logs every ``__getitem__`` call."""

    def __init__(self, n: int, log_path: "str | os.PathLike[str]", name: str = "counting") -> None:
        super().__init__(n, log_path)
        self.name = name

    def describe(self) -> str:
        return f"{self.name}[{self.n}]"


class BatchCountingDataset(CountingDataset):
    """Like :class:`CountingDataset`, with a ``__getitems__`` that logs ``batch:<indices>`` once."""

    def __getitems__(self, indices: List[int]) -> List[Dict[str, Any]]:
        self.log.record("batch:" + ",".join(map(str, indices)))
        return [value(i) for i in indices]


class CountingMapDataPipe(_Counting, MapDataPipe):
    """A map-style DataPipe of ``n`` items that logs every ``__getitem__`` call."""


class LoggedFn:
    """A picklable per-item function for the node tests: ``x -> x * x + 1``, each call logged."""

    def __init__(self, log_path: "str | os.PathLike[str]") -> None:
        self.log = CallLog(log_path)

    def __call__(self, x: int) -> int:
        self.log.record(x)
        return x * x + 1


def spy_get_many(cache: Any) -> List[List[str]]:
    """Record the stored keys of every backend ``_get_many`` round trip of ``cache`` (this process)."""
    calls: List[List[str]] = []
    inner = cache._get_many

    def _get_many(keys: List[str]) -> Any:
        calls.append(list(keys))
        return inner(keys)

    cache._get_many = _get_many
    return calls


def service_error(name: str) -> Optional[str]:
    """Why ``name`` (redis or memcached) cannot be used, or None if it accepts connections."""
    from cache_servers import SHARED_SERVERS, port_open  # not at the top: workers import this module

    host, port = SHARED_SERVERS[name]
    if not port_open(port, host, timeout=2.0):
        return f"{name} is not reachable on {host}:{port}: run `make services` first"
    return None


def require_service(name: str) -> None:
    """Fail (never skip) if ``name`` (redis or memcached) does not accept connections."""
    from cache_servers import require_shared

    require_shared(name)


def unique_namespace(prefix: str = "t") -> str:
    return f"{prefix}{uuid.uuid4().hex[:16]}"


def cache_url(backend: str, tmp_path: Path, namespace: str) -> str:
    """The URL of a fresh, empty cache of ``backend`` for one test."""
    if backend == "memory":
        return "memory://"
    if backend == "sqlite":
        return f"sqlite://{tmp_path / 'cache.db'}?namespace={namespace}&strict=true"
    require_service(backend)
    from cache_servers import SHARED_SERVERS

    host, port = SHARED_SERVERS[backend]
    db = "/0" if backend == "redis" else ""
    return f"{backend}://{host}:{port}{db}?namespace={namespace}&ttl=600&strict=true"


class Zipped(Dataset):
    """Several map-style datasets read together: item ``i`` is ``{name: part[i] for each part}``.

    A batch is fetched with each part's ``__getitems__`` when it has one, else item by item.
    Lets one DataLoader run (one set of worker start-ups) exercise several holders at once.
    """

    def __init__(self, parts: Dict[str, Any]) -> None:
        lengths = {len(p) for p in parts.values()}
        if len(lengths) != 1:
            raise ValueError(f"parts differ in length: {lengths}")
        self.parts = parts

    def __getitem__(self, i: int) -> Dict[str, Any]:
        return {name: part[i] for name, part in self.parts.items()}

    def __getitems__(self, indices: List[int]) -> List[Dict[str, Any]]:
        columns = {}
        for name, part in self.parts.items():
            getitems = getattr(part, "__getitems__", None)
            columns[name] = getitems(list(indices)) if getitems else [part[i] for i in indices]
        return [{name: col[k] for name, col in columns.items()} for k in range(len(indices))]

    def __len__(self) -> int:
        return len(next(iter(self.parts.values())))
