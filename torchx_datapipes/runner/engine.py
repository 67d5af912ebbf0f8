"""The op-agnostic spine: plan units, run them on (rank, worker) slots, commit.

Each rank plans the same units from the input alone, takes ``units[slot::slots]`` for
each of its worker slots (``slot = rank * num_workers + worker``) and skips units whose
commit record already carries this job's fingerprint, which makes torchrun restarts and
relaunches resume. After a barrier, rank 0 checks that every unit committed and writes
``_SUCCESS`` last.
"""

import ctypes
import multiprocessing as mp
import signal
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Protocol, Tuple

from torchx_datapipes.errors import DatapipesError, OutputExistsError
from torchx_datapipes.io import manifest as mf
from torchx_datapipes.io.formats import UnitReader
from torchx_datapipes.io.fs import check_disjoint, expand_inputs, fs_and_path, join
from torchx_datapipes.io.units import Unit, assign, plan_units
from torchx_datapipes.runner.badrecords import ErrorSink, OnError
from torchx_datapipes.runner.dist import Dist
from torchx_datapipes.runner.progress import Progress


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
    max_error_rate: float = 1.0
    overwrite: bool = False
    unit_mb: float = 64.0
    timeout_s: float = 6 * 3600.0
    progress_s: float = 5.0


class UnitFn(Protocol):
    def __call__(self, unit: Unit, reader: UnitReader, sink: ErrorSink) -> Dict[str, Any]: ...


class Op(Protocol):
    """One operation on the spine (transform, split, stats)."""

    name: str

    def options(self) -> Dict[str, Any]:
        """Options that change the output (part of the fingerprint and the manifest)."""
        ...

    def run(self, engine: "Engine") -> None:
        """Run the op's passes with ``engine.run_pass``."""
        ...

    def finalize(self, engine: "Engine", metas: List[Dict[str, Any]]) -> Dict[str, Any]:
        """On rank 0 after every unit committed: extra manifest fields (may write side files)."""
        ...


_ACTIVE: Optional[Tuple["Engine", str, UnitFn]] = None  # what forked workers run


def _die_with_parent() -> None:
    try:  # Linux: a killed rank takes its worker processes with it
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _slot_in_child(slot: int) -> Dict[str, Any]:
    assert _ACTIVE is not None
    engine, pass_name, fn = _ACTIVE
    return engine.run_slot(slot, pass_name, fn)


class Engine:
    def __init__(self, cfg: RunConfig, op: Op, fn_label: str = "fn", dist: Optional[Dist] = None) -> None:
        self.cfg, self.op, self.fn_label = cfg, op, fn_label
        self.dist = dist or Dist.from_env()
        self.t0 = time.time()
        self.inputs = expand_inputs(list(cfg.inputs))
        check_disjoint(self.inputs, cfg.output, cfg.inputs)
        self.units = plan_units(self.inputs, cfg.format, cfg.unit_mb)
        self.fingerprint = mf.fingerprint(
            {"op": op.name, "sha256": cfg.sha256, "options": self.options(), "inputs": self.inputs}
        )

    def options(self) -> Dict[str, Any]:
        c = self.cfg
        return {
            "format": c.format,
            "output_format": c.output_format,
            "batch_size": c.batch_size,
            "on_error": c.on_error.value,
            "unit_mb": c.unit_mb,
            **self.op.options(),
        }

    # -- lifecycle ------------------------------------------------------------------------
    def execute(self) -> Optional[Dict[str, Any]]:
        """Run the whole job on this rank; rank 0 returns the manifest."""
        c, d = self.cfg, self.dist
        if mf.has_success(c.output) and not c.overwrite:
            raise OutputExistsError(
                f"{mf.success_url(c.output)} exists: {c.output} already holds a complete result."
                " Pass --overwrite True to replace it, or choose another --output"
            )
        d.init()
        if c.overwrite and d.rank == 0 and d.restart == 0:
            mf.clear_output(c.output)
        self.barrier()
        self.op.run(self)
        self.barrier()
        manifest = self.commit() if d.rank == 0 else None
        d.close()
        return manifest

    def barrier(self) -> None:
        self.dist.barrier(self.cfg.timeout_s)

    # -- passes ---------------------------------------------------------------------------
    def slots(self) -> Tuple[int, List[int]]:
        w = max(1, self.cfg.num_workers)
        return self.dist.world_size * w, [self.dist.rank * w + i for i in range(w)]

    def run_pass(self, pass_name: str, fn: UnitFn) -> None:
        """Run ``fn`` on every unit of this rank's slots (in worker processes if more than one)."""
        global _ACTIVE
        _, mine = self.slots()
        if len(mine) == 1:
            self.run_slot(mine[0], pass_name, fn)
            return
        _ACTIVE = (self, pass_name, fn)
        try:
            ctx = mp.get_context("fork")
            with ProcessPoolExecutor(len(mine), mp_context=ctx, initializer=_die_with_parent) as pool:
                for f in [pool.submit(_slot_in_child, s) for s in mine]:
                    f.result()
        finally:
            _ACTIVE = None

    def meta_name(self, unit: Unit, pass_name: str) -> str:
        return unit.name if pass_name == "main" else f"{unit.name}.{pass_name}"

    def run_slot(self, slot: int, pass_name: str, fn: UnitFn) -> Dict[str, Any]:
        nslots, _ = self.slots()
        units = assign(self.units, slot, nslots)
        w = max(1, self.cfg.num_workers)
        label = f"{pass_name} rank {self.dist.rank}/{self.dist.world_size} worker {slot % w}/{w}"
        progress = Progress(label, sum(u.nbytes for u in units), self.cfg.progress_s)
        done = skipped = 0
        for unit in units:
            name = self.meta_name(unit, pass_name)
            if mf.read_unit_meta(self.cfg.output, name, self.fingerprint) is not None:
                skipped += 1
            else:
                self.process(unit, name, fn, progress)
                done += 1
            progress.unit_done(unit.nbytes)
        if skipped:
            print(f"[{label}] resumed: skipped {skipped} committed unit(s)", file=sys.stderr, flush=True)
        return {"slot": slot, "done": done, "skipped": skipped, "records": progress.records}

    def process(self, unit: Unit, name: str, fn: UnitFn, progress: Progress) -> None:
        t = time.time()
        reader = UnitReader(unit, self.cfg.batch_size)
        reader.on_batch = progress.update
        sink = ErrorSink(reader, self.cfg.on_error, self.cfg.output, self.fn_label)
        extra = fn(unit, reader, sink)
        errors = sink.commit(name)
        meta = {
            "fingerprint": self.fingerprint,
            "unit": unit.to_json(),
            "records_in": reader.records + len(reader.bad),
            "parsed": reader.records,
            "blank_lines": reader.blank,
            "bad": sink.count,
            "bad_units": reader.bad_units,
            "lost_bytes": reader.lost_bytes,
            "errors": errors,
            "wall_s": round(time.time() - t, 4),
            **extra,
        }
        mf.write_unit_meta(self.cfg.output, name, meta)

    def load_metas(self, pass_name: str) -> List[Dict[str, Any]]:
        metas, missing = [], []
        for u in self.units:
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
        c = self.cfg
        metas = self.load_metas("main")
        totals = {k: sum(int(m.get(k, 0)) for m in metas) for k in ("records_in", "bad", "blank_lines")}
        rate = totals["bad"] / totals["records_in"] if totals["records_in"] else 0.0
        if rate > c.max_error_rate:
            raise DatapipesError(
                f"{totals['bad']} of {totals['records_in']} records were bad ({rate:.2%}), above"
                f" --max_error_rate {c.max_error_rate:g}; see {join(c.output, '_errors')}/ for file, line"
                " and error of each; fix the input or raise --max_error_rate"
            )
        extra = self.op.finalize(self, metas)
        self._remove_strays(metas)
        manifest = mf.base_manifest(self.op.name, [{"path": p, "size": s} for p, s in self.inputs], {})
        manifest.update(
            {
                "options": self.options(),
                "artifact": {"url": c.artifact, "sha256": c.sha256},
                "world_size": self.dist.world_size,
                "num_workers": c.num_workers,
                "records_in": totals["records_in"],
                "bad": totals["bad"],
                "blank_lines": totals["blank_lines"],
                "error_rate": rate,
                "errors_dir": join(c.output, "_errors") if totals["bad"] else None,
                "wall_time_s": round(time.time() - self.t0, 3),
                **extra,
                "units": [_unit_summary(m) for m in metas],
            }
        )
        mf.write_manifest(c.output, manifest)
        return manifest

    def _remove_strays(self, metas: List[Dict[str, Any]]) -> None:
        """Drop temp files of killed workers and parts left by an earlier, different job."""
        fs, root = fs_and_path(self.cfg.output)
        keep = {f"{root}/{p}" for m in metas for p in m.get("outputs", [])}
        keep |= {fs_and_path(m["errors"])[1] for m in metas if m.get("errors")}
        for p in fs.find(root):
            base = p.rsplit("/", 1)[-1]
            stray_part = base.startswith("part-") and p not in keep
            if base.startswith(".tmp-") or stray_part:
                fs.rm(p)


def _unit_summary(m: Dict[str, Any]) -> Dict[str, Any]:
    skip = {"fingerprint", "unit"}
    return {
        "unit": m["unit"]["index"],
        "path": m["unit"]["path"],
        **{k: v for k, v in m.items() if k not in skip},
    }


def run_op(cfg: RunConfig, op: Op, fn_label: str = "fn") -> Optional[Dict[str, Any]]:
    return Engine(cfg, op, fn_label).execute()
