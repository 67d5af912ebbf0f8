"""Files only this user can write: the checks behind the sqlite cache and the HMAC key files.

A cache file that another user can write is a cache that user can fill, so the sqlite backend
and the key files refuse one. A path is accepted when

* every directory above it is owned by this user or root and is not group/other-writable,
  except a sticky world-writable directory such as ``/tmp`` or ``/dev/shm`` (others can create
  files there but cannot replace ours);
* the directory holding the file is owned by this user (or root) and is not group/other-writable,
  or is such a sticky directory, and then only the file itself (and sqlite's ``-wal``, ``-shm``,
  ``-journal`` files) must be ours;
* the file and those siblings, where they exist, are owned by this user and not group/other-writable
  (key files: not readable by others either).

Symlinks on the way must be owned by this user or root. New directories are made 0700 and new
files 0600.
"""

import os
import stat
import tempfile
from typing import Iterable, Optional

from torchx_datapipes.cache.errors import CacheTrustError

_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def default_sqlite_path() -> str:
    """The private per-user default: ``/dev/shm/tdp-<uid>/cache.db`` (the temp dir without /dev/shm)."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    return os.path.join(base, f"tdp-{os.getuid()}", "cache.db")


def _who(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (KeyError, ImportError):
        return f"uid {uid}"


def _describe(st: os.stat_result) -> str:
    return f"owner {_who(st.st_uid)}, mode {stat.filemode(st.st_mode)} ({stat.S_IMODE(st.st_mode):04o})"


def _refuse(what: str, path: str, st: os.stat_result, why: str, fix: str) -> CacheTrustError:
    return CacheTrustError(
        f"{what} {path!r} ({_describe(st)}) {why}: another user could plant values that this process"
        f" would load. Fix: {fix}"
    )


def _trusted_owner(uid: int) -> bool:
    return uid in (os.getuid(), 0)


def check_dirs(directory: str, what: str) -> bool:
    """Check ``directory`` and every directory above it; True if ``directory`` is a sticky shared one.

    Directories that do not exist yet are skipped (they will be created 0700 by us).
    """
    me = os.getuid()
    parts = os.path.abspath(directory).split(os.sep)
    for i in range(2, len(parts) + 1):  # the symlinks on the given path
        p = os.sep.join(parts[:i])
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            break
        if stat.S_ISLNK(st.st_mode) and not _trusted_owner(st.st_uid):
            raise _refuse(
                f"the {what}'s path has a symlink", p, st, "owned by another user", "use a real path"
            )
    real = os.path.realpath(directory)
    shared = False
    chain = [real]
    while os.path.dirname(chain[-1]) != chain[-1]:
        chain.append(os.path.dirname(chain[-1]))
    for p in chain:
        try:
            st = os.stat(p)
        except FileNotFoundError:
            continue
        sticky = bool(st.st_mode & stat.S_ISVTX)
        if not _trusted_owner(st.st_uid):
            raise _refuse(
                f"the directory of the {what}",
                p,
                st,
                f"is owned by another user (this process runs as uid {me})",
                "use a directory you own, e.g. the default sqlite:// (/dev/shm/tdp-<uid>/cache.db, 0700)",
            )
        if st.st_mode & _OTHERS_WRITE and not sticky:
            raise _refuse(
                f"the directory of the {what}",
                p,
                st,
                "can be written by group or other users",
                f"chmod go-w {p!r}, or use a private directory (mode 0700)",
            )
        if p == real and st.st_mode & _OTHERS_WRITE:
            shared = True
    return shared


def check_file(path: str, what: str, secret: bool = False) -> Optional[os.stat_result]:
    """Refuse a file another user owns or can write (or, if ``secret``, read); None if it is absent."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        if not _trusted_owner(st.st_uid):
            raise _refuse(what, path, st, "is a symlink owned by another user", f"remove it (rm {path!r})")
        # our own link: the file it points to (and its directories) must pass the checks
        real = os.path.realpath(path)
        if not os.path.exists(real):
            raise _refuse(what, path, st, "is a dangling symlink", f"remove it (rm {path!r})")
        check_dirs(os.path.dirname(real), what)
        st = os.stat(real)
    bad = (stat.S_IRWXG | stat.S_IRWXO) if secret else _OTHERS_WRITE
    if st.st_uid != os.getuid():
        raise _refuse(
            what, path, st, "is owned by another user", f"remove it (rm {path!r}) or use another path"
        )
    if st.st_mode & bad:
        reach = "read or written" if secret else "written"
        raise _refuse(what, path, st, f"can be {reach} by group or other users", f"chmod 600 {path!r}")
    return st


def make_dirs(directory: str) -> None:
    """Create the missing directories of ``directory``, each with mode 0700 (whatever the umask)."""
    missing = []
    d = os.path.abspath(directory)
    while not os.path.isdir(d) and os.path.dirname(d) != d:
        missing.append(d)
        d = os.path.dirname(d)
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:  # another process made it first: check_dirs judges it
            continue
        os.chmod(d, 0o700)  # a umask may have taken our own bits away


def create_private(path: str, content: bytes = b"") -> bool:
    """Create ``path`` mode 0600 with ``content`` if it does not exist; True if this call created it.

    The content is written to a temporary file first and linked into place, so a concurrent
    reader sees the whole file or none.
    """
    if not content:
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
            return True
        except FileExistsError:
            return False
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tdp-key-")  # mode 0600
    try:
        os.write(fd, content)
        os.fsync(fd)
        os.close(fd)
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)


def check_sqlite_files(path: str, shared_dir: bool, siblings: Iterable[str]) -> None:
    """Check a sqlite db and its siblings; create the db 0600 (and in a shared dir its siblings)."""
    names = [path, *(path + s for s in siblings)]
    for p in names:
        check_file(p, "sqlite cache file")
    create_private(path)
    if shared_dir:  # others can create files here: hold sqlite's sibling names ourselves, 0600
        for p in names[1:3]:
            create_private(p)
    for p in names:
        check_file(p, "sqlite cache file")
