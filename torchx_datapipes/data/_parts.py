"""The parts an :class:`OutputDataset` reads, from the committed manifest (``OUT/_SUCCESS``) alone.

Nothing is listed or scanned: the part list, each part's record count, size and checksum come
from the manifest's ``units`` (in unit order), so a reader knows its length before it reads a byte.
The keys read are ``io/manifest_schema.py``'s.
"""

from typing import Any, Dict, List, Mapping, Optional, Tuple

import orjson

from torchx_datapipes.errors import ReadError
from torchx_datapipes.formats.registry import part_reader
from torchx_datapipes.io import manifest_schema as ms
from torchx_datapipes.io.confine import read_small
from torchx_datapipes.io.layout import SUCCESS, block_sums_file, tar_index_file
from torchx_datapipes.io.part import OutsideOutputError, Part, confined

__all__ = ["OutsideOutputError", "Part", "confined", "load_parts"]


def read_success(url: str, storage_options: Optional[Mapping[str, Any]]) -> Dict[str, Any]:

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
        raise ReadError(f"{target} is not valid JSON ({e}): the manifest is damaged; rerun the job") from e
    return data


RECORD_OPS = ("transform", "split", "dedup", "decontaminate")  # ops whose parts hold records


def _check_op(url: str, manifest: Mapping[str, Any]) -> str:
    op = manifest.get(ms.OP)
    if op == "stats":
        raise ReadError(
            f"{url} is a stats output (a report of the input, not records): read it with"
            " torchx_datapipes.stats, or point OutputDataset at a transform or split output"
        )
    if op not in RECORD_OPS:
        raise ReadError(
            f"{url}/_SUCCESS has op {op!r}; OutputDataset reads the outputs of {', '.join(RECORD_OPS)}"
        )
    fmt = str(manifest.get(ms.OPTIONS, {}).get(ms.OPT_OUTPUT_FORMAT, "jsonl"))
    try:
        part_reader(fmt)  # the format registry: a built-in, or a plug-in format declaring a reader
    except ReadError as e:
        raise ReadError(f"{url}: {e}") from e
    return fmt


def _check_split(url: str, manifest: Mapping[str, Any], split: Optional[str]) -> None:
    splits = sorted(manifest.get(ms.SPLITS, {}))
    if manifest[ms.OP] != "split":
        if split is not None:
            raise ReadError(
                f"split={split!r} given, but {url} is a {manifest[ms.OP]} output without splits:"
                " pass split=None"
            )
        return
    if split is None:
        raise ReadError(f"{url} is a split output: choose one with split=..., one of {splits}")
    if split not in splits:
        raise ReadError(f"split {split!r} does not exist in {url}; available splits: {splits}")


def _side(url: str, f: Optional[Mapping[str, Any]]) -> Optional[Tuple[str, int, str]]:
    if f is None:
        return None
    return (f"{url.rstrip('/')}/{f[ms.FILE_PATH]}", int(f[ms.FILE_SIZE]), str(f.get(ms.FILE_XXH3)))


def _unit_parts(url: str, unit: Mapping[str, Any], split: Optional[str]) -> List[Part]:
    unit_name = f"unit {unit.get(ms.UNIT)}"
    files = {
        confined(url, f.get(ms.FILE_PATH), f"{unit_name} files entry"): f for f in unit.get(ms.FILES, [])
    }
    sizes = {p: int(f[ms.FILE_SIZE]) for p, f in files.items()}
    outputs = [confined(url, p, f"{unit_name} output") for p in unit.get(ms.OUTPUTS, [])]
    if split is not None:
        outputs = [p for p in outputs if p.startswith(f"{split}/")]
        counts = [int(unit.get(ms.COUNTS, {}).get(split, 0))] * len(outputs)
    else:
        counts = [int(unit.get(ms.RECORDS_OUT, 0))] * len(outputs)
    if len(outputs) > 1:
        raise ReadError(
            f"{url}/_SUCCESS: unit {unit.get(ms.UNIT)} has {len(outputs)} parts {outputs} for one"
            " split; the per-part record counts are unknown, so this output cannot be read"
        )
    parts = []
    for path, n in zip(outputs, counts):
        if path not in sizes:
            raise ReadError(f"{url}/_SUCCESS: part {path} has no 'files' entry (size); rerun the job")
        idx, sums = _side(url, files.get(tar_index_file(path))), _side(url, files.get(block_sums_file(path)))
        digest = files[path].get(ms.FILE_XXH3)
        root = url.rstrip("/")
        parts.append(Part(f"{root}/{path}", path, sizes[path], n, idx, sums, digest and str(digest), root))
    return parts


def load_parts(
    url: str, split: Optional[str], storage_options: Optional[Mapping[str, Any]] = None
) -> Tuple[str, List[Part]]:
    """``(output_format, parts in unit order)`` of the committed output at ``url``."""
    manifest = read_success(url, storage_options)
    fmt = _check_op(url, manifest)
    _check_split(url, manifest, split)
    parts: List[Part] = []
    for unit in manifest.get(ms.UNITS, []):
        parts.extend(p for p in _unit_parts(url, unit, split) if p.records > 0)
    return fmt, parts
