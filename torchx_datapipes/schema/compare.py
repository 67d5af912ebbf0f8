"""Compare two stats (or validate) outputs field by field: distances, errors and drift verdicts."""

from __future__ import annotations

import json
from typing import Any

import fsspec

from torchx_datapipes.errors import DatapipesError
from torchx_datapipes.schema.drift import Drift, compare_field, correct, decide
from torchx_datapipes.schema.model import Schema

STATS_JSON = "stats.json"


class StatsOutputError(DatapipesError, FileNotFoundError):
    """A directory is not a stats or validate output (no readable stats.json)."""


def load_stats(out: str) -> dict[str, Any]:
    """The ``stats.json`` of a stats/validate output directory (or the file itself)."""
    url = out if out.endswith(".json") else out.rstrip("/") + "/" + STATS_JSON
    try:
        with fsspec.open(url, "rt", encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError as e:
        raise StatsOutputError(
            f"{url} does not exist: pass the --output directory of a stats or validate job"
        ) from e
    except json.JSONDecodeError as e:
        raise StatsOutputError(f"{url} is not valid JSON (line {e.lineno}): rerun the stats job") from e
    if not isinstance(doc, dict) or "fields" not in doc:
        raise StatsOutputError(f"{url} is not a stats.json (no 'fields'): pass a stats or validate output")
    return doc  # type: ignore[no-any-return]


class NothingToCompareError(DatapipesError, ValueError):
    """Two profiles share no field (or one is empty): no drift could be measured, so none is reported."""


def check_comparable(a: dict[str, Any], b: dict[str, Any], a_url: str, b_url: str) -> None:
    """Refuse two profiles with no field in common, or an empty one: "0 of N fields drifted" would be
    a pass that checked nothing."""
    both = f"baseline {a_url} and current {b_url}"
    for doc, url in ((a, a_url), (b, b_url)):
        if not doc.get("fields"):
            records = int(doc.get("records", 0))
            raise NothingToCompareError(
                f"nothing to compare between {both}: {url} is an empty profile ({records:,} records, no"
                " fields); rerun its stats job on an --input that has records"
            )
    common = set(a["fields"]) & set(b["fields"])
    if not common:
        raise NothingToCompareError(
            f"nothing to compare: {both} have no field in common (baseline: {_names(a)}; current:"
            f" {_names(b)}); compare two profiles of the same table"
        )


def _names(doc: dict[str, Any], limit: int = 8) -> str:
    names = list(doc["fields"])
    more = f", ... ({len(names)} fields)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def compare_docs(a: dict[str, Any], b: dict[str, Any], schema: Schema | None = None) -> list[Drift]:
    """Every field of either document, baseline ``a`` against current ``b``; the fields' test
    p-values are Holm-adjusted together (:func:`~torchx_datapipes.schema.drift.correct`)."""
    out = []
    names = list(dict.fromkeys([*a.get("fields", {}), *b.get("fields", {})]))
    for name in names:
        fa, fb = a["fields"].get(name), b["fields"].get(name)
        if fa is None or fb is None:
            side = "baseline" if fa is None else "current"
            out.append(Drift(name, "none", 0, 0, checked=False, note=f"absent from the {side} data"))
            continue
        fs = schema.fields.get(name) if schema is not None else None
        if fs is not None and (not fs.drift or fs.id_like):
            out.append(
                Drift(
                    name, "none", fa["count"], fb["count"], checked=False, note="drift not checked (schema)"
                )
            )
            continue
        if fs is None and ("id-like" in fa.get("flags", ()) or "id-like" in fb.get("flags", ())):
            out.append(
                Drift(name, "none", fa["count"], fb["count"], checked=False, note="id-like: not checked")
            )
            continue
        d = compare_field(name, fa, fb)
        method = fs.drift_method if fs is not None else "auto"
        decide(d, method, fs.drift_threshold if fs is not None else None)
        out.append(d)
    return correct(out)  # many fields tested at once: Holm across them


def table(drifts: list[Drift]) -> str:
    """A plain-text table: one line per field."""
    head = f"{'field':<24} {'kind':<11} {'method':<7} {'value':>9} {'±err':>8} {'thresh':>7} {'js':>8} " \
           f"{'psi':>8} {'wass':>8} {'linf':>7}  drift"  # fmt: skip
    lines = [head, "-" * len(head)]
    for d in drifts:
        dist = d.distances
        err = d.errors.get(d.method.replace("_p", ""), 0.0) if d.method else 0.0
        cells = [
            f"{d.field[:24]:<24}",
            f"{d.kind:<11}",
            f"{d.method or '-':<7}",
            _num(d.value, 9),
            _num(err if d.method not in ("ks", "chi2") else None, 8),
            _num(d.threshold, 7),
            _num(dist.get("js"), 8),
            _num(dist.get("psi"), 8),
            _num(dist.get("wasserstein"), 8),
            _num(dist.get("linf"), 7),
        ]
        verdict = "DRIFT" if d.drifted else ("no" if d.checked else f"- ({d.note})")
        lines.append(" ".join(cells) + "  " + verdict)
    return "\n".join(lines)


def _num(v: float | None, width: int) -> str:
    return f"{'-':>{width}}" if v is None else f"{v:>{width}.4g}"


def to_json(drifts: list[Drift], a_url: str, b_url: str) -> dict[str, Any]:
    return {
        "baseline": a_url,
        "current": b_url,
        "drifted": [d.field for d in drifts if d.drifted],
        "fields": [d.to_dict() for d in drifts],
    }
