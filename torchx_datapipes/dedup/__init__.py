"""Near- and exact-duplicate detection and n-gram decontamination: the pure library (issue 30).

Near dedup (``--method near``), one function per stage, each a pure function of its records:

1. :class:`ShingleBatch` ``.from_texts(texts, n)``: word n-gram sets as sorted uint64 hashes;
2. :class:`MinHasher` ``.signatures(batch)``: vectorised MinHash (numpy, or torch on CUDA);
3. :func:`band_keys` + :func:`bucket_pairs` / :func:`candidate_pairs`: banded LSH with the
   ``(bands, rows)`` of :func:`optimal_params` (16 x 8 for threshold 0.8 and 128 permutations);
4. :func:`verify_pairs`: exact Jaccard of every candidate pair;
5. :func:`label_components` (or its steps :func:`propagate`, :func:`apply_proposals`, :func:`shortcut`
   for a sharded run; :func:`union_find` is the reference) and :func:`keep_mask`: keep the
   smallest id (first in input order) of each component;
6. :class:`DedupCounts`: the manifest's counts.

Exact dedup: :func:`exact_keys` + :func:`first_ids`. Decontamination: :class:`NgramIndex`.

Every result depends only on the texts and their ids, never on how records are split across
ranks, batches or shards, so the same input gives the same output for any ``-j``. A distributed
engine runs stages 1-2 on each rank's share, exchanges band keys by key (3), pairs and shingle rows
by pair (4) and labels by node (5); see each module's docstring.

Non-goals: no I/O, no record or manifest formats, no exchange transport (the engine's job), and
no cap on bucket size (a band shared by ``g`` records gives ``g * (g - 1) / 2`` candidate pairs,
so run exact dedup first on corpora with many identical copies).
"""

from torchx_datapipes.dedup.components import (
    apply_proposals,
    cluster_sizes,
    keep_mask,
    label_components,
    propagate,
    representatives,
    shortcut,
    union_find,
)
from torchx_datapipes.dedup.counts import DedupCounts
from torchx_datapipes.dedup.decontam import DecontamMatch, NgramIndex
from torchx_datapipes.dedup.exact import ExactMode, exact_keys, first_ids
from torchx_datapipes.dedup.lsh import LSHParams, band_keys, bucket_pairs, candidate_pairs, optimal_params
from torchx_datapipes.dedup.minhash import EMPTY, Backend, MinHasher
from torchx_datapipes.dedup.shingles import ShingleBatch, ngrams, shingle_hashes, words
from torchx_datapipes.dedup.verify import jaccard, pair_jaccard, verify_pairs

__all__ = [
    "EMPTY",
    "Backend",
    "DecontamMatch",
    "DedupCounts",
    "ExactMode",
    "LSHParams",
    "MinHasher",
    "NgramIndex",
    "ShingleBatch",
    "apply_proposals",
    "band_keys",
    "bucket_pairs",
    "candidate_pairs",
    "cluster_sizes",
    "exact_keys",
    "first_ids",
    "jaccard",
    "keep_mask",
    "label_components",
    "ngrams",
    "optimal_params",
    "pair_jaccard",
    "propagate",
    "representatives",
    "shingle_hashes",
    "shortcut",
    "union_find",
    "verify_pairs",
    "words",
]
