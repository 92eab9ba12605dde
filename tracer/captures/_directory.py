"""A capture directory before its tensors: made empty, and locked for one writer; and a full
disk while writing them turned into the user's error (:func:`reports_full_disk`).

A writer creates ``.lock`` exclusively (``O_EXCL``) and writes its pid, host and a nonce in
it; a second writer is refused while the first lives, and a lock whose process is gone is an
interrupted capture, which only ``--force`` replaces. ``--force`` deletes what a capture
writer leaves behind and nothing else. Never imports TensorFlow.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import shutil
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from ..errors import TftraceError
from ..safewrite import refuse_link_dir
from ._format import MANIFEST, RERUN, TENSORS
from ..text import listed

__all__ = ["LOCK", "prepare_directory", "acquire_lock", "release_lock", "lock_holder", "reports_full_disk"]

LOCK = ".lock"


def prepare_directory(root: Path, force: bool) -> bytes:
    """Make ``root`` an empty, locked capture directory (``tensors/`` in it); returns the lock's token.

    Refuses a non-empty directory without ``force``, and with it anything that is not a
    capture (see :func:`_is_capture_leftover`); the old manifest goes first, so the directory
    is incomplete from the moment anything of the old capture is deleted.
    """
    refuse_link_dir(root)  # what a capture writes, and what --force deletes, stay where the user asked
    if root.exists() and not root.is_dir():
        raise TftraceError(f"{root} exists and is not a directory", "choose a directory path for the capture")
    root.mkdir(parents=True, exist_ok=True)
    existing = os.listdir(root)
    if existing and LOCK not in existing:  # a lock gets its own, more precise message below
        if not force:
            raise TftraceError(f"{root} is not empty", "pass --force to replace the capture in it, or choose a new directory")
        _refuse_foreign(root)
    token = acquire_lock(root, force)
    try:
        if force:
            _refuse_foreign(root)
            (root / MANIFEST).unlink(missing_ok=True)  # first: the directory is incomplete from now on
            for name in os.listdir(root):
                if name == TENSORS:
                    shutil.rmtree(root / name)
                elif name != LOCK:
                    os.unlink(root / name)
        (root / TENSORS).mkdir()
    except BaseException:
        release_lock(root, token)  # the caller never gets the token, so nobody else could release it
        raise
    return token


def _refuse_foreign(root: Path) -> None:
    """--force replaces a capture, never anything else: a typo must not wipe a home directory."""
    with os.scandir(root) as entries:
        foreign = sorted(e.name for e in entries if not _is_capture_leftover(e))
    if foreign:
        shown = listed(foreign, 5)
        raise TftraceError(
            f"{root} holds files that are not part of a capture ({shown}); "
            "--force only replaces capture directories and will not delete them",
            "choose an empty or new output directory",
        )


def _is_capture_leftover(entry: os.DirEntry[str]) -> bool:
    """True for what a capture writer itself leaves in its directory (so --force may delete it)."""
    name = entry.name
    if entry.is_symlink():
        return False
    if entry.is_dir():
        if name != TENSORS:
            return False
        with os.scandir(entry.path) as files:
            return all(f.is_file(follow_symlinks=False) and f.name.endswith((".npy", ".zst", ".tmp")) for f in files)
    return name in (MANIFEST, LOCK) or name.endswith(".tmp")


def acquire_lock(root: Path, force: bool) -> bytes:
    """Create ``root/.lock`` for this process; returns its content (the token that proves it ours)."""
    lock = root / LOCK
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
            pid, holder_host, dead = lock_holder(held)
            who = "its writer" if pid is None else f"pid {pid}"
            who += "" if holder_host == host else f" on host {holder_host}"
            if not dead:
                raise TftraceError(
                    f"another capture is writing to {root} ({who})",
                    f"wait for it to finish or write elsewhere; if no capture is running, delete {lock}",
                ) from None
            if not force:
                raise TftraceError(f"a capture of {root} was interrupted ({who} is gone)", f"{RERUN} to replace it") from None
            _break_stale_lock(root, lock, held)
            continue
        with os.fdopen(fd, "wb") as f:
            f.write(token)
        return token
    raise TftraceError(f"another capture is writing to {root}", "write elsewhere")


def _break_stale_lock(root: Path, lock: Path, held: bytes) -> None:
    """Move a dead writer's lock aside; put it back if another writer replaced it meanwhile."""
    aside = lock.with_name(f"{LOCK}.{os.urandom(6).hex()}.tmp")
    os.rename(lock, aside)
    if aside.read_bytes() != held:
        os.link(aside, lock)  # fails rather than overwrite if yet another lock appeared
        aside.unlink()
        raise TftraceError(f"another capture is writing to {root}", "write elsewhere")
    aside.unlink()


def release_lock(root: Path, token: bytes | None) -> None:
    """Delete ``root/.lock`` if it is still the one ``token`` created."""
    lock = root / LOCK
    if token is not None and lock.exists() and lock.read_bytes() == token:
        lock.unlink()


def lock_holder(held: bytes) -> tuple[int | None, str, bool]:
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


class _Writer(Protocol):
    """What :func:`reports_full_disk` reads of the writer whose method failed."""

    bytes_written: int
    path: Path


_P = ParamSpec("_P")
_R = TypeVar("_R")
_W = TypeVar("_W", bound="_Writer")
_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


def reports_full_disk(
    method: Callable[Concatenate[_W, _P], _R],
) -> Callable[Concatenate[_W, _P], _R]:
    """Turn "no space left" into the user's error, with how far the capture got.

    A full disk is the environment, not a bug: the capture stops with a TftraceError (exit 2);
    no manifest is written, so the partial directory stays incomplete and is refused later.
    """

    @functools.wraps(method)
    def wrapper(self: _W, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(self, *args, **kwargs)
        except OSError as exc:
            if exc.errno not in _DISK_FULL:
                raise
            written = max(self.bytes_written, _bytes_in(self.path))
            raise TftraceError(
                f"disk full at {written:,} bytes written to {self.path} ({exc.strerror})",
                f"free space on that file system or choose another --out; the partial capture in {self.path} has "
                "no manifest.json and is refused as incomplete (delete it, or re-run with --force)",
            ) from exc

    return wrapper


def _bytes_in(path: Path) -> int:
    """The bytes the files under ``path`` hold now. The writer counts only the writes that
    completed, and when the disk fills under several writing threads, the large files they were
    writing are all cut short, so that count can be a small part of what fills the disk."""
    sizes: dict[tuple[int, int], int] = {}  # a hard link (a tensor stored once for its aliases) counts once
    for root, _, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            sizes[(st.st_dev, st.st_ino)] = st.st_size
    return sum(sizes.values())
