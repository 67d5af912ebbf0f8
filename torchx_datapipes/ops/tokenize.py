"""The ``tokenize`` op: records to Megatron ``.bin``/``.idx`` shards (its option spec, help and runner).

Also the tokenizer's loading (a Hugging Face ``tokenizer.json`` through fsspec, with the
``tokenizers`` library of the ``tokenize`` extra), shared by the client's checks and the runner,
and the checks that need several options at once (``--eos`` in the vocabulary, ``--dtype`` wide
enough for it), which the component runs before anything launches.

Manifest keys (``Keys``; the shared ones are ``io/manifest_schema.py``'s):

- ``_SUCCESS`` (``runner/tokenize.py``): ``records_out`` (documents), ``filtered``, ``output``,
  ``tokens`` and ``tokenize`` (``dtype``, ``vocab_size``, ``eos``, ``eos_id``, ``tokenizer``,
  ``tokenizer_sha256``, ``field``, ``documents``, ``tokens``, ``decode_check`` and ``shards``: each
  shard in order with ``prefix``, ``documents``, ``tokens``, ``first_document``, ``first_token``,
  ``input`` and ``line_offset``; read by ``data/tokens.py``). Its ``options`` add ``tokenize``
  (``field``, ``tokenizer``, ``tokenizer_sha256``, ``eos``, ``dtype``, ``shard_mb``) and ``fn``.
- commit records: ``records_out`` (documents), ``filtered``, ``outputs`` (the unit's ``.bin``
  shards), ``tokens``, ``shards`` (``prefix``, ``documents``, ``tokens`` of each), ``line_offset``
  (lines of the input file before the unit's first; null: summed from the earlier units at
  commit), ``decode_check`` (``sampled``, ``tokens_equal``, ``text_equal``).
"""

import functools
import hashlib
import os
from dataclasses import dataclass
from typing import Any, Dict, Mapping

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
from torchx_datapipes.options.spec import OpSpec, Option, OptionError

EXTRA_HINT = "pip install 'torchx-datapipes[tokenize]'"
DTYPES = ("auto", "uint16", "int32", "int64")
_DTYPE_MAX = {"uint16": 65535, "int32": 2**31 - 1, "int64": 2**63 - 1}
UINT16_VOCAB_LIMIT = 65500  # Megatron's DType.optimal_dtype (formats/megatron/index.py, without numpy)


def import_tokenizers() -> Any:
    try:
        import tokenizers
    except ImportError as e:
        raise ImportError(f"--tokenizer needs the tokenizers library: {EXTRA_HINT}") from e
    return tokenizers


@dataclass(frozen=True)
class LoadedTokenizer:
    """A tokenizer and what the output records of it: its file's sha256 and vocabulary size."""

    url: str
    sha256: str
    tokenizer: Any  # tokenizers.Tokenizer (not picklable across versions: ship the URL, not this)

    @property
    def vocab_size(self) -> int:
        return int(self.tokenizer.get_vocab_size(with_added_tokens=True))

    def token_id(self, token: str) -> int:
        """The id of ``token`` (``--eos``), or a ValueError naming it, the tokenizer and the fix."""
        tid = self.tokenizer.token_to_id(token)
        if tid is None:
            specials = sorted(t.content for t in self.tokenizer.get_added_tokens_decoder().values())
            raise ValueError(
                f"{token!r} is not a token of {self.url}; its added (special) tokens are"
                f" {specials[:10]}: pass one of them, or omit --eos to append nothing"
            )
        return int(tid)


def read_tokenizer(url: str) -> LoadedTokenizer:
    """Load a ``tokenizer.json`` from a path or any fsspec URL (errors name the URL and the fix)."""
    from torchx_datapipes.io.fs import read_bytes

    tokenizers = import_tokenizers()
    try:
        data = read_bytes(url)
    except FileNotFoundError as e:
        raise ValueError(f"{url} does not exist: pass a Hugging Face tokenizer.json (path or URL)") from e
    try:
        tok = tokenizers.Tokenizer.from_str(data.decode("utf-8"))
    except Exception as e:  # the library raises its own Exception for a malformed file
        raise ValueError(
            f"{url} is not a Hugging Face tokenizer.json ({type(e).__name__}: {str(e)[:200]}): pass the"
            " tokenizer.json saved by tokenizers or transformers (tokenizer.save / save_pretrained)"
        ) from e
    return LoadedTokenizer(url, hashlib.sha256(data).hexdigest(), tok)


def _is_local(url: str) -> bool:
    return "://" not in url or url.startswith("file://")


@functools.lru_cache(maxsize=4)
def _client_tokenizer(url: str) -> LoadedTokenizer:
    return read_tokenizer(url)


def resolve_dtype(dtype: str, vocab_size: int) -> str:
    """``--dtype`` as written to the shards: auto is Megatron's choice; a too narrow one is refused."""
    if dtype == "auto":
        return "uint16" if vocab_size < UINT16_VOCAB_LIMIT else "int32"
    if vocab_size - 1 > _DTYPE_MAX[dtype]:
        raise ValueError(
            f"--dtype {dtype} cannot hold the ids of a vocabulary of {vocab_size:,} tokens: pass --dtype"
            " auto or int32"
        )
    return dtype


def _tokenizer_check(value: Any) -> None:
    if _is_local(value):  # a remote tokenizer is loaded (and checked) where the job runs
        _client_tokenizer(value)
    else:
        import_tokenizers()


def check_together(arguments: Mapping[str, Any]) -> Dict[str, Any]:
    """The checks that need several options (``--eos`` is a token, ``--dtype`` holds every id), run by
    the component before launch for a local tokenizer; returns the arguments with a relative
    ``--tokenizer`` made absolute where the job shares this machine's files (refused elsewhere)."""
    out = dict(arguments)
    url, eos, dtype = require_tokenizer(out.get("tokenizer")), out.get("eos"), out.get("dtype", "auto")
    if not url.strip() or not _is_local(url) or dtype not in DTYPES:
        return out  # the per-option checks report these
    try:
        loaded = _client_tokenizer(url)
    except ValueError as e:
        raise OptionError(f"tokenize --tokenizer {e}") from e
    try:
        if eos is not None:
            loaded.token_id(eos)
        resolve_dtype(dtype, loaded.vocab_size)
    except ValueError as e:
        raise OptionError(f"tokenize --{'eos' if 'is not a token' in str(e) else 'dtype'}: {e}") from e
    out["tokenizer"] = _placed(url)
    return out


def _placed(url: str) -> str:
    from torchx_datapipes import target

    path = url[len("file://") :] if url.startswith("file://") else url
    if os.path.isabs(path):
        return url
    where = target.current()
    if not where.shares_client_fs:
        raise OptionError(
            f"tokenize --tokenizer {url!r} is a path relative to this machine's working directory, which"
            f" a {where.scheduler} job cannot see: pass a URL every node can read (e.g."
            " s3://bucket/tokenizer.json) or an absolute path that every node mounts (see --mounts)"
        )
    return os.path.abspath(os.path.expanduser(path))


TOKENIZER_HELP = (
    "required: a Hugging Face tokenizer.json (path or fsspec URL), loaded with the tokenizers library"
    " (pip install 'torchx-datapipes[tokenize]')"
)


def require_tokenizer(url: Any) -> str:
    if not isinstance(url, str):
        raise OptionError(f"tokenize: --tokenizer is required ({TOKENIZER_HELP[len('required: ') :]})")
    return url


def _eos(value: Any) -> None:
    if not value:
        raise ValueError("must be a token of the tokenizer, e.g. '</s>' or '<|endoftext|>'")


TOKENIZE = OpSpec(
    "tokenize",
    (
        *io_options(
            INPUT_HELP + ". .gz and .zst are decompressed.",
            "output directory: OUTPUT/part-NNNNN.bin and .idx (Megatron's indexed dataset), one provenance"
            " file per shard and _SUCCESS",
        ),
        Option(
            "tokenizer",
            "str",
            None,  # required (check_together, make_op), but not by argparse: the parser is shared
            TOKENIZER_HELP,
            optional=True,
            check=_tokenizer_check,
        ),
        Option("field", "str", "text", "the record field holding each document's text", check=c.non_empty),
        Option(
            "eos",
            "str",
            None,
            "a token appended to every document, e.g. '</s>' (default: none)",
            optional=True,
            check=_eos,
        ),
        Option(
            "dtype",
            "str",
            "auto",
            "token dtype of the shards: auto (uint16 when the vocabulary has fewer than 65,500 tokens, else"
            " int32, as Megatron's optimal_dtype), uint16, int32 or int64",
            choices=DTYPES,
        ),
        Option(
            "shard_mb",
            "float",
            1024.0,
            "the largest .bin in MB: a unit whose tokens exceed it continues in part-NNNNN.pKKK.bin",
            check=c.positive,
        ),
        Option(
            "fn",
            "str",
            None,
            "optional transform applied first (its output records are tokenized)",
            optional=True,
            runner=False,
        ),
        *data_options(
            1024,
            "records per batch (the batch encoded at once by encode_batch)",
            "raise (stop at the first bad record: unparseable, or without a text --field) or skip (write it"
            " to OUTPUT/_errors/ and go on)",
            output_format=False,
        ),
        *ship_options(
            "where the client uploads the fn artifact (s3://... for clusters)",
            "how fn is shipped: cloudpickle, torch.package or module",
        ),
        *launch_options("/tokenize"),
        *RUNNER_ONLY,
    ),
)

_DOC = """Tokenize a text field of every record into Megatron indexed-dataset shards, exactly once.

Each unit of the input becomes ``OUTPUT/part-NNNNN.bin`` + ``.idx`` (Megatron's ``MMIDIDX`` layout,
opened by ``megatron.core.datasets.indexed_dataset.IndexedDataset(prefix)``): one sequence per
document, documents in input order (files sorted, then lines) across parts in part order, the
same bytes for any ``-j``. ``OUTPUT/part-NNNNN.lines.json`` maps each document to its input line;
``OUTPUT/_SUCCESS`` lists the shards with their token counts. Read them for training with
``torchx_datapipes.data.TokenDataset``; see docs/tokenize.md.
"""

OP = OpDef(
    TOKENIZE,
    help="tokenize a text field into Megatron .bin/.idx shards",
    runner="torchx_datapipes.runner.tokenize:make_op",
    doc=_DOC,
    keys=Keys(
        manifest={
            "tokenize": (
                frozenset({ms.RECORDS_OUT, ms.FILTERED, ms.OUTPUT, ms.TOKENS, ms.TOKENIZE}),
                frozenset(),
            )
        },
        options={"tokenize": frozenset({ms.OPT_TOKENIZE, ms.OPT_FN})},
        records={
            "tokenize": (
                frozenset(
                    {
                        ms.RECORDS_OUT,
                        ms.FILTERED,
                        ms.OUTPUTS,
                        ms.TOKENS,
                        ms.SHARDS,
                        ms.LINE_OFFSET,
                        ms.DECODE_CHECK,
                    }
                ),
                frozenset(),
            )
        },
    ),
)
