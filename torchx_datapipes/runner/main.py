"""Entry point of the runner app: ``python -m torchx_datapipes.runner <op> [options]``.

torchrun starts one of these per rank. Errors are recorded with torch elastic's
``@record`` so the job status carries them. Our own errors (``DatapipesError``: a bad record with
its file, line and the user's traceback, a refused output, a lost lease...) are complete messages:
the rank prints each once, readably, without the runner's internal traceback (see ``__main__``),
and the error file (which torchrun and ``torchx run`` print as YAML) carries a one-line summary of it.
"""

import argparse
import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional

import orjson
from torch.distributed.elastic.multiprocessing.errors import ErrorHandler, record

from torchx_datapipes.errors import DatapipesError
from torchx_datapipes.formats.spec import encode_spec
from torchx_datapipes.io import manifest_schema as ms
from torchx_datapipes.io.fs import split_patterns
from torchx_datapipes.ops import OPS, get_op, op_names
from torchx_datapipes.plugins import load_ref
from torchx_datapipes.runner.badrecords import OnError
from torchx_datapipes.runner.engine import Op, RunConfig, run_op


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """Parse and check the runner's arguments: one subcommand per op the registry knows (``ops/``), its
    parser built from the op's option spec."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog="python -m torchx_datapipes.runner")
    sub = parser.add_subparsers(dest="op", required=True)
    # A rank parses its own op only: importing every op module (and scanning entry points for
    # plug-in ops) costs a rank ~30 ms. Help and an unknown op still list them all.
    known = bool(argv) and OPS.ref(argv[0]) is not None  # registered or built in: no entry-point scan
    for name in (argv[0],) if known else op_names():
        op = get_op(name)
        op.spec.add_arguments(sub.add_parser(name, help=op.help))
    args = parser.parse_args(argv)
    op = get_op(args.op)
    op.spec.check_runner(args)  # OptionError (a ValueError) reaches the job's error file
    if op.needs_fn and not args.artifact:
        parser.error(f"{args.op} needs --artifact (the packaged function)")
    return args


def to_config(args: argparse.Namespace) -> RunConfig:
    return RunConfig(
        op=args.op,
        inputs=tuple(split_patterns(args.input)),
        output=_commit_dir(args).rstrip("/"),
        artifact=args.artifact,
        sha256=_sha256(args),
        format=encode_spec(
            args.format,
            _csv_types(args),
            args.na_values,
            args.delimiter or "",
            getattr(args, "header", True),
        ),
        output_format=getattr(args, "output_format", "jsonl"),
        num_workers=args.num_workers,
        batch_size=args.batch_size,
        on_error=OnError.parse(args.on_error),
        max_error_rate=args.max_error_rate,
        overwrite=bool(args.overwrite),
        unit_mb=args.unit_mb,
        max_record_mb=args.max_record_mb,
        timeout_s=args.timeout_s,
        progress_s=args.progress_s,
        assign=args.assign,
    )


def _csv_types(args: argparse.Namespace) -> str:
    """The input's CSV column types: the value of the option the op names (``OpDef.csv_types``)."""
    name = get_op(args.op).csv_types
    return str(getattr(args, name, None) or "") if name else ""


def _commit_dir(args: argparse.Namespace) -> str:
    """Where the job commits: ``--output``, or what the op's ``OpDef.commit_dir`` says (a transform to
    a message queue commits to ``--state``)."""
    ref = get_op(args.op).commit_dir
    return str(args.output) if ref is None else str(load_ref(ref)(args))


def _sha256(args: argparse.Namespace) -> Optional[str]:
    """The artifact's sha256: pinned by --sha256, else read from the URL (the job fingerprint covers it)."""
    if args.sha256 or not args.artifact:
        return args.sha256  # type: ignore[no-any-return]
    from torchx_datapipes import artifact

    return artifact.sha256_of_url(args.artifact)


def load_fn(args: argparse.Namespace) -> Optional[Callable[..., Any]]:
    if not args.artifact:
        return None
    from torchx_datapipes import artifact

    return artifact.load(args.artifact, sha256=args.sha256)  # type: ignore[no-any-return]


def build_op(args: argparse.Namespace, cfg: RunConfig, fn: Optional[Callable[..., Any]]) -> Op:
    """The engine's op for ``args.op``: the ``make_op`` its op module names (``OpDef.runner``)."""
    build = load_ref(get_op(args.op).runner)
    return build(args, cfg, fn)  # type: ignore[no-any-return]


def summary(manifest: Dict[str, Any]) -> str:
    parts = [f"{manifest[ms.OP]} done: {manifest[ms.RECORDS_IN]:,} records in"]
    for key, word in ((ms.RECORDS_OUT, "out"), (ms.FILTERED, "filtered")):
        if key in manifest:
            parts.append(f"{manifest[key]:,} {word}")
    parts.append(f"{manifest[ms.BAD]:,} bad")
    cache = manifest.get(ms.CACHE)
    if cache:
        parts.append(f"cache {cache['hits']:,} hits / {cache['misses']:,} misses / {cache['errors']} errors")
    wall = manifest[ms.WALL_TIME_S]
    rate = manifest[ms.RECORDS_IN] / wall if wall else 0.0
    line = ", ".join(parts) + f" in {wall:.2f}s ({rate:,.0f} rec/s)"
    slots = manifest.get(ms.SLOTS)
    if slots:
        ran = ", ".join(f"slot {s}: {n}" for s, n in slots.items())
        line += f"; units run per slot ({manifest.get(ms.ASSIGN, 'dynamic')}): {ran}"
    return line


def one_line(e: BaseException) -> str:
    """A one-line summary of an error: its type, first line and fix (the whole message goes to the log)."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    text = f"{type(e).__name__}: {lines[0] if lines else ''}"
    fix = next((line for line in lines[1:] if line.startswith("fix:")), None)
    if fix:
        text += f" ({fix})"
    if len(lines) > 1:
        text += "; the full error is in the rank's log"
    return text


class RunnerErrors(ErrorHandler):
    """torch elastic's error file, with our own errors as a one-line summary and no traceback."""

    def record_exception(self, e: BaseException) -> None:
        file = self._get_error_file_path()
        if not isinstance(e, DatapipesError) or not file:
            super().record_exception(e)
            return
        data = {"message": {"message": one_line(e), "extraInfo": {"timestamp": str(int(time.time()))}}}
        with open(file, "wb") as fh:
            fh.write(orjson.dumps(data))


def print_error(e: DatapipesError) -> None:
    """The rank's one readable print of its error (``__main__`` exits 1 after it, without a traceback)."""
    rank = os.environ.get("RANK", "0")
    print(f"torchx_datapipes: rank {rank} failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)


def _main(argv: Optional[List[str]] = None) -> Optional[Dict[str, Any]]:
    args = parse_args(argv)
    cfg = to_config(args)
    fn = load_fn(args)
    op = build_op(args, cfg, fn)
    from torchx_datapipes.runner.apply import fn_name

    manifest = run_op(cfg, op, fn_name(fn) if fn is not None else "fn")
    if manifest is not None:
        print(summary(manifest), file=sys.stderr, flush=True)
        print(f"output: {cfg.output}  manifest: {cfg.output}/_SUCCESS", file=sys.stderr, flush=True)
    return manifest


main = record(_main, error_handler=RunnerErrors())
main.__doc__ = "Run one rank of a job (``python -m torchx_datapipes.runner``); rank 0 returns the manifest."
