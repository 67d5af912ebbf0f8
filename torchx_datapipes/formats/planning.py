"""Planning: cut the input files into units, by format. Runs once (rank 0); the plan is shared.

Units are decided by the input alone, never by the world size, and assigned to
(rank, worker) with DistributedSampler's strided rule without padding, so every record is
read exactly once.
"""

import dataclasses
import posixpath
from collections import Counter
from typing import Dict, List, Optional, Sequence, Tuple, Union

from torchx_datapipes.errors import InputError
from torchx_datapipes.formats.base import DEFAULT_MAX_RECORD_MB, PlannedFile, record_bytes, stem_of
from torchx_datapipes.formats.extensions import detect_format, resolve
from torchx_datapipes.formats.registry import input_class
from torchx_datapipes.formats.spec import decode_spec
from torchx_datapipes.formats.unit import DEFAULT_UNIT_MB, Unit
from torchx_datapipes.io.fs import InputFile, expand_input_files, split_patterns, stat

PlannedInput = Union[Tuple[str, int], Tuple[str, int, float]]


def plan_units(
    inputs: Sequence[PlannedInput],
    fmt: str = "auto",
    unit_mb: float = DEFAULT_UNIT_MB,
    max_record_mb: float = DEFAULT_MAX_RECORD_MB,
) -> List[Unit]:
    """Cut ``(url, size)`` or ``(url, size, mtime)`` inputs (already sorted) into units.

    ``fmt`` is a format name, ``auto`` (by extension: an unknown one is refused) or a format
    spec with options (``csv?delimiter=%3B&schema=id%3Aint``, see ``registry.encode_spec``).
    Each unit carries the size and modification time planned for its file; the reader reads
    no further and refuses a file that shrank or was replaced since. ``max_record_mb`` is the
    record bound (CSV planning reads blocks up to it).
    """
    name, opts = decode_spec(fmt)
    opts = dataclasses.replace(opts, max_record=record_bytes(max_record_mb))
    if name == "auto":
        check_not_mixed([item[0] for item in inputs])
    target = max(1, int(unit_mb * 1024 * 1024))
    by_format: Dict[str, List[PlannedFile]] = {}
    order: Dict[str, int] = {}
    for item in inputs:
        path, size = item[0], item[1]
        mtime = item[2] if len(item) > 2 else stat(path)[1]  # type: ignore[misc]
        order[path] = len(order)
        by_format.setdefault(resolve(path, name), []).append((path, size, mtime))
    units: List[Unit] = []
    for fname, files in by_format.items():
        units.extend(input_class(fname)().plan(files, target, opts))
    units.sort(key=lambda u: (order[u.path], u.start, u.row_group))
    return [dataclasses.replace(u, index=i) for i, u in enumerate(units)]


def assign(units: Sequence[Unit], slot: int, slots: int) -> List[Unit]:
    """DistributedSampler's strided assignment without padding: ``units[slot::slots]``."""
    if not 0 <= slot < slots:
        raise ValueError(f"slot {slot} out of range for {slots} slots")
    return list(units[slot::slots])


def check_input_formats(
    patterns: Union[str, Sequence[str]], fmt: str = "auto", files: Optional[Sequence[InputFile]] = None
) -> None:
    """On the client, before launch: every local input file has a format (``ValueError`` naming it).

    Remote inputs the client cannot list are left to the runner, which refuses them when planning.
    ``files``: the local inputs already listed by another client check (else they are listed here).
    """
    name, _ = decode_spec(fmt)
    if name != "auto":
        input_class(name)
        return
    if files is None:
        pats = split_patterns(patterns) if isinstance(patterns, str) else list(patterns)
        local = [p for p in pats if "://" not in p or p.startswith("file://")]
        try:
            files = expand_input_files(local) if local else []
        except FileNotFoundError:
            return  # missing inputs are refused by the input checks, with their own message
    check_not_mixed([f.url for f in files])
    for f in files:
        resolve(f.url, name)


MEDIA = "files"


def _ext(path: str) -> str:
    base = posixpath.basename(stem_of(path)).lower()
    dot = base.find(".", 1)
    return base[dot:] if dot > 0 else "(no extension)"


def check_not_mixed(paths: Sequence[str]) -> None:
    """Under ``--format auto``, refuse media files (images, audio, ...) mixed with other files.

    A directory of images that also holds a ``README.txt`` would hand the README's lines to the
    image function as records, and an ``.xml`` beside them would be refused with a hint to read it
    as JSON Lines; neither is what the user meant. The error lists the extensions found and the
    two fixes.
    """
    found = {p: detect_format(p) for p in paths}
    if MEDIA not in found.values() or all(f == MEDIA for f in found.values()):
        return
    media = Counter(_ext(p) for p, f in found.items() if f == MEDIA)
    other = Counter(f"{_ext(p)} ({f or 'no format'})" for p, f in found.items() if f != MEDIA)
    example = next(p for p, f in found.items() if f != MEDIA)
    top = sorted(media.items(), key=lambda kv: (-kv[1], kv[0]))
    glob_ext = top[0][0]
    where = posixpath.dirname(example) or "."

    def listing(c: "Counter[str]") -> str:
        return ", ".join(f"{k} x{n}" for k, n in sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))

    raise InputError(
        f"the input mixes media files ({listing(media)}) with other files ({listing(other)}, e.g."
        f" {example}). Pass --format files to read every file as bytes, or select the media with a"
        f" glob such as '{where}/*{glob_ext}'"
    )
