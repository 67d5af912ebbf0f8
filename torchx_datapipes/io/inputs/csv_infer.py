"""CSV type inference over whole files with bounded memory (planning, rank 0).

Each file is streamed once through pyarrow's CSV reader with every column read as a string,
block by block (``_BLOCK`` bytes), and each block updates the column kinds with vectorised
``pyarrow.compute`` checks (:class:`csv_types.Inference`); no block is kept, so memory does not
grow with the file. The header is found by a first reader that parses one block only.
Files are inferred by a small thread pool (the parser and the compute kernels release the
GIL), and the results are returned in file order, so the plan does not depend on timing.
"""

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Sequence, Tuple

import pyarrow as pa
import pyarrow.csv as pacsv

from torchx_datapipes.errors import InputError
from torchx_datapipes.io.inputs import csv_types as ct
from torchx_datapipes.io.inputs.base import PlannedFile, open_unit_stream
from torchx_datapipes.io.streams import CorruptError, TruncatedError

_BLOCK = 1 << 20  # pyarrow reads a few blocks ahead: small blocks keep memory flat
FileKinds = Tuple[List[str], Dict[str, str]]  # columns in file order, kind per column


def _open(fh: Any, delimiter: str, na: Sequence[str], columns: Optional[List[str]], block: int) -> Any:
    conv = pacsv.ConvertOptions(
        null_values=list(na),
        strings_can_be_null=True,
        quoted_strings_can_be_null=True,
        column_types={c: pa.string() for c in columns} if columns else None,
    )
    try:
        return pacsv.open_csv(
            fh,
            read_options=pacsv.ReadOptions(use_threads=False, block_size=block),
            parse_options=pacsv.ParseOptions(
                delimiter=delimiter, newlines_in_values=True, invalid_row_handler=lambda _row: "skip"
            ),
            convert_options=conv,
        )
    except pa.ArrowInvalid as e:
        if "Empty CSV file" in str(e):
            return None
        raise


def infer_file(path: str, size: int, delimiter: str, na: Sequence[str]) -> FileKinds:
    """The columns of one CSV file and the kind of each, decided by every cell of the file."""
    try:
        return _infer(path, size, delimiter, na)
    except pa.ArrowInvalid as e:
        raise InputError(f"{path}: cannot parse as CSV ({e}); check --delimiter, or pass --format") from e
    except (TruncatedError, CorruptError) as e:
        raise InputError(
            f"{path}: {e} (column types are inferred over the whole file when planning); re-fetch"
            " or recompress the file (check it with gzip -t / zstd -t / xz -t / bzip2 -t)"
        ) from e


def _infer(path: str, size: int, delimiter: str, na: Sequence[str]) -> FileKinds:
    with open_unit_stream(path, size) as (fh, _):
        head = _open(fh, delimiter, na, None, 1 << 20)
        names: List[str] = list(head.schema.names) if head is not None else []
    if not names:
        return [], {}
    inf = ct.Inference()
    with open_unit_stream(path, size) as (fh, _):
        reader = _open(fh, delimiter, na, names, _BLOCK)
        for batch in reader:
            inf.update(batch)
    return names, {c: inf.kinds.get(c, "null") for c in names}


def infer_files(
    files: Sequence[PlannedFile], delimiters: Sequence[str], na: Sequence[str], threads: int = 0
) -> List[FileKinds]:
    """:func:`infer_file` for each file, ``threads`` at a time (0: the CPU count), in file order."""
    jobs = list(zip(files, delimiters, strict=True))
    n = max(1, min(len(jobs), threads or os.cpu_count() or 1))
    if n == 1:
        return [infer_file(f[0], f[1], d, na) for f, d in jobs]
    with ThreadPoolExecutor(n, thread_name_prefix="csv-infer") as pool:
        futures = [pool.submit(infer_file, f[0], f[1], d, na) for f, d in jobs]
        return [fut.result() for fut in futures]
