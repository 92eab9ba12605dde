"""One block of a float comparison, in numpy: the definition the compiled kernel must match.

:func:`scan_block` folds elements ``[off, off + x.size)`` of a float pair into a worker's
running state (the arrays of :class:`BlockState`). :mod:`tracer.metrics.kernel` does the same
in one compiled pass; this module is its specification and the fallback when numba is missing,
and both must give bit-identical states (``tests/test_metrics_backends.py``). So everything
here is either exact (counts, maxima, the top k, the histogram) or summed in a fixed order
that both can follow: the four sums go into ``LANES`` lanes per block, element ``i`` of the
block into lane ``i % LANES``, each lane in increasing position, in float64 (whole rows of
lanes first, then the short last row); the lanes of every block are added exactly at the end.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from .result import HISTOGRAM_DECADES

__all__ = ["BlockState", "LANES", "HISTOGRAM_DECADES", "histogram_edges", "scan_block"]

LANES = 16

# BlockState.ints, by position
DIFFER, MISMATCH, NAN_MIS, INF_MIS, NFIN, NAN_A, NAN_B, INF_A, INF_B, WLEN = range(10)
N_INTS = 10
# BlockState.worst columns: class (0: NaN/Inf mismatch, 1: finite), size, flat position, a, b
W_CLS, W_KEY, W_POS, W_A, W_B = range(5)


@dataclass
class BlockState:
    """A worker's running totals, as arrays a compiled kernel can update in place.

    ``fmax`` holds max |a-b|, max relative error, then the excess at each recorded rtol;
    ``hist`` the count of |a-b| = 0, then one count per decade; ``lanes`` one (4, LANES)
    array of partial sums (a.a, d.d, d.a, |d| with d = a - b) per block fed.
    """

    k: int
    n_rtols: int
    ints: np.ndarray = field(init=False)
    fmax: np.ndarray = field(init=False)
    ulp: np.ndarray = field(init=False)
    hist: np.ndarray = field(init=False)
    worst: np.ndarray = field(init=False)
    lanes: list[np.ndarray] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ints = np.zeros(N_INTS, np.int64)
        self.fmax = np.zeros(2 + self.n_rtols, np.float64)
        self.ulp = np.zeros(1, np.uint64)
        self.hist = np.zeros(1 + HISTOGRAM_DECADES[1] - HISTOGRAM_DECADES[0], np.int64)
        self.worst = np.zeros((self.k, 5), np.float64)


@functools.cache
def histogram_edges(pipe: str) -> np.ndarray:
    """The inner decade edges (1e-11 ... 1e2) as exact thresholds in the ``pipe`` dtype.

    Edge ``e`` is the smallest positive value whose numpy ``log10`` is at least ``e``, found by
    bisection over the bit patterns, so binning by comparison with these thresholds gives the
    same bins as ``floor(np.log10(|a-b|))`` (what the report used to compute on whole
    tensors) without a logarithm per element.
    """
    dt = np.dtype(pipe)
    bits = np.dtype(f"u{dt.itemsize}")
    top = int(np.array(np.finfo(dt).max, dt).view(bits))
    lo_dec, hi_dec = HISTOGRAM_DECADES
    out = []
    for e in range(lo_dec + 1, hi_dec):
        lo, hi = 1, top  # log10(smallest subnormal) < e <= log10(max)
        while lo < hi:
            mid = (lo + hi) // 2
            value = np.array(mid, bits).view(dt)
            if np.log10(value.astype(np.float64)) >= e:
                hi = mid
            else:
                lo = mid + 1
        out.append(np.array(lo, bits).view(dt))
    return np.array(out, dt)


def scan_block(
    x: np.ndarray, y: np.ndarray, ia: np.ndarray, ib: np.ndarray, off: int, masks: np.ndarray,
    ulps: bool, rtols: np.ndarray, st: BlockState, lanes: np.ndarray, edges: np.ndarray,
) -> None:
    """Fold one block into ``st`` (numpy); :func:`tracer.metrics.kernel.scan_block`'s twin.

    ``x``, ``y``: the values in the pipe dtype (float32 or float64); ``ia``, ``ib``: the bits
    that decide equality and ULPs (the inputs' own, or the pipe's for mixed dtypes), with
    ``masks`` = (magnitude mask, exponent mask, -2**31 or -2**63: for the kernel) of their
    format; ``lanes`` is this block's (also called on a run of a block, from a multiple of
    ``LANES`` on, with that block's lanes: the order of additions stays the same).
    """
    n = x.size
    mag, expo = masks[0], masks[1]
    ea, eb = ia & mag, ib & mag
    nx, ny, jx, jy = ea > expo, eb > expo, ea == expo, eb == expo
    fin = (ea < expo) & (eb < expo)
    neq = ia != ib
    nmis, imis = nx ^ ny, (jx | jy) & (x != y)
    ints = st.ints
    for slot, mask in ((DIFFER, neq), (NAN_MIS, nmis), (INF_MIS, imis), (NFIN, fin), (NAN_A, nx),
                       (NAN_B, ny), (INF_A, jx), (INF_B, jy)):
        ints[slot] += np.count_nonzero(mask)
    ints[MISMATCH] += np.count_nonzero(neq) - np.count_nonzero(neq & nx & ny)
    X, Y = x.astype(np.float64), y.astype(np.float64)
    xm = np.where(fin, X, 0.0)
    d = np.where(fin, X - Y, 0.0)
    ad = np.abs(d)
    _add_lanes(lanes, (xm * xm, d * d, d * xm, ad))
    if n:
        st.fmax[0] = max(st.fmax[0], float(ad.max()))
    if ulps:
        st.ulp[0] = max(int(st.ulp[0]), _max_ulps(ia[fin], ib[fin], int(mag)))
    live = ad > 0  # a relative error needs a difference (and a finite pair)
    if live.any():
        rel = ad[live] / np.maximum(np.abs(X[live]), np.abs(Y[live]))
        st.fmax[1] = max(st.fmax[1], float(rel.max()))
    for q, r in enumerate(rtols):
        e = ad - r * np.abs(X)
        e = e[fin & (e > 0)]
        if e.size:
            st.fmax[2 + q] = max(st.fmax[2 + q], float(e.max()))
    size = np.abs(np.where(fin, x - y, 0))  # |a-b| in the pipe dtype: the rank and the bin
    _histogram(st.hist, size[fin], edges)
    if st.k:
        _worst(st, off, x, y, neq & fin, nmis | imis, size)


def _add_lanes(lanes: np.ndarray, terms: tuple[np.ndarray, ...]) -> None:
    """Each term into the ``LANES`` lanes in position order, starting from the lanes' values:
    whole rows first (numpy's reduction over rows adds them in order), then the short rest."""
    n = terms[0].size
    cut = n - n % LANES
    for row, t in enumerate(terms):
        if cut:
            rows = np.concatenate([lanes[row][None, :], t[:cut].reshape(-1, LANES)])
            lanes[row] = np.add.reduce(rows, axis=0)
        lanes[row, : n - cut] += t[cut:]


def _max_ulps(ia: np.ndarray, ib: np.ndarray, mag: int) -> int:
    """Max ULP distance of raw-bit pairs: on the monotonic line (-0.0 at -1, +0.0 at 0)."""
    if ia.size == 0:
        return 0
    wide = (ia.astype(np.int64), ib.astype(np.int64))
    ka, kb = (np.where(v < 0, -(v & mag) - 1, v) for v in wide)
    return int((np.maximum(ka, kb).view(np.uint64) - np.minimum(ka, kb).view(np.uint64)).max())


def _histogram(hist: np.ndarray, size: np.ndarray, edges: np.ndarray) -> None:
    """``hist[0]``: sizes of exactly 0; then one count per decade (clipped), by the exact edges."""
    positive = size[size > 0]
    hist[0] += size.size - positive.size
    bins = np.searchsorted(edges, positive, side="right")
    hist[1:] += np.bincount(bins, minlength=hist.size - 1)


def _worst(
    st: BlockState, off: int, x: np.ndarray, y: np.ndarray, finite_mis: np.ndarray,
    special_mis: np.ndarray, size: np.ndarray,
) -> None:
    """Merge this block's candidates into the top k: (class, -size, position) ascending."""
    k = st.k
    cand = [(0, 0.0, int(i)) for i in np.flatnonzero(special_mis)[:k]]
    pos = np.flatnonzero(finite_mis)
    if pos.size:
        keys = size[pos].astype(np.float64)
        order = np.lexsort((pos, -keys))[:k]
        cand += [(1, float(keys[j]), int(pos[j])) for j in order]
    n = int(st.ints[WLEN])
    held = [(int(r[W_CLS]), float(r[W_KEY]), int(r[W_POS]), float(r[W_A]), float(r[W_B])) for r in st.worst[:n]]
    fresh = [(c, s, off + p, float(x[p]), float(y[p])) for c, s, p in cand]
    top = sorted(held + fresh, key=lambda e: (e[0], -e[1], e[2]))[:k]
    for row, entry in enumerate(top):
        st.worst[row] = entry
    st.ints[WLEN] = len(top)
