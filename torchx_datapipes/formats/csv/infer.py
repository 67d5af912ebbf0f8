"""CSV type inference over whole files with bounded memory (planning, rank 0).

Each file is streamed once through pyarrow's CSV reader with every column read as bytes (then
text; a cell that is not UTF-8 counts as null here and is a bad record when read), block by
block (``_BLOCK`` bytes; larger blocks, up to the record bound, for a file with longer
records), and each block updates the column kinds with vectorised ``pyarrow.compute`` checks
(:class:`csv_types.Inference`); no block is kept, so memory does not grow with the file. The
header is found by a first reader that parses one block only. Files are inferred by a small
thread pool (the parser and the compute kernels release the GIL), and the results are returned
in file order, so the plan does not depend on timing.
"""

import io
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Sequence, Tuple

import pyarrow as pa
import pyarrow.csv as pacsv

from torchx_datapipes.errors import InputError
from torchx_datapipes.formats import columns as cols
from torchx_datapipes.formats.base import DEFAULT_MAX_RECORD, PlannedFile, open_unit_stream, too_large
from torchx_datapipes.formats.columns import Renames
from torchx_datapipes.formats.csv import types as ct
from torchx_datapipes.formats.csv.lines import RecordLines, Span, Without
from torchx_datapipes.io.streams import CorruptError, TruncatedError

_BLOCK = 1 << 20  # pyarrow reads a few blocks ahead: small blocks keep memory flat
_MARGIN = 1 << 16  # the largest block holds a record of the bound and its neighbours' bytes
_STRADDLES = "straddl"  # pyarrow: "straddling object straddles two block boundaries"
# columns (unique), kinds, parser block, records over, the column names in the file (``columns.Renames``)
FileKinds = Tuple[List[str], Dict[str, str], int, List[Span], Renames]


def _open(
    fh: Any, delimiter: str, na: Sequence[str], columns: Optional[List[str]], block: int, header: bool = True
) -> Any:
    conv = pacsv.ConvertOptions(
        null_values=list(na),
        strings_can_be_null=True,
        quoted_strings_can_be_null=True,
        column_types={c: pa.binary() for c in columns} if columns else None,
    )
    try:
        return pacsv.open_csv(
            fh,
            read_options=pacsv.ReadOptions(
                use_threads=False, block_size=block, autogenerate_column_names=not header
            ),
            parse_options=pacsv.ParseOptions(
                delimiter=delimiter, newlines_in_values=True, invalid_row_handler=lambda _row: "skip"
            ),
            convert_options=conv,
        )
    except pa.ArrowInvalid as e:
        if "Empty CSV file" in str(e):
            return None
        raise


def blocks(max_record: int) -> List[int]:
    """The parser block sizes to try, smallest first: a block must hold the longest record.

    ``_BLOCK`` keeps memory flat for ordinary files; a file with a longer record (a 6 MiB quoted
    field) is parsed again with blocks 8x larger, up to the record bound (``--max_record_mb``).
    """
    cap = max_record + _MARGIN
    out = [min(_BLOCK, cap)]
    while out[-1] < cap:
        out.append(min(out[-1] * 8, cap))
    return out


def without(fh: Any, spans: Sequence[Span]) -> Any:
    """``fh`` without the records over the bound (each replaced by its newlines), or ``fh``."""
    return io.BufferedReader(Without(fh, spans), buffer_size=1 << 20) if spans else fh


def _close(reader: Any) -> None:
    if reader is not None:
        reader.close()


def infer_file(
    path: str,
    size: int,
    delimiter: str,
    na: Sequence[str],
    max_record: int = DEFAULT_MAX_RECORD,
    header: bool = True,
    schema: Optional[Sequence[str]] = None,
) -> FileKinds:
    """The columns of one CSV file, the kind of each (decided by every cell), the parser block and
    the records over the bound (left out of parsing; each is a bad record when read)."""
    sizes = blocks(max_record)
    spans: Optional[List[Span]] = None  # found by streaming once a record is seen over the bound
    i = 0
    while True:
        block = sizes[i]
        try:
            raw, names, kinds, longest = _infer(path, size, delimiter, na, block, spans or [], header, schema)
        except pa.ArrowInvalid as e:
            if _STRADDLES not in str(e):
                raise InputError(parse_error(path, e)) from e
            if i + 1 < len(sizes):
                i += 1  # a record longer than the block: parse again with larger blocks
                continue
            if spans is not None:  # the parser and the record scanner disagree: name the file
                raise InputError(
                    f"{path}: " + too_large("a CSV record", max_record + 1, max_record, True)
                ) from e
            spans = over_bound(path, size, delimiter, max_record, header)
            continue
        except (TruncatedError, CorruptError) as e:
            raise InputError(
                f"{path}: {e} (column types are inferred over the whole file when planning); re-fetch"
                " or recompress the file (check it with gzip -t / zstd -t / xz -t / bzip2 -t)"
            ) from e
        if longest > max_record and spans is None:  # the parser takes up to two blocks: the bound is ours
            spans = over_bound(path, size, delimiter, max_record, header)
            continue
        return names, kinds, block, spans or [], cols.renames(raw, names) if header else []


def over_bound(path: str, size: int, delimiter: str, max_record: int, header: bool = True) -> List[Span]:
    """The records over the bound, streaming the file once (numpy, bounded memory); not the header."""
    lines = RecordLines(delimiter, limit=max_record)
    with open_unit_stream(path, size) as (fh, _):
        while True:
            chunk = fh.read(_BLOCK)
            if not chunk:
                lines.finish()
                break
            lines.feed(chunk)
    if header and lines.spans and lines.spans[0][0] == 1:
        raise InputError(
            f"{path}, line 1: "
            + too_large("the CSV header", lines.spans[0][4], max_record)
            + "; a file without its header cannot be read"
        )
    return lines.spans


def parse_error(path: str, e: Exception) -> str:
    """The message of a file pyarrow cannot parse: an encoding problem, or the delimiter or format."""
    if "UTF8" in str(e) or "UTF-8" in str(e):
        return (
            f"{path}: cannot parse as CSV ({e}): the header is not UTF-8 text (the file is in another"
            " encoding, e.g. latin-1); convert the file to UTF-8, e.g. iconv -f latin1 -t utf-8"
        )
    return f"{path}: cannot parse as CSV ({e}); check --delimiter, or pass --format"


def _infer(
    path: str,
    size: int,
    delimiter: str,
    na: Sequence[str],
    block: int,
    spans: Sequence[Span],
    header: bool = True,
    schema: Optional[Sequence[str]] = None,
) -> Tuple[List[str], List[str], Dict[str, str], int]:
    """Names in the file, columns (unique names), their kinds, and the bytes of the longest row's cells
    (checked against the bound)."""
    with open_unit_stream(path, size) as (fh, _):
        head = _open(without(fh, spans), delimiter, na, None, block, header)
        raw: List[str] = list(head.schema.names) if head is not None else []
        _close(head)
    if not raw:
        return [], [], {}, 0
    names = cols.dedup(raw) if header else cols.headerless(len(raw), schema)
    inf = ct.Inference()
    longest = 0
    with open_unit_stream(path, size) as (fh, _):
        reader = _open(without(fh, spans), delimiter, na, raw, block, header)
        try:
            for batch in reader:
                longest = max(longest, ct.longest_row(batch))
                text, _bad = ct.to_text(
                    ct.renamed(batch, names)
                )  # a cell that is not UTF-8 is a bad record when read
                inf.update(text)
        finally:
            _close(reader)  # now, not at exit: the parser's reading thread calls back into Python
    return raw, names, {c: inf.kinds.get(c, "null") for c in names}, longest


def infer_files(
    files: Sequence[PlannedFile],
    delimiters: Sequence[str],
    na: Sequence[str],
    threads: int = 0,
    max_record: int = DEFAULT_MAX_RECORD,
    header: bool = True,
    schema: Optional[Sequence[str]] = None,
) -> List[FileKinds]:
    """:func:`infer_file` for each file, ``threads`` at a time (0: the CPU count), in file order."""
    jobs = list(zip(files, delimiters, strict=True))
    n = max(1, min(len(jobs), threads or os.cpu_count() or 1))
    if n == 1:
        return [infer_file(f[0], f[1], d, na, max_record, header, schema) for f, d in jobs]
    with ThreadPoolExecutor(n, thread_name_prefix="csv-infer") as pool:
        futures = [pool.submit(infer_file, f[0], f[1], d, na, max_record, header, schema) for f, d in jobs]
        return [fut.result() for fut in futures]
