"""The ``dedup`` op: near (MinHash LSH, verified) or exact duplicates removed or annotated, for any -j.

Its option spec, help and runner (``runner/dedup.py``); the algorithm is ``torchx_datapipes/dedup/``'s.

Manifest keys (``Keys``; the shared ones are ``io/manifest_schema.py``'s):

- ``_SUCCESS`` (``runner/dedup.py``): ``records_out``, ``filtered``, ``output``, ``report`` (the URL
  of ``report.html``: duplicate fraction, cluster sizes, the largest clusters with examples) and
  ``dedup``: the counts (``dedup/counts.py`` ``DedupCounts``: ``records_in``, the records with a
  text field; ``records_out``, ``candidate_pairs``, ``verified_pairs``, ``false_positive_rate``,
  ``clusters``, ``largest_cluster``), ``removed``, ``method``, ``threshold``, ``ngram``, ``bands``,
  ``rows``, ``num_perm``, ``action``, ``verify``, ``partitions``, ``rounds`` (label propagation
  rounds), ``cluster_sizes`` (cluster size -> how many clusters), ``duplicates`` (the ``_dedup``
  directory or null) and ``largest_clusters`` (each ``id``, ``file``, ``line``, ``size``); with
  Parquet ``parquet_schema``, else ``field_types``. Its ``options`` add ``dedup`` (``field``,
  ``method``, ``threshold``, ``ngram``, ``action``, ``cluster_field``, ``verify``, ``partitions``).
- commit records, main pass (``_units/NNNNN.json``): ``records_out``, ``filtered``, ``outputs``,
  ``duplicates`` (records removed or annotated as duplicates), ``examples`` (records of the largest
  clusters: ``[representative, id, jaccard, text]``, for the report); with Parquet ``schemas``,
  else ``field_types``. Its other passes (``_units/NNNNN.<pass>.json``; a task of a pass over a
  keyed exchange, ``runner/exchange.py``, is one partition, its ``unit`` a partition named
  ``_exchange/<stage>/p-PPPPP``): ``map`` (input units) ``texts`` (records with a text field),
  ``line_offset``; ``pairs`` ``pairs`` (candidate pairs of one band partition); ``verify`` and
  ``exact`` ``candidate_pairs``, ``verified_pairs`` (``exact`` also ``clusters``,
  ``largest_cluster``, ``removed``, ``largest_clusters``, ``cluster_sizes``); ``ccN``/``labN``
  (round N) ``proposals`` and ``changed``; ``route`` ``removed``; ``sizes`` ``clusters``,
  ``largest_cluster``, ``removed``, ``largest_clusters`` (``[id, size]`` pairs), ``cluster_sizes``.
"""

from typing import Any, Tuple

from torchx_datapipes.io import manifest_schema as ms
from torchx_datapipes.ops import Keys, OpDef
from torchx_datapipes.ops.common import (
    INPUT_HELP,
    RUNNER_ONLY,
    data_options,
    io_options,
    launch_options,
    ship_options,
)
from torchx_datapipes.options import checks as c
from torchx_datapipes.options.spec import OpSpec, Option

METHODS = ("near", "exact")
ACTIONS = ("drop", "annotate")
NUM_PERM = 128  # MinHash permutations: the threshold picks bands x rows within them (dedup/lsh.py)
MAX_PARTITIONS = 4096


def _threshold(value: Any) -> None:
    if not 0.0 < value < 1.0:
        raise ValueError(
            "must be in (0, 1), the Jaccard similarity of word n-gram sets from which two records are"
            " duplicates, e.g. 0.8 (for identical values use --method exact)"
        )


def _field_name(value: Any) -> None:
    c.non_empty(value)


def fn_option() -> Option:
    return Option(
        "fn",
        "str",
        None,
        "optional function applied to each record first (file.py:fn, pkg.module:fn or artifact URL): it"
        " returns one record, or None to drop the record",
        optional=True,
        runner=False,
    )


def job_options(name: str) -> Tuple[Option, ...]:
    """The usual job options: shipping --fn, sizes, launching, and the runner's own."""
    ship = ship_options(
        "where the client uploads the fn artifact (s3://... for clusters)",
        "how fn is shipped: cloudpickle, torch.package or module",
    )
    return (*ship, *launch_options(name), *RUNNER_ONLY)


def partitions_option() -> Option:
    return Option(
        "partitions",
        "int",
        0,
        "partitions of the keyed exchanges (0: one per 16 MB of input, at least 4, at most"
        f" {MAX_PARTITIONS}); never changes the output, only the memory of each task",
        check=c.between(0, MAX_PARTITIONS),
    )


DEDUP = OpSpec(
    "dedup",
    (
        *io_options(
            INPUT_HELP,
            "output directory: OUTPUT/part-NNNNN.<ext> per unit (the kept records, or all of them"
            " annotated), OUTPUT/_dedup/duplicates-NNNNN.jsonl (drop) and _SUCCESS",
        ),
        Option("field", "str", "text", "the record field holding the text compared", check=_field_name),
        Option(
            "method",
            "str",
            "near",
            "near (MinHash LSH over word n-grams, every candidate verified by exact Jaccard) or exact"
            " (sha256 of the field's bytes)",
            choices=METHODS,
        ),
        Option(
            "threshold",
            "float",
            0.8,
            "near: the Jaccard similarity of the n-gram sets at which two records are duplicates, in"
            " (0, 1); 0.8 uses 16 bands x 8 rows of 128 MinHash values (docs/dedup.md)",
            check=_threshold,
        ),
        Option("ngram", "int", 5, "near: words per shingle (a shorter text: its words)", check=c.at_least(1)),
        Option(
            "action",
            "str",
            "drop",
            "drop (write the kept records, the first of each cluster in input order, and the duplicates"
            " table) or annotate (write every record with --cluster_field added)",
            choices=ACTIONS,
        ),
        Option(
            "cluster_field",
            "str",
            "dedup_cluster",
            "annotate: the field added to every record, the stable id of its cluster's kept record"
            " (file index << 40 | line); split --key on it keeps clusters whole",
            check=_field_name,
        ),
        Option(
            "verify",
            "bool",
            True,
            "near: check every candidate pair by exact Jaccard (false: every LSH candidate pair is a"
            " duplicate, faster, with false positives)",
        ),
        partitions_option(),
        fn_option(),
        *data_options(
            1024,
            "records per batch",
            "raise (stop at the first bad record: unparseable, or without a text --field) or skip (write it"
            " to OUTPUT/_errors/ and go on; it is not written to the output)",
        ),
        *job_options("/dedup"),
    ),
)

_DOC = """Remove (or annotate) near- or exact-duplicate records, exactly once, the same for any -j.

Near: word n-gram shingles, MinHash, LSH bands exchanged by key across ranks, every candidate pair
verified by exact Jaccard, connected components computed across ranks; from each component the
record first in input order (files sorted by path, then line) is kept. Writes
``OUTPUT/part-NNNNN.<ext>`` per unit, ``OUTPUT/_dedup/duplicates-NNNNN.jsonl`` (drop: each removed
record, its kept record and their Jaccard) and ``OUTPUT/_SUCCESS`` with the counts. See docs/dedup.md.
"""

OP = OpDef(
    DEDUP,
    help="remove or annotate near/exact duplicate records",
    runner="torchx_datapipes.runner.dedup:make_op",
    doc=_DOC,
    keys=Keys(
        manifest={
            "dedup": (
                frozenset({ms.RECORDS_OUT, ms.FILTERED, ms.OUTPUT, ms.DEDUP, ms.REPORT}),
                frozenset({ms.PARQUET_SCHEMA, ms.FIELD_TYPES, ms.MEGATRON}),
            )
        },
        options={"dedup": frozenset({ms.DEDUP})},
        records={
            "dedup": (
                frozenset({ms.RECORDS_OUT, ms.FILTERED, ms.OUTPUTS, ms.DUPLICATES, ms.EXAMPLES}),
                frozenset({ms.SCHEMAS, ms.FIELD_TYPES}),
            ),
            "dedup_map": (frozenset({ms.TEXTS, ms.LINE_OFFSET}), frozenset()),
            "dedup_pairs": (frozenset({ms.PAIRS}), frozenset()),
            "dedup_verify": (frozenset({ms.CANDIDATE_PAIRS, ms.VERIFIED_PAIRS}), frozenset()),
            "dedup_exact": (
                frozenset(
                    {
                        ms.CANDIDATE_PAIRS,
                        ms.VERIFIED_PAIRS,
                        ms.CLUSTERS,
                        ms.LARGEST_CLUSTER,
                        ms.REMOVED,
                        ms.LARGEST_CLUSTERS,
                        ms.CLUSTER_SIZES,
                    }
                ),
                frozenset(),
            ),
            "dedup_cc": (frozenset({ms.PROPOSALS}), frozenset()),
            "dedup_lab": (frozenset({ms.CHANGED}), frozenset()),
            "dedup_route": (frozenset({ms.REMOVED}), frozenset()),
            "dedup_sizes": (
                frozenset(
                    {ms.CLUSTERS, ms.LARGEST_CLUSTER, ms.REMOVED, ms.LARGEST_CLUSTERS, ms.CLUSTER_SIZES}
                ),
                frozenset(),
            ),
        },
    ),
)
