"""The keys of the job manifest (``OUT/_SUCCESS``) and of the per-unit commit records (``_units/``).

Every module that writes or reads one of these JSON documents names its keys through the
constants below, never by a literal; the names on disk never change (an output written before
must still read), and a new key gets its constant, its line here and its place in the key sets
at the end (``tests/test_manifest_schema.py`` runs real jobs and compares). Where the files live
is ``io/layout.py``'s; the JSON inside them is this module's. The stats profile (``stats.json``:
min, max, histograms...), the cache counters (``cache``: ``cache/stats.py``) and the split drift
report (``drift``: ``split/profile.py``) are their libraries' own schemas.

Job manifest ``_SUCCESS`` (``manifest_version`` 1), written last by rank 0 (``runner/engine.py``
``Engine.commit``, ``io/manifest.py`` ``write_manifest``); read by ``OutputDataset`` and
``to_hf_dataset`` (``data/_parts.py``: ``op``, ``options.output_format``, ``splits``, ``units``),
by a restarted rank (``job``), by the runner's summary line (``runner/main.py``) and returned by
``api.run`` (``RunResult.manifest``) and the runner's ``main``.

- every op (``io/manifest.py`` ``base_manifest``): ``manifest_version`` (this schema's version,
  ``MANIFEST_VERSION``), ``op`` (``transform``, ``split``, ``stats`` or ``validate``), ``status``
  (``SUCCEEDED``), ``created`` (UTC, ISO 8601), ``inputs`` (the input files, each with
  ``path`` and ``size``), ``options`` (what changes the output; below), ``versions`` (``python``,
  ``torch``, ``torchx``, ``cloudpickle``, ``torchx_datapipes``).
- every op (``runner/engine.py``): ``artifact`` (``url`` and ``sha256`` of the packaged function),
  ``job`` (``run_id``: torchrun's run id or null; ``request``: the fingerprint of what was asked
  for; ``fingerprint``: the fingerprint the commit records carry), ``world_size``,
  ``num_workers``, ``assign`` (dynamic or static), ``slots`` (units run per slot),
  ``records_in``, ``bad``, ``blank_lines``, ``skipped_members``, ``renamed_keys``, ``lost_bytes``
  (sums over the units), ``error_rate``, ``max_error_rate``, ``errors_dir`` (``OUT/_errors`` or null),
  ``started_at`` (epoch seconds), ``wall_time_s``, ``units`` (one summary per unit, in unit
  order: below) and, when a tabular input had duplicate column names, ``renamed_columns``
  (``formats/columns.py``: path -> a list of ``column``, ``from``, ``to``).
- transform (``runner/transform.py``): ``records_out``, ``filtered`` (records ``fn`` dropped),
  ``output``; with ``--output_format parquet`` ``parquet_schema`` (``formats/parquet/unify.py``:
  ``fields``, ``rewritten_parts``), with JSON Lines or WebDataset ``field_types`` (field -> the value
  types written, ``formats/fieldtypes.py``; read by ``Collate.for_output``); with ``--cache``
  ``cache`` (``runner/memo.py``).
- transform to a queue (``runner/queue_output.py``): ``records_out``, ``filtered``, ``output``
  (the queue URL without credentials), ``state`` (the ``--state`` directory), ``queue``
  (``job``, ``messages``, ``first_publish_at``, ``max_backlog``, ``backpressure_wait_s``,
  ``peak_backlog``, ``reconnects``); with ``--cache`` ``cache``.
- split (``runner/split.py``): ``records_out``, ``filtered``, ``splits`` (records per split),
  ``fractions``, ``method``, ``seed``, ``key`` (the key fields or null), ``stratify``,
  ``warnings``, ``output``, ``drift``; with ``--stratify`` ``classes`` (class -> records per
  split); with Parquet ``parquet_schema``, with JSON Lines or WebDataset ``field_types``.
- stats (``runner/stats.py``): ``records_described``, ``stats``, ``report``, ``markdown`` (the
  URLs of ``stats.json``, ``report.html``, ``stats.md``).
- validate (``runner/validate.py``): ``records_described``, ``anomalies`` (how many),
  ``stats``, ``anomalies_json``, ``report``.
- tokenize (``runner/tokenize.py``): ``records_out`` (documents), ``filtered``, ``output``,
  ``tokens`` and ``tokenize`` (``dtype``, ``vocab_size``, ``eos``, ``eos_id``, ``tokenizer``,
  ``tokenizer_sha256``, ``field``, ``documents``, ``tokens``, ``decode_check`` and ``shards``: each
  shard in order with ``prefix``, ``documents``, ``tokens``, ``first_document``, ``first_token``,
  ``input`` and ``line_offset``; read by ``data/tokens.py``).
- dedup (``runner/dedup.py``): ``records_out``, ``filtered``, ``output``, ``report`` (the URL of
  ``report.html``: duplicate fraction, cluster sizes, the largest clusters with examples) and ``dedup``: the
  counts (``dedup/counts.py`` ``DedupCounts``: ``records_in``, the records with a text field;
  ``records_out``, ``candidate_pairs``, ``verified_pairs``, ``false_positive_rate``, ``clusters``,
  ``largest_cluster``), ``removed``, ``method``, ``threshold``, ``ngram``, ``bands``, ``rows``,
  ``num_perm``, ``action``, ``verify``, ``partitions``, ``rounds`` (label propagation rounds),
  ``cluster_sizes`` (cluster size -> how many clusters),
  ``duplicates`` (the ``_dedup`` directory or null) and ``largest_clusters`` (each ``id``,
  ``file``, ``line``, ``size``); with Parquet ``parquet_schema``, else ``field_types``.
- decontaminate (``runner/decontaminate.py``): ``records_out``, ``filtered`` (0), ``output`` and
  ``decontaminate`` (``records_in``, ``records_out``, ``removed``, ``reference_records``,
  ``reference_ngrams``, ``ngram``, ``partitions``, ``matches``: the ``_dedup`` directory or null);
  with Parquet ``parquet_schema``, else ``field_types``.

``options`` (``runner/engine.py`` ``Engine.options``, part of the job fingerprint): ``format``,
``output_format`` (read by ``data/_parts.py``), ``batch_size``, ``on_error``, ``unit_mb``,
``max_record_mb``, and the op's own (``Op.options``): split ``fractions``, ``method``, ``seed``,
``key``, ``stratify``; stats ``stats``, ``fn``; validate ``validate`` (``schema``, ``baseline``,
``fail_on``), ``stats``, ``fn``; a queue transform ``queue``; tokenize ``tokenize`` (``field``,
``tokenizer``, ``tokenizer_sha256``, ``eos``, ``dtype``, ``shard_mb``), ``fn``; dedup ``dedup``
(``field``, ``method``, ``threshold``, ``ngram``, ``action``, ``cluster_field``, ``verify``,
``partitions``); decontaminate ``decontaminate`` (``reference``, ``reference_files_sha256``,
``field``, ``reference_field``, ``ngram``, ``partitions``).

A unit summary (``units[i]``, ``runner/commit.py`` ``unit_summary``) is the unit's commit record
without ``fingerprint``, with ``unit`` the unit's index and ``path`` its input file (Parquet's
``schemas`` and the parts' ``field_types`` are dropped at commit). ``data/_parts.py`` reads
``unit``, ``files``, ``outputs``, ``records_out`` and, for split, ``counts``.

Commit record ``_units/NNNNN.json`` (a split's counting pass: ``_units/NNNNN.count.json``), written
by the worker that ran the unit (``runner/engine.py`` ``Engine.process``, ``io/manifest.py``
``write_unit_meta``) once all its files are in place; read on resume (``fingerprint``, ``files``),
at the commit (``runner/commit.py``, the ops' ``finalize``) and rewritten by Parquet's schema
unification (``files``, ``schemas``).

- every pass (``runner/engine.py``): ``fingerprint`` (the job's; a record with another is not
  this job's), ``unit`` (the planned unit, ``formats/unit.py`` ``Unit.to_json``: ``index``,
  ``path``, ``size``, ``start``, ``end``, ``row_group``, ``format``, ``mtime``, ``read``),
  ``records_in``, ``parsed``, ``blank_lines``, ``skipped_members``, ``renamed_keys``,
  ``bad``, ``bad_units``, ``lost_bytes``, ``bytes_read``, ``errors`` (the unit's ``_errors/`` part or null),
  ``started_at``, ``wall_s``, ``slot``, ``rank``, ``worker``, ``attempt``, ``files`` (every file
  the unit wrote, each with ``path``, ``size`` and ``xxh3_128``: ``io/checksum.py`` ``FileSum``; read by
  ``data/_parts.py``, ``io/checksum.py`` and the resume check).
- transform: ``records_out``, ``filtered``, ``outputs`` (the unit's parts, relative); with
  Parquet ``schemas`` (part -> base64 Arrow schema, ``formats/commit.py``); with JSON Lines or
  WebDataset ``field_types`` (part -> field -> value types); with ``--cache`` ``cache``.
- transform to a queue: ``records_out``, ``filtered``, ``outputs`` (empty), ``messages``,
  ``first_publish_at``, ``backpressure_wait_s``, ``peak_backlog``; with ``--cache`` ``cache``.
- split, main pass: ``records_out``, ``filtered``, ``counts`` (records per split), ``outputs``
  (one part per split), ``profile`` (the ``_units/NNNNN.profile`` side file); with Parquet
  ``schemas``; with ``--stratify`` ``class_counts`` (class -> records per split).
- split, counting pass (``--method exact`` or ``--stratify``): ``count``; with ``--stratify``
  ``class_counts`` (class -> records); with hash + stratify ``hashes`` (the ``_split/`` side file).
- stats and validate: ``records_out``, ``filtered``.
- tokenize: ``records_out`` (documents), ``filtered``, ``outputs`` (the unit's ``.bin`` shards),
  ``tokens``, ``shards`` (``prefix``, ``documents``, ``tokens`` of each), ``line_offset`` (lines of
  the input file before the unit's first; null: summed from the earlier units at commit),
  ``decode_check`` (``sampled``, ``tokens_equal``, ``text_equal``).
- dedup, main pass (``_units/NNNNN.json``): ``records_out``, ``filtered``, ``outputs``,
  ``duplicates`` (records removed or annotated as duplicates), ``examples`` (records of the largest
  clusters: ``[representative, id, jaccard, text]``, for the report); with Parquet ``schemas``. Its other
  passes (``_units/NNNNN.<pass>.json``; a task of a pass over a keyed exchange, ``runner/exchange.py``,
  is one partition, its ``unit`` a partition named ``_exchange/<stage>/p-PPPPP``): ``map`` (input
  units) ``texts`` (records with a text field), ``line_offset``; ``pairs`` ``pairs`` (candidate
  pairs of one band partition); ``verify`` and ``exact`` ``candidate_pairs``, ``verified_pairs``
  (``exact`` also ``clusters``, ``largest_cluster``, ``removed``, ``largest_clusters``,
  ``cluster_sizes``);
  ``ccN``/``labN`` (round N) ``proposals`` and ``changed``; ``route`` ``removed``; ``sizes``
  ``clusters``, ``largest_cluster``, ``removed``, ``largest_clusters`` (``[id, size]`` pairs),
  ``cluster_sizes``.
- decontaminate, main pass: ``records_out``, ``filtered``, ``outputs``, ``removed``; with Parquet
  ``schemas``. ``ref`` (a task per reference unit) and ``map``: ``texts``, ``line_offset``;
  ``join`` (a task per partition): ``ngrams`` (distinct reference n-grams), ``hits``.
"""

from typing import Dict, FrozenSet, Tuple

MANIFEST_VERSION = 1
SUCCEEDED = "SUCCEEDED"  # the value of ``status``

# -- _SUCCESS, every op (io/manifest.py base_manifest) --------------------------------------
VERSION = "manifest_version"
OP = "op"
STATUS = "status"
CREATED = "created"
INPUTS = "inputs"
OPTIONS = "options"
VERSIONS = "versions"
# -- _SUCCESS, every op (runner/engine.py) -------------------------------------------------
ARTIFACT = "artifact"
JOB = "job"
WORLD_SIZE = "world_size"
NUM_WORKERS = "num_workers"
ASSIGN = "assign"
SLOTS = "slots"
RECORDS_IN = "records_in"  # also a commit record's
BAD = "bad"  # also a commit record's
BLANK_LINES = "blank_lines"  # also a commit record's
SKIPPED_MEMBERS = "skipped_members"  # also a commit record's
RENAMED_JSON_KEYS = "renamed_keys"  # JSON keys an object repeated, renamed x -> x.1; also a commit record's
LOST_BYTES = "lost_bytes"  # also a commit record's
ERROR_RATE = "error_rate"
MAX_ERROR_RATE = "max_error_rate"
ERRORS_DIR = "errors_dir"
STARTED_AT = "started_at"  # also a commit record's
WALL_TIME_S = "wall_time_s"
UNITS = "units"
RENAMED_COLUMNS = "renamed_columns"
# -- _SUCCESS, the ops' finalize ------------------------------------------------------------
RECORDS_OUT = "records_out"  # also a commit record's
FILTERED = "filtered"  # also a commit record's
OUTPUT = "output"
PARQUET_SCHEMA = "parquet_schema"
CACHE = "cache"  # also a commit record's
STATE = "state"
QUEUE = "queue"
SPLITS = "splits"
FRACTIONS = "fractions"
METHOD = "method"
SEED = "seed"
SPLIT_KEY = "key"
STRATIFY = "stratify"
WARNINGS = "warnings"
DRIFT = "drift"
CLASSES = "classes"
RECORDS_DESCRIBED = "records_described"
STATS = "stats"
REPORT = "report"
MARKDOWN = "markdown"
ANOMALIES = "anomalies"
ANOMALIES_JSON = "anomalies_json"
TOKENS = "tokens"  # also a commit record's
TOKENIZE = "tokenize"
DEDUP = "dedup"  # also the options' section
DECONTAMINATE = "decontaminate"  # also the options' section

# -- inside _SUCCESS sections ------------------------------------------------------------------
INPUT_PATH, INPUT_SIZE = "path", "size"  # inputs[i]
ARTIFACT_URL, ARTIFACT_SHA256 = "url", "sha256"  # artifact
JOB_RUN_ID, JOB_REQUEST, JOB_FINGERPRINT = "run_id", "request", "fingerprint"  # job
PARQUET_FIELDS, PARQUET_REWRITTEN = "fields", "rewritten_parts"  # parquet_schema
RENAMED_COLUMN, RENAMED_FROM, RENAMED_TO = "column", "from", "to"  # renamed_columns[path][i]
QUEUE_JOB_ID, QUEUE_MESSAGES, QUEUE_FIRST_PUBLISH_AT = "job", "messages", "first_publish_at"  # queue
QUEUE_MAX_BACKLOG, QUEUE_WAIT_S, QUEUE_PEAK_BACKLOG = "max_backlog", "backpressure_wait_s", "peak_backlog"
QUEUE_RECONNECTS = "reconnects"
VERSION_PYTHON, VERSION_TORCH, VERSION_TORCHX = "python", "torch", "torchx"  # versions
VERSION_CLOUDPICKLE, VERSION_PACKAGE = "cloudpickle", "torchx_datapipes"
SUMMARY_PATH = "path"  # units[i]: the unit's input file (its ``unit`` is the unit's index)

# -- options (Engine.options and the ops' options) ------------------------------------------
OPT_FORMAT = "format"
OPT_OUTPUT_FORMAT = "output_format"
OPT_BATCH_SIZE = "batch_size"
OPT_ON_ERROR = "on_error"
OPT_UNIT_MB = "unit_mb"
OPT_MAX_RECORD_MB = "max_record_mb"
OPT_FRACTIONS, OPT_METHOD, OPT_SEED, OPT_KEY, OPT_STRATIFY = "fractions", "method", "seed", "key", "stratify"
OPT_STATS, OPT_FN, OPT_VALIDATE, OPT_QUEUE = "stats", "fn", "validate", "queue"
OPT_TOKENIZE = "tokenize"
OPT_VALIDATE_SCHEMA, OPT_VALIDATE_BASELINE, OPT_VALIDATE_FAIL_ON = "schema", "baseline", "fail_on"

# -- commit records: every pass (runner/engine.py) --------------------------------------------
FINGERPRINT = "fingerprint"
UNIT = "unit"
PARSED = "parsed"
BAD_UNITS = "bad_units"
BYTES_READ = "bytes_read"
ERRORS = "errors"
WALL_S = "wall_s"
SLOT = "slot"
RANK = "rank"
WORKER = "worker"
ATTEMPT = "attempt"
FILES = "files"
# -- commit records: the ops' per-unit fields -------------------------------------------------
OUTPUTS = "outputs"
SCHEMAS = "schemas"
FIELD_TYPES = "field_types"  # also in _SUCCESS (formats/fieldtypes.py)
COUNTS = "counts"
PROFILE = "profile"
CLASS_COUNTS = "class_counts"
COUNT = "count"
HASHES = "hashes"
MESSAGES = "messages"
FIRST_PUBLISH_AT = "first_publish_at"
BACKPRESSURE_WAIT_S = "backpressure_wait_s"
PEAK_BACKLOG = "peak_backlog"
SHARDS = "shards"
LINE_OFFSET = "line_offset"
DECODE_CHECK = "decode_check"
TEXTS = "texts"
PAIRS = "pairs"
CANDIDATE_PAIRS = "candidate_pairs"  # also in _SUCCESS's dedup
VERIFIED_PAIRS = "verified_pairs"  # also in _SUCCESS's dedup
CLUSTERS = "clusters"  # also in _SUCCESS's dedup
LARGEST_CLUSTER = "largest_cluster"  # also in _SUCCESS's dedup
LARGEST_CLUSTERS = "largest_clusters"  # also in _SUCCESS's dedup
REMOVED = "removed"  # also in _SUCCESS's dedup
PROPOSALS = "proposals"
CHANGED = "changed"
DUPLICATES = "duplicates"  # also in _SUCCESS's dedup (the _dedup directory)
CLUSTER_SIZES = "cluster_sizes"  # also in _SUCCESS's dedup
EXAMPLES = "examples"
NGRAMS = "ngrams"
HITS = "hits"
MATCHES = "matches"  # in _SUCCESS's decontaminate (the _dedup directory)
# -- inside commit records --------------------------------------------------------------------
FILE_PATH, FILE_SIZE, FILE_XXH3 = "path", "size", "xxh3_128"  # files[i] (io/checksum.py FileSum)
UNIT_INDEX, UNIT_PATH = "index", "path"  # unit (formats/unit.py Unit)
UNIT_FIELDS = frozenset(
    {UNIT_INDEX, UNIT_PATH, "size", "start", "end", "row_group", "format", "mtime", "read"}
)

# -- the key sets: (always present, present when the job asks for them) ------------------------
KeySet = Tuple[FrozenSet[str], FrozenSet[str]]

BASE_KEYS = frozenset({VERSION, OP, STATUS, CREATED, INPUTS, OPTIONS, VERSIONS})
ENGINE_KEYS: KeySet = (
    frozenset({ARTIFACT, JOB, WORLD_SIZE, NUM_WORKERS, ASSIGN, SLOTS, RECORDS_IN, BAD, BLANK_LINES,
               SKIPPED_MEMBERS, RENAMED_JSON_KEYS, LOST_BYTES, ERROR_RATE, MAX_ERROR_RATE, ERRORS_DIR,
               STARTED_AT, WALL_TIME_S, UNITS}),
    frozenset({RENAMED_COLUMNS}),
)  # fmt: skip
OP_KEYS: Dict[str, KeySet] = {  # what each op's finalize adds ("transform_queue": a queue --output)
    "transform": (
        frozenset({RECORDS_OUT, FILTERED, OUTPUT}),
        frozenset({PARQUET_SCHEMA, FIELD_TYPES, CACHE}),
    ),
    "transform_queue": (frozenset({RECORDS_OUT, FILTERED, OUTPUT, STATE, QUEUE}), frozenset({CACHE})),
    "split": (
        frozenset(
            {
                RECORDS_OUT,
                FILTERED,
                SPLITS,
                FRACTIONS,
                METHOD,
                SEED,
                SPLIT_KEY,
                STRATIFY,
                WARNINGS,
                OUTPUT,
                DRIFT,
            }
        ),
        frozenset({CLASSES, PARQUET_SCHEMA, FIELD_TYPES}),
    ),  # fmt: skip
    "stats": (frozenset({RECORDS_DESCRIBED, STATS, REPORT, MARKDOWN}), frozenset()),
    "validate": (frozenset({RECORDS_DESCRIBED, ANOMALIES, STATS, ANOMALIES_JSON, REPORT}), frozenset()),
    "tokenize": (frozenset({RECORDS_OUT, FILTERED, OUTPUT, TOKENS, TOKENIZE}), frozenset()),
    "dedup": (
        frozenset({RECORDS_OUT, FILTERED, OUTPUT, DEDUP, REPORT}),
        frozenset({PARQUET_SCHEMA, FIELD_TYPES}),
    ),
    "decontaminate": (
        frozenset({RECORDS_OUT, FILTERED, OUTPUT, DECONTAMINATE}),
        frozenset({PARQUET_SCHEMA, FIELD_TYPES}),
    ),
}
INPUT_KEYS = frozenset({INPUT_PATH, INPUT_SIZE})
ARTIFACT_KEYS = frozenset({ARTIFACT_URL, ARTIFACT_SHA256})
JOB_KEYS = frozenset({JOB_RUN_ID, JOB_REQUEST, JOB_FINGERPRINT})
VERSIONS_KEYS = frozenset(
    {VERSION_PYTHON, VERSION_TORCH, VERSION_TORCHX, VERSION_CLOUDPICKLE, VERSION_PACKAGE}
)
PARQUET_SCHEMA_KEYS = frozenset({PARQUET_FIELDS, PARQUET_REWRITTEN})
RENAMED_KEYS = frozenset({RENAMED_COLUMN, RENAMED_FROM, RENAMED_TO})
QUEUE_KEYS = frozenset({QUEUE_JOB_ID, QUEUE_MESSAGES, QUEUE_FIRST_PUBLISH_AT, QUEUE_MAX_BACKLOG, QUEUE_WAIT_S,
                        QUEUE_PEAK_BACKLOG, QUEUE_RECONNECTS})  # fmt: skip
ENGINE_OPTIONS = frozenset({OPT_FORMAT, OPT_OUTPUT_FORMAT, OPT_BATCH_SIZE, OPT_ON_ERROR, OPT_UNIT_MB,
                            OPT_MAX_RECORD_MB})  # fmt: skip
OP_OPTIONS: Dict[str, FrozenSet[str]] = {
    "transform": frozenset(),
    "transform_queue": frozenset({OPT_QUEUE}),
    "split": frozenset({OPT_FRACTIONS, OPT_METHOD, OPT_SEED, OPT_KEY, OPT_STRATIFY}),
    "stats": frozenset({OPT_STATS, OPT_FN}),
    "validate": frozenset({OPT_VALIDATE, OPT_STATS, OPT_FN}),
    "tokenize": frozenset({OPT_TOKENIZE, OPT_FN}),
    "dedup": frozenset({DEDUP}),
    "decontaminate": frozenset({DECONTAMINATE}),
}
VALIDATE_OPTIONS = frozenset({OPT_VALIDATE_SCHEMA, OPT_VALIDATE_BASELINE, OPT_VALIDATE_FAIL_ON})

RECORD_KEYS = frozenset({FINGERPRINT, UNIT, RECORDS_IN, PARSED, BLANK_LINES, SKIPPED_MEMBERS,
                         RENAMED_JSON_KEYS, BAD, BAD_UNITS, LOST_BYTES, BYTES_READ, ERRORS, STARTED_AT,
                         WALL_S, SLOT, RANK, WORKER, ATTEMPT, FILES})  # fmt: skip
PASS_KEYS: Dict[str, KeySet] = {  # what each op's pass adds to the record ("split_count": split's count pass)
    "transform": (frozenset({RECORDS_OUT, FILTERED, OUTPUTS}), frozenset({SCHEMAS, FIELD_TYPES, CACHE})),
    "transform_queue": (
        frozenset(
            {RECORDS_OUT, FILTERED, OUTPUTS, MESSAGES, FIRST_PUBLISH_AT, BACKPRESSURE_WAIT_S, PEAK_BACKLOG}
        ),
        frozenset({CACHE}),
    ),  # fmt: skip
    "split": (
        frozenset({RECORDS_OUT, FILTERED, COUNTS, OUTPUTS, PROFILE}),
        frozenset({SCHEMAS, FIELD_TYPES, CLASS_COUNTS}),
    ),
    "split_count": (frozenset({COUNT}), frozenset({CLASS_COUNTS, HASHES})),
    "stats": (frozenset({RECORDS_OUT, FILTERED}), frozenset()),
    "validate": (frozenset({RECORDS_OUT, FILTERED}), frozenset()),
    "tokenize": (
        frozenset({RECORDS_OUT, FILTERED, OUTPUTS, TOKENS, SHARDS, LINE_OFFSET, DECODE_CHECK}),
        frozenset(),
    ),
    "dedup": (
        frozenset({RECORDS_OUT, FILTERED, OUTPUTS, DUPLICATES, EXAMPLES}),
        frozenset({SCHEMAS, FIELD_TYPES}),
    ),
    "dedup_map": (frozenset({TEXTS, LINE_OFFSET}), frozenset()),
    "dedup_pairs": (frozenset({PAIRS}), frozenset()),
    "dedup_verify": (frozenset({CANDIDATE_PAIRS, VERIFIED_PAIRS}), frozenset()),
    "dedup_exact": (
        frozenset(
            {
                CANDIDATE_PAIRS,
                VERIFIED_PAIRS,
                CLUSTERS,
                LARGEST_CLUSTER,
                REMOVED,
                LARGEST_CLUSTERS,
                CLUSTER_SIZES,
            }
        ),
        frozenset(),
    ),
    "dedup_cc": (frozenset({PROPOSALS}), frozenset()),
    "dedup_lab": (frozenset({CHANGED}), frozenset()),
    "dedup_route": (frozenset({REMOVED}), frozenset()),
    "dedup_sizes": (
        frozenset({CLUSTERS, LARGEST_CLUSTER, REMOVED, LARGEST_CLUSTERS, CLUSTER_SIZES}),
        frozenset(),
    ),
    "decontaminate": (
        frozenset({RECORDS_OUT, FILTERED, OUTPUTS, REMOVED}),
        frozenset({SCHEMAS, FIELD_TYPES}),
    ),
    "decontaminate_ref": (frozenset({TEXTS, LINE_OFFSET}), frozenset()),
    "decontaminate_map": (frozenset({TEXTS, LINE_OFFSET}), frozenset()),
    "decontaminate_join": (frozenset({NGRAMS, HITS}), frozenset()),
}
FILE_KEYS = frozenset({FILE_PATH, FILE_SIZE, FILE_XXH3})
SUMMARY_DROPS = frozenset(
    {FINGERPRINT, SCHEMAS, FIELD_TYPES}
)  # a unit summary: the record without these, plus path


def manifest_keys(kind: str) -> KeySet:
    """``(always, optional)`` top-level keys of the ``_SUCCESS`` of a ``kind`` job (an ``OP_KEYS`` key)."""
    always, optional = OP_KEYS[kind]
    return BASE_KEYS | ENGINE_KEYS[0] | always, ENGINE_KEYS[1] | optional


def record_keys(kind: str) -> KeySet:
    """``(always, optional)`` keys of a commit record of a ``kind`` pass (a ``PASS_KEYS`` key)."""
    always, optional = PASS_KEYS[kind]
    return RECORD_KEYS | always, optional


def summary_keys(kind: str) -> KeySet:
    """``(always, optional)`` keys of a unit summary in ``_SUCCESS`` (``units[i]``) of a ``kind`` pass."""
    always, optional = record_keys(kind)
    return (always - SUMMARY_DROPS) | {SUMMARY_PATH}, optional - SUMMARY_DROPS
