"""Summary statistics of stored tensors: min/max/mean over finite values, NaN and inf counts.

Computed by the writer from the arrays it is handed, while they are in memory, batch by batch
(:class:`Stats` merges batches), so finishing a capture never reads its files back. A tensor
the writer cannot follow byte by byte (an alias that stopped sharing its file) is summarised
from its file instead (:func:`file_stats`). Never imports TensorFlow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ._format import STRING, widen

__all__ = ["Stats", "file_stats"]

CHUNK = 1 << 20  # elements per chunk: widening and filtering never hold more than a few MB at once


@dataclass
class Stats:
    """Running statistics over every element added so far (None for strings)."""

    dtype_name: str
    lo: Any = None
    hi: Any = None
    total: float = 0.0
    count: int = 0
    nan: int = 0
    inf: int = 0

    def add(self, stored: np.ndarray) -> None:
        """Fold in more elements of the tensor, as stored on disk (any shape, any order)."""
        if self.dtype_name == STRING:
            return
        flat = np.asarray(stored).reshape(-1)
        for start in range(0, flat.size, CHUNK):
            self._add_chunk(widen(np.asarray(flat[start : start + CHUNK]), self.dtype_name))

    def _add_chunk(self, chunk: np.ndarray) -> None:
        if chunk.dtype.kind == "f":
            lo, hi = chunk.min(), chunk.max()
            if np.isfinite(lo) and np.isfinite(hi):  # the common case: no NaN, no inf, no filtering
                self._fold(float(lo), float(hi), chunk)
                return
        if chunk.dtype.kind in "fc":
            self.nan += int(np.isnan(chunk).sum())
            self.inf += int(np.isinf(chunk).sum())
            chunk = np.abs(chunk) if chunk.dtype.kind == "c" else chunk  # |z| may overflow: filter after
            chunk = chunk[np.isfinite(chunk)]
            if chunk.size:
                self._fold(float(chunk.min()), float(chunk.max()), chunk)
            return
        chunk = chunk.astype(np.uint8) if chunk.dtype.kind == "b" else chunk
        if chunk.size:
            self._fold(int(chunk.min()), int(chunk.max()), chunk)

    def _fold(self, lo: Any, hi: Any, chunk: np.ndarray) -> None:
        self.lo = lo if self.lo is None else min(self.lo, lo)
        self.hi = hi if self.hi is None else max(self.hi, hi)
        self.total += float(chunk.sum(dtype=np.float64))
        self.count += int(chunk.size)

    def to_json(self) -> dict[str, Any] | None:
        """The manifest's ``stats`` record; the mean is None when nothing finite was seen."""
        if self.dtype_name == STRING:
            return None
        mean = self.total / self.count if self.count else None
        mean = mean if mean is None or np.isfinite(mean) else None
        return {"min": self.lo, "max": self.hi, "mean": mean, "nan": self.nan, "inf": self.inf}


def file_stats(stored: np.ndarray, dtype_name: str) -> dict[str, Any] | None:
    """Statistics of a whole stored tensor (e.g. memory-mapped), read a chunk at a time."""
    stats = Stats(dtype_name)
    stats.add(stored)
    return stats.to_json()
