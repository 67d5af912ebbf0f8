"""End-to-end benchmark of ``datapipes.dedup --method near`` (issue 30) against references, same run.

usage (from the repo root)::

    PYTHONPATH=/tmp/dt:/tmp/ds:/tmp/rensa .venv/bin/python benchmarks/bench_dedup.py \\
        [--sizes 2000,20000,200000] [--threshold 0.8] [--j 1x2] [--repeat 1] [--json r.json]

The references are not dependencies; install each beside the venv and put it on ``PYTHONPATH``
(a row whose library does not import is printed as skipped, with the command that installs it):
``pip install --target /tmp/ds --no-deps datasketch scipy``, ``pip install --target /tmp/rensa
--no-deps rensa``, and datatrove with its ``loguru`` and ``humanize`` in ``/tmp/dt``.

Corpora (JSON Lines ``{"id": i, "text": ...}``, ``id`` = position in input order, 4 files of
consecutive documents):

- ``licenses``: one document per license file found on this machine: every ``LICENSE*`` /
  ``LICENCE*`` / ``COPYING*`` file under this interpreter's ``site-packages/*.dist-info/`` and every
  file of ``/usr/share/common-licenses/`` (sorted by path; ``--real-max-docs`` keeps the first N).
  Real near duplicates: MIT/BSD/Apache texts differing in their copyright lines, exact copies.
- ``synthetic``: N documents (``--sizes``). 70% are base documents of 60-300 words drawn from a
  30,000-word pseudo-English vocabulary with Zipf (s=1) frequencies, in sentences; each of the other
  30% is a copy of a random member of a random base's family (the base itself, or with
  probability 0.3 an earlier copy: chains): 15% of copies are exact, 85% get 1-5 word edits (each an
  insertion, deletion or substitution at a random position). Then the documents are shuffled.

Truth: the pairs whose exact Jaccard similarity of shingle sets is >= ``--threshold``. Shingles
(the op's rule, reimplemented here): ``text.lower()``, words = ``\\w+`` runs, the *set* of 5-word
n-grams joined by a space (a text of fewer than 5 words: its words), each hashed with xxh3-64.

- Exact truth (the licenses, and synthetic sizes <= ``--exact-max``): an all-pairs set-similarity
  join with prefix filtering: with the shingles of every document ordered rarest first, a pair with
  Jaccard >= t shares a shingle within the first ``|x| - ceil(t|x|) + 1`` of each (Bayardo et al.,
  "Scaling up all pairs similarity search", 2007), so indexing those prefixes and verifying every
  pair that shares one finds *all* pairs, exactly, without comparing all n^2 pairs.
- Larger synthetic sizes: the known edit structure plus exact verification: every pair inside a
  family (a base document and all its copies) and every pair that any method reported (put in one
  cluster) is verified by exact Jaccard. **Assumption**: two documents from different families are
  practically disjoint (independent draws of 60-300 words share a 5-gram only by accident), so no
  true pair crosses families unless a method found it. It is checked at every exact size: the
  table's truth line prints how many exact truth pairs cross families (0 expected).

Precision and recall are those of the *duplicate documents removed*. The truth graph's connected
components (pairs with Jaccard >= t as edges) are the duplicate clusters; a cluster of k documents
should lose k - 1 of them, any k - 1 (which member is kept does not matter, so datatrove keeping its
union-find root and the others keeping the first in input order are scored alike). With R the
documents a method removed, ``TP = sum over clusters C of min(|R & C|, |C| - 1)``,
``precision = TP / |R|`` and ``recall = TP / sum(|C| - 1)`` (``ideal removed``). A removed document
with no near duplicate, or one removed too many (a cluster left with none: two clusters merged by a
false match), is a false positive; a cluster left with two or more documents counts the extra ones
as misses. A chain a~b~c with a, c dissimilar is one cluster: removing any two of the three is right. For
reference the JSON also has the pair figures (``pair_precision``, ``pair_recall``: pairs in one
reported cluster against truth pairs; chains cost pair precision).

Rows, each a whole subprocess (interpreter start and imports included), every one measured in
this run, on the same files:

- ``launch floor``: a trivial ``torchx run -s local_cwd dist.ddp -j J`` (init gloo, barrier;
  ``_common.measure_ddp_job``), measured once;
- ``ours -j J``: ``torchx run -s local_cwd datapipes.dedup --field text --method near --threshold T
  --ngram 5 --action drop -j J``: read, shingle, MinHash, LSH, verify, components, write the kept
  records and the duplicates table; ok when torchx exits 0 and ``OUT/_SUCCESS`` exists;
- ``datasketch x1``: ``MinHash(128).update_batch`` per document and ``MinHashLSH`` with our bands x
  rows (``params=``), query then insert the kept ones, candidates not verified; writes the kept lines;
- ``datatrove x2``: ``datatrove.pipeline.dedup.minhash``'s four stages (signatures on 2 tasks,
  buckets on one task per band, cluster with ``save_cluster_id``, filter + ``JsonlWriter`` on 2 tasks),
  each a ``LocalPipelineExecutor`` with 2 workers, our bands x rows, its default text normalisation,
  64-bit SHA-1 shingle hashes (its default xxhash passes ``str`` to ``xxhash``, which xxhash 4 refuses);
  its English word tokenizer needs spaCy, so a ``\\w+`` tokenizer is passed instead. No verification.
  Only on corpora of at most ``--datatrove-max-docs`` documents (it is slow);
- ``rensa x1``: ``RMinHash.from_token_sets`` (full-set R-MinHash, 128 slots) and
  ``RMinHashDeduplicator(use_lsh=True, num_bands=B)``, which checks candidates by estimated
  Jaccard; writes the kept lines.

After the tables: ours' docs/s over datatrove's and over datasketch's at each size, the targets of
issue 30 at the largest synthetic size (>= 10x datatrove's docs/s, faster than datasketch,
precision >= 0.995 and recall >= 0.99), the launch floor and the crossover size: the smallest
synthetic size at which ours is faster than datasketch end to end (and a linear estimate
``floor / (datasketch s/doc - ours' s/doc above the floor)`` from the largest size,
``bench_validate.crossover``).

Non-goals: no CPU pinning or warm-up; best of ``--repeat`` (quality is scored on the last run's
output, which is deterministic). On a shared 2-core machine compare figures from one run only.
"""

from __future__ import annotations

import argparse
import gzip
import heapq
import importlib.util
import itertools
import json
import math
import os
import random
import re
import shutil
import sys
import sysconfig
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    REPO_ROOT,
    BenchRow,
    Measurement,
    best_of,
    input_files,
    measure_ddp_job,
    parse_bench_args,
    rss_source,
    run_measured,
    torchx_cmd,
    torchx_log_tail,
    write_json,
)
from bench_validate import crossover  # noqa: E402

METHODS = ("floor", "ours", "datasketch", "datatrove", "rensa")
REFS = ("datasketch", "datatrove", "rensa")
FILES = 4
NUM_PERM = 128
SEED = 12345
BASE_FRACTION, EXACT_COPIES, CHAIN = 0.7, 0.15, 0.3
MAX_EDITS = 5
VOCAB = 30_000
MAX_ENUM_CLUSTER = 5000  # larger clusters' pairs are not enumerated for truth (counted in the note)
HINTS = {
    "datasketch": "pip install --target /tmp/ds --no-deps datasketch scipy; PYTHONPATH=/tmp/ds",
    "datatrove": "datatrove + loguru + humanize in /tmp/dt; PYTHONPATH=/tmp/dt",
    "rensa": "pip install --target /tmp/rensa --no-deps rensa; PYTHONPATH=/tmp/rensa",
}
TARGET_DT, TARGET_P, TARGET_R = 10.0, 0.995, 0.99

Pair = tuple[int, int]

# ---------------------------------------------------------------------------------------------
# Shingles (the op's definition, reimplemented): shared by the truth and the references.
# ---------------------------------------------------------------------------------------------

_WORD = re.compile(r"\w+")


def shingles(text: str, n: int) -> list[str]:
    """The distinct word n-grams of ``text`` (lowercase ``\\w+`` runs); fewer than n words: its words."""
    w = _WORD.findall(text.lower())
    if len(w) < n:
        return list(dict.fromkeys(w))
    return list(dict.fromkeys(" ".join(w[i : i + n]) for i in range(len(w) - n + 1)))


def shingle_set(text: str, n: int) -> frozenset[int]:
    import xxhash

    h = xxhash.xxh3_64_intdigest
    return frozenset(h(g.encode()) for g in shingles(text, n))


def jaccard(a: frozenset[int], b: frozenset[int]) -> float:
    if not a or not b:
        return 0.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


# ---------------------------------------------------------------------------------------------
# Reference implementations. They run in a child interpreter: `bench_dedup.py _ref METHOD ...`.
# Each reads the corpus' files in sorted order, writes the kept lines and OUT/result.json
# ({"removed": [doc ids], "labels": {doc: cluster label}} for the documents of clusters of two
# or more) and prints its counts.
# ---------------------------------------------------------------------------------------------


def _read_corpus(input_dir: str) -> tuple[list[int], list[str], list[bytes]]:
    import orjson

    ids, texts, lines = [], [], []
    for f in input_files(input_dir):
        with open(f, "rb") as fh:
            for line in fh:
                if line.strip():
                    rec = orjson.loads(line)
                    ids.append(int(rec["id"]))
                    texts.append(rec["text"])
                    lines.append(line if line.endswith(b"\n") else line + b"\n")
    return ids, texts, lines


def _finish(out: Path, ids: list[int], lines: list[bytes], removed: dict[int, int]) -> dict[str, int]:
    """Write the kept lines and the result (``removed``: index -> index of the kept document it matched)."""
    with open(out / "kept.jsonl", "wb") as fh:
        fh.write(b"".join(line for i, line in enumerate(lines) if i not in removed))
    labels: dict[int, int] = {}
    for i, k in removed.items():
        labels[ids[i]] = labels[ids[k]] = ids[k]
    result = {"removed": [ids[i] for i in removed], "labels": labels}
    (out / "result.json").write_text(json.dumps(result))
    return {"docs": len(ids), "removed": len(removed), "kept": len(ids) - len(removed)}


def _ref_datasketch(a: argparse.Namespace, out: Path) -> dict[str, int]:
    from datasketch import MinHash, MinHashLSH

    ids, texts, lines = _read_corpus(a.input)
    lsh = MinHashLSH(threshold=a.threshold, num_perm=a.num_perm, params=(a.bands, a.rows))
    removed: dict[int, int] = {}
    for i, text in enumerate(texts):
        grams = shingles(text, a.ngram)
        if not grams:
            continue
        m = MinHash(num_perm=a.num_perm)
        m.update_batch([g.encode() for g in grams])
        hits = lsh.query(m)
        if hits:
            removed[i] = min(hits)
        else:
            lsh.insert(i, m)
    return _finish(out, ids, lines, removed)


def _ref_rensa(a: argparse.Namespace, out: Path) -> dict[str, int]:
    from rensa import RMinHash, RMinHashDeduplicator

    ids, texts, lines = _read_corpus(a.input)
    grams = [shingles(t, a.ngram) for t in texts]
    idx = [i for i, g in enumerate(grams) if g]
    mhs = RMinHash.from_token_sets([grams[i] for i in idx], num_perm=a.num_perm, seed=42)
    dd = RMinHashDeduplicator(threshold=a.threshold, num_perm=a.num_perm, use_lsh=True, num_bands=a.bands)
    keep = dd.add_pairs((str(i), m) for i, m in zip(idx, mhs))
    gone = [k for k, kept in enumerate(keep) if not kept]
    removed: dict[int, int] = {}
    for k, matched in zip(gone, dd.get_duplicate_sets([mhs[k] for k in gone])):
        i, hits = idx[k], sorted(int(s) for s in matched)
        earlier = [h for h in hits if h < i]
        if earlier or hits:
            removed[i] = (earlier or hits)[0]
        else:  # flagged, but no candidate is returned any more: its own cluster
            removed[i] = i
    return _finish(out, ids, lines, removed)


def _ref_datatrove(a: argparse.Namespace, out: Path) -> dict[str, int]:
    import numpy as np
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter
    from datatrove.utils.hashing import HashConfig
    from datatrove.utils.word_tokenizers import WordTokenizer

    class Words(WordTokenizer):  # type: ignore[misc]
        """``\\w+`` runs (datatrove's English default is spaCy's tokenizer, which is not installed)."""

        def word_tokenize(self, text: str) -> list[str]:
            return _WORD.findall(text)

        def sent_tokenize(self, text: str) -> list[str]:
            return [text]

        def span_tokenize(self, text: str) -> list[tuple[int, int]]:
            return [(0, len(text))]

    def tag(data: Iterable[Any], rank: int = 0, world_size: int = 1) -> Iterable[Any]:
        """Record each document's (task, index in the task), the key of datatrove's cluster files, and its
        id (the writer leaves out falsy top-level fields, such as id 0)."""
        for i, doc in enumerate(data):
            doc.metadata.update({"_task": rank, "_idx": i, "_id": doc.id})
            yield doc

    cfg = MinhashConfig(n_grams=a.ngram, num_buckets=a.bands, hashes_per_bucket=a.rows,
                        hash_config=HashConfig(precision=64, hash_fc="sha1"))  # fmt: skip
    sigs, buckets, clusters = out / "sigs", out / "buckets", out / "clusters"
    tok = Words()

    def reader() -> Any:
        return JsonlReader(a.input, glob_pattern="*.jsonl", compression=None)

    stages = [
        ([reader(), MinhashDedupSignature(str(sigs), config=cfg, language=tok)], a.workers),
        ([MinhashDedupBuckets(str(sigs), str(buckets), config=cfg)], a.bands),
        ([MinhashDedupCluster(str(buckets), str(clusters), config=cfg, save_cluster_id=True)], 1),
        (
            [
                reader(),
                tag,
                MinhashDedupFilter(str(clusters), exclusion_writer=JsonlWriter(str(out / "removed"),
                                                                              compression=None)),
                JsonlWriter(str(out / "kept"), compression=None),
            ],
            a.workers,
        ),
    ]  # fmt: skip
    for k, (pipeline, tasks) in enumerate(stages):
        LocalPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=min(a.workers, tasks),
                              logging_dir=str(out / f"logs{k}")).run()  # fmt: skip
    import orjson

    where: dict[tuple[int, int], int] = {}
    removed: list[int] = []
    for sub in ("kept", "removed"):
        for p in sorted((out / sub).glob("*.jsonl*")):
            opener: Callable[..., Any] = gzip.open if p.suffix == ".gz" else open
            with opener(p, "rb") as fh:
                for line in fh:
                    rec = orjson.loads(line)
                    md = rec.get("metadata", {})
                    where[(int(md["_task"]), int(md["_idx"]))] = int(md["_id"])
                    if sub == "removed":
                        removed.append(int(md["_id"]))
    first: dict[int, int] = {}
    labels: dict[int, int] = {}
    for p in sorted(clusters.glob("*.clusters")):
        task = int(p.name.split(".")[0])
        for idx, cid in np.fromfile(p, dtype="<u4").reshape(-1, 2).tolist():
            doc = where[(task, idx)]
            labels[doc] = cid
            first[cid] = min(first.get(cid, doc), doc)
    result = {"removed": removed, "labels": {d: first[c] for d, c in labels.items()}}
    (out / "result.json").write_text(json.dumps(result))
    return {"docs": len(where), "removed": len(removed), "kept": len(where) - len(removed)}


_REFS: dict[str, Callable[[argparse.Namespace, Path], dict[str, int]]] = {
    "datasketch": _ref_datasketch,
    "datatrove": _ref_datatrove,
    "rensa": _ref_rensa,
}


def _ref_main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="bench_dedup.py _ref")
    ap.add_argument("method", choices=sorted(_REFS))
    ap.add_argument("--input", required=True, help="directory of *.jsonl files")
    ap.add_argument("--output", required=True, help="output directory (created)")
    ap.add_argument("--threshold", type=float, required=True)
    ap.add_argument("--ngram", type=int, required=True)
    ap.add_argument("--num-perm", type=int, required=True)
    ap.add_argument("--bands", type=int, required=True)
    ap.add_argument("--rows", type=int, required=True)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args(argv)
    out = Path(a.output)
    out.mkdir(parents=True, exist_ok=True)
    print(json.dumps(_REFS[a.method](a, out)))
    return 0


# ---------------------------------------------------------------------------------------------
# Corpora
# ---------------------------------------------------------------------------------------------


@dataclass
class DedupCorpus:
    name: str
    path: Path
    texts: list[str]
    family: Optional[list[int]] = None  # synthetic: the base document each document descends from
    note: str = ""

    @property
    def docs(self) -> int:
        return len(self.texts)


def write_corpus(path: Path, texts: Sequence[str]) -> Path:
    """``FILES`` JSON Lines files of consecutive documents, ``id`` = position in input order."""
    import orjson

    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    k = max(1, min(FILES, len(texts)))
    per = -(-len(texts) // k)
    for f in range(k):
        chunk = range(f * per, min(len(texts), (f + 1) * per))
        with open(path / f"part-{f:05d}.jsonl", "wb") as fh:
            fh.write(b"".join(orjson.dumps({"id": i, "text": texts[i]}) + b"\n" for i in chunk))
    return path


def license_paths() -> list[Path]:
    """LICENSE*/LICENCE*/COPYING* under site-packages/*.dist-info and /usr/share/common-licenses/*."""
    site = Path(sysconfig.get_paths()["purelib"])
    pat = re.compile(r"(?i)^(licen[cs]e|copying)")
    found = {p for d in site.glob("*.dist-info") for p in d.rglob("*") if p.is_file() and pat.match(p.name)}
    common = Path("/usr/share/common-licenses")
    if common.is_dir():
        found |= {p for p in common.iterdir() if p.is_file()}
    return sorted(found)


def license_corpus(root: Path, max_docs: Optional[int]) -> DedupCorpus:
    paths = license_paths()[:max_docs] if max_docs else license_paths()
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in paths]
    note = f"{len(paths)} license files ({sum(map(len, texts)) / 1e6:.1f} MB)"
    return DedupCorpus("licenses", write_corpus(root / "corpus-licenses", texts), texts, note=note)


def _vocabulary(rng: random.Random) -> list[str]:
    syll = "ka lo mi ne ru ta shi po an el or is ven dra mu te so ba gri fel".split()
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < VOCAB:
        w = "".join(rng.choice(syll) for _ in range(rng.randint(1, 4)))
        if w not in seen:
            seen.add(w)
            out.append(w)
    return out


def _render(tokens: Sequence[str], rng: random.Random) -> str:
    """Sentences of 8-20 words, capitalised, ending with a period (punctuation is not a word)."""
    out, i = [], 0
    while i < len(tokens):
        k = rng.randint(8, 20)
        s = " ".join(tokens[i : i + k])
        out.append(s[:1].upper() + s[1:] + ".")
        i += k
    return " ".join(out)


def _edit(tokens: list[str], rng: random.Random, draw: Callable[[], str]) -> list[str]:
    """1-5 word edits, each an insertion, deletion or substitution at a random position."""
    out = list(tokens)
    for _ in range(rng.randint(1, MAX_EDITS)):
        i, op = rng.randrange(len(out)), rng.randrange(3)
        if op == 0:
            out.insert(i, draw())
        elif op == 1 and len(out) > 1:
            del out[i]
        else:
            out[i] = draw()
    return out


def synthetic_corpus(root: Path, n: int, seed: int = SEED) -> DedupCorpus:
    """``n`` documents: bases, exact and edited copies (see the module docstring), shuffled."""
    import numpy as np

    rng = random.Random(seed + n)
    nrng = np.random.default_rng(seed + n)
    vocab = _vocabulary(random.Random(seed))
    p = 1.0 / np.arange(1, VOCAB + 1)
    p /= p.sum()
    n_base = max(1, round(n * BASE_FRACTION))
    lengths = [rng.randint(60, 300) for _ in range(n_base)]
    drawn = nrng.choice(VOCAB, size=sum(lengths) + 10 * MAX_EDITS * (n - n_base) + 1, p=p).tolist()
    pos = 0

    def draw() -> str:
        nonlocal pos
        pos += 1
        return vocab[drawn[pos - 1]]

    tokens: list[list[str]] = []
    texts: list[str] = []
    family: list[int] = []
    for length in lengths:
        tokens.append([draw() for _ in range(length)])
        texts.append(_render(tokens[-1], rng))
        family.append(len(family))
    members: dict[int, list[int]] = defaultdict(list)
    for _ in range(n - n_base):
        fam = rng.randrange(n_base)
        src = rng.choice(members[fam]) if members[fam] and rng.random() < CHAIN else fam
        if rng.random() < EXACT_COPIES:
            tokens.append(tokens[src])
            texts.append(texts[src])
        else:
            tokens.append(_edit(tokens[src], rng, draw))
            texts.append(_render(tokens[-1], rng))
        members[fam].append(len(family))
        family.append(fam)
    order = list(range(n))
    rng.shuffle(order)
    texts = [texts[i] for i in order]
    family = [family[i] for i in order]
    note = f"{n_base} bases, {n - n_base} copies"
    return DedupCorpus("synthetic", write_corpus(root / f"corpus-synthetic-{n}", texts), texts, family, note)


# ---------------------------------------------------------------------------------------------
# Truth and scores
# ---------------------------------------------------------------------------------------------


@dataclass
class Truth:
    pairs: set[Pair]
    how: str
    component: dict[int, int] = field(default_factory=dict)  # doc -> its component's smallest doc
    note: str = ""

    def __post_init__(self) -> None:
        if self.pairs and not self.component:
            self.component = components(self.pairs)
        self.sizes = Counter(self.component.values())

    @property
    def components(self) -> int:
        """Connected components of two or more documents."""
        return len(self.sizes)

    @property
    def ideal_removed(self) -> int:
        """Documents to remove so that each component keeps one."""
        return len(self.component) - len(self.sizes)


@dataclass
class Result:
    """What a method did: the documents it removed and its clusters (doc -> label, sizes >= 2)."""

    removed: set[int]
    labels: dict[int, int]


def exact_join(sets: Sequence[frozenset[int]], t: float) -> set[Pair]:
    """Every pair with Jaccard >= t, exactly: prefix filtering (rarest shingles first) + verification."""
    df = Counter(itertools.chain.from_iterable(sets))
    index: dict[int, list[int]] = defaultdict(list)
    for i, s in enumerate(sets):
        if s:
            prefix = len(s) - math.ceil(t * len(s) - 1e-9) + 1  # conservative on float rounding
            for h in heapq.nsmallest(prefix, s, key=lambda h: (df[h], h)):
                index[h].append(i)
    cands: set[Pair] = set()
    for docs in index.values():
        if len(docs) > 1:
            for a, b in itertools.combinations(docs, 2):  # docs are in increasing order
                la, lb = len(sets[a]), len(sets[b])
                if min(la, lb) >= t * max(la, lb) - 1e-9:  # size filter: J <= min/max
                    cands.add((a, b))
    return {(a, b) for a, b in cands if jaccard(sets[a], sets[b]) >= t}


def components(pairs: Iterable[Pair]) -> dict[int, int]:
    """Each document of a pair -> the smallest document of its connected component."""
    from torchx_datapipes.dedup.components import union_find  # the library's reference union-find

    return union_find(pairs)


def clusters(labels: dict[int, int]) -> list[list[int]]:
    """The documents of each cluster of ``labels``, sorted."""
    groups: dict[int, list[int]] = defaultdict(list)
    for doc, lab in labels.items():
        groups[lab].append(doc)
    return [sorted(g) for g in groups.values()]


def compute_truth(corpus: DedupCorpus, t: float, n: int, exact_max: int, reported: Sequence[Result]) -> Truth:
    """Exact truth (the licenses, synthetic sizes <= ``exact_max``) or the structure-based one."""
    t0 = time.perf_counter()
    if corpus.family is None or corpus.docs <= exact_max:
        pairs = exact_join([shingle_set(x, n) for x in corpus.texts], t)
        how = "exact (prefix-filtered all-pairs join)"
        note = ""
        if corpus.family is not None:
            cross = sum(1 for a, b in pairs if corpus.family[a] != corpus.family[b])
            note = f"assumption check: {cross} of {len(pairs)} truth pairs cross families"
    else:
        family = corpus.family
        members: dict[int, list[int]] = defaultdict(list)
        for i, f in enumerate(family):
            members[f].append(i)
        groups = list(members.values())
        skipped = 0
        for res in reported:
            for g in clusters(res.labels):
                if len(g) > MAX_ENUM_CLUSTER:
                    skipped += 1
                else:
                    groups.append(g)
        checked: set[Pair] = set()
        pairs = set()
        for g in groups:  # shingle sets per group only: memory stays flat in the corpus size
            todo = [p for p in itertools.combinations(g, 2) if p not in checked]
            if not todo:
                continue
            sets = {i: shingle_set(corpus.texts[i], n) for i in {i for p in todo for i in p}}
            checked.update(todo)
            pairs.update((a, b) for a, b in todo if jaccard(sets[a], sets[b]) >= t)
        cross = sum(1 for a, b in pairs if family[a] != family[b])
        how = "family pairs + every reported pair, verified exactly"
        note = f"{len(checked)} pairs verified; {cross} truth pairs cross families (found by a method)"
        if skipped:
            note += f"; {skipped} clusters > {MAX_ENUM_CLUSTER} docs not enumerated"
    note = f"{note}; computed in {time.perf_counter() - t0:.1f}s".lstrip("; ")
    return Truth(pairs, how, note=note)


def _div(a: int, b: int) -> Optional[float]:
    return a / b if b else None


def score(result: Result, truth: Truth) -> dict[str, Any]:
    """Precision and recall of the removed documents (module docstring), and of same-cluster pairs."""
    per = Counter(truth.component[d] for d in result.removed if d in truth.component)
    tp = sum(min(k, truth.sizes[c] - 1) for c, k in per.items())
    predicted = sum(s * (s - 1) // 2 for s in Counter(result.labels.values()).values())
    lab = result.labels
    tp_pairs = sum(1 for a, b in truth.pairs if a in lab and lab[a] == lab.get(b))
    return {
        "precision": _div(tp, len(result.removed)),
        "recall": _div(tp, truth.ideal_removed),
        "removed": len(result.removed),
        "true_removed": tp,
        "pair_precision": _div(tp_pairs, predicted),
        "pair_recall": _div(tp_pairs, len(truth.pairs)),
        "predicted_pairs": predicted,
    }


# ---------------------------------------------------------------------------------------------
# The harness
# ---------------------------------------------------------------------------------------------


def _report_failure(what: str, m: Measurement, why: str, cwd: Path = REPO_ROOT) -> None:
    print(f"\n!! {what} FAILED ({why}), rc={m.returncode}, {m.wall_s:.1f}s", file=sys.stderr)
    print(f"   cmd: {' '.join(m.cmd)}", file=sys.stderr)
    for line in m.tail().splitlines():
        print(f"   | {line}", file=sys.stderr)
    for line in torchx_log_tail(m, cwd).splitlines():
        print(f"   > {line}", file=sys.stderr)
    sys.stderr.flush()


def _ours_result(out: Path, corpus: DedupCorpus) -> Result:
    """Each removed record and its kept one, from the duplicates table (stable id = file << 40 | line)."""
    starts, pos = [], 0
    for f in input_files(str(corpus.path)):
        starts.append(pos)
        with open(f, "rb") as fh:
            pos += sum(1 for line in fh if line.strip())

    def doc(stable: int) -> int:
        return starts[stable >> 40] + (stable & ((1 << 40) - 1)) - 1

    labels: dict[int, int] = {}
    removed: set[int] = set()
    for p in sorted((out / "_dedup").glob("duplicates-*.jsonl")):
        for line in p.read_text().splitlines():
            d = json.loads(line)
            removed.add(doc(d["id"]))
            labels[doc(d["id"])] = labels[doc(d["kept_id"])] = doc(d["kept_id"])
    return Result(removed, labels)


class Harness:
    def __init__(self, a: argparse.Namespace, root: Path, bands: int, rows: int) -> None:
        self.a, self.root, self.bands, self.rows = a, root, bands, rows

    def method_name(self, method: str) -> str:
        return {"ours": f"ours -j {self.a.j}", "datatrove": "datatrove x2"}.get(method, f"{method} x1")

    def run(self, method: str, corpus: DedupCorpus) -> tuple[BenchRow, Optional[Result]]:
        a = self.a
        out = self.root / "out" / f"{corpus.name}-{corpus.docs}-{method}"
        name = self.method_name(method)
        row = BenchRow(name, corpus.name, corpus.docs, None)
        if method in REFS and importlib.util.find_spec(method) is None:
            row.ok, row.skipped, row.note = False, True, f"skipped: not importable ({HINTS[method]})"
            return row, None
        if method == "datatrove" and corpus.docs > a.datatrove_max_docs:
            row.ok, row.skipped = False, True
            row.note = f"skipped: {corpus.docs} docs > --datatrove-max-docs {a.datatrove_max_docs}"
            return row, None
        if method == "ours":
            cmd = [*torchx_cmd(), "run", "-s", "local_cwd", "datapipes.dedup",
                   "--input", f"{corpus.path}/*.jsonl", "--output", str(out), "--field", "text",
                   "--method", "near", "--threshold", str(a.threshold), "--ngram", str(a.ngram),
                   "--action", "drop", "-j", a.j, "--overwrite", "True"]  # fmt: skip
        else:
            cmd = [sys.executable, __file__, "_ref", method, "--input", str(corpus.path),
                   "--output", str(out), "--threshold", str(a.threshold), "--ngram", str(a.ngram),
                   "--num-perm", str(NUM_PERM), "--bands", str(self.bands),
                   "--rows", str(self.rows)]  # fmt: skip

        def once() -> Measurement:
            shutil.rmtree(out, ignore_errors=True)
            return run_measured(cmd, cwd=REPO_ROOT, timeout=a.timeout)

        m = best_of(a.repeat, once)
        row.wall_s, row.peak_rss_mb, row.ok = m.wall_s, m.peak_rss_mb, m.ok
        row.extra.update({"walls": m.walls, "median_s": m.median_s, "cmd": list(m.cmd)})
        result: Optional[Result] = None
        if not m.ok:
            row.note = "FAILED: " + ("timed out" if m.timed_out else f"rc={m.returncode}: {m.tail(1)[:120]}")
            _report_failure(f"{name}/{corpus.name}/{corpus.docs}", m, row.note)
        elif method == "ours":
            if not (out / "_SUCCESS").exists():
                row.ok, row.note = False, "FAILED: no _SUCCESS"
                _report_failure(f"{name}/{corpus.name}/{corpus.docs}", m, row.note)
            else:
                counts = json.loads((out / "_SUCCESS").read_text()).get("dedup", {})
                result = _ours_result(out, corpus)
                row.records_out = counts.get("records_out")
                row.note = "verified; parts + duplicates table"
        else:
            got = m.last_json()
            if got is None or not (out / "result.json").exists():
                row.ok, row.note = False, "FAILED: no counts/result"
                _report_failure(f"{name}/{corpus.name}/{corpus.docs}", m, row.note)
            else:
                res = json.loads((out / "result.json").read_text())
                result = Result(set(res["removed"]), {int(k): v for k, v in res["labels"].items()})
                row.records_out = got["kept"]
                row.note = {
                    "datasketch": f"MinHashLSH {self.bands}x{self.rows}, unverified",
                    "datatrove": f"4 stages x 2 workers, {self.bands}x{self.rows}, unverified",
                    "rensa": f"RMinHashDeduplicator {self.bands} bands, estimated J",
                }[method]
                if got["docs"] != corpus.docs:
                    row.note += f"; read {got['docs']} docs!"
        if result is not None and row.records_out != corpus.docs - len(result.removed):
            row.note += (
                f"; records_out {row.records_out} != docs - removed {corpus.docs - len(result.removed)}!"
            )
        if not a.keep_output:
            shutil.rmtree(out, ignore_errors=True)
        return row, result


def _fmt(v: Optional[float], spec: str) -> str:
    return "-" if v is None else format(v, spec)


def print_rows(title: str, rows: Sequence[BenchRow], truth: Optional[Truth]) -> None:
    print(f"\n{title}")
    if truth is not None:
        print(f"truth: {len(truth.pairs)} pairs, {len(truth.component)} docs in {truth.components} clusters"
              f" (ideal removed {truth.ideal_removed}); {truth.how}; {truth.note}")  # fmt: skip
    head = f"{'method':<22} {'docs':>7} {'wall s':>8} {'docs/s':>9} {'precision':>9} {'recall':>7} "
    head += f"{'removed':>7} {'peak RSS MB':>11}  note"
    print(head)
    print("-" * len(head))
    for r in rows:
        wall = "skipped" if r.skipped else _fmt(r.wall_s, ".2f") if r.ok else "FAILED"
        line = f"{r.method:<22} {r.records:>7} {wall:>8} {_fmt(r.records_per_s, ',.0f'):>9} "
        line += f"{_fmt(r.extra.get('precision'), '.4f'):>9} {_fmt(r.extra.get('recall'), '.4f'):>7} "
        line += f"{_fmt(r.extra.get('removed'), 'd'):>7} {_fmt(r.peak_rss_mb, '.0f'):>11}  {r.note}"
        print(line.rstrip())


@dataclass
class Table:
    corpus: str
    docs: int
    note: str
    rows: list[BenchRow] = field(default_factory=list)
    truth: dict[str, Any] = field(default_factory=dict)

    def row(self, method: str) -> Optional[BenchRow]:
        return next((r for r in self.rows if r.method.split()[0] == method), None)


def _ratio(ours: Optional[BenchRow], ref: Optional[BenchRow]) -> Optional[float]:
    if ours is None or ref is None or not (ours.records_per_s and ref.records_per_s):
        return None
    return ours.records_per_s / ref.records_per_s


def summarize(tables: Sequence[Table], floor: Optional[BenchRow], a: argparse.Namespace) -> dict[str, Any]:
    """Ratios per size, the targets at the largest synthetic size, the launch floor, the crossover."""
    out: dict[str, Any] = {"ratios": []}
    print("\nours vs references (docs/s ratio, > 1: ours faster)")
    print(f"{'corpus':<10} {'docs':>7} {'vs datatrove':>13} {'vs datasketch':>14} {'vs rensa':>9}")
    for t in tables:
        ours = t.row("ours")
        r = {k: _ratio(ours, t.row(k)) for k in REFS}
        out["ratios"].append({"corpus": t.corpus, "docs": t.docs, **r})
        print(f"{t.corpus:<10} {t.docs:>7} {_fmt(r['datatrove'], '.2f'):>13} "
              f"{_fmt(r['datasketch'], '.2f'):>14} {_fmt(r['rensa'], '.2f'):>9}")  # fmt: skip
    synth = [t for t in tables if t.corpus == "synthetic"]
    floor_s = floor.wall_s if floor is not None and floor.ok else None
    print(f"\nlaunch floor (trivial dist.ddp -j {a.j}): {_fmt(floor_s, '.2f')} s")
    out["launch_floor_s"] = floor_s
    cross = next((t.docs for t in synth if (x := _ratio(t.row("ours"), t.row("datasketch"))) and x > 1), None)
    est = None
    both = [t for t in synth if _ratio(t.row("ours"), t.row("datasketch"))]
    if both and floor_s:
        ours_row, ds_row = both[-1].row("ours"), both[-1].row("datasketch")
        assert ours_row is not None and ds_row is not None
        est = crossover(ours_row, floor_s, ds_row)
    out["crossover_docs"], out["crossover_estimate_docs"] = cross, est
    measured = f"{cross:,} documents" if cross else "not reached at these sizes"
    print(f"crossover (ours -j {a.j} faster than datasketch x1 end to end): {measured}")
    if both and floor_s:
        base = f"from {both[-1].docs:,} docs"
        print(
            f"  linear estimate ({base}): "
            + (f"{est:,.0f} documents" if est else "never (datasketch cheaper/doc)")
        )
    targets: dict[str, Any] = {}
    if synth:
        big = synth[-1]
        ours = big.row("ours")
        dt_tables = [t for t in synth if _ratio(t.row("ours"), t.row("datatrove"))]
        print(f"\ntargets (issue 30), synthetic corpus, -j {a.j}, threshold {a.threshold}:")

        def verdict(ok: Optional[bool]) -> str:
            return "not measured" if ok is None else "met" if ok else "MISSED"

        x = _ratio(ours, big.row("datatrove"))
        at = f"at {big.docs:,} docs"
        if x is None and dt_tables:
            last = dt_tables[-1]
            x = _ratio(last.row("ours"), last.row("datatrove"))
            at = f"at {last.docs:,} docs (the largest size datatrove ran on)"
        targets["vs_datatrove"] = {"ratio": x, "where": at, "met": None if x is None else x >= TARGET_DT}
        print(f"  docs/s >= {TARGET_DT:.0f}x datatrove's: {_fmt(x, '.2f')}x {at}: "
              f"{verdict(targets['vs_datatrove']['met'])}")  # fmt: skip
        y = _ratio(ours, big.row("datasketch"))
        targets["vs_datasketch"] = {"ratio": y, "docs": big.docs, "met": None if y is None else y > 1}
        print(f"  faster than datasketch at {big.docs:,} docs: {_fmt(y, '.2f')}x: "
              f"{verdict(targets['vs_datasketch']['met'])}")  # fmt: skip
        p = ours.extra.get("precision") if ours else None
        rc = ours.extra.get("recall") if ours else None
        targets["precision"] = {"value": p, "met": None if p is None else p >= TARGET_P}
        targets["recall"] = {"value": rc, "met": None if rc is None else rc >= TARGET_R}
        for what, v, goal in (("precision", p, TARGET_P), ("recall", rc, TARGET_R)):
            print(
                f"  {what} >= {goal} at {big.docs:,} docs: {_fmt(v, '.4f')}: {verdict(targets[what]['met'])}"
            )
    out["targets"] = targets
    return out


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sizes", default="2000,20000,200000", help="synthetic corpus sizes (documents)")
    ap.add_argument("--threshold", type=float, default=0.8, help="Jaccard threshold")
    ap.add_argument("--ngram", type=int, default=5, help="words per shingle")
    ap.add_argument("--j", default="1x2", help="torchx -j of ours and of the launch floor")
    ap.add_argument("--repeat", type=int, default=1, help="runs per measurement; the fastest is kept")
    ap.add_argument("--workdir", type=Path, default=None, help="corpora and outputs (default: a temp dir)")
    ap.add_argument("--methods", default=",".join(METHODS), help=f"subset of {','.join(METHODS)}")
    ap.add_argument("--datatrove-max-docs", type=int, default=20_000, help="datatrove runs up to this size")
    ap.add_argument(
        "--exact-max", type=int, default=20_000, help="exact truth join up to this synthetic size"
    )
    ap.add_argument(
        "--real-max-docs", type=int, default=None, help="first N license files (0: no real corpus)"
    )
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per run before it is killed")
    ap.add_argument("--keep-output", action="store_true", help="keep the output directories")
    ap.add_argument("--json", type=Path, help="save the results here")
    a = parse_bench_args(ap, argv, METHODS)
    a.sizes = [int(s) for s in a.sizes.split(",") if s.strip()]
    return a


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "_ref":
        return _ref_main(argv[1:])
    a = parse_args(argv)
    from torchx_datapipes.dedup import optimal_params  # the op's bands x rows, given to the references

    params = optimal_params(a.threshold, NUM_PERM)
    root = a.workdir or Path(tempfile.mkdtemp(prefix="bench-dedup-"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"# cpus={os.cpu_count()} python={sys.version.split()[0]} peak RSS={rss_source()} workdir={root}")
    lsh = f"bands x rows={params.bands}x{params.rows}"
    print(f"# threshold={a.threshold} ngram={a.ngram} num_perm={NUM_PERM} {lsh}")
    h = Harness(a, root, params.bands, params.rows)
    floor: Optional[BenchRow] = None
    if "floor" in a.methods:
        m = best_of(a.repeat, lambda: measure_ddp_job(a.j, workdir=root / "floor", timeout=a.timeout))
        floor = BenchRow(f"launch floor -j {a.j}", "-", 0, m.wall_s, m.peak_rss_mb, ok=m.ok,
                         note="trivial dist.ddp job (measured once)", extra={"walls": m.walls})  # fmt: skip
        if not m.ok:
            floor.note = "FAILED: " + ("timed out" if m.timed_out else f"rc={m.returncode}")
            _report_failure("launch floor", m, floor.note)
        print(f"# launch floor: {m.wall_s:.2f}s {'ok' if m.ok else 'FAILED'}", flush=True)
    corpora: list[Callable[[], DedupCorpus]] = []
    if a.real_max_docs != 0:
        corpora.append(lambda: license_corpus(root, a.real_max_docs))
    for n in a.sizes:
        corpora.append(lambda n=n: synthetic_corpus(root, n))  # type: ignore[misc]
    tables: list[Table] = []
    truths: list[Truth] = []
    for make in corpora:
        t0 = time.perf_counter()
        corpus = make()
        print(f"# corpus {corpus.name} {corpus.docs} docs: {corpus.note} ({time.perf_counter() - t0:.1f}s)")
        table = Table(corpus.name, corpus.docs, corpus.note)
        if floor is not None:
            table.rows.append(floor)
        scored: list[tuple[BenchRow, Result]] = []
        for method in (m for m in a.methods if m != "floor"):
            row, result = h.run(method, corpus)
            table.rows.append(row)
            rate = f"{row.records_per_s:,.0f} docs/s" if row.records_per_s else row.note
            print(f"# {row.method:<16} {corpus.name:<9} {corpus.docs:>7}: {_fmt(row.wall_s, '.2f')}s {rate}",
                  flush=True)  # fmt: skip
            if result is not None:
                scored.append((row, result))
        truth = compute_truth(corpus, a.threshold, a.ngram, a.exact_max, [res for _, res in scored])
        for row, result in scored:
            row.extra.update(score(result, truth))
        table.truth = {"pairs": len(truth.pairs), "how": truth.how, "clusters": truth.components,
                       "docs_in_clusters": len(truth.component), "ideal_removed": truth.ideal_removed,
                       "note": truth.note}  # fmt: skip
        tables.append(table)
        truths.append(truth)
    print(f"\n== results (peak RSS: {rss_source()}; precision/recall: removed documents vs the components"
          f" of the pairs with Jaccard >= {a.threshold}) ==")  # fmt: skip
    for t, truth in zip(tables, truths):
        print_rows(f"{t.corpus}: {t.docs:,} documents ({t.note})", t.rows, truth)
    summary = summarize(tables, floor, a)
    if a.json:
        meta = {"threshold": a.threshold, "ngram": a.ngram, "j": a.j, "num_perm": NUM_PERM,
                "bands": params.bands, "rows": params.rows, "repeat": a.repeat, "rss": rss_source(),
                "cpus": os.cpu_count(), "datatrove_max_docs": a.datatrove_max_docs,
                "exact_max": a.exact_max}  # fmt: skip
        tables_json = [{"corpus": t.corpus, "docs": t.docs, "note": t.note, "truth": t.truth, "rows": t.rows}
                       for t in tables]  # fmt: skip
        write_json(a.json, {"meta": meta, "tables": tables_json, **summary})
        print(f"\n# results saved to {a.json}")
    failed = [r for t in tables for r in t.rows if not r.ok and not r.skipped]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
