"""The queue message codec keeps every value and type: flat JSON scalars as one JSON document, the rest
as WebDataset members (tensors as .npy), in one message."""

import math
from typing import Any, Dict, List

import torch

from torchx_datapipes.queue import codec


def _roundtrip(recs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    body = codec.encode(codec.Header("data", "j", 3, 7, len(recs)), [codec.encode_record(r) for r in recs])
    header, offset = codec.decode_header(body)
    assert (header.unit, header.seq, header.records) == (3, 7, len(recs))
    return codec.decode_records(body, offset)


def test_flat_records_are_one_json_document_and_keep_their_types() -> None:
    rec = {"id": 7, "x": 0.5, "neg": -(2**63), "ok": True, "none": None, "s": "007", "e": ""}
    framed = codec.encode_record(rec)
    assert framed[:4] == b"\xff\xff\xff\xff"  # the JSON record marker
    (got,) = _roundtrip([rec])
    assert got == rec and [type(v) for v in got.values()] == [type(v) for v in rec.values()]


def test_what_json_cannot_keep_goes_member_by_member_in_the_same_message() -> None:
    recs: List[Dict[str, Any]] = [
        {"id": 1, "big": 2**70},
        {"id": 2, "nan": math.nan, "inf": -math.inf},
        {"id": 3, "t": torch.arange(6, dtype=torch.int16).reshape(2, 3), "b": b"\x00\xff"},
        {"id": 4, "nested": {"a": [1, 2]}},
        {"id": 5, "x": 1.5},
    ]
    assert [codec.encode_record(r)[:4] == b"\xff\xff\xff\xff" for r in recs] == [False] * 4 + [True]
    got = _roundtrip(recs)
    assert got[0] == {"id": 1, "big": 2**70}
    assert math.isnan(got[1]["nan"]) and got[1]["inf"] == -math.inf
    assert got[2]["t"].dtype == torch.int16 and got[2]["t"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert got[2]["b"] == b"\x00\xff" and got[3] == {"id": 4, "nested": {"a": [1, 2]}} and got[4] == recs[4]


def test_decimal_dates_and_nested_tensors_keep_their_types() -> None:
    import datetime
    import decimal
    import zoneinfo

    rec = {
        "d": decimal.Decimal("1.10"),
        "day": datetime.date(2024, 2, 29),
        "ts": datetime.datetime(2024, 10, 27, 2, 30, fold=1, tzinfo=zoneinfo.ZoneInfo("Europe/Paris")),
        "nested": {"t": torch.arange(3, dtype=torch.uint8), "nan": math.nan},
    }
    (got,) = _roundtrip([rec])
    assert str(got["d"]) == "1.10" and type(got["d"]) is decimal.Decimal and got["day"] == rec["day"]
    assert got["ts"].isoformat() == rec["ts"].isoformat() and got["ts"].tzinfo == rec["ts"].tzinfo
    t = got["nested"]["t"]
    assert t.dtype == torch.uint8 and t.tolist() == [0, 1, 2] and math.isnan(got["nested"]["nan"])
