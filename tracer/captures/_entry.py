"""What the capture writer knows about each stored tensor while the capture runs.

Rows of batch-major tensors arrive batch by batch, so an entry keeps the row intervals written
so far (a tensor with rows missing at the end is uncaptured), its running statistics, and
which other tensor's file it shares, if any. Never imports TensorFlow.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field

import numpy as np

from ._format import STRING
from ._stats import Stats

__all__ = ["Entry", "add_interval"]


@dataclass
class Entry:
    """What the writer knows about one stored tensor while the capture runs."""

    filename: str
    dtype_name: str
    stored: np.dtype
    shape: tuple[int, ...]
    batch_major: bool
    header_len: int = 0
    rows: list[list[int]] = field(default_factory=list)  # merged [start, end) intervals written
    stats: Stats | None = None  # None: not followed byte by byte (an alias); summarised from its file
    link_of: str | None = None  # the tensor whose file this one's is a hard link of (its bytes, stored once)
    packed: bool = False  # format 2: zstd chunks appended in any row order (see _packed), not a .npy
    chunks: list[list[int]] = field(default_factory=list)  # packed: [first_row, end_row, offset, nbytes, predicted]
    predict: dict | None = None  # packed: how a chunk may be predicted from inputs (see _packed.predictor_for)
    level: int = 0  # the longest chain of predicted tensors a read of this one decodes
    digest: str | None = None  # values left in the artifact: only their digest is kept (no file)
    source_key: str | None = None  # ... and the checkpoint key they are read back by
    known_stats: dict | None = None  # statistics taken by another capture (keep_digest_of)
    row_digests: dict[int, bytes] = field(default_factory=dict)  # packed: sha256 of each row written (0: whole)

    def covers(self, start: int, end: int) -> bool:
        """Whether rows [start, end) were written (one merged interval holds them all)."""
        i = bisect_right([s for s, _ in self.rows], start) - 1
        return i >= 0 and self.rows[i][1] >= end

    def can_share(self, other: Entry) -> bool:
        """Whether this tensor's file may be the other's: same bytes layout, never strings
        (a string file is rewritten when a later batch holds longer strings)."""
        return (self.dtype_name == other.dtype_name != STRING and self.stored == other.stored
                and self.shape == other.shape and self.batch_major == other.batch_major
                and self.packed == other.packed)


def add_interval(intervals: list[list[int]], start: int, end: int) -> bool:
    """Insert [start, end) into sorted disjoint intervals, merging neighbours; False on overlap."""
    if start == end:
        return True
    i = bisect_right([s for s, _ in intervals], start)
    if (i > 0 and intervals[i - 1][1] > start) or (i < len(intervals) and intervals[i][0] < end):
        return False
    intervals.insert(i, [start, end])
    for j in (i, i - 1):  # merge with the next, then with the previous interval
        if 0 <= j < len(intervals) - 1 and intervals[j][1] == intervals[j + 1][0]:
            intervals[j][1] = intervals.pop(j + 1)[1]
    return True
