"""The part formats ``OutputDataset`` reads, by the output's ``output_format`` (one place asks them all)."""

from typing import Dict

from torchx_datapipes.data import _formats, _lines, _parquet, _tar
from torchx_datapipes.data._formats import PartFormat
from torchx_datapipes.data._lines import JsonlFormat
from torchx_datapipes.data._parquet import ParquetFormat
from torchx_datapipes.data._tar import TarFormat


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


def part_format(output_format: str) -> PartFormat:
    formats: Dict[str, PartFormat] = {
        "parquet": ParquetFormat(),
        "jsonl": JsonlFormat(),
        "webdataset": TarFormat(),
    }
    return formats[output_format]
