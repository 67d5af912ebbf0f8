"""Deterministic synthetic JSONL corpus for the examples and benchmarks.

usage: python examples/gen_corpus.py --n 200000 --k 4 --out DIR [--seed 12345]

Writes ``DIR/part-00000.jsonl`` ... ``part-{K-1:05d}.jsonl`` with contiguous ids split evenly
across the files. Each line is one record with the shape of ``/work/shared/bench/gen.py``::

    {"id": int, "text": 8-30 words from a fixed 2000-word vocabulary (30% start with an
     upper-case letter, 20% have surrounding spaces), "x": lognormal(1, 1), "y": normal(0, 1),
     "label": 0..9 skewed, "tag": one of 5000 strings, zipf-ish}

Determinism: the random draws are vectorised with numpy and seeded per block of
``BLOCK`` ids (``default_rng([seed, 1, block])``), so a record depends only on its id and the
seed -- not on ``--n``, ``--k`` or the chunk size. The 200k corpus is therefore a prefix of the
2M corpus with the same seed.

Non-goals: this is not byte-identical to ``gen.py`` (which uses ``random`` and ``json.dumps``
with ", " separators); orjson writes compact JSON, so files are about 4% smaller.
"""

from __future__ import annotations

import argparse
import os
import string
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import orjson

__all__ = ["BLOCK", "generate", "main"]

BLOCK = 50_000  # ids per independently seeded block; also the write chunk size
VOCAB_SIZE = 2000
N_TAGS = 5000
LABEL_WEIGHTS = (0.30, 0.20, 0.14, 0.10, 0.08, 0.06, 0.05, 0.03, 0.02, 0.02)
_LETTERS = np.array(list(string.ascii_lowercase))


def _vocabulary(seed: int) -> list[str]:
    """2000 distinct lowercase words of 3-10 letters, sorted."""
    rng = np.random.default_rng([seed, 0])
    words: set[str] = set()
    while len(words) < VOCAB_SIZE:
        for n in rng.integers(3, 11, size=VOCAB_SIZE).tolist():
            words.add("".join(_LETTERS[rng.integers(0, 26, size=n)]))
    return sorted(words)[:VOCAB_SIZE]


def _tags(seed: int, vocab: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """5000 tag strings and their zipf-ish probabilities."""
    rng = np.random.default_rng([seed, 2])
    picks = rng.integers(0, len(vocab), size=N_TAGS).tolist()
    tags = [f"tag_{i:04d}_{vocab[j]}" for i, j in enumerate(picks)]
    w = 1.0 / np.arange(1, N_TAGS + 1) ** 1.1
    return tags, w / w.sum()


def _block_lines(
    seed: int, block: int, lo: int, hi: int, vocab: list[str], tags: list[str], tag_p: np.ndarray
) -> bytes:
    """JSONL bytes for ids ``[lo, hi)``, all inside ``block``; draws cover the whole block."""
    rng = np.random.default_rng([seed, 1, block])
    m = BLOCK
    lengths = rng.integers(8, 31, size=m)
    word_idx = rng.integers(0, VOCAB_SIZE, size=int(lengths.sum()))
    cap = (rng.random(m) < 0.3).tolist()
    pad = (rng.random(m) < 0.2).tolist()
    xs = rng.lognormal(1.0, 1.0, size=m).tolist()
    ys = rng.normal(0.0, 1.0, size=m).tolist()
    labels = rng.choice(10, size=m, p=np.array(LABEL_WEIGHTS) / sum(LABEL_WEIGHTS)).tolist()
    tag_idx = rng.choice(N_TAGS, size=m, p=tag_p).tolist()

    words = [vocab[i] for i in word_idx.tolist()]
    ends = np.cumsum(lengths).tolist()
    base = block * BLOCK
    out: list[bytes] = []
    dumps, opt = orjson.dumps, orjson.OPT_APPEND_NEWLINE
    for j in range(lo - base, hi - base):
        start = ends[j - 1] if j else 0
        toks = words[start : ends[j]]
        if cap[j]:
            toks[0] = toks[0].capitalize()
        text = " ".join(toks)
        if pad[j]:
            text = "  " + text + " "
        rec = {
            "id": base + j,
            "text": text,
            "x": xs[j],
            "y": ys[j],
            "label": labels[j],
            "tag": tags[tag_idx[j]],
        }
        out.append(dumps(rec, option=opt))
    return b"".join(out)


def _spans(lo: int, hi: int) -> Iterator[tuple[int, int, int]]:
    """Split ``[lo, hi)`` at block boundaries: yields ``(block, lo, hi)``."""
    while lo < hi:
        block = lo // BLOCK
        end = min(hi, (block + 1) * BLOCK)
        yield block, lo, end
        lo = end


def generate(n: int, k: int, out: str | os.PathLike[str], seed: int = 12345) -> list[str]:
    """Write ``n`` records into ``k`` files under ``out``; returns the file paths in order.

    Args:
        n: number of records (ids ``0..n-1``).
        k: number of files; the records are split evenly and contiguously.
        out: output directory, created if missing; existing part files are overwritten.
        seed: random seed; the same seed always yields the same record for a given id.
    """
    if n < 0 or k < 1:
        raise ValueError(f"need n >= 0 and k >= 1, got n={n} k={k}")
    os.makedirs(out, exist_ok=True)
    vocab = _vocabulary(seed)
    tags, tag_p = _tags(seed, vocab)
    per = -(-n // k) if n else 0
    paths: list[str] = []
    for f in range(k):
        path = os.path.join(out, f"part-{f:05d}.jsonl")
        with open(path, "wb") as fh:
            for block, lo, hi in _spans(min(f * per, n), min((f + 1) * per, n)):
                fh.write(_block_lines(seed, block, lo, hi, vocab, tags, tag_p))
        paths.append(path)
    return paths


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000, help="number of records")
    ap.add_argument("--k", type=int, default=4, help="number of files")
    ap.add_argument("--out", default="bench-data", help="output directory")
    ap.add_argument("--seed", type=int, default=12345, help="random seed")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    a = parse_args(argv)
    t0 = time.perf_counter()
    paths = generate(a.n, a.k, a.out, a.seed)
    size = sum(Path(p).stat().st_size for p in paths)
    dt = time.perf_counter() - t0
    print(f"wrote {a.n} records in {a.k} files to {a.out}: {size / 1e6:.1f} MB in {dt:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
