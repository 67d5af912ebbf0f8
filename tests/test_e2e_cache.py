"""``transform --cache``: a rerun of the same function on the same data computes nothing."""

import datetime
import textwrap
import uuid
from pathlib import Path
from typing import Any, Dict, List

import pytest
from cache_servers import free_port
from tdp_testutil import (
    canon,
    make_dataset,
    manifest,
    part_bytes,
    read_output,
    run_component,
    run_op,
    run_torchx,
)

from torchx_datapipes import api
from torchx_datapipes.appdef import InvalidArgumentError
from torchx_datapipes.cache import open_cache
from torchx_datapipes.components import transform
from torchx_datapipes.runner.memo import record_bytes

COUNTED = textwrap.dedent(
    """
    import os

    CALLS = {calls!r}

    def clean(rec):
        fd = os.open(CALLS, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, b"x")
        os.close(fd)
        if rec["id"] % 5 == 0:
            return None
        return {{"id": rec["id"], "text": rec["text"].upper()}}
    """
)


@pytest.fixture()
def redis_url(shared_redis: str) -> str:
    return f"redis://{shared_redis}/0"


@pytest.fixture()
def memcached_url(shared_memcached: str) -> str:
    return f"memcached://{shared_memcached}"


def calls(path: Path) -> int:
    return len(path.read_bytes()) if path.exists() else 0


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    make_dataset(tmp_path / "data", [400, 333, 268])
    (tmp_path / "counted.py").write_text(COUNTED.format(calls=str(tmp_path / "calls")))
    return tmp_path


@pytest.mark.e2e
def test_rerun_with_redis_cache_computes_nothing(project: Path, redis_url: str) -> None:
    url = f"{redis_url}?namespace=e2e-{uuid.uuid4().hex[:12]}"
    try:
        _rerun_twice(project, url)
    finally:
        open_cache(url).clear()  # leave nothing on the shared server


def _rerun_twice(project: Path, url: str) -> None:
    # the first job in this process (built by the component as torchx run builds it), the rerun launched
    run_component(
        project, "transform", fn="counted.py:clean", input="data", cache=url, output="out1", j="1x1"
    )
    assert calls(project / "calls") == 1001
    m1 = manifest(project / "out1")["cache"]
    assert (m1["hits"], m1["misses"], m1["sets"], m1["errors"]) == (0, 1001, 1001, 0)

    common = ["--fn", "counted.py:clean", "--input", "data", "--cache", url]
    cmd = ["run", "-s", "local_cwd", "torchx_datapipes.components:transform", *common]
    second = run_torchx([*cmd, "--output", "out2", "-j", "1x2", "--num_workers", "2"], cwd=project)
    assert second.returncode == 0, second.stderr
    assert calls(project / "calls") == 1001  # nothing recomputed, from other ranks and workers
    m2 = manifest(project / "out2")["cache"]
    assert (m2["hits"], m2["misses"], m2["errors"]) == (1001, 0, 0)
    assert part_bytes(project / "out1") == part_bytes(project / "out2")
    assert manifest(project / "out2")["filtered"] == manifest(project / "out1")["filtered"] > 0


@pytest.mark.parametrize("scheme", ["sqlite", "memcached"])
def test_rerun_in_process(project: Path, scheme: str, memcached_url: str) -> None:
    ns = f"ip-{uuid.uuid4().hex[:12]}"
    url = {"sqlite": f"sqlite://{project}/cache.db", "memcached": memcached_url}[scheme] + f"?namespace={ns}"
    fn = _load(project)
    m1 = run_op("transform", str(project / "data"), project / "o1", "--cache", url, fn=fn)
    m2 = run_op(
        "transform", str(project / "data"), project / "o2", "--cache", url, "--num_workers", "2", fn=fn
    )
    open_cache(url).clear()  # leave nothing on the shared servers
    assert calls(project / "calls") == 1001
    assert (m1["cache"]["misses"], m2["cache"]["hits"], m2["cache"]["misses"]) == (1001, 1001, 0)
    assert canon(read_output(project / "o1")) == canon(read_output(project / "o2"))


def test_dead_cache_never_fails_the_job(project: Path) -> None:
    fn = _load(project)
    url = f"redis://127.0.0.1:{free_port()}/0?timeout=0.2&cooldown=60"
    m = run_op("transform", str(project / "data"), project / "o", "--cache", url, fn=fn)
    assert m["records_out"] == 800 and m["cache"]["hits"] == 0
    assert m["cache"]["errors"] >= 1 and m["cache"]["bypassed"] >= 1
    assert len(read_output(project / "o")) == 800


def test_cache_needs_a_per_record_function(project: Path) -> None:
    from torchx_datapipes import batched

    @batched
    def upper(recs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        return recs

    with pytest.raises(ValueError, match="per-record"):
        run_op("transform", str(project / "data"), project / "o", "--cache", "memory://", fn=upper)
    with pytest.raises(ValueError, match="per-record"):  # the Python API refuses it before packaging
        api.transform(upper, input=str(project / "data"), output=str(project / "o"), cache="memory://")
    with pytest.raises(TypeError, match="URL string"):
        api.transform(lambda r: r, input=str(project / "data"), output=str(project / "o"), cache=object())


@pytest.mark.parametrize(
    "url, match",
    [("nosuch://x", "unknown cache scheme"), ("redis://h:1/0?colour=red", "unknown option 'colour'")],
)
def test_bad_cache_url_refused_before_launch(project: Path, url: str, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        transform(fn="counted.py:clean", input=str(project / "data"), output=str(project / "o"), cache=url)


def _load(project: Path) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"counted_{uuid.uuid4().hex}", project / "counted.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.clean


@pytest.mark.parametrize(
    "a, b",
    [
        ({"x": float("nan")}, {"x": None}),  # orjson writes NaN as null
        ({"x": float("inf")}, {"x": None}),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}),  # the function may see the key order
        ({"d": datetime.date(2020, 1, 2)}, {"d": "2020-01-02"}),
        ({"x": 1}, {"x": 1.0}),
        ({"x": 1}, {"x": True}),
        ({"x": 0.0}, {"x": -0.0}),
        ({"x": 2**70}, {"x": str(2**70)}),
        ({"b": b"ab"}, {"b": "ab"}),
    ],
)
def test_different_records_never_share_a_cache_key(a: Dict[str, Any], b: Dict[str, Any]) -> None:
    assert record_bytes(a) != record_bytes(b)
    assert record_bytes(a) == record_bytes(dict(a))  # and the same record always gets the same key
