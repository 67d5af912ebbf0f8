"""Issue 23 (input side), as a user runs it: the job the ``datapipes.transform`` component builds for
``torchx run`` (it checks the options and packages the function), its runner command run in this
process with two workers (the launch itself is tested by test_e2e_transform and test_e2e_output_safety).

A directory holding a .gz with one huge JSON line, a CSV with a latin-1 byte, a JSONL line nested
too deep for the exact big-integer parser and a Parquet file with a damaged page: with
``--max_record_mb 1 --on_error skip`` the job succeeds, keeps every other record, and
``OUT/_errors/`` names each bad record's file and line (or row group) and what is wrong.
"""

import gzip
import json
from pathlib import Path

import pytest
from tdp_testutil import manifest, read_output, run_component
from test_input_errors import corrupt_parquet

pytestmark = pytest.mark.e2e

MiB = 1 << 20


def test_bad_inputs_are_named_and_quarantined(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    with gzip.open(data / "big.jsonl.gz", "wb", compresslevel=1) as fh:
        fh.write(b'{"id": 1}\n{"id": 2, "text": "' + b"x" * (3 * MiB) + b'"}\n{"id": 3}\n')
    (data / "people.csv").write_bytes(b"id,name\n10,Ann\n11,Jos\xe9\n12,Bob\n")
    (data / "deep.jsonl").write_text(
        '{"id": 20}\n{"x": ' + "[" * 1010 + "12345678901234567890123" + "]" * 1010 + "}\n"
    )
    corrupt_parquet(data / "t.parquet")
    (tmp_path / "fns.py").write_text("def keep(rec):\n    return {'id': rec['id']}\n")
    run_component(
        tmp_path, "transform", fn="fns.py:keep", input="data", output="out", max_record_mb=1.0,
        on_error="skip", max_error_rate=1.0, j="1x1", num_workers=2,
    )  # fmt: skip
    out = tmp_path / "out"
    ids = sorted(r["id"] for r in read_output(out))
    assert ids == sorted([1, 3, 10, 12, 20, *range(1000)])  # parquet row group 0 (ids 0..999) is whole
    m = manifest(out)
    assert m["bad"] == 4 and m["options"]["max_record_mb"] == 1.0
    errs = {
        Path(e["file"]).name: e for p in (out / "_errors").glob("*.jsonl") for e in map(json.loads, p.open())
    }
    assert errs["big.jsonl.gz"]["line"] == 2 and f"{3 * MiB + 21:,} bytes" in errs["big.jsonl.gz"]["error"]
    assert errs["people.csv"]["line"] == 3 and "not UTF-8" in errs["people.csv"]["error"]
    assert errs["deep.jsonl"]["line"] == 2 and "levels deep" in errs["deep.jsonl"]["error"]
    assert "row group 1" in errs["t.parquet"]["error"] and errs["t.parquet"]["stage"] == "unit"
