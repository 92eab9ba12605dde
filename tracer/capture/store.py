"""Writing capture directories: one side's tensors on disk, crash-safely.

A capture directory holds ``tensors/*.npy`` (one file per captured tensor, all examples' rows
in it) and ``manifest.json``. The manifest is written *last*, atomically, so its presence is
the only proof that a capture finished: a directory without it is an interrupted or running
capture and every reader (:class:`~tracer.capture.reader.Capture`, re-exported here) refuses
it. This module never imports TensorFlow, because captures are compared and rendered on
machines that may not have it.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import os
import re
import shutil
import socket
from bisect import bisect_right
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

import numpy as np

from ..errors import TftraceError
from ._format import (
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    RERUN,
    STRING,
    TENSORS,
    Unstorable,
    atomic_write,
    fsync,
    npy_header,
    open_npy,
    to_storage,
    widen,
    write_at,
)
from .reader import Capture

__all__ = ["Capture", "CaptureWriter", "safe_filename", "FORMAT", "FORMAT_VERSION"]

LOCK = ".lock"
_STATS_CHUNK = 1 << 20  # elements per chunk: stats never hold more than a few MB at once
_MAX_NAME = 120


# --------------------------------------------------------------------------- file names

_UNSAFE_RUN = re.compile(r"[^A-Za-z0-9._-]+")
_HASH_SUFFIX = re.compile(r"-[0-9a-f]{12,}$")
_WINDOWS_RESERVED = frozenset(
    ["con", "prn", "aux", "nul"] + [f"com{i}" for i in range(10)] + [f"lpt{i}" for i in range(10)]
)


def safe_filename(tensor_name: str, digest_chars: int = 12) -> str:
    """Return the ``.npy`` file name for a tensor: a readable, portable, unique name.

    Names that are already plain (lower-case ``[a-z0-9._-]``, no leading dot or dash, no ``..``)
    are kept. Anything else is sanitised and suffixed with ``-`` and a hash of the *full*
    original name, so two names that sanitise alike still differ; plain names never end in such
    a suffix (names that look like one are hashed too), so the mapping is injective, even on
    case-insensitive file systems (macOS, Windows), where ``Conv`` and ``conv`` would collide.
    """
    stem = _UNSAFE_RUN.sub("_", tensor_name)
    stem = re.sub(r"\.{2,}", "_", stem)
    stem = re.sub(r"^[.-]|\.$", "_", stem)
    plain = (
        stem == tensor_name
        and stem != ""
        and stem == stem.lower()
        and len(stem) <= _MAX_NAME
        and not _HASH_SUFFIX.search(stem)
        and stem.split(".")[0] not in _WINDOWS_RESERVED
    )
    if plain:
        return stem + ".npy"
    digest = hashlib.sha256(tensor_name.encode("utf-8", "surrogatepass")).hexdigest()[:digest_chars]
    return f"{stem[: _MAX_NAME - len(digest) - 1] or '_'}-{digest}.npy"


# --------------------------------------------------------------------------- stats


def _chunked_stats(stored: np.ndarray, dtype_name: str) -> dict[str, Any] | None:
    """min/max/mean over finite values (magnitudes for complex) plus NaN and inf counts.

    Read in chunks so a tensor larger than memory is fine. None for strings.
    """
    if dtype_name == STRING:
        return None
    flat = stored.reshape(-1)
    lo: Any = None
    hi: Any = None
    total, count, nan, inf = 0.0, 0, 0, 0
    for start in range(0, flat.size, _STATS_CHUNK):
        chunk = widen(np.asarray(flat[start : start + _STATS_CHUNK]), dtype_name)
        if chunk.dtype.kind in "fc":
            nan += int(np.isnan(chunk).sum())
            inf += int(np.isinf(chunk).sum())
            chunk = np.abs(chunk) if chunk.dtype.kind == "c" else chunk  # |z| may overflow: filter after
            chunk = chunk[np.isfinite(chunk)]
            cast: type = float
        else:
            chunk = chunk.astype(np.uint8) if chunk.dtype.kind == "b" else chunk
            cast = int
        if chunk.size:
            cmin, cmax = cast(chunk.min()), cast(chunk.max())
            lo = cmin if lo is None else min(lo, cmin)
            hi = cmax if hi is None else max(hi, cmax)
            total += float(chunk.sum(dtype=np.float64))
            count += int(chunk.size)
    mean = total / count if count else None
    mean = mean if mean is None or np.isfinite(mean) else None
    return {"min": lo, "max": hi, "mean": mean, "nan": nan, "inf": inf}


# --------------------------------------------------------------------------- a full disk

_P = ParamSpec("_P")
_R = TypeVar("_R")
_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


def _reports_full_disk(
    method: Callable[Concatenate[CaptureWriter, _P], _R],
) -> Callable[Concatenate[CaptureWriter, _P], _R]:
    """Turn "no space left" into the user's error, with how far the capture got.

    A full disk is the environment, not a bug: the capture stops with a TftraceError (exit 2);
    no manifest is written, so the partial directory stays incomplete and is refused later.
    """

    @functools.wraps(method)
    def wrapper(self: CaptureWriter, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(self, *args, **kwargs)
        except OSError as exc:
            if exc.errno not in _DISK_FULL:
                raise
            raise TftraceError(
                f"disk full at {self.bytes_written:,} bytes written to {self.path} ({exc.strerror})",
                f"free space on that file system or choose another --out; the partial capture in {self.path} has "
                "no manifest.json and is refused as incomplete (delete it, or re-run with --force)",
            ) from exc

    return wrapper


# --------------------------------------------------------------------------- writer


@dataclass
class _Entry:
    """What the writer knows about one stored tensor while the capture runs."""

    filename: str
    dtype_name: str
    stored: np.dtype
    shape: tuple[int, ...]
    batch_major: bool
    header_len: int = 0
    rows: list[list[int]] = field(default_factory=list)  # merged [start, end) intervals written


def _add_interval(intervals: list[list[int]], start: int, end: int) -> bool:
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


def _is_capture_leftover(entry: os.DirEntry[str]) -> bool:
    """True for what a capture writer itself leaves in its directory (so --force may delete it)."""
    name = entry.name
    if entry.is_symlink():
        return False
    if entry.is_dir():
        if name != TENSORS:
            return False
        with os.scandir(entry.path) as files:
            return all(f.is_file(follow_symlinks=False) and f.name.endswith((".npy", ".tmp")) for f in files)
    return name in (MANIFEST, LOCK) or name.endswith(".tmp")


class CaptureWriter:
    """Streams one side's tensors into a capture directory; ``finalize`` makes it readable.

    Batch-major tensors arrive batch by batch through :meth:`write_rows` into one preallocated
    ``.npy`` each; files are opened, written and closed per call because a model has thousands
    of tensors. Not thread-safe. Use as a context manager: leaving the block by an exception
    (or without ``finalize``) aborts, so no manifest is written and readers refuse the
    directory.
    """

    def __init__(self, out_dir: str | Path, *, force: bool = False) -> None:
        self.path = Path(out_dir)
        self._force = force
        self._entries: dict[str, _Entry] = {}
        self._uncaptured: dict[str, str] = {}
        self._used: set[str] = set()  # case-folded file names in use
        self._lock_token: bytes | None = None
        self._state = "open"
        self.bytes_written = 0  # data and headers so far (what a full disk message reports)
        self._prepare()

    # ---- directory and lock

    @_reports_full_disk
    def _prepare(self) -> None:
        root = self.path
        if root.exists() and not root.is_dir():
            raise TftraceError(f"{root} exists and is not a directory", "choose a directory path for the capture")
        root.mkdir(parents=True, exist_ok=True)
        existing = os.listdir(root)
        if existing and LOCK not in existing:  # a lock gets its own, more precise message below
            if not self._force:
                raise TftraceError(
                    f"{root} is not empty", "pass --force to replace the capture in it, or choose a new directory"
                )
            self._refuse_foreign()
        self._acquire_lock()
        try:
            if self._force:
                self._refuse_foreign()
                (root / MANIFEST).unlink(missing_ok=True)  # first: the directory is incomplete from now on
                for name in os.listdir(root):
                    if name == TENSORS:
                        shutil.rmtree(root / name)
                    elif name != LOCK:
                        os.unlink(root / name)
            (root / TENSORS).mkdir()
        except BaseException:
            self._release()  # the object is never returned, so nobody else could release it
            raise

    def _refuse_foreign(self) -> None:
        """--force replaces a capture, never anything else: a typo must not wipe a home directory."""
        with os.scandir(self.path) as entries:
            foreign = sorted(e.name for e in entries if not _is_capture_leftover(e))
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise TftraceError(
                f"{self.path} holds files that are not part of a capture ({shown}); "
                "--force only replaces capture directories and will not delete them",
                "choose an empty or new output directory",
            )

    def _acquire_lock(self) -> None:
        """Create ``.lock`` exclusively (O_EXCL), so two writers never share a directory."""
        lock = self.path / LOCK
        host = socket.gethostname()
        token = json.dumps({"pid": os.getpid(), "host": host, "nonce": os.urandom(8).hex()}).encode()
        for _attempt in range(3):
            try:
                fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                try:
                    held = lock.read_bytes()
                except FileNotFoundError:
                    continue  # its writer finished in between: try again
                pid, holder_host, dead = _lock_holder(held)
                who = "its writer" if pid is None else f"pid {pid}"
                who += "" if holder_host == host else f" on host {holder_host}"
                if not dead:
                    raise TftraceError(
                        f"another capture is writing to {self.path} ({who})",
                        f"wait for it to finish or write elsewhere; if no capture is running, delete {lock}",
                    ) from None
                if not self._force:
                    raise TftraceError(
                        f"a capture of {self.path} was interrupted ({who} is gone)", f"{RERUN} to replace it"
                    ) from None
                self._break_stale_lock(lock, held)
                continue
            with os.fdopen(fd, "wb") as f:
                f.write(token)
            self._lock_token = token
            return
        raise TftraceError(f"another capture is writing to {self.path}", "write elsewhere")

    def _break_stale_lock(self, lock: Path, held: bytes) -> None:
        """Move a dead writer's lock aside; put it back if another writer replaced it meanwhile."""
        aside = lock.with_name(f"{LOCK}.{os.urandom(6).hex()}.tmp")
        os.rename(lock, aside)
        if aside.read_bytes() != held:
            os.link(aside, lock)  # fails rather than overwrite if yet another lock appeared
            aside.unlink()
            raise TftraceError(f"another capture is writing to {self.path}", "write elsewhere")
        aside.unlink()

    def _release(self) -> None:
        lock = self.path / LOCK
        if self._lock_token is not None and lock.exists() and lock.read_bytes() == self._lock_token:
            lock.unlink()
        self._lock_token = None

    # ---- writing

    def _check_open(self) -> None:
        if self._state != "open":
            raise RuntimeError(f"the capture writer for {self.path} is already {self._state}")

    def _claim_filename(self, tensor_name: str) -> str:
        filename = safe_filename(tensor_name)
        if filename.casefold() in self._used:  # a 48-bit hash collision: use the full hash
            filename = safe_filename(tensor_name, digest_chars=64)
        self._used.add(filename.casefold())
        return filename

    @_reports_full_disk
    def write_rows(self, tensor_name: str, rows: np.ndarray, row_offset: int, total_rows: int) -> None:
        """Store rows ``[row_offset, row_offset + len(rows))`` of a batch-major tensor.

        A tensor whose trailing shape or dtype changes between batches (data-dependent shapes,
        e.g. detections per batch) is not an error of the caller but a property of the model:
        it is recorded as uncaptured with the reason, its file deleted, later batches ignored.
        Overlapping rows, a changed ``total_rows`` or rows past the end are caller bugs
        (ValueError). Rows never written make the tensor uncaptured at ``finalize``.
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
        entry = self._entries.get(tensor_name)
        if entry is None:
            entry = self._create_rows(tensor_name, dtype_name, stored.dtype, (total_rows, *stored.shape[1:]))
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
        if not _add_interval(entry.rows, row_offset, row_offset + len(rows)):
            raise ValueError(f"rows {row_offset}:{row_offset + len(rows)} of {tensor_name!r} were already written")
        row_bytes = int(np.prod(entry.shape[1:], dtype=object)) * entry.stored.itemsize
        write_at(self._file(entry), entry.header_len + row_offset * row_bytes, stored.astype(entry.stored, copy=False))
        self.bytes_written += len(rows) * row_bytes

    def _create_rows(self, name: str, dtype_name: str, stored: np.dtype, shape: tuple[int, ...]) -> _Entry:
        entry = _Entry(self._claim_filename(name), dtype_name, stored, shape, batch_major=True)
        self._write_empty(self._file(entry), entry)
        self._entries[name] = entry
        return entry

    def _write_empty(self, path: Path, entry: _Entry) -> None:
        """A header plus a sparse, zero-filled body: rows are written into it in place."""
        header = npy_header(entry.stored, entry.shape)
        with open(path, "wb") as f:
            f.write(header)
            self.bytes_written += len(header)
            f.truncate(len(header) + int(np.prod(entry.shape, dtype=object)) * entry.stored.itemsize)
        entry.header_len = len(header)

    def _widen_string_file(self, entry: _Entry, wider: np.dtype) -> None:
        old = open_npy(self._file(entry), entry.shape, entry.stored)
        tmp = self._file(entry).with_name(entry.filename + ".tmp")
        entry.stored = wider
        self._write_empty(tmp, entry)
        if old.size:
            write_at(tmp, entry.header_len, old.astype(wider))
        del old
        os.replace(tmp, self._file(entry))

    @_reports_full_disk
    def write_whole(self, tensor_name: str, array: np.ndarray) -> None:
        """Store a non-batch tensor (constant, weight) once, via a temp file and a rename."""
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
        entry = _Entry(self._claim_filename(tensor_name), dtype_name, stored.dtype, stored.shape, batch_major=False)
        path = self._file(entry)
        tmp = path.with_name(entry.filename + ".tmp")
        with open(tmp, "wb") as f:  # not np.save: its short writes on a full disk carry no errno
            f.write(npy_header(stored.dtype, stored.shape))
            f.write(np.ascontiguousarray(stored).reshape(-1).view(np.uint8).data)
            self.bytes_written += f.tell()
        os.replace(tmp, path)
        self._entries[tensor_name] = entry

    def mark_uncaptured(self, tensor_name: str, reason: str) -> None:
        """Record why a tensor is missing; deletes anything already stored for it.

        The first reason is kept (it is the informative one); later writes are ignored.
        """
        self._check_open()
        if not reason:
            raise ValueError("an uncaptured tensor needs a reason")
        entry = self._entries.pop(tensor_name, None)
        if entry is not None:
            self._file(entry).unlink(missing_ok=True)
            self._used.discard(entry.filename.casefold())
        self._uncaptured.setdefault(tensor_name, reason)

    @property
    def uncaptured(self) -> dict[str, str]:
        """A copy of tensor name -> reason for everything not captured so far."""
        return dict(self._uncaptured)

    def _file(self, entry: _Entry) -> Path:
        return self.path / TENSORS / entry.filename

    # ---- finishing

    @_reports_full_disk
    def finalize(self, manifest: Mapping[str, Any]) -> Path:
        """Write ``manifest.json`` (last, atomically) and release the lock; returns its path.

        Adds ``format``, ``format_version``, ``tensors`` (name -> record, in write order) and
        ``uncaptured`` (name -> reason) to a copy of ``manifest``, which must not hold those
        keys and must be plain JSON (checked before anything is changed, so a caller can fix
        it and call again).
        """
        self._check_open()
        reserved = {"format", "format_version", "tensors", "uncaptured"} & set(manifest)
        if reserved:
            raise ValueError(f"the manifest must not set {sorted(reserved)}: the writer fills them in")
        json.dumps(manifest, allow_nan=False)  # TypeError/ValueError now, not after the work
        for name, entry in list(self._entries.items()):
            covered = sum(end - start for start, end in entry.rows)
            if entry.batch_major and covered != entry.shape[0]:
                self.mark_uncaptured(
                    name, f"only {covered} of {entry.shape[0]} rows were written (a batch failed or was skipped)"
                )
        records = {name: self._record(entry) for name, entry in self._entries.items()}
        out = {**manifest, "format": FORMAT, "format_version": FORMAT_VERSION}
        out["tensors"], out["uncaptured"] = records, dict(self._uncaptured)
        fsync(self.path / TENSORS)
        target = self.path / MANIFEST
        text = json.dumps(out, indent=1, allow_nan=False)
        atomic_write(target, text)
        self.bytes_written += len(text.encode("utf-8"))
        self._release()
        self._state = "finalized"
        return target

    def _record(self, entry: _Entry) -> dict[str, Any]:
        """Summarise one stored tensor for the manifest; makes its bytes durable first."""
        path = self._file(entry)
        fsync(path)  # the manifest must never reach the disk before the data it describes
        stored = open_npy(path, entry.shape, entry.stored)
        return {
            "file": f"{TENSORS}/{entry.filename}",
            "dtype": entry.dtype_name,
            "stored_dtype": entry.stored.str,
            "shape": list(entry.shape),
            "size_bytes": int(stored.nbytes),
            "batch_major": entry.batch_major,
            "stats": _chunked_stats(stored, entry.dtype_name),
        }

    def abort(self) -> None:
        """Give up: release the lock, write no manifest (readers will refuse the directory)."""
        if self._state == "open":
            self._release()
            self._state = "aborted"

    def __enter__(self) -> CaptureWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.abort()  # after finalize this does nothing; otherwise the capture is incomplete


def _lock_holder(held: bytes) -> tuple[int | None, str, bool]:
    """(pid, host, is it certainly dead). An unreadable lock counts as dead: a live writer
    fills it in microseconds after creating it."""
    try:
        info = json.loads(held)
        pid, host = int(info["pid"]), str(info["host"])
    except (ValueError, KeyError, TypeError):
        return None, socket.gethostname(), True
    if host != socket.gethostname() or os.name == "nt":
        return pid, host, False  # cannot check another machine; on Windows os.kill(pid, 0) kills
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return pid, host, True
    except PermissionError:
        return pid, host, False
    return pid, host, False
