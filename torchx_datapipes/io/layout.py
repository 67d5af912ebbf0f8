"""The output layout's reserved names, owned here and nowhere else.

An output directory holds the committed parts (``part-NNNNN.<ext>``, under ``<split>/`` for
split), per-unit commit records and side files (``_units/``), bad records (``_errors/``), the
offset indexes of WebDataset parts (``_index/part-NNNNN.tar.idx`` beside each part), every
part's block checksums (``_index/part-NNNNN.<ext>.sums``), the
output lease (``_LEASE``, renamed ``_LEASE.stale-<token>`` when taken over), temporary files of
atomic writes (``.tmp-<uuid>-<name>``, renamed into place or removed), a keyed exchange's spill files
(``_exchange/<stage>/p-PPPPP/<task>.bin``, removed at the commit), dedup's duplicates table
(``_dedup/``), and last the manifest
``_SUCCESS``. Anything starting with ``_`` or ``.`` is bookkeeping, never data. What of a directory
counts as ours (and what ``--overwrite`` may delete) is decided in ``io/ownership.py``.
"""

import os
import uuid

SUCCESS = "_SUCCESS"
UNITS_DIR = "_units"
ERRORS_DIR = "_errors"
LEASE = "_LEASE"
QUEUE_JOB = "_queue_job.json"  # a queue output's --state: the job id its message ids carry
STALE_LEASE_PREFIX = f"{LEASE}.stale-"
INDEX_DIR = "_index"
SPLIT_DIR = "_split"  # split's side files (thresholds, hashes)
EXCHANGE_DIR = "_exchange"  # keyed exchanges' spill files (runner/exchange.py), removed at commit
DEDUP_DIR = "_dedup"  # dedup's duplicates table (_dedup/duplicates-NNNNN.jsonl): a report, not data
PART_PREFIX = "part-"
TMP_PREFIX = ".tmp-"


def part_file(index: int, ext: str) -> str:
    """``part-00007.jsonl``: the name of unit ``index``'s part."""
    return f"{PART_PREFIX}{index:05d}.{ext}"


def tar_index_file(part: str) -> str:
    """``_index/part-00007.tar.idx`` beside ``part-00007.tar`` (a path relative to the output or a URL).

    A ``_`` directory: input planners skip it, and ``OUT/*.tar`` (WebDataset's glob) never matches it.
    """
    parent, _, base = part.rpartition("/")
    return f"{parent}/{INDEX_DIR}/{base}.idx" if parent else f"{INDEX_DIR}/{base}.idx"


def block_sums_file(part: str) -> str:
    """``_index/part-00007.jsonl.sums`` beside ``part-00007.jsonl``: its block checksums (io/blocksums.py)."""
    parent, _, base = part.rpartition("/")
    return f"{parent}/{INDEX_DIR}/{base}.sums" if parent else f"{INDEX_DIR}/{base}.sums"


def unit_file(unit_name: str, suffix: str = "json") -> str:
    """``_units/00007.json`` (the commit record) or ``_units/00007.stats`` (a side file), relative."""
    return f"{UNITS_DIR}/{unit_name}.{suffix}"


def error_part(unit_name: str) -> str:
    """``_errors/part-00007.jsonl``: a unit's bad records, relative to the output."""
    return f"{ERRORS_DIR}/{PART_PREFIX}{unit_name}.jsonl"


def tmp_beside(path: str) -> str:
    """A unique temporary name in ``path``'s directory, renamed onto ``path`` when complete."""
    return f"{os.path.dirname(path)}/{TMP_PREFIX}{uuid.uuid4().hex}-{os.path.basename(path)}"


def is_bookkeeping(name: str) -> bool:
    """A path component the layout reserves (``_SUCCESS``, ``_units``, ``.tmp-...``): never input data."""
    return name.startswith(("_", "."))
