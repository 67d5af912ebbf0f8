"""Which pickled values a cache unpickles: its trust.

Unpickling runs code, so a pickled value is only loaded under one of these trusts:

* ``pickle`` (``?pickle=true``, ``open_cache(url, pickle=True)``): every pickle the store holds
  is trusted -- whoever can write to the store can run code in this process. The default of
  ``memory://`` (only this process writes) and of ``redis://`` / ``memcached://`` (a shared server
  is trusted by whoever can write to it, as always documented).
* ``hmac``: a pickle is stored with an HMAC-SHA256 over the whole value under a per-cache key, and
  only a value whose HMAC verifies is unpickled. The key comes from ``hmac_key_file=PATH`` (a file
  only its owner can read), ``hmac_key_env=NAME`` (an environment variable, like
  ``password_env``), or ``hmac_key=`` in Python. The default of ``sqlite://``: a key file
  ``<db>.key`` made 0600 next to the database.
* ``none`` (``?pickle=false``): nothing is ever unpickled; values that need pickle are not stored.

Tensors, arrays and JSON-able values never need pickle (:mod:`torchx_datapipes.cache.safe`).
"""

import hashlib
import hmac
import os
import secrets
from typing import Any, Dict, Iterable, Optional, Union

from torchx_datapipes.cache.private import check_file, create_private

MAC_BYTES = 32
MIN_KEY_BYTES = 16
MODES = ("pickle", "hmac", "none")


class Trust:
    """A cache's trust (see the module doc). Picklable; a key read from a file or the
    environment is read again in each process and never pickled."""

    def __init__(
        self,
        mode: str,
        key: Optional[bytes] = None,
        key_file: Optional[str] = None,
        key_env: Optional[str] = None,
        create_key: bool = False,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"cache trust must be one of {MODES}, got {mode!r}")
        if mode == "hmac" and (key is None) == (key_file is None) == (key_env is None):
            raise ValueError("an HMAC trust needs exactly one of hmac_key, hmac_key_file, hmac_key_env")
        self.mode, self.key_file, self.key_env, self.create_key = mode, key_file, key_env, create_key
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

    def describe(self) -> str:
        if self.mode == "hmac":
            src = (
                f"file {self.key_file}" if self.key_file else f"${self.key_env}" if self.key_env else "given"
            )
            return f"HMAC-signed pickles only (key {src})"
        return {"pickle": "every pickle (pickle=true)", "none": "no pickles (pickle=false)"}[self.mode]

    def key(self) -> bytes:
        """The HMAC key (read once per process; a key file is checked and, for sqlite, created)."""
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
        assert self.key_file is not None
        if self.create_key and check_file(self.key_file, "cache key file", secret=True) is None:
            create_private(self.key_file, secrets.token_hex(32).encode() + b"\n")
        if check_file(self.key_file, "cache key file", secret=True) is None:
            raise ValueError(
                f"cache option hmac_key_file={self.key_file}: the file does not exist; create it with"
                f" python -c 'import secrets; print(secrets.token_hex(32))' > {self.key_file};"
                f" chmod 600 {self.key_file}"
            )
        with open(self.key_file, "rb") as f:
            return self._checked(f.read().strip(), self.key_file)

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
        if self.key_file is not None or self.key_env is not None:
            state["_key"] = None  # read again where it is unpickled, never carried along
        return state

    def __repr__(self) -> str:
        return f"Trust({self.describe()})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Trust) and self.__getstate__() == other.__getstate__()

    __hash__ = None  # type: ignore[assignment]
