"""The schema: what valid data looks like, as human-editable JSON (``docs/validate.md``).

One :class:`FieldSchema` per field and a few data-set rules (:class:`Schema`). Loading checks
every key and value and names the bad one; unknown keys are refused, so a typo in a hand-edited
schema is an error, not a silently ignored rule.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import fsspec

from torchx_datapipes.errors import DatapipesError

SCHEMA_VERSION = 1
TYPES = ("int", "float", "decimal", "bool", "string", "bytes", "datetime", "date", "list", "tensor", "object")
SEVERITIES = ("error", "warning", "info")
KINDS = (
    "missing_field",
    "new_field",
    "type_mismatch",
    "low_presence",
    "out_of_range",
    "unexpected_values",
    "nan_present",
    "shape_mismatch",
    "record_count",
    "drift",
)
DEFAULT_SEVERITY = {k: "error" for k in KINDS} | {"new_field": "warning", "drift": "warning"}
DRIFT_METHODS = ("auto", "linf", "js", "psi", "wasserstein", "ks", "chi2")


class SchemaError(DatapipesError, ValueError):
    """A schema file is not valid: the message names the file, the key and the value."""


@dataclass
class FieldSchema:
    """The rules for one field; ``None`` means "not checked"."""

    type: list[str]
    required: bool = False
    min_fraction: float = 0.0
    min: float | None = None
    max: float | None = None
    domain: list[str] | None = None
    allow_nan: bool = False
    allow_inf: bool = False
    dtype: list[str] | None = None
    shape: list[int] | None = None
    id_like: bool = False
    drift: bool = True
    drift_method: str = "auto"
    drift_threshold: float | None = None

    def check(self, where: str) -> None:
        for t in self.type:
            if t not in TYPES:
                raise SchemaError(f"{where}.type: {t!r} is not a type; use one of {', '.join(TYPES)}")
        if not 0.0 <= self.min_fraction <= 1.0:
            raise SchemaError(f"{where}.min_fraction: {self.min_fraction!r} must be in [0, 1]")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise SchemaError(f"{where}: min {self.min} > max {self.max}; swap them")
        if self.drift_method not in DRIFT_METHODS:
            raise SchemaError(
                f"{where}.drift_method: {self.drift_method!r} is not one of {', '.join(DRIFT_METHODS)}"
            )
        if self.drift_threshold is not None and self.drift_threshold < 0:
            raise SchemaError(f"{where}.drift_threshold: {self.drift_threshold!r} must be >= 0")


@dataclass
class Schema:
    """Field rules plus data-set rules (record counts, severities, drift defaults)."""

    fields: dict[str, FieldSchema]
    min_records: int = 1
    max_records: int | None = None
    severity: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_SEVERITY))
    source: dict[str, Any] = field(default_factory=dict)

    def severity_of(self, kind: str) -> str:
        return self.severity.get(kind, DEFAULT_SEVERITY[kind])

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "source": self.source,
            "min_records": self.min_records,
            "max_records": self.max_records,
            "severity": self.severity,
            "fields": {name: asdict(f) for name, f in self.fields.items()},
        }

    def dumps(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n"

    @staticmethod
    def from_dict(d: dict[str, Any], where: str = "schema") -> Schema:
        if not isinstance(d, dict) or "fields" not in d:
            raise SchemaError(f"{where}: not a schema (no 'fields'); make one with: schema infer STATS_OUT")
        version = d.get("schema_version", SCHEMA_VERSION)
        if version != SCHEMA_VERSION:
            raise SchemaError(f"{where}: schema_version {version!r} is not supported (this build reads 1)")
        _no_unknown(
            d, {"schema_version", "source", "min_records", "max_records", "severity", "fields"}, where
        )
        severity = dict(DEFAULT_SEVERITY)
        for kind, sev in (d.get("severity") or {}).items():
            if kind not in KINDS or sev not in SEVERITIES:
                raise SchemaError(
                    f"{where}.severity: {kind!r}: {sev!r} is not valid; kinds: {', '.join(KINDS)};"
                    f" severities: {', '.join(SEVERITIES)}"
                )
            severity[kind] = sev
        fields = {}
        known = set(FieldSchema.__dataclass_fields__)
        for name, fd in d["fields"].items():
            at = f"{where}.fields[{name!r}]"
            if not isinstance(fd, dict):
                raise SchemaError(f"{at}: expected an object, got {fd!r}")
            _no_unknown(fd, known, at)
            fd = dict(fd)
            if isinstance(fd.get("type"), str):
                fd["type"] = [fd["type"]]
            try:
                fs = FieldSchema(**fd)
            except TypeError as e:
                raise SchemaError(f"{at}: {e}") from e
            fs.check(at)
            fields[str(name)] = fs
        return Schema(
            fields=fields,
            min_records=int(d.get("min_records", 1) or 0),
            max_records=d.get("max_records"),
            severity=severity,
            source=dict(d.get("source") or {}),
        )

    @staticmethod
    def load(url: str) -> Schema:
        try:
            with fsspec.open(url, "rt", encoding="utf-8") as f:
                d = json.load(f)
        except json.JSONDecodeError as e:
            raise SchemaError(f"{url}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from e
        return Schema.from_dict(d, url)


def _no_unknown(d: dict[str, Any], known: set[str], where: str) -> None:
    unknown = sorted(set(d) - known)
    if unknown:
        raise SchemaError(
            f"{where}: unknown key(s) {', '.join(unknown)}; known keys: {', '.join(sorted(known))}"
        )
