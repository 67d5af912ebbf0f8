"""The part formats ``OutputDataset`` reads, by the output's ``output_format`` (one place asks them all)."""

import importlib
from typing import Callable, Dict

from torchx_datapipes.data import _formats, _lines, _parquet, _tar
from torchx_datapipes.data._formats import PartFormat
from torchx_datapipes.data._lines import JsonlFormat
from torchx_datapipes.data._parquet import ParquetFormat
from torchx_datapipes.data._tar import TarFormat
from torchx_datapipes.errors import ReadError


def clear_caches() -> None:
    """Forget this process's indexes, footers, kept bytes, row groups and checksums (tests, rewrites)."""
    from torchx_datapipes.data import _verify

    for cache in (
        _parquet._RG_CACHE,
        _parquet._PQ_META,
        _lines._LINE_INDEX,
        _tar._TAR_INDEX,
        _formats._PART_BYTES,
    ):
        cache.clear()
    _verify._SUMS.clear()
    _verify._WHOLE_OK.clear()


_BUILTIN: Dict[str, Callable[[], PartFormat]] = {
    "parquet": ParquetFormat,
    "jsonl": JsonlFormat,
    "webdataset": TarFormat,
}


def part_format(output_format: str) -> PartFormat:
    """The reader of an output format: a built-in, or the ``reader`` its registered writer declares.

    The writer registry (``io/writers``: built-ins, the ``torchx_datapipes.writers`` entry points
    and ``register_writer``) is the one list of output formats, for the option checks, the runner
    and this reader alike.
    """
    if output_format in _BUILTIN:
        return _BUILTIN[output_format]()
    from torchx_datapipes.io.writers import writer_class

    try:
        cls = writer_class(output_format)
    except (ValueError, ImportError) as e:
        raise ReadError(f"output_format {output_format!r} is not readable: {e}") from e
    if not cls.reader:
        raise ReadError(
            f"output_format {output_format!r} (writer {cls.__module__}.{cls.__qualname__}) declares no"
            " reader: give the writer class a reader = 'module:Class' attribute (a PartFormat) to read"
            " its outputs with OutputDataset"
        )
    module, _, attr = cls.reader.partition(":")
    reader: PartFormat = getattr(importlib.import_module(module), attr)()
    return reader
