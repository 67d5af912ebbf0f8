"""Refuse ``stats --fields`` names the input does not have (a typo such as ``idd``) before any work.

The client checks local inputs before launch; the runner checks again on every rank before
its first unit (remote inputs, or a client that could not read them). Columnar inputs (CSV,
Parquet) know their columns from the header or schema; JSON inputs are sampled: a field that
none of the first :data:`SAMPLE_RECORDS` records has is refused, with the fields that were seen
and the closest match. With ``--fn`` the fields are those of the transformed records, which
only the job sees: then nothing is checked.
"""

from __future__ import annotations

import difflib
from typing import Any, Iterable, Sequence

from torchx_datapipes.errors import InputError
from torchx_datapipes.stats.partial import VALUE_FIELD

SAMPLE_RECORDS = 10_000


class UnknownFieldError(InputError):
    """``--fields`` names a field that the input does not have."""


def seen_fields(units: Iterable[Any], limit: int = SAMPLE_RECORDS) -> tuple[list[str], int, str, bool]:
    """``(fields in first-seen order, records looked at, first file, complete)`` of the first units.

    ``complete``: the fields are the input's columns (a columnar header), not a sample.
    """
    from torchx_datapipes.formats.reading import UnitReader

    fields: dict[str, None] = {}
    looked, first = 0, ""
    for unit in units:
        reader = UnitReader(unit, min(4096, limit))
        first = first or unit.path
        if reader.columnar:
            for batch, _ in reader.arrow_batches():
                return list(batch.schema.names), batch.num_rows, first, True
            continue
        reader.objects_only = False
        for recs, _ in reader.batches():
            for r in recs:
                if isinstance(r, dict):
                    fields.update(dict.fromkeys(map(str, r)))
            looked += len(recs)
            if looked >= limit:
                return list(fields), looked, first, False
    return list(fields), looked, first, False


def check_fields(wanted: Sequence[str], units: Sequence[Any], limit: int = SAMPLE_RECORDS) -> None:
    """``UnknownFieldError`` naming each wanted field absent from the (sampled) input, and the fix."""
    wanted = [w for w in wanted if w != VALUE_FIELD]
    if not wanted or not units:
        return
    have, looked, first, complete = seen_fields(units, limit)
    if looked == 0 and not complete:
        return  # an empty input: nothing to compare with
    missing = [w for w in wanted if w not in have]
    if not missing:
        return
    where = f"the columns of {first}" if complete else f"the first {looked:,} records (from {first})"
    hints = []
    for m in missing:
        close = difflib.get_close_matches(m, have, n=1)
        hints.append(f"{m!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    shown = ", ".join(have[:50]) + (", ..." if len(have) > 50 else "")
    raise UnknownFieldError(
        f"--fields names {', '.join(hints)}, not found in {where}; fields there: {shown}."
        " Fix the name(s) in --fields, or leave --fields out to describe every field"
    )


def check_local_fields(fields: str, files: Sequence[Any], fmt_spec: str, unit_mb: float) -> None:
    """The client's check of ``--fields`` on local input files (``files``: listed ``InputFile`` s)."""
    from torchx_datapipes.formats.planning import plan_units
    from torchx_datapipes.stats.config import StatsConfig

    wanted = StatsConfig.parse(fields).fields or ()
    if not files:
        return
    units = plan_units([(f.url, f.size, f.mtime) for f in files[:8]], fmt_spec, unit_mb)
    check_fields(wanted, units)
