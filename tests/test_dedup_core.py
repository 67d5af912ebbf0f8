"""Core dedup library (issue 30): shingles, MinHash, LSH, verification, components, exact, decontam.

The corpus is generated here, deterministically: ~550 English-like paragraphs built from 400
templated sentences, a third of them near-duplicate variants (word swaps, deletions, insertions,
replacements; variants of variants form chains), exact copies, case/punctuation variants and a
few short or empty texts. True Jaccard of the variant pairs spans 0.5-1.0. Brute-force exact
Jaccard over all pairs is the reference. ``pytest -s`` prints the recall/precision figures.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from torchx_datapipes import dedup
from torchx_datapipes.dedup import (
    EMPTY,
    DedupCounts,
    ExactMode,
    LSHParams,
    MinHasher,
    NgramIndex,
    ShingleBatch,
    band_keys,
    bucket_pairs,
    candidate_pairs,
    exact_keys,
    first_ids,
    keep_mask,
    label_components,
    ngrams,
    optimal_params,
    pair_jaccard,
    shingle_hashes,
    union_find,
    verify_pairs,
    words,
)
from torchx_datapipes.dedup import minhash as minhash_mod

THRESHOLD, NGRAM = 0.8, 5
PARAMS = optimal_params(THRESHOLD)
HASHER = MinHasher(PARAMS.num_perm)

# ---------------------------------------------------------------- the corpus

NAMES = "Alice Bob Carmen Dmitri Elena Farid Grace Hiroshi Ines Jamal Keiko Liam Mateo Nadia Oskar".split()
ADJ = (
    "small large quiet noisy ancient modern bright dark narrow wide careful reckless early late cold"
    " warm bitter sweet heavy light rural urban coastal northern southern hidden public rusty golden"
).split()
NOUN = (
    "river bridge library market harbour engine garden village committee report museum orchard"
    " tower station kitchen archive lantern ferry mountain valley factory school hospital theatre"
    " bakery telescope manuscript violin glacier meadow railway courtyard lighthouse festival"
).split()
VERB = (
    "repaired visited described painted measured crossed opened closed studied photographed"
    " admired inspected rebuilt ignored mapped restored guarded cleaned sold borrowed"
).split()
ADV = "slowly quickly carefully rarely often quietly suddenly eventually proudly nervously".split()
PREP = "near behind beyond under above beside across inside around toward".split()
OPENERS = ["In {year},", "According to {name},", "After the storm,", "Every spring,", "Later that evening,"]
OPENERS += ["By the end of the decade,", "For reasons nobody recorded,", "", "", ""]
TAILS = ["and nobody seemed surprised.", "while the {adj} {noun} stayed {adj2}.", "as the council promised."]
TAILS += ["because the {noun} had become too {adj} to use.", "although {name} disagreed.", ".", ".", "."]


def sentence(rng: random.Random) -> str:
    def fill(template: str) -> str:
        return template.format(
            year=rng.randrange(1850, 2024),
            name=rng.choice(NAMES),
            adj=rng.choice(ADJ),
            adj2=rng.choice(ADJ),
            noun=rng.choice(NOUN),
        )

    opener = fill(rng.choice(OPENERS))
    subject = rng.choice([f"the {rng.choice(ADJ)} {rng.choice(NOUN)}", rng.choice(NAMES), "the committee"])
    body = f"{subject} {rng.choice(ADV)} {rng.choice(VERB)} the {rng.choice(ADJ)} {rng.choice(NOUN)}"
    body += f" {rng.choice(PREP)} the {rng.choice(NOUN)}"
    tail = fill(rng.choice(TAILS))
    text = f"{opener} {body}" if opener else body[0].upper() + body[1:]
    return text + (tail if tail == "." else ", " + tail)


def edit(tokens: list[str], rng: random.Random, k: int) -> list[str]:
    out, vocab = list(tokens), ADJ + NOUN + VERB + ADV
    for _ in range(k):
        i, op = rng.randrange(len(out)), rng.randrange(4)
        if op == 0 and i + 1 < len(out):
            out[i], out[i + 1] = out[i + 1], out[i]
        elif op == 1 and len(out) > 10:
            del out[i]
        elif op == 2:
            out.insert(i, rng.choice(vocab))
        else:
            out[i] = rng.choice(vocab)
    return out


def make_corpus(seed: int = 0, n_base: int = 220, n_variants: int = 330) -> tuple[list[str], list[str]]:
    """``(docs, sentence pool)``; docs in a shuffled order, so originals are not always first."""
    rng = random.Random(seed)
    pool = [sentence(rng) for _ in range(400)]
    docs = [" ".join(rng.sample(pool, rng.randint(4, 8))) for _ in range(n_base)]
    for _ in range(n_variants):
        chain = len(docs) > n_base and rng.random() < 0.5
        src = rng.choice(docs[n_base:] if chain else docs[:n_base])
        kind = rng.random()
        if kind < 0.06:
            docs.append(src)
        elif kind < 0.12:
            docs.append(src.upper().replace(",", " ;"))
        else:
            docs.append(" ".join(edit(src.split(), rng, rng.choice([1, 1, 1, 2, 2, 2, 3, 3, 4, 5, 6, 8]))))
    docs += ["", "?!", "Hello world", "hello, WORLD!", "Short text here", "short TEXT, here."]
    rng.shuffle(docs)
    return docs, pool


# ---------------------------------------------------------------- brute-force references


def bf_words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def bf_grams(text: str, n: int, short: str = "words") -> list[str]:
    w = bf_words(text)
    if len(w) < n:
        return w if short == "words" else [" ".join(w)] if w else []
    return [" ".join(w[i : i + n]) for i in range(len(w) - n + 1)]


def bf_jaccard(texts: list[str], n: int) -> dict[tuple[int, int], float]:
    """Exact Jaccard of every pair with a shared n-gram (over the n-gram strings, no hashing)."""
    sets = [frozenset(bf_grams(t, n)) for t in texts]
    out = {}
    for i, j in itertools.combinations(range(len(sets)), 2):
        inter = len(sets[i] & sets[j])
        if inter:
            out[(i, j)] = inter / (len(sets[i]) + len(sets[j]) - inter)
    return out


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return make_corpus()[0]


@pytest.fixture(scope="module")
def truth(corpus: list[str]) -> dict[tuple[int, int], float]:
    return bf_jaccard(corpus, NGRAM)


def near_pairs(texts: list[str], ids: list[int]) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """Candidate pairs of one process (ids in input order) and the shingle rows by id."""
    batch = ShingleBatch.from_texts(texts, NGRAM)
    keep = batch.lengths > 0
    sig = HASHER.signatures(batch.select(keep), backend="numpy")
    kept_ids = np.asarray(ids, dtype=np.int64)[keep]
    rows = {i: batch.row(k) for k, i in enumerate(ids)}
    return candidate_pairs(band_keys(sig, PARAMS), kept_ids), rows


def verified_edges(cand: np.ndarray, rows: dict[int, np.ndarray]) -> list[tuple[int, int]]:
    return [(a, b) for a, b in cand[verify_pairs(cand, rows, THRESHOLD)].tolist()]


# ---------------------------------------------------------------- shingles


def test_words_lowercase_unicode_word_runs() -> None:
    assert words("Hello, WORLD! Café déjà-vu_2 naïve") == ["hello", "world", "café", "déjà", "vu_2", "naïve"]
    assert words("  ?! ") == []
    with pytest.raises(TypeError, match="--field"):
        words(3)  # type: ignore[arg-type]


def test_ngrams_of_a_short_text() -> None:
    assert ngrams(["a", "b", "c"], 2) == ["a b", "b c"]
    assert ngrams(["a", "b"], 5) == ["a", "b"]  # near dedup: its words
    assert ngrams(["a", "b"], 5, short="whole") == ["a b"]  # decontamination: the whole text
    assert ngrams(["a", "b", "c", "d", "e"], 5) == ["a b c d e"]
    assert ngrams([], 5) == []
    with pytest.raises(ValueError, match="--ngram"):
        ngrams(["a"], 0)


def test_shingle_hashes_are_a_sorted_set() -> None:
    h = shingle_hashes("a b a b a b", 2)
    assert h.dtype == np.uint64 and len(h) == 2 and (np.diff(h.astype(np.float64)) > 0).all()
    assert len(shingle_hashes("", 5)) == 0
    assert (shingle_hashes("One, two!", 5) == shingle_hashes("one two", 5)).all()


def test_hashes_and_signatures_equal_in_a_fresh_interpreter(tmp_path: Path) -> None:
    """Pinned values, and equal in another process with another hash seed, cwd and sys.path."""
    text = "The quick brown fox jumps over the lazy dog."
    pinned = [3275419600353722387, 6086655325213332729, 10403364002775130632]
    assert shingle_hashes(text, 5).tolist()[:3] == pinned
    sig = HASHER.signatures(ShingleBatch.from_texts([text], 5), backend="numpy")[0]
    assert sig[:2].tolist() == [1755118561068033851, 3308760606942748499]
    code = (
        "from torchx_datapipes.dedup import MinHasher, ShingleBatch, shingle_hashes\n"
        f"t = {text!r}\n"
        "print(shingle_hashes(t, 5).tolist())\n"
        f"h = MinHasher({PARAMS.num_perm})\n"
        "print(h.signatures(ShingleBatch.from_texts([t], 5), 'numpy')[0].tolist())\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out == [str(shingle_hashes(text, 5).tolist()), str(sig.tolist())]


# ---------------------------------------------------------------- MinHash


def test_permutations_are_multiply_add_modulo_2_64() -> None:
    rng = np.random.default_rng(1)
    x = rng.integers(0, 2**64, size=300, dtype=np.uint64)
    x[:5] = [0, 1, 2**63 - 1, 2**63, 2**64 - 1]
    got = HASHER.hash_values(x)
    params = list(zip((int(v) for v in HASHER.a), (int(v) for v in HASHER.b)))
    assert all(a % 2 == 1 for a, _ in params)  # odd: a bijection of the 64-bit values
    want = [[((a * int(v) + b) % 2**64) >> 1 for a, b in params] for v in x]
    assert got.tolist() == want


def test_kernels_at_the_wrap_around_bounds() -> None:
    """Products and sums that wrap around 2**64 (and the int64 sign in torch) give the same minima."""
    h = MinHasher(4)
    object.__setattr__(h, "a", np.array([2**64 - 1, 1, 2**63 + 1, 0x9E3779B97F4A7C15], dtype=np.uint64))
    object.__setattr__(h, "b", np.array([2**64 - 1, 0, 2**63, 2**63 - 1], dtype=np.uint64))
    x = np.array([0, 1, 2**31 - 1, 2**32, 2**63 - 1, 2**63, 2**63 + 1, 2**64 - 2, 2**64 - 1], np.uint64)
    params = list(zip((int(v) for v in h.a), (int(v) for v in h.b)))
    want = [[((a * int(v) + b) % 2**64) >> 1 for a, b in params] for v in x]
    assert h.hash_values(x).tolist() == want
    batch = ShingleBatch.from_rows(np.array([v], dtype=np.uint64) for v in x)
    assert h.signatures(batch, backend="numpy").tolist() == want
    pairs = ShingleBatch.from_rows([x[:4], x[4:], np.empty(0, np.uint64)])  # minima across signs
    col = np.array(want)
    expect = [col[:4].min(axis=0).tolist(), col[4:].min(axis=0).tolist(), [int(EMPTY)] * 4]
    assert h.signatures(pairs, backend="numpy").tolist() == expect
    if importlib.util.find_spec("torch") is not None:
        assert h.signatures(batch, backend="torch", device="cpu").tolist() == want
        assert h.signatures(pairs, backend="torch", device="cpu").tolist() == expect


def test_signature_is_the_minimum_and_independent_of_the_batch(
    corpus: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = ShingleBatch.from_texts(corpus[:60], NGRAM)
    sig = HASHER.signatures(batch, backend="numpy")
    for i in range(len(batch)):
        row = batch.row(i)
        want = HASHER.hash_values(row).min(axis=0) if len(row) else np.full(HASHER.num_perm, EMPTY)
        assert (sig[i] == want).all()
    alone = HASHER.signatures(ShingleBatch.from_texts(corpus[30:31], NGRAM), backend="numpy")
    assert (alone[0] == sig[30]).all()
    monkeypatch.setattr(minhash_mod, "_BLOCK_VALUES", 3 * HASHER.num_perm)  # rows span many blocks
    assert (HASHER.signatures(batch, backend="numpy") == sig).all()


def test_torch_kernel_equals_numpy(corpus: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    batch = ShingleBatch.from_texts(corpus[:80], NGRAM)
    want = HASHER.signatures(batch, backend="numpy")
    assert (HASHER.signatures(batch, backend="torch", device="cpu") == want).all()
    monkeypatch.setattr(minhash_mod, "_BLOCK_VALUES", 5 * HASHER.num_perm)
    assert (HASHER.signatures(batch, backend="torch", device="cpu") == want).all()


def test_minhasher_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="num_perm"):
        MinHasher(0)
    with pytest.raises(ValueError, match="seed"):
        MinHasher(8, seed=-1)
    with pytest.raises(ValueError, match="cuda"):
        HASHER.signatures(ShingleBatch.from_rows([]), backend="cuda")


# ---------------------------------------------------------------- LSH


def test_optimal_params_for_threshold() -> None:
    assert optimal_params(0.8) == LSHParams(16, 8)
    assert optimal_params(0.8, 112) == LSHParams(14, 8)  # datatrove's choice for 5-word shingles
    assert optimal_params(0.8, 128, 0.5, 0.5) == LSHParams(9, 13)  # datasketch's default weights
    assert PARAMS.probability(0.8) > 0.94 and PARAMS.probability(0.3) < 0.002
    with pytest.raises(ValueError, match="threshold"):
        optimal_params(1.0)
    with pytest.raises(ValueError, match="bands"):
        LSHParams(0, 8)


def test_band_keys_equal_bands_equal_keys() -> None:
    sig = np.arange(4 * 6, dtype=np.uint64).reshape(4, 6)
    sig[1, :3] = sig[0, :3]  # same first band as row 0
    sig[2, 3:] = sig[0, :3]  # row 0's first band values, but in the second band
    keys = band_keys(sig, LSHParams(2, 3))
    assert keys.shape == (4, 2) and keys[0, 0] == keys[1, 0] and keys[0, 1] != keys[1, 1]
    assert keys[2, 1] != keys[0, 0] and len(set(keys.ravel().tolist())) == 7
    sig[3] = EMPTY
    with pytest.raises(ValueError, match="without words"):
        band_keys(sig, LSHParams(2, 3))
    with pytest.raises(ValueError, match="signature matrix"):
        band_keys(sig, LSHParams(3, 3))


def test_bucket_pairs_are_all_pairs_sharing_a_key() -> None:
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 40, size=300).astype(np.uint64)
    ids = rng.integers(0, 120, size=300)
    by_key: dict[int, set[int]] = {}
    for k, i in zip(keys.tolist(), ids.tolist()):
        by_key.setdefault(k, set()).add(i)
    want = sorted({p for members in by_key.values() for p in itertools.combinations(sorted(members), 2)})
    got = bucket_pairs(keys, ids)
    assert got.dtype == np.int64 and [tuple(p) for p in got.tolist()] == want
    assert bucket_pairs(np.empty(0, np.uint64), np.empty(0, np.int64)).shape == (0, 2)


# ---------------------------------------------------------------- recall and precision


def test_recall_and_precision_against_brute_force(
    corpus: list[str], truth: dict[tuple[int, int], float]
) -> None:
    ids = list(range(len(corpus)))
    cand, rows = near_pairs(corpus, ids)
    ok = verify_pairs(cand, rows, THRESHOLD)
    sims = pair_jaccard(cand, rows)
    true = {p for p, s in truth.items() if s >= THRESHOLD}
    cand_set = {(a, b) for a, b in cand.tolist()}
    verified = {(a, b) for (a, b), v in zip(cand.tolist(), ok) if v}
    for (a, b), s in zip(cand.tolist(), sims):  # hashed Jaccard == string Jaccard here
        assert s == pytest.approx(truth.get((a, b), 0.0), abs=1e-12)
    recall = len(verified & true) / len(true)
    print(
        f"\n{PARAMS.bands}x{PARAMS.rows} at {THRESHOLD}: {len(corpus)} docs, {len(true)} true pairs,"
        f" {len(cand_set)} candidates, unverified precision {len(cand_set & true) / len(cand_set):.3f},"
        f" verified {len(verified)}, precision {len(verified & true) / len(verified):.3f},"
        f" recall {recall:.3f}"
    )
    assert len(true) > 200 and sum(1 for s in truth.values() if 0.5 <= s < THRESHOLD) > 200
    assert verified <= true  # verified precision is 1 by construction
    assert verified == cand_set & true
    assert recall >= 0.95


def test_components_equal_union_find(corpus: list[str], truth: dict[tuple[int, int], float]) -> None:
    cand, rows = near_pairs(corpus, list(range(len(corpus))))
    edges = verified_edges(cand, rows)
    reference = union_find(edges)
    for shards in (1, 2, 5):
        labels, rounds = label_components([edges[i::shards] for i in range(shards)])
        assert labels == reference and rounds <= 10
    brute: dict[int, int] = union_find([p for p, s in truth.items() if s >= THRESHOLD])
    same = sum(1 for i in range(len(corpus)) if reference.get(i, i) == brute.get(i, i))
    print(f"\nrecords whose representative equals brute force's: {same}/{len(corpus)}")
    assert same / len(corpus) >= 0.98


@pytest.mark.parametrize("n", [2, 50, 1000])
def test_label_propagation_on_chains_and_random_graphs(n: int) -> None:
    rng = random.Random(n)
    perm = list(range(n))
    rng.shuffle(perm)
    chain = [(perm[i], perm[i + 1]) for i in range(n - 1)]
    random_graph = [(rng.randrange(n), rng.randrange(n)) for _ in range(n)]
    tuples = [((a % 3, a), (b % 3, b)) for a, b in random_graph]  # ids may be tuples, e.g. (file, line)
    graphs: list[list[Any]] = [chain, random_graph, tuples]
    for edges in graphs:
        rng.shuffle(edges)
        labels, rounds = label_components([edges[i::3] for i in range(3)])
        assert labels == union_find(edges) and rounds <= 20


# ---------------------------------------------------------------- keep rule and sharding


def test_keep_rule_keeps_the_first_record_of_each_component() -> None:
    base, _ = make_corpus(seed=9, n_base=1, n_variants=0)
    texts = [
        "an unrelated text about the golden lighthouse on the northern shore at night",
        base[0] + " but the last word differs",
        base[0] + " but the last word changed",
        "another unrelated text on the bakery in the southern market square",
        base[0],
    ]
    cand, rows = near_pairs(texts, list(range(len(texts))))
    edges = verified_edges(cand, rows)
    labels, _ = label_components([edges])
    assert keep_mask(range(len(texts)), labels).tolist() == [True, True, False, True, False]
    assert dedup.representatives(range(5), labels) == [0, 1, 1, 3, 1]
    counts = DedupCounts.from_labels(5, len(cand), len(edges), labels)
    assert (counts.records_out, counts.clusters, counts.largest_cluster) == (3, 1, 3)
    assert counts.as_manifest()["false_positive_rate"] == counts.false_positive_rate


def simulate_ranks(docs: list[str], world: int, seed: int) -> tuple[list[tuple[int, int]], dict[int, int]]:
    """Near dedup as ``world`` ranks would run it: random shares, in shuffled order, keyed exchanges."""
    rng = random.Random(seed)
    owner = [rng.randrange(world) for _ in docs]
    shares: list[list[int]] = [[i for i in range(len(docs)) if owner[i] == r] for r in range(world)]
    for share in shares:
        rng.shuffle(share)
    inbox: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(world)]
    rows: dict[int, np.ndarray] = {}
    for share in shares:  # each rank: shingles, signatures, band keys; send (key, id) by key
        batch = ShingleBatch.from_texts([docs[i] for i in share], NGRAM)
        rows.update({i: batch.row(k) for k, i in enumerate(share)})
        keep = batch.lengths > 0
        keys = band_keys(HASHER.signatures(batch.select(keep), backend="numpy"), PARAMS)
        ids = np.broadcast_to(np.asarray(share, dtype=np.int64)[keep][:, None], keys.shape)
        dest = (keys % np.uint64(world)).astype(np.int64)
        for r in range(world):
            inbox[r].append((keys[dest == r], ids[dest == r]))
    pairs = [bucket_pairs(*(np.concatenate(part) for part in zip(*box))) for box in inbox]
    cand = np.unique(np.concatenate(pairs), axis=0)
    edges = verified_edges(cand, rows)
    rng.shuffle(edges)
    labels, _ = label_components([edges[r::world] for r in range(world)])
    return sorted(edges), labels


def test_same_result_for_any_split_into_ranks(corpus: list[str]) -> None:
    edges, labels = simulate_ranks(corpus, 1, 0)
    keep = keep_mask(range(len(corpus)), labels)
    for world, seed in ((2, 1), (3, 2), (7, 3)):
        e, lab = simulate_ranks(corpus, world, seed)
        assert e == edges and lab == labels
        assert (keep_mask(range(len(corpus)), lab) == keep).all()


# ---------------------------------------------------------------- exact


def test_exact_keys_and_first_ids() -> None:
    values: list[Any] = ["a b", "a b", "A, b!", b"a b", "c"]
    keys = exact_keys(values)
    assert keys.dtype == np.dtype("S32") and keys[0] == keys[1] == keys[3] and keys[0] != keys[2]
    norm = exact_keys(values, "normalized")
    assert norm[0] == norm[2] and norm[0] != norm[4]
    ids = np.array([40, 10, 30, 20, 50])
    assert first_ids(keys, ids).tolist() == [10, 10, 30, 10, 50]
    order = np.random.default_rng(0).permutation(5)
    assert first_ids(keys[order], ids[order]).tolist() == [[10, 10, 30, 10, 50][i] for i in order]
    assert first_ids(norm, ids).tolist() == [10, 10, 10, 10, 50]
    with pytest.raises(TypeError, match="--field"):
        exact_keys(["a", 3])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="UTF-8"):
        exact_keys([b"\xff"], ExactMode.NORMALIZED)


# ---------------------------------------------------------------- decontamination


def bf_decontam(refs: list[str], docs: list[str], n: int) -> list[tuple[int, str, int] | None]:
    ref_sets = [set(bf_grams(r, n, "whole")) for r in refs]
    every = set().union(*ref_sets)
    out: list[tuple[int, str, int] | None] = []
    for d in docs:
        grams = bf_grams(d, n, "whole")
        hits = [r for r, s in enumerate(ref_sets) if s.intersection(grams)]
        if not hits:
            out.append(None)
            continue
        first = next(g for g in grams if g in ref_sets[hits[0]])
        out.append((hits[0], first, len(set(grams) & every)))
    return out


@pytest.mark.parametrize("n", [13, 6])
def test_decontamination_equals_brute_force(n: int) -> None:
    docs, pool = make_corpus(seed=5, n_base=120, n_variants=60)
    rng = random.Random(n)
    refs = [rng.choice(pool) for _ in range(25)] + ["Hello world", "completely unrelated words only here"]
    refs += [" ".join(d.split()[10:30]) for d in rng.sample(docs, 5)]
    index = NgramIndex.build(range(len(refs)), refs, n=n)
    got = [(m.ref_id, m.ngram, m.shared) if m else None for m in index.match_batch(docs)]
    want = bf_decontam(refs, docs, n)
    assert got == want
    assert 0 < sum(m is not None for m in got) < len(docs)
    parts = [NgramIndex.build(range(i, len(refs), 3), refs[i::3], n=n) for i in range(3)]
    merged = parts[2].merge(parts[0]).merge(parts[1])
    assert (merged.keys == index.keys).all() and (merged.ref_ids == index.ref_ids).all()


def test_decontamination_short_texts_and_errors() -> None:
    index = NgramIndex.build([7, 3], ["Hello world", "hello, WORLD!"], n=13)
    assert len(index) == 1
    match = index.match("HELLO world")
    assert match is not None and (match.ref_id, match.ngram, match.shared) == (3, "hello world", 1)
    assert index.match("hello world again") is None and index.match("") is None
    with pytest.raises(ValueError, match="n=13 and n=5"):
        index.merge(NgramIndex.build([], [], n=5))


def test_public_api_is_sorted_and_exported() -> None:
    assert dedup.__all__ == sorted(dedup.__all__, key=lambda s: (not s.isupper(), not s[0].isupper(), s))
    assert [name for name in dedup.__all__ if not hasattr(dedup, name)] == []
