"""A committed part file as the reader knows it, and the rule that keeps manifest paths inside the output."""

from dataclasses import dataclass
from typing import Any, Optional, Tuple

from torchx_datapipes.errors import DatapipesError


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
    file is opened, ``_paths.check_inside``).
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
