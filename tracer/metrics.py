"""How far apart two captured tensors are: pure numpy, bounded memory, fast.

Every pair of captured tensors goes through :func:`compare_arrays`, and a tensor can be hundreds
of MB (a memory-mapped ``.npy``). So the flattened arrays are walked in blocks of
``chunk_elems`` and only per-block buffers exist: peak extra memory is a small multiple of one
block per worker, never of the tensor. Speed comes from four habits:

- a bitwise test per block first (an integer subtraction of the raw bits): most pairs in a trace
  are identical, and identical blocks skip all other arithmetic;
- arithmetic in the tensor's own precision (float32 stays float32: half the bytes per pass) with
  float64 only where it matters: sums are accumulated across blocks in float64 (each block's
  BLAS dot is kept short enough to be accurate to ~1e-7), and the few elements that decide a
  maximum are re-evaluated in float64, so ``max_abs``/``max_rel`` are float64-exact;
- reused buffers (``out=``) inside the loop;
- two worker threads (numpy and BLAS release the GIL), each walking every other block with its
  own buffers and totals, merged in a fixed order so the result does not depend on timing.

Conventions, decided once:

- ``identical``: same dtype and the same bits everywhere. ``-0.0`` vs ``0.0`` and two NaNs with
  different payloads are *not* identical.
- ``mismatch_count``: positions whose bits differ, except that NaN vs NaN (any payload) counts as
  equal. So ``-0.0`` vs ``0.0`` is one mismatch, with ``|a-b| = 0`` and 1 ULP apart.
- ULPs: bit patterns are mapped to one monotonic integer line on which ``-0.0`` sits one step
  below ``+0.0``; the distance is the number of steps. It needs both sides in the same float
  dtype (float16, bfloat16, float32, float64); otherwise both are compared in float64 and
  ``ulp_max`` is -1.
- The finite-value metrics (``max_abs`` ... ``sqnr_db``, ``worst`` by size) use the positions
  where both sides are finite; the rest is counted in ``nan_*`` / ``inf_*`` and the NaN/Inf
  mismatches head ``worst``.
- Exact kinds (integers, bool, strings, complex, anything else): only ``identical``,
  ``mismatch_count`` and ``worst`` are measured (integers ranked by ``|a-b|``, the others by
  position); ``max_abs``, ``max_rel``, ``mean_abs``, ``rel_l2`` are 0.0, ``cosine`` 1.0,
  ``sqnr_db`` +inf and ``ulp_max`` -1 (not applicable). Use ``mismatch_count``, not those.
- JSON has no literal for non-finite floats: :meth:`TensorMetrics.to_json` writes them as the
  strings ``"inf"``, ``"-inf"``, ``"nan"`` and :meth:`TensorMetrics.from_json` reads them back.
"""

from __future__ import annotations

import math
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

__all__ = [
    "TensorMetrics",
    "compare_arrays",
    "within_tolerance",
    "summary_stats",
    "DEFAULT_CHUNK_ELEMS",
]

# 256 Ki elements (1 MiB of float32) per block: measured fastest on this class of machine
# (blocks stay in L2/L3 across the ~20 passes), and short enough for float32 BLAS dots.
DEFAULT_CHUNK_ELEMS = 1 << 18
_DOT_SLICE = 1 << 18  # longer float32 dots drift (2e-5 relative at 4 Mi elements)
# dtype -> (its bits as a signed int, the bits of its largest finite value)
_BITS = {
    "float16": (np.int16, 0x7BFF),
    "bfloat16": (np.int16, 0x7F7F),
    "float32": (np.int32, 0x7F7FFFFF),
    "float64": (np.int64, 0x7FEFFFFFFFFFFFFF),
}
_F32_SLACK = 2.0**-20  # float32 rounding margin before re-checking candidates in float64
_FLOAT_FIELDS = ("max_abs", "max_rel", "mean_abs", "rel_l2", "cosine", "sqnr_db")
_SPECIAL = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}

Worst = tuple[tuple[int, ...], Any, Any]


@dataclass(frozen=True)
class TensorMetrics:
    """The distance between tensor A (the reference) and tensor B; see the module docstring."""

    kind: str  # "float" | "exact"
    dtype_a: str
    dtype_b: str
    shape: tuple[int, ...]
    size: int
    identical: bool
    mismatch_count: int
    max_abs: float
    max_rel: float
    mean_abs: float
    rel_l2: float
    ulp_max: int
    cosine: float
    sqnr_db: float
    nan_mismatch: int
    inf_mismatch: int
    nan_a: int
    nan_b: int
    inf_a: int
    inf_b: int
    worst: tuple[Worst, ...]
    # (rtol, max |a-b| - rtol*|a| over finite elements) for each rtol asked of compare_arrays:
    # the one number that decides within(atol, rtol) exactly for every atol.
    excess_at_rtol: tuple[tuple[float, float], ...] = ()

    def within(self, atol: float, rtol: float) -> bool:
        """Whether every finite element has ``|a-b| <= atol + rtol*|a|`` and no NaN/Inf differs.

        ``numpy.allclose(b, a, rtol, atol, equal_nan=True)`` semantics with A as the reference,
        decided in float64. Exact kinds: ``mismatch_count == 0``. The summary answers most
        questions on its own (``max_abs``, ``max_rel`` and the worst elements bound the answer);
        the exact answer for any ``atol`` at a given ``rtol`` needs that ``rtol`` passed to
        :func:`compare_arrays` (``rtols=``). Without it an undecidable case raises ValueError
        rather than guess.
        """
        if self.kind != "float":
            return self.mismatch_count == 0
        if self.nan_mismatch or self.inf_mismatch:
            return False
        if self.max_abs <= atol:
            return True
        for r, excess in self.excess_at_rtol:
            if r == rtol:
                return excess <= atol
        diffs = [abs(a - b) for _, a, b in self.worst]  # all finite: no NaN/Inf mismatch here
        if rtol == 0 or any(abs(a - b) > atol + rtol * abs(a) for _, a, b in self.worst):
            return False
        if len(self.worst) == self.mismatch_count or min(diffs) * (1 + 2.0**-22) <= atol:
            return True  # every element above atol is among the listed worst, all of which pass
        if self.max_rel < 1 and self.max_rel / (1 - self.max_rel) * (1 + 1e-12) <= rtol:
            return True  # |a-b| <= max_rel*max(|a|,|b|) implies |a-b| <= rtol*|a|
        raise ValueError(
            f"within(atol={atol!r}, rtol={rtol!r}) cannot be decided from this summary: more "
            f"than {len(self.worst)} elements exceed atol; pass rtols=({rtol!r},) to "
            "compare_arrays to record the exact answer"
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe dict; non-finite floats become ``"inf"``, ``"-inf"`` or ``"nan"``."""
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in _FLOAT_FIELDS:
            out[name] = _enc(out[name])
        out["shape"] = list(self.shape)
        out["worst"] = [{"index": list(i), "a": _enc(a), "b": _enc(b)} for i, a, b in self.worst]
        out["excess_at_rtol"] = [[_enc(r), _enc(e)] for r, e in self.excess_at_rtol]
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TensorMetrics:
        """Inverse of :meth:`to_json`."""
        kw = dict(d)
        for name in _FLOAT_FIELDS:
            kw[name] = _dec(kw[name])
        kw["shape"] = tuple(kw["shape"])
        conv: Callable[[Any], Any] = _dec if kw["kind"] == "float" else (lambda v: v)
        kw["worst"] = tuple((tuple(w["index"]), conv(w["a"]), conv(w["b"])) for w in kw["worst"])
        kw["excess_at_rtol"] = tuple((_dec(r), _dec(e)) for r, e in kw.get("excess_at_rtol", ()))
        return cls(**kw)


def within_tolerance(m: TensorMetrics, atol: float, rtol: float) -> bool:
    """Same as ``m.within(atol, rtol)``."""
    return m.within(atol, rtol)


def _enc(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def _dec(v: Any) -> Any:
    return _SPECIAL[v] if isinstance(v, str) else float(v) if isinstance(v, int | float) else v


# --------------------------------------------------------------------------- driver


def compare_arrays(
    a: np.ndarray,
    b: np.ndarray,
    *,
    k_worst: int = 5,
    chunk_elems: int = DEFAULT_CHUNK_ELEMS,
    rtols: Sequence[float] = (),
) -> TensorMetrics:
    """Compare A (the reference) with B element by element; see the module docstring.

    Shapes must be equal (callers align rows first). ``rtols`` records, for each value, the
    exact answer to ``within(atol, rtol)`` for every ``atol`` (costs a few passes per block).
    """
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        raise ValueError(f"cannot compare different shapes: A {a.shape} vs B {b.shape}")
    if chunk_elems < 1 or k_worst < 0:
        raise ValueError(f"chunk_elems must be >= 1 and k_worst >= 0, got {chunk_elems}, {k_worst}")
    block = min(chunk_elems, max(a.size, 1))
    floats = _pair_is_float(a.dtype, b.dtype)

    def new_scan() -> _Scan:
        if floats:
            return _FloatScan(a.dtype, b.dtype, k_worst, tuple(rtols), block)
        return _ExactScan(a.dtype, b.dtype, k_worst)

    starts = list(range(0, a.size, block))
    workers = max(1, min(_workers(), len(starts)))
    scans = [new_scan() for _ in range(workers)]
    fa, fb = _flat(a), _flat(b)

    def run(j: int) -> None:
        with np.errstate(all="ignore"):  # overflow/0-by-0 are expected and handled explicitly
            for s in starts[j::workers]:
                scans[j].feed(s, _block(a, fa, s, s + block), _block(b, fb, s, s + block))

    if workers == 1:
        run(0)
    else:
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(run, range(workers)))
    total = scans[0]
    for other in scans[1:]:
        total.merge(other)
    return total.result(a.shape, a.dtype == b.dtype)


def _workers() -> int:
    try:
        return min(2, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return min(2, os.cpu_count() or 1)


def _flat(arr: np.ndarray) -> np.ndarray | None:
    return arr.reshape(-1) if arr.flags.c_contiguous else None


def _block(arr: np.ndarray, flat: np.ndarray | None, i: int, j: int) -> np.ndarray:
    """Elements ``[i, j)`` in C order: a view when possible, else a copy of just that range."""
    return flat[i:j] if flat is not None else np.ascontiguousarray(arr.flat[i:j])


def _is_float(dt: np.dtype) -> bool:
    return dt.kind == "f" or dt.name.startswith(("float", "bfloat"))  # ml_dtypes report kind V


def _pair_is_float(da: np.dtype, db: np.dtype) -> bool:
    return (_is_float(da) or da.kind in "biu") and (_is_float(db) or db.kind in "biu") and (
        _is_float(da) or _is_float(db)
    )


def _dot(x: np.ndarray, y: np.ndarray) -> float:
    """Dot product, in slices short enough that float32 BLAS stays accurate; summed in float64."""
    if x.size <= _DOT_SLICE:
        return float(np.dot(x, y))
    return math.fsum(float(np.dot(x[i : i + _DOT_SLICE], y[i : i + _DOT_SLICE])) for i in range(0, x.size, _DOT_SLICE))


def _sum(v: np.ndarray) -> float:
    """Sum as 1024 column sums (vectorised adds; each column ~n/1024 long) added in float64."""
    cut = v.size - v.size % 1024
    cols = np.add.reduce(v[:cut].reshape(-1, 1024), axis=0) if cut else v[:0]
    return float(np.add.reduce(cols, dtype=np.float64)) + float(np.add.reduce(v[cut:], dtype=np.float64))


def _topk(vals: np.ndarray, k: int) -> np.ndarray:
    """Local indices of the k largest values, ties to the lower index, largest first."""
    if vals.size > 4 * k:
        kth = np.partition(vals, vals.size - k)[vals.size - k]
        keep = np.flatnonzero(vals >= kth)
        return keep[np.lexsort((keep, -vals[keep]))[:k]]
    return np.lexsort((np.arange(vals.size), -vals))[:k]


class _Scan(ABC):
    """One worker's running totals over the blocks it is given, in increasing order.

    ``worst`` holds ``(class, -size, position, a, b)``: class 0 for NaN/Inf mismatches, which
    rank first, then by size and position. Blocks arrive in increasing position, so an element
    that only ties the current k-th entry can never displace it.
    """

    k: int
    worst: list[tuple[int, float, int, Any, Any]]

    @abstractmethod
    def feed(self, off: int, ra: np.ndarray, rb: np.ndarray) -> None:
        """Take elements ``[off, off + ra.size)`` of both sides."""

    @abstractmethod
    def merge(self, other: Any) -> None:
        """Add another worker's totals (same kind of scan) to these."""

    @abstractmethod
    def result(self, shape: tuple[int, ...], same_dtype: bool) -> TensorMetrics:
        """The metrics over everything fed to this scan."""

    def _add_worst(self, entries: list[tuple[int, float, int, Any, Any]]) -> None:
        if entries:
            self.worst = sorted(self.worst + entries, key=lambda e: e[:3])[: self.k]

    def _worst_out(self, shape: tuple[int, ...]) -> tuple[Worst, ...]:
        return tuple((tuple(int(i) for i in np.unravel_index(p, shape)), a, b) for _, _, p, a, b in self.worst)


# --------------------------------------------------------------------------- floats


class _Buffers:
    """Per-worker scratch arrays, one block long, reused for every block."""

    def __init__(self, n: int, pipe: np.dtype, bits: np.dtype, convert: bool) -> None:
        self.t, self.xr = np.empty(n, bits), np.empty(n, bits)
        self.d, self.p, self.q = np.empty(n, pipe), np.empty(n, pipe), np.empty(n, pipe)
        self.mask = np.empty(n, np.bool_)
        self.xa, self.xb = (np.empty(n if convert else 0, pipe) for _ in range(2))


class _FloatScan(_Scan):
    """Floats: float32 arithmetic for float16/bfloat16/float32 pairs, float64 otherwise."""

    def __init__(self, da: np.dtype, db: np.dtype, k: int, rtols: tuple[float, ...], block: int) -> None:
        self.da, self.db, self.k = da, db, k
        bits, top = _BITS.get(da.name, (None, 0)) if da == db else (None, 0)
        self.ulp_bits = None if bits is None else np.dtype(bits)
        # two finite values of opposite signs are at least this far apart as raw integers
        self.straddle = 0 if bits is None else (1 << (8 * self.ulp_bits.itemsize - 1)) - top
        self.pipe = np.dtype(np.float32 if bits is not None and da.itemsize <= 4 else np.float64)
        self.cmp_bits = self.ulp_bits or np.dtype(f"i{self.pipe.itemsize}")
        self.buf = _Buffers(block, self.pipe, self.cmp_bits, da != self.pipe or db != self.pipe)
        self.identical = True
        self.mismatch = self.nan_mis = self.inf_mis = self.nfin = self.ulp = 0
        self.nan_a = self.nan_b = self.inf_a = self.inf_b = 0
        self.max_abs = self.max_rel = self.sabs = self.saa = self.sdd = self.sda = 0.0
        self.excess = {r: -math.inf for r in dict.fromkeys(rtols)}
        self.worst = []

    def feed(self, off: int, ra: np.ndarray, rb: np.ndarray) -> None:
        n, b = ra.size, self.buf
        x = ra if ra.dtype == self.pipe else _convert(ra, b.xa[:n])
        y = rb if rb.dtype == self.pipe else _convert(rb, b.xb[:n])
        bits_a, bits_b = (ra, rb) if self.ulp_bits is not None else (x, y)
        ia, ib = bits_a.view(self.cmp_bits), bits_b.view(self.cmp_bits)
        t = np.subtract(ia, ib, out=b.t[:n])  # zero exactly where the bits agree
        differ = int(np.count_nonzero(t))
        if differ == 0:
            self._same(x)
            return
        self.identical = False
        if self._finite(x, y, ia, ib, t, off, None, must=False):
            self.mismatch += differ
        else:
            self._special(x, y, ia, ib, t, off)

    def _same(self, x: np.ndarray) -> None:
        """A bitwise-identical block: only the reference's norm and its NaN/Inf counts matter."""
        s = _dot(x, x)
        if not math.isfinite(s):
            nan, inf = int(np.count_nonzero(np.isnan(x))), int(np.count_nonzero(np.isinf(x)))
            self.nan_a, self.nan_b = self.nan_a + nan, self.nan_b + nan
            self.inf_a, self.inf_b = self.inf_a + inf, self.inf_b + inf
            x = x[np.isfinite(x)].astype(np.float64)
            s = _dot(x, x)
        self.saa += s
        self.nfin += x.size

    def _special(self, x: np.ndarray, y: np.ndarray, ia: np.ndarray, ib: np.ndarray, t: np.ndarray, off: int) -> None:
        """A block with NaN or Inf on a side (or with sums that overflowed float32)."""
        nx, ny, jx, jy = np.isnan(x), np.isnan(y), np.isinf(x), np.isinf(y)
        nan_mis, inf_mis = nx ^ ny, (jx | jy) & (x != y)
        self.nan_a, self.nan_b = self.nan_a + _count(nx), self.nan_b + _count(ny)
        self.inf_a, self.inf_b = self.inf_a + _count(jx), self.inf_b + _count(jy)
        self.nan_mis, self.inf_mis = self.nan_mis + _count(nan_mis), self.inf_mis + _count(inf_mis)
        self.mismatch += _count((t != 0) & ~(nx & ny))  # NaN vs NaN counts as equal
        if self.k:
            sp = np.flatnonzero(nan_mis | inf_mis)[: self.k]
            self._add_worst([(0, 0.0, off + int(i), float(x[i]), float(y[i])) for i in sp])
        idx = np.flatnonzero(~(nx | ny | jx | jy))
        sa, sb = ia[idx], ib[idx]
        self._finite(x[idx], y[idx], sa, sb, sa - sb, off, idx, must=True)

    def _finite(
        self, x: np.ndarray, y: np.ndarray, ia: np.ndarray, ib: np.ndarray, t: np.ndarray,
        off: int, pos: np.ndarray | None, *, must: bool,
    ) -> bool:
        """Fold in elements that differ somewhere; False (nothing changed) if sums are non-finite.

        ``must`` says the inputs are known finite, so non-finite float32 sums are overflow and
        are redone in float64. ``pos`` maps local to block positions (None: the identity).
        """
        n, b = x.size, self.buf
        if n == 0:
            return True
        d = np.subtract(x, y, out=b.d[:n])
        sums = (_dot(x, x), _dot(d, d), _dot(d, x))
        exact_sums = all(map(math.isfinite, sums))
        if not exact_sums:
            if not must:
                return False
            x64, y64 = x.astype(np.float64), y.astype(np.float64)
            d64 = x64 - y64
            sums = (_dot(x64, x64), _dot(d64, d64), _dot(d64, x64))
            self.sabs += float(np.add.reduce(np.abs(d64)))
        self.saa, self.sdd, self.sda = self.saa + sums[0], self.sdd + sums[1], self.sda + sums[2]
        self.nfin += n
        ad = np.abs(d, out=d)
        if exact_sums:
            self.sabs += _sum(ad)
        bmax = float(ad.max())
        f32 = self.pipe == np.float32
        if not f32 or bmax >= self.max_abs * (1 - _F32_SLACK):
            c = np.flatnonzero(ad == bmax) if f32 else slice(0, 0)  # rounding is monotonic
            self.max_abs = max(self.max_abs, _exact(x, y, c, lambda xa, ya: np.abs(xa - ya)) if f32 else bmax)
        for r in self.excess:
            self._probe(r, ad, x, y, bmax)
        self._ratio(ad, x, y)
        if self.ulp_bits is not None:
            self.ulp = max(self.ulp, self._ulp(ia, ib, t))
        if self.k:
            self._take_worst(ad, x, y, off, pos, bmax)
        return True

    def _ratio(self, ad: np.ndarray, x: np.ndarray, y: np.ndarray) -> None:
        """Raise ``max_rel`` to this block's max of ``|a-b| / max(|a|,|b|)`` (float64-exact).

        One division by ``a`` instead of five passes: ``r' = |a-b|/|a|`` bounds the wanted
        ``r`` from both sides (``r'/(1+r') <= r <= r'``), so only the few elements whose ``r'``
        reaches the block's lower bound are evaluated exactly, and most blocks not at all.
        """
        rr = np.divide(ad, x, out=self.buf.p[: ad.size])  # sign of a; 0/0 -> NaN, skipped below
        top = max(float(np.fmax.reduce(rr)), -float(np.fmin.reduce(rr)))
        if not top > 0 or top * (1 + _F32_SLACK) < self.max_rel:
            return
        low = 1.0 if math.isinf(top) else top / (1 + top)  # a = 0 < |b| gives r = 1 exactly
        c = np.flatnonzero(np.abs(rr, out=rr) >= low * (1 - _F32_SLACK))
        rel = _exact(x, y, c, lambda xa, ya: np.abs(xa - ya) / np.maximum(np.abs(xa), np.abs(ya)))
        self.max_rel = max(self.max_rel, rel)

    def _probe(self, r: float, ad: np.ndarray, x: np.ndarray, y: np.ndarray, bmax: float) -> None:
        """Raise ``excess[r]`` to this block's max of ``|a-b| - r*|a|`` (float64-exact)."""
        if bmax * (1 + 2.0**-22) <= self.excess[r]:
            return  # |a-b| - r*|a| <= |a-b| <= bmax: this block cannot raise it
        p = np.abs(x, out=self.buf.p[: ad.size])
        q = np.subtract(ad, np.multiply(p, r, out=self.buf.q[: ad.size]), out=self.buf.q[: ad.size])
        e = float(q.max())
        if self.pipe == np.float32:
            thr = e - 2.0**-21 * (bmax + abs(r) * float(p.max()))
            c = np.flatnonzero(q >= thr) if math.isfinite(thr) else slice(None)
            e = _exact(x, y, c, lambda xa, ya: np.abs(xa - ya) - r * np.abs(xa))
        self.excess[r] = max(self.excess[r], e)

    def _ulp(self, ia: np.ndarray, ib: np.ndarray, t: np.ndarray) -> int:
        """Max ULP distance. ``t = ia - ib`` (wrapped) is exactly it for same-sign pairs, and
        opposite-sign pairs show as ``|t| >= straddle``; only then are they found and redone."""
        big = max(int(t.max()), -int(t.min()))
        if big < self.straddle:
            return big
        xr = np.bitwise_xor(ia, ib, out=self.buf.xr[: t.size])
        ds = np.flatnonzero(np.less(xr, 0, out=self.buf.mask[: t.size]))
        mag = t.dtype.type(np.iinfo(t.dtype).max)
        ma, mb = (np.bitwise_and(v[ds], mag).astype(np.uint64) for v in (ia, ib))
        t[ds] = 0  # the rest are same-sign pairs again
        return max(int(t.max()), -int(t.min()), int((ma + mb).max()) + 1 if ds.size else 0)

    def _take_worst(self, ad: np.ndarray, x: np.ndarray, y: np.ndarray, off: int, pos: np.ndarray | None, bmax: float) -> None:
        """Offer this block's largest differences to the running top k."""
        k, n, mask = self.k, ad.size, self.buf.mask[: ad.size]
        if len(self.worst) >= k:
            cls, neg = self.worst[-1][:2]
            if cls == 0 or bmax <= -neg:
                return
            c = np.flatnonzero(np.greater(ad, -neg, out=mask))
        elif bmax > 0:  # a strided sample's k-th largest is a cheap lower bound of the block's
            sample = ad[:: max(1, n // 4096)]
            v = float(np.partition(sample, sample.size - k)[sample.size - k]) if sample.size > k else 0.0
            c = np.flatnonzero(np.greater_equal(ad, v, out=mask) if v > 0 else np.greater(ad, 0, out=mask))
        else:
            c = np.empty(0, np.intp)
        if c.size > k:
            c = c[_topk(ad[c], k)]
        room = k - len(self.worst) - c.size
        if room > 0:  # +0.0 vs -0.0 differ by 0 but are mismatches: listed last, if room is left
            z = np.flatnonzero((ad == 0) & (np.signbit(x) != np.signbit(y)))[:room]
            c = np.concatenate([c, z])
        at = c if pos is None else pos[c]
        self._add_worst([(1, -float(ad[i]), off + int(g), float(x[i]), float(y[i])) for i, g in zip(c, at)])

    def merge(self, o: _FloatScan) -> None:
        for name in ("mismatch", "nan_mis", "inf_mis", "nfin", "nan_a", "nan_b", "inf_a", "inf_b"):
            setattr(self, name, getattr(self, name) + getattr(o, name))
        self.sabs, self.saa, self.sdd, self.sda = self.sabs + o.sabs, self.saa + o.saa, self.sdd + o.sdd, self.sda + o.sda
        self.max_abs, self.max_rel, self.ulp = max(self.max_abs, o.max_abs), max(self.max_rel, o.max_rel), max(self.ulp, o.ulp)
        self.identical = self.identical and o.identical
        self.excess = {r: max(e, o.excess[r]) for r, e in self.excess.items()}
        self._add_worst(o.worst)

    def result(self, shape: tuple[int, ...], same_dtype: bool) -> TensorMetrics:
        saa, sdd, sda = self.saa, self.sdd, self.sda
        sbb = max(saa - 2 * sda + sdd, 0.0)  # sum b^2 = sum (a - d)^2
        if saa == 0 or sbb == 0:
            cosine = 1.0 if saa == sbb else 0.0
        else:  # 1 - cos = (|d|^2 - (|a| - |b|)^2) / (2|a||b|): no cancellation when a ~ b
            na, nb = math.sqrt(saa), math.sqrt(sbb)
            a_minus_b = (2 * sda - sdd) / (na + nb)
            cosine = min(1.0, max(-1.0, 1 - (sdd - a_minus_b * a_minus_b) / (2 * na * nb)))
        return TensorMetrics(
            kind="float", dtype_a=_dtname(self.da), dtype_b=_dtname(self.db), shape=tuple(shape),
            size=math.prod(shape), identical=self.identical and same_dtype, mismatch_count=self.mismatch,
            max_abs=self.max_abs, max_rel=self.max_rel, mean_abs=self.sabs / self.nfin if self.nfin else 0.0,
            rel_l2=math.sqrt(sdd / saa) if saa > 0 else (0.0 if sdd == 0 else math.inf),
            ulp_max=self.ulp if self.ulp_bits is not None else -1, cosine=cosine,
            sqnr_db=(10 * math.log10(saa / sdd) if saa > 0 else -math.inf) if sdd > 0 else math.inf,
            nan_mismatch=self.nan_mis, inf_mismatch=self.inf_mis, nan_a=self.nan_a, nan_b=self.nan_b,
            inf_a=self.inf_a, inf_b=self.inf_b, worst=self._worst_out(shape),
            excess_at_rtol=tuple(self.excess.items()),
        )


def _convert(r: np.ndarray, out: np.ndarray) -> np.ndarray:
    np.copyto(out, r, casting="unsafe")  # exact for every narrower float; ml_dtypes casts too
    return out


def _count(mask: np.ndarray) -> int:
    return int(np.count_nonzero(mask))


def _exact(x: np.ndarray, y: np.ndarray, c: Any, f: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> float:
    """``max f(a, b)`` in float64 over the candidate elements ``c`` (-inf if there are none)."""
    v = f(x[c].astype(np.float64), y[c].astype(np.float64))
    v = v[~np.isnan(v)]
    return float(v.max()) if v.size else -math.inf


def _dtname(dt: np.dtype) -> str:
    return dt.str.lstrip("<>|=") if dt.kind in "SUV" and not _is_float(dt) else dt.name


# --------------------------------------------------------------------------- exact kinds


class _ExactScan(_Scan):
    """Integers, bool, strings and the rest: which elements differ, and a few of them."""

    def __init__(self, da: np.dtype, db: np.dtype, k: int) -> None:
        self.da, self.db, self.k = da, db, k
        self.by_size = da.kind in "iu" and db.kind in "iu"
        self.identical, self.mismatch = True, 0
        self.worst = []

    def feed(self, off: int, ra: np.ndarray, rb: np.ndarray) -> None:
        neq = _bits_differ(ra, rb) if self.da == self.db and self.da.kind != "O" else _not_equal(ra, rb)
        count = _count(neq)
        if count == 0:
            return
        self.identical, self.mismatch = False, self.mismatch + count
        if not self.k or (len(self.worst) >= self.k and not self.by_size):
            return
        pos = np.flatnonzero(neq)
        if self.by_size:
            size = np.abs(ra[pos].astype(np.float64) - rb[pos].astype(np.float64))
            pick = _topk(size, self.k)
            entries = [(1, -float(size[i]), off + int(pos[i]), _py(ra[pos[i]]), _py(rb[pos[i]])) for i in pick]
        else:
            entries = [(1, 0.0, off + int(p), _py(ra[p]), _py(rb[p])) for p in pos[: self.k]]
        self._add_worst(entries)

    def merge(self, o: _ExactScan) -> None:
        self.identical, self.mismatch = self.identical and o.identical, self.mismatch + o.mismatch
        self._add_worst(o.worst)

    def result(self, shape: tuple[int, ...], same_dtype: bool) -> TensorMetrics:
        return TensorMetrics(
            kind="exact", dtype_a=_dtname(self.da), dtype_b=_dtname(self.db), shape=tuple(shape),
            size=math.prod(shape), identical=self.identical and same_dtype, mismatch_count=self.mismatch,
            max_abs=0.0, max_rel=0.0, mean_abs=0.0, rel_l2=0.0, ulp_max=-1, cosine=1.0, sqnr_db=math.inf,
            nan_mismatch=0, inf_mismatch=0, nan_a=0, nan_b=0, inf_a=0, inf_b=0, worst=self._worst_out(shape),
        )


def _bits_differ(ra: np.ndarray, rb: np.ndarray) -> np.ndarray:
    size = ra.dtype.itemsize
    if size in (1, 2, 4, 8):
        return np.not_equal(ra.view(f"u{size}"), rb.view(f"u{size}"))
    if size == 0:
        return np.zeros(ra.size, np.bool_)
    return np.any(ra.view(np.uint8).reshape(-1, size) != rb.view(np.uint8).reshape(-1, size), axis=1)


def _not_equal(ra: np.ndarray, rb: np.ndarray) -> np.ndarray:
    """Value comparison across dtypes; text against numbers compares as Python objects."""
    try:
        return np.asarray(np.not_equal(ra, rb), dtype=np.bool_)
    except TypeError:  # no ufunc loop, e.g. str vs bytes or str vs int
        return np.asarray(np.not_equal(ra.astype(object), rb.astype(object)), dtype=np.bool_)


def _py(v: Any) -> Any:
    """A JSON-friendly Python value: bytes decode (backslash-escaped where not UTF-8)."""
    v = v.item() if isinstance(v, np.generic) else v
    if isinstance(v, bytes):
        return v.decode("utf-8", "backslashreplace")
    return v if isinstance(v, bool | int | float | str) else repr(v)


# --------------------------------------------------------------------------- summaries


def summary_stats(a: np.ndarray, chunk_elems: int = DEFAULT_CHUNK_ELEMS) -> dict[str, Any]:
    """``{"min", "max", "mean", "nan", "inf"}`` over the finite values, read in chunks.

    Integers and bool work too (min/max as ints); complex values are summarised by magnitude;
    strings and other non-numbers give ``{}``. min/max/mean are None when nothing is finite.
    """
    a = np.asarray(a)
    dt = a.dtype
    floaty = _is_float(dt) or dt.kind == "c"
    if not (floaty or dt.kind in "biu"):
        return {}
    flat = _flat(a)
    lo: Any = None
    hi: Any = None
    total, count, nan, inf = 0.0, 0, 0, 0
    for s in range(0, a.size, chunk_elems):
        c = _block(a, flat, s, s + chunk_elems)
        if floaty:
            c = c if dt.kind in "fc" else c.astype(np.float32 if dt.itemsize <= 2 else np.float64)
            bad_nan, bad_inf = _count(np.isnan(c)), _count(np.isinf(c))
            nan, inf = nan + bad_nan, inf + bad_inf
            c = np.abs(c) if dt.kind == "c" else c  # |z| may overflow: filtered just below
            c = c[np.isfinite(c)] if bad_nan or bad_inf or dt.kind == "c" else c
        elif dt.kind == "b":
            c = c.view(np.uint8)
        if c.size:
            conv: Callable[[Any], Any] = float if floaty else int
            cmin, cmax = conv(c.min()), conv(c.max())
            lo, hi = (cmin, cmax) if lo is None else (min(lo, cmin), max(hi, cmax))
            total += float(np.add.reduce(c, dtype=np.float64))
            count += int(c.size)
    mean = total / count if count else None
    return {"min": lo, "max": hi, "mean": mean if mean is None or math.isfinite(mean) else None, "nan": nan, "inf": inf}
