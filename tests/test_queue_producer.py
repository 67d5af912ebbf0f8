"""The transform op with a queue --output, in-process (``runner.main``) and through the component's checks."""

import os
from pathlib import Path
from typing import Any, Dict, List

import pytest
from queue_testutil import BROKERS, Worker, cleanup, fresh_url
from tdp_testutil import make_dataset, run_op

from torchx_datapipes import components
from torchx_datapipes.appdef import InvalidArgumentError
from torchx_datapipes.errors import OutputExistsError
from torchx_datapipes.queue import GroupConsumer, open_queue
from torchx_datapipes.runner.queue_output import public


def double(r: Dict[str, Any]) -> Dict[str, Any]:
    return {**r, "x2": r["x"] * 2}


FAIL_MARK = "TDP_QUEUE_TEST_FAIL_AT"


def fail_once(r: Dict[str, Any]) -> Dict[str, Any]:
    """Raises on the record whose id is $TDP_QUEUE_TEST_FAIL_AT (a producer crash mid-unit)."""
    if str(r["id"]) == os.environ.get(FAIL_MARK):
        raise RuntimeError("producer crashed")
    return r


def consume_all(url: str, n: int = 2) -> List[GroupConsumer]:
    consumers = [GroupConsumer(open_queue(url), "train") for _ in range(n)]
    workers = [Worker(lambda c=c: [r for r in c]) for c in consumers]
    for w in workers:
        w.start()
    for c, w in zip(consumers, workers):
        c.records_seen = w.get(120)  # type: ignore[attr-defined]
    return consumers


@pytest.mark.parametrize("kind", sorted(BROKERS))
def test_transform_publishes_every_record_once_and_commits_to_state(kind: str, tmp_path: Path) -> None:
    recs = make_dataset(tmp_path / "d", [300, 200, 50])
    url = fresh_url(kind, batch=64, block_s=0.05)
    m = run_op("transform", str(tmp_path / "d"), tmp_path / "unused", "--output", url, "--state",
               str(tmp_path / "state"), fn=double)  # fmt: skip
    assert m["records_out"] == 550 and (tmp_path / "state" / "_SUCCESS").exists()
    assert m["output"] == public(url) and "guest" not in m["output"] and m["queue"]["messages"] >= 550 // 64
    consumers = consume_all(url)
    got = [r for c in consumers for r in c.records_seen]  # type: ignore[attr-defined]
    assert sorted(r["id"] for r in got) == [r["id"] for r in recs]
    assert all(r["x2"] == r["x"] * 2 for r in got)
    with pytest.raises(OutputExistsError, match="_SUCCESS exists"):  # a relaunch publishes nothing twice
        run_op("transform", str(tmp_path / "d"), tmp_path / "unused", "--output", url, "--state",
               str(tmp_path / "state"), fn=double)  # fmt: skip
    cleanup(url)


def test_a_relaunch_after_a_crash_skips_committed_units_and_drops_partial_copies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_dataset(tmp_path / "d", [400, 300, 200])  # units: largest first, so part-2 is claimed last
    url = fresh_url("redis", batch=25, block_s=0.05)
    state = tmp_path / "state"
    args = ["--output", url, "--state", str(state), "--num_workers", "1", "--batch_size", "50"]
    monkeypatch.setenv(FAIL_MARK, "850")  # record 150 of the last unit: 6 messages of it went out
    with pytest.raises(Exception, match="producer crashed"):
        run_op("transform", str(tmp_path / "d"), tmp_path / "u", *args, fn=fail_once)
    with open_queue(url) as b:
        published = b.backlog()
    assert published == 400 // 25 + 300 // 25 + 150 // 25
    monkeypatch.delenv(FAIL_MARK)
    m = run_op("transform", str(tmp_path / "d"), tmp_path / "u", *args, fn=fail_once)
    assert m["records_out"] == 900
    with open_queue(url) as b:  # only the cut-off unit again (8 messages; the end marker is in the log)
        assert b.backlog() - published == 200 // 25
    consumers = consume_all(url)
    ids = sorted(r["id"] for c in consumers for r in c.records_seen)  # type: ignore[attr-defined]
    assert ids == list(range(900))
    assert sum(c.stats.duplicates for c in consumers) == 150  # the first attempt's 6 messages
    cleanup(url)


def test_component_checks_a_queue_output_before_launch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    make_dataset(tmp_path / "d", [10])
    (tmp_path / "f.py").write_text("def f(r):\n    return r\n")
    url = "redis://127.0.0.1:6379/0?stream=tdpt_component"
    with pytest.raises(InvalidArgumentError, match="--state DIR_OR_URL is required"):
        components.transform(fn="f.py:f", input="d", output=url)
    bad = "redis://user:s3cret@127.0.0.1:1/0?stream=s&timeout=0.5"
    with pytest.raises(InvalidArgumentError) as e:
        components.transform(fn="f.py:f", input="d", output=bad, state="st")
    assert "s3cret" not in str(e.value) and "***@127.0.0.1:1" in str(e.value)
    assert "cannot be reached" in str(e.value) and "Fix:" in str(e.value)
    with pytest.raises(InvalidArgumentError, match="applies to a queue --output"):
        components.transform(fn="f.py:f", input="d", output="out", state="st")
    app = components.transform(
        fn="f.py:f", input="d", output="redis://:pw123@127.0.0.1:6379/0?stream=tdpt_component", state="st"
    )
    cmd = " ".join(app.roles[0].args)
    assert "pw123" not in cmd and "password_file=" in cmd and f"--state {tmp_path / 'st'}" in cmd
    assert app.metadata["torchx_datapipes/output"] == str(tmp_path / "st")
