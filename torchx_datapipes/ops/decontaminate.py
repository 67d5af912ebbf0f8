"""The ``decontaminate`` op: drop every input record that shares a word n-gram with a reference set.

Its option spec, help and runner (``runner/decontaminate.py``); the n-gram rules are
``torchx_datapipes/dedup/decontam.py``'s.

Manifest keys (``Keys``; the shared ones are ``io/manifest_schema.py``'s):

- ``_SUCCESS`` (``runner/decontaminate.py``): ``records_out``, ``filtered`` (0), ``output`` and
  ``decontaminate`` (``records_in``, ``records_out``, ``removed``, ``reference_records``,
  ``reference_ngrams``, ``ngram``, ``partitions``, ``matches``: the ``_dedup`` directory or null);
  with Parquet ``parquet_schema``, with megatron ``megatron``, else ``field_types``. Its
  ``options`` add ``decontaminate`` (``reference``, ``reference_files_sha256``, ``field``,
  ``reference_field``, ``ngram``, ``partitions``).
- commit records, main pass: ``records_out``, ``filtered``, ``outputs``, ``removed``; with Parquet
  ``schemas``, else ``field_types``. ``ref`` (a task per reference unit) and ``map``: ``texts``,
  ``line_offset``; ``join`` (a task per partition): ``ngrams`` (distinct reference n-grams),
  ``hits``.
"""

from typing import Any, Dict, Mapping

from torchx_datapipes.io import manifest_schema as ms
from torchx_datapipes.ops import Keys, OpDef
from torchx_datapipes.ops.common import INPUT_HELP, data_options, io_options
from torchx_datapipes.ops.dedup import fn_option, job_options, partitions_option
from torchx_datapipes.options import checks as c
from torchx_datapipes.options.spec import OpSpec, Option, OptionError

REFERENCE_HELP = (
    "required: the reference records (benchmarks, eval sets): a path, glob, directory or comma-separated"
    " list, in any format --input takes"
)


def require_reference(value: Any) -> str:
    """``--reference``, or a one-line OptionError naming it and what it takes."""
    if not isinstance(value, str) or not value.strip():
        raise OptionError(f"decontaminate: --reference is required ({REFERENCE_HELP[len('required: ') :]})")
    return value


def check_together(arguments: Mapping[str, Any]) -> Dict[str, Any]:
    """The component's checks beyond single options: --reference is given, and its local files exist;
    relative local paths are made absolute where the job shares this machine's files (refused
    elsewhere, as for --input)."""
    import os

    from torchx_datapipes import target
    from torchx_datapipes.io.fs import expand_input_files, join_patterns, split_patterns

    out = dict(arguments)
    patterns = split_patterns(require_reference(out.get("reference")))
    where = target.current()
    local = [p for p in patterns if "://" not in p or p.startswith("file://")]
    if local and where.shares_client_fs:
        try:
            expand_input_files(local)
        except FileNotFoundError as e:
            raise OptionError(f"decontaminate --reference: {e}") from e
    placed = []
    for p in patterns:
        if "://" in p or os.path.isabs(p):
            placed.append(p)
        elif where.shares_client_fs:
            placed.append(os.path.abspath(os.path.expanduser(p)))
        else:
            raise OptionError(
                f"decontaminate --reference {p!r} is a path relative to this machine's working directory,"
                f" which a {where.scheduler} job cannot see: pass a URL every node can read (e.g."
                " s3://bucket/evals/*.jsonl) or an absolute path that every node mounts (see --mounts)"
            )
    out["reference"] = join_patterns(placed)
    return out


DECONTAMINATE = OpSpec(
    "decontaminate",
    (
        *io_options(
            INPUT_HELP,
            "output directory: OUTPUT/part-NNNNN.<ext> per unit (the records kept),"
            " OUTPUT/_dedup/contaminated-NNNNN.jsonl (each removed record and its reference match) and"
            " _SUCCESS",
        ),
        Option(
            "reference",
            "str",
            None,  # required (check_together, make_op), but not by argparse: the parser is shared
            REFERENCE_HELP,
            optional=True,
            check=c.non_empty,
        ),
        Option("field", "str", "text", "the record field holding the text", check=c.non_empty),
        Option(
            "reference_field",
            "str",
            None,
            "the reference records' text field (default: --field)",
            optional=True,
            check=c.non_empty,
        ),
        Option(
            "ngram",
            "int",
            13,
            "words per n-gram (lowercase \\w+ runs); a text shorter than that is one n-gram of all its words",
            check=c.at_least(1),
        ),
        partitions_option(),
        fn_option(),
        *data_options(
            1024,
            "records per batch",
            "raise (stop at the first bad record: unparseable, or without a text field, in the input or the"
            " reference) or skip (input: write it to OUTPUT/_errors/; reference: leave it out) and go on",
        ),
        *job_options("/decontaminate"),
    ),
)

_DOC = """Remove every input record that shares a word n-gram with any reference record, for any -j.

Both sides are read by every rank in units and their n-grams (128-bit hashes) exchanged by key, so
no rank holds the whole reference. Writes ``OUTPUT/part-NNNNN.<ext>`` per unit with the records kept,
``OUTPUT/_dedup/contaminated-NNNNN.jsonl`` (per removed record: the smallest reference id sharing
an n-gram, its file and line, the first shared n-gram and how many are shared) and
``OUTPUT/_SUCCESS`` with the counts. See docs/dedup.md.
"""

OP = OpDef(
    DECONTAMINATE,
    help="remove records sharing an n-gram with a reference set",
    runner="torchx_datapipes.runner.decontaminate:make_op",
    doc=_DOC,
    keys=Keys(
        manifest={
            "decontaminate": (
                frozenset({ms.RECORDS_OUT, ms.FILTERED, ms.OUTPUT, ms.DECONTAMINATE}),
                frozenset({ms.PARQUET_SCHEMA, ms.FIELD_TYPES, ms.MEGATRON}),
            )
        },
        options={"decontaminate": frozenset({ms.DECONTAMINATE})},
        records={
            "decontaminate": (
                frozenset({ms.RECORDS_OUT, ms.FILTERED, ms.OUTPUTS, ms.REMOVED}),
                frozenset({ms.SCHEMAS, ms.FIELD_TYPES}),
            ),
            "decontaminate_ref": (frozenset({ms.TEXTS, ms.LINE_OFFSET}), frozenset()),
            "decontaminate_map": (frozenset({ms.TEXTS, ms.LINE_OFFSET}), frozenset()),
            "decontaminate_join": (frozenset({ms.NGRAMS, ms.HITS}), frozenset()),
        },
    ),
)
