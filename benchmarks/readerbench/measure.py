"""One reader through ``DataLoader``: throughput, time to the first batch, and checks.

The clock starts before the dataset object is built (so the first-batch time includes opening
the copy, e.g. reading a manifest or memory-mapping Arrow files, and starting the workers) and
stops after the last batch. Every batch is consumed: the last byte of every record's tensor is
summed (it is touched, not just referenced), ids are collected; afterwards the record count,
"every id exactly once" and the first record of the first and last batch (against the
generator) are checked, outside the timed loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from .data import Spec


@dataclass
class Result:
    dataset: str
    method: str
    records: int
    seconds: float
    first_batch_s: float
    payload_mb: float
    check: str  # "ok" or what is wrong

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.payload_mb / self.seconds if self.seconds else 0.0


def _check(s: Spec, want: int, n: int, ids: np.ndarray, samples: list[tuple[int, np.ndarray]]) -> str:
    problems = []
    if n != want:
        problems.append(f"{n} records, expected {want}")
    if ids.size and (ids.min() < 0 or ids.max() >= want):
        problems.append(f"ids out of range [0, {want})")
    else:
        counts = np.bincount(ids, minlength=want)
        if (counts != 1).any():
            problems.append(f"{int((counts == 0).sum())} ids missing, {int((counts > 1).sum())} repeated")
    for i, arr in samples:
        if not np.array_equal(arr, s.expected(i)):
            problems.append(f"record {i}: tensor differs from the generator")
    return "; ".join(problems) or "ok"


def run(
    s: Spec,
    method: str,
    make: Callable[[], Any],
    batch_size: int,
    num_workers: int,
    mp_context: str,
    want: int | None = None,
) -> Result:
    """One pass of ``make()`` (ids ``0 .. want-1``; default: all records) through a DataLoader
    with workers started by ``mp_context`` (explicit: ``litdata.optimize`` sets the process's
    default start method)."""
    t0 = time.perf_counter()
    ctx = mp_context if num_workers else None
    loader = DataLoader(make(), batch_size=batch_size, num_workers=num_workers, multiprocessing_context=ctx)
    first: float | None = None
    n, acc = 0, 0
    ids: list[torch.Tensor] = []
    samples: list[tuple[int, np.ndarray]] = []
    batch: Any = None
    for batch in loader:
        if first is None:
            first = time.perf_counter() - t0
            samples.append((int(batch["id"][0]), batch[s.tensor][0].numpy().copy()))
        t = batch[s.tensor]
        acc += int(t.reshape(len(t), -1)[:, -1].sum())
        ids.append(torch.as_tensor(batch["id"]))
        n += len(t)
    seconds = time.perf_counter() - t0
    if batch is not None:
        samples.append((int(batch["id"][0]), batch[s.tensor][0].numpy().copy()))
    all_ids = torch.cat(ids).numpy() if ids else np.zeros(0, dtype=np.int64)
    check = _check(s, s.records if want is None else want, n, all_ids.astype(np.int64), samples)
    mb = n * s.payload_bytes / 1e6
    return Result(s.name, method, n, seconds, first if first is not None else seconds, mb, check)
