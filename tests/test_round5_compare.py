"""Issue 32, item 7: ``schema compare`` of two profiles with no field in common, or against an empty
profile, fails naming both inputs (it printed "0 of N fields drifted" and exited 0)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from torchx_datapipes.schema.__main__ import main as schema_main
from torchx_datapipes.stats import StatsConfig, StatsPartial


def stats_dir(path: Path, recs: list[dict[str, Any]]) -> Path:
    p = StatsPartial(StatsConfig())
    if recs:
        p.update(recs)
    path.mkdir(parents=True, exist_ok=True)
    (path / "stats.json").write_text(json.dumps(p.result()))
    return path


PENGUINS = [{"species": ("Adelie", "Gentoo")[i % 2], "bill_length_mm": 39.1 + i % 9} for i in range(60)]
FLIGHTS = [{"carrier": ("UA", "AA", "B6")[i % 3], "dep_delay": float(i % 40 - 5)} for i in range(60)]


def test_no_field_in_common_fails_naming_both(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = stats_dir(tmp_path / "penguins", PENGUINS), stats_dir(tmp_path / "flights", FLIGHTS)
    assert schema_main(["compare", str(a), str(b), "--json", str(tmp_path / "d.json")]) == 2
    err = capsys.readouterr().err
    assert "no field in common" in err and str(a) in err and str(b) in err
    assert "species" in err and "carrier" in err  # what each side has
    assert not (tmp_path / "d.json").exists()


def test_an_empty_profile_fails_naming_both(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, empty = stats_dir(tmp_path / "penguins", PENGUINS), stats_dir(tmp_path / "empty", [])
    for args in ([str(a), str(empty)], [str(empty), str(a)]):
        assert schema_main(["compare", *args]) == 2
        err = capsys.readouterr().err
        assert f"{empty} is an empty profile (0 records, no fields)" in err and str(a) in err


def test_one_common_field_is_still_compared(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = stats_dir(tmp_path / "a", PENGUINS)
    b = stats_dir(tmp_path / "b", [{**r, "extra": 1} for r in PENGUINS])
    assert schema_main(["compare", str(a), str(b)]) == 0
    assert "0 of 3 fields drifted" in capsys.readouterr().out
