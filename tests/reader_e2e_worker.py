"""What each rank runs in ``tests/test_e2e_reader.py`` (under real torchrun, gloo, CPU).

``python -m torch.distributed.run --standalone --nproc_per_node W reader_e2e_worker.py PHASE OUT
RESULTS CKPT``: every rank writes ``RESULTS/PHASE-rank<r>.json``; the test asserts on them.

- ``w2`` (2 ranks): exactly once / pad / drop, epochs, seed repeat, the set per rank for 0 and 2
  workers, StatefulDataLoader resume on the same layout, tensors from worker processes, and the
  elastic checkpoint (``all_gather_object`` of the loaders' states, ``merge_states``, rank 0
  pickles it to ``CKPT``).
- ``w1`` (1 rank): resume ``CKPT`` with 3 workers, checkpoint again after a few batches (to
  ``CKPT.2``) and read on to the end of the epoch.
- ``w2b`` (2 ranks): resume ``CKPT.2`` and read to the end; then the next epoch in full.
"""

from __future__ import annotations

import json
import pickle
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

import torchx_datapipes
from torchx_datapipes.data import OutputDataset, merge_states

SPLIT = "train"
SEED = 3  # shuffle seed of the resume and elastic runs
B = 5  # batch size of the resume runs


def ids_of(loader: Any) -> list[int]:
    return [int(i) for batch in loader for i in batch["id"]]


def epoch_ids(out: str, *, nw: int = 2, epoch: int = 0, **kw: Any) -> list[int]:
    ds = OutputDataset(out, SPLIT, **kw)
    ds.set_epoch(epoch)
    return ids_of(DataLoader(ds, batch_size=4, num_workers=nw))


def uneven(out: str, even: str, shuffle: bool) -> dict[str, Any]:
    """``(id, __pad__)`` in loader order, and whether every batch had the ``__pad__`` field."""
    ds = OutputDataset(out, SPLIT, even=even, shuffle=shuffle, seed=0)
    recs: list[tuple[int, bool]] = []
    flagged: list[bool] = []
    for batch in DataLoader(ds, batch_size=4, num_workers=2):
        flagged.append("__pad__" in batch)
        pads = batch.get("__pad__", torch.zeros(len(batch["id"]), dtype=torch.bool))
        recs += [(int(i), bool(p)) for i, p in zip(batch["id"], pads)]
    return {"len": len(ds), "records": recs, "pad_field": sorted(set(flagged))}


def stop_after(loader: Any, n_batches: int) -> tuple[list[int], dict[str, Any]]:
    """The ids of the first ``n_batches`` batches and the loader's state right after them."""
    got: list[int] = []
    for k, batch in enumerate(loader):
        got += [int(i) for i in batch["id"]]
        if k + 1 == n_batches:
            return got, loader.state_dict()
    raise AssertionError(f"the epoch ended before {n_batches} batches")


def stateful(out: str, batch_size: int, nw: int, state: dict[str, Any] | None = None) -> Any:
    ds = OutputDataset(out, SPLIT, shuffle=True, seed=SEED)
    loader = StatefulDataLoader(ds, batch_size=batch_size, num_workers=nw)
    if state is not None:
        loader.load_state_dict(state)
    return loader


def resume_case(out: str, batch_size: int, n_batches: int) -> dict[str, Any]:
    """Uninterrupted epoch vs (first ``n_batches``, state_dict, a new loader, the rest)."""
    full = ids_of(stateful(out, batch_size, 2))
    head, state = stop_after(stateful(out, batch_size, 2), n_batches)
    tail = ids_of(stateful(out, batch_size, 2, state))
    return {"full": full, "head": head, "tail": tail, "state": state}


def first_partial(out: str, batch_size: int) -> int:
    """Batches up to and including the first short batch that is not the epoch's last."""
    sizes = [len(b["id"]) for b in stateful(out, batch_size, 2)]
    short = [k for k, n in enumerate(sizes[:-1]) if n < batch_size]
    return short[0] + 1 if short else len(sizes) // 2


def tensors(out: str) -> list[dict[str, Any]]:
    """Records made in DataLoader worker processes: field -> [type, dtype, shape, value]."""
    found = []
    for rec in DataLoader(OutputDataset(out, SPLIT), batch_size=None, num_workers=2):
        found.append(
            {
                k: [type(v).__name__, str(getattr(v, "dtype", "")), list(getattr(v, "shape", [])),
                    v.tolist() if isinstance(v, torch.Tensor) else v]
                for k, v in rec.items()
            }
        )  # fmt: skip
    return found


def checkpoint(state: dict[str, Any], path: str) -> dict[str, Any]:
    """Every rank's loader state to every rank; rank 0 saves the merge."""
    states: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(states, state)
    merged = merge_states(states)
    if dist.get_rank() == 0:
        Path(path).write_bytes(pickle.dumps(merged))
    dist.barrier()
    return merged


def phase_w2(out: str, ckpt: str) -> dict[str, Any]:
    res: dict[str, Any] = {
        "none_e0": epoch_ids(out, shuffle=True),
        "none_e1": epoch_ids(out, shuffle=True, epoch=1),
        "none_e0_again": epoch_ids(out, shuffle=True),
        "none_e0_nw0": epoch_ids(out, shuffle=True, nw=0),
        "len_none": len(OutputDataset(out, SPLIT)),
    }
    for even in ("pad", "drop"):
        for shuffle in (False, True):
            res[f"{even}_{'shuffle' if shuffle else 'ordered'}"] = uneven(out, even, shuffle)
    res["resume_a"] = resume_case(out, B, 3)
    b6 = first_partial(out, 6)
    res["resume_b"] = resume_case(out, 6, b6)
    res["merged"] = checkpoint(res["resume_a"].pop("state"), ckpt)
    res["resume_b"].pop("state")
    res["tensors"] = tensors(out)
    return res


def phase_w1(out: str, ckpt: str) -> dict[str, Any]:
    ds = OutputDataset(out, SPLIT, shuffle=True, seed=SEED)
    ds.load_state_dict(pickle.loads(Path(ckpt).read_bytes()))
    loader = StatefulDataLoader(ds, batch_size=B, num_workers=3)
    it = iter(loader)
    head = [int(i) for _ in range(4) for i in next(it)["id"]]
    checkpoint(loader.state_dict(), ckpt + ".2")
    rest = [int(i) for batch in it for i in batch["id"]]
    return {"len": len(ds), "head": head, "rest": rest}


def phase_w2b(out: str, ckpt: str) -> dict[str, Any]:
    ds = OutputDataset(out, SPLIT, shuffle=True, seed=SEED)
    ds.load_state_dict(pickle.loads(Path(ckpt + ".2").read_bytes()))
    resumed = ids_of(StatefulDataLoader(ds, batch_size=B, num_workers=2))
    ds.set_epoch(1)
    nxt = ids_of(StatefulDataLoader(ds, batch_size=B, num_workers=2))
    return {"resumed": resumed, "next_epoch": nxt, "len_next": len(ds)}


PHASES = {"w2": phase_w2, "w1": phase_w1, "w2b": phase_w2b}


def main(argv: list[str]) -> None:
    phase, out, results, ckpt = argv
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    res = PHASES[phase](out, ckpt)
    res.update(rank=dist.get_rank(), world_size=dist.get_world_size(), package=torchx_datapipes.__file__)
    Path(results, f"{phase}-rank{dist.get_rank()}.json").write_text(json.dumps(res))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
