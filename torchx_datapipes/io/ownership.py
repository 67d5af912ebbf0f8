"""What in an output directory the product wrote, and refusing a directory that holds anything else.

``--overwrite`` deletes only entries of ours, and no job writes into a directory holding
entries that are not (a user's ``notes.txt``, ``src/``, or their own ``part-00000.jsonl``):
both refuse, listing a few of those entries and the fix. Entries of ours are:

- always: ``_SUCCESS`` and ``_LEASE`` (regular files), ``_units/``, ``_errors/``, ``_index/``,
  ``_split/``, ``_exchange/`` and ``_dedup/`` (real directories), ``_LEASE.stale-<token>`` and
  ``.tmp-<32 hex>-<name>``;
- in a directory already marked as an output of ours (it holds ``_SUCCESS``, ``_LEASE``, a stale
  lease, or ``_units/``, which a job creates, empty, before it writes any part): parts named
  ``part-NNNNN.<ext>``, the stats and validate files (``stats.json``, ``report.html``,
  ``stats.md``, ``anomalies.json``), and
  split subdirectories holding only parts, ``_index/`` and temp files. A part without its unit's
  commit record is ours there too: a job killed between writing a part and its record leaves one.

A reserved name that is a symlink or of the wrong type (``_errors`` -> elsewhere, a directory
``_SUCCESS``) is refused before anything is written through it.
"""

import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Tuple

from torchx_datapipes.errors import DatapipesError
from torchx_datapipes.io.fs import fs_and_path, is_plain_local, join
from torchx_datapipes.io.layout import (
    DEDUP_DIR,
    ERRORS_DIR,
    EXCHANGE_DIR,
    INDEX_DIR,
    LEASE,
    QUEUE_JOB,
    SPLIT_DIR,
    STALE_LEASE_PREFIX,
    SUCCESS,
    UNITS_DIR,
)

RESERVED_FILES = (SUCCESS, LEASE, QUEUE_JOB)
RESERVED_DIRS = (UNITS_DIR, ERRORS_DIR, INDEX_DIR, SPLIT_DIR, EXCHANGE_DIR, DEDUP_DIR)
STATS_FILES = ("stats.json", "report.html", "stats.md", "anomalies.json")  # stats and validate outputs
_PART = re.compile(r"part-\d{5,}(\.[A-Za-z0-9]+)+")
_TMP = re.compile(r"\.tmp-[0-9a-f]{32}-.+")
_SHOWN = 5


class ForeignOutputError(DatapipesError, FileExistsError):
    """The output directory holds entries this product did not write."""


class ReservedPathError(DatapipesError, OSError):
    """A reserved name of the output is a symlink, or not the kind of entry the layout puts there."""


class OutputNotWritableError(DatapipesError, PermissionError):
    """The output directory cannot be created or written by this user."""


@dataclass
class Scan:
    """One listing of an output directory: our top-level entries and the foreign ones (relative)."""

    output: str
    exists: bool = False
    ours: List[str] = field(default_factory=list)
    foreign: List[str] = field(default_factory=list)


def _kind(info: Dict[str, Any]) -> str:
    if info.get("islink"):
        return "link"
    return str(info.get("type") or "other")


def _ls(fs: Any, path: str) -> List[Tuple[str, str]]:
    """``(name, kind)`` of a directory's entries; kind is file, directory, link or other."""
    out = []
    for info in fs.ls(path, detail=True):
        name = str(info["name"]).rstrip("/").rsplit("/", 1)[-1]
        out.append((name, _kind(info)))
    return sorted(out)


def _always_ours(name: str) -> bool:
    return name.startswith(STALE_LEASE_PREFIX) or bool(_TMP.fullmatch(name))


def _reserved(output: str, name: str, kind: str) -> None:
    """Refuse a reserved name that is not what the layout puts there (before writing through it)."""
    want = "directory" if name in RESERVED_DIRS else "file"
    if kind == want:
        return
    path = join(output, name)
    what = "a symlink" if kind == "link" else "a directory" if kind == "directory" else f"a {kind}"
    if kind == "link":
        try:
            what += f" to {os.readlink(path)}" if is_plain_local(path) else ""
        except OSError:
            pass
    raise ReservedPathError(
        f"{path} is {what}, but the output layout reserves {name} for its own {want}: this job would"
        f" write through it (outside --output) or fail. Remove {path}, or choose another --output"
    )


def scan(output: str) -> Scan:
    """List ``output`` once (a split subdirectory twice) and sort its entries into ours and foreign."""
    fs, root = fs_and_path(output)
    result = Scan(output)
    if not fs.exists(root):
        return result
    if not fs.isdir(root):
        raise ForeignOutputError(
            f"--output {output} is a file, not a directory: choose another --output (a new or empty"
            " directory, or an earlier output of this product)"
        )
    result.exists = True
    entries = _ls(fs, root)
    for name, kind in entries:
        if name in RESERVED_FILES or name in RESERVED_DIRS:
            _reserved(output, name, kind)
    names = {name for name, _ in entries}
    marked = bool(names & {SUCCESS, UNITS_DIR, LEASE}) or any(n.startswith(STALE_LEASE_PREFIX) for n in names)
    for name, kind in entries:
        if name in RESERVED_FILES or name in RESERVED_DIRS or (_always_ours(name) and kind == "file"):
            result.ours.append(name)
        elif marked and kind == "file" and (_PART.fullmatch(name) or name in STATS_FILES):
            result.ours.append(name)
        elif marked and kind == "directory":
            inside = _foreign_in_split_dir(fs, f"{root}/{name}", name)
            (result.foreign.extend(inside) if inside else result.ours.append(name))
        else:
            result.foreign.append(name + ("/" if kind == "directory" else ""))
    return result


def _foreign_in_split_dir(fs: Any, path: str, name: str) -> List[str]:
    """The entries of a would-be split subdirectory that are not ours (empty: it is ours)."""
    foreign = []
    for sub, kind in _ls(fs, path):
        ok = kind == "file" and (_PART.fullmatch(sub) or _always_ours(sub))
        ok = ok or (sub == INDEX_DIR and kind == "directory")
        if not ok:
            foreign.append(f"{name}/{sub}" + ("/" if kind == "directory" else ""))
    return foreign


def check_reserved(output: str) -> None:
    """Refuse reserved names that are symlinks or of the wrong type (before ``_SUCCESS`` is even read)."""
    fs, root = fs_and_path(output)
    if fs.isdir(root):
        for name, kind in _ls(fs, root):
            if name in RESERVED_FILES or name in RESERVED_DIRS:
                _reserved(output, name, kind)


def refuse_foreign(output: str, overwrite: bool = False) -> Scan:
    """Raise unless every entry of ``output`` is ours (or it is absent or empty); return the scan."""
    s = scan(output)
    if s.foreign:
        shown = ", ".join(s.foreign[:_SHOWN]) + (
            f" and {len(s.foreign) - _SHOWN} more" if len(s.foreign) > _SHOWN else ""
        )
        what = "--overwrite True deletes only what this product wrote, so it" if overwrite else "a job"
        raise ForeignOutputError(
            f"--output {output} is not empty and holds {len(s.foreign)} entr"
            f"{'y' if len(s.foreign) == 1 else 'ies'} this product did not write: {shown}. Refusing to"
            f" write there: {what} would mix its parts with them (a file named like a part, part-NNNNN.ext,"
            " would be replaced). Choose another --output (a new or empty directory), or move those"
            " entries out of it"
        )
    return s


def clear_ours(output: str, keep: Tuple[str, ...] = (LEASE,)) -> None:
    """Remove a previous result of ours: ``_SUCCESS`` first, so it never looks complete midway.

    Refuses (deleting nothing) if the directory holds anything we did not write; ``keep`` (the
    running job's lease) stays.
    """
    s = refuse_foreign(output, overwrite=True)
    fs, root = fs_and_path(output)
    if SUCCESS in s.ours:
        fs.rm(f"{root}/{SUCCESS}")
    for name in s.ours:
        if name in keep or name == SUCCESS or name.endswith(f"-{LEASE}"):  # the heartbeat's own temp files
            continue
        try:
            fs.rm(f"{root}/{name}", recursive=True)
        except FileNotFoundError:
            pass


def mark_output(output: str) -> None:
    """Create ``_units/`` before any part, so a relaunch knows the parts here are ours.

    An empty directory on a filesystem that has them; object stores have none, so there the mark is
    the first commit record (a part of a job that failed before it, and released its lease, is refused).
    """
    fs, root = fs_and_path(join(output, UNITS_DIR))
    fs.makedirs(root, exist_ok=True)


def check_writable(output: str) -> None:
    """Refuse a local output this user cannot create or write (read-only directory or filesystem)."""
    path = os.path.abspath(os.path.expanduser(output.removeprefix("file://")))
    probe = path  # the output, else its nearest existing ancestor (which the job would create it in)
    while not os.path.lexists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    fix = "choose another --output (a directory you can write), or fix its permissions"
    what = f"--output {output}" if probe == path else f"--output {output} cannot be created: {probe}"
    if probe != path and not os.path.isdir(probe):
        raise OutputNotWritableError(f"{what} is a file, not a directory; {fix}")
    if os.path.isdir(probe) and not os.access(probe, os.W_OK | os.X_OK):
        why = "a read-only filesystem" if _read_only_fs(probe) else "no write permission for this user"
        raise OutputNotWritableError(f"{what} is not writable ({why}); {fix}")


def _read_only_fs(path: str) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False
