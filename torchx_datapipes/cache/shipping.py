"""The client side of ``--cache``: credentials and the per-user HMAC key never go on a command line.

A shared server (``redis://``, ``memcached://``: a backend with ``shared_store``) signs the pickles
it stores with the user's key file :func:`~torchx_datapipes.cache.trust.user_key_path`, so that
the job, its ranks and workers, and every rerun share values, while a pickle planted by anyone
else who can write to the server is a miss. The job may run where that file is not (a container,
another machine), so the client ships it the way it ships a password
(:mod:`torchx_datapipes.secrets`): a copy goes to a 0600 file under the local artifact store and
only ``?hmac_key_file=PATH`` goes on the command line (never the key; the AppDef's env is printed
by ``--dryrun``, so not there either). With a remote artifact store the job could not read that
file, so the user must choose the trust: ``?hmac_key_env=NAME``, ``?hmac_key_file=PATH`` or
``?pickle=true|false``.
"""

import hashlib
import re

from torchx_datapipes.cache.registry import CacheURL, cache_class
from torchx_datapipes.cache.trust import Trust, user_key_path
from torchx_datapipes.secrets import (
    SECRET_OPTIONS,
    is_remote_store,
    mask_url,
    public_url,
    split_credentials,
    strip_options,
    with_option,
    write_secret,
)

HMAC_KEY_FILE = "hmac_key_file"
TRUST_OPTIONS = frozenset({"pickle", HMAC_KEY_FILE, "hmac_key_env"})
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def public_cache_url(url: str, store: str) -> str:
    """The ``--cache`` URL for the command line: the password and the HMAC key moved to 0600 files."""
    spec = CacheURL.parse(strip_options(split_credentials(url)[0], SECRET_OPTIONS))
    env = spec.options.get("hmac_key_env")
    if env is not None and not _ENV_NAME.fullmatch(env):
        raise ValueError(
            f"--cache {mask_url(url)}: hmac_key_env={env!r} is not an environment variable name;"
            " use e.g. ?hmac_key_env=TDP_CACHE_KEY"
        )
    url = public_url(url, store)
    if not cache_class(spec.scheme).shared_store or TRUST_OPTIONS & spec.options.keys():
        return url
    if is_remote_store(store):
        raise ValueError(
            f"--cache {mask_url(url)}: a {spec.scheme}:// cache signs its pickled values with your per-user"
            f" HMAC key ({user_key_path()}), but artifact_store {store} is remote, so the job could not"
            " read a key file written here. Choose the trust: ?hmac_key_env=NAME (the job reads the key"
            " from its environment variable NAME, e.g. a Kubernetes or Slurm secret holding that file's"
            " contents), ?hmac_key_file=PATH (a 0600 key file the job can read), or ?pickle=true (trust"
            " whoever can write to the server; ?pickle=false stores no pickles)"
        )
    return with_option(url, HMAC_KEY_FILE, ship_user_key(store))


def ship_user_key(store: str) -> str:
    """Copy the per-user key (made now if it is new) to a 0600 file under ``store``; its path.

    The file is named by a hash of the key, so every job of the user names the same file and
    a rerun hits what an earlier job stored.
    """
    key = Trust.user().key()
    name = hashlib.sha256(b"torchx_datapipes cache hmac key\n" + key).hexdigest()[:32]
    return write_secret(store, f"cache-{name}.key", key + b"\n")
