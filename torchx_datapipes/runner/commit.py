"""Rank 0's checks and bookkeeping at the commit: files intact, error rate, strays, summaries.

Split from ``runner/engine.py`` (which runs the job); everything here works on the units'
commit records (``metas``) and the output directory.
"""

import os
import signal
import threading
from typing import Any, Dict, List

from torchx_datapipes.errors import DatapipesError
from torchx_datapipes.io import manifest_schema as ms
from torchx_datapipes.io.checksum import verify_sizes
from torchx_datapipes.io.fs import fs_and_path, join
from torchx_datapipes.io.layout import ERRORS_DIR, LEASE, PART_PREFIX, STALE_LEASE_PREFIX, TMP_PREFIX


def check_files(output: str, metas: List[Dict[str, Any]]) -> None:
    """Every committed file is present with its recorded size (one listing of the output)."""
    problems = verify_sizes(output, [f for m in metas for f in m.get(ms.FILES, [])])
    if problems:
        raise DatapipesError(
            f"{len(problems)} committed file(s) changed after their unit committed:"
            f" {'; '.join(problems[:5])}."
            " Something else writes this output; relaunch the same command to redo those units"
        )


def remove_strays(output: str, metas: List[Dict[str, Any]]) -> None:
    """Drop temp files of killed workers, stale leases, and parts left by an earlier, different job."""
    fs, root = fs_and_path(output)
    keep = {f"{root}/{p}" for m in metas for p in m.get(ms.OUTPUTS, [])}
    keep |= {f"{root}/{f[ms.FILE_PATH]}" for m in metas for f in m.get(ms.FILES, [])}  # _index/part-*.idx
    keep |= {fs_and_path(m[ms.ERRORS])[1] for m in metas if m.get(ms.ERRORS)}
    for p in fs.find(root):
        base = p.rsplit("/", 1)[-1]
        stray_part = base.startswith(PART_PREFIX) and p not in keep
        stray = base.startswith((TMP_PREFIX, STALE_LEASE_PREFIX)) or stray_part
        if stray and not base.endswith(f"-{LEASE}"):
            try:  # the lease's heartbeat writes .tmp-*-_LEASE files of its own: leave them
                fs.rm(p)
            except FileNotFoundError:
                pass


def check_error_rate(metas: List[Dict[str, Any]], input_bytes: int, limit: float, output: str) -> float:
    """The error rate, max(bad records / records in, lost bytes / input bytes); raise above ``limit``."""
    records_in = sum(int(m.get(ms.RECORDS_IN, 0)) for m in metas)
    bad = sum(int(m.get(ms.BAD, 0)) for m in metas)
    lost = sum(int(m.get(ms.LOST_BYTES, 0)) for m in metas)
    rate = max(bad / records_in if records_in else 0.0, lost / input_bytes if input_bytes else 0.0)
    if rate > limit:
        lost_note = (
            f" and {lost:,} of {input_bytes:,} input bytes were lost (unreadable units)" if lost else ""
        )
        raise DatapipesError(
            f"{bad:,} of {records_in:,} records were bad{lost_note}:"
            f" error rate {rate:.2%}, above"
            f" --max_error_rate {limit:g} (default 0.1); see {join(output, ERRORS_DIR)}/ for file, line and"
            " error of each. Fix the input or the function, or rerun with a higher --max_error_rate"
            " (1.0 accepts any share of bad records)"
        )
    return rate


def slot_counts(metas: List[Dict[str, Any]]) -> Dict[str, int]:
    """How many of the committed units each slot ran (``{"0": 3, "1": 5}``, slots in order)."""
    counts: Dict[int, int] = {}
    for m in metas:
        if ms.SLOT in m:
            counts[int(m[ms.SLOT])] = counts.get(int(m[ms.SLOT]), 0) + 1
    return {str(k): counts[k] for k in sorted(counts)}


def hold_on_to_success() -> None:
    """Under torchrun, ignore SIGTERM/SIGINT from now on: the result is decided, a late kill must not flip it.

    (torchrun SIGTERMs every rank as soon as one exits non-zero; a rank past the final barrier, or
    rank 0 once ``_SUCCESS`` is in place, then finishes and exits 0.) In-process callers keep their handlers.
    """
    if "TORCHELASTIC_RUN_ID" in os.environ and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def unit_summary(m: Dict[str, Any]) -> Dict[str, Any]:
    """A unit's entry of the manifest's ``units``: its commit record with the unit's index and path."""
    skip = ms.SUMMARY_DROPS | {ms.UNIT}  # per-part schemas and field types stay in the records
    return {
        ms.UNIT: m[ms.UNIT][ms.UNIT_INDEX],
        ms.SUMMARY_PATH: m[ms.UNIT][ms.UNIT_PATH],
        **{k: v for k, v in m.items() if k not in skip},
    }
