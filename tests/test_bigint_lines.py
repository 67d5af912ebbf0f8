"""Integers beyond 64 bits in JSON Lines: which lines go through the exact parser (issue 32 item 11).

Real data writes floats with 17 significant digits (``0.00012345678901234567``), so most read chunks
hold a run of 19+ digits; only a line with such an integer literal needs the stdlib parser.
"""

import json
from pathlib import Path
from typing import Any, List

import orjson

from torchx_datapipes.formats.jsonl.bigints import big_int_lines
from torchx_datapipes.formats.jsonl.codec import encode_checked


def test_only_integer_literals_of_19_digits_mark_their_lines() -> None:
    lines = [
        b'{"a": 1}',
        b'{"x": 0.00012345678901234567}',  # a fraction's digits
        b'{"b": 123456789012345678901}',
        b'{"c": -1234567890123456789012}',
        b'{"d": 12345678901234567890.5}',  # a float's mantissa
        b'{"e": 1.2345678901234567890e5, "f": 12345678901234567890e2}',
        b'{"s": "id12345678901234567890"}',  # in a string: parsed exactly too, same value
        b'{"g": [1, 9223372036854775808]}',
    ]
    assert sorted(big_int_lines(b"\n".join(lines), 10)) == [12, 13, 16, 17]
    assert big_int_lines(b'{"x": 0.1234567890123456789}\n{"y": 2}', 1) == frozenset()
    assert big_int_lines(b"12345678901234567890", 5) == {5}


def test_a_big_integer_after_many_float_lines_stays_exact(tmp_path: Path) -> None:
    from tdp_testutil import run_op

    recs: List[Any] = [{"i": i, "x": 0.00012345678901234567 + i} for i in range(3000)]
    recs[2500]["big"] = 2**70 + 1
    inp = tmp_path / "in.jsonl"
    inp.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs[:2500]))
    with inp.open("ab") as fh:
        fh.write(b'{"i": 2500, "x": 2500.0001234567890123, "big": %d}\n' % (2**70 + 1))
        fh.write(b"".join(orjson.dumps(r) + b"\n" for r in recs[2501:]))
    out = tmp_path / "out"
    m = run_op("transform", str(inp), out, fn=lambda r: r)
    assert m["records_out"] == 3000
    got = [json.loads(x) for p in sorted(out.glob("part-*")) for x in p.read_bytes().splitlines()]
    assert [r for r in got if "big" in r][0]["big"] == 2**70 + 1


def test_a_batch_without_null_or_tags_is_kept_whole() -> None:
    recs = [{"a": i, "b": "x"} for i in range(5)]
    lines, refused = encode_checked(recs)
    assert refused == [] and lines == [orjson.dumps(r) for r in recs]
    lines, refused = encode_checked([{"a": None}, {"a": float("nan")}])
    assert len(lines) == 1 and [i for i, _ in refused] == [1]
