"""The capture writer's ``.npy`` files: strings, the tensors of an unpacked capture, the plain outputs
and loaded values.

A mixin of :class:`~tracer.captures.store.CaptureWriter`, beside :mod:`._packing` (its packed
files) and :mod:`._links` (its shared files), kept apart so each module reads on its own: the
writer decides what is stored where; here is how a ``.npy`` file is made. A file is created in
this thread with its header (so it can be linked to at once); its body or rows are written by a
job (:mod:`._jobs`), which then folds them into the tensor's statistics and hands the file to the
flusher. A tensor stored batch by batch gets a sparse zero-filled body first, its rows written in
place; a string tensor whose later rows are longer is rewritten wider. Never imports TensorFlow.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ..safewrite import open_new, replacing
from ._entry import Entry
from ._flusher import Flusher
from ._format import npy_header, open_npy, write_at
from ._jobs import FileJobs

__all__ = ["NpyWrites"]


class NpyWrites:
    """``.npy``-file methods of the capture writer (which sets these attributes)."""

    _jobs: FileJobs
    _flusher: Flusher | None
    _header_bytes: int  # written in the writer's thread; the rest by the jobs
    # and, from the writer: _file(entry) -> Path
    _file: Callable[[Entry], Path]

    def _write_empty(self, path: Path, entry: Entry) -> None:
        """A header plus a sparse, zero-filled body: rows are written into it in place."""
        header = npy_header(entry.stored, entry.shape)
        with os.fdopen(open_new(path, exclusive=True), "wb") as f:  # never through a planted link
            f.write(header)
            self._header_bytes += len(header)
            f.truncate(len(header) + int(np.prod(entry.shape, dtype=object)) * entry.stored.itemsize)
        entry.header_len = len(header)

    def _write_new(self, entry: Entry, stored: np.ndarray) -> None:
        """A new file holding the whole tensor: created here (so it can be linked to at once),
        its body written by a job (never seen by readers before the manifest names it)."""
        header = npy_header(entry.stored, entry.shape)
        f = os.fdopen(open_new(self._file(entry), exclusive=True), "wb")  # noqa: SIM115 - the job closes it
        try:
            f.write(header)
        except BaseException:
            f.close()
            raise
        self._header_bytes += len(header)
        entry.header_len = len(header)
        data = stored.astype(entry.stored, copy=False)
        self._jobs.submit(entry.filename, functools.partial(self._write_body, entry, f, data), data.nbytes)

    def _write_body(self, entry: Entry, f: BinaryIO, data: np.ndarray) -> int:
        """Job: the body of a new file, then its statistics and durability; returns the bytes."""
        with f:  # not np.save: its short writes on a full disk carry no errno
            f.write(np.ascontiguousarray(data).reshape(-1).view(np.uint8).data)
        self._written(entry, data)
        return data.nbytes

    def _write_at(self, entry: Entry, offset: int, data: np.ndarray) -> int:
        """Job: rows into their place in an existing file, then statistics and durability."""
        write_at(self._file(entry), offset, data)
        self._written(entry, data)
        return data.nbytes

    def _written(self, entry: Entry, data: np.ndarray) -> None:
        """In a job, after bytes reached a tensor's file: fold them into its stats, queue it for fsync."""
        if entry.stats is not None:
            entry.stats.add(data)
        if self._flusher is not None:
            self._flusher.submit(self._file(entry))

    def _widen_string_file(self, entry: Entry, wider: np.dtype) -> None:
        self._jobs.wait(entry.filename)
        old = open_npy(self._file(entry), entry.shape, entry.stored)
        entry.stored = wider
        with replacing(self._file(entry)) as tmp:
            self._write_empty(tmp, entry)
            if old.size:
                write_at(tmp, entry.header_len, old.astype(wider))
            del old
        if self._flusher is not None:
            self._flusher.submit(self._file(entry))
