"""Argument checks of :class:`OutputDataset`, each naming the value given and the accepted ones."""

from typing import Any, Mapping, Optional, Sequence, Tuple

from torchx_datapipes.data._plan import EVEN_MODES
from torchx_datapipes.errors import ReadError


def check_location(url: Any, split: Any, storage_options: Any, cache_dir: Any) -> None:
    if not isinstance(url, str) or not url:
        raise ReadError(f"url={url!r}: expected the output directory, a path or fsspec URL (s3://...)")
    if split is not None and (not isinstance(split, str) or not split):
        raise ReadError(f"split={split!r}: expected a split name such as 'train', or None")
    if storage_options is not None and not isinstance(storage_options, Mapping):
        raise ReadError(f"storage_options={storage_options!r}: expected a dict of fsspec options, or None")
    if cache_dir is not None and (not isinstance(cache_dir, str) or not cache_dir):
        raise ReadError(f"cache_dir={cache_dir!r}: expected a local directory path, or None")


def check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ReadError(f"{name}={value!r}: expected an int >= {minimum}")
    return value


def check_even(even: Any) -> str:
    if even not in EVEN_MODES:
        raise ReadError(
            f"even={even!r}: expected one of {EVEN_MODES} ('none': every record once, ranks may differ"
            " by one; 'pad': repeat records so ranks are equal; 'drop': drop the remainder)"
        )
    return str(even)


def check_columns(columns: Optional[Sequence[str]]) -> Optional[Tuple[str, ...]]:
    if columns is None:
        return None
    if isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
        raise ReadError(f"columns={columns!r}: expected a list of field names, e.g. ['tokens', 'label']")
    return tuple(columns)


def resolve_layout(rank: Optional[int], world_size: Optional[int]) -> Tuple[int, int]:
    """``(rank, world_size)``: the explicit values, else torch.distributed's, else ``(0, 1)``."""
    if (rank is None) != (world_size is None):
        raise ReadError(f"rank={rank!r}, world_size={world_size!r}: give both or neither")
    if rank is None or world_size is None:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return 0, 1
    check_int("world_size", world_size, 1)
    check_int("rank", rank, 0)
    if rank >= world_size:
        raise ReadError(f"rank={rank} with world_size={world_size}: expected 0 <= rank < world_size")
    return rank, world_size


WINDOW_BYTES = 32 << 20  # the stored bytes an automatic shuffle window holds
WINDOW_RECORDS = (1024, 16384)  # its bounds in records


def auto_window(total_bytes: int, records: int) -> int:
    """Records of about ``WINDOW_BYTES`` of stored data, within ``WINDOW_RECORDS``.

    A window is decoded whole before its first record is served, so its size is what a worker
    waits for at the start of a shuffled epoch and what it holds in memory: 16384 records of
    2 KB token rows are 32 MB, but 16384 64x64 images are 200 MB (seconds to decode).
    """
    lo, hi = WINDOW_RECORDS
    if records <= 0 or total_bytes <= 0:
        return hi
    return max(lo, min(hi, WINDOW_BYTES * records // total_bytes))


def check_window(value: Any) -> Optional[int]:
    if value is None:
        return None
    return check_int("shuffle_window", value, 1)
