"""Stats accumulators against numpy/pandas on data with known distributions."""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd
import pytest

from torchx_datapipes.stats import SCHEMA_VERSION, VALUE_FIELD, StatsConfig, StatsPartial

N = 60_000
REL = 1e-9


def make_records(n: int = N, seed: int = 0) -> list[dict[str, Any]]:
    """id int, x lognormal, y normal with NaN/inf, tag zipf (~5k distinct), cat (7 values),
    text, vec (list of floats), opt (often missing or null), mixed (int/str/float/bool/list)."""
    rng = np.random.default_rng(seed)
    x = rng.lognormal(0.0, 1.0, n)
    y = rng.normal(3.0, 2.0, n)
    y[rng.random(n) < 0.02] = np.nan
    y[rng.random(n) < 0.005] = np.inf
    y[rng.random(n) < 0.005] = -np.inf
    z = rng.zipf(1.2, n)
    tag = np.where(z <= 5000, z, rng.integers(1, 5001, n))
    cats = ["red", "green", "blue", "cyan", "magenta", "yellow", "black"]
    cat = rng.choice(len(cats), n, p=[0.4, 0.2, 0.15, 0.1, 0.08, 0.05, 0.02])
    words = [f"w{i}" for i in range(300)]
    vec_len = rng.integers(0, 6, n)
    opt_kind = rng.integers(0, 3, n)
    out = []
    for i in range(n):
        rec: dict[str, Any] = {
            "id": i,
            "x": float(x[i]),
            "y": float(y[i]),
            "tag": f"t{tag[i]}",
            "cat": cats[cat[i]],
            "text": " ".join(random.Random(i).choices(words, k=int(3 + i % 7))),
            "vec": [float(v) for v in rng.normal(0, 1, vec_len[i])],
        }
        if opt_kind[i] == 1:
            rec["opt"] = None
        elif opt_kind[i] == 2:
            rec["opt"] = int(i % 5)
        rec["mixed"] = [i, str(i), i / 2, i % 2 == 0, [i]][i % 5]
        out.append(rec)
    return out


@pytest.fixture(scope="module")
def records() -> list[dict[str, Any]]:
    return make_records()


@pytest.fixture(scope="module")
def result(records: list[dict[str, Any]]) -> dict[str, Any]:
    return accumulate(records, batch=1000).result()


def accumulate(records: list[Any], batch: int, config: StatsConfig | None = None) -> StatsPartial:
    p = StatsPartial(config or StatsConfig())
    for i in range(0, len(records), batch):
        p.update(records[i : i + batch])
    return p


def column(records: list[dict[str, Any]], name: str) -> np.ndarray:
    return np.array([r[name] for r in records if name in r and r[name] is not None], dtype=np.float64)


def check_moments(num: dict[str, Any], values: np.ndarray) -> None:
    finite = values[np.isfinite(values)]
    assert num["count"] == values.size
    assert num["finite"] == finite.size
    assert num["nan"] == int(np.isnan(values).sum())
    assert num["pos_inf"] == int((values == np.inf).sum())
    assert num["neg_inf"] == int((values == -np.inf).sum())
    assert num["zeros"] == int((finite == 0).sum())
    assert num["mean"] == pytest.approx(finite.mean(), rel=REL)
    assert num["std_pop"] == pytest.approx(finite.std(ddof=0), rel=REL)
    assert num["std_sample"] == pytest.approx(finite.std(ddof=1), rel=REL)
    assert num["sum"] == pytest.approx(finite.sum(), rel=REL)
    assert num["min"] == finite.min() and num["max"] == finite.max()


def rank_error(values: np.ndarray, q: float, estimate: float) -> float:
    """Distance from q to the exact empirical rank interval of the estimate."""
    s = np.sort(values[np.isfinite(values)])
    lo = np.searchsorted(s, estimate, "left") / s.size
    hi = np.searchsorted(s, estimate, "right") / s.size
    return 0.0 if lo <= q <= hi else min(abs(q - lo), abs(q - hi))


def check_quantiles(num: dict[str, Any], values: np.ndarray) -> float:
    assert num["quantile_rank_error"] <= 0.01
    worst = max(rank_error(values, e["q"], e["value"]) for e in num["quantiles"])
    assert worst <= 0.01, worst
    assert rank_error(values, 0.5, num["median"]) <= 0.01
    return worst


# --- config ---------------------------------------------------------------------------------


def test_config_parse() -> None:
    c = StatsConfig.parse("x, y,label", "0.5,0.01,0.99", top_k=5, bins=10, kll_k=200)
    assert c.fields == ("x", "y", "label") and c.quantiles == (0.01, 0.5, 0.99)
    assert (c.top_k, c.bins, c.kll_k) == (5, 10, 200)
    assert StatsConfig.parse(None, "") == StatsConfig()
    assert StatsConfig.from_dict(json.loads(json.dumps(c.to_dict()))) == c


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"quantiles": "0.5,abc"}, "'abc' is not a number"),
        ({"quantiles": "0.5,1.5"}, "1.5 is outside"),
        ({"fields": "x,,y"}, "empty name"),
        ({"fields": "x,x"}, "duplicates"),
        ({"top_k": 0}, "top_k=0"),
        ({"bins": -1}, "bins=-1"),
        ({"kll_k": 2}, "kll_k=2"),
        ({"nope": 3}, "unknown stats option"),
    ],
)
def test_config_parse_errors(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        StatsConfig.parse(**kwargs)


# --- numeric --------------------------------------------------------------------------------


def test_numeric_lognormal_vs_numpy(records: list[dict[str, Any]], result: dict[str, Any]) -> None:
    x = column(records, "x")
    num = result["fields"]["x"]["numeric"]
    check_moments(num, x)
    check_quantiles(num, x)
    assert result["fields"]["x"]["types"] == {"float": N}


def test_numeric_nan_inf_excluded(records: list[dict[str, Any]], result: dict[str, Any]) -> None:
    y = column(records, "y")
    assert np.isnan(y).sum() > 0 and np.isinf(y).sum() > 0
    num = result["fields"]["y"]["numeric"]
    check_moments(num, y)
    check_quantiles(num, y)


def test_numeric_vs_pandas(records: list[dict[str, Any]], result: dict[str, Any]) -> None:
    df = pd.DataFrame.from_records(records, columns=["id", "x"])
    desc = df.describe()
    for name in ("id", "x"):
        num = result["fields"][name]["numeric"]
        assert num["mean"] == pytest.approx(desc.loc["mean", name], rel=REL)
        assert num["std_sample"] == pytest.approx(desc.loc["std", name], rel=REL)
        assert num["min"] == desc.loc["min", name] and num["max"] == desc.loc["max", name]


def test_histograms(records: list[dict[str, Any]], result: dict[str, Any]) -> None:
    x = column(records, "x")
    hist = result["fields"]["x"]["numeric"]["histogram"]
    assert len(hist["edges"]) == StatsConfig().bins + 1 and sum(hist["counts"]) == N
    exact, _ = np.histogram(x, bins=np.array(hist["edges"]))
    assert not hist["exact"] and 0 < hist["count_error"] <= 0.02
    # each bin's count is off by at most count_error * n (99% confidence bound of the KLL pmf)
    assert np.abs(np.array(hist["counts"]) - exact).max() <= hist["count_error"] * N
    qh = result["fields"]["x"]["numeric"]["quantile_histogram"]
    assert len(qh["edges"]) == len(StatsConfig().quantiles) + 2 and sum(qh["counts"]) == N
    assert qh["edges"] == sorted(qh["edges"])


def test_small_numeric_is_exact() -> None:
    p = StatsPartial(StatsConfig(bins=4))
    p.update([{"v": v} for v in [1, 2, 2, 3, 4, 5, 0, 0]])
    num = p.result()["fields"]["v"]["numeric"]
    assert num["quantiles_exact"] and num["quantile_rank_error"] == 0.0
    assert num["histogram"] == {
        "edges": [0.0, 1.25, 2.5, 3.75, 5.0],
        "counts": [3, 2, 1, 2],
        "exact": True,
        "count_error": 0.0,
    }
    assert num["zeros"] == 2 and num["median"] == 2.0


def test_constant_and_empty_numeric() -> None:
    p = StatsPartial(StatsConfig())
    p.update([{"c": 7.0, "n": float("nan")} for _ in range(10)])
    res = p.result()["fields"]
    assert res["c"]["numeric"]["histogram"]["counts"] == [10]
    assert res["c"]["numeric"]["std_pop"] == 0.0
    n = res["n"]["numeric"]
    assert n["nan"] == 10 and n["finite"] == 0 and n["mean"] is None and n["median"] is None
    assert n["histogram"] is None
    json.dumps(p.result(), allow_nan=False)


def test_huge_ints_become_inf() -> None:
    p = StatsPartial(StatsConfig())
    p.update([{"v": 10**400}, {"v": -(10**400)}, {"v": 3}])
    num = p.result()["fields"]["v"]["numeric"]
    assert (num["pos_inf"], num["neg_inf"], num["finite"], num["mean"]) == (1, 1, 1, 3.0)


# --- strings --------------------------------------------------------------------------------


def test_zipf_tags_distinct_and_top_k(records: list[dict[str, Any]], result: dict[str, Any]) -> None:
    truth = Counter(r["tag"] for r in records)
    s = result["fields"]["tag"]["string"]
    assert len(truth) > StatsConfig().exact_distinct_limit
    assert not s["distinct"]["exact"]
    assert abs(s["distinct"]["value"] - len(truth)) <= 0.03 * len(truth)
    assert s["distinct"]["lower"] <= len(truth) <= s["distinct"]["upper"]
    assert len(s["top"]) == StatsConfig().top_k
    for entry in s["top"]:
        assert entry["lower"] <= truth[entry["value"]] <= entry["upper"]
    # < 0.75 * 2**13 distinct values: the frequent-items sketch never purged, counts are exact
    assert s["top_exact"] and s["top_max_error"] == 0
    expected = sorted(truth.items(), key=lambda t: (-t[1], t[0]))[:20]
    assert [(e["value"], e["count"]) for e in s["top"]] == expected


def test_top_k_bounds_when_sketch_purges(records: list[dict[str, Any]]) -> None:
    config = StatsConfig(frequent_lg_map_size=8, exact_distinct_limit=50, top_k=5)
    s = accumulate(records, 2000, config).result()["fields"]["tag"]["string"]
    truth = Counter(r["tag"] for r in records)
    assert not s["top_exact"] and s["top_max_error"] > 0
    heavy = [v for v, _ in truth.most_common(5)]
    assert [e["value"] for e in s["top"]] == heavy  # heavy hitters of a zipf are found
    for e in s["top"]:
        assert e["lower"] <= truth[e["value"]] <= e["upper"]
        assert abs(e["count"] - truth[e["value"]]) <= s["top_max_error"]


def test_small_categorical_exact(records: list[dict[str, Any]], result: dict[str, Any]) -> None:
    truth = Counter(r["cat"] for r in records)
    s = result["fields"]["cat"]["string"]
    assert s["distinct"] == {"value": 7, "exact": True, "lower": 7, "upper": 7}
    assert [(e["value"], e["count"]) for e in s["top"]] == truth.most_common()
    lengths = np.array([len(r["cat"]) for r in records])
    assert s["length"]["min"] == lengths.min() and s["length"]["max"] == lengths.max()
    assert s["length"]["mean"] == pytest.approx(lengths.mean(), rel=REL)


def test_high_cardinality_text(records: list[dict[str, Any]], result: dict[str, Any]) -> None:
    truth = len({r["text"] for r in records})
    d = result["fields"]["text"]["string"]["distinct"]
    assert abs(d["value"] - truth) <= 0.03 * truth


# --- lists, missing, mixed, non-objects -----------------------------------------------------


def test_list_of_numbers(records: list[dict[str, Any]], result: dict[str, Any]) -> None:
    lst = result["fields"]["vec"]["list"]
    lengths = np.array([len(r["vec"]) for r in records], dtype=np.float64)
    check_moments(lst["length"], lengths)
    elements = np.array([v for r in records for v in r["vec"]])
    assert lst["elements"]["count"] == elements.size and lst["elements"]["missing"] == 0
    check_moments(lst["elements"]["numeric"], elements)
    check_quantiles(lst["elements"]["numeric"], elements)


def test_list_of_strings_and_nested() -> None:
    p = StatsPartial(StatsConfig())
    p.update([{"l": ["a", "b", None]}, {"l": [["x"], "a"]}, {"l": []}])
    lst = p.result()["fields"]["l"]["list"]
    assert lst["length"]["sum"] == 5.0
    el = lst["elements"]
    assert el["types"] == {"string": 3, "list": 1, "null": 1} and el["count"] == 4 and el["missing"] == 1
    assert el["string"]["top"][0] == {"value": "a", "count": 2, "lower": 2, "upper": 2}
    assert el["list"]["elements"]["string"]["top"][0]["value"] == "x"


def test_missing_and_null(records: list[dict[str, Any]], result: dict[str, Any]) -> None:
    f = result["fields"]["opt"]
    absent = sum("opt" not in r for r in records)
    nulls = sum("opt" in r and r["opt"] is None for r in records)
    assert f["null"] == nulls and f["missing"] == absent + nulls and f["count"] == N - absent - nulls
    assert f["types"] == {"int": f["count"], "null": nulls}
    check_moments(f["numeric"], column(records, "opt"))


def test_mixed_types(records: list[dict[str, Any]], result: dict[str, Any]) -> None:
    f = result["fields"]["mixed"]
    assert f["types"] == {"int": N // 5, "float": N // 5, "bool": N // 5, "string": N // 5, "list": N // 5}
    nums = np.array([r["mixed"] for r in records if type(r["mixed"]) in (int, float)], dtype=np.float64)
    check_moments(f["numeric"], nums)  # bools are not numbers here
    assert f["bool"] == {
        "true": sum(r["mixed"] is True for r in records),
        "false": sum(r["mixed"] is False for r in records),
    }
    assert f["string"]["count"] == N // 5 and f["list"]["length"]["count"] == N // 5


def test_non_object_records_and_ragged_keys() -> None:
    p = StatsPartial(StatsConfig())
    p.update([{"a": 1}, 5, "s", None, [1, 2], {"b": "x", "a": 2}])
    res = p.result()
    assert res["records"] == 6
    v = res["fields"][VALUE_FIELD]
    assert (
        v["types"] == {"int": 1, "string": 1, "list": 1, "null": 1} and v["count"] == 3 and v["missing"] == 3
    )
    assert res["fields"]["a"]["count"] == 2 and res["fields"]["a"]["missing"] == 4
    assert res["fields"]["b"]["missing"] == 5


def test_configured_fields_only() -> None:
    p = StatsPartial(StatsConfig(fields=("b", "never")))
    p.update([{"a": 1, "b": 2.5}, {"b": None}, {"a": 3}])
    res = p.result()["fields"]
    assert list(res) == ["b", "never"]
    assert res["b"]["count"] == 1 and res["b"]["missing"] == 2 and res["b"]["null"] == 1
    assert res["never"]["count"] == 0 and res["never"]["missing"] == 3 and res["never"]["types"] == {}


# --- merge and serialization ----------------------------------------------------------------


def split(records: list[Any], parts: int, seed: int) -> list[list[Any]]:
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(records)), parts - 1))
    return [records[a:b] for a, b in zip([0, *cuts], [*cuts, len(records)], strict=True)]


def roundtrip(p: StatsPartial) -> StatsPartial:
    data = p.to_bytes()
    assert isinstance(data, bytes) and b"pickle" not in data[:16]
    return StatsPartial.from_bytes(data)


@pytest.mark.parametrize("parts, seed", [(2, 1), (5, 2), (9, 3)])
def test_partition_and_merge_order(
    records: list[dict[str, Any]], result: dict[str, Any], parts: int, seed: int
) -> None:
    partials = [roundtrip(accumulate(chunk, 700 + 100 * seed)) for chunk in split(records, parts, seed)]
    random.Random(seed).shuffle(partials)
    if seed % 2:  # left fold
        merged = StatsPartial(StatsConfig())
        for p in partials:
            merged.merge(p)
    else:  # tree merge with serialization at every level
        while len(partials) > 1:
            a, b = partials.pop(), partials.pop()
            b.merge(a)
            partials.insert(0, roundtrip(b))
        merged = partials[0]
    res = merged.result()
    assert res["records"] == N
    for name in ("x", "y", "id"):
        got, want = res["fields"][name]["numeric"], result["fields"][name]["numeric"]
        for key in ("count", "finite", "nan", "pos_inf", "neg_inf", "zeros", "min", "max"):
            assert got[key] == want[key]
        for key in ("mean", "std_pop", "std_sample", "sum"):
            assert got[key] == pytest.approx(want[key], rel=REL)
        check_quantiles(got, column(records, name))
    truth = len({r["tag"] for r in records})
    assert abs(res["fields"]["tag"]["string"]["distinct"]["value"] - truth) <= 0.03 * truth
    got_cat, want_cat = res["fields"]["cat"]["string"], result["fields"]["cat"]["string"]
    assert got_cat["distinct"] == want_cat["distinct"] and got_cat["top"] == want_cat["top"]
    assert got_cat["length"]["mean"] == pytest.approx(want_cat["length"]["mean"], rel=REL)
    assert res["fields"]["tag"]["string"]["top"] == result["fields"]["tag"]["string"]["top"]
    assert res["fields"]["mixed"]["types"] == result["fields"]["mixed"]["types"]


def test_merge_leaves_other_unchanged() -> None:
    a, b = StatsPartial(StatsConfig()), StatsPartial(StatsConfig())
    b.update([{"v": 1.0, "s": "x", "l": [1]}])
    before = b.to_bytes()
    a.merge(b)
    a.update([{"v": 2.0, "s": "y", "l": [2]}])
    assert b.to_bytes() == before


def test_merge_rejects_other_config() -> None:
    with pytest.raises(ValueError, match="different configs"):
        StatsPartial(StatsConfig()).merge(StatsPartial(StatsConfig(top_k=3)))


def test_from_bytes_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="not a stats partial"):
        StatsPartial.from_bytes(b"\x80\x04pickle")
    good = StatsPartial(StatsConfig())
    good.update([{"x": 1.5, "s": str(i)} for i in range(2000)])
    data = good.to_bytes()
    with pytest.raises(ValueError, match="corrupt"):
        StatsPartial.from_bytes(data[: len(data) // 2])


def test_result_is_strict_json(result: dict[str, Any]) -> None:
    text = json.dumps({"schema_version": SCHEMA_VERSION, **result}, allow_nan=False)
    assert json.loads(text)["records"] == N
    assert not any(isinstance(v, float) and math.isnan(v) for v in _leaves(result))


def _leaves(obj: Any) -> list[Any]:
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in _leaves(v)]
    if isinstance(obj, list):
        return [x for v in obj for x in _leaves(v)]
    return [obj]


def test_key_order_and_ragged_batches_agree() -> None:
    """The uniform-keys fast path and the general path give the same statistics."""
    rng = random.Random(7)
    recs: list[Any] = []
    for i in range(3000):
        items = [("a", i), ("b", f"s{i % 13}"), ("c", i * 0.5)]
        rng.shuffle(items)
        recs.append(dict(items))
    ragged = [dict(r) for r in recs]
    del ragged[5]["c"]
    ragged[5]["c"] = recs[5]["c"]  # same keys, different order: still the fast path
    uniform = accumulate(recs, 1000).result()
    general = StatsPartial(StatsConfig())
    general.update(ragged[:1000] + [{}])  # an empty record forces the general path
    general.update(ragged[1000:])
    res = general.result()
    assert res["fields"]["a"]["count"] == 3000 and res["fields"]["a"]["missing"] == 1
    for name in ("a", "c"):
        assert res["fields"][name]["numeric"]["mean"] == pytest.approx(
            uniform["fields"][name]["numeric"]["mean"]
        )
    assert res["fields"]["b"]["string"]["top"] == uniform["fields"]["b"]["string"]["top"]


def test_partial_from_another_interpreter(tmp_path: Any) -> None:
    """Bytes written by a fresh interpreter (other cwd, -I isolated) load and merge here."""
    import subprocess
    import sys
    from pathlib import Path

    import torchx_datapipes

    out = tmp_path / "partial.bin"
    code = (
        "import sys; sys.path.insert(0, sys.argv[2])\n"
        "from torchx_datapipes.stats import StatsConfig, StatsPartial\n"
        "p = StatsPartial(StatsConfig())\n"
        "p.update([{'x': float(i), 's': 'v%d' % (i % 1500)} for i in range(5000)])\n"
        "open(sys.argv[1], 'wb').write(p.to_bytes())\n"
    )
    root = str(Path(torchx_datapipes.__file__).parents[1])
    subprocess.run([sys.executable, "-I", "-c", code, str(out), root], check=True, cwd=tmp_path)
    theirs = StatsPartial.from_bytes(out.read_bytes())
    mine = StatsPartial(StatsConfig())
    mine.update([{"x": float(i), "s": f"v{i % 1500}"} for i in range(5000, 10000)])
    mine.merge(theirs)
    res = mine.result()["fields"]
    assert res["x"]["numeric"]["mean"] == pytest.approx(np.arange(10000.0).mean(), rel=REL)
    assert res["s"]["string"]["top"][0]["count"] == 7 and not res["s"]["string"]["distinct"]["exact"]
