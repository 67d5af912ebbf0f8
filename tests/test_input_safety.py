"""Issue 12, the read side: no input is lost, truncated or changed input is never read silently,
values survive exactly, and every input failure names the file and line."""

import bz2
import gzip
import hashlib
import json
import lzma
import os
from pathlib import Path
from typing import Any, Dict, List, Tuple

import orjson
import pytest
from tdp_testutil import make_dataset, read_output

import torchx_datapipes as tdp
from torchx_datapipes import artifact, components
from torchx_datapipes.appdef import InvalidArgumentError
from torchx_datapipes.errors import InputError
from torchx_datapipes.formats.planning import Unit, plan_units
from torchx_datapipes.formats.reading import UnitReader
from torchx_datapipes.io.fs import expand_input_files, expand_inputs
from torchx_datapipes.runner.main import main


def identity(r: Any) -> Any:
    return r


def transform(tmp: Path, inp: str, out: str, *extra: str, fn: Any = identity) -> Dict[str, Any]:
    """The runner in-process with the artifact stored outside input and output."""
    ref = artifact.package(fn, str(tmp / "store"))
    args = ["transform", "--input", inp, "--output", out, "--progress_s", "0"]
    m = main([*args, "--artifact", ref.url, "--sha256", ref.sha256, *extra])
    assert m is not None
    return m


def _digest(root: Path) -> Dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


# -- 1. the output never overlaps an input ------------------------------------------------------
@pytest.mark.parametrize(
    "output",
    ["data/in/.", "data/x/../in", "data//in", "link_to_in", "data/in/sub", "data", "data/in/a.jsonl"],
)
def test_overlapping_output_is_refused_and_input_survives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, output: str
) -> None:
    monkeypatch.chdir(tmp_path)
    make_dataset(tmp_path / "data/in", [20, 5])
    (tmp_path / "data/in/a.jsonl").write_bytes((tmp_path / "data/in/part-0.jsonl").read_bytes())
    (tmp_path / "data/x").mkdir()
    os.symlink(tmp_path / "data/in", tmp_path / "link_to_in")
    before = _digest(tmp_path / "data")
    with pytest.raises(ValueError, match="--output") as info:
        transform(tmp_path, "data/in", output, "--overwrite", "True")
    assert "outside every input" in str(info.value)
    assert _digest(tmp_path / "data") == before  # no input byte changed or added
    # the client refuses it too, before packaging or launching anything
    (tmp_path / "t.py").write_text("def f(r):\n    return r\n")
    with pytest.raises(InvalidArgumentError, match="outside every input"):
        components.transform(fn="t.py:f", input="data/in", output=output, overwrite=True)
    assert _digest(tmp_path / "data") == before


def test_an_input_reached_through_a_symlink_is_inside_the_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    make_dataset(tmp_path / "data/in", [6])
    os.symlink(tmp_path / "data/in/part-0.jsonl", tmp_path / "link.jsonl")
    before = _digest(tmp_path / "data")
    with pytest.raises(ValueError, match=r"link\.jsonl \(resolved: \S*data/in/part-0\.jsonl\) lies inside"):
        transform(tmp_path, "link.jsonl", "data/in", "--overwrite", "True")
    assert _digest(tmp_path / "data") == before


def test_glob_input_with_output_beside_it_is_allowed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    make_dataset(tmp_path / "data", [4])
    m = transform(tmp_path, "data/*.jsonl", "data/out")
    assert m["records_out"] == 4
    with pytest.raises(ValueError, match="lies inside --output"):
        transform(tmp_path, "data/*.jsonl", ".", "--overwrite", "True")


def test_client_checks_remote_inputs_without_listing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("def f(r):\n    return r\n")
    for inp, out in [
        ("s3://bucket/data/in", "s3://bucket/data/in/./out"),
        ("s3://bucket/data/in/*.jsonl", "s3://bucket//data"),
        ("s3://bucket/data/in", "s3://bucket/data/x/../in"),
    ]:
        with pytest.raises(InvalidArgumentError, match="outside every input"):
            components.transform(fn="t.py:f", input=inp, output=out, overwrite=True)


# -- 2. a compressed unit that ends early is never read as complete ------------------------------
def _compress(kind: str, data: bytes) -> bytes:
    if kind == "zst":
        import zstandard

        return zstandard.ZstdCompressor().compress(data)
    return {"gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}[kind](data)


def _lines(n: int) -> bytes:
    return b"".join(orjson.dumps({"id": i, "pad": "x" * 40}) + b"\n" for i in range(n))


@pytest.mark.parametrize("kind", ["zst", "gz", "bz2", "xz"])
def test_truncated_compressed_input_is_an_error_naming_the_file(tmp_path: Path, kind: str) -> None:
    blob = _compress(kind, _lines(100_000))
    f = tmp_path / f"d/cut.jsonl.{kind}"
    f.parent.mkdir()
    f.write_bytes(blob[: int(len(blob) * 0.6)])
    with pytest.raises(
        InputError, match=r"cut\.jsonl\.\w+: compressed stream ends early \(truncated\?\) after"
    ) as e:
        transform(tmp_path, str(f), str(tmp_path / "o"))
    assert "--on_error skip" in str(e.value)
    assert not (tmp_path / "o/_SUCCESS").exists() and not list((tmp_path / "o").glob("part-*"))


@pytest.mark.parametrize("kind", ["zst", "gz"])
def test_truncated_unit_under_skip_keeps_good_records_and_reports_the_loss(tmp_path: Path, kind: str) -> None:
    blob = _compress(kind, _lines(100_000))
    f = tmp_path / f"d/cut.jsonl.{kind}"
    f.parent.mkdir()
    cut = blob[: int(len(blob) * 0.6)]
    f.write_bytes(cut)
    m = transform(tmp_path, str(f), str(tmp_path / "o"), "--on_error", "skip", "--max_error_rate", "1")
    unit = m["units"][0]
    assert unit["bad_units"] == 1 and unit["lost_bytes"] == len(cut)  # unknown how much: the unit
    out = read_output(tmp_path / "o")
    assert unit["records_in"] == len(out) and unit["bad"] == 1  # lines read; the unit's one entry
    assert 0 < len(out) < 100_000 and [r["id"] for r in out] == list(range(len(out)))  # a clean prefix
    (err,) = [orjson.loads(x) for x in (tmp_path / "o/_errors/part-00000.jsonl").read_bytes().splitlines()]
    assert err["stage"] == "unit" and err["file"] == str(f) and err["line"] == len(out)
    assert f"after {len(out)} lines" in err["error"]


def test_concatenated_and_intact_compressed_files_read_completely(tmp_path: Path) -> None:
    import zstandard

    z = zstandard.ZstdCompressor()
    (tmp_path / "d").mkdir()
    (tmp_path / "d/multi.jsonl.zst").write_bytes(z.compress(_lines(10)) + z.compress(_lines(5)))
    (tmp_path / "d/multi.jsonl.gz").write_bytes(gzip.compress(_lines(3)) + gzip.compress(_lines(4)))
    (tmp_path / "d/padded.jsonl.xz").write_bytes(lzma.compress(_lines(2)) + b"\0" * 8)
    m = transform(tmp_path, str(tmp_path / "d"), str(tmp_path / "o"))
    assert m["records_out"] == 24 and all(u["bad_units"] == 0 for u in m["units"])


def test_a_gzip_missing_only_its_trailer_is_still_a_cut(tmp_path: Path) -> None:
    f = tmp_path / "d/notrailer.jsonl.gz"
    f.parent.mkdir()
    f.write_bytes(gzip.compress(_lines(10))[:-4])  # the data is all there, its length/CRC is not
    with pytest.raises(InputError, match="notrailer.jsonl.gz: compressed stream ends early"):
        transform(tmp_path, str(f), str(tmp_path / "o"))


# -- 5. inputs that change during a run ------------------------------------------------------------
def _read_all(unit: Unit) -> Tuple[List[Any], UnitReader]:
    reader = UnitReader(unit)
    recs = [r for batch, _ in reader.batches() for r in batch]
    return recs, reader


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_bytes_appended_after_planning_are_not_read(tmp_path: Path, suffix: str) -> None:
    f = tmp_path / f"a.jsonl{suffix}"
    data = _lines(100)
    f.write_bytes(gzip.compress(data) if suffix else data)
    (unit,) = plan_units(expand_input_files([str(f)]))
    assert unit.mtime > 0
    with open(f, "ab") as fh:  # a writer appends (a new gzip member, or more lines) mid-run
        fh.write(gzip.compress(_lines(50)) if suffix else _lines(50))
    recs, reader = _read_all(unit)
    assert [r["id"] for r in recs] == list(range(100))
    assert reader.bytes_read == unit.size


def test_appending_to_a_split_file_reads_only_the_plan(tmp_path: Path) -> None:
    f = tmp_path / "a.jsonl"
    f.write_bytes(_lines(2000)[:-1])  # no final newline: the last line must not grow
    units = plan_units(expand_inputs([str(f)]), unit_mb=0.01)
    assert len(units) > 2
    with open(f, "ab") as fh:
        fh.write(b'999, "appended": true}\n')
    recs = [r for u in units for r in _read_all(u)[0]]
    assert [r["id"] for r in recs] == list(range(2000)) and "appended" not in recs[-1]


def _appender(path: str) -> Any:
    def fn(r: Dict[str, Any]) -> Any:
        if r["id"] == 0:
            with open(path, "ab") as fh:  # a process appends to the input while the job reads it
                fh.write(b"".join(orjson.dumps({"id": -i}) + b"\n" for i in range(1, 50_000)))
        return r

    return fn


def _truncator(path: str) -> Any:
    def fn(r: Dict[str, Any]) -> Any:
        if r["id"] == 0:
            os.truncate(path, 1000)  # another process cuts the input while the job reads it
        return r

    return fn


def test_a_file_changed_while_the_job_reads_it(tmp_path: Path) -> None:
    f = tmp_path / "d/a.jsonl"
    f.parent.mkdir()
    n = 200_000  # more than one read chunk: the job is mid-file when the file changes
    f.write_bytes(_lines(n))
    m = transform(tmp_path, str(f), str(tmp_path / "o"), fn=_appender(str(f)))
    assert [r["id"] for r in read_output(tmp_path / "o")] == list(range(n)) and m["records_in"] == n
    f.write_bytes(_lines(n))
    with pytest.raises(InputError, match=rf"{f} changed during the run \(shrank while being read\)"):
        transform(tmp_path, str(f), str(tmp_path / "o2"), fn=_truncator(str(f)))


def test_a_file_that_shrank_or_was_replaced_is_an_error_naming_it(tmp_path: Path) -> None:
    f = tmp_path / "a.jsonl"
    f.write_bytes(_lines(100))
    (unit,) = plan_units(expand_inputs([str(f)]))
    f.write_bytes(_lines(60))
    with pytest.raises(
        InputError, match=rf"{f} changed during the run \(shrank\): planned {unit.size} bytes"
    ):
        _read_all(unit)
    f.write_bytes(_lines(100))
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # same size, another mtime: replaced
    (unit2,) = plan_units(expand_inputs([str(f)]))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 2 * 10**9))
    with pytest.raises(InputError, match=r"changed during the run \(was replaced\).*rerun to plan again"):
        _read_all(unit2)
    f.unlink()
    with pytest.raises(InputError, match=rf"{f} changed during the run \(deleted\)"):
        _read_all(unit2)


# -- 6. integers beyond 64 bits stay exact ------------------------------------------------------
def test_big_integers_round_trip_exactly(tmp_path: Path) -> None:
    f = tmp_path / "d/big.jsonl"
    f.parent.mkdir()
    lines = [
        b'{"id": 123456789012345678901234567890}',
        b'{"id": -9223372036854775809, "s": "12345678901234567890123", "x": 0.5}',
        b'{"id": 18446744073709551615, "nested": [1, {"n": 99999999999999999999999}]}',
        b'{"id": 7}',
    ]
    f.write_bytes(b"\n".join(lines) + b"\n")
    m = transform(tmp_path, str(f), str(tmp_path / "o"), "--on_error", "raise")
    assert m["records_out"] == 4
    got = (tmp_path / "o/part-00000.jsonl").read_bytes().splitlines()
    assert [json.loads(g) for g in got] == [json.loads(x) for x in lines]
    assert b"123456789012345678901234567890" in got[0] and b"99999999999999999999999" in got[2]


def test_big_integers_refused_by_name_for_parquet(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    f = tmp_path / "d/big.jsonl"
    f.parent.mkdir()
    f.write_bytes(b'{"id": 1, "v": {"w": 1}}\n{"id": 2, "v": {"w": 123456789012345678901234567890}}\n')
    with pytest.raises(InputError, match=r"big\.jsonl, line 2: .*field v\.w: integer beyond 64 bits"):
        transform(tmp_path, str(f), str(tmp_path / "o"), "--output_format", "parquet")
    m = transform(
        tmp_path,
        str(f),
        str(tmp_path / "o2"),
        "--output_format",
        "parquet",
        "--on_error",
        "skip",
        "--max_error_rate",
        "1",
    )
    assert m["records_out"] == 1 and m["bad"] == 1


# -- 7. a CSV byte-order mark is not part of the first column's name -------------------------------
def test_csv_with_bom(tmp_path: Path) -> None:
    f = tmp_path / "d/bom.csv"
    f.parent.mkdir()
    f.write_bytes(b"\xef\xbb\xbfid,name\n1,a\n2,b\n")
    transform(tmp_path, str(f), str(tmp_path / "o"))
    assert read_output(tmp_path / "o") == [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]  # typed (issue 10)


def test_jsonl_with_bom(tmp_path: Path) -> None:
    f = tmp_path / "d/bom.jsonl"
    f.parent.mkdir()
    f.write_bytes(b'\xef\xbb\xbf{"id": 1}\n{"id": 2}\n')
    m = transform(tmp_path, str(f), str(tmp_path / "o"))
    assert m["bad"] == 0 and read_output(tmp_path / "o") == [{"id": 1}, {"id": 2}]


# -- 13. every input failure names the file (and the line) ------------------------------------------
def test_parquet_with_a_bad_footer_names_the_file(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    f = tmp_path / "d/broken.parquet"
    f.parent.mkdir()
    f.write_bytes(b"PAR1" + b"\0" * 100)
    with pytest.raises(InputError, match=rf"{f}: not a valid Parquet file"):
        transform(tmp_path, str(f), str(tmp_path / "o"))


def test_csv_field_over_the_csv_module_limit(tmp_path: Path) -> None:
    f = tmp_path / "d/long.csv"
    f.parent.mkdir()
    big = "y" * 300_000
    f.write_text(f'id,text\n1,"{big}"\n2,short\n')
    m = transform(tmp_path, str(f), str(tmp_path / "o"), "--on_error", "skip")
    assert m["bad"] == 0 and [len(r["text"]) for r in read_output(tmp_path / "o")] == [300_000, 5]


def test_csv_row_with_the_wrong_number_of_fields_is_a_bad_record_under_skip(tmp_path: Path) -> None:
    # issue 10: CSV is parsed by pyarrow (no csv-module field limit any more); a row it refuses
    # is one bad record with its file line, counted after a quoted newline.
    f = tmp_path / "d/rows.csv"
    f.parent.mkdir()
    f.write_text('id,text\n1,"two\nlines"\n2,a,extra\n3,fine\n')
    m = transform(tmp_path, str(f), str(tmp_path / "o"), "--on_error", "skip", "--max_error_rate", "1")
    assert [r["id"] for r in read_output(tmp_path / "o")] == [1, 3] and m["bad"] == 1
    (err,) = [orjson.loads(x) for x in (tmp_path / "o/_errors/part-00000.jsonl").read_bytes().splitlines()]
    assert err["file"] == str(f) and err["line"] == 4 and "expected 2 fields (id,text), got 3" in err["error"]
    assert err["raw"] == "2,a,extra"


def test_symlinked_subdirectory_and_a_loop(tmp_path: Path) -> None:
    make_dataset(tmp_path / "in/real", [3])
    make_dataset(tmp_path / "other", [2])
    os.symlink(tmp_path / "other", tmp_path / "in/linked")
    os.symlink(tmp_path / "in", tmp_path / "in/real/loop")
    with pytest.warns(UserWarning, match="links back to"):
        m = transform(tmp_path, str(tmp_path / "in"), str(tmp_path / "o"))
    assert m["records_out"] == 5 and len(m["inputs"]) == 2


def _flatmap_bad_at(line: int) -> Any:
    def fn(r: Dict[str, Any]) -> Any:
        if r["id"] % 7 == 0:
            return None  # filtered: shifts the output index
        if r["id"] == line - 1:
            return [{"id": r["id"], "bad": {1, 2}}, {"id": r["id"], "copy": 1}]
        return [r, {"copy": r["id"]}] if r["id"] % 3 == 0 else r

    return fn


def test_serialization_failure_names_the_input_line(tmp_path: Path) -> None:
    f = tmp_path / "d/big.jsonl"
    f.parent.mkdir()
    f.write_bytes(b"".join(orjson.dumps({"id": i}) + b"\n" for i in range(100_010)))
    with pytest.raises(InputError, match=r"big\.jsonl, line 100008: .*not JSON-serializable"):
        transform(tmp_path, str(f), str(tmp_path / "o"), fn=_flatmap_bad_at(100_008))
    m = transform(tmp_path, str(f), str(tmp_path / "o2"), "--on_error", "skip", fn=_flatmap_bad_at(100_008))
    (err,) = [orjson.loads(x) for x in (tmp_path / "o2/_errors/part-00000.jsonl").read_bytes().splitlines()]
    assert err["line"] == 100_008 and err["stage"] == "serialize" and m["bad"] == 1


def test_serialization_failure_line_for_a_batched_function(tmp_path: Path) -> None:
    f = tmp_path / "d/b.jsonl"
    f.parent.mkdir()
    f.write_bytes(b"".join(orjson.dumps({"id": i}) + b"\n" for i in range(3000)))

    @tdp.batched
    def dup(batch: List[Dict[str, Any]]) -> List[Any]:
        out: List[Any] = []
        for r in batch:
            if r["id"] % 2:
                out.append(r)
            if r["id"] == 2500:
                out.append({"bad": object()})
        return out

    with pytest.raises(InputError, match=r"b\.jsonl, line 2501: .*not JSON-serializable"):
        transform(tmp_path, str(f), str(tmp_path / "o"), fn=dup)


# -- 17. JSON Lines records are objects -------------------------------------------------------------
def test_non_object_json_lines_are_bad_records(tmp_path: Path) -> None:
    f = tmp_path / "d/mixed.jsonl"
    f.parent.mkdir()
    f.write_bytes(b'{"id": 1}\n[1, 2, 3]\nnull\n5\n"s"\n{"id": 2}\n')
    m = transform(tmp_path, str(f), str(tmp_path / "o"), "--on_error", "skip", "--max_error_rate", "1")
    assert read_output(tmp_path / "o") == [{"id": 1}, {"id": 2}]
    assert m["records_in"] == 6 and m["bad"] == 4 and m["filtered"] == 0
    errs = [orjson.loads(x) for x in (tmp_path / "o/_errors/part-00000.jsonl").read_bytes().splitlines()]
    assert [(e["line"], e["stage"], e["error"]) for e in errs] == [
        (2, "parse", "expected a JSON object per line, got list"),
        (3, "parse", "expected a JSON object per line, got null"),
        (4, "parse", "expected a JSON object per line, got number"),
        (5, "parse", "expected a JSON object per line, got string"),
    ]
    with pytest.raises(InputError, match=r"mixed\.jsonl, line 2: .*got list"):
        transform(tmp_path, str(f), str(tmp_path / "o2"))
    reader = UnitReader(plan_units(expand_inputs([str(f)]))[0], objects_only=False)
    assert [r for batch, _ in reader.batches() for r in batch] == [
        {"id": 1},
        [1, 2, 3],
        None,
        5,
        "s",
        {"id": 2},
    ]


def test_text_input_yields_strings_whatever_they_look_like(tmp_path: Path) -> None:
    f = tmp_path / "d/t.txt"
    f.parent.mkdir()
    f.write_bytes(b"[1, 2, 3]\nnull\n\nplain\n")
    (unit,) = plan_units(expand_inputs([str(f)]))
    recs, reader = _read_all(unit)
    assert recs == ["[1, 2, 3]", "null", "plain"] and reader.blank == 1 and not reader.bad


def test_a_parquet_file_rewritten_during_the_run_is_refused(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    f = tmp_path / "a.parquet"
    pq.write_table(pa.table({"id": list(range(10))}), f)
    (unit,) = plan_units(expand_input_files([str(f)]))
    pq.write_table(pa.table({"id": list(range(50))}), f)
    with pytest.raises(InputError, match=r"a\.parquet changed during the run \(was rewritten\)"):
        _read_all(unit)


def test_a_file_that_is_not_gzip_is_a_bad_unit_naming_it(tmp_path: Path) -> None:
    f = tmp_path / "d/fake.jsonl.gz"
    f.parent.mkdir()
    f.write_bytes(b'{"id": 1}\n')
    with pytest.raises(InputError, match=r"fake\.jsonl\.gz: compressed stream is corrupt after 0 lines"):
        transform(tmp_path, str(f), str(tmp_path / "o"))
    m = transform(tmp_path, str(f), str(tmp_path / "o2"), "--on_error", "skip", "--max_error_rate", "1")
    assert m["units"][0]["bad_units"] == 1 and m["units"][0]["lost_bytes"] > 0
