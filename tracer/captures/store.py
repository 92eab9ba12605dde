"""Writing capture directories: one side's tensors on disk, crash-safely.

A capture directory holds ``tensors/*.npy`` (one file per captured tensor, all examples' rows
in it) and ``manifest.json``. The manifest is written *last*, atomically, after every file it
describes is durable, so its presence is the only proof that a capture finished: a directory
without it is an interrupted or running capture and every reader
(:class:`~tracer.captures.reader.Capture`, re-exported here) refuses it. A tensor whose bytes
are those of a tensor stored before it (a variable and its ``/read`` Identity) is stored
once: its file is a hard link to the other's, and its record says ``alias_of``.

Format version 2 packs numeric tensors (:mod:`._packed`): byte-shuffled zstd chunks, appended
as rows arrive, indexed by the record's ``encoding``; a chunk of a tensor that is an elementwise
function of captured tensors (BiasAdd, Relu, Add, an inference batch norm...) is stored as the
XOR of its bits with numpy's value of that function (mostly zeros). A writer given the op graph
(``graph``) and told that the artifact restored the variables (``artifact_values``) keeps only
a digest of each large variable's value (``digest``, ``values: "artifact"``): the artifact
holds those bytes already, and equal digests prove identity without reading them. Strings
stay ``.npy`` files. This module decides what is stored where and writes the manifest; how each
kind of file is made is its mixins': :mod:`._packing` (packed files), :mod:`._npy_files` (``.npy``
files), :mod:`._links` (hard links to a file stored before). It never imports TensorFlow, because
captures are compared and rendered on machines that may not have it.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from ..errors import TftraceError
from ..jsonvalues import jsonable
from ..safewrite import write_file
from ._directory import prepare_directory, release_lock, reports_full_disk
from ._entry import Entry, add_interval
from ._flusher import Flusher
from ._format import (
    APART,
    STRING,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    TENSORS,
    Unstorable,
    bitwise_equal,
    fsync,
    to_storage,
)
from ._jobs import FileJobs
from ._packed import CODEC, PACKED_SUFFIX, digest, predictor_for
from ._links import LinkedFiles
from ._npy_files import NpyWrites
from ._packing import PackedWrites
from ._names import safe_filename
from ._stats import Stats, file_stats
from .reader import Capture

__all__ = ["Capture", "CaptureWriter", "safe_filename", "FORMAT", "FORMAT_VERSION"]


# --------------------------------------------------------------------------- writer


class CaptureWriter(LinkedFiles, PackedWrites, NpyWrites):
    """Streams one side's tensors into a capture directory; ``finalize`` makes it readable.

    Batch-major tensors arrive batch by batch through :meth:`write_rows` into one ``.npy``
    each; files are opened, written and closed per call because a model has thousands of
    tensors. Their bytes are written, and their statistics taken, by background threads
    (:mod:`._jobs`), so an array handed over must not change until :meth:`sync` or
    ``finalize``; another thread makes each file durable as soon as it is written
    (``durable=False`` skips that: the capture then survives a killed process, not a power
    cut). Not thread-safe itself. Use as a context manager: leaving the block by an exception
    (or without ``finalize``) aborts, so no manifest is written and readers refuse the
    directory.
    """

    def __init__(self, out_dir: str | Path, *, force: bool = False, durable: bool = True, packed: bool = True,
                 graph: Mapping[str, Any] | None = None, artifact_values: bool = False) -> None:
        self.path = Path(out_dir)
        self._packed = packed
        self._artifact_values = artifact_values  # variables were restored from the artifact's checkpoint
        self._ops: dict[str, str] = {}  # op name -> op type (from ``graph``)
        self._predictors: dict[str, dict[str, Any]] = {}  # tensor -> its prediction (see _packed)
        self._consumers: dict[str, int] = {}  # tensor -> how many predictions read it
        self._cache: dict[str, list[Any]] = {}  # input tensor -> [span or None, stored values, reads left]
        for node in (graph or {}).get("nodes", []) if packed else []:
            self._ops[node["name"]] = node["op"]
            spec = predictor_for(node, 0)
            if spec is not None:
                self._predictors[f"{node['name']}:0"] = spec
                for source in spec["inputs"]:
                    self._consumers[source] = self._consumers.get(source, 0) + 1
        self._force = force
        self._entries: dict[str, Entry] = {}
        self._apart: dict[str, dict[str, Entry]] = {group: {} for group in APART}  # see write_plain_output
        self._uncaptured: dict[str, str] = {}
        self._used: set[str] = set()  # case-folded file names in use
        self._lock_token: bytes | None = None
        self._state = "open"
        self._header_bytes = 0  # written in this thread; the rest by the jobs
        self._jobs = FileJobs()  # its threads start with the first job
        self._prepare()
        self._flusher = Flusher() if durable else None

    @property
    def bytes_written(self) -> int:
        """Data and headers on disk so far (what a full disk message reports)."""
        return self._header_bytes + self._jobs.done_bytes

    # ---- directory and lock

    @reports_full_disk
    def _prepare(self) -> None:
        self._lock_token = prepare_directory(self.path, self._force)

    def _release(self) -> None:
        release_lock(self.path, self._lock_token)
        self._lock_token = None

    # ---- writing

    def _check_open(self) -> None:
        if self._state != "open":
            raise RuntimeError(f"the capture writer for {self.path} is already {self._state}")

    def _claim_filename(self, tensor_name: str, packed: bool = False) -> str:
        filename = safe_filename(tensor_name)
        if filename.casefold() in self._used:  # a 48-bit hash collision: use the full hash
            filename = safe_filename(tensor_name, digest_chars=64)
        self._used.add(filename.casefold())
        return filename[: -len(".npy")] + PACKED_SUFFIX if packed else filename

    def _new_entry(self, tensor_name: str, dtype_name: str, stored: np.ndarray, shape: tuple[int, ...],
                   batch_major: bool) -> Entry:
        packed = self._packed and dtype_name != STRING
        entry = Entry(self._claim_filename(tensor_name, packed), dtype_name, stored.dtype, shape,
                      batch_major=batch_major, stats=Stats(dtype_name), packed=packed)
        self._entries[tensor_name] = entry
        return entry

    @reports_full_disk
    def write_rows(
        self, tensor_name: str, rows: np.ndarray, row_offset: int, total_rows: int, *, same_as: str | None = None
    ) -> None:
        """Store rows ``[row_offset, row_offset + len(rows))`` of a batch-major tensor.

        ``same_as`` names a tensor whose rows ``[row_offset, ...)``, already stored, hold the
        very same bytes (the caller compared them): the rows are then not written again, the
        two files being one (see :meth:`_share`). A tensor whose trailing shape or dtype
        changes between batches (data-dependent shapes, e.g. detections per batch) is not an
        error of the caller but a property of the model: it is recorded as uncaptured with the
        reason, its file deleted, later batches ignored. Overlapping rows, a changed
        ``total_rows`` or rows past the end are caller bugs (ValueError). Rows never written
        make the tensor uncaptured at ``finalize``.
        """
        self._check_open()
        if tensor_name in self._uncaptured:
            return
        rows = np.asarray(rows)
        if rows.ndim == 0 or row_offset < 0 or row_offset + len(rows) > total_rows:
            raise ValueError(f"rows {row_offset}+{rows.shape} do not fit a {total_rows}-row tensor {tensor_name!r}")
        try:
            dtype_name, stored = to_storage(rows)
        except Unstorable as exc:
            self.mark_uncaptured(tensor_name, str(exc))
            return
        span = (row_offset, row_offset + len(rows))
        self._keep_for_predictions(tensor_name, span, stored)
        entry = self._entries.get(tensor_name)
        if entry is None:
            entry = self._new_entry(tensor_name, dtype_name, stored, (total_rows, *stored.shape[1:]), True)
            if self._share(entry, same_as, span):
                add_interval(entry.rows, *span)
                return
            if entry.packed:
                self._start_packed(tensor_name, entry)
            elif span == (0, total_rows):  # all rows at once: one plain write, nothing preallocated
                self._write_new(entry, stored)
                add_interval(entry.rows, *span)
                return
            else:
                self._write_empty(self._file(entry), entry)
        elif not entry.batch_major or entry.shape[0] != total_rows:
            raise ValueError(f"tensor {tensor_name!r} was stored as {entry.shape}, not {total_rows} rows")
        elif entry.dtype_name != dtype_name or entry.shape[1:] != stored.shape[1:]:
            what = "dtype" if entry.dtype_name != dtype_name else "shape"
            before = (entry.dtype_name, entry.shape[1:]) if what == "dtype" else entry.shape[1:]
            now = (dtype_name, stored.shape[1:]) if what == "dtype" else stored.shape[1:]
            self.mark_uncaptured(tensor_name, f"{what} varies between batches: rows of {before} then {now}")
            return
        elif stored.dtype.itemsize > entry.stored.itemsize:  # longer strings than any before
            self._widen_string_file(entry, stored.dtype)
        if not add_interval(entry.rows, *span):
            raise ValueError(f"rows {span[0]}:{span[1]} of {tensor_name!r} were already written")
        if entry.link_of is not None and self._root(same_as) == entry.link_of and self._entries[entry.link_of].covers(*span):
            return  # the rows are in the shared file already
        self._own_file(entry, span)
        data = stored.astype(entry.stored, copy=False)
        if entry.packed:
            inputs = self._inputs_for(entry.predict, span) if entry.predict is not None else None
            self._jobs.submit(entry.filename, functools.partial(self._write_chunks, entry, span, data, inputs),
                              data.nbytes)
            return
        row_bytes = int(np.prod(entry.shape[1:], dtype=object)) * entry.stored.itemsize
        offset = entry.header_len + row_offset * row_bytes
        self._jobs.submit(entry.filename, functools.partial(self._write_at, entry, offset, data), data.nbytes)

    @reports_full_disk
    def write_whole(self, tensor_name: str, array: np.ndarray, *, same_as: str | None = None) -> None:
        """Store a non-batch tensor (constant, weight) once.

        ``same_as`` names an already stored tensor holding the very same bytes (the caller
        compared them): this one's file is then a hard link to that one's (see :meth:`_share`).
        """
        self._check_open()
        if tensor_name in self._uncaptured:
            return
        if tensor_name in self._entries:
            raise ValueError(f"tensor {tensor_name!r} was already stored")
        arr = np.asarray(array)
        try:
            dtype_name, stored = to_storage(arr)
        except Unstorable as exc:
            self.mark_uncaptured(tensor_name, str(exc))
            return
        stored = np.require(stored, requirements="C")  # never Fortran order: the reader insists on C
        self._keep_for_predictions(tensor_name, None, stored)
        entry = self._new_entry(tensor_name, dtype_name, stored, stored.shape, False)
        if self._share(entry, same_as, None):
            return
        if entry.packed and self._keeps_digest(tensor_name, stored):
            entry.source_key = tensor_name.rsplit(":", 1)[0]
            self._jobs.submit(entry.filename, functools.partial(self._take_digest, entry, stored), stored.nbytes)
        elif entry.packed:
            self._start_packed(tensor_name, entry)
            self._jobs.submit(entry.filename, functools.partial(self._write_chunks, entry, None, stored, None),
                              stored.nbytes)
        else:
            self._write_new(entry, stored)

    def write_plain_output(self, key: str, array: np.ndarray) -> None:
        """Store a signature output as the *plain* run computed it (signature outputs fetched,
        nothing else), under its signature key.

        Fetching every tensor can change what runs (a fetched conv is not fused), so the
        instrumented value of an output is not always what production computes; this one is.
        Kept apart from the graph's tensors (the manifest's ``plain_outputs``), in ``tensors/``.
        """
        self._write_apart("plain_outputs", key, array)

    def write_loaded_value(self, variable: str, array: np.ndarray) -> None:
        """Store variable op ``variable``'s value as the model loaded it, read before any run wrote
        it (the manifest's ``loaded_values``): the weight the artifact holds, where the captured reads
        hold what the runs left (a training graph's moving averages)."""
        self._write_apart("loaded_values", variable, array)

    @reports_full_disk
    def _write_apart(self, group: str, key: str, array: np.ndarray) -> None:
        self._check_open()
        entries = self._apart[group]
        if key in entries:
            raise ValueError(f"the {APART[group]} {key!r} was already stored")
        try:
            dtype_name, stored = to_storage(np.asarray(array))
        except Unstorable:
            return  # not storable (e.g. a resource): the reader goes without it
        stored = np.require(stored, requirements="C")
        entry = Entry(self._claim_filename(f"{APART[group]}/{key}"), dtype_name, stored.dtype, stored.shape,
                      batch_major=False, stats=Stats(dtype_name))
        entries[key] = entry
        self._write_new(entry, stored)

    @reports_full_disk
    def mark_uncaptured(self, tensor_name: str, reason: str) -> None:
        """Record why a tensor is missing; deletes anything already stored for it.

        The first reason is kept (it is the informative one); later writes are ignored.
        """
        self._check_open()
        if not reason:
            raise ValueError("an uncaptured tensor needs a reason")
        self._drop_consumer(tensor_name)
        self._cache.pop(tensor_name, None)
        entry = self._entries.get(tensor_name)
        if entry is not None:
            self._unpredict_dependents(tensor_name)  # while its file is still there to decode them
            self._entries.pop(tensor_name)
            self._jobs.wait(entry.filename)  # no job may write it once it is gone
            self._file(entry).unlink(missing_ok=True)
            self._used.discard(entry.filename.casefold())
            self._used.discard((entry.filename[: -len(PACKED_SUFFIX)] + ".npy").casefold())
            self._orphan_links(tensor_name, entry)
        self._uncaptured.setdefault(tensor_name, reason)

    @property
    def uncaptured(self) -> dict[str, str]:
        """A copy of tensor name -> reason for everything not captured so far."""
        return dict(self._uncaptured)

    @reports_full_disk
    def stored_equals(self, tensor_name: str, array: np.ndarray) -> bool:
        """Whether a stored whole tensor holds exactly ``array``: shape, dtype and bytes, so a NaN
        equals itself and -0.0 differs from 0.0 (the same test as a pass-through op's)."""
        entry = self._entries.get(tensor_name)
        if entry is None or entry.batch_major:
            return False
        owner = self._entries[self._root(tensor_name) or tensor_name]
        self._jobs.wait(owner.filename)  # the bytes, complete
        try:
            dtype_name, stored = to_storage(np.asarray(array))
        except Unstorable:
            return False
        if dtype_name != entry.dtype_name or stored.shape != entry.shape or stored.dtype != entry.stored:
            return False
        return bitwise_equal(self._stored_values(owner), stored) if owner.digest is None else digest(stored) == owner.digest

    def _file(self, entry: Entry) -> Path:
        return self.path / TENSORS / entry.filename

    # ---- finishing

    @reports_full_disk
    def sync(self) -> float:
        """Wait until every byte handed over so far is written and durable; returns the seconds waited.

        ``finalize`` does it too; calling it first lets a caller time it for its manifest.
        """
        self._check_open()
        started = time.perf_counter()
        self._jobs.wait_all()
        if self._flusher is not None:
            self._flusher.wait()
        return time.perf_counter() - started

    @reports_full_disk
    def finalize(self, manifest: Mapping[str, Any]) -> Path:
        """Write ``manifest.json`` (last, atomically) and release the lock; returns its path.

        Adds ``format``, ``format_version``, ``tensors`` (name -> record, in write order),
        ``uncaptured`` (name -> reason) and each group of :data:`APART` (key -> record, when
        any were stored) to a copy of ``manifest``, which must not hold those
        keys and must be plain JSON (checked before anything is changed, so a caller can fix
        it and call again); non-finite floats in it are written as ``"inf"``/``"-inf"``/``"nan"``.
        """
        self._check_open()
        reserved = {"format", "format_version", "tensors", "uncaptured", *APART} & set(manifest)
        if reserved:
            raise ValueError(f"the manifest must not set {sorted(reserved)}: the writer fills them in")
        manifest = jsonable(manifest, numpy=False)  # a model's NaN/inf are data: strict JSON strings (tracer.jsonvalues)
        json.dumps(manifest, allow_nan=False)  # TypeError now, not after the work
        self.sync()  # every job done (statistics complete), every file durable: before the manifest
        for name, entry in list(self._entries.items()):
            covered = sum(end - start for start, end in entry.rows)
            if entry.batch_major and covered != entry.shape[0]:
                self.mark_uncaptured(
                    name, f"only {covered} of {entry.shape[0]} rows were written (a batch failed or was skipped)"
                )
        records: dict[str, dict[str, Any]] = {}
        for name, entry in self._entries.items():
            records[name] = self._record(entry, records)
        out = {**manifest, "format": FORMAT, "format_version": FORMAT_VERSION}
        out["tensors"], out["uncaptured"] = records, dict(self._uncaptured)
        for group, entries in self._apart.items():
            if entries:
                out[group] = {key: self._record(entry, {}) for key, entry in entries.items()}
        if self._flusher is not None:  # the data is durable (sync above); so must be the names of its files
            fsync(self.path / TENSORS)
        target = self.path / MANIFEST
        text = json.dumps(out, indent=1, allow_nan=False)
        write_file(target, text, durable=True)  # temp file + fsync + rename: the old state or the whole file
        self._header_bytes += len(text.encode("utf-8"))
        self._stop()
        self._state = "finalized"
        return target

    def _record(self, entry: Entry, earlier: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """Summarise one stored tensor for the manifest (``earlier``: the records before it)."""
        if entry.link_of is not None:
            stats = earlier[entry.link_of]["stats"]  # the same bytes: the same statistics
        elif entry.stats is not None:
            stats = entry.stats.to_json()
        elif entry.known_stats is not None or entry.source_key is not None:  # kept by digest in another capture
            stats = entry.known_stats
        else:  # bytes it shared before it took a private copy were never seen here
            stats = file_stats(self._stored_values(entry), entry.dtype_name)
        record: dict[str, Any] = {
            "file": f"{TENSORS}/{entry.filename}",
            "dtype": entry.dtype_name,
            "stored_dtype": entry.stored.str,
            "shape": list(entry.shape),
            "size_bytes": int(np.prod(entry.shape, dtype=object)) * entry.stored.itemsize,
            "batch_major": entry.batch_major,
            "stats": stats,
        }
        if entry.link_of is not None:
            record["alias_of"] = entry.link_of
        if entry.source_key is not None:  # the artifact holds the values: a digest, no file
            del record["file"]
            owner = self._entries[entry.link_of] if entry.link_of is not None else entry
            record.update(values="artifact", digest=owner.digest, checkpoint_key=owner.source_key)
        elif entry.packed and entry.link_of is None:
            record["encoding"] = {"codec": CODEC, "shuffle": True, "chunks": sorted(entry.chunks)}
            if entry.predict is not None and any(c[4] for c in entry.chunks):
                record["encoding"]["predict"] = entry.predict
            found = self.rows_digest(entry)
            if found is not None:  # equal values_digest: bitwise identical tensors, compared without a read
                record["values_digest"] = found
        elif entry.packed and "values_digest" in earlier.get(entry.link_of, {}):
            record["values_digest"] = earlier[entry.link_of]["values_digest"]
        return record

    def _stop(self) -> None:
        self._jobs.close()
        if self._flusher is not None:
            self._flusher.stop()
        self._release()

    def abort(self) -> None:
        """Give up: release the lock, write no manifest (readers will refuse the directory)."""
        if self._state == "open":
            self._stop()
            self._state = "aborted"

    def __enter__(self) -> CaptureWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.abort()  # after finalize this does nothing; otherwise the capture is incomplete
