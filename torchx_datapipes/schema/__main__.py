"""``python -m torchx_datapipes.schema infer|compare``: schema inference and drift on the client.

    python -m torchx_datapipes.schema infer STATS_OUT -o schema.json [--ranges]
    python -m torchx_datapipes.schema compare A_OUT B_OUT [--html diff.html] [--json drift.json]
        [--schema schema.json]

``compare`` prints a table and exits 1 when any field drifted (0 otherwise, 2 on a usage error, and
on two profiles with no field in common or an empty one: nothing could be compared).
"""

import argparse
import json
import sys
from typing import List, Optional

from torchx_datapipes.errors import DatapipesError
from torchx_datapipes.io.checksum import write_file


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m torchx_datapipes.schema", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    inf = sub.add_parser("infer", help="infer a schema.json from a stats or validate output")
    inf.add_argument(
        "stats_out", help="the --output directory of a stats (or validate) job, or its stats.json"
    )
    inf.add_argument("-o", "--output", required=True, help="where to write the schema (JSON)")
    inf.add_argument("--ranges", action="store_true", help="also infer numeric ranges (observed min/max)")
    cmp = sub.add_parser("compare", help="per-field drift between two stats or validate outputs")
    cmp.add_argument("a", help="baseline output directory (or its stats.json)")
    cmp.add_argument("b", help="current output directory (or its stats.json)")
    cmp.add_argument("--html", help="write a side-by-side HTML report here")
    cmp.add_argument("--json", help="write the per-field distances as JSON here")
    cmp.add_argument("--schema", help="a schema.json whose per-field drift settings apply")
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    try:
        return _infer(args) if args.cmd == "infer" else _compare(args)
    except (DatapipesError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _infer(args: argparse.Namespace) -> int:
    from torchx_datapipes.schema.compare import load_stats
    from torchx_datapipes.schema.infer import infer

    schema = infer(load_stats(args.stats_out), ranges=args.ranges, source=args.stats_out)
    write_file(args.output, schema.dumps().encode())
    print(f"schema of {len(schema.fields)} fields written to {args.output}", file=sys.stderr)
    return 0


def _compare(args: argparse.Namespace) -> int:
    from torchx_datapipes.schema.compare import check_comparable, compare_docs, load_stats, table, to_json
    from torchx_datapipes.schema.model import Schema

    a, b = load_stats(args.a), load_stats(args.b)
    check_comparable(a, b, args.a, args.b)
    schema = Schema.load(args.schema) if args.schema else None
    drifts = compare_docs(a, b, schema)
    print(table(drifts))
    if args.json:
        write_file(args.json, json.dumps(to_json(drifts, args.a, args.b), indent=2).encode())
    if args.html:
        from torchx_datapipes.schema.report import write_report

        write_report(args.html, b, a, drifts, None, "Comparison report")
    drifted = [d.field for d in drifts if d.drifted]
    print(f"{len(drifted)} of {len(drifts)} fields drifted" + (f": {', '.join(drifted)}" if drifted else ""))
    return 1 if drifted else 0


if __name__ == "__main__":
    sys.exit(main())
