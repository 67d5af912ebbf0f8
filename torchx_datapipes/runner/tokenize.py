"""The tokenize op: a text field of every record to Megatron ``.bin``/``.idx`` shards, one per unit.

Each unit's documents are encoded in batches (``Tokenizer.encode_batch_fast`` where the library
has it: the same ids, without the character offsets nothing here uses; else ``encode_batch``;
``--batch_size`` at once), ``--eos`` appended, and written in input order to
``part-NNNNN.bin``/``.idx`` (a unit whose tokens exceed ``--shard_mb`` continues in
``part-NNNNN.p001.bin`` ...), one sequence per document. The output depends on the input alone,
never on ``-j`` or the workers. Beside each shard, ``part-NNNNN.lines.json`` maps its documents to
their input lines (provenance). Each unit checks a sample of what it committed: the tokens read
back from the shard equal the encoding, and whether decoding gives the text back (reported, as
normalizing tokenizers do not).

The job's manifest (``tokenize`` section) lists every shard in order with its first global
document and token, its input file and line offset, which ``data/tokens.py`` reads.
"""

import os
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import orjson

from torchx_datapipes.errors import DatapipesError
from torchx_datapipes.formats.megatron.index import decode_index
from torchx_datapipes.formats.megatron.writer import MegatronShard, idx_url
from torchx_datapipes.formats.planning import Unit
from torchx_datapipes.formats.reading import UnitReader
from torchx_datapipes.io import manifest_schema as ms
from torchx_datapipes.io.checksum import FileSum, write_summed
from torchx_datapipes.io.fs import join, read_bytes
from torchx_datapipes.ops.tokenize import LoadedTokenizer, read_tokenizer, require_tokenizer, resolve_dtype
from torchx_datapipes.runner.apply import Applier
from torchx_datapipes.runner.badrecords import ErrorSink, OnError
from torchx_datapipes.runner.context import PassContext

LINE_FORMATS = ("jsonl", "text")  # a unit's lines = its records in + blank lines (the offsets' rule)


def shard_stem(unit_index: int, piece: int) -> str:
    """``part-00007`` (the Megatron prefix of a unit's first shard), then ``part-00007.p001`` ..."""
    return f"part-{unit_index:05d}" + (f".p{piece:03d}" if piece else "")


def lines_file(stem: str) -> str:
    return f"{stem}.lines.json"


class _Shards:
    """A unit's shards: the current one, rolled over at ``shard_bytes``, and what each committed."""

    def __init__(self, output: str, unit: Unit, dtype: str, shard_bytes: int) -> None:
        self.output, self.unit, self.dtype, self.shard_bytes = output, unit, np.dtype(dtype), shard_bytes
        self.done: List[Dict[str, Any]] = []
        self.files: List[FileSum] = []
        self.current: Optional[MegatronShard] = None
        self.lines: List[int] = []

    def add(self, tokens: np.ndarray, line: int) -> None:
        cur = self.current
        if cur is not None and cur.records and cur.nbytes + tokens.nbytes > self.shard_bytes:
            self.commit()
            cur = None
        if cur is None:
            stem = shard_stem(self.unit.index, len(self.done))
            cur = self.current = MegatronShard(join(self.output, f"{stem}.bin"), self.dtype)
        cur.add(tokens)
        self.lines.append(line)

    def commit(self) -> None:
        """Commit the current shard (an empty unit commits one empty shard: every unit has its part)."""
        if self.current is None:
            self.current = MegatronShard(
                join(self.output, f"{shard_stem(self.unit.index, 0)}.bin"), self.dtype
            )
        cur, stem = self.current, shard_stem(self.unit.index, len(self.done))
        cur.commit()
        self.files.extend(cur.file_sums(f"{stem}.bin"))
        doc = {"input": self.unit.path, "unit": self.unit.index, "lines": self.lines}
        self.files.append(write_summed(self.output, lines_file(stem), orjson.dumps(doc)))
        self.done.append({"prefix": stem, "documents": cur.records, "tokens": cur.tokens})
        self.current, self.lines = None, []

    def abort(self) -> None:
        if self.current is not None:
            self.current.abort()


class TokenizeOp:
    name = "tokenize"

    def __init__(
        self,
        output: str,
        loaded: LoadedTokenizer,
        field: str,
        eos: Optional[str],
        dtype: str,
        shard_mb: float,
        on_error: OnError,
        fn: Optional[Callable[..., Any]] = None,
    ) -> None:
        self.output, self.url, self.sha256 = output, loaded.url, loaded.sha256
        self.field, self.eos, self.shard_mb, self.on_error, self.fn = field, eos, shard_mb, on_error, fn
        self.vocab_size = loaded.vocab_size
        self.eos_id = loaded.token_id(eos) if eos is not None else None
        self.dtype = resolve_dtype(dtype, self.vocab_size)
        self._loaded: Optional[Tuple[int, LoadedTokenizer]] = (os.getpid(), loaded)

    @property
    def tokenizer(self) -> Any:
        """The tokenizer, loaded again in a forked worker (its Rust thread pool must not cross a fork)."""
        if self._loaded is None or self._loaded[0] != os.getpid():
            loaded = read_tokenizer(self.url)
            if loaded.sha256 != self.sha256:
                raise DatapipesError(
                    f"{self.url} changed while the job ran (sha256 {loaded.sha256}, was {self.sha256}):"
                    " keep the tokenizer fixed for the job's lifetime and relaunch"
                )
            self._loaded = (os.getpid(), loaded)
        return self._loaded[1].tokenizer

    def options(self) -> Dict[str, Any]:
        return {
            ms.OPT_TOKENIZE: {
                "field": self.field,
                "tokenizer": self.url,
                "tokenizer_sha256": self.sha256,
                "eos": self.eos,
                "dtype": self.dtype,
                "shard_mb": self.shard_mb,
            },
            ms.OPT_FN: self.fn is not None,
        }

    def run(self, ctx: PassContext) -> None:
        ctx.run_pass("main", self.process)

    # -- one unit ------------------------------------------------------------------------------
    def _records(
        self, reader: UnitReader, sink: ErrorSink, applier: Optional[Applier]
    ) -> Iterator[Tuple[List[Any], Callable[[int], int]]]:
        """Batches of records with the unit-local line of each (after ``--fn`` if given)."""
        if applier is not None:
            for out in applier.run(reader.batches(), sink):
                yield out, applier.line_of
            return
        sink.fn_name = "tokenize"  # our own failures (a missing field) read "tokenize raised ..."
        for recs, lines in reader.batches():
            sink.drain_parse_errors()
            yield recs, lines.__getitem__
        sink.drain_parse_errors()

    def _texts(
        self, recs: List[Any], line_of: Callable[[int], int], sink: ErrorSink
    ) -> Tuple[List[str], List[int]]:
        texts: List[str] = []
        lines: List[int] = []
        for i, rec in enumerate(recs):
            text = rec if isinstance(rec, str) else rec.get(self.field) if isinstance(rec, dict) else None
            if not isinstance(text, str):
                sink.record_failed(line_of(i), rec, ValueError(self._why(rec)), stage="tokenize")
                continue
            texts.append(text)
            lines.append(line_of(i))
        return texts, lines

    def _why(self, rec: Any) -> str:
        if not isinstance(rec, dict):
            return f"the record is a {type(rec).__name__}, not an object with a text field {self.field!r}"
        if self.field not in rec:
            return (
                f"the record has no field {self.field!r} (its fields: {sorted(rec)[:10]}); pass --field with"
                " the field holding the text"
            )
        return f"field {self.field!r} is a {type(rec[self.field]).__name__}, not a string"

    def encode(self, texts: Sequence[str]) -> List[np.ndarray]:
        """Each text's token ids (``--eos`` appended) in the shards' dtype."""
        tok = self.tokenizer
        encs = getattr(tok, "encode_batch_fast", tok.encode_batch)(list(texts))
        tail = [self.eos_id] if self.eos_id is not None else []
        return [np.array(e.ids + tail, dtype=self.dtype) for e in encs]

    def process(self, unit: Unit, reader: UnitReader, sink: ErrorSink) -> Dict[str, Any]:
        shards = _Shards(self.output, unit, self.dtype, max(1, int(self.shard_mb * 1e6)))
        applier = Applier(self.fn, self.on_error) if self.fn is not None else None
        sample: List[Tuple[int, str, np.ndarray]] = []  # the first and last (document, text, tokens)
        docs = 0
        try:
            for recs, line_of in self._records(reader, sink, applier):
                texts, lines = self._texts(recs, line_of, sink)
                for text, line, ids in zip(texts, lines, self.encode(texts)):
                    shards.add(ids, line)
                    sample[min(docs, 1) :] = [(docs, text, ids)]
                    docs += 1
            shards.commit()
        except BaseException:
            shards.abort()
            raise
        return {
            ms.RECORDS_OUT: docs,
            ms.FILTERED: applier.filtered if applier is not None else 0,
            ms.OUTPUTS: [f"{s['prefix']}.bin" for s in shards.done],
            ms.TOKENS: sum(s["tokens"] for s in shards.done),
            ms.SHARDS: shards.done,
            ms.LINE_OFFSET: self._line_offset(unit, reader),
            ms.DECODE_CHECK: self.check_sample(shards.done, sample),
            ms.FILES: shards.files,
        }

    def _line_offset(self, unit: Unit, reader: UnitReader) -> Optional[int]:
        """Lines of the file before the unit's first: 0 from the file's start; None for a line format
        (the commit sums the earlier units' lines, reading nothing); else counted here."""
        if unit.start == 0:
            return 0
        if unit.format in LINE_FORMATS:
            return None
        return int(reader.absolute(1)) - 1

    def check_sample(
        self, done: List[Dict[str, Any]], sample: List[Tuple[int, str, np.ndarray]]
    ) -> Dict[str, int]:
        """Read sampled documents back from the committed shards: their tokens must equal the encoding;
        decoding them gives the text back or not (counted: normalizers lose case, accents...)."""
        same_text = 0
        for doc, text, ids in sample:
            got = self._read_back(done, doc)
            if not np.array_equal(got, ids):
                raise DatapipesError(
                    f"document {doc} of {done[0]['prefix'] if done else '?'}... reads back as other tokens"
                    " than were written: the output storage corrupts writes; check it and relaunch"
                )
            body = ids[:-1] if self.eos_id is not None else ids
            same_text += self.tokenizer.decode(body.tolist(), skip_special_tokens=False) == text
        return {"sampled": len(sample), "tokens_equal": len(sample), "text_equal": same_text}

    def _read_back(self, done: List[Dict[str, Any]], doc: int) -> np.ndarray:
        for s in done:
            if doc < s["documents"]:
                url = join(self.output, f"{s['prefix']}.bin")
                index = decode_index(read_bytes(idx_url(url)), idx_url(url))
                start = int(index.pointers[doc])
                n = int(index.lengths[doc])
                import fsspec

                with fsspec.open(url, "rb") as fh:
                    fh.seek(start)
                    data = fh.read(n * index.dtype.itemsize)
                return np.frombuffer(data, index.dtype)
            doc -= s["documents"]
        raise IndexError(doc)

    # -- the job -------------------------------------------------------------------------------
    def finalize(self, ctx: PassContext, metas: List[Dict[str, Any]]) -> Dict[str, Any]:
        shards: List[Dict[str, Any]] = []
        first_doc = first_token = 0
        lines_before: Dict[str, int] = {}  # per input file: lines of the units committed so far
        check = {"sampled": 0, "tokens_equal": 0, "text_equal": 0}
        for m in sorted(metas, key=lambda m: int(m[ms.UNIT][ms.UNIT_INDEX])):
            path = str(m[ms.UNIT][ms.UNIT_PATH])
            offset = m[ms.LINE_OFFSET]
            if offset is None:
                offset = lines_before.get(path, 0)
            lines_before[path] = offset + int(m[ms.RECORDS_IN]) + int(m[ms.BLANK_LINES])
            for s in m[ms.SHARDS]:
                shards.append({**s, "first_document": first_doc, "first_token": first_token, "input": path,
                               "line_offset": offset})  # fmt: skip
                first_doc += int(s["documents"])
                first_token += int(s["tokens"])
            for k in check:
                check[k] += int(m[ms.DECODE_CHECK][k])
        return {
            ms.RECORDS_OUT: first_doc,
            ms.FILTERED: sum(int(m[ms.FILTERED]) for m in metas),
            ms.OUTPUT: self.output,
            ms.TOKENS: first_token,
            ms.TOKENIZE: {
                "dtype": self.dtype,
                "vocab_size": self.vocab_size,
                "eos": self.eos,
                "eos_id": self.eos_id,
                "tokenizer": self.url,
                "tokenizer_sha256": self.sha256,
                "field": self.field,
                "documents": first_doc,
                "tokens": first_token,
                "shards": shards,
                "decode_check": check,
            },
        }


def make_op(args: Any, cfg: Any, fn: Optional[Callable[..., Any]]) -> TokenizeOp:
    """The runner of ``ops/tokenize.py``: the tokenizer is loaded (and checked) before any unit runs."""
    loaded = read_tokenizer(require_tokenizer(args.tokenizer))
    return TokenizeOp(cfg.output, loaded, args.field, args.eos, args.dtype, args.shard_mb, cfg.on_error, fn)
