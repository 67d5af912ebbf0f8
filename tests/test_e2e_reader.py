"""``torchx_datapipes.data`` under REAL torchrun (issue 11, "what must be shown").

Three launches of ``tests/reader_e2e_worker.py`` (``python -m torch.distributed.run
--standalone``, gloo, CPU), chained: 2 ranks x 2 DataLoader workers (sharding, pad/drop, epochs,
seeds, StatefulDataLoader resume, tensors, and an elastic checkpoint) -> 1 rank x 3 workers
(resume it, checkpoint again) -> 2 ranks x 2 workers (resume that; then the next epoch). The
output is a ``split`` of JSON Lines made in-process, with Parquet tensor columns; its train split
has a record count that is not a multiple of 4. The ranks write JSON; the assertions are here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from tdp_testutil import make_dataset, run_op

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).resolve().parent / "reader_e2e_worker.py"
SIZES = [40, 37, 45, 29, 50]  # one unit (and one part per split) each
LAUNCH_TIMEOUT_S = 180


def tensorize(rec: dict[str, Any]) -> dict[str, Any]:
    i = int(rec["id"])
    return {
        "id": i,
        "label": rec["label"],
        "vec": np.arange(4, dtype=np.float32) + i,
        "img": np.full((2, 3), i % 256, dtype=np.uint8),
        "mask": np.array([i % 2 == 0, True]),
    }


def launch(nproc: int, phase: str, out: Path, results: Path, ckpt: Path) -> dict[int, dict[str, Any]]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc)]
    cmd += [str(WORKER), phase, str(out), str(results), str(ckpt)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    try:
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{phase}: torchrun timed out after {LAUNCH_TIMEOUT_S}s\n{e.stderr!r}")
    assert res.returncode == 0, f"{phase}: rc={res.returncode}\n{res.stdout}\n{res.stderr}"
    return {r: json.loads((results / f"{phase}-rank{r}.json").read_text()) for r in range(nproc)}


def part_ids(out: Path, split: str) -> list[int]:
    """The split's ids in unit/part/row order, read with pyarrow from the manifest's parts."""
    man = json.loads((out / "_SUCCESS").read_text())
    rels = [r for u in man["units"] for r in u["outputs"] if r.startswith(f"{split}/")]
    return [i for r in rels for i in pq.read_table(out / r, columns=["id"]).column("id").to_pylist()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("reader")
    make_dataset(root / "in", SIZES)
    out = root / "out"
    man = run_op(
        "split", str(root / "in/*.jsonl"), out, "--fractions", "train=0.8,val=0.2", "--key", "id",
        "--output_format", "parquet", fn=tensorize,
    )  # fmt: skip
    results, ckpt = root / "results", root / "ckpt.pkl"
    results.mkdir()
    r: dict[str, Any] = {"out": out, "train": part_ids(out, "train"), "manifest": man}
    r["w2"] = launch(2, "w2", out, results, ckpt)
    r["w1"] = launch(1, "w1", out, results, ckpt)
    r["w2b"] = launch(2, "w2b", out, results, ckpt)
    return r


def test_the_output_and_the_package_under_test(runs: dict[str, Any]) -> None:
    n = len(runs["train"])
    assert n == runs["manifest"]["splits"]["train"] and n % 4 != 0, n
    assert n % 2 == 1, n  # so that "pad" and "drop" have something to pad and drop on 2 ranks
    assert sorted(runs["train"]) == sorted(set(runs["train"]))
    for launch_ in ("w2", "w1", "w2b"):
        for rank, res in runs[launch_].items():
            assert res["package"] == str(REPO / "torchx_datapipes" / "__init__.py"), res["package"]
            assert res["rank"] == rank and res["world_size"] == len(runs[launch_])


def test_even_none_is_exactly_once_per_epoch_and_shuffled(runs: dict[str, Any]) -> None:
    w2, train = runs["w2"], sorted(runs["train"])
    for key in ("none_e0", "none_e1", "none_e0_nw0"):
        assert sorted(w2[0][key] + w2[1][key]) == train, key
    n = len(train)
    assert [len(w2[r]["none_e0"]) for r in (0, 1)] == [n // 2 + 1, n // 2]  # rank 0 takes the extra
    assert [w2[r]["len_none"] for r in (0, 1)] == [n // 2 + 1, n // 2]
    for r in (0, 1):
        assert w2[r]["none_e0"] == w2[r]["none_e0_again"]  # the same seed repeats the order
        assert w2[r]["none_e0"] != w2[r]["none_e1"]  # a new epoch, a new order
        assert sorted(w2[r]["none_e0"]) == sorted(w2[r]["none_e0_nw0"])  # the set ignores num_workers
    assert w2[0]["none_e0"] + w2[1]["none_e0"] != runs["train"]  # shuffled, not part order


@pytest.mark.parametrize("shuffle", ["ordered", "shuffle"])
def test_pad_and_drop_give_equal_counts_with_the_documented_records(
    runs: dict[str, Any], shuffle: str
) -> None:
    """n is odd: "pad" repeats the plan's first position on rank 1, "drop" drops its last one.
    Rank spans are contiguous in the epoch order, so with the same seed and epoch, rank r's set
    in "pad"/"drop" mode follows from its set in "none" mode (``none_e0``, seed 0, epoch 0)."""
    w2, order = runs["w2"], runs["train"]
    n, half = len(order), len(order) // 2
    pad = [w2[r][f"pad_{shuffle}"] for r in (0, 1)]
    drop = [w2[r][f"drop_{shuffle}"] for r in (0, 1)]
    assert [p["len"] for p in pad] == [len(p["records"]) for p in pad] == [half + 1] * 2
    assert [d["len"] for d in drop] == [len(d["records"]) for d in drop] == [half] * 2
    assert [p["pad_field"] for p in pad] == [[True]] * 2 and [d["pad_field"] for d in drop] == [[False]] * 2
    real = [[i for i, is_pad in p["records"] if not is_pad] for p in pad]
    padded = [[i for i, is_pad in p["records"] if is_pad] for p in pad]
    assert sorted(real[0] + real[1]) == sorted(order) and padded[0] == [] and len(padded[1]) == 1
    kept = [[i for i, _ in d["records"]] for d in drop]
    assert len(set(kept[0] + kept[1])) == len(kept[0] + kept[1]) == n - 1
    if shuffle == "ordered":  # the epoch order is the part order: the documented records exactly
        assert padded[1] == order[:1] and sorted(real[0]) == sorted(order[: half + 1])
        assert set(order) - set(kept[0] + kept[1]) == {order[-1]}
        assert sorted(kept[0]) == sorted(order[:half])
    else:
        none = [set(w2[r]["none_e0"]) for r in (0, 1)]
        assert padded[1] == w2[0]["none_e0"][:1]  # position 0: worker 0's first record on rank 0
        assert set(real[0]) == none[0] and set(real[1]) == none[1]
        moved = none[0] - set(kept[0])  # position `half`: rank 0's last in "none", rank 1's first
        assert len(moved) == 1 and set(kept[0]) <= none[0]
        dropped = none[1] - set(kept[1])  # position n - 1
        assert len(dropped) == 1 and set(kept[1]) == (none[1] - dropped) | moved


def test_stateful_dataloader_resumes_mid_epoch_in_the_uninterrupted_order(runs: dict[str, Any]) -> None:
    seen_odd = False
    for r in (0, 1):
        for case, bs in (("resume_a", 5), ("resume_b", 6)):
            res = runs["w2"][r][case]
            k = len(res["head"])
            assert 0 < k < len(res["full"]), (case, k)
            assert res["head"] + res["tail"] == res["full"], (r, case)
            if case == "resume_a":
                assert k == 15 and k % 2 == 1  # not a multiple of the 2 workers
            else:
                assert k % bs != 0, k  # after a short batch: not a multiple of the batch size
                seen_odd |= k % 2 == 1
    assert seen_odd  # at least one rank resumed at a count that is neither


def test_elastic_resume_2_to_1_to_2_ranks_serves_exactly_the_unseen(runs: dict[str, Any]) -> None:
    w2, w1, w2b, train = runs["w2"], runs["w1"][0], runs["w2b"], runs["train"]
    seen1 = w2[0]["resume_a"]["head"] + w2[1]["resume_a"]["head"]
    assert w2[0]["merged"] == w2[1]["merged"]
    assert sorted(seen1 + w1["head"] + w1["rest"]) == sorted(train)  # 2 -> 1: the rest, once
    assert w1["len"] == len(train) - len(seen1)
    seen2 = seen1 + w1["head"]
    resumed = w2b[0]["resumed"] + w2b[1]["resumed"]
    assert sorted(resumed) == sorted(w1["rest"])  # 1 -> 2: exactly the unseen after the 2nd checkpoint
    assert sorted(seen2 + resumed) == sorted(train) and len(resumed) == len(train) - len(seen2)
    nxt = w2b[0]["next_epoch"] + w2b[1]["next_epoch"]
    assert sorted(nxt) == sorted(train)  # the next epoch is whole again
    assert [w2b[r]["len_next"] for r in (0, 1)] == [len(w2b[r]["next_epoch"]) for r in (0, 1)]


def test_parquet_tensor_columns_arrive_as_torch_tensors(runs: dict[str, Any]) -> None:
    for r in (0, 1):
        recs = runs["w2"][r]["tensors"]
        assert recs
        for rec in recs:
            i = rec["id"][3]
            assert rec["id"][0] == "int" and rec["label"][0] == "int"
            assert rec["vec"] == ["Tensor", "torch.float32", [4], [float(i + k) for k in range(4)]]
            assert rec["img"] == ["Tensor", "torch.uint8", [2, 3], [[i % 256] * 3] * 2]
            assert rec["mask"] == ["Tensor", "torch.bool", [2], [i % 2 == 0, True]]
    every = [rec["id"][3] for r in (0, 1) for rec in runs["w2"][r]["tensors"]]
    assert Counter(every) == Counter(runs["train"])
