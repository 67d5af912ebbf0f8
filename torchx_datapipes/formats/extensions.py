"""Input files by extension: which registered format owns a file (``detect_format``), and ``--format
auto`` resolved per file. The table is built once per set of registered format names: planning
10,000 images asked for it once per file (issue 10's images benchmark)."""

import posixpath
from typing import Dict, List, Optional, Tuple

from torchx_datapipes.formats.base import stem_of
from torchx_datapipes.formats.registry import generation, get_format, input_class, input_names

_TABLES: Dict[int, Tuple[Dict[str, str], Tuple[str, ...], bool]] = {}  # by registry generation


def _extension_table() -> Tuple[Dict[str, str], Tuple[str, ...], bool]:
    """``(extension -> format, extensions longest first, whether every extension starts with a dot)``."""
    key = generation()
    if key not in _TABLES:
        _TABLES.clear()
        table: Dict[str, str] = {}
        for name in input_names():
            try:
                cls = get_format(name).input_class()
            except ImportError:
                continue
            for ext in cls.extensions:
                table.setdefault(ext, name)
        dotted = all(ext.startswith(".") for ext in table)
        _TABLES[key] = table, tuple(sorted(table, key=len, reverse=True)), dotted
    return _TABLES[key]


def _by_extension() -> Dict[str, str]:
    return dict(_extension_table()[0])


def detect_format(path: str) -> Optional[str]:
    """The format that owns the file's extension (after any compression suffix), or None."""
    base = posixpath.basename(stem_of(path)).lower()
    table, longest_first, dotted = _extension_table()
    # the longest matching suffix wins (".tar" under ".tar.gz", ".csv" under "x.1.csv"): with
    # extensions that start with a dot, that is the suffix from the first dot that is one
    if dotted:
        dot = base.find(".", 1)
        while dot > 0:
            if base[dot:] in table:
                return table[base[dot:]]
            dot = base.find(".", dot + 1)
        return None
    for ext in longest_first:
        if base.endswith(ext) and len(base) > len(ext):
            return table[ext]
    return None


def known_extensions() -> List[str]:
    return sorted(_by_extension())


def unknown_extension_error(path: str) -> ValueError:
    by_fmt: Dict[str, List[str]] = {}
    for ext, name in _by_extension().items():
        by_fmt.setdefault(name, []).append(ext)
    listing = "; ".join(f"{n}: {' '.join(sorted(e))}" for n, e in sorted(by_fmt.items()))
    return ValueError(
        f"{path}: unknown input extension; no format owns it. Formats: {listing}."
        f" Pass --format to force one (e.g. --format jsonl), or remove the file from --input"
    )


def resolve(path: str, fmt: str) -> str:
    """The format name to read ``path`` with: ``fmt`` forced, or detected under ``auto``."""
    if fmt != "auto":
        return input_class(fmt).name
    found = detect_format(path)
    if found is None:
        raise unknown_extension_error(path)
    return found


def formats_of(paths: List[str], fmt: str) -> Dict[str, str]:
    return {p: resolve(p, fmt) for p in paths}
