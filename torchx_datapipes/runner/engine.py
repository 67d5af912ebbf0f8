"""The op-agnostic spine: plan units, run them on (rank, worker) slots, commit.

Rank 0 plans the units from the input alone and shares the plan; each worker slot
(``slot = rank * num_workers + worker``) claims the next unit from the job's store (largest
first; ``--assign static``: ``units[slot::slots]``, see ``runner/claim.py``) and skips units
whose commit record already carries this job's fingerprint, which makes torchrun restarts and
relaunches resume. After a barrier, rank 0 checks that every unit committed and writes
``_SUCCESS`` last.
"""

import contextlib
import ctypes
import multiprocessing as mp
import signal
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Protocol, Sequence, Tuple

import orjson

from torchx_datapipes.errors import DatapipesError, OutputExistsError
from torchx_datapipes.formats.planning import Unit, plan_units
from torchx_datapipes.formats.reading import UnitReader, record_bytes
from torchx_datapipes.io import manifest as mf
from torchx_datapipes.io import manifest_schema as ms
from torchx_datapipes.io.checksum import verify
from torchx_datapipes.io.fs import check_disjoint, expand_input_files
from torchx_datapipes.io.lease import Lease, LeaseLostError, lease_lost, run_identity
from torchx_datapipes.io.ownership import check_reserved, mark_output, refuse_foreign
from torchx_datapipes.io.stale import remove_stale_temps
from torchx_datapipes.runner.background import Background
from torchx_datapipes.runner.badrecords import ErrorSink, OnError
from torchx_datapipes.runner.claim import Claimer, Counters, LocalCounters, StoreCounters, counter_names
from torchx_datapipes.runner.commit import hold_on_to_success
from torchx_datapipes.runner.context import PassContext, UnitFn
from torchx_datapipes.runner.dist import Dist, die_with_agent
from torchx_datapipes.runner.finish import commit_job
from torchx_datapipes.runner.progress import JobProgress, Progress


@dataclass(frozen=True)
class RunConfig:
    op: str
    inputs: Tuple[str, ...]
    output: str
    artifact: Optional[str] = None
    sha256: Optional[str] = None
    format: str = "auto"
    output_format: str = "jsonl"
    num_workers: int = 1
    batch_size: int = 1024
    on_error: OnError = OnError.RAISE
    max_error_rate: float = 0.1  # max(bad records / records in, lost bytes / input bytes)
    overwrite: bool = False
    unit_mb: float = 64.0
    max_record_mb: float = 64.0  # the record bound (a longer line, row, document, member: a bad record)
    timeout_s: float = 6 * 3600.0
    progress_s: float = 5.0
    assign: str = "dynamic"  # dynamic claiming or static strided assignment (never in the fingerprint)


class Op(Protocol):
    """One operation on the spine (transform, split, stats)."""

    name: str

    def options(self) -> Dict[str, Any]:
        """Options that change the output (part of the fingerprint and the manifest)."""
        ...

    def run(self, ctx: PassContext) -> None:
        """Run the op's passes with ``ctx.run_pass``."""
        ...

    def finalize(self, ctx: PassContext, metas: List[Dict[str, Any]]) -> Dict[str, Any]:
        """On rank 0 after every unit committed: extra manifest fields (may write side files)."""
        ...


_ACTIVE: Optional[Tuple["Engine", str, UnitFn, Dict[int, Counters]]] = None  # what forked workers run


def _die_with_parent() -> None:
    try:  # Linux: a killed rank takes its worker processes with it
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _slot_in_child(slot: int) -> Dict[str, Any]:
    assert _ACTIVE is not None
    engine, pass_name, fn, counters = _ACTIVE
    return engine.run_slot(slot, pass_name, fn, counters[slot])


class Engine:
    def __init__(self, cfg: RunConfig, op: Op, fn_label: str = "fn", dist: Optional[Dist] = None) -> None:
        self.cfg, self.op, self.fn_label = cfg, op, fn_label
        self.dist = dist or Dist.from_env()
        self.t0 = time.time()
        self.inputs: List[Tuple[str, int]] = []  # planned in execute(): rank 0 plans, every rank uses it
        self.units: List[Unit] = []
        self.tasks: Dict[str, List[Unit]] = {}  # a pass over other tasks than the units (run_pass tasks=)
        self.fingerprint = ""
        self.lease: Optional[Lease] = None
        self.lease_token = ""  # rank 0's lease token, shared with the plan
        self.early: Optional[Background[Tuple[List[Tuple[str, int]], List[Unit]]]] = None

    def options(self) -> Dict[str, Any]:
        c = self.cfg
        return {
            ms.OPT_FORMAT: c.format,
            ms.OPT_OUTPUT_FORMAT: c.output_format,
            ms.OPT_BATCH_SIZE: c.batch_size,
            ms.OPT_ON_ERROR: c.on_error.value,
            ms.OPT_UNIT_MB: c.unit_mb,
            ms.OPT_MAX_RECORD_MB: c.max_record_mb,
            **self.op.options(),
        }

    def request(self) -> str:
        """What was asked for (not what the input holds now): a restart of this job must match it."""
        c = self.cfg
        return mf.fingerprint(
            {"op": self.op.name, "sha256": c.sha256, "options": self.options(), "inputs": list(c.inputs),
             "output": c.output}
        )  # fmt: skip

    # -- lifecycle ------------------------------------------------------------------------
    def execute(self) -> Optional[Dict[str, Any]]:
        """Run the whole job on this rank; rank 0 returns the manifest."""
        d = self.dist
        die_with_agent()
        if d.rank == 0:  # nothing is read or written through a reserved name that is a symlink
            check_reserved(self.cfg.output)
        if self._already_complete():
            return mf.read_manifest(self.cfg.output) if d.rank == 0 else None
        if d.rank == 0:  # list and plan the input while the process group forms (other ranks import)
            self.early = Background(self._list_and_plan)
        d.init()
        try:
            self.plan()
            self.barrier()
            self.op.run(self.context())
            self.barrier()
            if d.rank != 0:
                hold_on_to_success()  # past the final barrier: a late kill must not fail the job
                manifest = None
            else:
                manifest = self.commit()
        except LeaseLostError:
            raise
        except Exception as e:
            lost = self.lease_lost()
            if lost is not None:  # another job took the output over: that, not the symptom, is the error
                raise LeaseLostError(
                    f"{lost}. This job stopped without committing ({type(e).__name__}: {e})"
                ) from e
            raise
        finally:
            if self.lease is not None:
                self.lease.release()
        d.close()
        return manifest

    def _already_complete(self) -> bool:
        """True if this very job wrote ``_SUCCESS`` (a restarted rank); refuse any other complete output."""
        c = self.cfg
        if not mf.has_success(c.output):
            return False
        job = mf.read_manifest(c.output).get(ms.JOB) or {}
        run_id = run_identity()
        same = (
            run_id is not None
            and job.get(ms.JOB_RUN_ID) == run_id
            and job.get(ms.JOB_REQUEST) == self.request()
        )
        if same:  # a restarted rank, or this job launched again (a requeue): every rank decides alike
            print(f"output already complete: {mf.success_url(c.output)} was written by this job"
                  f" (run {job[ms.JOB_RUN_ID]}); nothing to do", file=sys.stderr, flush=True)  # fmt: skip
            return True
        if c.overwrite:
            return False
        raise OutputExistsError(
            f"{mf.success_url(c.output)} exists: {c.output} already holds a complete result."
            " Pass --overwrite True to replace it, or choose another --output"
        )

    def plan(self) -> None:
        """Rank 0 takes the output lease, clears the output if asked, and plans; every rank uses that plan."""
        data = orjson.loads(self.dist.share("plan", self._plan_on_rank0, self.cfg.timeout_s))
        self.inputs = [(str(p), int(s)) for p, s in data["inputs"]]
        self.units = [Unit(**u) for u in data["units"]]
        self.lease_token = str(data["lease"])
        if self.dist.local_rank == 0 and self.dist.rank != 0:  # rank 0 checked its host's view when planning
            check_disjoint(self.inputs, self.cfg.output, self.cfg.inputs)  # once per other host
        self.fingerprint = mf.fingerprint(
            {"op": self.op.name, "sha256": self.cfg.sha256, "options": self.options(), "inputs": self.inputs,
             "units": data["units"]}
        )  # fmt: skip

    def _list_and_plan(self) -> Tuple[List[Tuple[str, int]], List[Unit]]:
        """The input files and their units: a function of the input alone (no lease, no output)."""
        c = self.cfg
        files = expand_input_files(list(c.inputs))
        units = plan_units([(f.url, f.size, f.mtime) for f in files], c.format, c.unit_mb, c.max_record_mb)
        return [(f.url, f.size) for f in files], units

    def _plan_on_rank0(self) -> bytes:
        c = self.cfg
        inputs, units = self.early.result() if self.early is not None else self._list_and_plan()
        check_disjoint(inputs, c.output, c.inputs)
        refuse_foreign(
            c.output, c.overwrite
        )  # before anything is written there, or through its reserved names
        self.lease = Lease.acquire(c.output)
        if c.overwrite and self.dist.first_round and not self.lease.retaken:  # not after a restart/new round
            mf.clear_output(c.output)
        remove_stale_temps(c.output)  # a killed run's temp files: no run of ours writes here but us
        mark_output(c.output)  # before any part: a relaunch knows they are ours
        self.lease.start_heartbeat()
        self.lease_token = self.lease.holder.token
        return orjson.dumps(
            {"inputs": inputs, "units": [u.to_json() for u in units], "lease": self.lease_token}
        )

    def lease_lost(self) -> Optional[str]:
        """Why another job now owns the output (see ``io.lease.lease_lost``); None before the plan."""
        if not self.lease_token:
            return None
        lease = self.lease
        return lease_lost(self.cfg.output, self.lease_token, lease is not None, lease.lost if lease else None)

    def barrier(self) -> None:
        self.dist.barrier(self.cfg.timeout_s)

    def context(self) -> PassContext:
        """What the op sees of this engine (after ``plan``)."""
        c, d = self.cfg, self.dist
        return PassContext(
            output=c.output, rank=d.rank, world_size=d.world_size, num_workers=c.num_workers,
            artifact=c.artifact, sha256=c.sha256, units=list(self.units), inputs=list(self.inputs),
            options=self.options(), run_pass=self.run_pass, barrier=self.barrier, load_metas=self.load_metas,
        )  # fmt: skip

    # -- passes ---------------------------------------------------------------------------
    def slots(self) -> Tuple[int, List[int]]:
        w = max(1, self.cfg.num_workers)
        return self.dist.world_size * w, [self.dist.rank * w + i for i in range(w)]

    def counters(self, pass_name: str) -> Counters:
        """The pass's shared counters: the job's store under torchrun, else local ones (before any fork)."""
        if self.dist.store is not None:
            return StoreCounters(self.dist.store, self.dist.prefix, self.cfg.timeout_s)
        return LocalCounters(counter_names(pass_name))

    def run_pass(self, pass_name: str, fn: UnitFn, tasks: Optional[Sequence[Unit]] = None) -> None:
        """Run ``fn`` on every unit this rank's slots claim (in worker processes if more than one).

        ``tasks`` (the same on every rank): instead of the units, e.g. a keyed exchange's partitions
        (``runner/exchange.py``), claimed, committed and resumed alike; their readers read nothing.
        """
        global _ACTIVE
        if tasks is not None:
            self.tasks[pass_name] = list(tasks)
        _, mine = self.slots()
        counters = self.counters(pass_name)
        monitor = self._job_progress(pass_name, counters)
        try:
            if len(mine) == 1:
                self.run_slot(mine[0], pass_name, fn, counters)
                return
            # each worker gets a store client connected before the fork (StoreCounters.premade)
            per_slot = (
                counters.premade(len(mine)) if isinstance(counters, StoreCounters) else [counters] * len(mine)
            )
            _ACTIVE = (self, pass_name, fn, dict(zip(mine, per_slot)))
            ctx = mp.get_context("fork")
            with ProcessPoolExecutor(len(mine), mp_context=ctx, initializer=_die_with_parent) as pool:
                busy = self.lease.busy if self.lease is not None else contextlib.nullcontext()
                quiet = monitor.lock if monitor is not None else contextlib.nullcontext()
                with busy, quiet:  # forks: no heartbeat or progress read in flight
                    futures = [pool.submit(_slot_in_child, s) for s in mine]
                for f in futures:
                    f.result()
        finally:
            _ACTIVE = None
            if monitor is not None:
                monitor.stop()

    def _job_progress(self, pass_name: str, counters: Counters) -> Optional[JobProgress]:
        """On rank 0: a daemon thread logging job-wide progress from the shared counters."""
        if self.dist.rank != 0 or self.cfg.progress_s <= 0:
            return None
        reader = counters.fresh() if isinstance(counters, StoreCounters) else counters
        units = self.pass_units(pass_name)
        monitor = JobProgress(
            f"{pass_name} job", pass_name, reader, len(units), sum(u.nbytes for u in units),
            self.cfg.progress_s,
        )  # fmt: skip
        monitor.start()
        return monitor

    def pass_units(self, pass_name: str) -> List[Unit]:
        """What a pass runs over: its tasks if it was given some, else the planned units."""
        return self.tasks.get(pass_name, self.units)

    def meta_name(self, unit: Unit, pass_name: str) -> str:
        return unit.name if pass_name == "main" else f"{unit.name}.{pass_name}"

    def run_slot(self, slot: int, pass_name: str, fn: UnitFn, counters: Counters) -> Dict[str, Any]:
        nslots, _ = self.slots()
        claimer = Claimer(self.pass_units(pass_name), pass_name, self.cfg.assign, counters, slot, nslots)
        w = max(1, self.cfg.num_workers)
        label = f"{pass_name} rank {self.dist.rank}/{self.dist.world_size} worker {slot % w}/{w}"
        planned = sum(u.nbytes for u in claimer.order) if self.cfg.assign == "static" else 0
        share = (lambda n: claimer.report(n, 0, 0)) if self.cfg.progress_s > 0 else None
        progress = Progress(label, planned, self.cfg.progress_s, share=share, share_s=self.cfg.progress_s / 2)
        done = skipped = 0
        for unit in claimer:
            name = self.meta_name(unit, pass_name)
            if self.committed(unit, name, label):
                skipped += 1
            else:
                lost = self.lease_lost()  # one small read: stop at once if another job took the output
                if lost is not None:
                    raise LeaseLostError(f"{lost}. This job stopped before unit {unit.describe()}")
                self.process(unit, name, fn, progress, slot)
                done += 1
            progress.unit_done(unit.nbytes)
            claimer.report(progress.unshared(), 1, unit.nbytes)
        if skipped:
            print(f"[{label}] resumed: skipped {skipped} committed unit(s)", file=sys.stderr, flush=True)
        return {"slot": slot, "done": done, "skipped": skipped, "records": progress.records}

    def committed(self, unit: Unit, name: str, label: str) -> bool:
        """The unit committed by this job and every file it wrote is intact (else it is redone)."""
        meta = mf.read_unit_meta(self.cfg.output, name, self.fingerprint)
        if meta is None:
            return False
        files = meta.get(ms.FILES)
        why = "its commit record lists no files" if files is None else verify(self.cfg.output, files)
        if why is None:
            return True
        print(
            f"[{label}] redoing committed unit {name} ({unit.describe()}): {why}", file=sys.stderr, flush=True
        )
        return False

    def process(self, unit: Unit, name: str, fn: UnitFn, progress: Progress, slot: int = 0) -> None:
        t = time.time()
        reader = UnitReader(unit, self.cfg.batch_size, max_record=record_bytes(self.cfg.max_record_mb))
        reader.on_batch = progress.update
        sink = ErrorSink(reader, self.cfg.on_error, self.cfg.output, self.fn_label)
        extra = fn(unit, reader, sink)
        files: List[Dict[str, Any]] = [f.to_json() for f in extra.pop(ms.FILES, [])]
        errors = sink.commit(name)
        if sink.file is not None:
            files.append(sink.file.to_json())
        meta = {  # the commit record (io/manifest_schema.py RECORD_KEYS, then the op's)
            ms.FINGERPRINT: self.fingerprint,
            ms.UNIT: unit.to_json(),
            ms.RECORDS_IN: reader.records + len(reader.bad),
            ms.PARSED: reader.records,
            ms.BLANK_LINES: reader.blank,
            ms.SKIPPED_MEMBERS: reader.skipped_members,
            ms.RENAMED_JSON_KEYS: reader.renamed_keys,
            ms.BAD: sink.count,
            ms.BAD_UNITS: reader.bad_units,
            ms.LOST_BYTES: reader.lost_bytes,
            ms.BYTES_READ: reader.bytes_read,
            ms.ERRORS: errors,
            ms.STARTED_AT: round(t, 3),  # epoch seconds: with wall_s, the job's timeline
            ms.WALL_S: round(time.time() - t, 4),
            ms.SLOT: slot,
            ms.RANK: self.dist.rank,
            ms.WORKER: slot % max(1, self.cfg.num_workers),
            ms.ATTEMPT: self.dist.restart,
            **extra,
            ms.FILES: files,
        }
        mf.write_unit_meta(self.cfg.output, name, meta)

    def load_metas(self, pass_name: str) -> List[Dict[str, Any]]:
        metas, missing = [], []
        for u in self.pass_units(pass_name):
            m = mf.read_unit_meta(self.cfg.output, self.meta_name(u, pass_name), self.fingerprint)
            (metas.append(m) if m is not None else missing.append(u.describe()))
        if missing:
            raise DatapipesError(
                f"{len(missing)} unit(s) of pass {pass_name!r} did not commit: {', '.join(missing[:5])};"
                " relaunch the same command to resume"
            )
        return metas

    # -- commit ---------------------------------------------------------------------------
    def commit(self) -> Dict[str, Any]:
        """Rank 0: check every unit, the op's ``finalize``, ``_SUCCESS`` last (``runner/finish.py``)."""
        return commit_job(self)


def run_op(cfg: RunConfig, op: Op, fn_label: str = "fn") -> Optional[Dict[str, Any]]:
    return Engine(cfg, op, fn_label).execute()
