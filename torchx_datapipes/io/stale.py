"""Temporary files of a killed run, removed when the output is taken again (rank 0, under the lease).

An atomic write goes to ``.tmp-<32 hex>-<name>`` beside its final name (``layout.tmp_beside``)
and is renamed or removed; a run killed mid-write leaves it behind (issue 23: a 718 MB temp
part of a job killed on a huge line). The next run that takes the output lease removes every
file of exactly that shape in the output, ours by name, nothing else: no other run of ours can be
writing there while we hold the lease. The lease's own heartbeat files (``...-_LEASE``) are left
to the lease.
"""

import re
import sys
from typing import List, Tuple

from torchx_datapipes.io.fs import fs_and_path
from torchx_datapipes.io.layout import LEASE, TMP_PREFIX

_OURS = re.compile(rf"^{re.escape(TMP_PREFIX)}[0-9a-f]{{32}}-.+$")


def is_stale_tmp(name: str) -> bool:
    """A temporary file of one of our atomic writes (``.tmp-<uuid4 hex>-<name>``), not the lease's."""
    return bool(_OURS.match(name)) and not name.endswith(f"-{LEASE}")


def remove_stale_temps(output: str) -> List[Tuple[str, int]]:
    """Remove our temporary files left in ``output`` by a killed run; return ``(path, size)`` of each."""
    fs, root = fs_and_path(output)
    try:
        found = fs.find(root, detail=True)
    except (FileNotFoundError, NotADirectoryError):
        return []
    removed: List[Tuple[str, int]] = []
    for path, info in found.items():
        if info.get("type") != "file" or not is_stale_tmp(path.rsplit("/", 1)[-1]):
            continue
        try:
            fs.rm(path)
        except FileNotFoundError:
            continue
        removed.append((path, int(info.get("size") or 0)))
    if removed:
        total = sum(s for _, s in removed)
        names = ", ".join(p.rsplit("/", 1)[-1] for p, _ in removed[:3]) + (" ..." if len(removed) > 3 else "")
        print(
            f"removed {len(removed)} temporary file(s) of an earlier, killed run from {output}"
            f" ({total:,} bytes): {names}",
            file=sys.stderr,
            flush=True,
        )
    return removed
