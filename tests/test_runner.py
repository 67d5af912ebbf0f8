"""The runner in-process (``main([...])``): formats, function kinds, errors, resume, units."""

import json
from pathlib import Path
from typing import Any, Callable, Dict, List

import orjson
import pytest
from tdp_testutil import canon, make_dataset, read_output, records, run_op, write_jsonl

import torchx_datapipes as tdp
from torchx_datapipes import artifact
from torchx_datapipes.errors import ArtifactIntegrityError, DatapipesError, OutputExistsError
from torchx_datapipes.formats.planning import assign, plan_units
from torchx_datapipes.io.fs import expand_inputs
from torchx_datapipes.runner.badrecords import RecordError
from torchx_datapipes.runner.main import main


def run(tmp: Path, fn: Callable[..., Any], inp: str, out: str = "out", *extra: str) -> Dict[str, Any]:
    return run_op("transform", inp, tmp / out, *extra, fn=fn)


def identity(r: Any) -> Any:
    return r


def test_map_filter_flatmap(tmp_path: Path) -> None:
    recs = make_dataset(tmp_path / "d", [10, 7])

    def fn(r: Dict[str, Any]) -> Any:
        if r["label"] == 0:
            return None
        if r["label"] == 1:
            return [{**r, "copy": 0}, {**r, "copy": 1}]
        return {**r, "n": len(r["text"].split())}

    m = run(tmp_path, fn, str(tmp_path / "d/*.jsonl"))
    expected: List[Any] = []
    for r in recs:
        out = fn(r)
        expected.extend(out if isinstance(out, list) else [] if out is None else [out])
    assert canon(read_output(tmp_path / "out")) == canon(expected)
    assert m["records_in"] == 17 and m["records_out"] == len(expected)
    assert m["filtered"] == sum(r["label"] == 0 for r in recs)


def test_batched_and_pipelines(tmp_path: Path) -> None:
    recs = make_dataset(tmp_path / "d", [25])

    @tdp.batched
    def b(batch: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        return [{**r, "bs": len(batch)} for r in batch]

    run(tmp_path, b, str(tmp_path / "d/*.jsonl"), "b", "--batch_size", "10")
    assert sorted(r["bs"] for r in read_output(tmp_path / "b")) == [5] * 5 + [10] * 20

    @tdp.pipeline
    def dp(source: Any) -> Any:
        return source.filter(lambda r: r["id"] % 2 == 0).map(lambda r: {"id": r["id"]})

    run(tmp_path, dp, str(tmp_path / "d/*.jsonl"), "dp")
    assert canon(read_output(tmp_path / "dp")) == canon([{"id": r["id"]} for r in recs if r["id"] % 2 == 0])

    @tdp.pipeline(kind="nodes")
    def nodes(source: Any) -> Any:
        from torchdata.nodes import Mapper

        return Mapper(source, lambda r: {"id": r["id"] * 10})

    run(tmp_path, nodes, str(tmp_path / "d/*.jsonl"), "nodes")
    assert canon(read_output(tmp_path / "nodes")) == canon([{"id": r["id"] * 10} for r in recs])


def test_formats(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")  # in the dev extra, so present in CI
    import pyarrow.parquet as pq
    import zstandard

    recs = records(12)
    d = tmp_path / "d"
    write_jsonl(d / "a.jsonl.gz", recs[:4], compress=True)
    (d / "b.jsonl.zst").write_bytes(
        zstandard.ZstdCompressor().compress(b"".join(orjson.dumps(r) + b"\n" for r in recs[4:8]))
    )
    pq.write_table(pa.Table.from_pylist(recs[8:]), d / "c.parquet", row_group_size=2)
    run(tmp_path, identity, str(d / "*"), "o1")
    assert canon(read_output(tmp_path / "o1")) == canon(recs)

    (tmp_path / "t").mkdir()
    (tmp_path / "t/a.csv").write_text("id,name\n1,ann\n2,bob\n")
    (tmp_path / "t/b.txt").write_text("hello\n\nworld")
    run(tmp_path, identity, str(tmp_path / "t/*"), "o2")
    assert canon(read_output(tmp_path / "o2")) == canon(
        [{"id": 1, "name": "ann"}, {"id": 2, "name": "bob"}, "hello", "world"]  # typed CSV (issue 10)
    )

    run(tmp_path, identity, str(d / "c.parquet"), "o3", "--output_format", "parquet")
    parts = sorted((tmp_path / "o3").glob("part-*.parquet"))
    assert len(parts) == 2  # one unit per row group
    assert [r for p in parts for r in pq.read_table(p).to_pylist()] == recs[8:]


def test_byte_range_units_exactly_once_and_line_numbers(tmp_path: Path) -> None:
    recs = records(1000)
    lines = [orjson.dumps(r) for r in recs]
    lines[777] = b"{broken"
    f = tmp_path / "d/big.jsonl"
    f.parent.mkdir()
    f.write_bytes(b"\n".join(lines))  # no trailing newline
    units = plan_units(expand_inputs([str(f)]), unit_mb=0.005)
    assert len(units) > 5
    m = run(tmp_path, identity, str(f), "o", "--unit_mb", "0.005", "--on_error", "skip")
    got = read_output(tmp_path / "o")
    assert canon(got) == canon(recs[:777] + recs[778:])
    errors = [json.loads(x) for p in (tmp_path / "o/_errors").glob("*") for x in p.read_text().splitlines()]
    assert [(e["line"], e["raw"], e["stage"]) for e in errors] == [(778, "{broken", "parse")]
    assert m["bad"] == 1 and m["records_in"] == 1000


@pytest.mark.parametrize("world", [1, 2, 3, 4, 7])
def test_strided_assignment_covers_each_unit_once(tmp_path: Path, world: int) -> None:
    for n in (1, 5, 10, 13):
        units = list(range(n))
        got = sorted(u for s in range(world) for u in assign(units, s, world))  # type: ignore[arg-type]
        assert got == units


def test_on_error_raise_names_file_line_and_traceback(tmp_path: Path) -> None:
    make_dataset(tmp_path / "d", [5])

    def boom(r: Dict[str, Any]) -> Any:
        if r["id"] == 3:
            raise KeyError("missing_field")
        return r

    with pytest.raises(RecordError) as ei:
        run(tmp_path, boom, str(tmp_path / "d/*.jsonl"))
    msg = str(ei.value)
    assert (
        "part-0.jsonl, line 4" in msg
        and "KeyError" in msg
        and "missing_field" in msg
        and "--on_error skip" in msg
    )
    assert 'raise KeyError("missing_field")' in msg
    assert not (tmp_path / "out/_SUCCESS").exists()


def test_skip_routes_errors_and_max_error_rate(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    (d / "a.jsonl").write_bytes(b'{"id": 1}\n\xff\xfe bad utf8\n\n   \n{"id": 2}\n{"id": "x"}\n')
    (d / "empty.jsonl").write_bytes(b"")

    def fn(r: Dict[str, Any]) -> Any:
        return {"id": r["id"] + 1}

    m = run(tmp_path, fn, str(d / "*.jsonl"), "o", "--on_error", "skip", "--max_error_rate", "1")
    assert canon(read_output(tmp_path / "o")) == canon([{"id": 2}, {"id": 3}])
    assert (m["records_in"], m["bad"], m["blank_lines"]) == (4, 2, 2)
    errs = [json.loads(x) for x in (tmp_path / "o/_errors/part-00000.jsonl").read_text().splitlines()]
    assert {(e["line"], e["stage"]) for e in errs} == {(2, "parse"), (6, "transform")}
    assert "TypeError" in next(e for e in errs if e["stage"] == "transform")["error"]
    with pytest.raises(DatapipesError, match="max_error_rate"):
        run(tmp_path, fn, str(d / "*.jsonl"), "o2", "--on_error", "skip", "--max_error_rate", "0.25")
    assert not (tmp_path / "o2/_SUCCESS").exists()


def test_missing_input_and_overwrite(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="matched no files"):
        run(tmp_path, identity, str(tmp_path / "nothing/*.jsonl"))
    make_dataset(tmp_path / "d", [3])
    run(tmp_path, identity, str(tmp_path / "d/*.jsonl"))
    with pytest.raises(OutputExistsError, match="--overwrite True"):
        run(tmp_path, identity, str(tmp_path / "d/*.jsonl"))
    m = run(tmp_path, lambda r: {"v": 1}, str(tmp_path / "d/*.jsonl"), "out", "--overwrite", "True")
    assert read_output(tmp_path / "out") == [{"v": 1}] * 3 and m["records_out"] == 3


def test_tampered_artifact_is_refused(tmp_path: Path) -> None:
    make_dataset(tmp_path / "d", [3])
    ref = artifact.package(identity, str(tmp_path / "store"))
    data = bytearray(Path(ref.url).read_bytes())
    data[-5] ^= 0xFF
    Path(ref.url).write_bytes(bytes(data))
    with pytest.raises(ArtifactIntegrityError):
        main(["transform", "--input", str(tmp_path / "d/*.jsonl"), "--output", str(tmp_path / "o"),
              "--artifact", ref.url, "--sha256", ref.sha256])  # fmt: skip
    assert not (tmp_path / "o").exists()


def test_resume_skips_committed_units(tmp_path: Path) -> None:
    make_dataset(tmp_path / "d", [4, 4, 4])
    calls = tmp_path / "calls"
    calls.mkdir()

    def flaky(r: Dict[str, Any]) -> Any:
        (calls / str(r["id"])).touch()
        if r["id"] == 9 and not (calls / "healed").exists():
            raise RuntimeError("transient")
        return r

    # static assignment, so units 0 and 1 run before unit 2 (dynamic resume: tests/test_claiming.py)
    with pytest.raises(RecordError):
        run(tmp_path, flaky, str(tmp_path / "d/*.jsonl"), "out", "--assign", "static")
    first = {p.name for p in calls.iterdir()}
    assert {str(i) for i in range(10)} <= first
    for p in calls.iterdir():
        p.unlink()
    (calls / "healed").touch()
    m = run(tmp_path, flaky, str(tmp_path / "d/*.jsonl"), "out", "--assign", "static")
    # units 0 and 1 (ids 0-7) committed in the first run and are not recomputed
    assert {p.name for p in calls.iterdir()} == {"healed", "8", "9", "10", "11"}
    assert m["records_out"] == 12 and len(read_output(tmp_path / "out")) == 12


def test_num_workers_fork(tmp_path: Path) -> None:
    recs = make_dataset(tmp_path / "d", [5, 6, 7])
    m = run(tmp_path, identity, str(tmp_path / "d/*.jsonl"), "o", "--num_workers", "2")
    assert canon(read_output(tmp_path / "o")) == canon(recs) and m["num_workers"] == 2


def test_memory_filesystem_output(tmp_path: Path) -> None:
    import fsspec

    make_dataset(tmp_path / "d", [3])
    ref = artifact.package(identity, "memory://store")
    main(["transform", "--input", str(tmp_path / "d/*.jsonl"), "--output", "memory://out/x",
          "--artifact", ref.url, "--sha256", ref.sha256])  # fmt: skip
    fs = fsspec.filesystem("memory")
    assert fs.exists("/out/x/_SUCCESS") and len(fs.cat("/out/x/part-00000.jsonl").splitlines()) == 3


def test_previous_output_directory_as_input(tmp_path: Path) -> None:
    """A committed output can feed the next job: bookkeeping (_SUCCESS, _units/, _errors/) is skipped."""
    d = tmp_path / "d"
    d.mkdir()
    (d / "a.jsonl").write_bytes(b'{"id": 1}\nnot json\n{"id": 2}\n')
    run(tmp_path, identity, str(d / "a.jsonl"), "first", "--on_error", "skip", "--max_error_rate", "1")
    assert (tmp_path / "first/_errors").is_dir()
    m = run(tmp_path, identity, str(tmp_path / "first"), "second")
    assert m["records_in"] == 2 and [i["path"].rsplit("/", 1)[-1] for i in m["inputs"]] == [
        "part-00000.jsonl"
    ]


def test_output_inside_inputs_is_refused(tmp_path: Path) -> None:
    make_dataset(tmp_path / "d", [3])
    with pytest.raises(ValueError, match="lies inside --output"):
        run(tmp_path, identity, str(tmp_path / "d/*.jsonl"), "d", "--overwrite", "True")
    assert len(list((tmp_path / "d").glob("*.jsonl"))) == 1  # the input survived


def test_artifact_without_sha256_is_fingerprinted_by_its_url(tmp_path: Path) -> None:
    """A hand-started runner given only --artifact still pins (and fingerprints) the artifact's sha256."""
    make_dataset(tmp_path / "d", [5])
    ref = artifact.package(identity, str(tmp_path / "store"))
    out = tmp_path / "o"
    m = main(["transform", "--input", str(tmp_path / "d"), "--output", str(out), "--artifact", ref.url])
    assert m is not None and m["artifact"]["sha256"] == ref.sha256
