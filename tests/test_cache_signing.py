"""Issue 32 item 10: a pickle planted in a shared cache server never runs code.

``redis://`` and ``memcached://`` used to default to ``pickle=true``: anyone who could write to
the server could plant a pickle whose ``__reduce__`` runs a command in every job that reads it.
Now they sign pickles with the per-user HMAC key (``$XDG_CONFIG_HOME/torchx_datapipes/cache-hmac.key``)
by default: a value not signed with it is a miss, counted in ``stats().untrusted``, never unpickled.
The key is shared by the processes and reruns of one user (checked in fresh interpreters) and
travels to a job as a 0600 file named on the command line, never as the key itself.

The planted pickle here creates a marker file when it is loaded; the marker must never appear.
Redis is the shared server (6379); memcached is a private server on a free port per module.
Every test points ``XDG_CONFIG_HOME`` at its own temp dir, so no test touches the real home.
"""

import datetime
import json
import pickle
import shlex
import stat
import textwrap
import uuid
from pathlib import Path
from typing import Any, Iterator, List, Tuple

import pytest
from cache_servers import cache_url
from pickle_safety import run_fresh
from tdp_testutil import make_dataset, run_torchx

from torchx_datapipes import components
from torchx_datapipes.appdef import InvalidArgumentError
from torchx_datapipes.cache import Cache, CacheTrustError, open_cache
from torchx_datapipes.cache.codec import _HEAD, OLD_MAGIC, SIGNED, TensorCodec
from torchx_datapipes.cache.keys import stored_key
from torchx_datapipes.cache.providers.memcached import GEN_BYTES
from torchx_datapipes.cache.shipping import public_cache_url
from torchx_datapipes.cache.trust import Trust, user_key_path
from torchx_datapipes.kinds import FnKind
from torchx_datapipes.runner.memo import Memo

LOGGER = "torchx_datapipes.cache"
WHEN = {"t": datetime.date(2020, 1, 2)}  # needs pickle: stored signed under the default trust


class Evil:
    """A pickle that creates ``marker`` when it is loaded (``io.open(marker, "w")``)."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> Any:
        return (open, (self.marker, "w"))


def planted_values(marker: Path) -> List[Tuple[str, bytes]]:
    """Every shape a planted pickle can take: bare, the old frame, the new frame unsigned and
    signed with another key (another user's, or the attacker's)."""
    bare = pickle.dumps(Evil(marker), protocol=5)
    old = OLD_MAGIC + (0).to_bytes(4, "little") + len(bare).to_bytes(8, "little") + bare
    unsigned = TensorCodec(Trust("pickle")).encode(Evil(marker))
    other_key = TensorCodec(Trust("hmac", key=b"k" * 32)).encode(Evil(marker))
    return [("bare", bare), ("old-frame", old), ("unsigned", unsigned), ("other-key", other_key)]


@pytest.fixture(autouse=True)
def config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own XDG_CONFIG_HOME: the per-user key is made there, never in the real home."""
    home = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    return home


@pytest.fixture(params=["redis", "memcached"])
def server(request: pytest.FixtureRequest) -> Iterator[Tuple[str, str]]:
    """(kind, URL with a fresh namespace) of a real server; the namespace is cleared afterwards."""
    kind = request.param
    if kind == "redis":
        address = request.getfixturevalue("shared_redis")
    else:
        address = request.getfixturevalue("memcached_server").address
    url = f"{cache_url(kind, address)}?namespace=sig-{uuid.uuid4().hex[:12]}"
    yield kind, url
    open_cache(url, pickle=False).clear()


def _plant(kind: str, url: str, key: str, value: bytes) -> None:
    """Write ``value`` under ``key`` with the server's own client, as anyone who reaches it can."""
    c = open_cache(url, pickle=False)
    skey = stored_key(c._prefix(), key)
    if kind == "redis":
        import redis

        redis.Redis.from_url(url.split("?")[0]).set(skey, value)
        return
    from pymemcache.client.base import Client

    host, port = url.removeprefix("memcached://").split("?")[0].rsplit(":", 1)
    client = Client((host, int(port)))
    gen = client.get(f"{c.namespace}:{c.version}:gen") or b"0" * GEN_BYTES  # the cache's generation token
    client.set(skey, gen + value, noreply=False)
    client.close()


def test_a_planted_pickle_is_a_miss_counted_and_never_unpickled(
    server: Tuple[str, str], tmp_path: Path, caplog: pytest.LogCaptureFixture, config_home: Path
) -> None:
    kind, url = server
    marker = tmp_path / "PWNED"
    victim = open_cache(url)  # the default trust of a shared server
    assert victim.trust.mode == "hmac" and victim.trust.user_key
    planted = planted_values(marker)
    for key, value in planted:
        _plant(kind, url, key, value)
    keys = [k for k, _ in planted]
    with caplog.at_level("WARNING", logger=LOGGER):
        assert victim.get_many(keys) == {}
    st = victim.stats()
    assert (st.untrusted, st.hits, st.misses, st.decode_errors, st.errors) == (4, 0, 4, 0, 0), st
    assert not marker.exists()
    warnings = [r.getMessage() for r in caplog.records if "not unpickled" in r.getMessage()]
    assert len(warnings) == 1 and "per-user file" in warnings[0] and "stats().untrusted" in warnings[0]
    assert open_cache(url, codec="bytes").get_many(keys) == {}  # the planted values were deleted
    # recomputed, then stored signed with this user's key: another cache object of the user hits
    assert victim.get_or_compute("bare", lambda: WHEN) == WHEN
    raw = open_cache(url, codec="bytes").get("bare")
    assert raw is not None and _HEAD.unpack_from(raw)[1] == SIGNED
    assert open_cache(url).get("bare") == WHEN
    assert (config_home / "torchx_datapipes" / "cache-hmac.key").exists()

    # the control: the same plant under ?pickle=true (documented: trust whoever can write the
    # server) does run, so the test above would have seen it
    control = tmp_path / "CONTROL"
    _plant(kind, url, "control", planted_values(control)[0][1])
    loaded = open_cache(f"{url}&pickle=true").get("control")
    loaded.close()  # the file object open() returned
    assert control.exists() and not marker.exists()


CHILD = textwrap.dedent(
    """
    import datetime, json
    from torchx_datapipes.cache import open_cache

    url, mode = {url!r}, {mode!r}
    c = open_cache(url)
    value = {{"t": datetime.date(2020, 1, 2)}}
    out = {{"stored": c.set("when", value)}} if mode == "write" else {{"same": c.get("when") == value}}
    print(json.dumps({{**out, **c.stats().as_dict()}}))
    """
)


def _child(url: str, mode: str, cwd: Path) -> Any:
    res = run_fresh(CHILD.format(url=url, mode=mode), cwd=cwd)
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_fresh_processes_of_one_user_share_signed_pickles(
    server: Tuple[str, str], tmp_path: Path, config_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, url = server
    wrote = _child(url, "write", tmp_path)
    assert wrote["stored"] and wrote["sets"] == 1
    key_file = config_home / "torchx_datapipes" / "cache-hmac.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700
    key = key_file.read_bytes()
    assert len(key.strip()) == 64  # 32 random bytes as hex

    read = _child(url, "read", tmp_path)  # another interpreter, the same user: same key, a hit
    assert read["same"] and (read["hits"], read["misses"], read["untrusted"]) == (1, 0, 0), read
    assert key_file.read_bytes() == key  # made once, then reused

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "other-user"))  # another user's key
    other = _child(url, "read", tmp_path)
    assert not other["same"] and (other["hits"], other["untrusted"]) == (0, 1), other
    assert (tmp_path / "other-user" / "torchx_datapipes" / "cache-hmac.key").read_bytes() != key


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    make_dataset(tmp_path / "data", [3])
    (tmp_path / "t.py").write_text("def f(r):\n    return r\n")
    return tmp_path


def _cache_arg(cmd: str) -> str:
    words = shlex.split(cmd)
    return words[words.index("--cache") + 1]


@pytest.mark.parametrize("base", ["redis://127.0.0.1:6379/0", "memcached://127.0.0.1:11211"])
def test_the_command_line_names_a_key_file_never_the_key(project: Path, config_home: Path, base: str) -> None:
    url = f"{base}?namespace=n"
    app = components.transform(fn="t.py:f", input="data/*.jsonl", output="out", cache=url)
    role = app.roles[0]
    key = (config_home / "torchx_datapipes" / "cache-hmac.key").read_bytes().strip()  # made by the client
    assert key.decode() not in repr(app) + " ".join(role.args) + json.dumps(role.env)
    cache = _cache_arg(role.args[-1])
    assert cache.startswith(f"{url}&hmac_key_file=/"), cache
    shipped = Path(cache.split("hmac_key_file=")[1])
    assert shipped.parent == project / ".tdp" / "artifacts" / "_secrets"
    assert (
        stat.S_IMODE(shipped.stat().st_mode) == 0o600 and stat.S_IMODE(shipped.parent.stat().st_mode) == 0o700
    )
    assert shipped.read_bytes().strip() == key
    again = components.transform(fn="t.py:f", input="data/*.jsonl", output="o2", cache=url)
    assert _cache_arg(again.roles[0].args[-1]) == cache  # every job of the user names the same file


def test_the_shipped_key_is_the_users_key(project: Path, shared_redis: str) -> None:
    """The job (the runner's Memo, with the shipped file) and in-process code share signed values."""
    url = f"redis://{shared_redis}/0?namespace=sig-{uuid.uuid4().hex[:12]}"
    app = components.transform(fn="t.py:f", input="data/*.jsonl", output="out", cache=url)
    job_url = _cache_arg(app.roles[0].args[-1])
    job: Cache = Memo(job_url, "a" * 64, FnKind.RECORD, "f").cache
    try:
        assert job.trust.key_file is not None and job.trust.key_file.startswith(str(project))
        assert job.set("when", WHEN)
        here = open_cache(url)  # in-process, the default: the per-user key file
        assert here.get("when") == WHEN and here.stats().untrusted == 0
        assert here.set("back", WHEN) and job.get("back") == WHEN and job.stats().untrusted == 0
    finally:
        job.clear()


@pytest.mark.parametrize(
    "url",
    [
        "redis://h:1/0?pickle=true",
        "redis://h:1/0?pickle=false",
        "redis://h:1/0?hmac_key_env=TDP_CACHE_KEY",
        "memcached://h:1?hmac_key_file=/etc/tdp/cache.key",
        "sqlite:///abs/c.db",
        "memory://",
    ],
)
def test_an_explicit_trust_or_a_private_backend_ships_no_key(project: Path, url: str) -> None:
    app = components.transform(fn="t.py:f", input="data/*.jsonl", output="out", cache=url)
    assert _cache_arg(app.roles[0].args[-1]) == url
    assert public_cache_url(url, "s3://bucket/artifacts") == url  # a remote store is fine then


def test_a_remote_artifact_store_needs_an_explicit_trust(project: Path, config_home: Path) -> None:
    with pytest.raises(ValueError) as info:
        public_cache_url("redis://h:1/0?namespace=n&password_env=X", "s3://bucket/artifacts")
    msg = str(info.value)
    for part in (
        "s3://bucket/artifacts is remote",
        "?hmac_key_env=NAME",
        "?hmac_key_file=PATH",
        "?pickle=true",
    ):
        assert part in msg, msg
    with pytest.raises(InvalidArgumentError, match="hmac_key_env='1-bad' is not an environment variable"):
        components.transform(
            fn="t.py:f", input="data/*.jsonl", output="out", cache="redis://h:1/0?hmac_key_env=1-bad"
        )


def test_dryrun_output_names_the_key_file_only(project: Path, config_home: Path) -> None:
    res = run_torchx(
        ["run", "--dryrun", "-s", "local_cwd", "torchx_datapipes.components:transform", "--fn", "t.py:f",
         "--input", "data/*.jsonl", "--output", "out", "--cache", "redis://127.0.0.1:6379/0?namespace=n"],
        cwd=project, env={"XDG_CONFIG_HOME": str(config_home)}, timeout=120,
    )  # fmt: skip
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    key = (config_home / "torchx_datapipes" / "cache-hmac.key").read_text().strip()
    assert "hmac_key_file=" in out and key not in out


def test_the_user_key_file_location_and_its_checks(
    tmp_path: Path, config_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert user_key_path() == str(config_home / "torchx_datapipes" / "cache-hmac.key")
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/dir")  # ignored, as the XDG spec says
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert user_key_path() == str(tmp_path / "home" / ".config" / "torchx_datapipes" / "cache-hmac.key")

    monkeypatch.setenv("XDG_CONFIG_HOME", str(config_home))
    c = open_cache("redis://127.0.0.1:1/0")  # the key is made when the cache opens, with no server
    key = Path(user_key_path()).read_bytes().strip()
    assert key not in pickle.dumps(c)  # read again in each process, never carried along
    assert c.trust.describe().endswith(f"your per-user file {user_key_path()})")
    Path(user_key_path()).chmod(0o640)  # a key others can read lets them sign
    with pytest.raises(
        CacheTrustError, match=r"cache-hmac\.key'.*read or written by group or other.*chmod 600"
    ):
        open_cache("memcached://127.0.0.1:1")

    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "file" / "sub"))  # no directory can be made there
    with pytest.raises(
        ValueError, match=r"cannot create or read the per-user cache HMAC key.*XDG_CONFIG_HOME.*pickle=true"
    ):
        open_cache("redis://127.0.0.1:1/0")
    assert open_cache("redis://127.0.0.1:1/0?pickle=false").trust.mode == "none"  # the way out works
