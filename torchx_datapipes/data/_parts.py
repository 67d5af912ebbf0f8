"""The parts an :class:`OutputDataset` reads, from the committed manifest (``OUT/_SUCCESS``) alone.

Nothing is listed or scanned: the part list, each part's record count, size and checksum come
from the manifest's ``units`` (in unit order), so a reader knows its length before it reads a byte.
"""

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

import orjson

from torchx_datapipes.errors import DatapipesError
from torchx_datapipes.io.layout import SUCCESS, block_sums_file, tar_index_file

FORMATS = ("jsonl", "parquet", "webdataset")


@dataclass(frozen=True)
class Part:
    """One committed part file: its URL, relative path, size in bytes and record count.

    ``index``: ``(url, size, xxh3_128)`` of a WebDataset part's committed offset index, if any;
    ``sums``: the same of its block checksums (``io/blocksums.py``), None for outputs written
    before them; ``xxh3_128``: the whole part's checksum; ``root``: the output directory.
    """

    url: str
    path: str
    size: int
    records: int
    index: Optional[Tuple[str, int, str]] = None
    sums: Optional[Tuple[str, int, str]] = None
    xxh3_128: Optional[str] = None
    root: str = ""


class OutsideOutputError(DatapipesError, ValueError):
    """A path from the manifest leads outside the output directory (``..``, absolute, a symlink)."""


def confined(url: str, path: Any, what: str) -> str:
    """``path`` if it names a file inside the output ``url``; else a ValueError naming the entry.

    A manifest path is relative, with no ``..``, ``.`` or empty component: an edited ``_SUCCESS``
    must not make a reader serve a file outside the output (symlinks are checked when a local
    file is opened, ``_files.check_inside``).
    """
    bad = ""
    if not isinstance(path, str) or not path:
        bad = "it is not a non-empty string"
    elif path.startswith(("/", "\\")) or "://" in path or (len(path) > 1 and path[1] == ":"):
        bad = "it is absolute"
    elif any(c in ("", ".", "..") for c in path.replace("\\", "/").split("/")):
        bad = "it has a '..', '.' or empty component"
    if bad:
        raise OutsideOutputError(
            f"{url}/_SUCCESS: {what} {path!r} points outside the output directory ({bad}): the"
            " manifest was edited or damaged after the commit, and this reader only reads files"
            " inside the output. Re-run the job with --overwrite True to rewrite the output, or"
            " restore its _SUCCESS"
        )
    return path


def _read_success(url: str, storage_options: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    from torchx_datapipes.data._files import read_small

    target = f"{url.rstrip('/')}/{SUCCESS}"
    try:
        raw = read_small(target, storage_options)
    except FileNotFoundError as e:
        raise FileNotFoundError(
            f"{target} does not exist: the job writing {url} has not committed (it is still running,"
            " failed, or this is not an output directory). Wait for it to finish or rerun it; only"
            " a committed output can be read."
        ) from e
    try:
        data: Dict[str, Any] = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise ValueError(f"{target} is not valid JSON ({e}): the manifest is damaged; rerun the job") from e
    return data


def _check_op(url: str, manifest: Mapping[str, Any]) -> str:
    op = manifest.get("op")
    if op == "stats":
        raise ValueError(
            f"{url} is a stats output (a report of the input, not records): read it with"
            " torchx_datapipes.stats, or point OutputDataset at a transform or split output"
        )
    if op not in ("transform", "split"):
        raise ValueError(f"{url}/_SUCCESS has op {op!r}; OutputDataset reads 'transform' and 'split' outputs")
    fmt = manifest.get("options", {}).get("output_format", "jsonl")
    if fmt not in FORMATS:
        raise ValueError(f"{url}: output_format {fmt!r} is not readable; readable formats: {FORMATS}")
    return str(fmt)


def _check_split(url: str, manifest: Mapping[str, Any], split: Optional[str]) -> None:
    splits = sorted(manifest.get("splits", {}))
    if manifest["op"] != "split":
        if split is not None:
            raise ValueError(
                f"split={split!r} given, but {url} is a {manifest['op']} output without splits:"
                " pass split=None"
            )
        return
    if split is None:
        raise ValueError(f"{url} is a split output: choose one with split=..., one of {splits}")
    if split not in splits:
        raise ValueError(f"split {split!r} does not exist in {url}; available splits: {splits}")


def _side(url: str, f: Optional[Mapping[str, Any]]) -> Optional[Tuple[str, int, str]]:
    if f is None:
        return None
    return (f"{url.rstrip('/')}/{f['path']}", int(f["size"]), str(f.get("xxh3_128")))


def _unit_parts(url: str, unit: Mapping[str, Any], split: Optional[str]) -> List[Part]:
    unit_name = f"unit {unit.get('unit')}"
    files = {confined(url, f.get("path"), f"{unit_name} files entry"): f for f in unit.get("files", [])}
    sizes = {p: int(f["size"]) for p, f in files.items()}
    outputs = [confined(url, p, f"{unit_name} output") for p in unit.get("outputs", [])]
    if split is not None:
        outputs = [p for p in outputs if p.startswith(f"{split}/")]
        counts = [int(unit.get("counts", {}).get(split, 0))] * len(outputs)
    else:
        counts = [int(unit.get("records_out", 0))] * len(outputs)
    if len(outputs) > 1:
        raise ValueError(
            f"{url}/_SUCCESS: unit {unit.get('unit')} has {len(outputs)} parts {outputs} for one"
            " split; the per-part record counts are unknown, so this output cannot be read"
        )
    parts = []
    for path, n in zip(outputs, counts):
        if path not in sizes:
            raise ValueError(f"{url}/_SUCCESS: part {path} has no 'files' entry (size); rerun the job")
        idx, sums = _side(url, files.get(tar_index_file(path))), _side(url, files.get(block_sums_file(path)))
        digest = files[path].get("xxh3_128")
        root = url.rstrip("/")
        parts.append(Part(f"{root}/{path}", path, sizes[path], n, idx, sums, digest and str(digest), root))
    return parts


def load_parts(
    url: str, split: Optional[str], storage_options: Optional[Mapping[str, Any]] = None
) -> Tuple[str, List[Part]]:
    """``(output_format, parts in unit order)`` of the committed output at ``url``."""
    manifest = _read_success(url, storage_options)
    fmt = _check_op(url, manifest)
    _check_split(url, manifest, split)
    parts: List[Part] = []
    for unit in manifest.get("units", []):
        parts.extend(p for p in _unit_parts(url, unit, split) if p.records > 0)
    return fmt, parts
