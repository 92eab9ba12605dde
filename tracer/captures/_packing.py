"""The capture writer's packed files (format 2): chunks appended by jobs, predictions, digests.

A mixin of :class:`~tracer.captures.store.CaptureWriter`, kept apart so each module reads on
its own: what a chunk is and how it is coded is :mod:`._packed`; here is the bookkeeping of
writing them while a capture runs. A prediction needs its inputs' values for the same rows, so
the writer holds a tensor's latest rows while predictions still need them (and no longer:
memory stays what the caller holds plus the inputs of the next few predictions). A tensor
that is dropped (uncaptured) first has every chunk predicted from it re-stored plainly, so no
stored tensor ever depends on one that is gone. Never imports TensorFlow.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from ..safewrite import open_new, replacing
from ._entry import Entry
from ._format import DIGEST_OPS, MIN_DIGEST_BYTES, open_npy
from ._jobs import FileJobs
from ._flusher import Flusher
from ._packed import CHUNK_BYTES, MAX_LEVEL, choose_form, compress, digest, forms, predict, xor
from ._unpack import read_packed

__all__ = ["PackedWrites", "RowsCheck", "RowsDigest", "VALUES_DIGEST", "row_digest"]

# A values digest only ever meets another one (equal: bitwise identical tensors, compared without
# a read), never the artifact, so a fast non-cryptographic hash serves: with sha256 the instrumented
# stage of a ResNet-50 batch-8 capture took 0.4 s longer here (2.19 s against 1.80 s); xxh3 spends
# 0.06 s of CPU on it. (Captures of the first format-2 release carry "sha256:" values digests: they
# are still read, and equal only to their own kind.)
VALUES_DIGEST = "xxh3-128:"


def row_digest(row: np.ndarray) -> bytes:
    """The digest of one row's stored bytes (C order)."""
    return xxhash.xxh3_128(np.ascontiguousarray(row).reshape(-1).view(np.uint8).data).digest()


class RowsDigest:
    """A packed tensor's values digest taken as its stored values come, in order (rows of a
    batch-major tensor, or all of another): what :meth:`PackedWrites.rows_digest` records, so a
    reader can check a received capture's claim."""

    def __init__(self, stored_dtype: np.dtype, shape: list[int], batch_major: bool) -> None:
        self._rows = xxhash.xxh3_128(f"{np.dtype(stored_dtype).str}{list(shape)}".encode())
        self._whole = None if batch_major else xxhash.xxh3_128()

    def add(self, values: np.ndarray) -> None:
        """The next rows (a batch-major tensor: the first axis), or the next bytes of another."""
        if self._whole is None:
            for row in values:
                self._rows.update(row_digest(row))
        else:
            self._whole.update(np.ascontiguousarray(values).reshape(-1).view(np.uint8).data)

    def hexdigest(self) -> str:
        if self._whole is not None:
            self._rows.update(self._whole.digest())
            self._whole = None
        return VALUES_DIGEST + self._rows.hexdigest()


class RowsCheck:
    """A received tensor's values digest checked as its stored values are read in order, flat
    (:meth:`Capture.rows_check <tracer.captures.reader.Capture.rows_check>`): :meth:`add` each
    piece, then :meth:`done` raises the "damaged capture" error where the claim is false."""

    def __init__(self, digest: RowsDigest, confirm: Callable[[], None], row_elems: int) -> None:
        self._digest, self._confirm, self._row = digest, confirm, max(1, row_elems)

    def add(self, flat: np.ndarray) -> None:
        self._digest.add(flat.reshape(-1, self._row))

    def done(self) -> None:
        self._confirm()


class PackedWrites:
    """Packed-file methods of the capture writer (which sets these attributes)."""

    _entries: dict[str, Entry]
    _jobs: FileJobs
    _flusher: Flusher | None
    _artifact_values: bool
    _ops: dict[str, str]
    _predictors: dict[str, dict[str, Any]]
    _consumers: dict[str, int]
    _cache: dict[str, list[Any]]
    # and, from the writer and its other mixins:
    _file: Callable[[Entry], Path]
    _root: Callable[[str | None], str | None]
    _written: Callable[[Entry, np.ndarray], None]
    _check_open: Callable[[], None]
    _claim_filename: Callable[..., str]


    def _start_packed(self, tensor_name: str, entry: Entry) -> None:
        """An empty packed file (chunks are appended by jobs) and whether its chunks may be predicted:
        only from inputs stored in packed files, within :data:`MAX_LEVEL` predictions of a plain one."""
        with os.fdopen(open_new(self._file(entry), exclusive=True), "wb"):  # never through a planted link
            pass
        spec = self._predictors.get(tensor_name)
        if spec is None:
            return
        if not entry.batch_major:
            self._drop_consumer(tensor_name)
            return
        sources = [self._entries.get(self._root(name) or "") for name in spec["inputs"]]
        if all(s is not None and s.packed and s.digest is None and s.source_key is None for s in sources):
            level = 1 + max(s.level for s in sources if s is not None)
            if level <= MAX_LEVEL:
                entry.predict, entry.level = spec, level
                return
        self._drop_consumer(tensor_name)

    def _keep_for_predictions(self, tensor_name: str, span: tuple[int, int] | None, stored: np.ndarray) -> None:
        """Hold a tensor's latest rows (or a small whole value) while predictions still need them."""
        left = self._consumers.get(tensor_name, 0)
        if left > 0 and (span is not None or stored.nbytes <= 1 << 20):
            self._cache[tensor_name] = [span, stored, left]

    def _inputs_for(self, spec: Mapping[str, Any], span: tuple[int, int]) -> list[tuple[np.ndarray, bool]] | None:
        """The inputs of a prediction for rows ``span`` (values, whether they are rows), or None
        when one is not at hand; rows no other prediction needs are let go."""
        held = [self._cache.get(name) for name in spec["inputs"]]
        if any(h is None or (h[0] is not None and h[0] != span) for h in held):
            return None
        for name, h in zip(spec["inputs"], held):
            h[2] -= 1
            if h[2] <= 0 and h[0] is not None:
                self._cache.pop(name, None)
        return [(h[1], h[0] is not None) for h in held]

    def _drop_consumer(self, tensor_name: str) -> None:
        """A tensor that will not be predicted: its inputs need not be held for it."""
        spec = self._predictors.pop(tensor_name, None)
        for name in spec["inputs"] if spec else ():
            self._consumers[name] -= 1
            held = self._cache.get(name)
            if held is not None:
                held[2] -= 1
                if held[2] <= 0:
                    del self._cache[name]

    def _write_chunks(self, entry: Entry, span: tuple[int, int] | None, data: np.ndarray,
                      inputs: list[tuple[np.ndarray, bool]] | None) -> int:
        """Job: append rows ``span`` (None: the whole tensor) as chunks, each predicted when it can be."""
        rows = len(data) if span is not None else 1
        row_bytes = max(1, data.nbytes // max(1, rows))
        step = max(1, CHUNK_BYTES // row_bytes)
        written = 0
        with open(self._file(entry), "ab") as f:
            for start in range(0, rows, step):
                part = data[start : start + step] if span is not None else data
                guess = None
                if inputs is not None:
                    values = [x[start : start + len(part)] if is_rows else x for x, is_rows in inputs]
                    spec = entry.predict or {}
                    if forms(spec) and "form" not in spec.get("attrs", {}):  # the first chunk decides
                        guess = choose_form(spec, values, np.ascontiguousarray(part))
                    else:
                        guess = predict(spec, values, entry.stored, part.shape)
                blob = compress(part if guess is None else xor(np.ascontiguousarray(part), guess))
                first = span[0] + start if span is not None else 0
                entry.chunks.append([first, first + (len(part) if span is not None else 1), f.tell(), len(blob),
                                     int(guess is not None)])
                f.write(blob)
                written += len(blob)
        if span is None:
            entry.row_digests[0] = row_digest(data)
        else:
            for i, row in enumerate(data):
                entry.row_digests[span[0] + i] = row_digest(row)
        self._written(entry, data)
        return written

    def rows_digest(self, entry: Entry) -> str | None:
        """The digest of a packed tensor's values, from its rows' (so it does not depend on how
        the rows were batched or chunked); None when a row's was not taken here."""
        rows = entry.shape[0] if entry.batch_major else 1
        if len(entry.row_digests) != rows:
            return None
        h = xxhash.xxh3_128(f"{entry.stored.str}{list(entry.shape)}".encode())
        for i in range(rows):
            h.update(entry.row_digests[i])
        return VALUES_DIGEST + h.hexdigest()

    def _keeps_digest(self, tensor_name: str, stored: np.ndarray) -> bool:
        """Whether only a digest of this value is kept: a large variable the artifact restored."""
        op = self._ops.get(tensor_name.rsplit(":", 1)[0])
        return self._artifact_values and op in DIGEST_OPS and stored.nbytes >= MIN_DIGEST_BYTES

    def _take_digest(self, entry: Entry, data: np.ndarray) -> int:
        """Job: a kept-by-digest value's digest and statistics (no file)."""
        entry.digest = digest(data)
        if entry.stats is not None:
            entry.stats.add(data)
        return 0

    def _decode(self, entry: Entry) -> np.ndarray:
        """A packed entry's stored values, predicted chunks resolved from their inputs' files."""
        self._jobs.wait(entry.filename)

        def get_input(name: str, r0: int | None, r1: int | None) -> np.ndarray:
            value = self._decode(self._entries[self._root(name) or name])
            return value[r0:r1] if r0 is not None and self._entries[name].batch_major else value

        record = {"shape": list(entry.shape), "batch_major": entry.batch_major}
        return read_packed(self._file(entry), record, {"chunks": sorted(entry.chunks), "predict": entry.predict},
                           entry.stored, get_input)

    def _unpredict_dependents(self, gone: str) -> None:
        """Before a tensor's file goes: re-store every chunk predicted from it as plain values."""
        for entry in self._entries.values():
            if entry.predict is None or gone not in entry.predict["inputs"] or entry.link_of is not None:
                continue
            values = self._decode(entry)
            path = self._file(entry)
            chunks = []
            with replacing(path) as tmp, os.fdopen(open_new(tmp, exclusive=True), "wb") as f:
                for r0, r1, _, _, _ in sorted(entry.chunks):
                    blob = compress(values[r0:r1] if entry.batch_major else values)
                    chunks.append([r0, r1, f.tell(), len(blob), 0])
                    f.write(blob)
            entry.chunks, entry.predict, entry.level = chunks, None, 0
            if self._flusher is not None:
                self._flusher.submit(path)

    def keep_digest_of(self, tensor_name: str, record: Mapping[str, Any]) -> None:
        """Record a tensor that another capture kept by digest (its values in that capture's
        artifact, which this manifest's spec must name too): same digest, key, layout and stats."""
        self._check_open()
        if tensor_name in self._entries:
            raise ValueError(f"tensor {tensor_name!r} was already stored")
        entry = Entry(self._claim_filename(tensor_name, True), record["dtype"], np.dtype(record["stored_dtype"]),
                      tuple(record["shape"]), batch_major=bool(record["batch_major"]), stats=None, packed=True)
        entry.digest, entry.source_key, entry.known_stats = record["digest"], record["checkpoint_key"], record.get("stats")
        self._entries[tensor_name] = entry

    def _stored_values(self, entry: Entry) -> np.ndarray:
        """What a stored entry with a file holds (its owner's, for an alias)."""
        return self._decode(entry) if entry.packed else open_npy(self._file(entry), entry.shape, entry.stored)
