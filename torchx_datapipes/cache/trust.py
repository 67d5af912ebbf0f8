"""Which pickled values a cache unpickles: its trust.

Unpickling runs code, so a pickled value is only loaded under one of these trusts:

* ``pickle`` (``?pickle=true``, ``open_cache(url, pickle=True)``): every pickle the store holds
  is trusted -- whoever can write to the store can run code in this process. The default of
  ``memory://`` only (only this process writes).
* ``hmac``: a pickle is stored with an HMAC-SHA256 over the whole value under a key, and only a
  value whose HMAC verifies is unpickled. The key comes from ``hmac_key_file=PATH`` (a file only
  its owner can read), ``hmac_key_env=NAME`` (an environment variable, like ``password_env``), or
  ``hmac_key=`` in Python. The default of ``sqlite://`` (a key file ``<db>.key`` made 0600 next to
  the database) and of the shared servers, ``redis://`` and ``memcached://``: the per-user key file
  :func:`user_key_path` (``~/.config/torchx_datapipes/cache-hmac.key``, made 0600 on first use),
  so every process, rank and rerun of one user shares the values, and a value planted by anyone
  else who can write to the server is a miss. ``transform --cache`` ships that key to the job
  (:mod:`torchx_datapipes.cache.shipping`).
* ``none`` (``?pickle=false``): nothing is ever unpickled; values that need pickle are not stored.

Tensors, arrays and JSON-able values never need pickle (:mod:`torchx_datapipes.cache.safe`).
"""

import hashlib
import hmac
import os
import secrets
from typing import Any, Dict, Iterable, Optional, Union

from torchx_datapipes.cache.errors import CacheTrustError
from torchx_datapipes.cache.private import check_file, create_private, make_dirs

MAC_BYTES = 32
MIN_KEY_BYTES = 16
MODES = ("pickle", "hmac", "none")
USER_KEY = ("torchx_datapipes", "cache-hmac.key")  # under $XDG_CONFIG_HOME (default ~/.config)


def user_key_path() -> str:
    """This user's cache HMAC key file: ``$XDG_CONFIG_HOME/torchx_datapipes/cache-hmac.key``.

    ``XDG_CONFIG_HOME`` defaults to ``~/.config``; a relative value is ignored, as the XDG base
    directory spec says. Resolved in each process (a job on another machine has its own home).
    """
    base = os.environ.get("XDG_CONFIG_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, *USER_KEY)


class Trust:
    """A cache's trust (see the module doc). Picklable; a key read from a file or the
    environment is read again in each process and never pickled."""

    user_key = False  # a Trust pickled before the per-user key existed has no such attribute

    def __init__(
        self,
        mode: str,
        key: Optional[bytes] = None,
        key_file: Optional[str] = None,
        key_env: Optional[str] = None,
        create_key: bool = False,
        user_key: bool = False,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"cache trust must be one of {MODES}, got {mode!r}")
        sources = sum(x is not None for x in (key, key_file, key_env)) + user_key
        if mode == "hmac" and sources != 1:
            raise ValueError("an HMAC trust needs exactly one of hmac_key, hmac_key_file, hmac_key_env")
        self.mode, self.key_file, self.key_env, self.create_key = mode, key_file, key_env, create_key
        self.user_key = user_key
        self._key = key
        if key is not None and len(key) < MIN_KEY_BYTES:
            raise ValueError(f"hmac_key must be at least {MIN_KEY_BYTES} bytes, got {len(key)}")

    @classmethod
    def resolve(
        cls,
        pickle: Optional[bool],
        hmac_key: Union[bytes, str, None],
        hmac_key_file: Optional[str],
        hmac_key_env: Optional[str],
        default: "Trust",
    ) -> "Trust":
        """The trust the options ask for (``default`` when none is given)."""
        given = [n for n, v in (("hmac_key", hmac_key), ("hmac_key_file", hmac_key_file)) if v is not None]
        given += ["hmac_key_env"] if hmac_key_env is not None else []
        if len(given) > 1 or (given and pickle is not None):
            both = given + (["pickle"] if pickle is not None else [])
            raise ValueError(f"cache options {' and '.join(both)} exclude each other: give one trust")
        if hmac_key is not None:
            return cls("hmac", key=hmac_key.encode() if isinstance(hmac_key, str) else bytes(hmac_key))
        if hmac_key_file is not None:
            return cls("hmac", key_file=os.path.abspath(os.path.expanduser(hmac_key_file)))
        if hmac_key_env is not None:
            return cls("hmac", key_env=hmac_key_env)
        if pickle is not None:
            return cls("pickle" if pickle else "none")
        return default

    @classmethod
    def user(cls) -> "Trust":
        """HMAC under this user's key file :func:`user_key_path` (made on first use): the default of
        the shared servers. The path is resolved in each process that reads the key."""
        return cls("hmac", user_key=True, create_key=True)

    def describe(self) -> str:
        if self.mode == "hmac":
            return f"HMAC-signed pickles only (key {self._source()})"
        return {"pickle": "every pickle (pickle=true)", "none": "no pickles (pickle=false)"}[self.mode]

    def _source(self) -> str:
        if self.user_key:
            return f"your per-user file {user_key_path()}"
        return f"file {self.key_file}" if self.key_file else f"${self.key_env}" if self.key_env else "given"

    def key(self) -> bytes:
        """The HMAC key (read once per process; a key file is checked and, for sqlite and the
        per-user key, created)."""
        if self._key is None:
            self._key = self._load()
        return self._key

    def _load(self) -> bytes:
        if self.key_env is not None:
            value = os.environ.get(self.key_env)
            if value is None:
                raise ValueError(
                    f"cache option hmac_key_env={self.key_env}: the environment variable {self.key_env} is"
                    f" not set; export it (e.g. {self.key_env}=$(python -c 'import secrets;"
                    " print(secrets.token_hex(32))')) in the job's environment"
                )
            return self._checked(value.encode(), f"${self.key_env}")
        if self.user_key:
            return self._load_user_key(user_key_path())
        assert self.key_file is not None
        return self._load_file(self.key_file)

    def _load_file(self, path: str) -> bytes:
        if self.create_key and check_file(path, "cache key file", secret=True) is None:
            create_private(path, secrets.token_hex(32).encode() + b"\n")  # 32 random bytes, as hex
        if check_file(path, "cache key file", secret=True) is None:
            raise ValueError(
                f"cache option hmac_key_file={path}: the file does not exist; create it with"
                f" python -c 'import secrets; print(secrets.token_hex(32))' > {path}; chmod 600 {path}"
            )
        with open(path, "rb") as f:
            return self._checked(f.read().strip(), path)

    def _load_user_key(self, path: str) -> bytes:
        """The per-user key file, made (directories 0700, file 0600) on first use."""
        try:
            make_dirs(os.path.dirname(path))
            return self._load_file(path)
        except CacheTrustError:
            raise
        except OSError as e:
            raise ValueError(
                f"cannot create or read the per-user cache HMAC key {path} ({type(e).__name__}: {e}), which"
                " signs the pickles of redis:// and memcached:// caches; set XDG_CONFIG_HOME to a"
                " directory you can write, or give the cache a trust: ?hmac_key_env=NAME or"
                " ?hmac_key_file=PATH (a key shared by your jobs), ?pickle=false (store no pickles) or"
                " ?pickle=true (trust whoever can write to the server)"
            ) from e

    @staticmethod
    def _checked(key: bytes, where: str) -> bytes:
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(
                f"the cache HMAC key in {where} has {len(key)} bytes; use at least {MIN_KEY_BYTES}"
            )
        return key

    def mac(self, parts: Iterable[Any]) -> bytes:
        h = hmac.new(self.key(), digestmod=hashlib.sha256)
        for p in parts:
            h.update(p)
        return h.digest()

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        if self.key_file is not None or self.key_env is not None or self.user_key:
            state["_key"] = None  # read again where it is unpickled, never carried along
        return state

    def __repr__(self) -> str:
        return f"Trust({self.describe()})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Trust) and self.__getstate__() == other.__getstate__()

    __hash__ = None  # type: ignore[assignment]
