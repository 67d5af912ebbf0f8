"""Vectorised MinHash signatures of a :class:`~torchx_datapipes.dedup.shingles.ShingleBatch`.

Permutation ``i`` maps a shingle hash ``x`` to ``h_i(x) = (a_i * (x mod p) + b_i) mod p`` with the
Mersenne prime ``p = 2**61 - 1`` (universal hashing, exact: no 64-bit wrap-around as in
datasketch's ``(a * hv + b) % p`` on uint64). Signature column ``i`` of a text is the minimum of
``h_i`` over its shingles. ``a_i in [1, p)`` and ``b_i in [0, p)`` come from ``xxh3_64`` of
``"a:<i>"`` / ``"b:<i>"`` with the seed, so every process, machine and library version computes the
same signature for the same text; a text's signature does not depend on its batch.

The kernel multiplies 61-bit numbers with 31-bit limbs, so it needs no 128-bit products: numpy
works in ``uint64``, torch (which has no general uint64 arithmetic) in ``int64`` with one more
fold to stay below ``2**63``. ``backend="auto"`` uses torch on a CUDA device when one is present,
numpy otherwise; both give identical numbers. A text without shingles has the signature
``EMPTY`` in every column (no real value reaches it, since values are below ``p``).
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass, field

import numpy as np
import xxhash

from torchx_datapipes.dedup.shingles import ShingleBatch

__all__ = ["EMPTY", "MERSENNE_61", "Backend", "MinHasher"]

MERSENNE_61 = (1 << 61) - 1
EMPTY = np.uint64((1 << 64) - 1)
_P = np.uint64(MERSENNE_61)
_M30, _M31 = np.uint64((1 << 30) - 1), np.uint64((1 << 31) - 1)
_S30, _S31, _S61 = np.uint64(30), np.uint64(31), np.uint64(61)
_BLOCK_VALUES = 1 << 15  # shingles x permutations per kernel block: ~256 KiB temporaries stay in cache


class Backend(str, enum.Enum):
    """Where signatures are computed: ``auto`` = torch on CUDA when available, else numpy."""

    AUTO = "auto"
    NUMPY = "numpy"
    TORCH = "torch"


@dataclass(frozen=True)
class MinHasher:
    """``num_perm`` fixed universal hash functions; :meth:`signatures` applies them to a batch."""

    num_perm: int = 128
    seed: int = 0
    a: np.ndarray = field(init=False, repr=False, compare=False)
    b: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.num_perm, bool) or not isinstance(self.num_perm, int) or self.num_perm < 1:
            raise ValueError(f"invalid num_perm {self.num_perm!r}: expected an integer >= 1, e.g. 128")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 1 << 64:
            raise ValueError(f"invalid seed {self.seed!r}: expected an integer in [0, 2**64 - 1]")
        h = xxhash.xxh3_64_intdigest
        a = [1 + h(f"a:{i}".encode(), self.seed) % (MERSENNE_61 - 1) for i in range(self.num_perm)]
        b = [h(f"b:{i}".encode(), self.seed) % MERSENNE_61 for i in range(self.num_perm)]
        object.__setattr__(self, "a", np.array(a, dtype=np.uint64))
        object.__setattr__(self, "b", np.array(b, dtype=np.uint64))

    def signatures(
        self, batch: ShingleBatch, backend: Backend | str = Backend.AUTO, device: str | None = None
    ) -> np.ndarray:
        """The ``(len(batch), num_perm)`` uint64 signature matrix of ``batch``.

        Args:
            batch: shingle hashes, one row per text.
            backend: ``auto`` (torch on CUDA if present, else numpy), ``numpy`` or ``torch``.
            device: torch device for ``backend="torch"`` (default ``cuda`` if available, else ``cpu``).
        """
        try:
            backend = Backend(backend)
        except ValueError as e:
            choices = ", ".join(b.value for b in Backend)
            raise ValueError(f"invalid MinHash backend {backend!r}: expected one of {choices}") from e
        if backend is Backend.AUTO:
            backend, device = (Backend.TORCH, "cuda") if _cuda_available() else (Backend.NUMPY, None)
        x0, x1 = _limbs(batch.values)
        rows = np.repeat(np.arange(len(batch), dtype=np.int64), batch.lengths)
        if backend is Backend.TORCH:
            return _signatures_torch(x0, x1, rows, len(batch), self, device)
        return _signatures_numpy(x0, x1, rows, len(batch), self)

    def hash_values(self, x: np.ndarray) -> np.ndarray:
        """``h_i(x)`` for every value and permutation: ``(len(x), num_perm)`` uint64 (for checks)."""
        x0, x1 = _limbs(np.asarray(x, dtype=np.uint64))
        return _mulmod_numpy(x0[:, None], x1[:, None], *self._limb_params())

    def _limb_params(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return self.a & _M31, self.a >> _S31, (self.a >> _S31) * np.uint64(2), self.b


def _limbs(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``x mod p`` split into its low 31 bits and the high 30 bits."""
    x = (values & _P) + (values >> _S61)  # < p + 8
    x = np.minimum(x, x - _P)  # x - p wraps around to a huge value when x < p
    return x & _M31, x >> _S31


def _mulmod_numpy(
    x0: np.ndarray, x1: np.ndarray, a0: np.ndarray, a1: np.ndarray, a1x2: np.ndarray, b: np.ndarray
) -> np.ndarray:
    """``(a * x + b) mod p`` for ``x = x1 * 2**31 + x0``, ``a = a1 * 2**31 + a0`` (broadcasting).

    With ``2**61 = 1 (mod p)``: ``a*x = a1*x1*2**62 + (a1*x0 + a0*x1)*2**31 + a0*x0``, where
    ``2**62 = 2`` and ``mid*2**31 = (mid >> 30) + (mid & (2**30 - 1)) * 2**31``. The terms are below
    ``2**61, 2**32, 2**61, 2**62`` and ``b < 2**61``: their sum fits uint64, and one fold
    ``(s & p) + (s >> 61) <= p + 5`` and one conditional subtraction finish the reduction.
    (The torch kernel folds ``a0*x0`` first to stay below ``2**63``; the numbers are the same.)
    """
    lo = x0 * a0
    mid = x1 * a0
    mid += x0 * a1
    s = x1 * a1x2
    s += lo
    s += b
    np.right_shift(mid, _S30, out=lo)
    s += lo
    mid &= _M30
    mid <<= _S31
    s += mid
    r = s >> _S61
    s &= _P
    s += r
    np.subtract(s, _P, out=r)  # wraps around to a huge value when s < p
    return np.minimum(s, r, out=s)


def _signatures_numpy(
    x0: np.ndarray, x1: np.ndarray, rows: np.ndarray, n_rows: int, hasher: MinHasher
) -> np.ndarray:
    params = hasher._limb_params()
    out = np.full((n_rows, hasher.num_perm), EMPTY, dtype=np.uint64)
    step = max(1, _BLOCK_VALUES // hasher.num_perm)
    for start in range(0, len(x0), step):
        end = min(start + step, len(x0))
        h = _mulmod_numpy(x0[start:end, None], x1[start:end, None], *params)
        r = rows[start:end]
        seg = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
        ids = r[seg]
        out[ids] = np.minimum(out[ids], np.minimum.reduceat(h, seg, axis=0))
    return out


def _signatures_torch(
    x0: np.ndarray, x1: np.ndarray, rows: np.ndarray, n_rows: int, hasher: MinHasher, device: str | None
) -> np.ndarray:
    import torch

    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    a0, a1, a1x2, b = (torch.from_numpy(v.astype(np.int64))[None, :].to(dev) for v in hasher._limb_params())
    t0, t1 = (torch.from_numpy(v.astype(np.int64)).to(dev) for v in (x0, x1))
    t_rows = torch.from_numpy(rows).to(dev)
    sentinel = torch.iinfo(torch.int64).max
    out = torch.full((n_rows, hasher.num_perm), sentinel, dtype=torch.int64, device=dev)
    step = max(1, (_BLOCK_VALUES * (64 if dev.type == "cuda" else 1)) // hasher.num_perm)
    p, m30 = MERSENNE_61, (1 << 30) - 1
    for start in range(0, len(x0), step):
        c0, c1 = t0[start : start + step, None], t1[start : start + step, None]
        mid = c1 * a0 + c0 * a1
        lo = c0 * a0
        s = c1 * a1x2 + (mid >> 30) + ((mid & m30) << 31) + (lo >> 61) + (lo & p) + b
        s = (s & p) + (s >> 61)
        s = torch.where(s >= p, s - p, s)
        index = t_rows[start : start + step, None].expand(-1, hasher.num_perm)
        out.scatter_reduce_(0, index, s, reduce="amin", include_self=True)
    sig = out.cpu().numpy().astype(np.uint64)
    sig[sig == np.uint64(sentinel)] = EMPTY
    return sig


@functools.cache
def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:  # torch is a dependency, but the kernel must not need it
        return False
    return bool(torch.cuda.is_available())
