"""Committed outputs for the reader tests (tests/test_data_*.py), made in-process with run_op."""

from pathlib import Path
from typing import Any, Dict, List, Sequence

from tdp_testutil import records, run_op, write_jsonl
from torch.utils.data import DataLoader

from torchx_datapipes.data import OutputDataset


def ident(r: Dict[str, Any]) -> Dict[str, Any]:
    return r


def make_input(root: Path, sizes: Sequence[int]) -> str:
    start = 0
    for k, n in enumerate(sizes):
        write_jsonl(root / f"in/part-{k}.jsonl", records(n, start))
        start += n
    return str(root / "in")


def transform_output(root: Path, sizes: Sequence[int], fmt: str = "jsonl", *extra: str) -> str:
    """A transform output of the records ``records(sum(sizes))``, one part per input file."""
    out = root / f"out-{fmt}"
    run_op("transform", make_input(root, sizes), out, "--output_format", fmt, *extra, fn=ident)
    return str(out)


def split_output(root: Path, sizes: Sequence[int], fmt: str = "jsonl") -> str:
    out = root / f"split-{fmt}"
    run_op(
        "split",
        make_input(root, sizes),
        out,
        "--fractions",
        "train=0.8,val=0.2",
        "--output_format",
        fmt,
        fn=ident,
    )
    return str(out)


def ids(recs: Sequence[Dict[str, Any]]) -> List[int]:
    return [int(r["id"]) for r in recs]


def loader_ids(ds: OutputDataset, num_workers: int, batch_size: int = 7) -> List[int]:
    """The ids a DataLoader over ``ds`` yields, in its order."""
    out: List[int] = []
    for batch in DataLoader(ds, batch_size=batch_size, num_workers=num_workers):
        out.extend(int(i) for i in batch["id"])
    return out
