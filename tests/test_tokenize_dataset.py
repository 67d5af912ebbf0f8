"""Issue 31: ``TokenDataset`` serves packed windows with document and position ids, exactly once.

A tokenize output is written once in this process (``out``); the reference stream is the
tokenizer's own ``encode`` of every document plus the eos, in input order. The DDP test runs
``tests/tokenize_dataset_worker.py`` under ``torchrun --standalone`` with 2 ranks x 2 workers.
"""

import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import orjson
import pytest
import torch
from tdp_testutil import run_op
from tokenize_dataset_worker import build_tokenizer, write_corpus
from torchdata.stateful_dataloader import StatefulDataLoader

from torchx_datapipes.data import TokenDataset
from torchx_datapipes.errors import ReadError

SEQ = 16
WORKER = Path(__file__).with_name("tokenize_dataset_worker.py")

Stream = Tuple[np.ndarray, np.ndarray, np.ndarray]  # input_ids, document_ids, position_ids


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Tuple[Path, Stream]:
    """A tokenize output of 3 files in several units and shards, and its reference stream."""
    from tokenizers import Tokenizer

    root = tmp_path_factory.mktemp("tokds")
    tok = build_tokenizer(root / "tokenizer.json")
    docs = write_corpus(root / "data", [150, 90, 61])
    run_op("tokenize", str(root / "data"), root / "out", "--tokenizer", str(tok), "--eos", "</s>",
           "--unit_mb", "0.004", "--shard_mb", "0.0008")  # fmt: skip
    t = Tokenizer.from_file(str(tok))
    ids = [t.encode(d).ids + [1] for d in docs]
    stream = (
        np.concatenate(ids),
        np.concatenate([np.full(len(x), d) for d, x in enumerate(ids)]),
        np.concatenate([np.arange(len(x)) for x in ids]),
    )
    return root / "out", stream


def window_of(item: Dict[str, Any], stream: Stream) -> int:
    """Which window ``item`` is (from its first token's document and position), checked token by token."""
    docs = np.asarray(item["document_ids"])
    first = int(np.flatnonzero(stream[1] == docs[0])[0]) + int(np.asarray(item["position_ids"])[0])
    assert first % SEQ == 0
    for arr, ref in zip((item["input_ids"], item["document_ids"], item["position_ids"]), stream):
        assert np.asarray(arr).tolist() == ref[first : first + SEQ].tolist()
    return first // SEQ


def test_windows_are_the_stream_with_document_and_position_ids(out: Tuple[Path, Stream]) -> None:
    path, stream = out
    ds = TokenDataset(str(path), seq_len=SEQ)
    items = list(ds)
    assert len(items) == len(stream[0]) // SEQ == ds.num_windows == len(ds)
    assert [window_of(it, stream) for it in items] == list(range(len(items)))
    assert all(it["input_ids"].dtype == torch.int64 and it["input_ids"].shape == (SEQ,) for it in items)
    m = orjson.loads((path / "_SUCCESS").read_bytes())
    assert len(m["tokenize"]["shards"]) > len(m["units"]) > 3  # windows cross shard boundaries


def test_ddp_2_ranks_x_2_workers_read_every_window_exactly_once(
    out: Tuple[Path, Stream], tmp_path: Path
) -> None:
    path, stream = out
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(WORKER), str(path), str(SEQ), str(tmp_path / "res")]  # fmt: skip
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(WORKER.parent), os.environ.get("PYTHONPATH", "")]),
    }
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    ranks = [orjson.loads((tmp_path / f"res.rank{r}.json").read_bytes()) for r in (0, 1)]
    n = len(stream[0]) // SEQ
    orders = []
    for epoch in ("0", "1"):
        per_rank = [[window_of(it, stream) for it in r["epochs"][epoch]] for r in ranks]
        assert [len(w) for w in per_rank] == [r["len"] for r in ranks]
        got = per_rank[0] + per_rank[1]
        assert sorted(got) == list(range(n)), epoch  # every window once, none twice
        orders.append(got)
    assert orders[0] != orders[1]  # set_epoch reshuffles


def _take(loader: StatefulDataLoader, steps: int) -> Tuple[List[Any], Dict[str, Any]]:
    it, got = iter(loader), []
    for _ in range(steps):
        got.append(next(it))
    state = loader.state_dict()
    del it
    return got, state


def _windows(batches: List[Any], stream: Stream, batched: bool) -> List[int]:
    if not batched:
        return [window_of(b, stream) for b in batches]
    return [
        window_of({k: v[i] for k, v in b.items()}, stream)
        for b in batches
        for i in range(len(b["input_ids"]))
    ]


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize(("workers", "batch", "steps"), [(0, None, 11), (2, 4, 7)])
def test_mid_epoch_resume_gives_exactly_the_rest(
    out: Tuple[Path, Stream], workers: int, batch: Optional[int], steps: int
) -> None:
    path, stream = out

    def loader() -> StatefulDataLoader:
        ds = TokenDataset(str(path), seq_len=SEQ, shuffle=True, seed=3)
        ds.set_epoch(2)
        return StatefulDataLoader(ds, batch_size=batch, num_workers=workers)

    whole = _windows(list(loader()), stream, batch is not None)
    first, state = _take(loader(), steps)
    resumed = loader()
    resumed.load_state_dict(pickle.loads(pickle.dumps(state)))
    rest = _windows(list(resumed), stream, batch is not None)
    head = _windows(first, stream, batch is not None)
    assert sorted(head + rest) == sorted(whole) == list(range(len(stream[0]) // SEQ))
    assert head + rest == whole  # the same order as an uninterrupted epoch


def test_state_of_other_arguments_is_refused_and_dataset_pickles(out: Tuple[Path, Stream]) -> None:
    path, stream = out
    ds = TokenDataset(str(path), seq_len=SEQ)
    next(iter(ds))
    state = ds.state_dict()
    with pytest.raises(ReadError, match="seq_len=16 but this TokenDataset has seq_len=8"):
        TokenDataset(str(path), seq_len=8).load_state_dict(state)
    again = pickle.loads(pickle.dumps(ds))
    assert window_of(again.window(5), stream) == 5


def test_reads_are_verified_and_other_outputs_refused(out: Tuple[Path, Stream], tmp_path: Path) -> None:
    import shutil

    from torchx_datapipes.io.verify import PartModifiedError

    path, _ = out
    copy = tmp_path / "copy"
    shutil.copytree(path, copy)
    good = (copy / "part-00000.bin").read_bytes()
    (copy / "part-00000.bin").write_bytes(good[:10] + bytes([good[10] ^ 0xFF]) + good[11:])
    with pytest.raises(PartModifiedError):
        TokenDataset(str(copy), seq_len=SEQ).window(0)
    (copy / "part-00000.bin").write_bytes(good)
    idx = bytearray((copy / "part-00001.idx").read_bytes())
    idx[-1] ^= 0x01
    (copy / "part-00001.idx").write_bytes(bytes(idx))
    ds = TokenDataset(str(copy), seq_len=SEQ)
    with pytest.raises(ReadError, match="part-00001.idx does not match"):
        list(ds)
    with pytest.raises(ReadError, match="seq_len=0"):
        TokenDataset(str(path), seq_len=0)
