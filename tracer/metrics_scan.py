"""The scanning kernels behind :func:`tracer.metrics.compare_arrays`.

A scan is fed the flattened arrays block by block (bitwise test first, arithmetic only where
blocks differ), keeps per-worker totals and the k worst elements, merges with the other
workers' scans in a fixed order, and builds the :class:`TensorMetrics`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import numpy as np

from .metrics_result import TensorMetrics, Worst

_DOT_SLICE = 1 << 18  # longer float32 dots drift (2e-5 relative at 4 Mi elements)
# dtype -> (its bits as a signed int, the bits of its largest finite value, mantissa bits,
# exponent of its smallest normal number)
_BITS = {
    "float16": (np.int16, 0x7BFF, 10, -14),
    "bfloat16": (np.int16, 0x7F7F, 7, -126),
    "float32": (np.int32, 0x7F7FFFFF, 23, -126),
    "float64": (np.int64, 0x7FEFFFFFFFFFFFFF, 52, -1022),
}
_SLACK = 2.0**-20  # float32 rounding margin before candidates are re-checked in float64

_Entry = tuple[int, float, int, Any, Any]  # (class, -size, flat position, a, b)


def _cross(a: np.ndarray, b: np.ndarray, block: int) -> tuple[float, float]:
    """``(b.b, a.b)`` over the positions where both are finite, in float64: a second pass."""
    fa, fb = _flat(a), _flat(b)
    bb = ab = 0.0
    for s in range(0, a.size, block):
        x, y = (_block(v, f, s, s + block).astype(np.float64) for v, f in ((a, fa), (b, fb)))
        keep = np.isfinite(x) & np.isfinite(y)
        x, y = (x, y) if keep.all() else (x[keep], y[keep])
        bb, ab = bb + float(np.dot(y, y)), ab + float(np.dot(x, y))
    return bb, ab


def _flat(arr: np.ndarray) -> np.ndarray | None:
    return arr.reshape(-1) if arr.flags.c_contiguous else None


def _block(arr: np.ndarray, flat: np.ndarray | None, i: int, j: int) -> np.ndarray:
    """Elements ``[i, j)`` in C order: a view when possible, else a copy of just that range."""
    return flat[i:j] if flat is not None else np.ascontiguousarray(arr.flat[i:j])


def _is_float(dt: np.dtype) -> bool:
    return dt.kind == "f" or dt.name.startswith(("float", "bfloat"))  # ml_dtypes: kind "V"


def _pair_is_float(da: np.dtype, db: np.dtype) -> bool:
    numeric = all(_is_float(dt) or dt.kind in "biu" for dt in (da, db))
    return numeric and (_is_float(da) or _is_float(db))


def _dot(x: np.ndarray, y: np.ndarray) -> float:
    """A dot product in slices short enough for float32 BLAS to stay accurate, summed in float64.

    Tiny float32 results are redone in float64: products below 2**-126 lose bits (a 1e-40
    difference would square to 0 and look like no difference at all).
    """
    s = _DOT_SLICE
    r = math.fsum(float(np.dot(x[i : i + s], y[i : i + s])) for i in range(0, x.size, s))
    if x.dtype == np.float32 and abs(r) < 2.0**-100:
        return float(np.dot(x.astype(np.float64), y.astype(np.float64)))
    return r


def _sum(v: np.ndarray) -> float:
    """A sum as 1024 column sums (vectorised adds, each column ~n/1024 long) added in float64."""
    cut = v.size - v.size % 1024
    cols = np.add.reduce(v[:cut].reshape(-1, 1024), axis=0) if cut else v[:0]
    return float(np.add.reduce(cols, dtype=np.float64) + np.add.reduce(v[cut:], dtype=np.float64))


def _topk(vals: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest values, largest first, ties to the lower index."""
    if vals.size > 4 * k:
        kth = np.partition(vals, vals.size - k)[vals.size - k]
        keep = np.flatnonzero(vals >= kth)
        return keep[np.lexsort((keep, -vals[keep]))[:k]]
    return np.lexsort((np.arange(vals.size), -vals))[:k]


def _index(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(flat, shape))


def _count(mask: np.ndarray) -> int:
    return int(np.count_nonzero(mask))


def _dtname(dt: np.dtype) -> str:
    return dt.str.lstrip("<>|=") if dt.kind in "SUV" and not _is_float(dt) else dt.name


class _Scan(ABC):
    """One worker's running totals over the blocks it is given, in increasing position.

    ``worst`` holds :data:`_Entry` tuples: class 0 (NaN/Inf mismatches) ranks first, then by
    size, then position. Because blocks arrive in order, an element that only *ties* the
    current k-th entry can never displace it, so a block is searched for strictly larger ones.
    """

    k: int
    worst: list[_Entry]

    @abstractmethod
    def feed(self, off: int, ra: np.ndarray, rb: np.ndarray) -> None:
        """Take elements ``[off, off + ra.size)`` of both sides."""

    @abstractmethod
    def merge(self, other: Any) -> None:
        """Add another worker's totals (a scan of the same kind) to these."""

    @abstractmethod
    def result(self, shape: tuple[int, ...], same_dtype: bool) -> TensorMetrics:
        """The metrics over everything fed."""

    def _add_worst(self, entries: list[_Entry]) -> None:
        if entries:
            self.worst = sorted(self.worst + entries, key=lambda e: e[:3])[: self.k]

    def _worst_out(self, shape: tuple[int, ...]) -> tuple[Worst, ...]:
        return tuple((_index(p, shape), a, b) for _, _, p, a, b in self.worst)


# --------------------------------------------------------------------------- floats


class _FloatScan(_Scan):
    """Floats: float32 arithmetic for float16/bfloat16/float32 pairs, float64 otherwise."""

    def __init__(
        self, da: np.dtype, db: np.dtype, k: int, rtols: tuple[float, ...], n: int,
        rescan: Callable[[], tuple[float, float]],
    ) -> None:
        self.da, self.db, self.k, self.rescan = da, db, k, rescan
        own = _BITS.get(da.name) if da == db else None
        self.ulp_bits = None if own is None else np.dtype(own[0])
        self.pipe = np.dtype(np.float32 if own is not None and da.itemsize <= 4 else np.float64)
        self.f32 = self.pipe == np.float32
        bits, top, mantissa, low = own or _BITS["float64"]  # else: the bits of float64 copies
        ibits = np.dtype(bits)
        # finite values of opposite signs are at least this far apart as raw signed integers
        self.straddle, self.mag = (1 << (8 * ibits.itemsize - 1)) - top, np.iinfo(ibits).max
        # one ULP relative to a normal number is at most eps; |a-b| of subnormals is below tiny
        self.eps, self.tiny = 2.0**-mantissa, 2.0 ** (low + 1)
        self.one_by_one = 4  # straddling pairs looked for one at a time, before a vector search
        self.t, self.u = np.empty(n, ibits), np.empty(n, ibits)
        self.d, self.p, self.q = (np.empty(n, self.pipe) for _ in range(3))
        self.mask = np.empty(n, np.bool_)
        convert = da != self.pipe or db != self.pipe
        self.xa, self.xb = (np.empty(n if convert else 0, self.pipe) for _ in range(2))
        self.identical = True
        self.mismatch = self.nan_mis = self.inf_mis = self.nfin = self.ulp = 0
        self.nan_a = self.nan_b = self.inf_a = self.inf_b = 0
        self.max_abs = self.max_rel = 0.0
        self.sums: list[tuple[float, ...]] = []  # per block: sum a^2, d^2, d*a, |d| (d = a - b)
        self.excess = {r: 0.0 for r in rtols}  # only a positive excess can fail an atol >= 0
        self.worst = []

    def feed(self, off: int, ra: np.ndarray, rb: np.ndarray) -> None:
        n = ra.size
        x = ra if ra.dtype == self.pipe else _convert(ra, self.xa[:n])
        y = rb if rb.dtype == self.pipe else _convert(rb, self.xb[:n])
        bits = self.t.dtype
        ia, ib = (x, y) if self.ulp_bits is None else (ra, rb)
        ia, ib = ia.view(bits), ib.view(bits)
        t = np.subtract(ia, ib, out=self.t[:n])  # zero exactly where the bits agree
        differ = _count(t)
        if differ == 0:
            self._same(x)
        elif self._finite(x, y, ia, ib, t, off, None, finite=False):
            self.identical, self.mismatch = False, self.mismatch + differ
        else:
            self.identical = False
            self._special(x, y, ia, ib, off)

    def _same(self, x: np.ndarray) -> None:
        """A bitwise-identical block: only the reference's norm and NaN/Inf counts matter."""
        s = _dot(x, x)
        if not math.isfinite(s):  # NaN/Inf present, or float32 squares overflowed
            nan, inf = _count(np.isnan(x)), _count(np.isinf(x))
            self.nan_a, self.nan_b = self.nan_a + nan, self.nan_b + nan
            self.inf_a, self.inf_b = self.inf_a + inf, self.inf_b + inf
            x = x[np.isfinite(x)].astype(np.float64)
            s = _dot(x, x)
        self.sums.append((s, 0.0, 0.0, 0.0))
        self.nfin += x.size

    def _special(
        self, x: np.ndarray, y: np.ndarray, ia: np.ndarray, ib: np.ndarray, off: int
    ) -> None:
        """A block with NaN or Inf on a side (or whose float32 sums overflowed)."""
        nx, ny, jx, jy = np.isnan(x), np.isnan(y), np.isinf(x), np.isinf(y)
        nan_mis, inf_mis = nx ^ ny, (jx | jy) & (x != y)
        self.nan_a, self.nan_b = self.nan_a + _count(nx), self.nan_b + _count(ny)
        self.inf_a, self.inf_b = self.inf_a + _count(jx), self.inf_b + _count(jy)
        self.nan_mis, self.inf_mis = self.nan_mis + _count(nan_mis), self.inf_mis + _count(inf_mis)
        self.mismatch += _count((ia != ib) & ~(nx & ny))  # NaN vs NaN counts as equal
        if self.k:
            sp = np.flatnonzero(nan_mis | inf_mis)[: self.k]
            self._add_worst([(0, 0.0, off + int(i), float(x[i]), float(y[i])) for i in sp])
        keep = np.flatnonzero(~(nx | ny | jx | jy))
        sa, sb = ia[keep], ib[keep]
        self._finite(x[keep], y[keep], sa, sb, sa - sb, off, keep, finite=True)

    def _finite(
        self, x: np.ndarray, y: np.ndarray, ia: np.ndarray, ib: np.ndarray, t: np.ndarray,
        off: int, pos: np.ndarray | None, *, finite: bool,
    ) -> bool:
        """Fold in elements that differ somewhere; False, changing nothing, on non-finite sums.

        ``finite`` says the inputs are known finite, so non-finite float32 sums are overflow,
        redone in float64. ``pos`` maps these elements to block positions (None: the same).
        """
        n = x.size
        if n == 0:
            return True
        d = np.subtract(x, y, out=self.d[:n])
        sums = (_dot(x, x), _dot(d, d), _dot(d, x))
        if not all(map(math.isfinite, sums)):
            if not finite:
                return False
            x64, y64 = x.astype(np.float64), y.astype(np.float64)
            d64 = x64 - y64
            sums = (_dot(x64, x64), _dot(d64, d64), _dot(d64, x64), _sum(np.abs(d64)))
        across, rest = self._straddlers(t)
        ad = np.abs(d, out=d)
        self.sums.append(sums if len(sums) > 3 else (*sums, _sum(ad)))
        self.nfin += n
        bmax = float(np.maximum.reduce(ad))
        if bmax >= self.max_abs * (1 - _SLACK):  # rounding is monotonic: ties hold the max
            c = np.flatnonzero(ad == bmax) if self.f32 else slice(0, 0)
            self.max_abs = max(self.max_abs, _exact(x, y, c, _absdiff) if self.f32 else bmax)
        for r in self.excess:
            self._probe(r, ad, x, y, bmax, t, across, rest)
        if self.ulp_bits is not None:
            self.ulp = max(self.ulp, rest, _ulps_apart(ia[across], ib[across], self.mag))
        if across.size:  # pairs across zero (and 0 vs b): the only ones with |a-b|/max > 1
            self.max_rel = max(self.max_rel, _exact(x, y, across, _reldiff))
        if self.max_rel < 1:  # else no same-sign pair (at most 1) can raise it
            self._ratio(ad, x, y)
        if self.k:
            self._take_worst(ad, x, y, off, pos, bmax)
        return True

    def _ratio(self, ad: np.ndarray, x: np.ndarray, y: np.ndarray) -> None:
        """Raise ``max_rel`` to this block's max of ``|a-b| / max(|a|,|b|)``, float64-exact.

        One division by ``a`` instead of five passes: ``r' = |a-b|/|a|`` bounds the wanted
        ``r`` from both sides (``r'/(1+r') <= r <= min(r', 2)``), so only the few elements whose
        ``r'`` reaches the bar are evaluated exactly, and most blocks none at all.
        """
        rr = np.divide(ad, x, out=self.p[: ad.size])  # carries a's sign; 0/0 -> NaN, ignored
        top = max(float(np.fmax.reduce(rr)), -float(np.fmin.reduce(rr)))
        if not top > 0 or min(top, 2.0) * (1 + _SLACK) < self.max_rel:
            return
        low = max(1.0 if math.isinf(top) else top / (1 + top), self.max_rel)  # 0 = a != b: r = 1
        c = np.flatnonzero(np.abs(rr, out=rr) >= low * (1 - _SLACK))
        self.max_rel = max(self.max_rel, _exact(x, y, c, _reldiff))

    def _probe(
        self, r: float, ad: np.ndarray, x: np.ndarray, y: np.ndarray, bmax: float,
        t: np.ndarray, across: np.ndarray, rest: int,
    ) -> None:
        """Raise ``excess[r]`` to this block's max of ``|a-b| - r*|a|``, float64-exact.

        Most elements cannot raise it, and the ULP distances say which: a same-sign pair of
        normal numbers ``u`` ULPs apart has ``|a-b| <= u*eps*max(|a|,|b|)``, so below
        ``u = r / (eps (1 + r))`` it is within ``r*|a|``; subnormal pairs differ by less than
        ``tiny``; and the pairs across zero are listed in ``across``.
        """
        now, n = self.excess[r], ad.size
        if bmax * (1 + 2.0**-22) <= now:  # |a-b| - r*|a| <= |a-b| <= max |a-b|
            return
        limit = r / (self.eps * (1 + r)) * (1 - 2.0**-40)  # margin for float64 rounding
        if rest <= limit:
            c: Any = across
        else:
            u = np.abs(t, out=self.u[:n]).view(f"u{t.itemsize}")  # t is 0 at across
            bound = min(int(limit), np.iinfo(u.dtype).max)  # an int: no float64 copy of u
            far = np.flatnonzero(np.greater(u, bound, out=self.mask[:n]))
            c = np.concatenate([across, far]) if far.size <= n // 16 else None
        if c is not None:
            e = _exact(x, y, c, lambda xa, ya: np.abs(xa - ya) - r * np.abs(xa))
            if max(now, e) >= self.tiny:  # what remains is at most 0, or below tiny
                self.excess[r] = max(now, e)
                return
        q = np.multiply(np.abs(x, out=self.q[:n]), -r, out=self.q[:n])
        e = float(np.maximum.reduce(np.add(q, ad, out=q)))
        if self.f32:  # float32 error of q_i is below 2^-23 (|a-b| + r|a|) <= 2^-23 (2 bmax - q_i)
            bar = e - 2.0**-21 * (2 * bmax + abs(e))
            c = np.flatnonzero(q >= bar) if math.isfinite(bar) else slice(None)
            e = _exact(x, y, c, lambda xa, ya: np.abs(xa - ya) - r * np.abs(xa))
        self.excess[r] = max(now, e)

    def _straddlers(self, t: np.ndarray) -> tuple[np.ndarray, int]:
        """Positions with ``|t| >= straddle``, and the largest ``|t|`` elsewhere.

        ``t = ia - ib`` (wrapped) is exactly the ULP distance of a same-sign pair, and every
        pair of opposite signs has ``|t| >= straddle``. Such pairs are rare (values crossing
        zero), so they are first looked for one at a time; ``t`` is zeroed at them.
        """
        s, found = self.straddle, []
        top, bottom = int(np.maximum.reduce(t)), int(np.minimum.reduce(t))  # faster than argmax
        if top < s and -bottom < s:
            return np.empty(0, np.intp), max(top, -bottom)
        hi, lo = int(np.argmax(t)), int(np.argmin(t))
        for _ in range(self.one_by_one):
            if t[hi] < s and -int(t[lo]) < s:
                return np.array(found, np.intp), max(int(t[hi]), -int(t[lo]))
            i = hi if t[hi] >= s else lo
            found.append(i)
            t[i] = 0
            hi, lo = int(np.argmax(t)) if i == hi else hi, int(np.argmin(t)) if i == lo else lo
        if t[hi] < s and -int(t[lo]) < s:
            return np.array(found, np.intp), max(int(t[hi]), -int(t[lo]))
        u = np.abs(t, out=self.u[: t.size]).view(f"u{t.itemsize}")  # |min int| stays 2^(w-1)
        c = np.flatnonzero(np.greater_equal(u, s, out=self.mask[: t.size]))
        u[c], t[c] = 0, 0
        self.one_by_one = 4 if c.size < 4 else 0  # many here: likely many in the next block too
        return np.concatenate([np.array(found, np.intp), c]), int(np.maximum.reduce(u))

    def _take_worst(
        self, ad: np.ndarray, x: np.ndarray, y: np.ndarray, off: int, pos: np.ndarray | None,
        bmax: float,
    ) -> None:
        """Offer this block's largest differences to the running top k."""
        k, n, mask = self.k, ad.size, self.mask[: ad.size]
        if len(self.worst) >= k:
            cls, neg = self.worst[-1][:2]
            if cls == 0 or bmax <= -neg:
                return
            c = np.flatnonzero(np.greater(ad, -neg, out=mask))
        elif bmax > 0:  # a strided sample's k-th largest is a cheap lower bound of the block's
            sample = ad[:: max(1, n // 4096)]
            v = float(np.partition(sample, -k)[-k]) if sample.size > k else 0.0
            c = np.flatnonzero(np.greater_equal(ad, v, out=mask) if v > 0 else ad > 0)
        else:
            c = np.empty(0, np.intp)
        if c.size > k:
            c = c[_topk(ad[c], k)]
        room = k - len(self.worst) - c.size
        if room > 0:  # +0.0 vs -0.0 differ by 0 but are mismatches: listed last, if room is left
            zero = np.flatnonzero((ad == 0) & (np.signbit(x) != np.signbit(y)))[:room]
            c = np.concatenate([c, zero])
        at = c if pos is None else pos[c]
        self._add_worst(
            [(1, -float(ad[i]), off + int(g), float(x[i]), float(y[i])) for i, g in zip(c, at)]
        )

    def merge(self, o: _FloatScan) -> None:
        for name in ("mismatch", "nan_mis", "inf_mis", "nfin", "nan_a", "nan_b", "inf_a", "inf_b"):
            setattr(self, name, getattr(self, name) + getattr(o, name))
        self.max_abs, self.max_rel = max(self.max_abs, o.max_abs), max(self.max_rel, o.max_rel)
        self.ulp, self.identical = max(self.ulp, o.ulp), self.identical and o.identical
        self.excess = {r: max(e, o.excess[r]) for r, e in self.excess.items()}
        self.sums += o.sums
        self._add_worst(o.worst)

    def cosine(self, saa: float, sdd: float, sda: float) -> float:
        """Cosine similarity from the three sums, or from an exact second pass when needed.

        With ``d = a - b``: ``|b|^2 = |a|^2 - 2 a.d + |d|^2`` and ``a.b = |a|^2 - a.d``; near
        ``a ~ b`` the form ``1 - cos = (|d|^2 - (|a|-|b|)^2) / (2|a||b|)`` keeps full precision.
        The float32 sums carry ~1e-7 relative error, so when neither form is good to 1e-6
        (``|b|`` tiny next to ``|a|`` or ``|d|``) a second pass sums ``b.b`` and ``a.b`` in float64.
        """
        if saa == 0:
            return 1.0 if sdd == 0 else 0.0  # b = -d exactly
        eps = 2.0**-22 if self.f32 else 2.0**-50
        sbb = saa - 2 * sda + sdd
        if sbb > 100 * eps * (saa + 2 * abs(sda) + sdd):
            na, nb, nd = math.sqrt(saa), math.sqrt(sbb), math.sqrt(sdd)
            near = eps * sdd * (5 + 2 * nd / (na + nb)) / (2 * na * nb)
            direct = eps * (saa + abs(sda)) / (na * nb)
            if near <= min(direct, 1e-6):
                a_minus_b = (2 * sda - sdd) / (na + nb)
                return min(1.0, max(-1.0, 1 - (sdd - a_minus_b * a_minus_b) / (2 * na * nb)))
            if direct <= 1e-6:
                return min(1.0, max(-1.0, (saa - sda) / (na * nb)))
        sbb, sab = self.rescan()
        return 0.0 if sbb == 0 else min(1.0, max(-1.0, sab / math.sqrt(saa * sbb)))

    def result(self, shape: tuple[int, ...], same_dtype: bool) -> TensorMetrics:
        saa, sdd, sda, sabs = (_exact_sum(c) for c in zip(*self.sums)) if self.sums else [0.0] * 4
        return TensorMetrics(
            kind="float", dtype_a=_dtname(self.da), dtype_b=_dtname(self.db), shape=tuple(shape),
            size=math.prod(shape), identical=self.identical and same_dtype,
            mismatch_count=self.mismatch, max_abs=self.max_abs, max_rel=self.max_rel,
            mean_abs=sabs / self.nfin if self.nfin else 0.0,
            rel_l2=math.sqrt(sdd / saa) if saa > 0 else (0.0 if sdd == 0 else math.inf),
            ulp_max=-1 if self.ulp_bits is None else self.ulp, cosine=self.cosine(saa, sdd, sda),
            sqnr_db=(10 * math.log10(saa / sdd) if saa > 0 else -math.inf) if sdd > 0 else math.inf,
            nan_mismatch=self.nan_mis, inf_mismatch=self.inf_mis, nan_a=self.nan_a,
            nan_b=self.nan_b, inf_a=self.inf_a, inf_b=self.inf_b, worst=self._worst_out(shape),
            excess_at_rtol=tuple(self.excess.items()),
        )


def _exact_sum(parts: tuple[float, ...]) -> float:
    """The correctly rounded sum, so the total does not depend on the order blocks finished."""
    try:
        return math.fsum(parts)
    except (OverflowError, ValueError):  # float64 overflow: inf, or inf - inf; plain sum says which
        return sum(parts)


def _convert(r: np.ndarray, out: np.ndarray) -> np.ndarray:
    np.copyto(out, r, casting="unsafe")  # exact for every narrower float; ml_dtypes casts too
    return out


def _ulps_apart(ia: np.ndarray, ib: np.ndarray, mag: int) -> int:
    """Max ULP distance of raw-bit pairs: on the monotonic line (-0.0 at -1, +0.0 at 0)."""
    if ia.size == 0:
        return 0
    wide = (ia.astype(np.int64), ib.astype(np.int64))
    ka, kb = (np.where(v < 0, -(v & mag) - 1, v) for v in wide)
    return int((np.maximum(ka, kb).view(np.uint64) - np.minimum(ka, kb).view(np.uint64)).max())


def _absdiff(xa: np.ndarray, ya: np.ndarray) -> np.ndarray:
    return np.abs(xa - ya)


def _reldiff(xa: np.ndarray, ya: np.ndarray) -> np.ndarray:
    return np.abs(xa - ya) / np.maximum(np.abs(xa), np.abs(ya))  # 0/0 -> NaN, dropped


def _exact(x: np.ndarray, y: np.ndarray, c: Any, f: Callable[..., np.ndarray]) -> float:
    """``max f(a, b)`` in float64 over the candidate elements ``c`` (-inf if there are none)."""
    v = f(x[c].astype(np.float64), y[c].astype(np.float64))
    v = v[~np.isnan(v)]
    return float(v.max()) if v.size else -math.inf


# --------------------------------------------------------------------------- exact kinds


class _ExactScan(_Scan):
    """Integers, bool, strings and the rest: which elements differ, and a few of them."""

    def __init__(self, da: np.dtype, db: np.dtype, k: int) -> None:
        self.da, self.db, self.k = da, db, k
        self.by_size = da.kind in "iu" and db.kind in "iu"
        self.bitwise = da == db and da.kind != "O"
        self.identical, self.mismatch = True, 0
        self.worst = []

    def feed(self, off: int, ra: np.ndarray, rb: np.ndarray) -> None:
        neq = _bits_differ(ra, rb) if self.bitwise else _not_equal(ra, rb)
        count = _count(neq)
        if count == 0:
            return
        self.identical, self.mismatch = False, self.mismatch + count
        if not self.k or (len(self.worst) >= self.k and not self.by_size):
            return  # ranked by position: later blocks cannot displace a full list
        pos = np.flatnonzero(neq)
        if self.by_size:
            size = np.abs(ra[pos].astype(np.float64) - rb[pos].astype(np.float64))
            pick = [(-float(size[i]), int(pos[i])) for i in _topk(size, self.k)]
        else:
            pick = [(0.0, int(p)) for p in pos[: self.k]]
        self._add_worst([(1, s, off + p, _py(ra[p]), _py(rb[p])) for s, p in pick])

    def merge(self, o: _ExactScan) -> None:
        self.identical, self.mismatch = self.identical and o.identical, self.mismatch + o.mismatch
        self._add_worst(o.worst)

    def result(self, shape: tuple[int, ...], same_dtype: bool) -> TensorMetrics:
        return TensorMetrics(
            kind="exact", dtype_a=_dtname(self.da), dtype_b=_dtname(self.db), shape=tuple(shape),
            size=math.prod(shape), identical=self.identical and same_dtype,
            mismatch_count=self.mismatch, max_abs=0.0, max_rel=0.0, mean_abs=0.0, rel_l2=0.0,
            ulp_max=-1, cosine=1.0, sqnr_db=math.inf, nan_mismatch=0, inf_mismatch=0, nan_a=0,
            nan_b=0, inf_a=0, inf_b=0, worst=self._worst_out(shape),
        )


def _bits_differ(ra: np.ndarray, rb: np.ndarray) -> np.ndarray:
    size = ra.dtype.itemsize
    if size in (1, 2, 4, 8):
        return np.not_equal(ra.view(f"u{size}"), rb.view(f"u{size}"))
    if size == 0:
        return np.zeros(ra.size, np.bool_)
    rows_a, rows_b = (v.view(np.uint8).reshape(-1, size) for v in (ra, rb))
    return np.any(rows_a != rows_b, axis=1)


def _not_equal(ra: np.ndarray, rb: np.ndarray) -> np.ndarray:
    """Value comparison across dtypes; text against anything else compares as Python objects."""
    try:
        return np.asarray(np.not_equal(ra, rb), dtype=np.bool_)
    except TypeError:  # numpy has no loop, e.g. str vs bytes or str vs int
        return np.asarray(np.not_equal(ra.astype(object), rb.astype(object)), dtype=np.bool_)


def _py(v: Any) -> Any:
    """A JSON-friendly Python value: bytes are decoded (backslash-escaped where not UTF-8)."""
    v = v.item() if isinstance(v, np.generic) else v
    if isinstance(v, bytes):
        return v.decode("utf-8", "backslashreplace")
    return v if isinstance(v, bool | int | float | str) else repr(v)
