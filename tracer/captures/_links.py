"""Tensors stored once: a tensor whose bytes are another's (a variable and its ``/read``) is a
hard link to that one's file (or, kept by digest, shares its digest), and takes a private copy
the moment it stops matching. A mixin of :class:`~tracer.captures.store.CaptureWriter`, kept
apart so each module reads on its own. Never imports TensorFlow.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..safewrite import open_new, replacing
from ._entry import Entry
from ._flusher import Flusher
from ._jobs import FileJobs
from ._packed import compress

__all__ = ["LinkedFiles"]

_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


class LinkedFiles:
    """Shared-file methods of the capture writer (which sets these attributes)."""

    _entries: dict[str, Entry]
    _jobs: FileJobs
    _flusher: Flusher | None

    # and, from the writer and its other mixin: _file(entry) -> Path, _decode(entry) -> np.ndarray
    _file: Callable[[Entry], Path]
    _decode: Callable[[Entry], np.ndarray]

    def _root(self, name: str | None) -> str | None:
        """The stored tensor that owns ``name``'s bytes (itself, or what its file links to)."""
        entry = self._entries.get(name) if name is not None else None
        if entry is None:
            return None
        return name if entry.link_of is None else entry.link_of

    def _share(self, entry: Entry, same_as: str | None, span: tuple[int, int] | None) -> bool:
        """Make a new tensor's file a hard link to the file of ``same_as``'s owner, if that file
        already holds the bytes (whole, or rows ``span``); False when it must be written."""
        root = self._root(same_as)
        if root is None:
            return False
        owner = self._entries[root]
        if not entry.can_share(owner) or (span is not None and not owner.covers(*span)):
            return False
        if owner.source_key is not None:  # kept by digest: no file to link, the same values
            entry.link_of, entry.stats, entry.source_key = root, None, owner.source_key
            return True
        try:
            os.link(self._file(owner), self._file(entry))
        except OSError as exc:
            if exc.errno in _DISK_FULL:
                raise
            return False  # a file system without hard links (or too many): store a copy
        entry.header_len, entry.link_of, entry.stats, entry.level = owner.header_len, root, None, owner.level
        return True

    def _own_file(self, entry: Entry, span: tuple[int, int]) -> None:
        """Before writing rows ``span`` of its own into a linked file: give the tensor a private
        copy (packed: the rows it shared so far, decoded from the owner and stored plainly)."""
        if entry.link_of is None:
            return
        owner = self._entries[entry.link_of]
        self._jobs.wait(owner.filename)  # the shared bytes, complete
        path = self._file(entry)
        with replacing(path) as tmp:
            if entry.packed:
                values, entry.chunks = self._decode(owner), []
                with os.fdopen(open_new(tmp, exclusive=True), "wb") as dst:
                    for start, end in entry.rows:
                        for r0, r1 in ((start, min(end, span[0])), (max(start, span[1]), end)):
                            if r0 < r1:
                                blob = compress(values[r0:r1])
                                entry.chunks.append([r0, r1, dst.tell(), len(blob), 0])
                                dst.write(blob)
            else:
                with open(path, "rb") as src, os.fdopen(open_new(tmp, exclusive=True), "wb") as dst:
                    shutil.copyfileobj(src, dst)
        entry.link_of = None
        if self._flusher is not None:
            self._flusher.submit(path)

    def _orphan_links(self, gone: str, owner: Entry) -> None:
        """A tensor whose file others link to is dropped: the first of them owns the bytes now
        (with the chunk index or the digest that describes them)."""
        heir = None
        for name, entry in self._entries.items():
            if entry.link_of == gone:
                entry.link_of, heir = (None, name) if heir is None else (heir, heir)
                if entry.link_of is None:
                    entry.chunks, entry.predict, entry.digest = [list(c) for c in owner.chunks], owner.predict, owner.digest
                    entry.row_digests = dict(owner.row_digests)

