"""The keys of the job manifest (``OUT/_SUCCESS``) and of the per-unit commit records (``_units/``).

Every module that writes or reads one of these JSON documents names its keys through the
constants below, never by a literal; the names on disk never change (an output written before
must still read), and a new key gets its constant, its line in a docstring and its place in a key
set (``tests/test_manifest_schema.py`` runs real jobs and compares). The keys every op shares are
here; what one op adds (its finalize's keys, its ``options``, its passes' record keys) is declared
and documented in its module (``ops/<op>.py``'s ``Keys``), asked through
``torchx_datapipes.ops.manifest_keys``, ``option_keys`` and ``record_keys``. Where the files live
is ``io/layout.py``'s; the JSON inside them is this module's. The stats profile (``stats.json``:
min, max, histograms...), the cache counters (``cache``: ``cache/stats.py``) and the split drift
report (``drift``: ``split/profile.py``) are their libraries' own schemas.

Job manifest ``_SUCCESS`` (``manifest_version`` 1), written last by rank 0 (``runner/engine.py``
``Engine.commit``, ``io/manifest.py`` ``write_manifest``); read by ``OutputDataset`` and
``to_hf_dataset`` (``data/_parts.py``: ``op``, ``options.output_format``, ``splits``, ``units``),
by a restarted rank (``job``), by the runner's summary line (``runner/main.py``) and returned by
``api.run`` (``RunResult.manifest``) and the runner's ``main``.

- every op (``io/manifest.py`` ``base_manifest``): ``manifest_version`` (this schema's version,
  ``MANIFEST_VERSION``), ``op`` (the op's name: ``transform``, ``split``, ...), ``status``
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
- the op's finalize (its module's ``Keys.manifest``). Keys several ops write: ``records_out``
  (records written), ``filtered`` (records ``fn`` dropped), ``output`` (where the output went);
  with ``--output_format parquet`` ``parquet_schema`` (``formats/parquet/unify.py``: ``fields``,
  ``rewritten_parts``), with JSON Lines or WebDataset ``field_types`` (field -> the value types
  written, ``formats/fieldtypes.py``; read by ``Collate.for_output``); with ``--output_format
  megatron`` ``megatron`` (``formats/megatron/writer.py``: ``dtype``, ``documents``, ``tokens`` and
  ``shards``, each with ``prefix``, ``documents``, ``tokens``, ``first_document``,
  ``first_token``: the parts as one token stream, read by ``data/tokens.py``); with ``--cache``
  ``cache`` (``runner/memo.py``).

``options`` (``runner/engine.py`` ``Engine.options``, part of the job fingerprint): ``format``,
``output_format`` (read by ``data/_parts.py``), ``batch_size``, ``on_error``, ``unit_mb``,
``max_record_mb``, and the op's own (``Op.options``; its module's ``Keys.options``).

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
- the op's pass (its module's ``Keys.records``). Keys several ops' passes write: ``records_out``,
  ``filtered``, ``outputs`` (the unit's parts, relative to the output); with Parquet ``schemas``
  (part -> base64 Arrow schema, ``formats/commit.py``); with JSON Lines or WebDataset
  ``field_types`` (part -> field -> value types); with ``--cache`` ``cache``.
"""

from typing import FrozenSet, Tuple

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
MEGATRON = "megatron"  # the --output_format megatron section (formats/megatron/writer.py)
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
VALIDATE_OPTIONS = frozenset({OPT_VALIDATE_SCHEMA, OPT_VALIDATE_BASELINE, OPT_VALIDATE_FAIL_ON})

RECORD_KEYS = frozenset({FINGERPRINT, UNIT, RECORDS_IN, PARSED, BLANK_LINES, SKIPPED_MEMBERS,
                         RENAMED_JSON_KEYS, BAD, BAD_UNITS, LOST_BYTES, BYTES_READ, ERRORS, STARTED_AT,
                         WALL_S, SLOT, RANK, WORKER, ATTEMPT, FILES})  # fmt: skip
FILE_KEYS = frozenset({FILE_PATH, FILE_SIZE, FILE_XXH3})
SUMMARY_DROPS = frozenset(
    {FINGERPRINT, SCHEMAS, FIELD_TYPES}
)  # a unit summary: the record without these, plus path
