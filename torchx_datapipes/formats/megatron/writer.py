"""Writing Megatron shards: :class:`MegatronShard` (one ``.bin`` + ``.idx``) and the
``--output_format megatron`` part, :class:`MegatronPart` (one sequence of token ids per record).

The tokenize op (``runner/tokenize.py``) encodes text and calls :meth:`MegatronShard.add` with
tokens already in the shard's dtype. Any other op writes through the registry's ``PartWriter``:
each record is a sequence of token ids (a list of ints, a 1-D integer array or tensor, or a dict
with ``input_ids``), checked (1-D, integers, in ``[0, dtype max]``) or refused as a bad record
naming its type and the fix. A transform's function returning a list is flat-mapped (one record
per item, ``runner/apply.py``), so it returns an array, a tensor, ``{"input_ids": ids}`` or
``[ids]``. A writer cannot know the vocabulary, so the part's dtype is fixed by its class:
``int32`` (Megatron's choice for vocabularies of 65,500 tokens and up; ``uint16`` would halve the
bytes of a smaller one). A subclass with another ``token_dtype``, registered with
``register_writer``, writes another. At commit, :meth:`MegatronPart.finalize_job` lists the parts
as one token stream in the manifest (``SECTION``), which ``TokenDataset`` reads.
"""

from typing import Any, Callable, Dict, List, Mapping, Optional

import numpy as np

from torchx_datapipes.formats.megatron import SECTION
from torchx_datapipes.formats.megatron.index import encode_index, sequences_of
from torchx_datapipes.formats.writer import BasePart, Failures
from torchx_datapipes.io import manifest_schema as ms
from torchx_datapipes.io.checksum import FileSum, sum_bytes, write_file
from torchx_datapipes.io.values import as_array, is_tensor

TAKES = (
    "--output_format megatron takes one sequence of token ids per record: a list of ints, a 1-D"
    " integer numpy array or torch tensor, or a dict with an 'input_ids' field holding one"
)
IDS_FIELD = "input_ids"


def idx_url(bin_url: str) -> str:
    """``part-00007.idx`` beside ``part-00007.bin``."""
    return bin_url[: -len(".bin")] + ".idx"


class MegatronShard(BasePart):
    """One shard being written: ``add(tokens)`` per document; ``commit()`` renames the ``.bin`` into
    place, then writes the ``.idx`` (atomically), so a committed ``.idx`` always has its ``.bin``."""

    ext = "bin"

    def __init__(self, url: str, dtype: Any) -> None:
        if not url.endswith(".bin"):
            raise ValueError(f"a Megatron shard's data file ends with .bin: {url}")
        self.dtype = np.dtype(dtype)
        self.lengths: List[int] = []
        self.idx_sum: Optional[FileSum] = None
        super().__init__(url)

    @property
    def nbytes(self) -> int:
        return int(self.fh.size)

    @property
    def tokens(self) -> int:
        return sum(self.lengths)

    def add(self, tokens: np.ndarray) -> None:
        """Append one document (one sequence); ``tokens`` must already hold the shard's dtype."""
        self._append(tokens)
        self.records += 1

    def _append(self, tokens: np.ndarray) -> None:
        if tokens.dtype != self.dtype:
            raise TypeError(f"tokens of dtype {tokens.dtype} written to a {self.dtype} shard")
        self.fh.write(np.ascontiguousarray(tokens).view(np.uint8))
        self.lengths.append(len(tokens))

    def _write(self, recs: List[Any]) -> Failures:
        """One sequence per record, in order; a record that is not one is ``(index, why)``."""
        bad: Failures = []
        for i, rec in enumerate(recs):
            try:
                tokens = token_ids(rec, self.dtype)
            except (TypeError, ValueError) as e:
                bad.append((i, str(e)))
                continue
            self._append(tokens)
        return bad

    def commit(self) -> None:
        super().commit()
        data = encode_index(self.dtype, np.asarray(self.lengths, dtype=np.int64))
        write_file(idx_url(self.url), data)
        self.idx_sum = FileSum("", len(data), sum_bytes(data))

    def file_sums(self, rel: str) -> List[FileSum]:
        """The ``.bin``, its block sums and the ``.idx`` (paths relative to the output)."""
        if self.idx_sum is None:
            raise RuntimeError(f"{self.url} is not committed")
        idx = FileSum(idx_url(rel), self.idx_sum.size, self.idx_sum.xxh3_128)
        return [*super().file_sums(rel), idx]


class MegatronPart(MegatronShard):
    """``--output_format megatron``: a part ``part-NNNNN.bin`` + ``.idx`` of ``token_dtype`` ids."""

    token_dtype = "int32"  # the vocabulary is unknown here: int32 fits any Megatron vocabulary

    def __init__(self, url: str, key_prefix: Optional[str] = None) -> None:
        super().__init__(url, self.token_dtype)

    @classmethod
    def finalize_job(
        cls, output: str, metas: List[Dict[str, Any]], meta_name: Callable[[Dict[str, Any]], str]
    ) -> Dict[str, Any]:
        """The parts in unit order as one token stream (``SECTION``): each part's documents and tokens
        come from the sizes its unit's commit recorded (``.idx``: one sequence per document; ``.bin``:
        tokens of ``token_dtype``), so nothing is read."""
        itemsize = np.dtype(cls.token_dtype).itemsize
        shards: List[Dict[str, Any]] = []
        documents = tokens = 0
        for m in sorted(metas, key=lambda m: int(m[ms.UNIT][ms.UNIT_INDEX])):
            sizes = {f[ms.FILE_PATH]: int(f[ms.FILE_SIZE]) for f in m[ms.FILES]}
            for rel in m[ms.OUTPUTS]:
                docs = sequences_of(sizes[idx_url(rel)], f"{output}/{idx_url(rel)}")
                toks = sizes[rel] // itemsize
                shards.append({"prefix": rel[: -len(".bin")], "documents": docs, "tokens": toks,
                               "first_document": documents, "first_token": tokens})  # fmt: skip
                documents, tokens = documents + docs, tokens + toks
        section = {"dtype": str(np.dtype(cls.token_dtype)), "documents": documents, "tokens": tokens,
                   "shards": shards}  # fmt: skip
        return {SECTION: section}


# ---- a record as token ids ---------------------------------------------------------------------


def token_ids(rec: Any, dtype: np.dtype) -> np.ndarray:  # type: ignore[type-arg]
    """The record's token ids as a 1-D array of ``dtype``, or a TypeError/ValueError naming what it is
    and the fix (a bad record)."""
    value, where = rec, ""
    if isinstance(rec, Mapping):
        if IDS_FIELD not in rec:
            fields = sorted(str(k) for k in rec)[:10]
            raise TypeError(
                f"{TAKES}; got a dict without {IDS_FIELD!r} (its fields: {fields}): return the token ids,"
                f" or put them in an {IDS_FIELD!r} field"
            )
        value, where = rec[IDS_FIELD], f"field {IDS_FIELD}: "
    ids = _integers(value, where)
    _check_range(ids, dtype, where)
    return ids.astype(dtype, copy=False)


def _integers(value: Any, where: str) -> np.ndarray:  # type: ignore[type-arg]
    """``value`` as a 1-D array of integers (any integer dtype), or the error naming its type."""
    if isinstance(value, (list, tuple)):
        return _list_ids(value, where)
    if is_tensor(value) and (value.is_floating_point() or value.is_complex()):
        raise TypeError(f"{where}{TAKES}; got a torch tensor of {value.dtype} values: cast it with .long()")
    arr = as_array(value)
    if arr is None:
        raise TypeError(f"{where}{TAKES}; got a {type(value).__name__}: {_fix(value)}")
    what = "numpy array" if isinstance(value, np.ndarray) else "torch tensor"
    if arr.ndim != 1:
        raise TypeError(
            f"{where}{TAKES}; got a {arr.ndim}-D {what} of shape {tuple(arr.shape)}: flatten it, or"
            " return one sequence per record"
        )
    if arr.dtype.kind not in "iu":
        raise TypeError(
            f"{where}{TAKES}; got a {what} of {arr.dtype} values: token ids are integers; cast them"
            " (.astype('int64'), .long())"
        )
    return arr


def _list_ids(value: Any, where: str) -> np.ndarray:  # type: ignore[type-arg]
    """A list or tuple of ints as an array: numpy converts it at once; only a list it does not convert
    to 1-D integers is looked at item by item."""
    if not value:
        return np.zeros(0, dtype=np.int64)  # an empty document
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError, OverflowError):  # nested lists of several lengths
        arr = None
    if arr is not None and arr.dtype.kind in "iu" and arr.ndim == 1:
        return arr
    _diagnose_list(value, where)  # raises, but for ints of more than 64 bits together:
    return np.array(value, dtype=object)  # exact, for the range check to name one


def _diagnose_list(value: Any, where: str) -> None:
    """Raise naming the first item of a list or tuple that is not an integer token id."""
    for i, item in enumerate(value):
        if isinstance(item, (bool, np.bool_)) or not isinstance(item, (int, np.integer)):
            kind = type(value).__name__
            raise TypeError(
                f"{where}{TAKES}; got a {kind} holding a {type(item).__name__} at [{i}]: {_fix(item)}"
            )


def _fix(value: Any) -> str:
    if isinstance(value, (str, bytes)):
        return "tokenize the text first (e.g. tokenizer(text)['input_ids']), or use datapipes.tokenize"
    if isinstance(value, (list, tuple)) or (isinstance(value, np.ndarray) and value.ndim):
        return "a record is one flat sequence; return one sequence per record"
    if isinstance(value, (float, np.floating)):
        return "token ids are integers; cast them with int()"
    if isinstance(value, (int, np.integer)):  # a per-record function's list is flat-mapped into records
        return (
            "a function returning a list returns one record per item; return the ids as a numpy array"
            " or tensor, as {'input_ids': ids} or as [ids]"
        )
    return "return the record's token ids"


def _check_range(ids: np.ndarray, dtype: np.dtype, where: str) -> None:  # type: ignore[type-arg]
    """Refuse a negative id, or one that ``dtype`` cannot hold, naming it and its position."""
    if not ids.size:
        return
    top = int(np.iinfo(dtype).max)
    lo, hi = int(ids.argmin()), int(ids.argmax())
    if int(ids[lo]) < 0:
        raise ValueError(
            f"{where}token id {int(ids[lo])} at [{lo}] is negative: ids index the vocabulary from 0;"
            " fix the function's ids"
        )
    if int(ids[hi]) > top:
        raise ValueError(
            f"{where}token id {int(ids[hi])} at [{hi}] does not fit the part's {dtype} (at most {top}):"
            " check the function's ids; a larger vocabulary needs a writer of int64 ids (a MegatronPart"
            " subclass with token_dtype = 'int64', registered with register_writer; docs/formats.md)"
        )
