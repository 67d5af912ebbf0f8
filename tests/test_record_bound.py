"""Issue 23, item 4: a record-size bound (``--max_record_mb``) on every input format.

A line, CSV row, JSON document, tar member or file over the bound is a bad record naming its
file, line and size (``--on_error raise``: the job fails; ``skip``: quarantined and counted),
and the reader's memory stays bounded by the bound, whatever the line's length. A killed run's
temporary files are removed when the output is taken again.
"""

import gzip
import io
import json
import subprocess
import sys
import tarfile
import textwrap
import uuid
from pathlib import Path
from typing import Any, Dict, List

import orjson
import pytest
from tdp_testutil import read_output, run_op, write_jsonl

from torchx_datapipes.formats.planning import plan_units
from torchx_datapipes.formats.reading import UnitReader
from torchx_datapipes.io.stale import is_stale_tmp
from torchx_datapipes.runner.badrecords import RecordError

MiB = 1 << 20


def identity(r: Any) -> Any:
    return r


def errors_of(out: Path) -> List[Dict[str, Any]]:
    return [
        orjson.loads(x)
        for p in sorted((out / "_errors").glob("*.jsonl"))
        for x in p.read_bytes().splitlines()
    ]


def huge_line_gz(path: Path, line_bytes: int) -> Path:
    """Three JSONL records, the second one a string of ``line_bytes`` (compressed: a few KB)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wb", compresslevel=1) as fh:
        fh.write(b'{"id": 1}\n{"id": 2, "text": "')
        piece = b"x" * MiB
        for _ in range(line_bytes // MiB):
            fh.write(piece)
        fh.write(b'"}\n{"id": 3}\n')
    return path


def test_a_huge_line_is_a_bad_record_naming_file_line_and_size(tmp_path: Path) -> None:
    """The issue's case, smaller: a .gz holding one huge JSON line (here 10 MiB, bound 2 MiB)."""
    f = huge_line_gz(tmp_path / "d/big.jsonl.gz", 10 * MiB)
    with pytest.raises(RecordError) as e:
        run_op("transform", str(f), tmp_path / "raise", "--max_record_mb", "2", fn=identity)
    msg = str(e.value)
    assert f"{f}, line 2" in msg and f"{10 * MiB + 21:,} bytes" in msg and "--max_record_mb" in msg
    m = run_op("transform", str(f), tmp_path / "skip", "--max_record_mb", "2", "--on_error", "skip",
               "--max_error_rate", "1", fn=identity)  # fmt: skip
    assert m["bad"] == 1 and m["records_in"] == 3 and m["options"]["max_record_mb"] == 2.0
    assert [r["id"] for r in read_output(tmp_path / "skip")] == [1, 3]
    (err,) = errors_of(tmp_path / "skip")
    assert err["file"] == str(f) and err["line"] == 2 and f"{10 * MiB + 21:,} bytes" in err["error"]
    assert len(err["raw"]) < 3000  # the record's head, never the whole line
    # the default bound (64 MiB) reads the same line as a record
    m = run_op("transform", str(f), tmp_path / "default", fn=identity)
    assert m["bad"] == 0 and len(read_output(tmp_path / "default")) == 3


MEMORY_PROBE = textwrap.dedent(
    """
    import json, os, resource, sys, tracemalloc
    from torchx_datapipes.formats.reading import UnitReader
    from torchx_datapipes.formats.planning import plan_units

    path = sys.argv[1]
    (unit,) = plan_units([(path, os.path.getsize(path))], unit_mb=1024, max_record_mb=16)
    reader = UnitReader(unit, max_record=16 << 20)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    recs = [x for b, _ in reader.batches() for x in b]
    peak = tracemalloc.get_traced_memory()[1]
    grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
    bad = [(b.line, b.error) for b in reader.bad]
    print(json.dumps({"recs": recs, "bad": bad, "peak": peak, "rss_growth": grew}))
    """
)


def sparse_long_line(path: Path, size: int) -> Path:
    """``{"a": 1}``, a line of ``size`` bytes (mostly a hole: no disk, no time), ``{"b": 2}``."""
    with open(path, "wb") as fh:
        fh.write(b'{"a": 1}\n{"x": "')
        fh.truncate(size)
        fh.seek(0, 2)
        fh.write(b'"}\n{"b": 2}\n')
    return path


def zstd_long_line(path: Path, size: int) -> Path:
    """The same records as :func:`sparse_long_line`, zstd-compressed: 300 MiB of line in ~10 KB."""
    import zstandard

    comp = zstandard.ZstdCompressor(level=1).compressobj()
    with open(path, "wb") as fh:
        fh.write(comp.compress(b'{"a": 1}\n{"x": "'))
        zeros = b"\0" * MiB
        left = size - 16
        while left > 0:
            fh.write(comp.compress(zeros[: min(left, MiB)]))
            left -= MiB
        fh.write(comp.compress(b'"}\n{"b": 2}\n') + comp.flush())
    return path


@pytest.mark.parametrize("compressed", [False, True])
def test_reading_a_300_mib_line_holds_the_bound_not_the_line(tmp_path: Path, compressed: bool) -> None:
    """Memory is measured in a fresh process: Python's allocations (tracemalloc) and the RSS peak.

    Compressed: a .zst whose frame decodes ~32000x (zstandard has no output limit: it used to
    hand out the whole 300 MiB from one 256 KiB read)."""
    if compressed:
        f = zstd_long_line(tmp_path / "big.jsonl.zst", 300 * MiB)
        assert f.stat().st_size < MiB
    else:
        f = sparse_long_line(tmp_path / "big.jsonl", 300 * MiB)
    res = subprocess.run([sys.executable, "-c", MEMORY_PROBE, str(f)], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["recs"] == [{"a": 1}, {"b": 2}]
    ((line, error),) = got["bad"]
    assert line == 2 and f"{300 * MiB + 12 - 19:,} bytes" in error and "16,777,216" in error
    # the bound (16 MiB) and a few read chunks, never the 300 MiB line
    assert got["peak"] < 64 * MiB, got
    assert got["rss_growth"] < 100 * MiB, got


def test_byte_range_units_cutting_a_long_line_skip_it_once(tmp_path: Path) -> None:
    """Units start inside the long line: each skips its part of it in bounded reads; one bad record."""
    f = sparse_long_line(tmp_path / "big.jsonl", 40 * MiB)
    units = plan_units([(str(f), f.stat().st_size)], unit_mb=8, max_record_mb=4)
    assert len(units) == 6
    recs, bad = [], []
    for u in units:
        r = UnitReader(u, max_record=4 * MiB)
        recs += [(r.absolute(ln), x) for b, lines in r.batches() for x, ln in zip(b, lines)]
        bad += [(r.absolute(b.line), b.error) for b in r.bad]
    assert recs == [(1, {"a": 1}), (3, {"b": 2})]
    ((line, error),) = bad
    assert line == 2 and f"the line is {f.stat().st_size - 19:,} bytes" in error


@pytest.mark.parametrize("fmt", ["json", "files"])
def test_json_document_and_file_over_the_bound(tmp_path: Path, fmt: str) -> None:
    d = tmp_path / "d"
    d.mkdir()
    if fmt == "json":
        big, small = d / "doc.json", d / "small.json"
        big.write_text(json.dumps([{"i": i, "pad": "y" * 1000} for i in range(3000)]))
        small.write_text(json.dumps([{"i": -1}]))
    else:
        big, small = d / "blob.bin", d / "tiny.bin"
        big.write_bytes(b"\0" * (3 * MiB))
        small.write_bytes(b"\1" * 10)
    m = run_op("transform", str(d / "*"), tmp_path / "out", "--max_record_mb", "2", "--on_error", "skip",
               "--max_error_rate", "1", fn=lambda r: {"k": str(r.get("i", r.get("path")))})  # fmt: skip
    (err,) = errors_of(tmp_path / "out")
    assert err["file"] == str(big) and err["line"] == 1 and m["bad"] == 1
    if fmt == "json":
        assert "JSON document" in err["error"] and "JSON Lines" in err["error"]
        assert f"{big.stat().st_size:,} bytes" in err["error"]
        assert [r["k"] for r in read_output(tmp_path / "out")] == ["-1"]
    else:
        assert f"the file is {3 * MiB:,} bytes" in err["error"]
        assert [r["k"] for r in read_output(tmp_path / "out")] == [str(small)]


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def test_webdataset_member_over_the_bound_and_link_members_are_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shard = tmp_path / "d/shard.tar"
    shard.parent.mkdir()
    with tarfile.open(shard, "w") as tar:
        _add(tar, "a.txt", b"first")
        _add(tar, "b.txt", b"z" * (2 * MiB))
        _add(tar, "b.json", b"{}")
        for kind, name in ((tarfile.SYMTYPE, "c.txt"), (tarfile.LNKTYPE, "d.txt")):
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, "a.txt"
            tar.addfile(info)
        _add(tar, "e.txt", b"last")
    m = run_op("transform", str(shard), tmp_path / "out", "--max_record_mb", "1", "--on_error", "skip",
               "--max_error_rate", "1", fn=lambda r: {"key": r["__key__"]})  # fmt: skip
    assert [r["key"] for r in read_output(tmp_path / "out")] == ["a", "e"]
    (err,) = errors_of(tmp_path / "out")
    assert (
        err["line"] == 2
        and err["members"] == "b.txt, b.json"
        and "'b.txt' is 2,097,152 bytes" in err["error"]
    )
    assert m["skipped_members"] == 2 and m["bad"] == 1
    logged = capsys.readouterr().err
    assert "skipped 2 link member(s)" in logged and "'c.txt'" in logged and "'d.txt'" in logged


def test_a_killed_runs_temp_files_are_removed_on_relaunch(tmp_path: Path) -> None:
    inp = write_jsonl(tmp_path / "d/a.jsonl", [{"i": i} for i in range(5)] + ["not an object"])
    out = tmp_path / "out"
    with pytest.raises(RecordError):  # a failed run: the output holds its bookkeeping, no _SUCCESS
        run_op("transform", str(inp), out, fn=identity)
    stale = [
        out / f".tmp-{uuid.uuid4().hex}-part-00000.jsonl",
        out / f"_units/.tmp-{uuid.uuid4().hex}-00000.json",
    ]
    for p in stale:  # what a kill during a write leaves behind
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x" * 4096)
    inp.write_bytes(b"".join(orjson.dumps({"i": i}) + b"\n" for i in range(5)))
    m = run_op("transform", str(inp), out, fn=identity)
    assert m["records_in"] == 5 and not any(p.exists() for p in stale)
    assert not list(out.rglob(".tmp-*"))


@pytest.mark.parametrize(
    "name, ours",
    [
        (f".tmp-{'a1' * 16}-part-00003.jsonl", True),
        (f".tmp-{'a1' * 16}-_SUCCESS", True),
        (f".tmp-{'a1' * 16}-_LEASE", False),  # the lease's heartbeat: left to the lease
        (".tmp-notes.txt", False),
        (f".tmp-{'A1' * 16}-part-00003.jsonl", False),
        (f"tmp-{'a1' * 16}-part-00003.jsonl", False),
        ("part-00003.jsonl", False),
    ],
)
def test_only_our_temp_names_are_stale(name: str, ours: bool) -> None:
    assert is_stale_tmp(name) is ours


def test_plan_and_reader_default_bound_is_64_mib(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "a.jsonl", [{"i": 1}])
    (unit,) = plan_units([(str(f), f.stat().st_size)])
    assert UnitReader(unit).max_record == 64 * MiB
