"""Issue 32, item 1: CSV ISO timestamps with a zone (``2017-01-01T06:00:42Z``, as in the R
flights/Birthdays data) are typed as timezone-aware UTC timestamps, not strings, and read back
with the same value and type through every output format."""

import datetime as dt
from pathlib import Path
from typing import Any, Dict, List

import pyarrow as pa
import pytest
from tdp_testutil import run_op

from torchx_datapipes.data import OutputDataset
from torchx_datapipes.formats.planning import plan_units
from torchx_datapipes.formats.reading import UnitReader

UTC = dt.timezone.utc


def birthdays(path: Path) -> Path:
    """The shape of R's Birthdays/flights ``time_hour`` column: ISO timestamps ending in ``Z``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "year,month,day,time_hour,carrier\n"
        "2013,1,1,2013-01-01T05:00:00Z,UA\n"
        "2013,1,1,2013-01-01T06:00:42Z,AA\n"
        "2013,1,2,NA,B6\n"
        "2013,1,2,2013-01-02T07:30:00+01:00,DL\n"
    )
    return path


def read_all(path: Path) -> List[Dict[str, Any]]:
    (unit,) = plan_units([(str(path), path.stat().st_size)])
    assert dict(unit.read["schema"])["time_hour"] == "timestamp_utc"
    return [rec for recs, _ in UnitReader(unit).batches() for rec in recs]


def same(rec: Dict[str, Any]) -> Dict[str, Any]:
    return rec


def test_a_zoned_timestamp_column_reads_as_aware_utc(tmp_path: Path) -> None:
    got = read_all(birthdays(tmp_path / "b.csv"))
    at = [r["time_hour"] for r in got]
    assert at[0] == dt.datetime(2013, 1, 1, 5, tzinfo=UTC) and at[2] is None
    assert at[1] == dt.datetime(2013, 1, 1, 6, 0, 42, tzinfo=UTC)
    assert at[3] == dt.datetime(2013, 1, 2, 6, 30, tzinfo=UTC)  # +01:00: the same instant, in UTC
    for v in (at[0], at[1], at[3]):
        assert v.utcoffset() == dt.timedelta(0) and str(v.tzinfo) == "UTC"


def test_naive_and_zoned_in_one_column_stay_text(tmp_path: Path) -> None:
    f = tmp_path / "m.csv"
    f.write_text("at\n2013-01-01T05:00:00Z\n2013-01-01 06:00:00\n")
    (unit,) = plan_units([(str(f), f.stat().st_size)])
    assert dict(unit.read["schema"])["at"] == "string"


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "webdataset"])
def test_zoned_timestamps_round_trip_through_the_outputs(tmp_path: Path, fmt: str) -> None:
    f = birthdays(tmp_path / "in/b.csv")
    want = [r["time_hour"] for r in read_all(f)]
    run_op("transform", str(f), tmp_path / "o", "--output_format", fmt, "--num_workers", "1", fn=same)
    back = list(OutputDataset(str(tmp_path / "o")))
    assert len(back) == 4
    by = {r["carrier"]: r["time_hour"] for r in back}
    assert by == {"UA": want[0], "AA": want[1], "B6": None, "DL": want[3]}
    for v in (by["UA"], by["AA"], by["DL"]):
        assert isinstance(v, dt.datetime) and v.utcoffset() == dt.timedelta(0) and str(v.tzinfo) == "UTC"
    if fmt == "parquet":
        import pyarrow.parquet as pq

        (part,) = sorted((tmp_path / "o").glob("part-*.parquet"))
        assert pq.read_schema(part).field("time_hour").type == pa.timestamp("us", tz="UTC")
