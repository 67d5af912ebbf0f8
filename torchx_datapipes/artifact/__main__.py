"""``python -m torchx_datapipes.artifact``: inspect and clean artifact stores.

Commands:
    gc --store DIR_OR_URL --keep-days N [--dry-run]   remove artifacts older than N days
    show URL                                         print an artifact's header and sidecar
"""

import argparse
import json
import sys
from typing import Optional, Sequence

from torchx_datapipes.artifact import gc
from torchx_datapipes.artifact import store as _store
from torchx_datapipes.errors import ArtifactError


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m torchx_datapipes.artifact", description="Inspect and clean artifact stores."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("gc", help="remove artifacts (and sidecars) older than --keep-days")
    p.add_argument("--store", required=True, help="the artifact store: a directory or fsspec URL")
    p.add_argument("--keep-days", type=float, required=True, help="keep artifacts at most this old")
    p.add_argument("--dry-run", action="store_true", help="print what would be removed, remove nothing")
    s = sub.add_parser("show", help="print an artifact's header fields and its sidecar")
    s.add_argument("url")
    return parser.parse_args(argv)


def _show(url: str) -> str:
    header, payload = _store.split(_store.read(url, None), url)
    out = {"header": header, "payload_bytes": len(payload)}
    if _store.is_artifact_url(url):
        sidecar = url.rsplit(".", 1)[0] + f".{_store.SIDECAR_EXT}"
        try:
            out["sidecar"] = json.loads(_store.read(sidecar, None))
        except FileNotFoundError:
            out["sidecar"] = None
    return json.dumps(out, indent=2, sort_keys=True)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        if args.command == "gc":
            report = gc.collect(args.store, args.keep_days, dry_run=args.dry_run)
            print(gc.format_report(report, args.keep_days))
        else:
            print(_show(args.url))
    except (ArtifactError, OSError, ValueError) as e:  # a person's mistake: one line, no traceback
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
