"""Comparing a run of pairs in step: the rows of step t of every pair before those of step t + 1.

A packed capture (format 2) stores a BiasAdd, batch norm, Relu or Add output as the residual of
its prediction from its inputs, so a chain conv → BiasAdd → batch norm → Relu decodes its conv
once per member when the pairs are compared one after another (each tensor read whole before
the next: an input's chunk is long gone when its consumer's same chunk needs it). Read in step
(:meth:`Capture.in_step <tracer.captures.reader.Capture.in_step>`), each chunk is decoded once.

Each pair keeps its own scan, fed the very blocks :func:`~tracer.metrics.compare_arrays` feeds
it (the sums are per block: the blocks decide the bits), from pieces that end anywhere: the part
of a block that one piece ends with is copied and held (a piece is let go once fed) until the
next piece completes it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import numpy as np

from .arrays import DEFAULT_CHUNK_ELEMS, TRIM_BYTES, stream_scan, trim_memory
from .result import TensorMetrics

__all__ = ["InStepReader", "PairScan", "compare_in_step"]


class InStepReader(Protocol):
    """What :func:`compare_in_step` feeds a pair's pieces to: a :class:`PairScan`, or another
    reader of the same values (a received capture's digest checks)."""

    size: int
    da: np.dtype
    db: np.dtype

    def feed(self, pa: np.ndarray, pb: np.ndarray) -> None: ...

    def result(self) -> Any: ...


class PairScan:
    """One pair's scan fed from outside, piece by piece (A's and B's pieces of equal sizes, in
    order): the same blocks to the same scan as :func:`compare_arrays` of the pair's streams."""

    def __init__(self, a: Any, b: Any, *, rtols: Sequence[float], k_worst: int = 5,
                 chunk_elems: int = DEFAULT_CHUNK_ELEMS) -> None:
        """``a``, ``b``: the pair's streams (their shape and dtype; read again only for the
        cosine's rare second pass)."""
        self.shape = tuple(a.shape)
        self.da, self.db = np.dtype(a.dtype), np.dtype(b.dtype)
        self.size = math.prod(self.shape)
        self._scan, self._block = stream_scan(a, b, k_worst=k_worst, chunk_elems=chunk_elems, rtols=rtols)
        self._at = 0  # where the next block starts
        # the start of a block that straddles two pieces, copied: a piece is let go once fed
        self._tail_a, self._tail_b = np.empty(0, self.da), np.empty(0, self.db)

    def feed(self, pa: np.ndarray, pb: np.ndarray) -> None:
        """The next elements of both sides (1-D, of equal sizes)."""
        if pa.size != pb.size:
            raise ValueError(f"pieces of {pa.size} and {pb.size} elements")
        if self._at + self._tail_a.size + pa.size > self.size:
            raise ValueError(f"more than the {self.size} elements of shape {self.shape}")
        i, n = 0, pa.size
        with np.errstate(all="ignore"):  # overflow and 0/0 are expected, and handled explicitly
            if self._tail_a.size:
                want = min(self._block, self.size - self._at)
                k = min(want - self._tail_a.size, n)
                self._tail_a = np.concatenate((self._tail_a, pa[:k]))
                self._tail_b = np.concatenate((self._tail_b, pb[:k]))
                i = k
                if self._tail_a.size < want:
                    return
                self._scan.feed(self._at, self._tail_a, self._tail_b)
                self._at += want
                self._tail_a, self._tail_b = np.empty(0, self.da), np.empty(0, self.db)
            while i < n:
                want = min(self._block, self.size - self._at)
                if n - i < want:
                    self._tail_a, self._tail_b = pa[i:].copy(), pb[i:].copy()
                    return
                self._scan.feed(self._at, pa[i : i + want], pb[i : i + want])  # within the piece: no copy
                self._at, i = self._at + want, i + want

    def result(self) -> TensorMetrics:
        if self._at != self.size or self._tail_a.size:
            raise ValueError(f"fed {self._at + self._tail_a.size} of the {self.size} elements of shape {self.shape}")
        with np.errstate(all="ignore"):
            return self._scan.result(self.shape, self.da == self.db)


def compare_in_step(scans: Sequence[InStepReader], pieces_a: Iterator[np.ndarray], pieces_b: Iterator[np.ndarray]
                    ) -> list[Any]:
    """Every pair's result (a :class:`PairScan`'s metrics), from two sides' pieces in step: step t of pair 0, of pair 1, ..., then
    step t + 1 (:meth:`Capture.in_step`; a step is one chunk of each side, or several of the side
    that chunked finer).

    All on this thread. Making B's pieces on the decoding thread meanwhile took the ResNet-50
    batch-8 format pair's compare from 4.4 s to 3.7 s, and its peak from 104 MB above the import
    baseline to 123 MB, over the 4x the largest tensor (106 MB) that a compare holds at most."""
    at = 0
    for pa in pieces_a:
        pb = next(pieces_b, None)
        if pb is None:
            raise ValueError("B's pieces ended before A's")
        scans[at % len(scans)].feed(pa, pb)
        del pa, pb
        at += 1
    if next(pieces_b, None) is not None:
        raise ValueError("A's pieces ended before B's")
    results = [scan.result() for scan in scans]
    if sum(scan.size * (scan.da.itemsize + scan.db.itemsize) for scan in scans) >= TRIM_BYTES:
        trim_memory()
    return results
