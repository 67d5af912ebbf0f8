"""Item 10: a cache password never reaches a command line, ``--dryrun`` output or an error message."""

import json
import shlex
import stat
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
from cache_servers import Server, free_port, start_redis
from tdp_testutil import make_dataset, read_output, run_op, run_torchx

from torchx_datapipes import components
from torchx_datapipes.appdef import InvalidArgumentError
from torchx_datapipes.kinds import FnKind
from torchx_datapipes.runner.memo import Memo
from torchx_datapipes.secrets import mask_url, public_url, resolve, split_credentials

PW = "S3cr3t-pw_7781"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    make_dataset(tmp_path / "data", [4, 3])
    (tmp_path / "t.py").write_text("def f(r):\n    return {**r, 'seen': True}\n")
    return tmp_path


def _cache_arg(cmd: str) -> str:
    words = shlex.split(cmd)
    return words[words.index("--cache") + 1]


def _messages(e: BaseException) -> List[str]:
    out: List[str] = []
    cur: Any = e
    while cur is not None:
        out.append(str(cur))
        cur = cur.__cause__ or cur.__context__
    return out


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///abs/dir/c.db?namespace=demo",
        "sqlite:///abs/c.db",
        "memory://",
        "redis://h:6379/0?hmac_key_env=TDP_CACHE_KEY",  # without a trust option it gets ?hmac_key_file=
    ],
)
def test_a_url_without_a_password_reaches_the_runner_unchanged(project: Path, url: str) -> None:
    """make demo's sqlite:///ABS cache URL once lost its '//' on the way to the command line."""
    app = components.transform(fn="t.py:f", input="data/*.jsonl", output="out", cache=url)
    assert _cache_arg(app.roles[0].args[-1]) == url


@pytest.mark.parametrize("userinfo", [f":{PW}", f"alice:{PW}"])
def test_appdef_carries_no_secret(project: Path, userinfo: str) -> None:
    url = f"redis://{userinfo}@127.0.0.1:6399/0?namespace=n"
    app = components.transform(fn="t.py:f", input="data/*.jsonl", output="out", cache=url)
    role = app.roles[0]
    assert PW not in repr(app) and PW not in " ".join(role.args) and PW not in json.dumps(role.env)
    cache = _cache_arg(role.args[-1])
    assert cache.startswith("redis://127.0.0.1:6399/0?namespace=n&password_file=/"), cache
    cred = Path(cache.split("password_file=")[1].split("&")[0])
    assert stat.S_IMODE(cred.stat().st_mode) == 0o600 and PW in cred.read_text()
    assert resolve(cache).split("&hmac_key_file=")[0] == f"redis://{userinfo}@127.0.0.1:6399/0?namespace=n"


def test_dryrun_output_has_no_password(project: Path) -> None:
    res = run_torchx(
        ["run", "--dryrun", "-s", "local_cwd", "torchx_datapipes.components:transform", "--fn", "t.py:f",
         "--input", "data/*.jsonl", "--output", "out", "--cache", f"redis://:{PW}@127.0.0.1:6399/0"],
        cwd=project, timeout=120,
    )  # fmt: skip
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "password_file=" in out and PW not in out


@pytest.mark.parametrize(
    "url, match",
    [
        (f"redis://:{PW}@127.0.0.1:6399/0?bogus=1", "unknown option 'bogus'"),
        (f"nosuch://:{PW}@h/0", "unknown cache scheme"),
        (f"redis://:{PW}@h:1/0?password_env=X", "both an inline password"),
        (f"redis://:{PW}@h:1/0?ttl=soon", "ttl='soon' is not valid"),
    ],
)
def test_client_errors_mask_the_password(project: Path, url: str, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match) as info:
        components.transform(fn="t.py:f", input="data/*.jsonl", output="out", cache=url)
    assert all(PW not in m for m in _messages(info.value)), _messages(info.value)


def test_remote_artifact_store_refuses_an_inline_password(project: Path) -> None:
    with pytest.raises(ValueError, match="password_env=NAME") as info:
        public_url(f"redis://:{PW}@h:1/0", "s3://bucket/artifacts")
    assert PW not in str(info.value)


def test_runner_errors_mask_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TDP_TEST_PW", PW)
    with pytest.raises(ValueError) as info:
        Memo("redis://127.0.0.1:1/0?password_env=TDP_TEST_PW&max_items=3", "a" * 64, FnKind.RECORD, "f")
    assert "max_items" in str(info.value) and all(PW not in m for m in _messages(info.value))
    monkeypatch.delenv("TDP_TEST_PW")
    with pytest.raises(ValueError, match="TDP_TEST_PW .* is not set in the job"):
        resolve("redis://127.0.0.1:1/0?password_env=TDP_TEST_PW")


def test_mask_and_split() -> None:
    text = f"failed: redis://alice:{PW}@h:1/0 and rediss://:{PW}@x/1 and memory://"
    masked = mask_url(text)
    assert PW not in masked and "redis://***@h:1/0" in masked and "memory://" in masked
    assert split_credentials(f"redis://alice:{PW}@h:1/0?a=1") == ("redis://h:1/0?a=1", "alice", PW)
    assert public_url("redis://h:1/0?password_env=REDIS_PW", "/tmp") == "redis://h:1/0?password_env=REDIS_PW"
    with pytest.raises(ValueError, match="not an environment variable name"):
        public_url("redis://h:1/0?password_env=1-bad", "/tmp")


@pytest.fixture
def locked_redis() -> Iterator[Server]:
    server = start_redis("--requirepass", PW, port=free_port())
    try:
        yield server
    finally:
        server.cleanup()


def _seen(r: Dict[str, Any]) -> Dict[str, Any]:
    return {**r, "seen": True}


def _run(project: Path, out: str, cache: str) -> Dict[str, Any]:
    return run_op("transform", str(project / "data"), project / out, "--cache", cache, fn=_seen)


def test_password_reaches_redis_from_a_credentials_file(project: Path, locked_redis: Server) -> None:
    url = f"redis://:{PW}@{locked_redis.address}/0?namespace=file"
    app = components.transform(fn="t.py:f", input="data/*.jsonl", output="out", cache=url)
    cache = _cache_arg(app.roles[0].args[-1])
    assert PW not in cache
    first = _run(project, "o1", cache)
    second = _run(project, "o2", cache)
    assert first["cache"]["misses"] == 7 and first["cache"]["errors"] == 0, first["cache"]
    assert second["cache"]["hits"] == 7 and second["cache"]["misses"] == 0, second["cache"]
    assert len(read_output(project / "o2")) == 7
    assert PW not in (project / "o2/_SUCCESS").read_text()


def test_password_reaches_redis_from_password_env(
    project: Path, locked_redis: Server, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cache = f"redis://{locked_redis.address}/0?namespace=env&password_env=TDP_TEST_REDIS_PW"
    app = components.transform(fn="t.py:f", input="data/*.jsonl", output="out", cache=cache)
    # only the variable's name travels (and the path of the HMAC key file: tests/test_cache_signing.py)
    assert _cache_arg(app.roles[0].args[-1]).startswith(cache + "&hmac_key_file=")
    monkeypatch.setenv("TDP_TEST_REDIS_PW", PW)
    assert _run(project, "o1", cache)["cache"]["misses"] == 7
    assert _run(project, "o2", cache)["cache"]["hits"] == 7
    wrong = "Wr0ng-pw_5514"
    monkeypatch.setenv("TDP_TEST_REDIS_PW", wrong)  # a wrong password: the cache errors, the job computes
    with caplog.at_level("WARNING", logger="torchx_datapipes.cache"):
        m = _run(project, "o3", cache)
    assert m["cache"]["hits"] == 0 and m["cache"]["errors"] > 0 and len(read_output(project / "o3")) == 7
    assert wrong not in (project / "o3/_SUCCESS").read_text()
    assert "failed, treated as a miss" in caplog.text and wrong not in caplog.text, caplog.text
