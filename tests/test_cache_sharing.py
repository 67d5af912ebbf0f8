"""The headline: a shared cache computes each item once for every DataLoader worker and epoch.

torchdata's old ``in_memory_cache`` kept a dict per process: 64 items read for 3 epochs by 2
non-persistent workers cost 192 source calls. Through a ``sqlite://``, ``redis://`` or
``memcached://`` cache the same loop costs exactly 64, whichever start method creates the
workers. Every source call is logged with an ``O_APPEND`` write, so all workers' calls count.

Worker start-up dominates the cost under spawn and forkserver (each worker imports torch),
so the start-method matrix runs once per method over a :class:`Zipped` dataset of all six
(holder, backend) pairs -- each pair with its own source, call log and cache namespace --
and each test asserts on its own pair. The default matrix has one start method, fork
(``TDP_CACHE_START_METHODS=fork,spawn,forkserver`` runs all three: about 40 s more on the
2-core test machine). The ``direct`` tests hand a single holder to the DataLoader as a user
would (a MapDataPipe then goes through torch's serialization wrapper), one of them under spawn;
every holder's pickling in a fresh interpreter is in ``test_cache_holders.py``.
"""

import os
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest
import torch
from cache_holder_testutil import (
    CallLog,
    CountingDataset,
    CountingMapDataPipe,
    Zipped,
    cache_url,
    service_error,
    unique_namespace,
    value,
)
from torch.utils.data import DataLoader

from torchx_datapipes.cache import open_cache
from torchx_datapipes.cache.holders import CachedDataset

N, EPOCHS, BATCH = 64, 3, 8
BACKENDS = ["sqlite", "redis", "memcached"]
METHODS = os.environ.get("TDP_CACHE_START_METHODS", "fork").split(",")


def cached_dataset(log: Path, url: str) -> Any:
    return CachedDataset(CountingDataset(N, log), url)


def kv_cache_pipe(log: Path, url: str) -> Any:
    return CountingMapDataPipe(N, log).kv_cache(url)


HOLDERS: Dict[str, Callable[[Path, str], Any]] = {"CachedDataset": cached_dataset, "kv_cache": kv_cache_pipe}
Epoch = Dict[str, Any]


def run_epochs(dataset: Any, method: str) -> List[Any]:
    """The batches of ``EPOCHS`` epochs, each epoch with 2 fresh (non-persistent) workers."""
    loader = DataLoader(
        dataset, batch_size=BATCH, num_workers=2, persistent_workers=False, multiprocessing_context=method
    )
    return [list(loader) for _ in range(EPOCHS)]


def merge(batches: List[Dict[str, Any]]) -> Epoch:
    return {
        "i": torch.cat([b["i"] for b in batches]).tolist(),
        "x": torch.cat([b["x"] for b in batches]),
        "s": [s for b in batches for s in b["s"]],
    }


def assert_epochs_correct(epochs: List[Epoch]) -> None:
    expected = [value(i) for i in range(N)]
    assert len(epochs) == EPOCHS
    for e, epoch in enumerate(epochs):
        assert epoch["i"] == list(range(N)), f"epoch {e}"
        assert torch.equal(epoch["x"], torch.stack([v["x"] for v in expected])), f"epoch {e}"
        assert epoch["s"] == [v["s"] for v in expected], f"epoch {e}"


def assert_computed_once(log: CallLog, what: str) -> None:
    calls = log.calls()
    assert log.indices() == list(range(N)), (
        f"{what}: {len(calls)} source calls for {N} items x {EPOCHS} epochs"
    )
    assert len({pid for pid, _ in calls}) == 2, f"{what}: the first epoch's two workers did all the work"


def fresh_url(backend: str, tmp_path: Path) -> str:
    url = cache_url(backend, tmp_path, unique_namespace())
    # Start from an empty cache, created by the parent. (Two workers creating a new sqlite file
    # at the same moment can race on PRAGMA journal_mode=WAL: "database is locked".)
    open_cache(url).clear()
    return url


# ---------------------------------------------------------------- the start-method matrix
Pair = Tuple[str, str]  # (holder, backend)
_RUNS: Dict[str, Dict[Pair, Any]] = {}


def matrix_run(method: str, root: Path) -> Dict[Pair, Any]:
    """One DataLoader run for ``method`` over all (holder, backend) pairs; per pair: epochs + log,
    or the reason its backend is unavailable."""
    if method in _RUNS:
        return _RUNS[method]
    results: Dict[Pair, Any] = {}
    parts: Dict[str, Any] = {}
    logs: Dict[Pair, CallLog] = {}
    urls: List[str] = []
    for backend in BACKENDS:
        error: Optional[str] = service_error(backend) if backend != "sqlite" else None
        for holder, make in HOLDERS.items():
            if error:
                results[holder, backend] = error
                continue
            d = root / f"{holder}-{backend}"
            d.mkdir()
            url = fresh_url(backend, d)
            urls.append(url)
            logs[holder, backend] = CallLog(d / "calls.log")
            parts[f"{holder}/{backend}"] = make(d / "calls.log", url)
    try:
        epochs = run_epochs(Zipped(parts), method) if parts else []
    finally:
        for url in urls:
            open_cache(url).clear()
    for (holder, backend), log in logs.items():
        name = f"{holder}/{backend}"
        results[holder, backend] = ([merge([b[name] for b in batches]) for batches in epochs], log)
    _RUNS[method] = results
    return results


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("holder", list(HOLDERS))
@pytest.mark.parametrize("method", METHODS)
def test_shared_cache_computes_each_item_once(
    method: str, holder: str, backend: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    result = matrix_run(method, tmp_path_factory.mktemp(f"matrix-{method}"))[holder, backend]
    if isinstance(result, str):
        pytest.fail(result, pytrace=False)
    epochs, log = result
    assert_epochs_correct(epochs)
    assert_computed_once(log, f"{holder} on {backend} under {method}")


# --------------------------------------------------------------------- direct DataLoader use
DIRECT = [(h, b, "fork") for h in HOLDERS for b in BACKENDS] + [("kv_cache", "redis", "spawn")]


@pytest.mark.parametrize("holder, backend, method", DIRECT)
def test_direct_holder_computes_each_item_once(
    holder: str, backend: str, method: str, tmp_path: Path
) -> None:
    url = fresh_url(backend, tmp_path)
    try:
        epochs = run_epochs(HOLDERS[holder](tmp_path / "calls.log", url), method)
    finally:
        open_cache(url).clear()
    assert_epochs_correct([merge(batches) for batches in epochs])
    assert_computed_once(CallLog(tmp_path / "calls.log"), f"{holder} on {backend} under {method}")


# ------------------------------------------------------------- the old behaviour, for contrast
def test_memory_cache_is_per_process_like_torchdata(tmp_path: Path) -> None:
    """Documented, not a failure: ``memory://`` is a private dict per worker, as torchdata's was.

    Fresh workers each epoch start empty, so every epoch reads all 64 items again: 192 calls.
    """
    log = CallLog(tmp_path / "calls.log")
    epochs = run_epochs(CachedDataset(CountingDataset(N, tmp_path / "calls.log"), "memory://"), "fork")
    assert_epochs_correct([merge(batches) for batches in epochs])
    assert len(log.calls()) == N * EPOCHS == 192
    assert log.indices() == sorted(list(range(N)) * EPOCHS)
    assert len({pid for pid, _ in log.calls()}) == 2 * EPOCHS


def test_in_memory_cache_pipe_is_per_process_like_torchdata(tmp_path: Path) -> None:
    """``dp.in_memory_cache()`` keeps torchdata's semantics: one private copy per worker."""
    log = CallLog(tmp_path / "calls.log")
    pipe = CountingMapDataPipe(N, tmp_path / "calls.log").in_memory_cache()
    assert_epochs_correct([merge(batches) for batches in run_epochs(pipe, "fork")])
    assert len(log.calls()) == N * EPOCHS == 192
