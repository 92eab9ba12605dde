"""Reading a packed tensor once, chunk by chunk (format 2), with the few input chunks that the
predicted tensors read next kept in a small cache.

``tftrace compare`` reads every tensor once: decoding a whole tensor (up to a few hundred MB)
before comparing it holds two of them at once, where format 1's memory-mapped ``.npy`` held a
few pages. So :meth:`Capture.stream <tracer.captures.reader.Capture.stream>` hands out a
:class:`TensorStream` whose ``pieces()`` decode one chunk (≤ 4 MB) at a time, which
:func:`tracer.metrics.compare_arrays` consumes block by block.

A predicted chunk needs the same rows of its inputs, which are (mostly) the tensors streamed
just before. :class:`ChunkCache` keeps decoded chunks of tensors that a later predicted tensor
reads, up to :data:`CHUNK_CACHE_BYTES`; a chunk is only added while there is room (never
evicting another: in a stream of rows 0..n followed by its consumer's rows 0..n, least recently
used eviction would evict each chunk just before it is wanted), and an entry goes once no tensor
from the current one on reads it. What does not fit is decoded again from its file. Never
imports TensorFlow.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ._format import widen
from ._unpack import GetInput, decode_chunk

__all__ = ["CHUNK_CACHE_BYTES", "ChunkCache", "DecodedValues", "InStep", "TensorStream", "common_steps",
           "pieces_in_step"]

CHUNK_CACHE_BYTES = 4 << 20  # per capture: one chunk (8 MB measured 107 MB above the baseline, 4 MB 98)


class ChunkCache:
    """Decoded rows of prediction inputs, by tensor: ``{owner: [(r0, r1, rows), ...]}``; thread-safe."""

    def __init__(self, tensors: dict[str, Any], limit: int | None = None) -> None:
        self.limit, self.nbytes = CHUNK_CACHE_BYTES if limit is None else limit, 0
        self._rows: dict[str, list[tuple[int, int, np.ndarray]]] = {}
        self._order = {name: i for i, name in enumerate(tensors)}
        self._last_reader: dict[str, int] = {}  # input -> manifest position of its last predicted reader
        for name, rec in tensors.items():
            spec = (rec.get("encoding") or {}).get("predict") if isinstance(rec, dict) else None
            for source in (spec or {}).get("inputs", []) if isinstance(spec, dict) else []:
                owner = (tensors.get(source) or {}).get("alias_of") or source
                self._last_reader[owner] = max(self._last_reader.get(owner, -1), self._order[name])
        self._position = -1
        self._lock = threading.Lock()

    def reading(self, name: str) -> None:
        """``name`` is read now: entries that no tensor from it on reads are let go."""
        with self._lock:
            self._position = self._order.get(name, self._position)
            for owner in [o for o in self._rows if self._last_reader.get(o, -1) < self._position]:
                self.nbytes -= sum(v.nbytes for _, _, v in self._rows.pop(owner))

    def get(self, owner: str, r0: int, r1: int) -> np.ndarray | None:
        """Rows ``[r0, r1)`` of ``owner`` when one cached entry holds them all, else None."""
        with self._lock:
            for c0, c1, rows in self._rows.get(owner, ()):
                if c0 <= r0 and r1 <= c1:
                    return rows[r0 - c0 : r1 - c0]
        return None

    def put(self, owner: str, r0: int, r1: int, rows: np.ndarray) -> None:
        """Keep rows of a tensor a later predicted tensor reads, if they fit."""
        with self._lock:
            if self._last_reader.get(owner, -1) < self._position or self.nbytes + rows.nbytes > self.limit:
                return
            self._rows.setdefault(owner, []).append((r0, r1, rows))
            self.nbytes += rows.nbytes

    def clear(self) -> None:
        with self._lock:
            self._rows.clear()
            self.nbytes = 0


class DecodedValues:
    """Whole tensors decoded lately (``Capture.tensor``), least recently used first, under a byte
    limit, their bytes counted as they come and go. A sum over the entries at each eviction step
    was quadratic in their number: on the 35,000-op RetinaNet stand-in, thousands of small tensors
    fit the limit, and reading two captures' tensors once spent 146 of its 176 s there."""

    def __init__(self, limit: int) -> None:
        self.limit, self.nbytes = limit, 0
        self._values: OrderedDict[str, np.ndarray] = OrderedDict()

    def __contains__(self, name: str) -> bool:
        return name in self._values

    def get(self, name: str) -> np.ndarray | None:
        """The value, now the most recently used; None when it is not held."""
        value = self._values.get(name)
        if value is not None:
            self._values.move_to_end(name)
        return value

    def put(self, name: str, value: np.ndarray) -> None:
        old = self._values.pop(name, None)
        self.nbytes += value.nbytes - (old.nbytes if old is not None else 0)
        self._values[name] = value

    def make_room(self, nbytes: int, keep: set[str]) -> None:
        """Before decoding ``nbytes``: let go of the values decoded lately, oldest first, until they
        and it fit the limit; those in ``keep`` stay while they fit too (the new tensor reads them)."""
        if self.nbytes + nbytes <= self.limit:
            return
        if sum(self._values[n].nbytes for n in keep if n in self._values) > self.limit:
            keep = set()  # large inputs are read again chunk by chunk: a read holds one large tensor, its own
        kept: list[tuple[str, np.ndarray]] = []
        while self._values and self.nbytes + nbytes > self.limit:
            name, value = self._values.popitem(last=False)
            if name in keep:
                kept.append((name, value))
            else:
                self.nbytes -= value.nbytes
        for name, value in reversed(kept):  # back where they were: the oldest
            self._values[name] = value
            self._values.move_to_end(name, last=False)

    def clear(self) -> None:
        self._values.clear()
        self.nbytes = 0


class TensorStream:
    """One captured tensor as a sequence of pieces (flat, C order, widened as ``Capture.tensor``):
    what :func:`tracer.metrics.compare_arrays` takes in place of an array."""

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, chunks: Callable[[], Iterator[np.ndarray]]) -> None:
        self.shape, self.dtype = shape, dtype
        self.size = int(np.prod(shape, dtype=np.int64)) if shape else 1
        self._chunks = chunks

    def pieces(self) -> Iterator[np.ndarray]:
        """The values, one decoded chunk at a time (each a 1-D array)."""
        return self._chunks()


@dataclass(frozen=True)
class InStep:
    """One tensor of a group read in step (:func:`pieces_in_step`): its owner (the tensor whose
    bytes it holds), that owner's packed file, record and encoding, and the dtype it is read as."""

    owner: str
    path: Path
    record: dict[str, Any]
    encoding: dict[str, Any]
    dtype_name: str


def pieces_in_step(members: Sequence[InStep], steps: Sequence[tuple[int, int]], input_rows: GetInput,
                   cache: ChunkCache, root: Callable[[str], str]) -> Iterator[np.ndarray]:
    """Rows ``steps[t]`` of each member in turn (flat, widened as ``Capture.tensor``), for t = 0,
    1, ...: every step is whole chunks of every member (one chunk, or several where the other side
    of a compare chunked coarser; those are joined). Read one tensor after another, a predicted
    tensor's chunk decodes its input's same chunk again (from its file: the cache holds about
    one chunk), and a chain of four predictions decodes its first tensor four times; read in
    step, the input's chunk is at hand, decoded once for this step, and let go once the last
    member that reads it is decoded. ``root``: a tensor's owner (an alias reads its owner's).
    The steps ascend (as :func:`common_steps` gives them) and each member's chunks cover its rows
    once, in order (checked on open): a cursor walks each member's chunks, once in all."""
    readers: dict[str, int] = {}  # owner -> the members after its own that read it (or repeat it)
    seen: set[str] = set()
    for member in members:
        spec = member.encoding.get("predict") or {}
        for owner in {root(name) for name in spec.get("inputs", [])} | ({member.owner} & seen):
            if owner in seen:
                readers[owner] = readers.get(owner, 0) + 1
        seen.add(member.owner)
    with ExitStack() as files:
        opened = {m.owner: files.enter_context(open(m.path, "rb")) for m in members}
        chunks = {m.owner: sorted(m.encoding["chunks"]) for m in members}
        first = dict.fromkeys(chunks, 0)  # owner -> its first chunk that does not start before the step
        for r0, r1 in steps:
            held: dict[str, dict[tuple[int, int], np.ndarray]] = {}  # owner -> its chunks of this step
            left = dict(readers)

            def get_input(name: str, c0: int | None, c1: int | None) -> np.ndarray:
                at_hand = held.get(root(name), {}).get((c0, c1)) if c0 is not None else None  # type: ignore[arg-type]
                return at_hand if at_hand is not None else input_rows(name, c0, c1)

            for member in members:
                owner, record = member.owner, member.record
                parts = held.get(owner)
                if parts is None:
                    parts = {}
                    own, at = chunks[owner], first[owner]
                    while at < len(own) and own[at][0] < r0:
                        at += 1
                    first[owner] = at
                    while at < len(own) and own[at][1] <= r1:  # the chunks within [r0, r1)
                        chunk = own[at]
                        rows = decode_chunk(opened[owner], tuple(record["shape"]), True, chunk,
                                            member.encoding.get("predict"), np.dtype(record["stored_dtype"]),
                                            get_input)
                        cache.put(owner, chunk[0], chunk[1], rows)
                        parts[(chunk[0], chunk[1])] = rows
                        del rows
                        at += 1
                else:
                    left[owner] -= 1  # the same tensor again (two pairs read it)
                spec = member.encoding.get("predict") or {}
                for source in {root(name) for name in spec.get("inputs", [])}:
                    if source in left and source in held:
                        left[source] -= 1
                        if left[source] <= 0:
                            del held[source]
                if left.get(owner, 0) > 0:
                    held[owner] = parts
                elif owner in held:
                    del held[owner]
                flat = [widen(rows, member.dtype_name).reshape(-1) for _, rows in sorted(parts.items())]
                del parts
                yield flat[0] if len(flat) == 1 else np.concatenate(flat)
                del flat


def common_steps(spans_a: Sequence[tuple[int, int]], spans_b: Sequence[tuple[int, int]]
                 ) -> list[tuple[int, int]] | None:
    """The steps two sides' chunks can be read in: the coarser side's chunks, where each is whole
    chunks of the other side too (one side batched 8 rows a run and the other one, say); None
    where neither side's chunk boundaries hold the other's (a step would reach past one chunk
    of either side, and hold more)."""
    ends_a, ends_b = {r1 for _, r1 in spans_a}, {r1 for _, r1 in spans_b}
    if ends_b <= ends_a:  # sets: B's boundaries are all A's (the same ones included)
        return list(spans_b)
    if ends_a <= ends_b:
        return list(spans_a)
    return None
