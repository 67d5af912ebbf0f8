"""Core split library: parsing, hash/exact/stratified assignment and their guarantees.

``python tests/test_split_core.py`` prints a micro-benchmark (hash throughput, assigner cost).
"""

from __future__ import annotations

import math
import os
import pickle
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import xxhash

from torchx_datapipes.split import (
    ExactAssigner,
    Fractions,
    KeySpec,
    MissingKeyError,
    StratifiedHashAssigner,
    assign_hash,
    class_labels,
    hash_keys,
    largest_remainder,
    parse_fractions,
    parse_key,
)

F3 = parse_fractions("train=0.8,val=0.1,test=0.1")
WORDS = "the quick brown fox jumps over lazy dog data split train test value model".split()


def make_records(n: int, start: int = 0, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {
            "id": i,
            "text": " ".join(rng.choices(WORDS, k=25)),
            "score": rng.random(),
            "weight": rng.random() * 10,
            "label": rng.choice(["cat", "dog", "bird"]),
            "tag": f"t{i % 7}",
        }
        for i in range(start, start + n)
    ]


def units_of(records: list[dict[str, Any]], size: int) -> list[list[dict[str, Any]]]:
    return [records[i : i + size] for i in range(0, len(records), size)]


# ---------------------------------------------------------------- parsing


def test_parse_fractions_roundtrip() -> None:
    assert F3 == Fractions(("train", "val", "test"), (0.8, 0.1, 0.1))
    assert parse_fractions(str(F3)) == F3
    assert parse_fractions(" a = 1 ").as_dict() == {"a": 1.0}
    five = parse_fractions("a=0.2,b=0.2,c-1=0.2,d_2=0.2,E=0.2")
    assert len(five) == 5


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("train=0.8,val=0.3", "sum to 1.1"),
        ("train=0,val=1", "0.0 for 'train' is outside (0, 1]"),
        ("train=1.5,val=-0.5", "1.5 for 'train'"),
        ("train=0.5,train=0.5", "given twice"),
        ("train=0.5,Train=0.5", "given twice"),
        ("garbage", "'garbage' has no '='"),
        ("train=abc", "'abc' (for 'train') is not a number"),
        ("train=nan", "not a finite number"),
        ("a b=1", "'a b'"),
        ("=1", "''"),
        ("", "empty"),
    ],
)
def test_parse_fractions_errors(text: str, shown: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_fractions(text)
    msg = str(info.value)
    assert repr(text) in msg and shown in msg and "train=0.8,val=0.1,test=0.1" in msg
    assert "parsed as" in msg


def test_parse_fractions_error_shows_parsed_values() -> None:
    with pytest.raises(ValueError, match=r"\('train', 0\.8\), \('val', 0\.3\)"):
        parse_fractions("train=0.8,val=0.3")


def test_fractions_direct_construction_validates() -> None:
    with pytest.raises(ValueError, match="sum to"):
        Fractions(("a", "b"), (0.5, 0.6))


def test_parse_key() -> None:
    assert parse_key(None) is None and parse_key("") is None and parse_key("  ") is None
    assert parse_key("user_id, session") == KeySpec(("user_id", "session"))
    for bad in ["a,,b", "a,a", ","]:
        with pytest.raises(ValueError, match="FIELD"):
            parse_key(bad)


def test_largest_remainder() -> None:
    for n in [0, 1, 2, 3, 7, 10, 11, 99, 1001, 123457]:
        counts = largest_remainder(n, F3)
        assert sum(counts) == n
        for c, f in zip(counts, F3.values, strict=False):
            assert abs(c - f * n) < 1
    assert largest_remainder(1, F3) == (1, 0, 0)
    # remainders 0.5/0.5 tie: broken by split order
    assert largest_remainder(1, parse_fractions("a=0.5,b=0.5")) == (1, 0)
    assert largest_remainder(5, parse_fractions("a=0.1,b=0.2,c=0.7")) == (1, 1, 3)
    # exact rationals: 1/3 splits and 1e-9 slack renormalised
    assert largest_remainder(3, parse_fractions("a=0.333333333333,b=0.333333333333,c=0.333333333334")) == (
        1,
        1,
        1,
    )


# ---------------------------------------------------------------- hashing


def test_hash_is_canonical_and_stable() -> None:
    h = hash_keys([{"k": 1}, {"k": 1.0}, {"k": "1"}, {"k": True}], parse_key("k"), 0)
    assert len(set(h.tolist())) == 4
    a = hash_keys([{"x": 1, "y": {"p": 1, "q": 2}}], None, 3)
    b = hash_keys([{"y": {"q": 2, "p": 1}, "x": 1}], None, 3)
    assert a.tolist() == b.tolist() and a.dtype == np.uint64
    assert hash_keys([{"id": "a"}], parse_key("id"), 7)[0] == xxhash.xxh3_64_intdigest(b'"a"', 7)


# Golden values: the canonical bytes, xxh3 and the Feistel permutation are part of the on-disk
# contract (re-running a job must reproduce an existing dataset's splits). Never update these
# to make a test pass; a change here moves records between splits of existing datasets.
GOLDEN_CODE = """
from torchx_datapipes.split import ExactAssigner, hash_keys, parse_fractions, parse_key
whole, keyed = hash_keys([{"b": 1, "a": [1.5, "x"]}], None, 42), hash_keys([{"id": 7}], parse_key("id"), 0)
print(whole.tolist(), keyed.tolist())
print(ExactAssigner([10], parse_fractions("train=0.8,val=0.1,test=0.1"), 0).assign(0, 0, None, 10).tolist())
"""


def test_golden_values_in_fresh_interpreter(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run(
        [sys.executable, "-c", GOLDEN_CODE], cwd=tmp_path, env=env, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[0] == "[12715944612987145367] [499566431179015674]"
    assert out[1] == "[0, 0, 0, 0, 0, 2, 0, 1, 0, 0]"


def test_empty_batch() -> None:
    assert hash_keys([], parse_key("id"), 0).shape == (0,)
    assert assign_hash(hash_keys([], None, 0), F3).shape == (0,)
    assert ExactAssigner([0, 3], F3, 0).assign(0, 0, None, 0).shape == (0,)
    assert ExactAssigner([], F3, 0).split_counts() == {
        "total": 0,
        "splits": {"train": 0, "val": 0, "test": 0},
    }
    empty = StratifiedHashAssigner.from_hashes({}, F3)
    assert empty.assign(np.empty(0, np.uint64), []).shape == (0,)


def test_multi_field_key() -> None:
    key = parse_key("user,session")
    recs = [{"user": 1, "session": 2, "x": i} for i in range(5)] + [{"user": 1, "session": 3, "x": 9}]
    h = hash_keys(recs, key, 0)
    assert len(set(h[:5].tolist())) == 1 and h[5] != h[0]
    assert h[0] != hash_keys([{"user": 2, "session": 1}], key, 0)[0]  # order of values matters
    assert h[0] != hash_keys([{"user": 1}], parse_key("user"), 0)[0]


def test_missing_key_error() -> None:
    recs: list[Any] = [{"id": 1}, {"name": "x" * 1000}]
    with pytest.raises(MissingKeyError) as info:
        hash_keys(recs, parse_key("id"), 0)
    err = info.value
    assert (err.index, err.field) == (1, "id")
    assert "'id'" in str(err) and "record 1" in str(err) and "name" in str(err) and len(str(err)) < 600
    assert str(pickle.loads(pickle.dumps(err))) == str(err)
    with pytest.raises(MissingKeyError, match="list, not a JSON object"):
        hash_keys([{"id": 1}, [1, 2]], parse_key("id"), 0)
    with pytest.raises(MissingKeyError, match="'session'"):
        hash_keys([{"user": 1}], parse_key("user,session"), 0)
    with pytest.raises(MissingKeyError, match="'label'"):
        class_labels([{"label": 1}, {}], "label")
    with pytest.raises(TypeError, match="JSON values"):
        hash_keys([{"id": {1, 2}}], parse_key("id"), 0)


def test_bad_seed_and_hash_dtype() -> None:
    with pytest.raises(ValueError, match="seed"):
        hash_keys([{}], None, -1)
    with pytest.raises(TypeError, match="uint64"):
        assign_hash(np.arange(3), F3)


def test_hash_fractions_within_4_sigma() -> None:
    n = 100_000
    split = assign_hash(hash_keys([{"id": i} for i in range(n)], parse_key("id"), 0), F3)
    counts = np.bincount(split, minlength=3)
    for c, f in zip(counts, F3.values, strict=False):
        assert abs(c - n * f) < 4 * math.sqrt(n * f * (1 - f)), (counts, F3)


def test_assign_hash_extremes() -> None:
    h = np.array([0, 2**64 - 1, 2**63], dtype=np.uint64)
    assert assign_hash(h, F3).tolist() == [0, 2, 0]
    assert assign_hash(h, parse_fractions("all=1")).tolist() == [0, 0, 0]
    assert assign_hash(h, F3).dtype == np.int8


def test_hash_independent_of_partitioning_and_order() -> None:
    records = make_records(2000)
    key = parse_key("id")
    expected = {
        r["id"]: s for r, s in zip(records, assign_hash(hash_keys(records, key, 5), F3), strict=False)
    }
    for ranks in [1, 2, 4]:
        units = units_of(records, 97)
        random.Random(ranks).shuffle(units)
        got: dict[int, int] = {}
        for rank in range(ranks):
            for unit in units[rank::ranks]:
                for batch in units_of(unit, 13):
                    got.update(
                        zip((r["id"] for r in batch), assign_hash(hash_keys(batch, key, 5), F3), strict=False)
                    )
        assert got == expected


def test_seed_change_reshuffles() -> None:
    records = make_records(5000)
    a = assign_hash(hash_keys(records, None, 0), F3)
    b = assign_hash(hash_keys(records, None, 1), F3)
    assert 0.2 < np.mean(a != b) < 0.5  # ~ 1 - (0.8^2 + 0.1^2 + 0.1^2) = 0.34


def test_appending_never_moves_existing_records() -> None:
    old = make_records(3000)
    new = old + make_records(1000, start=3000, seed=1)
    a = assign_hash(hash_keys(old, None, 0), F3)
    b = assign_hash(hash_keys(new, None, 0), F3)
    assert (b[: len(old)] == a).all()


def test_duplicates_never_straddle_splits() -> None:
    base = make_records(500)
    dups = [dict(reversed(list(r.items()))) for r in base]  # same content, different key order
    split = assign_hash(hash_keys(base + dups + base, None, 0), F3)
    assert (split[:500] == split[500:1000]).all() and (split[:500] == split[1000:]).all()


# ---------------------------------------------------------------- exact


def run_exact(unit_counts: list[int], seed: int, ranks: int, batch: int) -> list[np.ndarray]:
    """Simulate ``ranks`` ranks, each with its own assigner, handling interleaved units."""
    out: list[np.ndarray] = [np.empty(0)] * len(unit_counts)
    for rank in range(ranks):
        assigner = ExactAssigner(unit_counts, F3, seed, stratified=False)
        for u in reversed(range(rank, len(unit_counts), ranks)):
            parts = [
                assigner.assign(u, s, None, min(batch, unit_counts[u] - s))
                for s in range(0, unit_counts[u], batch)
            ]
            out[u] = np.concatenate(parts) if parts else np.empty(0, dtype=np.int8)
    return out


@pytest.mark.parametrize("n", [1, 2, 3, 10, 11, 997, 10_001])
def test_exact_counts_exact(n: int) -> None:
    sizes = [n // 3, n - n // 3 - n // 4, n // 4]
    result = np.concatenate(run_exact(sizes, 0, 1, 7))
    assert tuple(np.bincount(result, minlength=3)) == largest_remainder(n, F3)
    assert ExactAssigner(sizes, F3, 0).split_counts()["splits"] == dict(
        zip(F3.names, largest_remainder(n, F3), strict=False)
    )


def test_exact_independent_of_ranks_and_batches() -> None:
    sizes = [100, 0, 37, 250, 1, 64]
    ref = run_exact(sizes, 3, 1, 1000)
    for ranks, batch in [(2, 7), (4, 1), (3, 50)]:
        got = run_exact(sizes, 3, ranks, batch)
        assert all((a == b).all() for a, b in zip(ref, got, strict=False))
    other = np.concatenate(run_exact(sizes, 4, 1, 1000))
    assert (other != np.concatenate(ref)).any()


def test_exact_independent_of_unit_size() -> None:
    # global index = position in the concatenated input, so re-chunking the same input changes nothing
    a = np.concatenate(run_exact([300, 200, 500], 1, 1, 64))
    b = np.concatenate(run_exact([100] * 10, 1, 2, 33))
    assert (a == b).all()


def test_exact_permutation_is_uniform() -> None:
    # each of 3 records should be the single 'train' record about 1/3 of the time across seeds
    fr = parse_fractions("a=0.34,b=0.33,c=0.33")
    wins = Counter(int(np.argmax(ExactAssigner([3], fr, s).assign(0, 0, None, 3) == 0)) for s in range(600))
    assert all(150 < wins[i] < 250 for i in range(3)), wins
    # 'test' records are spread over the whole index range, not clumped
    n = 50_000
    split = ExactAssigner([n], F3, 0).assign(0, 0, None, n)
    deciles = np.bincount(np.flatnonzero(split == 2) * 10 // n, minlength=10)
    assert deciles.min() > 0.08 * 5000 and deciles.max() < 0.12 * 5000


def test_exact_rejects_changed_input() -> None:
    a = ExactAssigner([5, 5], F3, 0)
    with pytest.raises(Exception, match="changed between the passes"):
        a.assign(1, 3, None, 3)
    with pytest.raises(IndexError, match="2 units"):
        a.assign(2, 0, None, 1)
    with pytest.raises(ValueError, match="per-class counts"):
        ExactAssigner([5], F3, 0, stratified=True)


# ---------------------------------------------------------------- stratified


def class_units(seed: int = 0) -> tuple[list[list[str]], list[dict[str, int]]]:
    rng = random.Random(seed)
    weights = {'"big"': 60, '"mid"': 30, '"small"': 8, '"rare"': 2}
    labels = rng.choices(list(weights), weights=list(weights.values()), k=3000) + ['"one"']
    units = [labels[i : i + 211] for i in range(0, len(labels), 211)]
    return units, [dict(Counter(u)) for u in units]


def test_stratified_exact_per_class() -> None:
    units, counts = class_units()
    by_class: dict[str, list[int]] = {}
    results = []
    for ranks in [1, 3]:
        result: dict[int, np.ndarray] = {}
        for rank in range(ranks):
            assigner = ExactAssigner(counts, F3, 0, stratified=True)
            mine = list(range(rank, len(units), ranks))
            cursors = {u: 0 for u in mine}
            while cursors:  # interleave batches of different units
                for u in list(cursors):
                    s = cursors[u]
                    part = assigner.assign(u, s, units[u][s : s + 50], len(units[u][s : s + 50]))
                    result[u] = np.concatenate([result.get(u, np.empty(0, np.int8)), part])
                    cursors[u] = s + 50
                    if cursors[u] >= len(units[u]):
                        del cursors[u]
        results.append(np.concatenate([result[u] for u in range(len(units))]))
    assert (results[0] == results[1]).all()
    labels = [c for u in units for c in u]
    for c, s in zip(labels, results[0], strict=False):
        by_class.setdefault(c, [0, 0, 0])[s] += 1
    table = ExactAssigner(counts, F3, 0, stratified=True).split_counts()
    for c, got in by_class.items():
        assert tuple(got) == largest_remainder(sum(got), F3)
        assert table["classes"][c] == dict(zip(F3.names, got, strict=False))
    assert table["total"] == 3001 and sum(table["splits"].values()) == 3001


def test_stratified_exact_requires_sequential_batches() -> None:
    units, counts = class_units()
    a = ExactAssigner(counts, F3, 0, stratified=True)
    a.assign(0, 0, units[0][:10], 10)
    with pytest.raises(ValueError, match="in order"):
        a.assign(0, 20, units[0][20:30], 10)
    with pytest.raises(Exception, match="more records of class"):
        a.assign(0, 10, ['"nope"'], 1)


def test_small_classes_warned_not_dropped() -> None:
    units, counts = class_units()
    a = ExactAssigner(counts, F3, 0, stratified=True)
    (warning,) = a.warnings()
    assert '"one"' in warning and "none in val, test" in warning
    assert a.split_counts()["classes"]['"one"'] == {"train": 1, "val": 0, "test": 0}
    assert ExactAssigner([2], F3, 0).warnings() == [
        f"split 'val' gets no records: only 2 records at {F3}",
        f"split 'test' gets no records: only 2 records at {F3}",
    ]


def test_stratified_hash() -> None:
    records = make_records(6000)
    records[0]["label"] = "unicorn"
    key = parse_key("id")
    hashes, labels = hash_keys(records, key, 0), class_labels(records, "label")
    per_class: dict[str, list[int]] = {}
    for h, c in zip(hashes.tolist(), labels, strict=False):
        per_class.setdefault(c, []).append(h)
    assigner = StratifiedHashAssigner.from_hashes(
        {c: np.array(v, np.uint64) for c, v in per_class.items()}, F3
    )
    assigner = StratifiedHashAssigner.from_dict(pickle.loads(pickle.dumps(assigner.to_dict())))
    split = assigner.assign(hashes, labels)
    for c, v in per_class.items():
        got = np.bincount(split[np.array(labels) == c], minlength=3)
        assert (
            tuple(got)
            == largest_remainder(len(v), F3)
            == tuple(assigner.split_counts()["classes"][c].values())
        )
    # any batching/order gives the same answer: a record's split is f(hash, class thresholds)
    perm = np.random.default_rng(0).permutation(len(records))
    assert (assigner.assign(hashes[perm], [labels[i] for i in perm]) == split[perm]).all()
    assert any('"unicorn"' in w for w in assigner.warnings())
    # appending data moves only records near thresholds
    more = make_records(600, start=6000, seed=9)
    for h, c in zip(hash_keys(more, key, 0).tolist(), class_labels(more, "label"), strict=False):
        per_class.setdefault(c, []).append(h)
    grown = StratifiedHashAssigner.from_hashes({c: np.array(v, np.uint64) for c, v in per_class.items()}, F3)
    moved = np.mean(grown.assign(hashes, labels) != split)
    assert moved < 0.05
    # unseen class falls back to plain hash boundaries
    assert (assigner.assign(hashes[:50], ["new"] * 50) == assign_hash(hashes[:50], F3)).all()


# ---------------------------------------------------------------- benchmark


def _best(fn: Callable[[], object], repeat: int = 3) -> float:
    """Best CPU time of ``repeat`` runs: the code is single-threaded and the machine may be shared."""
    times = []
    for _ in range(repeat):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return min(times)


def _bench() -> None:
    n = 200_000
    records = make_records(n)
    keys = [
        ("single-field key 'id'", parse_key("id")),
        ("two-field key id,tag", parse_key("id,tag")),
        ("whole record", None),
    ]
    for label, key in keys:
        dt = _best(lambda key=key: assign_hash(hash_keys(records, key, 0), F3))
        print(f"hash_keys+assign_hash, {label:22s}: {n / dt / 1e6:5.2f} M records/s")
    labels = class_labels(records, "label")
    print(f"class_labels: {n / _best(lambda: class_labels(records, 'label')) / 1e6:5.2f} M records/s")
    hashes = hash_keys(records, parse_key("id"), 0)
    per_class = {c: hashes[np.array(labels) == c] for c in set(labels)}
    dt = _best(lambda: StratifiedHashAssigner.from_hashes(per_class, F3))
    strat = StratifiedHashAssigner.from_hashes(per_class, F3)
    print(
        f"StratifiedHashAssigner: from_hashes {n / dt / 1e6:.1f} M hashes/s,"
        f" assign {n / _best(lambda: strat.assign(hashes, labels)) / 1e6:.1f} M records/s"
    )
    for total in [2_000_000, 10_000_000]:
        sizes = [10_000] * (total // 10_000)
        t_build = _best(lambda sizes=sizes: ExactAssigner(sizes, F3, 0))
        a = ExactAssigner(sizes, F3, 0)
        t_assign = _best(
            lambda a=a, sizes=sizes: [a.assign(u, 0, None, 10_000) for u in range(len(sizes))], 1
        )
        t_perm = _best(lambda total=total: np.random.default_rng(0).permutation(total), 1)
        print(
            f"ExactAssigner N={total:,}: build {t_build * 1e3:.2f} ms,"
            f" assign {total / t_assign / 1e6:.1f} M records/s in batches of 10k"
            f" (np permutation(N) instead: {t_perm * 1e3:.0f} ms, {total * 8 / 1e6:.0f} MB per process)"
        )
    counts = [dict(Counter(labels[i : i + 10_000])) for i in range(0, n, 10_000)]
    t_build = _best(lambda: ExactAssigner(counts, F3, 0, stratified=True))
    a = ExactAssigner(counts, F3, 0, stratified=True)

    def run() -> None:
        for u in range(len(counts)):
            for s in range(0, 10_000, 1000):
                a.assign(u, s, labels[u * 10_000 + s : u * 10_000 + s + 1000], 1000)

    print(
        f"ExactAssigner stratified: build {t_build * 1e3:.2f} ms,"
        f" assign {n / _best(run) / 1e6:.2f} M records/s in batches of 1k"
    )


if __name__ == "__main__":
    _bench()
