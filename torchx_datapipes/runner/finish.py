"""Rank 0's commit of a whole job: every unit checked, the op's ``finalize``, then ``_SUCCESS`` last.

Moved from ``runner/engine.py`` (which runs the job) to keep it small; the checks themselves are
``runner/commit.py``'s. Called once, by :meth:`Engine.commit`, after the final barrier.
"""

import time
from typing import Any, Dict, List, Protocol, Tuple

from torchx_datapipes.formats.columns import manifest_entries as renamed_columns
from torchx_datapipes.io import manifest as mf
from torchx_datapipes.io import manifest_schema as ms
from torchx_datapipes.io.fs import join
from torchx_datapipes.io.layout import ERRORS_DIR
from torchx_datapipes.io.lease import run_identity
from torchx_datapipes.runner.commit import (
    check_error_rate,
    check_files,
    hold_on_to_success,
    remove_strays,
    slot_counts,
    unit_summary,
)


class Committing(Protocol):
    """What the commit reads of the engine (``runner/engine.py`` ``Engine``; no import: no cycle)."""

    cfg: Any
    op: Any
    dist: Any
    lease: Any
    units: List[Any]
    inputs: List[Tuple[str, int]]
    fingerprint: str
    t0: float

    def load_metas(self, pass_name: str) -> List[Dict[str, Any]]: ...

    def context(self) -> Any: ...

    def options(self) -> Dict[str, Any]: ...

    def request(self) -> str: ...


def commit_job(engine: Committing) -> Dict[str, Any]:
    """The job's manifest, written to ``OUT/_SUCCESS`` once every unit of the main pass checks out."""
    c = engine.cfg
    metas = engine.load_metas("main")
    check_files(c.output, metas)
    totals = {
        k: sum(int(m.get(k, 0)) for m in metas)
        for k in (
            ms.RECORDS_IN,
            ms.BAD,
            ms.BLANK_LINES,
            ms.SKIPPED_MEMBERS,
            ms.RENAMED_JSON_KEYS,
            ms.LOST_BYTES,
        )
    }
    rate = check_error_rate(metas, sum(u.nbytes for u in engine.units), c.max_error_rate, c.output)
    if engine.lease is not None:
        engine.lease.check()  # before finalize writes side files (stats.json, reports)
    extra = engine.op.finalize(engine.context(), metas)
    remove_strays(c.output, metas)
    inputs = [{ms.INPUT_PATH: p, ms.INPUT_SIZE: s} for p, s in engine.inputs]
    manifest = mf.base_manifest(engine.op.name, inputs, {})
    manifest.update(  # io/manifest_schema.py ENGINE_KEYS, then the op's
        {
            ms.OPTIONS: engine.options(),
            ms.ARTIFACT: {ms.ARTIFACT_URL: c.artifact, ms.ARTIFACT_SHA256: c.sha256},
            ms.JOB: {
                ms.JOB_RUN_ID: run_identity(),
                ms.JOB_REQUEST: engine.request(),
                ms.JOB_FINGERPRINT: engine.fingerprint,
            },
            ms.WORLD_SIZE: engine.dist.world_size,
            ms.NUM_WORKERS: c.num_workers,
            ms.ASSIGN: c.assign,
            ms.SLOTS: slot_counts(metas),
            **totals,  # records_in, bad, blank_lines, skipped_members, renamed_keys, lost_bytes
            ms.ERROR_RATE: rate,
            ms.MAX_ERROR_RATE: c.max_error_rate,
            ms.ERRORS_DIR: join(c.output, ERRORS_DIR) if totals[ms.BAD] else None,
            ms.STARTED_AT: round(engine.t0, 3),  # rank 0's engine start, epoch seconds
            ms.WALL_TIME_S: round(time.time() - engine.t0, 3),
            **extra,
            **renamed_columns([(u.path, u.read) for u in engine.units]),
            ms.UNITS: [unit_summary(m) for m in metas],
        }
    )
    if engine.lease is not None:
        engine.lease.check()
    mf.write_manifest(c.output, manifest)
    hold_on_to_success()  # _SUCCESS is in place: a kill from now on must not fail the job
    return manifest
