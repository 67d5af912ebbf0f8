"""Mid-epoch resume with StatefulDataLoader, and elastic resume (W -> W') with merge_states."""

from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest
from data_testutil import transform_output
from torchdata.stateful_dataloader import StatefulDataLoader

from torchx_datapipes.data import OutputDataset, merge_states
from torchx_datapipes.formats import registry as _registry
from torchx_datapipes.io import partfiles as _files

N = 389  # prime


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> str:
    return transform_output(tmp_path_factory.mktemp("r"), [100, 150, 139], "parquet")


def _ds(out: str, rank: int = 0, world: int = 1, **kw: Any) -> OutputDataset:
    return OutputDataset(out, shuffle=True, seed=5, shuffle_window=64, rank=rank, world_size=world, **kw)


def _flat(batch: Any) -> List[int]:
    if isinstance(batch["id"], int):  # batch_size=None: one record
        return [batch["id"]]
    return [int(i) for i in batch["id"]]


def _loader(ds: OutputDataset, nw: int, bs: Optional[int]) -> StatefulDataLoader:
    return StatefulDataLoader(ds, batch_size=bs, num_workers=nw)


def _take(loader: StatefulDataLoader, steps: int) -> Tuple[List[int], Dict[str, Any]]:
    got: List[int] = []
    it = iter(loader)
    for _ in range(steps):
        got.extend(_flat(next(it)))
    state = loader.state_dict()
    del it
    return got, state


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize(("nw", "bs", "steps"), [(0, 6, 5), (1, 6, 4), (2, None, 7), (2, 6, 33), (3, 4, 5)])
def test_mid_epoch_resume_gives_the_rest_in_order(out: str, nw: int, bs: Optional[int], steps: int) -> None:
    full = [i for b in _loader(_ds(out, 1, 2), nw, bs) for i in _flat(b)]
    first, state = _take(_loader(_ds(out, 1, 2), nw, bs), steps)
    assert first == full[: len(first)]
    if (bs, steps) in ((None, 7), (6, 33)):  # 7 and 193 records: not a multiple of workers or batch
        assert len(first) in (7, 193)
    resumed = _loader(_ds(out, 1, 2), nw, bs)
    resumed.load_state_dict(state)
    rest = [i for b in resumed for i in _flat(b)]
    assert first + rest == full


def test_resume_does_not_read_the_skipped_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = transform_output(tmp_path, [50, 50, 50, 50], "jsonl")
    first, state = _take(_loader(OutputDataset(out), 0, 10), 12)  # 120 records: parts 0, 1, 2 started
    _registry.clear_caches()  # as a restarted process: nothing indexed or kept yet
    opened: List[str] = []
    real = _files.open_part
    monkeypatch.setattr(_files, "open_part", lambda part, *a: opened.append(part.path) or real(part, *a))
    resumed = _loader(OutputDataset(out), 0, 10)
    resumed.load_state_dict(state)
    rest = [i for b in resumed for i in _flat(b)]
    assert first + rest == list(range(200))
    assert set(opened) == {"part-00002.jsonl", "part-00003.jsonl"}


def _run_ranks(
    out: str, world: int, nw: int, steps: List[int], state: Optional[Dict[str, Any]] = None
) -> Tuple[List[int], List[Dict[str, Any]]]:
    """Each rank of a ``world``-rank job takes ``steps[r]`` batches of 4; returns (seen, states)."""
    seen: List[int] = []
    states = []
    for r in range(world):
        ds = _ds(out, r, world)
        if state is not None:
            ds.load_state_dict(state)
        got, st = _take(_loader(ds, nw, 4), steps[r])
        seen += got
        states.append(st)
    return seen, states


def _finish(out: str, world: int, nw: int, merged: Dict[str, Any]) -> List[int]:
    rest: List[int] = []
    for r in range(world):
        ds = _ds(out, r, world)
        ds.load_state_dict(merged)
        rest += [i for b in _loader(ds, nw, 4) for i in _flat(b)]
    return rest


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize(("w1", "nw1", "w2", "nw2"), [(2, 2, 1, 0), (1, 2, 2, 1), (3, 1, 2, 3)])
def test_elastic_resume_serves_exactly_the_unseen(out: str, w1: int, nw1: int, w2: int, nw2: int) -> None:
    seen, states = _run_ranks(out, w1, nw1, [3, 5, 2][:w1])
    merged = merge_states(states)
    assert set(merged) >= {"epoch", "plan", "num_records"} and "rank" not in merged
    rest = _finish(out, w2, nw2, merged)
    assert sorted(seen + rest) == list(range(N)) and not set(seen) & set(rest)
    ds = _ds(out)
    ds.load_state_dict(merged)
    assert len(ds) == N - len(seen)
    ds.set_epoch(1)  # the next epoch is whole again
    assert len(ds) == N and sorted(int(r["id"]) for r in ds) == list(range(N))


def test_nested_elastic_resume(out: str) -> None:
    seen1, states = _run_ranks(out, 2, 0, [4, 7])
    m1 = merge_states(states)
    seen2, states2 = _run_ranks(out, 3, 0, [2, 1, 5], m1)
    m2 = merge_states(states2)
    rest = _finish(out, 1, 0, m2)
    assert sorted(seen1 + seen2 + rest) == list(range(N))
    assert merge_states([m2]) == m2


def test_pad_mode_elastic_counts_real_records_only(out: str) -> None:
    states = []
    seen: List[int] = []
    for r in range(2):
        ds = _ds(out, r, 2, even="pad")
        recs = list(ds)  # the whole epoch: rank 1 ends with a pad
        seen += [int(x["id"]) for x in recs if not x["__pad__"]]
        states.append(ds.state_dict())
    assert sorted(seen) == list(range(N))
    merged = merge_states(states)
    assert merged["plan"] == []


def test_merge_errors_and_layout_mismatch(out: str) -> None:
    _, states = _run_ranks(out, 2, 0, [1, 1])
    with pytest.raises(ValueError, match=r"\(rank, worker\) \[\(1, 0\)\] are missing"):
        merge_states(states[:1])
    other = _ds(out, 0, 2)
    other.set_epoch(3)
    with pytest.raises(ValueError, match="states disagree on 'epoch'"):
        merge_states([states[0], other.state_dict()])
    with pytest.raises(ValueError, match="no OutputDataset state"):
        merge_states([{"a": 1}])
    ds = _ds(out, 0, 3)
    with pytest.raises(ValueError, match=r"another layout.*merge_states"):
        ds.load_state_dict(states[0]["dataset_state"])
    with pytest.raises(ValueError, match=r"state has seed=5 but this dataset has seed=6"):
        OutputDataset(out, shuffle=True, seed=6, shuffle_window=64).load_state_dict(merge_states(states))
    lagging = {**states[0], "_steps_since_snapshot": 2}
    with pytest.raises(ValueError, match="snapshot_every_n_steps=1"):
        merge_states([lagging, states[1]])
