"""The cache's trust boundary (issue 23, item 5): a value planted by another user never runs code.

The attack: ``sqlite:///dev/shm/tdp.db`` in a world-writable directory, a database owned by
``nobody`` with mode 0666 holding a pickle whose ``__reduce__`` runs a command; ``get`` ran it.
Here the command is ``open(MARKER, "w")``: the marker file must never appear. The tests run as
root and emulate ``nobody`` with ``chown 65534``.
"""

import datetime
import logging
import os
import pickle
import sqlite3
import stat
import uuid
from pathlib import Path
from typing import Any, Iterator, List

import numpy as np
import pytest
import torch
from cache_servers import require_shared

from torchx_datapipes.cache import CacheValueError, open_cache
from torchx_datapipes.cache.codec import _HEAD, OLD_MAGIC, SAFE, TensorCodec, UnsafeValueError
from torchx_datapipes.cache.errors import CacheTrustError
from torchx_datapipes.cache.keys import stored_key
from torchx_datapipes.cache.private import default_sqlite_path
from torchx_datapipes.cache.trust import Trust

NOBODY = 65534
LOGGER = "torchx_datapipes.cache"
_SCHEMA = "CREATE TABLE IF NOT EXISTS kv (k TEXT PRIMARY KEY, v BLOB NOT NULL, expires REAL)"


class Evil:
    """A pickle that creates ``marker`` when it is loaded."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> Any:
        return (open, (self.marker, "w"))


def planted_values(marker: Path) -> List[bytes]:
    """Every shape a planted pickle can take: bare, the old frame, the new frame unsigned / wrongly signed."""
    bare = pickle.dumps(Evil(marker), protocol=5)
    old = OLD_MAGIC + (0).to_bytes(4, "little") + len(bare).to_bytes(8, "little") + bare
    unsigned = TensorCodec(Trust("pickle")).encode(Evil(marker))
    wrong_key = TensorCodec(Trust("hmac", key=b"k" * 32)).encode(Evil(marker))
    return [bare, old, unsigned, wrong_key]


def plant(db: Path, marker: Path, keys: List[str], namespace: str = "default") -> None:
    """Write a database the way another user would: one planted pickle per key."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute(_SCHEMA)
    for key, value in zip(keys, planted_values(marker) * len(keys)):
        conn.execute(
            "INSERT OR REPLACE INTO kv VALUES (?, ?, NULL)", (stored_key(f"{namespace}:0:", key), value)
        )
    conn.close()


@pytest.fixture()
def shm_like(tmp_path: Path) -> Iterator[Path]:
    """A world-writable sticky directory owned by root, like /dev/shm and /tmp."""
    d = tmp_path / "shm"
    d.mkdir()
    d.chmod(0o1777)
    yield d


def test_a_database_planted_by_another_user_is_refused_and_never_loaded(
    shm_like: Path, tmp_path: Path
) -> None:
    """The reported attack, as a user hits it: open_cache, a holder, and transform --cache."""
    marker = tmp_path / "PWNED"
    db = shm_like / "tdp.db"
    plant(db, marker, ["k"])
    os.chown(db, NOBODY, NOBODY)
    db.chmod(0o666)
    with pytest.raises(CacheTrustError) as e:
        open_cache(f"sqlite://{db}").get("k")
    msg = str(e.value)
    for part in (repr(str(db)), "uid 65534", "0666", "owned by another user", "Fix:"):
        assert part in msg, msg
    assert isinstance(e.value, PermissionError)

    from torchx_datapipes.cache.holders import CachedDataset

    with pytest.raises(CacheTrustError, match="owned by another user"):
        CachedDataset([1, 2, 3], f"sqlite://{db}")[0]
    # the database is ours but mode 0666: anyone can write it
    os.chown(db, 0, 0)
    with pytest.raises(CacheTrustError, match="can be written by group or other users.*chmod 600"):
        open_cache(f"sqlite://{db}")
    assert not marker.exists()


def test_transform_cache_on_a_planted_database_refuses_before_any_record(
    shm_like: Path, tmp_path: Path
) -> None:
    from tdp_testutil import make_dataset, run_op

    marker = tmp_path / "PWNED"
    db = shm_like / "tdp.db"
    plant(db, marker, ["k"])
    os.chown(db, NOBODY, NOBODY)
    db.chmod(0o666)
    make_dataset(tmp_path / "data", [20])
    with pytest.raises(CacheTrustError, match="tdp.db"):
        run_op("transform", str(tmp_path / "data"), tmp_path / "out", "--cache", f"sqlite://{db}", fn=_upper)
    assert not marker.exists()


def _upper(rec: Any) -> Any:
    return rec


@pytest.mark.parametrize("sibling", ["-wal", "-shm", "-journal"])
def test_a_planted_sibling_file_in_a_shared_directory_is_refused(
    shm_like: Path, tmp_path: Path, sibling: str
) -> None:
    db = shm_like / "cache.db"
    c = open_cache(f"sqlite://{db}")  # ours, 0600, in a sticky shared directory: accepted
    assert c.set("k", 1) and c.get("k") == 1
    c.close()
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    planted = Path(str(db) + sibling)
    planted.unlink(missing_ok=True)
    planted.write_bytes(b"")
    os.chown(planted, NOBODY, NOBODY)
    with pytest.raises(CacheTrustError, match=f"{sibling}'.*owned by another user"):
        open_cache(f"sqlite://{db}")


def test_directories_another_user_can_write_are_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    with pytest.raises(CacheTrustError, match=r"directory .*theirs'.*owned by another user"):
        open_cache(f"sqlite://{theirs}/cache.db")
    with pytest.raises(CacheTrustError, match=r"theirs'.*owned by another user"):  # also as an ancestor
        open_cache(f"sqlite://{theirs}/sub/cache.db")
    assert not (theirs / "sub").exists()  # nothing made inside a refused directory
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)  # world-writable without the sticky bit: others can replace our files
    with pytest.raises(CacheTrustError, match=r"open'.*0777.*group or other users.*chmod go-w"):
        open_cache(f"sqlite://{open_dir}/cache.db")
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    os.lchown(link, NOBODY, NOBODY)
    with pytest.raises(CacheTrustError, match="symlink"):
        open_cache(f"sqlite://{link}/cache.db")


def test_a_planted_pickle_in_our_own_database_is_a_miss_never_unpickled(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    marker = tmp_path / "PWNED"
    db = tmp_path / "private" / "cache.db"
    c = open_cache(f"sqlite://{db}")  # the default trust: pickles signed with <db>.key
    keys = ["bare", "old-frame", "unsigned", "other-key"]
    plant(db, marker, keys)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert c.get_many(keys) == {}
        assert c.get_or_compute("bare", lambda: "recomputed") == "recomputed"
    st = c.stats()
    assert (st.untrusted, st.hits, st.misses, st.decode_errors, st.errors) == (4, 0, 5, 0, 0)
    warnings = [r.getMessage() for r in caplog.records if "not unpickled" in r.getMessage()]
    assert len(warnings) == 1, warnings  # logged once
    assert "HMAC" in warnings[0] and "stats().untrusted" in warnings[0]
    assert c.get("bare") == "recomputed"
    assert not marker.exists()
    for trust in ({"pickle": False}, {"hmac_key": b"x" * 32}):  # other trusts load no planted pickle either
        plant(db, marker, keys)
        other = open_cache(f"sqlite://{db}", **trust)
        assert other.get_many(keys) == {} and other.stats().untrusted == 4
    with pytest.raises(CacheValueError, match="not unpickled"):
        plant(db, marker, ["k"])
        open_cache(f"sqlite://{db}", strict=True).get("k")
    assert not marker.exists()


def test_sqlite_default_is_private_and_signs_what_it_pickles(tmp_path: Path) -> None:
    db = tmp_path / "new" / "dir" / "cache.db"
    c = open_cache(f"sqlite://{db}")
    when = datetime.datetime(2026, 12, 2, 3, 40)
    assert c.set("when", {"t": when}) and c.get("when") == {"t": when}  # pickled, signed, verified
    assert stat.S_IMODE(db.parent.stat().st_mode) == 0o700
    for f in (db, Path(f"{db}.key"), Path(f"{db}-wal"), Path(f"{db}-shm")):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    # another key (another cache, or a planted value) does not verify; the same key file does
    assert open_cache(f"sqlite://{db}", hmac_key=b"y" * 32).get("when") is None
    c.set("when", {"t": when})
    assert open_cache(f"sqlite://{db}").get("when") == {"t": when}
    key = Path(f"{db}.key")
    key.chmod(0o644)  # a key others can read lets them sign
    with pytest.raises(CacheTrustError, match=r"\.key'.*read or written by group or other.*chmod 600"):
        open_cache(f"sqlite://{db}")


def test_the_default_url_is_a_private_per_user_file() -> None:
    path = default_sqlite_path()
    assert path.endswith(f"/tdp-{os.getuid()}/cache.db")
    existed, dir_existed = os.path.exists(path), os.path.isdir(os.path.dirname(path))
    ns = "t-" + uuid.uuid4().hex[:12]
    c = open_cache(f"sqlite://?namespace={ns}")
    try:
        assert c.describe() == f"sqlite://{path}" and open_cache("sqlite:///").describe() == c.describe()
        assert c.set("k", [1, 2]) and c.get("k") == [1, 2]
        assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    finally:
        c.clear()
        c.close()
        if not existed:
            for suffix in ("", ".key", "-wal", "-shm"):
                Path(path + suffix).unlink(missing_ok=True)
        if not dir_existed:
            os.rmdir(os.path.dirname(path))


def test_pickle_false_stores_safe_values_only_and_names_the_option(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    c = open_cache(f"sqlite://{tmp_path}/c.db?pickle=false")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert c.set("ok", {"t": torch.arange(3), "label": 1}) is True
        assert c.set("date", datetime.date(2020, 1, 2)) is False
        assert c.set("date2", [datetime.date(2020, 1, 3)]) is False
    assert c.stats().encode_errors == 2 and c.get("date") is None
    warnings = [r.getMessage() for r in caplog.records if "needs pickle" in r.getMessage()]
    assert len(warnings) == 1 and "datetime.date" in warnings[0], warnings
    assert "?pickle=true" in warnings[0] and "hmac_key_file" in warnings[0]
    strict = open_cache(f"sqlite://{tmp_path}/c.db", pickle=False, strict=True)
    with pytest.raises(CacheValueError, match="datetime.date.*pickle=true"):
        strict.set("date", datetime.date(2020, 1, 2))
    with pytest.raises(UnsafeValueError, match="datetime.date"):
        TensorCodec().encode(datetime.date(2020, 1, 2))  # a bare codec trusts no pickle


SAFE_VALUES: List[Any] = [
    None,
    True,
    0,
    -(2**63),
    2**64 - 1,
    2**100,
    -(2**70),
    1.5,
    -0.0,
    float("inf"),
    float("-inf"),
    "é\x00",
    b"\x00\xff",
    (),
    (1, (2, "3")),
    [1, [2.5, None]],
    {"a": 1, "b": [True]},
    {1: "int key", (1, 2): "tuple key", None: 0},
    {"__tdp__": "not a tag", "x": b"y"},
    [{"__tdp__": "tuple", "items": [1]}],  # a dict that looks like a tag stays a dict
    np.float32(1.5),
    np.int64(-3),
    np.arange(6, dtype=">i4").reshape(2, 3),
    np.array(["ab", "c"]),
    np.datetime64("2020-01-02", "D"),
    {"img": torch.randn(2, 3), "label": 3, "ids": (torch.arange(4), np.ones(2, np.float16))},
]


def test_tensors_arrays_and_json_able_values_are_stored_without_pickle() -> None:
    codec = TensorCodec()  # no trust at all: these never need it
    for value in SAFE_VALUES:
        data = codec.encode(value)
        assert _HEAD.unpack_from(data)[1] == SAFE, value
        back = codec.decode(data)
        assert type(back) is type(value) and _same(back, value), (value, back)
    nan = codec.decode(codec.encode([float("nan")]))[0]
    assert nan != nan


def _same(a: Any, b: Any) -> bool:
    if isinstance(b, torch.Tensor):
        return a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(b, (np.ndarray, np.generic)):
        return a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(type(x) is type(y) and _same(x, y) for x, y in zip(a, b))
    if isinstance(b, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in b)
    return bool(a == b) and str(a) == str(b)  # -0.0 vs 0.0


def test_forged_safe_frames_are_corrupt_not_code(tmp_path: Path) -> None:
    codec = TensorCodec()
    good = codec.encode({"t": torch.arange(4)})
    for old, new in ((b'"int64"', b'"load" '), (b"[4]", b"[5]")):
        with pytest.raises(ValueError):
            codec.decode(good.replace(old, new))


@pytest.mark.parametrize("backend", ["redis", "memcached"])
def test_shared_servers_trust_the_server_only_with_pickle_true_and_hmac_narrows_it(
    backend: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    require_shared(backend)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # the per-user key of the default
    url = {"redis": "redis://127.0.0.1:6379/0", "memcached": "memcached://127.0.0.1:11211"}[backend]
    ns = "t-" + uuid.uuid4().hex[:12]
    when = datetime.date(2020, 1, 2)
    assert open_cache(url).trust == Trust.user()  # the default: pickles signed with the per-user key
    server = open_cache(f"{url}?namespace={ns}&pickle=true")  # documented: whoever can write it is trusted
    try:
        assert server.trust.mode == "pickle"
        assert server.set("d", when) and server.get("d") == when
        monkeypatch.setenv("TDP_TEST_KEY", "s" * 32)
        signed = open_cache(f"{url}?namespace={ns}&hmac_key_env=TDP_TEST_KEY")
        assert signed.get("d") is None and signed.stats().untrusted == 1  # unsigned: never unpickled
        marker = tmp_path / "PWNED"
        server.set("evil", Evil(marker))
        assert signed.get("evil") is None and not marker.exists()
        assert signed.set("d", when) and signed.get("d") == when
        keyfile = tmp_path / "key"
        keyfile.write_text("s" * 32 + "\n")
        keyfile.chmod(0o600)
        assert open_cache(f"{url}?namespace={ns}&hmac_key_file={keyfile}").get("d") == when
        with pytest.raises(ValueError, match="never goes in a URL"):
            open_cache(f"{url}?hmac_key=abc")
        with pytest.raises(ValueError, match="exclude each other"):
            open_cache(f"{url}?pickle=true&hmac_key_env=TDP_TEST_KEY")
    finally:
        server.clear()


def test_symlinks_to_the_database_are_checked_through(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "real.db").write_bytes(b"")
    os.chown(theirs, NOBODY, NOBODY)
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    (mine / "cache.db").symlink_to(theirs / "real.db")  # our own link, into a directory of another user
    with pytest.raises(CacheTrustError, match=r"theirs'.*owned by another user"):
        open_cache(f"sqlite://{mine}/cache.db")
    (mine / "ok.db").symlink_to(mine / "target.db")
    (mine / "target.db").write_bytes(b"")
    c = open_cache(f"sqlite://{mine}/ok.db")
    assert c.set("k", 1) and c.get("k") == 1


def test_trust_options_and_older_values(tmp_path: Path) -> None:
    old_mask = os.umask(0)  # new directories are still 0700 each
    try:
        c = open_cache(f"sqlite://{tmp_path}/a/b/c/cache.db?codec=pickle")
    finally:
        os.umask(old_mask)
    for d in ("a", "a/b", "a/b/c"):
        assert stat.S_IMODE((tmp_path / d).stat().st_mode) == 0o700, d
    assert c.set("k", {"v": 1}) and c.get("k") == {"v": 1}  # codec=pickle: signed with the key file too
    with pytest.raises(ValueError, match=r"hmac_key_file=.*does not exist.*chmod 600"):
        open_cache("memory://", hmac_key_file=str(tmp_path / "missing.key"))
    with pytest.raises(ValueError, match="at least 16 bytes"):
        open_cache("memory://", hmac_key=b"short")
    with pytest.raises(ValueError, match="TDP_NO_SUCH_KEY is not set"):
        open_cache("memory://?hmac_key_env=TDP_NO_SUCH_KEY")
    # a value written before the trust model (frame TDC1) still loads where pickles are trusted
    bare = pickle.dumps({"v": datetime.date(2020, 1, 2)}, protocol=5)
    old = OLD_MAGIC + (0).to_bytes(4, "little") + len(bare).to_bytes(8, "little") + bare
    assert TensorCodec(Trust("pickle")).decode(old) == {"v": datetime.date(2020, 1, 2)}
    assert TensorCodec(Trust("pickle")).decode(pickle.dumps(7)) == 7  # and PickleCodec's bare pickles


def test_a_key_from_a_file_is_never_pickled_with_the_cache(tmp_path: Path) -> None:
    c = open_cache(f"sqlite://{tmp_path}/c.db")
    c.set("d", datetime.date(2020, 1, 2))
    key = Path(f"{tmp_path}/c.db.key").read_bytes().strip()
    data = pickle.dumps(c)
    assert key not in data
    c2 = pickle.loads(data)  # as a spawned DataLoader worker gets it: reads the key file again
    assert c2.get("d") == datetime.date(2020, 1, 2)
