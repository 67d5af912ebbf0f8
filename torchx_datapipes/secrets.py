"""Cache credentials never travel on a command line: how they are split off, stored and restored.

A ``--cache`` URL with a password (``redis://:pw@host:6379/0`` or ``redis://user:pw@host``)
would otherwise be printed by ``torchx run --dryrun`` (twice), be visible in ``ps`` for
torchrun and every rank, and end up in error messages. So:

* the client (the component) removes the ``user:password@`` part before anything else sees the
  URL, writes it to a credentials file readable by the owner only (mode 0600) next to the local
  artifact store (``{store}/_secrets/``), and puts only ``?password_file=PATH`` on the command
  line. The AppDef's env is printed by ``--dryrun`` too, so the secret is not put there either.
  For a remote artifact store (a cluster), an inline password is refused: use
* ``?password_env=NAME``: the password is read from the environment variable ``NAME`` of the job
  (on local schedulers the job inherits the client's environment; on Kubernetes/Slurm map a
  secret to that variable). Only the name is on the command line.

The runner (``runner/memo.py``) rebuilds the full URL with :func:`resolve` just before opening
the cache. :func:`mask_url` hides any ``user:password@`` left in a message.

The cache's HMAC key travels the same way (:mod:`torchx_datapipes.cache.shipping`): written by
:func:`write_secret` to a 0600 file under the local artifact store, named on the command line by
``?hmac_key_file=PATH`` (:func:`with_option`); refused for a remote store (:func:`is_remote_store`).
"""

import hashlib
import json
import os
import re
import urllib.parse
from typing import Dict, Optional, Tuple

PASSWORD_ENV = "password_env"
PASSWORD_FILE = "password_file"
SECRET_OPTIONS = (PASSWORD_ENV, PASSWORD_FILE)
MASK = "***"

_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/?#@\s'\"]*@")


def mask_url(text: str) -> str:
    """``text`` with the userinfo of every URL in it replaced by ``***``."""
    return _USERINFO.sub(lambda m: f"{m.group(1)}{MASK}@", text)


def _query_without(query: str, names: Tuple[str, ...]) -> Tuple[str, Dict[str, str]]:
    kept, taken = [], {}
    for name, value in urllib.parse.parse_qsl(query, keep_blank_values=True):
        if name in names:
            taken[name] = value
        else:
            kept.append((name, value))
    return urllib.parse.urlencode(kept), taken


def strip_options(url: str, names: Tuple[str, ...]) -> str:
    """``url`` without the query options ``names``."""
    parts = urllib.parse.urlsplit(url)
    return _with_query(parts, parts.netloc, _query_without(parts.query, names)[0])


def _with_query(parts: urllib.parse.SplitResult, netloc: str, query: str) -> str:
    # Not urlunsplit: it drops the "//" of an empty netloc (sqlite:///abs/path -> sqlite:/abs/path).
    url = f"{parts.scheme}://{netloc}{parts.path}"
    return url + (f"?{query}" if query else "") + (f"#{parts.fragment}" if parts.fragment else "")


def _host(parts: urllib.parse.SplitResult) -> str:
    return parts.netloc.rpartition("@")[2]


def split_credentials(url: str) -> Tuple[str, Optional[str], Optional[str]]:
    """``(url without userinfo, username, password)``; username/password are None when absent."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url, None, None
    user = urllib.parse.unquote(parts.username) if parts.username else None
    password = urllib.parse.unquote(parts.password) if parts.password is not None else None
    return _with_query(parts, _host(parts), parts.query), user, password


def public_url(url: str, store: str) -> str:
    """The client side: the URL to put on the command line (no secret in it).

    An inline ``user:password@`` goes to a 0600 credentials file under the local ``store``
    (``?password_file=`` then names it); ``?password_env=NAME`` passes through as it is.
    """
    parts = urllib.parse.urlsplit(url)
    _, given = _query_without(parts.query, SECRET_OPTIONS)
    if PASSWORD_ENV in given and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", given[PASSWORD_ENV]):
        raise ValueError(
            f"--cache {mask_url(url)}: password_env={given[PASSWORD_ENV]!r} is not an environment variable"
            " name; use e.g. ?password_env=REDIS_PASSWORD"
        )
    bare, user, password = split_credentials(url)
    if password is None and user is None:
        return url
    if given:
        raise ValueError(
            f"--cache {mask_url(url)} has both an inline password and ?{'/'.join(given)}; keep one"
        )
    if is_remote_store(store):
        raise ValueError(
            f"--cache {mask_url(url)} has an inline password, but artifact_store {store} is remote, so the"
            " job could not read a local credentials file; give the job the password in an environment"
            " variable (e.g. a Kubernetes secret) and use ?password_env=NAME instead"
        )
    secret = json.dumps({"username": user, "password": password}, sort_keys=True)
    name = hashlib.sha256(f"{bare}\n{secret}".encode()).hexdigest()[:32]
    return with_option(bare, PASSWORD_FILE, write_secret(store, f"{name}.json", secret.encode()))


def is_remote_store(store: str) -> bool:
    """Whether the artifact store is remote (``s3://...``): the job cannot read a file written here."""
    return "://" in store and not store.startswith("file://")


def with_option(url: str, name: str, value: str) -> str:
    """``url`` with ``name=value`` appended to its query."""
    parts = urllib.parse.urlsplit(url)
    query = "&".join(q for q in (parts.query, urllib.parse.urlencode({name: value}, safe="/")) if q)
    return _with_query(parts, parts.netloc, query)


def write_secret(store: str, name: str, secret: bytes) -> str:
    """Write ``secret`` to ``{store}/_secrets/name`` (mode 0600, directory 0700); its path."""
    folder = os.path.join(os.path.abspath(store.removeprefix("file://")), "_secrets")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    path = os.path.join(folder, name)
    tmp = f"{path}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(secret)
    os.replace(tmp, path)
    return path


def resolve(url: str) -> str:
    """The runner side: the full URL, with the password from ``password_env`` / ``password_file``."""
    parts = urllib.parse.urlsplit(url)
    query, given = _query_without(parts.query, SECRET_OPTIONS)
    if not given:
        return url
    user = urllib.parse.unquote(parts.username) if parts.username else None
    if PASSWORD_FILE in given:
        path = given[PASSWORD_FILE]
        try:
            with open(path) as f:
                creds = json.load(f)
        except (OSError, ValueError) as e:
            raise ValueError(
                f"cache credentials file {path} (from --cache {mask_url(url)}) cannot be read: {e};"
                " it is written by the client next to the local artifact store"
            ) from e
        user, password = creds.get("username") or user, creds.get("password")
    else:
        name = given[PASSWORD_ENV]
        if name not in os.environ:
            raise ValueError(
                f"--cache {mask_url(url)}: environment variable {name} (password_env) is not set in the job;"
                " set it where the job runs (local schedulers inherit the client's environment)"
            )
        password = os.environ[name]
    auth = urllib.parse.quote(user or "", safe="")
    if password is not None:
        auth += ":" + urllib.parse.quote(password, safe="")
    return _with_query(parts, f"{auth}@{_host(parts)}", query)
