"""``_SUCCESS`` and the commit records hold exactly the keys ``io/manifest_schema.py`` documents.

Real in-process transform and split jobs (``run_op``) write their outputs; every key of the
manifest, of its unit summaries and of every ``_units/*.json`` record must be one the schema module
(the shared keys) or the op's module (``ops/<op>.py``'s ``Keys``) lists for that op, and every key
listed as always present must be there, so a key cannot be added, renamed or dropped without its
one home knowing.
"""

import importlib
from dataclasses import fields
from pathlib import Path
from typing import Any, Dict, FrozenSet, Iterable, List, Tuple

import orjson
import pytest
from tdp_testutil import make_dataset, run_op

from torchx_datapipes import ops
from torchx_datapipes.formats.unit import Unit
from torchx_datapipes.io import manifest_schema as ms
from torchx_datapipes.io.checksum import FileSum

FR = "train=0.8,val=0.2"


def exactly(
    what: str, keys: Iterable[str], keyset: Tuple[FrozenSet[str], FrozenSet[str]], present: Iterable[str] = ()
) -> None:
    """``keys`` are the always-present keys of ``keyset`` plus ``present`` (optional ones asked for)."""
    always, optional = keyset
    present = frozenset(present)
    assert present <= optional, f"{what}: {sorted(present - optional)} are not documented as optional"
    got = frozenset(keys)
    want = always | present
    assert got == want, f"{what}: undocumented {sorted(got - want)}, missing {sorted(want - got)}"


def records_of(out: Path, suffix: str = "") -> Dict[str, Dict[str, Any]]:
    """The commit records ``_units/NNNNN<suffix>.json`` (``.count``: a split's counting pass)."""
    found = {}
    for p in sorted((out / "_units").glob("*.json")):
        stem = p.name[: -len(".json")]
        if stem.endswith(suffix) and (suffix or "." not in stem):
            found[stem] = orjson.loads(p.read_bytes())
    assert found, f"no commit records {out}/_units/*{suffix}.json"
    return found


def check_common(m: Dict[str, Any], kind: str) -> None:
    """The sections every manifest has: inputs, artifact, job, versions, options, files, units."""
    assert m[ms.VERSION] == ms.MANIFEST_VERSION and m[ms.STATUS] == ms.SUCCEEDED
    for i in m[ms.INPUTS]:
        assert set(i) == ms.INPUT_KEYS
    assert set(m[ms.ARTIFACT]) == ms.ARTIFACT_KEYS
    assert set(m[ms.JOB]) == ms.JOB_KEYS
    assert set(m[ms.VERSIONS]) == ms.VERSIONS_KEYS
    assert set(m[ms.OPTIONS]) == ops.option_keys(kind)
    for u in m[ms.UNITS]:
        for f in u.get(ms.FILES, []):
            assert set(f) == ms.FILE_KEYS


def check_records(
    out: Path, kind: str, present: Iterable[str] = (), suffix: str = ""
) -> List[Dict[str, Any]]:
    recs = records_of(out, suffix)
    for name, r in recs.items():
        exactly(f"{out}/_units/{name}.json", r, ops.record_keys(kind), present)
        assert set(r[ms.UNIT]) == ms.UNIT_FIELDS
        for f in r[ms.FILES]:
            assert set(f) == ms.FILE_KEYS
    return list(recs.values())


def check_summaries(m: Dict[str, Any], kind: str, present: Iterable[str] = ()) -> None:
    assert m[ms.UNITS], "a manifest without unit summaries"
    for u in m[ms.UNITS]:
        exactly(f"unit summary {u.get(ms.UNIT)}", u, ops.summary_keys(kind), present)
        assert isinstance(u[ms.UNIT], int)


@pytest.fixture(scope="module")
def inp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("schema")
    make_dataset(root / "d", [120, 80])
    with open(root / "d" / "part-1.jsonl", "ab") as fh:
        fh.write(b"{not json\n")  # one bad record: errors, errors_dir and bad are set
    return root / "d"


def drop_one(r: Dict[str, Any]) -> Any:
    return None if r["id"] == 3 else r


def test_the_schema_documents_every_key_it_lists() -> None:
    """Every shared key has its line in io/manifest_schema.py's docstring and every key an op declares
    (ops' ``Keys``) in its module's or there; FileSum and Unit match theirs."""
    doc = ms.__doc__ or ""
    sets: List[FrozenSet[str]] = [ms.BASE_KEYS, *ms.ENGINE_KEYS, ms.INPUT_KEYS, ms.ARTIFACT_KEYS,
                                  ms.JOB_KEYS, ms.VERSIONS_KEYS, ms.PARQUET_SCHEMA_KEYS, ms.RENAMED_KEYS,
                                  ms.ENGINE_OPTIONS, ms.RECORD_KEYS, ms.FILE_KEYS,
                                  ms.UNIT_FIELDS]  # fmt: skip
    undocumented = sorted({k for s in sets for k in s if f"``{k}``" not in doc})
    assert not undocumented, f"keys without their line in io/manifest_schema.py's docstring: {undocumented}"
    sub_sections = {"transform": ms.QUEUE_KEYS, "validate": ms.VALIDATE_OPTIONS}
    for name in ops.builtin_op_names():
        op = ops.get_op(name)
        assert op.keys is not None, f"{name} declares no manifest keys"
        assert set(op.keys.manifest) == set(op.keys.options), name
        module_doc = _module_doc(name)
        mine = [s for pair in [*op.keys.manifest.values(), *op.keys.records.values()] for s in pair]
        mine += [*op.keys.options.values(), sub_sections.get(name, frozenset())]
        missing = sorted({k for s in mine for k in s if f"``{k}``" not in module_doc + doc})
        assert not missing, f"{name}: keys without their line in ops/{name}.py's docstring: {missing}"
    assert {f.name for f in fields(FileSum)} == ms.FILE_KEYS
    assert {f.name for f in fields(Unit)} == ms.UNIT_FIELDS


def _module_doc(op: str) -> str:
    return importlib.import_module(f"torchx_datapipes.ops.{op}").__doc__ or ""


def test_transform_jsonl_manifest_and_records(tmp_path: Path, inp: Path) -> None:
    out = tmp_path / "t"
    m = run_op("transform", str(inp), out, "--on_error", "skip", fn=drop_one)
    assert m == orjson.loads((out / "_SUCCESS").read_bytes())
    exactly("transform _SUCCESS", m, ops.manifest_keys("transform"), {ms.FIELD_TYPES})
    check_common(m, "transform")
    check_summaries(m, "transform")  # the parts' field types stay in the records; _SUCCESS has their union
    recs = check_records(out, "transform", {ms.FIELD_TYPES})
    assert sum(r[ms.BAD] for r in recs) == m[ms.BAD] == 1 and m[ms.ERRORS_DIR]
    assert sum(r[ms.RECORDS_OUT] for r in recs) == m[ms.RECORDS_OUT] == 200 - m[ms.FILTERED] == 199


def test_transform_parquet_and_renamed_columns(tmp_path: Path) -> None:
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.csv").write_text("x,y,x\n1,2,3\n4,5,6\n")  # a duplicate column: renamed_columns
    out = tmp_path / "tp"
    m = run_op("transform", str(src), out, "--output_format", "parquet", fn=lambda r: r)
    exactly(
        "parquet transform _SUCCESS",
        m,
        ops.manifest_keys("transform"),
        {ms.PARQUET_SCHEMA, ms.RENAMED_COLUMNS},
    )
    check_common(m, "transform")
    assert set(m[ms.PARQUET_SCHEMA]) == ms.PARQUET_SCHEMA_KEYS
    for entries in m[ms.RENAMED_COLUMNS].values():
        assert all(set(e) == ms.RENAMED_KEYS for e in entries)
    check_summaries(m, "transform")  # the Parquet schemas stay in the records, not in _SUCCESS
    check_records(out, "transform", {ms.SCHEMAS})


def test_split_hash_manifest_and_records(tmp_path: Path, inp: Path) -> None:
    out = tmp_path / "s"
    m = run_op("split", str(inp), out, "--fractions", FR, "--key", "id", "--on_error", "skip")
    exactly("split _SUCCESS", m, ops.manifest_keys("split"), {ms.FIELD_TYPES})
    check_common(m, "split")
    check_summaries(m, "split")
    check_records(out, "split", {ms.FIELD_TYPES})
    assert not list((out / "_units").glob("*.count.json"))  # hash without --stratify: one pass


@pytest.mark.parametrize("method", ["hash", "exact"])
def test_stratified_split_manifest_and_both_passes(tmp_path: Path, inp: Path, method: str) -> None:
    out = tmp_path / method
    extra = ("--key", "id") if method == "hash" else ()
    m = run_op("split", str(inp), out, "--fractions", FR, "--method", method, "--stratify", "label",
               "--on_error", "skip", *extra)  # fmt: skip
    exactly("stratified split _SUCCESS", m, ops.manifest_keys("split"), {ms.CLASSES, ms.FIELD_TYPES})
    check_common(m, "split")
    check_summaries(m, "split", {ms.CLASS_COUNTS})
    check_records(out, "split", {ms.CLASS_COUNTS, ms.FIELD_TYPES})
    count_present = {ms.CLASS_COUNTS, ms.HASHES} if method == "hash" else {ms.CLASS_COUNTS}
    check_records(out, "split_count", count_present, suffix=".count")


def test_transform_to_a_queue_manifest_and_records(tmp_path: Path, inp: Path) -> None:
    from queue_testutil import cleanup, fresh_url

    url = fresh_url("redis", batch=64, block_s=0.05)
    state = tmp_path / "state"
    try:
        m = run_op("transform", str(inp), tmp_path / "unused", "--output", url, "--state", str(state),
                   "--on_error", "skip", fn=drop_one)  # fmt: skip
    finally:
        cleanup(url)
    exactly("queue transform _SUCCESS", m, ops.manifest_keys("transform_queue"))
    check_common(m, "transform_queue")
    assert set(m[ms.QUEUE]) == ms.QUEUE_KEYS
    check_summaries(m, "transform_queue")
    check_records(state, "transform_queue")
