"""Micro-benchmark of the dedup core (issue 30): MinHash throughput, and LSH quality vs datasketch.

usage (from the repo root)::

    .venv/bin/python benchmarks/bench_dedup_core.py                 # throughput table
    .venv/bin/python benchmarks/bench_dedup_core.py --quality       # + recall/precision table
    PYTHONPATH=/tmp/ds .venv/bin/python benchmarks/bench_dedup_core.py --quality  # + datasketch

datasketch is not a dependency: install it somewhere else (``pip install --target /tmp/ds
--no-deps datasketch scipy``) and put that on ``PYTHONPATH``; its rows are skipped otherwise.

Throughput (in-process, best of ``--repeat`` in CPU seconds of the process, because wall time
on a shared 2-core machine mostly measures the neighbours; torch cpu counts all its threads): ``--docs``
synthetic documents of ~``--words`` Zipf-distributed words, 5-word shingles, ``--num-perm``
permutations. Rows:

- ``shingle+hash``: :meth:`ShingleBatch.from_texts` (lowercase, ``\\w+``, 5-grams, xxh3_64, unique);
- ``numpy kernel``: :meth:`MinHasher.signatures` from those hashes (``((a*x+b) mod 2**64) >> 1``);
- ``torch cpu`` / ``torch cuda``: the same kernel in torch (cuda only when present);
- ``python loop``: the same numbers with Python ints, one doc at a time (on a subset);
- ``datasketch``: ``MinHash(num_perm).update_batch(shingle bytes)`` per doc, *including* its own
  SHA-1 hashing of the shingles, so compare it with ``text->signature (ours)``;
- ``lsh+verify+cc``: band keys, candidate pairs, exact Jaccard and components for the batch.

Quality (``--quality``): the tests' corpus generator (tests/test_dedup_core.py, three seeds),
brute-force exact Jaccard >= 0.8 as the truth; recall and precision of candidate pairs before and
after exact verification, for ours (16x8) and datasketch ``MinHashLSH`` (its default weights give
9x13; with weights (0.05, 0.95) it picks our 16x8).

Non-goals: no multi-process runs (the engine's job), no statistics beyond best-of-N.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from torchx_datapipes.dedup import (  # noqa: E402
    MinHasher,
    ShingleBatch,
    band_keys,
    candidate_pairs,
    label_components,
    ngrams,
    optimal_params,
    verify_pairs,
    words,
)


@dataclass
class Row:
    method: str
    docs: int
    seconds: Optional[float]  # CPU seconds of this process (all its threads)
    shingle_perms: int  # shingles x permutations hashed (0: not a MinHash row)
    note: str = ""

    @property
    def docs_per_s(self) -> Optional[float]:
        return self.docs / self.seconds if self.seconds else None

    @property
    def mhash_per_s(self) -> Optional[float]:
        return self.shingle_perms / self.seconds / 1e6 if self.seconds and self.shingle_perms else None


def best_of(repeat: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    """Fastest of ``repeat`` runs in CPU seconds (``process_time``: robust on a shared machine)."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.process_time()
        out = fn()
        best = min(best, time.process_time() - t)
    return best, out


def synthetic_docs(n: int, n_words: int, seed: int) -> list[str]:
    """Zipf-distributed pseudo-English words (20k-word vocabulary) in sentences of 15 words; one doc
    in five is a near copy of an earlier one (a few words replaced or dropped)."""
    rng = np.random.default_rng(seed)
    syll = ["ka", "lo", "mi", "ne", "ru", "ta", "shi", "po", "an", "el", "or", "ist", "ven", "dra"]
    vocab = ["".join(rng.choice(syll, size=rng.integers(1, 4))) + str(i % 7 or "") for i in range(20_000)]
    ranks = np.minimum(rng.zipf(1.3, size=n * n_words * 2), len(vocab)) - 1
    docs: list[list[str]] = []
    pos = 0
    for _ in range(n):
        if docs and rng.random() < 0.2:
            toks = list(docs[int(rng.integers(len(docs)))])
            for _ in range(int(rng.integers(1, 6))):
                i = int(rng.integers(len(toks)))
                toks[i : i + 1] = [] if rng.random() < 0.5 else [vocab[int(rng.integers(len(vocab)))]]
        else:
            k = int(rng.integers(n_words // 2, n_words * 3 // 2))
            toks = [vocab[r] for r in ranks[pos : pos + k]]
            pos += k
        docs.append(toks)
    return [". ".join(" ".join(t[i : i + 15]).capitalize() for i in range(0, len(t), 15)) + "." for t in docs]


def python_signatures(batch: ShingleBatch, hasher: MinHasher) -> list[list[int]]:
    """The plain-Python reference: per doc, per permutation, min of ((a*x + b) mod 2**64) >> 1."""
    params = list(zip((int(v) for v in hasher.a), (int(v) for v in hasher.b)))
    m = (1 << 64) - 1
    out = []
    for i in range(len(batch)):
        xs = batch.row(i).tolist()
        out.append([min(((a * x + b) & m) >> 1 for x in xs) for a, b in params])
    return out


def throughput(args: argparse.Namespace) -> list[Row]:
    docs = synthetic_docs(args.docs, args.words, args.seed)
    hasher = MinHasher(args.num_perm)
    t_sh, batch = best_of(args.repeat, lambda: ShingleBatch.from_texts(docs, 5))
    work = int(batch.lengths.sum()) * args.num_perm
    rows = [Row("shingle+hash", len(docs), t_sh, 0, f"{batch.lengths.mean():.0f} shingles/doc")]
    t_np, sig = best_of(args.repeat, lambda: hasher.signatures(batch, "numpy"))
    rows.append(Row("numpy kernel", len(docs), t_np, work))
    rows.append(Row("text->signature (ours)", len(docs), t_sh + t_np, work, "shingle+hash + numpy kernel"))
    if importlib.util.find_spec("torch") is not None:
        import torch

        hasher.signatures(ShingleBatch.from_texts(docs[:2], 5), "torch", "cpu")  # warm-up
        t, s = best_of(args.repeat, lambda: hasher.signatures(batch, "torch", "cpu"))
        rows.append(
            Row(
                "torch cpu",
                len(docs),
                t,
                work,
                f"{torch.get_num_threads()} threads; == numpy: {(s == sig).all()}",
            )
        )
        if torch.cuda.is_available():
            t, s = best_of(args.repeat, lambda: hasher.signatures(batch, "torch", "cuda"))
            rows.append(Row("torch cuda", len(docs), t, work, f"== numpy: {(s == sig).all()}"))
    sub = batch.select(np.arange(min(args.python_docs, len(batch))))
    t, ref = best_of(1, lambda: python_signatures(sub, hasher))
    same = ref == hasher.signatures(sub, "numpy").tolist()
    rows.append(Row("python loop", len(sub), t, int(sub.lengths.sum()) * args.num_perm, f"== numpy: {same}"))
    rows.append(datasketch_row(docs, args))
    rows.append(lsh_row(batch, sig, args))
    return rows


def datasketch_row(docs: Sequence[str], args: argparse.Namespace) -> Row:
    try:
        from datasketch import MinHash
    except ImportError:
        return Row("datasketch", 0, None, 0, "skipped: not importable (see the module docstring)")
    grams = [[g.encode() for g in dict.fromkeys(ngrams(words(d), 5))] for d in docs]

    def run() -> None:
        for g in grams:
            MinHash(num_perm=args.num_perm).update_batch(g)

    t, _ = best_of(args.repeat, run)
    n = sum(len(g) for g in grams) * args.num_perm
    return Row("datasketch", len(docs), t, n, "update_batch from shingle bytes, incl. its SHA-1 (32-bit)")


def lsh_row(batch: ShingleBatch, sig: np.ndarray, args: argparse.Namespace) -> Row:
    params = optimal_params(0.8, args.num_perm)
    ids = np.arange(len(batch))

    def run() -> tuple[int, int]:
        cand = candidate_pairs(band_keys(sig, params), ids)
        rows = {i: batch.row(i) for i in range(len(batch))}
        ok = verify_pairs(cand, rows, 0.8)
        label_components([[(a, b) for a, b in cand[ok].tolist()]])
        return len(cand), int(ok.sum())

    t, (n_cand, n_ok) = best_of(args.repeat, run)
    return Row(
        "lsh+verify+cc",
        len(batch),
        t,
        0,
        f"{params.bands}x{params.rows}: {n_cand} candidates, {n_ok} verified",
    )


def print_rows(rows: Sequence[Row]) -> None:
    head = f"{'method':<24} {'docs':>6} {'cpu s':>8} {'signatures/s':>13} {'Mhash/s':>8}  note"
    print(head)
    print("-" * len(head))
    for r in rows:
        secs = f"{r.seconds:.3f}" if r.seconds else "-"
        dps = f"{r.docs_per_s:,.0f}" if r.docs_per_s else "-"
        mh = f"{r.mhash_per_s:.1f}" if r.mhash_per_s else "-"
        print(f"{r.method:<24} {r.docs:>6} {secs:>8} {dps:>13} {mh:>8}  {r.note}".rstrip())


# ---------------------------------------------------------------- quality


def _load_test_corpus() -> Callable[..., tuple[list[str], list[str]]]:
    spec = importlib.util.spec_from_file_location("_dedup_corpus", REPO_ROOT / "tests" / "test_dedup_core.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # needs pytest (the dev extra)
    return module.make_corpus  # type: ignore[no-any-return]


def _truth(docs: Sequence[str]) -> tuple[set[tuple[int, int]], dict[int, np.ndarray]]:
    batch = ShingleBatch.from_texts(docs, 5)
    rows = {i: batch.row(i) for i in range(len(batch))}
    sets = [frozenset(rows[i].tolist()) for i in range(len(batch))]
    true = set()
    for i, j in itertools.combinations(range(len(sets)), 2):
        inter = len(sets[i] & sets[j])
        if inter and inter / (len(sets[i]) + len(sets[j]) - inter) >= 0.8:
            true.add((i, j))
    return true, rows


def _ours(docs: Sequence[str], num_perm: int) -> set[tuple[int, int]]:
    batch = ShingleBatch.from_texts(docs, 5)
    keep = np.flatnonzero(batch.lengths > 0)
    sig = MinHasher(num_perm).signatures(batch.select(keep), "numpy")
    return {(a, b) for a, b in candidate_pairs(band_keys(sig, optimal_params(0.8, num_perm)), keep).tolist()}


def _datasketch(
    docs: Sequence[str], num_perm: int, weights: tuple[float, float]
) -> tuple[set[tuple[int, int]], str]:
    from datasketch import MinHash, MinHashLSH

    lsh = MinHashLSH(threshold=0.8, num_perm=num_perm, weights=weights)
    sigs = {}
    for i, d in enumerate(docs):
        grams = [g.encode() for g in dict.fromkeys(ngrams(words(d), 5))]
        if grams:
            m = MinHash(num_perm=num_perm)
            m.update_batch(grams)
            sigs[i] = m
            lsh.insert(i, m)
    pairs = {(min(i, j), max(i, j)) for i, m in sigs.items() for j in lsh.query(m) if j != i}
    return pairs, f"{lsh.b}x{lsh.r}"


def quality(args: argparse.Namespace) -> list[dict[str, Any]]:
    make_corpus = _load_test_corpus()
    methods: dict[str, Callable[[Sequence[str]], tuple[set[tuple[int, int]], str]]] = {}
    p = optimal_params(0.8, args.num_perm)
    methods["ours"] = lambda d: (_ours(d, args.num_perm), f"{p.bands}x{p.rows}")
    if importlib.util.find_spec("datasketch") is not None:
        methods["datasketch default"] = lambda d: _datasketch(d, args.num_perm, (0.5, 0.5))
        methods["datasketch (0.05,0.95)"] = lambda d: _datasketch(d, args.num_perm, (0.05, 0.95))
    acc: dict[str, dict[str, Any]] = {m: {"cand": 0, "tp_cand": 0, "true": 0, "params": ""} for m in methods}
    for seed in range(args.quality_seeds):
        docs = make_corpus(seed=seed)[0]
        true, rows = _truth(docs)
        for name, fn in methods.items():
            cand, params = fn(docs)
            arr = np.array(sorted(cand), dtype=np.int64).reshape(-1, 2)
            verified = {(a, b) for (a, b), ok in zip(arr.tolist(), verify_pairs(arr, rows, 0.8)) if ok}
            a = acc[name]
            a["params"], a["true"] = params, a["true"] + len(true)
            a["cand"], a["tp_cand"] = a["cand"] + len(cand), a["tp_cand"] + len(cand & true)
            a["verified"] = a.get("verified", 0) + len(verified)
            a["tp_verified"] = a.get("tp_verified", 0) + len(verified & true)
    out = []
    for name, a in acc.items():
        out.append(
            {
                "method": name,
                "bands x rows": a["params"],
                "true pairs": a["true"],
                "candidates": a["cand"],
                "unverified precision": a["tp_cand"] / max(1, a["cand"]),
                "verified precision": a["tp_verified"] / max(1, a["verified"]),
                "recall": a["tp_cand"] / max(1, a["true"]),
            }
        )
    return out


def print_quality(rows: Sequence[dict[str, Any]], seeds: int) -> None:
    print(f"\nrecall / precision vs brute-force Jaccard >= 0.8 (tests' corpus, {seeds} seeds)")
    head = f"{'method':<24} {'b x r':>6} {'true':>5} {'cand':>5} {'prec (unverified)':>17}"
    head += f" {'prec (verified)':>15} {'recall':>7}"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['method']:<24} {r['bands x rows']:>6} {r['true pairs']:>5} {r['candidates']:>5}"
            f" {r['unverified precision']:>17.3f} {r['verified precision']:>15.3f} {r['recall']:>7.3f}"
        )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--docs", type=int, default=2000, help="synthetic documents for the throughput table")
    ap.add_argument("--words", type=int, default=200, help="mean words per document")
    ap.add_argument("--num-perm", type=int, default=128, help="MinHash permutations")
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement; the fastest is kept")
    ap.add_argument("--python-docs", type=int, default=40, help="documents for the plain-Python loop")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quality", action="store_true", help="also measure recall/precision (needs pytest)")
    ap.add_argument("--quality-seeds", type=int, default=3, help="corpora for --quality")
    ap.add_argument("--json", type=Path, help="save the results here")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    rows = throughput(args)
    print(f"MinHash throughput: {args.docs} docs, ~{args.words} words, {args.num_perm} permutations")
    print_rows(rows)
    qual = quality(args) if args.quality else []
    if qual:
        print_quality(qual, args.quality_seeds)
    if args.json:
        payload = {"throughput": [{**asdict(r), "docs_per_s": r.docs_per_s} for r in rows], "quality": qual}
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
