"""Clean an artifact store: remove artifacts (and their sidecars) older than N days.

Content addressing makes a store grow forever: every edit of a transform is a new file.
:func:`collect` removes each ``{sha256}.{ext}`` whose age -- the time it was last packaged,
per its ``{sha256}.json`` sidecar (``packaged``, else ``created``), or else the file's
modification time -- is over ``keep_days``,
together with its sidecar, plus orphan sidecars and leftover ``*.tmp-*`` files of
interrupted writes by the same rule. Nothing else in the store is touched. A job that is
still running has already loaded its artifact; a relaunch of a job whose artifact was
removed re-packages it (the client packages on every launch).

CLI: ``python -m torchx_datapipes.artifact gc --store DIR_OR_URL --keep-days N [--dry-run]``.
"""

import datetime
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

from torchx_datapipes.artifact import store as _store

_SIDECAR_RE = re.compile(r"([0-9a-f]{64})\.json")
_TMP_RE = re.compile(r"([0-9a-f]{64})\.[a-z]+\.tmp-.*")


@dataclass(frozen=True)
class Removed:
    url: str
    size: int
    age_days: float
    source: str  # where the age came from: "sidecar" or "mtime"


@dataclass(frozen=True)
class GcReport:
    removed: list[Removed] = field(default_factory=list)
    kept: int = 0
    dry_run: bool = False

    @property
    def freed(self) -> int:
        return sum(r.size for r in self.removed)


def _as_utc(value: Any) -> Optional[datetime.datetime]:
    if isinstance(value, datetime.datetime):
        return value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc)
    if isinstance(value, (int, float)):
        return datetime.datetime.fromtimestamp(float(value), datetime.timezone.utc)
    if isinstance(value, str):
        try:
            return _as_utc(datetime.datetime.fromisoformat(value))
        except ValueError:
            return None
    return None


def _mtime(info: Mapping[str, Any]) -> Optional[datetime.datetime]:
    for key in ("mtime", "LastModified", "last_modified", "updated", "created"):
        when = _as_utc(info.get(key))
        if when is not None:
            return when
    return None


def _sidecar_time(fs: Any, path: str) -> Optional[datetime.datetime]:
    """When the artifact was last packaged (``packaged``, else ``created``), per its sidecar."""
    try:
        meta = json.loads(fs.cat_file(path))
        times = [_as_utc(meta.get(key)) for key in ("created", "packaged")]
    except (OSError, ValueError, AttributeError):
        return None  # unreadable or not ours: fall back to the mtime
    return max((t for t in times if t is not None), default=None)


def _group(infos: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """sha256 -> the files of that artifact (artifact, sidecar, tmp leftovers)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for info in infos:
        name = _store.basename(info["name"])
        match = _store.URL_RE.fullmatch(name) or _SIDECAR_RE.fullmatch(name) or _TMP_RE.fullmatch(name)
        if match is not None and info.get("type", "file") == "file":
            groups.setdefault(match.group(1), []).append(info)
    return groups


def collect(
    store_url: str,
    keep_days: float,
    *,
    dry_run: bool = False,
    storage_options: Optional[Mapping[str, Any]] = None,
    now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.timezone.utc),
) -> GcReport:
    """Remove artifacts in ``store_url`` older than ``keep_days``; return what was (or would be) removed."""
    if keep_days < 0:
        raise ValueError(f"--keep-days must be >= 0, got {keep_days}")
    root = _store.normalize_store(store_url)
    fs, path = _store.fs_of(root, storage_options)
    if not fs.exists(path):
        raise FileNotFoundError(
            f"artifact store {root} does not exist; pass the --artifact_store of your jobs"
        )
    cutoff, removed, kept = now(), [], 0
    for sha, files in sorted(_group(list(fs.ls(path, detail=True))).items()):
        sidecar = next((f for f in files if _store.basename(f["name"]) == f"{sha}.json"), None)
        packaged = _sidecar_time(fs, sidecar["name"]) if sidecar is not None else None
        for info in files:
            when, source = (packaged, "sidecar") if packaged is not None else (_mtime(info), "mtime")
            age = (cutoff - when).total_seconds() / 86400 if when is not None else None
            if age is None or age <= keep_days:
                kept += 1
                continue
            if not dry_run:
                fs.rm_file(info["name"])
            url = f"{root}/{_store.basename(info['name'])}"
            removed.append(Removed(url, int(info.get("size") or 0), age, source))
    return GcReport(removed=removed, kept=kept, dry_run=dry_run)


def format_report(report: GcReport, keep_days: float) -> str:
    verb = "would remove" if report.dry_run else "removed"
    lines = [
        f"{verb} {r.url} ({r.size:,} bytes, {r.age_days:.1f} days old by {r.source})" for r in report.removed
    ]
    lines.append(
        f"{verb} {len(report.removed)} file(s), {report.freed / 1e6:.1f} MB;"
        f" kept {report.kept} file(s) at most {keep_days:g} days old"
    )
    return "\n".join(lines)
