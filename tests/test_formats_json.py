"""Issue 10: a .json file holding a JSON array (or one object) is read as records."""

import json
from pathlib import Path

import orjson
from tdp_testutil import read_output, run_op


def identity(r: object) -> object:
    return r


def test_json_array_is_records_with_their_index(tmp_path: Path) -> None:
    f = tmp_path / "d/a.json"
    f.parent.mkdir()
    f.write_text(json.dumps([{"id": i, "big": 2**70 + i} for i in range(3)] + [5], indent=2))
    m = run_op(
        "transform", str(f), tmp_path / "o", "--on_error", "skip", "--max_error_rate", "1", fn=identity
    )
    exact = [json.loads(x) for x in (tmp_path / "o/part-00000.jsonl").read_text().splitlines()]
    assert exact == [{"id": i, "big": 2**70 + i} for i in range(3)]  # big integers stay exact
    assert m["bad"] == 1
    (err,) = [orjson.loads(x) for x in (tmp_path / "o/_errors/part-00000.jsonl").read_bytes().splitlines()]
    assert err["line"] == 4 and "expected a JSON object per array item, got number" in err["error"]


def test_one_object_pretty_printed_is_one_record(tmp_path: Path) -> None:
    f = tmp_path / "d/one.json"
    f.parent.mkdir()
    f.write_text(json.dumps({"a": {"b": [1, 2]}}, indent=4))
    run_op("transform", str(f), tmp_path / "o", fn=identity)
    assert read_output(tmp_path / "o") == [{"a": {"b": [1, 2]}}]


def test_broken_document_names_the_file(tmp_path: Path) -> None:
    f = tmp_path / "d/bad.json"
    f.parent.mkdir()
    f.write_text('[{"a": 1},\n {"a": ')
    try:
        run_op("transform", str(f), tmp_path / "o", fn=identity)
    except Exception as e:  # noqa: BLE001 - the runner's InputError
        assert f"{f}: not a JSON document" in str(e) and "--format jsonl" in str(e)
    else:
        raise AssertionError("a broken JSON document was accepted")
