"""The training side of the demo: read the ``train`` split under DDP, two epochs.

``make demo`` runs it as a TorchX job (``torchx run -s local_cwd dist.ddp -j 1x2 --script
examples/train.py -- --data demo-out/split``); any launcher that sets up ``torch.distributed``
works, and without one it reads everything in one process. Each rank reads its share of the
committed split with ``OutputDataset`` (``even="pad"``: every rank takes the same number of
steps, the repeated records are flagged ``__pad__`` and masked out), through a ``DataLoader``
with two workers. The "model" is a running mean of ``n_tokens``, all-reduced over the ranks, so
the check at the end is exact: every train record was counted once per epoch.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from torchx_datapipes.data import OutputDataset


def collate(records: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    """Only the fields the loop uses (``tokens`` are lists of varying length)."""
    return {
        "id": torch.tensor([r["id"] for r in records]),
        "n_tokens": torch.tensor([r["n_tokens"] for r in records], dtype=torch.float64),
        "__pad__": torch.tensor([r["__pad__"] for r in records]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", required=True, help="a committed split output (holds _SUCCESS)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch_size", type=int, default=64)
    args = parser.parse_args()
    if "RANK" in os.environ:
        dist.init_process_group("gloo")
    ds = OutputDataset(args.data, split="train", shuffle=True, seed=0, even="pad")
    world = dist.get_world_size() if dist.is_initialized() else 1
    for epoch in range(args.epochs):
        ds.set_epoch(epoch)
        # [records, pads, sum of n_tokens, steps]
        acc = torch.zeros(4, dtype=torch.float64)
        loader = DataLoader(ds, batch_size=args.batch_size, num_workers=2, collate_fn=collate)
        for batch in loader:
            real = ~batch["__pad__"]
            acc += torch.tensor([real.sum(), (~real).sum(), batch["n_tokens"][real].sum(), 1])
        if dist.is_initialized():
            dist.all_reduce(acc)
        records, pads, total, steps = acc.tolist()
        if ds.rank == 0:
            print(
                f"epoch {epoch}: {int(records):,} train records once each (+{int(pads)} pads) over"
                f" {world} ranks, {int(steps) // world} steps per rank, mean n_tokens"
                f" {total / records:.3f}",
                flush=True,
            )
        if int(records) != ds.num_records:
            raise SystemExit(f"read {int(records)} records, the split has {ds.num_records}")
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
