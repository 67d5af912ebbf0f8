"""JSON Lines and tar chunks are bounded in bytes as well as records (``_formats.chunk_records``)."""

from pathlib import Path
from typing import Any, Dict, List

import pytest
from data_testutil import ids, loader_ids, transform_output
from torchdata.stateful_dataloader import StatefulDataLoader

from torchx_datapipes.data import OutputDataset
from torchx_datapipes.data._parts import Part, load_parts
from torchx_datapipes.formats import chunks as _formats
from torchx_datapipes.formats import registry as _registry

SIZES = [60, 50, 47]
N = sum(SIZES)


def _part(size: int, records: int) -> Part:
    return Part(url="mem://p", path="p", size=size, records=records)


@pytest.mark.parametrize(
    ("size", "records", "want"),
    [
        (1 << 20, 4000, 4096),  # small part: one chunk, whatever its count
        (50 << 20, 4096, 655),  # 4096 images of 12.8 KB: ~8 MB chunks
        (2 << 30, 2000, 7),  # 1 MB records
        (3 << 30, 1, 1),  # one huge record: a chunk of its own
        (100 << 20, 3, 1),
        (64 << 20, 1 << 20, 4096),  # small records: the record cap
    ],
)
def test_chunk_records_bounds_the_bytes_of_a_chunk(size: int, records: int, want: int) -> None:
    assert _formats.chunk_records(_part(size, records)) == want


def test_fixed_chunks_cover_the_part_exactly() -> None:
    p = _part(50 << 20, 4096)
    sizes = _formats.fixed_chunks(p)
    assert sum(sizes) == 4096 and set(sizes[:-1]) == {655} and 0 < sizes[-1] <= 655
    spans = [_formats.chunk_span(p, c) for c in range(len(sizes))]
    assert [b - a for a, b in spans] == sizes
    assert all(spans[i][1] == spans[i + 1][0] for i in range(len(spans) - 1))
    assert _formats.fixed_chunks(_part(0, 0)) == []


@pytest.fixture(params=["jsonl", "webdataset"])
def small_chunks(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An output whose parts are cut into about five byte-bounded chunks each."""
    out = transform_output(tmp_path, SIZES, request.param)
    _, parts = load_parts(out, None, None)
    monkeypatch.setattr(_formats, "CHUNK_BYTES", min(p.size for p in parts) // 5)
    _registry.clear_caches()
    assert all(1 < _formats.chunk_records(p) < p.records for p in parts), [p.size for p in parts]
    return out


def test_byte_bounded_chunks_serve_every_record_once(small_chunks: str) -> None:
    ds = OutputDataset(small_chunks, read_ahead=0)
    assert len(ds._chunk_sizes) > len(SIZES)
    assert ids(list(ds)) == list(range(N))
    for nw in (0, 2):
        got = loader_ids(OutputDataset(small_chunks, shuffle=True, seed=3, shuffle_window=16), nw)
        assert sorted(got) == list(range(N)) and got != list(range(N))


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_byte_bounded_chunks_resume_mid_chunk(small_chunks: str) -> None:
    def loader() -> StatefulDataLoader:
        ds = OutputDataset(small_chunks, shuffle=True, seed=1, shuffle_window=16)
        return StatefulDataLoader(ds, batch_size=5)

    def flat(batches: Any) -> List[int]:
        return [int(i) for b in batches for i in b["id"]]

    full = flat(loader())
    first_loader = loader()
    it = iter(first_loader)
    first = flat(next(it) for _ in range(7))  # 35 records: inside a chunk
    state: Dict[str, Any] = first_loader.state_dict()
    del it
    resumed = loader()
    resumed.load_state_dict(state)
    assert first + flat(resumed) == full


def test_a_state_of_another_chunking_or_version_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = transform_output(tmp_path, SIZES, "jsonl")
    ds = OutputDataset(out, shuffle=True, seed=1, read_ahead=0)
    it = iter(ds)
    next(it)
    state = ds.state_dict()
    assert state["version"] == 2 and len(state["chunks"]) == 16
    OutputDataset(out, shuffle=True, seed=1).load_state_dict(state)  # same chunking: accepted
    _, parts = load_parts(out, None, None)
    monkeypatch.setattr(_formats, "CHUNK_BYTES", min(p.size for p in parts) // 5)
    with pytest.raises(ValueError, match="chunks=.*cut into other chunks"):
        OutputDataset(out, shuffle=True, seed=1).load_state_dict(state)
    monkeypatch.undo()
    old = {k: v for k, v in state.items() if k != "chunks"}
    with pytest.raises(ValueError, match="another torchx_datapipes version"):
        OutputDataset(out, shuffle=True, seed=1).load_state_dict({**old, "version": 1})
