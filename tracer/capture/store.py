"""Capture directories: one side's tensors on disk, written crash-safely, read lazily.

A capture directory holds ``tensors/*.npy`` (one file per captured tensor, all examples' rows
in it) and ``manifest.json``. The manifest is written *last*, atomically, so its presence is
the only proof that a capture finished: a directory without it is an interrupted or running
capture and every reader refuses it. This module never imports TensorFlow, because captures
are compared and rendered on machines that may not have it.

Capture directories can come from elsewhere (a colleague, a CI artifact), so the reader treats
the manifest as untrusted: file paths must stay inside ``tensors/``, shapes and dtypes must be
sane and agree with each ``.npy`` header before anything is allocated or memory-mapped.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath
from types import TracebackType
from typing import Any

import numpy as np

from ..errors import TftraceError

__all__ = ["Capture", "CaptureWriter", "safe_filename", "FORMAT", "FORMAT_VERSION"]

FORMAT = "tftrace-capture"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
TENSORS = "tensors"
LOCK = ".lock"
MAX_TENSOR_BYTES = 2**40  # a record declaring more is damaged or hostile, not a real tensor
STRING = "string"
_STATS_CHUNK = 1 << 20  # elements per chunk: stats never hold more than a few MB at once
_MAX_NAME = 120
_RERUN = "re-run the capture with --force"

# Plain numpy dtypes, stored as they are.
_NATIVE = frozenset(
    "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 "
    "float16 float32 float64 complex64 complex128".split()
)
# ml_dtypes types that TensorFlow hands out: stored as the same-width unsigned int, because a
# reader may not have ml_dtypes; read back widened to a dtype every numpy has, exactly.
_EXTENDED: dict[str, tuple[str, str]] = {
    "bfloat16": ("u2", "float32"),
    "float8_e4m3fn": ("u1", "float32"),
    "float8_e4m3fnuz": ("u1", "float32"),
    "float8_e4m3b11fnuz": ("u1", "float32"),
    "float8_e5m2": ("u1", "float32"),
    "float8_e5m2fnuz": ("u1", "float32"),
    "int4": ("u1", "int8"),
    "uint4": ("u1", "uint8"),
}
_STORED_DTYPE = re.compile(r"[<>|=]([biufcS])([0-9]{1,6})")


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


# --------------------------------------------------------------------------- dtypes and stats


class _Unstorable(Exception):
    """Why an array cannot be stored; the writer records it as uncaptured instead."""


def _to_storage(arr: np.ndarray) -> tuple[str, np.ndarray]:
    """Return the logical dtype name and the array as it is written to disk."""
    name = arr.dtype.name
    if name in _NATIVE:
        return name, arr
    if name in _EXTENDED:
        return name, arr.view(_EXTENDED[name][0])
    if arr.dtype.kind in "SUO":
        return STRING, _as_fixed_bytes(arr)
    raise _Unstorable(f"dtype {name} cannot be stored in a capture")


def _as_fixed_bytes(arr: np.ndarray) -> np.ndarray:
    """Strings as fixed-width ``S`` (mmap-able, no pickle); refuse what that would corrupt."""
    if arr.dtype.kind == "S":
        return arr
    if arr.dtype.kind == "U":
        return np.char.encode(arr, "utf-8")
    values = arr.ravel().tolist()
    if not all(isinstance(v, bytes) for v in values):
        kinds = sorted({type(v).__name__ for v in values if not isinstance(v, bytes)})
        raise _Unstorable(f"object tensor holding {', '.join(kinds)} values cannot be stored")
    if any(v.endswith(b"\0") for v in values):
        raise _Unstorable("a string value ends in a NUL byte, which fixed-width storage drops")
    return np.array(values, dtype="S").reshape(arr.shape) if values else np.zeros(arr.shape, "S1")


def _widen(stored: np.ndarray, dtype_name: str) -> np.ndarray:
    """Turn stored bits back into numbers; bfloat16 -> float32 is exact (a 16-bit shift)."""
    if dtype_name == "bfloat16":
        return (stored.astype(np.uint32) << 16).view(np.float32)
    if dtype_name in _EXTENDED:
        try:
            import ml_dtypes  # noqa: PLC0415 - only needed for rare float8/int4 captures
        except ImportError as exc:
            raise TftraceError(
                f"reading a {dtype_name} tensor needs the ml_dtypes package", "pip install ml_dtypes"
            ) from exc
        return stored.view(getattr(ml_dtypes, dtype_name)).astype(_EXTENDED[dtype_name][1])
    return stored


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
        chunk = _widen(np.asarray(flat[start : start + _STATS_CHUNK]), dtype_name)
        if chunk.dtype.kind in "fc":
            nan += int(np.isnan(chunk).sum())
            inf += int(np.isinf(chunk).sum())
            chunk = chunk[np.isfinite(chunk)]
            chunk = np.abs(chunk) if chunk.dtype.kind == "c" else chunk
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


# --------------------------------------------------------------------------- .npy files


def _npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    import io  # noqa: PLC0415 - tiny and local

    buf = io.BytesIO()
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(buf, header)
    return buf.getvalue()


def _write_at(path: Path, offset: int, arr: np.ndarray) -> None:
    """Write an array's bytes into an existing file at ``offset`` (open, write, close)."""
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(np.ascontiguousarray(arr).reshape(-1).view(np.uint8).data)


def _open_npy(path: Path, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Memory-map a ``.npy`` read-only after checking its header agrees with what we expect.

    The check comes first so a hostile or truncated file can never make us allocate or map
    something other than the (already bounded) declared shape.
    """
    fmt = np.lib.format
    with open(path, "rb") as f:
        try:
            version = fmt.read_magic(f)
            if version == (1, 0):
                hshape, fortran, hdtype = fmt.read_array_header_1_0(f)
            elif version == (2, 0):
                hshape, fortran, hdtype = fmt.read_array_header_2_0(f)
            else:
                raise ValueError(f"unsupported .npy version {version}")
        except ValueError as exc:
            raise _damaged(path.parent.parent, f"{path.name} is not a valid .npy file ({exc})") from exc
        offset, size = f.tell(), os.fstat(f.fileno()).st_size
    nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if tuple(hshape) != shape or fortran or hdtype != dtype or size - offset != nbytes:
        raise _damaged(
            path.parent.parent,
            f"{path.name} holds {hdtype} {tuple(hshape)} in {size - offset} bytes but the manifest "
            f"declares {dtype} {shape} in {nbytes} bytes",
        )
    if nbytes == 0:
        return np.zeros(shape, dtype)
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape)


def _fsync(path: Path) -> None:
    """Make a file's (or a directory's entries') bytes durable; directories only where POSIX allows."""
    if path.is_dir() and not hasattr(os, "O_DIRECTORY"):
        return
    fd = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if path.is_dir() else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _atomic_write(path: Path, text: str) -> None:
    """Write via a temp file + fsync + rename: readers see the old state or the whole new file."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync(path.parent)


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
        return name == TENSORS and all(
            f.is_file(follow_symlinks=False) and f.name.endswith((".npy", ".tmp"))
            for f in os.scandir(entry.path)
        )
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
        self._used: dict[str, str] = {}  # case-folded file name -> tensor name
        self._lock_token: bytes | None = None
        self._state = "open"
        self._prepare()

    # ---- directory and lock

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
                for entry in os.scandir(root):
                    if entry.name == TENSORS:
                        shutil.rmtree(entry.path)
                    elif entry.name != LOCK:
                        os.unlink(entry.path)
            (root / TENSORS).mkdir()
        except BaseException:
            self._release()  # the object is never returned, so nobody else could release it
            raise

    def _refuse_foreign(self) -> None:
        """--force replaces a capture, never anything else: a typo must not wipe a home directory."""
        foreign = sorted(e.name for e in os.scandir(self.path) if not _is_capture_leftover(e))
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise TftraceError(
                f"{self.path} holds files that are not part of a capture ({shown}); "
                "--force only replaces capture directories and will not delete them",
                "choose an empty or new output directory",
            )

    def _acquire_lock(self) -> None:
        lock = self.path / LOCK
        token = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "nonce": os.urandom(8).hex()})
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            held = lock.read_bytes()
            pid, host, dead = _lock_holder(held)
            who = f"pid {pid}" + ("" if host == socket.gethostname() else f" on host {host}")
            if not dead:
                raise TftraceError(
                    f"another capture is writing to {self.path} ({who})",
                    f"wait for it to finish or write elsewhere; if no capture is running, delete {lock}",
                ) from None
            if not self._force:
                raise TftraceError(
                    f"a capture of {self.path} was interrupted ({who} is gone)", f"{_RERUN} to replace it"
                ) from None
            self._break_stale_lock(lock, held)
            try:
                fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                raise TftraceError(f"another capture is writing to {self.path}", "write elsewhere") from None
        with os.fdopen(fd, "wb") as f:
            f.write(token.encode())
        self._lock_token = token.encode()

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
        self._used[filename.casefold()] = tensor_name
        return filename

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
            dtype_name, stored = _to_storage(rows)
        except _Unstorable as exc:
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
        _write_at(self._file(entry), entry.header_len + row_offset * row_bytes, stored.astype(entry.stored, copy=False))

    def _create_rows(self, name: str, dtype_name: str, stored: np.dtype, shape: tuple[int, ...]) -> _Entry:
        entry = _Entry(self._claim_filename(name), dtype_name, stored, shape, batch_major=True)
        self._write_empty(self._file(entry), entry)
        self._entries[name] = entry
        return entry

    def _write_empty(self, path: Path, entry: _Entry) -> None:
        """A header plus a sparse, zero-filled body: rows are written into it in place."""
        header = _npy_header(entry.stored, entry.shape)
        with open(path, "wb") as f:
            f.write(header)
            f.truncate(len(header) + int(np.prod(entry.shape, dtype=object)) * entry.stored.itemsize)
        entry.header_len = len(header)

    def _widen_string_file(self, entry: _Entry, wider: np.dtype) -> None:
        old = _open_npy(self._file(entry), entry.shape, entry.stored)
        tmp = self._file(entry).with_name(entry.filename + ".tmp")
        entry.stored = wider
        self._write_empty(tmp, entry)
        if old.size:
            _write_at(tmp, entry.header_len, old.astype(wider))
        del old
        os.replace(tmp, self._file(entry))

    def write_whole(self, tensor_name: str, array: np.ndarray) -> None:
        """Store a non-batch tensor (constant, weight) once, via a temp file and a rename."""
        self._check_open()
        if tensor_name in self._uncaptured:
            return
        if tensor_name in self._entries:
            raise ValueError(f"tensor {tensor_name!r} was already stored")
        arr = np.asarray(array)
        try:
            dtype_name, stored = _to_storage(arr)
        except _Unstorable as exc:
            self.mark_uncaptured(tensor_name, str(exc))
            return
        stored = np.require(stored, requirements="C")  # never Fortran order: the reader insists on C
        entry = _Entry(self._claim_filename(tensor_name), dtype_name, stored.dtype, stored.shape, batch_major=False)
        path = self._file(entry)
        tmp = path.with_name(entry.filename + ".tmp")
        with open(tmp, "wb") as f:
            np.save(f, stored, allow_pickle=False)
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
            del self._used[entry.filename.casefold()]
        self._uncaptured.setdefault(tensor_name, reason)

    @property
    def uncaptured(self) -> dict[str, str]:
        """A copy of tensor name -> reason for everything not captured so far."""
        return dict(self._uncaptured)

    def _file(self, entry: _Entry) -> Path:
        return self.path / TENSORS / entry.filename

    # ---- finishing

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
        _fsync(self.path / TENSORS)
        target = self.path / MANIFEST
        _atomic_write(target, json.dumps(out, indent=1, allow_nan=False))
        self._release()
        self._state = "finalized"
        return target

    def _record(self, entry: _Entry) -> dict[str, Any]:
        """Summarise one stored tensor for the manifest; makes its bytes durable first."""
        path = self._file(entry)
        _fsync(path)  # the manifest must never reach the disk before the data it describes
        stored = _open_npy(path, entry.shape, entry.stored)
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


# --------------------------------------------------------------------------- reader


def _damaged(root: Path, detail: str) -> TftraceError:
    return TftraceError(
        f"damaged capture at {root}: {detail}", f"{_RERUN}; capture directories are not meant to be edited"
    )


class Capture:
    """A finished capture directory, validated on open; tensors are memory-mapped on request."""

    def __init__(self, path: Path, manifest: dict[str, Any], files: dict[str, Path]) -> None:
        self.path = path
        self.manifest = manifest
        self._files = files

    @classmethod
    def open(cls, path: str | Path) -> Capture:
        """Open and validate a capture directory; refuses incomplete or damaged ones."""
        root = Path(path)
        if not root.exists():
            raise TftraceError(f"no capture at {root}: the path does not exist", "check the path")
        if not root.is_dir():
            raise TftraceError(f"{root} is a file, not a capture directory", "pass the capture's directory")
        manifest_path = root / MANIFEST
        if not manifest_path.is_file():
            raise TftraceError(
                f"incomplete capture at {root}: {MANIFEST} is missing — the capture was interrupted, "
                "crashed or is still running",
                _RERUN,
            )
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"), parse_constant=_reject_constant)
        except (ValueError, RecursionError) as exc:
            raise _damaged(root, f"{MANIFEST} is not valid JSON ({exc})") from exc
        files = _validate_manifest(root, manifest)
        return cls(root, manifest, files)

    @property
    def spec(self) -> dict[str, Any]:
        """The run spec of this side ({} for manifests that predate it)."""
        return self.manifest.get("spec", {})

    @property
    def environment(self) -> dict[str, Any]:
        return self.manifest.get("environment", {})

    @property
    def tensor_names(self) -> list[str]:
        """Captured tensor names in write order (the worker writes in topological order)."""
        return list(self.manifest["tensors"])

    @property
    def uncaptured(self) -> dict[str, str]:
        return dict(self.manifest["uncaptured"])

    def has(self, name: str) -> bool:
        return name in self.manifest["tensors"]

    def record(self, name: str) -> dict[str, Any]:
        """The manifest record of a captured tensor (file, dtype, shape, stats...)."""
        self._require(name)
        return self.manifest["tensors"][name]

    def tensor(self, name: str) -> np.ndarray:
        """The tensor's values, memory-mapped read-only where possible.

        bfloat16 and the other ml_dtypes types come back widened (bfloat16 -> float32 exactly),
        so callers only ever see plain numpy dtypes; strings come back as a bytes (``S``) array.
        """
        record = self.record(name)
        stored = _open_npy(self._files[name], tuple(record["shape"]), np.dtype(record["stored_dtype"]))
        return _widen(stored, record["dtype"])

    def _require(self, name: str) -> None:
        if name in self.manifest["tensors"]:
            return
        reason = self.manifest["uncaptured"].get(name)
        if reason is not None:
            raise TftraceError(f"tensor {name!r} was not captured in {self.path}: {reason}", "compare another tensor")
        raise TftraceError(f"no tensor {name!r} in the capture at {self.path}", "list names with Capture.tensor_names")

    def __repr__(self) -> str:
        return f"Capture({str(self.path)!r}, {len(self.manifest['tensors'])} tensors)"


def _reject_constant(token: str) -> Any:
    raise ValueError(f"{token} is not JSON")


def _validate_manifest(root: Path, manifest: Any) -> dict[str, Path]:
    """Check everything a reader relies on; returns tensor name -> resolved file path."""
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise _damaged(root, f"{MANIFEST} is not a tftrace capture manifest (no \"format\": \"{FORMAT}\")")
    version = manifest.get("format_version")
    if type(version) is not int or version < 1:
        raise _damaged(root, f"format_version {version!r} is not a positive integer")
    if version > FORMAT_VERSION:
        raise TftraceError(
            f"the capture at {root} was written by a newer tftrace (format version {version}; "
            f"this one reads up to {FORMAT_VERSION})",
            "upgrade tftrace: pip install -U tftrace",
        )
    for key in ("tensors", "uncaptured", "spec", "environment"):
        if not isinstance(manifest.get(key, {}), dict):
            raise _damaged(root, f'"{key}" is not a JSON object')
    for key in ("tensors", "uncaptured"):
        manifest.setdefault(key, {})
    if not all(isinstance(r, str) for r in manifest["uncaptured"].values()):
        raise _damaged(root, "an uncaptured reason is not a string")
    tensors_dir = root.resolve() / TENSORS
    return {name: _validate_record(root, tensors_dir, name, rec) for name, rec in manifest["tensors"].items()}


def _validate_record(root: Path, tensors_dir: Path, name: str, rec: Any) -> Path:
    def bad(detail: str) -> TftraceError:
        return _damaged(root, f"tensor {name!r}: {detail}")

    if not isinstance(rec, dict):
        raise bad("its record is not a JSON object")
    file = rec.get("file")
    if not isinstance(file, str):
        raise bad("its record has no file path")
    posix = PurePosixPath(file)
    if posix.is_absolute() or PureWindowsPath(file).is_absolute() or PureWindowsPath(file).drive:
        raise bad(f"file path {file!r} is absolute")
    if ".." in posix.parts or "\\" in file:
        raise bad(f"file path {file!r} contains '..' or a backslash")
    if len(posix.parts) != 2 or posix.parts[0] != TENSORS or not posix.name.endswith(".npy"):
        raise bad(f"file path {file!r} is not {TENSORS}/<name>.npy")
    dtype_name, stored = rec.get("dtype"), rec.get("stored_dtype")
    if dtype_name not in _NATIVE and dtype_name not in _EXTENDED and dtype_name != STRING:
        raise bad(f"unknown dtype {dtype_name!r}")
    match = _STORED_DTYPE.fullmatch(stored) if isinstance(stored, str) else None
    if match is None or not _storage_matches(dtype_name, match[1], int(match[2])):
        raise bad(f"stored dtype {stored!r} does not hold {dtype_name}")
    shape = rec.get("shape")
    if not isinstance(shape, list) or len(shape) > 32 or not all(type(d) is int and d >= 0 for d in shape):
        raise bad(f"shape {shape!r} is not a list of at most 32 non-negative integers")
    declared = int(np.prod(shape, dtype=object)) * int(match[2])
    if declared > MAX_TENSOR_BYTES:
        raise bad(f"shape {shape} declares {declared} bytes, more than the {MAX_TENSOR_BYTES}-byte limit")
    if rec.get("size_bytes") != declared:
        raise bad(f"size_bytes {rec.get('size_bytes')!r} does not match shape {shape} × itemsize = {declared}")
    try:
        resolved = (root / file).resolve(strict=True)
    except OSError as exc:
        raise bad(f"file {file} is missing ({exc.strerror})") from exc
    if resolved.parent != tensors_dir or not resolved.is_file():
        raise bad(f"file {file} resolves to {resolved}, outside {TENSORS}/")
    if resolved.stat().st_size < declared:
        raise bad(f"file {file} is smaller than the {declared} bytes its record declares")
    return resolved


def _storage_matches(dtype_name: str, kind: str, itemsize: int) -> bool:
    if dtype_name == STRING:
        return kind == "S" and itemsize >= 1
    want = np.dtype(_EXTENDED[dtype_name][0]) if dtype_name in _EXTENDED else np.dtype(dtype_name)
    return kind == want.kind and itemsize == want.itemsize
