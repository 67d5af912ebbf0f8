"""Planning: cut the input files into units, by format. Runs once (rank 0); the plan is shared.

Units are decided by the input alone, never by the world size, and assigned to
(rank, worker) with DistributedSampler's strided rule without padding, so every record is
read exactly once.
"""

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple, Union

from torchx_datapipes.io.fs import InputFile, expand_input_files, split_patterns, stat
from torchx_datapipes.io.inputs.base import DEFAULT_MAX_RECORD_MB, PlannedFile, record_bytes
from torchx_datapipes.io.inputs.registry import decode_spec, format_class, resolve
from torchx_datapipes.io.inputs.unit import DEFAULT_UNIT_MB, Unit

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
        units.extend(format_class(fname)().plan(files, target, opts))
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
        format_class(name)
        return
    if files is None:
        pats = split_patterns(patterns) if isinstance(patterns, str) else list(patterns)
        local = [p for p in pats if "://" not in p or p.startswith("file://")]
        try:
            files = expand_input_files(local) if local else []
        except FileNotFoundError:
            return  # missing inputs are refused by the input checks, with their own message
    for f in files:
        resolve(f.url, name)
