"""Ranks x DataLoader workers x even modes: exactly once, equal counts, orders per (seed, epoch)."""

from collections import Counter
from pathlib import Path
from typing import List

import pytest
from data_testutil import ids, loader_ids, transform_output

from torchx_datapipes.data import OutputDataset

N = 1013  # prime: not a multiple of any world size, worker count or batch size here


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> str:
    return transform_output(tmp_path_factory.mktemp("sh"), [300, 0, 5000 - 4587, 300], "jsonl")


def _ds(out: str, **kw: object) -> OutputDataset:
    kw.setdefault("shuffle", True)
    kw.setdefault("shuffle_window", 200)
    return OutputDataset(out, seed=3, **kw)  # type: ignore[arg-type]


def _simulated(ds: OutputDataset, nw: int) -> List[int]:
    """What DataLoader(ds, num_workers=nw) yields as a set: each worker's iterator, in process."""
    return [i for w in range(max(nw, 1)) for i in ids(list(ds._iterate(w, max(nw, 1))))]


def _ranks(out: str, world: int, even: str, nw: int) -> List[List[int]]:
    return [_simulated(_ds(out, rank=r, world_size=world, even=even), nw) for r in range(world)]


@pytest.mark.parametrize("even", ["none", "pad", "drop"])
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_exactly_once_equal_counts_and_worker_independent_sets(out: str, world: int, even: str) -> None:
    order = ids(_ds(out))  # the epoch order, world size 1
    assert sorted(order) == list(range(N))
    per_nw = {nw: _ranks(out, world, even, nw) for nw in (0, 1, 2, 3)}
    q, rem = divmod(N, world)
    for nw, ranks in per_nw.items():
        lens = [len(r) for r in ranks]
        everything = [i for r in ranks for i in r]
        if even == "none":
            assert lens == [q + (r < rem) for r in range(world)], nw
            assert sorted(everything) == list(range(N)), nw  # each record exactly once
        elif even == "drop":
            assert lens == [q] * world, nw
            assert sorted(everything) == sorted(order[: q * world]), nw  # the last N % W dropped
        else:
            size = -(-N // world)
            assert lens == [size] * world, nw
            extra = Counter(everything) - Counter(range(N))
            assert extra == Counter(order[: size * world - N]), nw  # the first ones repeated
        for r, mine in enumerate(ranks):
            assert len(_ds(out, rank=r, world_size=world, even=even)) == len(mine)
    sets = {nw: [sorted(r) for r in ranks] for nw, ranks in per_nw.items()}
    assert sets[0] == sets[1] == sets[2] == sets[3]  # a rank's records never depend on num_workers
    assert [i for r in per_nw[0] for i in r][: q * world] == order[: q * world]  # contiguous spans


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize(
    ("world", "nw", "even"), [(3, 2, "none"), (3, 2, "pad"), (2, 3, "drop"), (4, 1, "none")]
)
def test_dataloader_workers_serve_the_simulated_sets(out: str, world: int, nw: int, even: str) -> None:
    """Real DataLoader workers (forked) yield what the in-process simulation above checks."""
    for r in range(world):
        ds = _ds(out, rank=r, world_size=world, even=even)
        got = loader_ids(ds, nw, batch_size=5)
        assert sorted(got) == sorted(_simulated(ds, nw))
        assert len(got) == len(ds)


def test_pad_flags_the_repeated_records(out: str) -> None:
    world = 4
    recs = [list(_ds(out, rank=r, world_size=world, even="pad")) for r in range(world)]
    flags = [rec["__pad__"] for rank in recs for rec in rank]
    assert all(isinstance(f, bool) for f in flags)
    assert sum(flags) == 4 * 254 - N and not any(flags[:N]) and all(flags[N:])
    real = sorted(int(rec["id"]) for rank in recs for rec in rank if not rec["__pad__"])
    assert real == list(range(N))
    assert "__pad__" not in next(iter(_ds(out, even="drop")))


def test_epochs_differ_seed_repeats_and_no_shuffle_is_in_order(out: str) -> None:
    ds = _ds(out)
    e0 = ids(ds)
    ds.set_epoch(1)
    e1 = ids(ds)
    assert sorted(e0) == sorted(e1) and e0 != e1
    assert ids(_ds(out)) == e0  # same seed, same epoch: same order
    assert ids(OutputDataset(out, shuffle=True, seed=4, shuffle_window=200)) != e0
    assert ids(OutputDataset(out)) == list(range(N))
    # a window spanning everything: an exact permutation of all records
    whole = ids(OutputDataset(out, shuffle=True, shuffle_window=N))
    assert sorted(whole) == list(range(N)) and whole != list(range(N))


def test_shuffle_mixes_parts_and_rows(out: str) -> None:
    order = ids(_ds(out))
    first_window = order[:200]
    assert first_window != sorted(first_window)  # rows permuted inside the window
    starts = [order.index(i) for i in (0, 300, 713)]  # first records of the three parts
    assert starts != sorted(starts) or starts[0] != 0  # the parts are permuted


def test_more_ranks_than_records(tmp_path: Path) -> None:
    small = transform_output(tmp_path, [2, 1], "parquet")
    for even, want in (("none", [1, 1, 1, 0, 0]), ("drop", [0] * 5), ("pad", [1] * 5)):
        got = [len(ids(OutputDataset(small, rank=r, world_size=5, even=even))) for r in range(5)]
        assert got == want, even
        assert [len(OutputDataset(small, rank=r, world_size=5, even=even)) for r in range(5)] == want
    pads = [
        rec["__pad__"] for r in range(5) for rec in OutputDataset(small, rank=r, world_size=5, even="pad")
    ]
    assert pads == [False] * 3 + [True] * 2


def test_in_order_parquet_streams_row_groups_from_any_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchx_datapipes.formats.parquet import reader as _parquet

    out = transform_output(tmp_path, [40, 57], "parquet")
    monkeypatch.setattr(_parquet, "STREAM_ROWS", 7)  # batches straddle every span boundary
    for world, nw in ((1, 1), (3, 2), (4, 3)):
        got = [
            ids(list(OutputDataset(out, rank=r, world_size=world)._iterate(w, nw)))
            for r in range(world)
            for w in range(nw)
        ]
        assert [i for g in got for i in g] == list(range(97)), (world, nw)  # contiguous, in order
    ds = OutputDataset(out)
    ds.load_state_dict({**ds.state_dict(), "yielded": 45})  # resume inside the second row group
    assert ids(list(ds)) == list(range(45, 97))


def test_parquet_streams_serve_what_jsonl_chunks_serve(
    out: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same chunk sizes (one per part), same epoch order: Parquet's progressive decoding (tiny
    batches straddling windows, spans and pads) must serve exactly the JSON Lines records."""
    from torchx_datapipes.formats.parquet import reader as _parquet

    pq_out = transform_output(tmp_path, [300, 0, 5000 - 4587, 300], "parquet")
    monkeypatch.setattr(_parquet, "STREAM_ROWS", 7)
    for world, nw, even in ((1, 1, "none"), (3, 2, "pad"), (4, 3, "drop")):
        for r in range(world):
            for w in range(nw):
                want = ids(list(_ds(out, rank=r, world_size=world, even=even)._iterate(w, nw)))
                got = ids(list(_ds(pq_out, rank=r, world_size=world, even=even)._iterate(w, nw)))
                assert got == want, (world, nw, even, r, w)
