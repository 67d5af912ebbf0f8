"""Issue 22 item 4: split records each split's drift from the whole and warns when a split drifts."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Dict, List

import pytest
from tdp_testutil import run_op, write_jsonl

from torchx_datapipes.split.profile import SplitProfile, split_drift


def sessions(users: int, per_user: int, seed: int = 0) -> List[Dict[str, Any]]:
    """Records grouped by user; each user's label and spend level are the user's own."""
    rng = random.Random(seed)
    out = []
    for u in range(users):
        label, level = u % 4, rng.choice((5.0, 50.0, 500.0))
        for _ in range(per_user):
            out.append({"user": f"u{u}", "label": label, "spend": rng.gauss(level, level / 10),
                        "device": rng.choice(("ios", "android", "web"))})  # fmt: skip
    rng.shuffle(out)
    return out


def test_record_level_split_does_not_drift(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_jsonl(tmp_path / "d.jsonl", sessions(200, 20))
    m = run_op("split", str(tmp_path / "d.jsonl"), tmp_path / "o", "--fractions", "train=0.8,test=0.2")
    drift = m["drift"]
    assert set(drift) == {"train", "test"} and set(drift["test"]) == {"label", "spend", "device"}
    assert drift["test"]["label"]["method"] == "chi2" and drift["test"]["spend"]["method"] == "ks"  # ~800
    assert drift["train"]["label"]["method"] == "linf" and drift["train"]["spend"]["method"] == "js"
    assert not any(f["drifted"] for s in drift.values() for f in s.values()), drift
    assert not [w for w in m["warnings"] if "drifts" in w]
    assert "user" not in drift["test"]  # 200 distinct strings: not profiled as a category


def test_key_that_clusters_a_class_warns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_jsonl(tmp_path / "d.jsonl", sessions(12, 60))  # few users: --key user puts whole users in a split
    m = run_op(
        "split",
        str(tmp_path / "d.jsonl"),
        tmp_path / "o",
        "--fractions",
        "train=0.7,test=0.3",
        "--key",
        "user",
    )
    drifted = {(s, f) for s, fields in m["drift"].items() for f, r in fields.items() if r["drifted"]}
    assert ("test", "label") in drifted, m["drift"]
    warned = [w for w in m["warnings"] if "drifts from the whole" in w]
    assert warned and "--key" in warned[0] and "warning: split" in capsys.readouterr().err


def test_profiles_merge_like_one() -> None:
    recs = sessions(50, 10, seed=3)
    a, b, whole = SplitProfile(), SplitProfile(), SplitProfile()
    a.update(recs[:200])
    b.update(recs[200:])
    whole.update(recs)
    a.merge(SplitProfile.from_state(b.state()))
    assert a.state()["fields"]["label"]["values"] == whole.state()["fields"]["label"]["values"]
    assert a.fields["spend"].count == whole.fields["spend"].count == 500
    drift, warnings = split_drift({"x": whole, "y": whole})
    assert not warnings and not drift["x"]["spend"]["drifted"]
