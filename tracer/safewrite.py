"""Writing into a directory tftrace owns: never through a planted link, never half a file.

A report directory may come from someone else (``tftrace report DIR``, ``isolate --from``), so
any name in it may be a planted symbolic link (``report.html -> ~/.local/lib/python3.X/
site-packages/evil.pth``) and any predictable temporary name may be one too. Every file tftrace
writes goes through :func:`write_file`: a random temporary name created with
``O_CREAT|O_EXCL|O_NOFOLLOW`` beside the target, then a rename, both relative to the
directory opened with ``O_NOFOLLOW`` (so a swapped directory cannot redirect them); a target
that is a link or a directory is refused with a clear error, never followed.

An output directory (``compare --out``, ``diagnose --out``) carries ``.tftrace-owned.json``,
the record of the names tftrace created in it (claimed *before* they are written, so a killed
run's leftovers are listed too): ``--force`` deletes only those and refuses, naming them, when
anything else is there. One run at a time writes into a directory: :func:`lock_directory`
holds an ``flock`` on ``.tftrace.lock`` (freed by the kernel even after SIGKILL) and a second
run is told the first one's pid. Never imports TensorFlow.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

from .errors import TftraceError
from .text import listed

try:
    import fcntl
except ImportError:  # not POSIX: directories are not locked there (dir_fd writes need POSIX too)
    fcntl = None  # type: ignore[assignment]

__all__ = ["OWNED", "LOCK", "write_file", "refuse_links_within", "replacing", "open_new", "start_owned", "claim", "clear_owned",
           "set_aside_owned", "restore_aside", "drop_aside", "ASIDE",
           "lock_directory", "refuse_link_dir"]

OWNED = ".tftrace-owned.json"
LOCK = ".tftrace.lock"
ASIDE = ".tftrace-replaced"  # what --force replaces, kept until the run that replaces it is complete
_INTERNAL = (OWNED, LOCK, ASIDE)
_TEMP = re.compile(r"^\..*\.[0-9a-f]{16}\.tmp$")  # write_file's temporary names (left by a killed run)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _link_error(path: Path) -> TftraceError:
    return TftraceError(
        f"{path} is a symbolic link; tftrace never writes through a link (one planted in a directory received "
        "from someone else would make it overwrite a file elsewhere)",
        f"delete the link {path} (or use another directory) and re-run",
    )


def refuse_link_dir(directory: Path, flag: str = "--out") -> None:
    """A directory given to write into must not itself be a link (nor a file)."""
    if directory.is_symlink():
        raise TftraceError(
            f"{flag} {directory} is a symbolic link; tftrace writes only into a real directory, so that what it "
            "writes and what --force deletes stay where you asked",
            f"pass the directory it points to ({os.path.realpath(directory)}) or a new directory as {flag}",
        )
    if directory.exists() and not directory.is_dir():
        raise TftraceError(f"{flag} {directory} exists and is not a directory", "choose a directory path")


def refuse_links_within(directory: Path) -> None:
    """A directory received from someone else (a report's ``work/``), walked without following
    links (``os.fwalk``, each entry by ``lstat`` relative to its parent's descriptor): the
    directory itself or anything inside it that is a symbolic link is refused, since reading or
    writing through one reaches wherever it points (issue 24: a link at ``work/`` itself was
    followed, the replays written and the job read outside the report)."""
    if directory.is_symlink():
        raise _link_error(directory)
    if not directory.is_dir():
        return
    for root, dirs, files, root_fd in os.fwalk(directory, follow_symlinks=False):
        for name in (*dirs, *files):
            if stat.S_ISLNK(os.stat(name, dir_fd=root_fd, follow_symlinks=False).st_mode):
                raise _link_error(Path(root, name))


def _open_dir(directory: Path) -> int:
    try:
        return os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW | _CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and directory.is_symlink():
            raise _link_error(directory) from None
        raise


def _check_target(dfd: int, path: Path) -> None:
    try:
        st = os.stat(path.name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise _link_error(path)
    if stat.S_ISDIR(st.st_mode):
        raise TftraceError(f"{path} is a directory where tftrace writes a file", f"move {path} away and re-run")


def write_file(path: str | os.PathLike[str], data: str | bytes, *, durable: bool = False) -> Path:
    """Write ``data`` to ``path`` via a random temporary name in its directory and a rename.

    Readers see the old file or the whole new one. ``durable``: fsync the file and the
    directory (captures need it; re-renderable reports do not). A file written into a
    directory carrying an ownership record is claimed in it first (see :func:`claim`).
    """
    path = Path(path)
    body = data.encode("utf-8") if isinstance(data, str) else data
    if path.name not in _INTERNAL and os.path.lexists(path.parent / OWNED):
        claim(path.parent, [path.name])
    dfd = _open_dir(path.parent)
    try:
        _check_target(dfd, path)
        tmp = f".{path.name[:100]}.{secrets.token_hex(8)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o644, dir_fd=dfd)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(body)
                if durable:
                    f.flush()
                    os.fsync(f.fileno())
            _check_target(dfd, path)  # a rename replaces a link planted meanwhile, never follows it
            os.replace(tmp, path.name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise
        if durable:
            os.fsync(dfd)
    finally:
        os.close(dfd)
    return path


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str]) -> Iterator[Path]:
    """For a file built in place rather than handed over whole (a memory-mapped ``.npy`` widened,
    a linked file copied): yields a random temporary name beside ``path`` for the caller to create
    (with :func:`open_new`, ``exclusive``), then renames it over ``path``, refusing a link there as
    :func:`write_file` does. On an error the temporary file is removed and ``path`` is untouched."""
    path = Path(path)
    tmp = path.with_name(f".{path.name[:100]}.{secrets.token_hex(8)}.tmp")
    try:
        yield tmp
        dfd = _open_dir(path.parent)
        try:
            _check_target(dfd, path)
            os.replace(tmp.name, path.name, src_dir_fd=dfd, dst_dir_fd=dfd)
        finally:
            os.close(dfd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def open_new(path: Path, *, exclusive: bool = False) -> int:
    """Open ``path`` for writing (created, truncated) without following a link at its name;
    ``exclusive``: it must not exist. Returns the descriptor."""
    flags = os.O_WRONLY | os.O_CREAT | _NOFOLLOW | _CLOEXEC | (os.O_EXCL if exclusive else os.O_TRUNC)
    try:
        return os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno == errno.EEXIST and os.path.islink(path)):
            raise _link_error(path) from None
        raise


# ---------------------------------------------------------------- what tftrace wrote in a directory


def _read_owned(directory: Path) -> list[str]:
    record = directory / OWNED
    if record.is_symlink():
        raise _link_error(record)
    try:
        doc = json.loads(record.read_text(encoding="utf-8"))
        names = doc["paths"]
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ValueError("paths is not a list of names")
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TftraceError(f"{record} is damaged ({exc})", f"delete {directory} yourself if it is yours") from None
    return [n for n in names if _plain_name(n)]


def _plain_name(name: str) -> bool:
    """A record from elsewhere must not make --force reach outside the directory."""
    return bool(name) and name not in (".", "..") and "/" not in name and "\\" not in name and "\0" not in name


def _write_owned(directory: Path, names: Iterable[str]) -> None:
    write_file(directory / OWNED, json.dumps({"tool": "tftrace", "paths": sorted(set(names))}, indent=1))


def start_owned(directory: Path) -> None:
    """Mark a fresh (empty) output directory as tftrace's: an empty record."""
    _write_owned(directory, [])


def claim(directory: Path, names: Iterable[str]) -> None:
    """Record that tftrace creates these top-level names in ``directory`` (before creating them)."""
    names = [n for n in names if n not in _INTERNAL]
    have = _read_owned(directory)
    if not set(names) <= set(have):
        _write_owned(directory, have + names)


def clear_owned(directory: Path, what: str) -> None:
    """``--force``: delete what tftrace recorded writing in ``directory``, after checking that
    nothing else is there (otherwise exit 2 naming the other files; nothing deleted)."""
    for name in _owned_present(directory, what):
        target = directory / name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        else:
            target.unlink()
    (directory / OWNED).unlink(missing_ok=True)


def set_aside_owned(directory: Path, what: str) -> None:
    """``--force`` for a run that may fail: move what tftrace recorded writing in ``directory``
    (and its record) into ``ASIDE``, after the same check as :func:`clear_owned`. The run's end
    deletes it (:func:`drop_aside`) or, when the run failed, puts it back (:func:`restore_aside`):
    an interrupted ``--force`` leaves the old report, never an empty directory."""
    names = _owned_present(directory, what)
    aside = directory / ASIDE
    aside.mkdir()
    for name in [*names, OWNED]:
        if os.path.lexists(directory / name):
            os.rename(directory / name, aside / name)


def restore_aside(directory: Path) -> None:
    """Put back what :func:`set_aside_owned` moved, once the failed run took back its own files."""
    aside = directory / ASIDE
    if not aside.is_dir() or aside.is_symlink():
        return
    for name in os.listdir(aside):
        if _plain_name(name) and not os.path.lexists(directory / name):
            os.rename(aside / name, directory / name)
    shutil.rmtree(aside, ignore_errors=True)


def drop_aside(directory: Path) -> None:
    """The run that replaced it is complete: what ``--force`` set aside goes."""
    aside = directory / ASIDE
    if aside.is_symlink():
        aside.unlink()
    elif aside.is_dir():
        shutil.rmtree(aside, ignore_errors=True)


def _owned_present(directory: Path, what: str) -> list[str]:
    """The names in ``directory`` besides tftrace's own files, refused (exit 2, naming them) when
    any of them is not recorded as written by tftrace."""
    owned = set(_read_owned(directory))
    present = os.listdir(directory)
    foreign = sorted(n for n in present if n not in owned and n not in _INTERNAL and not _TEMP.match(n))
    if not (directory / OWNED).exists():
        foreign = sorted(n for n in present if n != LOCK)
    if foreign:
        shown = listed(foreign, 5)
        raise TftraceError(
            f"--force would replace {directory}, but it holds files tftrace did not write there ({shown}); "
            f"--force deletes only what tftrace recorded writing in a {what} directory",
            "move those files away, or choose an empty or new --out directory",
        )
    return [name for name in present if name not in _INTERNAL]


# ---------------------------------------------------------------- one writer at a time


@contextlib.contextmanager
def lock_directory(directory: Path, what: str = "output") -> Iterator[None]:
    """Hold ``directory/.tftrace.lock`` (an ``flock``: the kernel frees it when this process
    dies, however) while writing; a second run is refused with the first one's pid."""
    lock = directory / LOCK
    if directory.is_symlink():  # the lock, like every file, goes only where the directory really is
        raise _link_error(directory)
    if fcntl is None:
        yield
        return
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | _NOFOLLOW | _CLOEXEC, 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _link_error(lock) from None
            raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:  # a planted hard link: never write our pid into it
            os.close(fd)
            raise TftraceError(f"{lock} is not a lock file tftrace made (a special file or a hard link)",
                               f"delete {lock} and re-run")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held = os.read(fd, 64).decode("ascii", "replace").strip()
            os.close(fd)
            who = f"pid {held}" if held.isdigit() else "another process"
            raise TftraceError(
                f"another tftrace run ({who}) is writing to the {what} directory {directory}",
                "wait for it to finish, or choose another --out",
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(lock, follow_symlinks=False).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the previous holder removed it between our open and our lock: take the new one
    try:
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)
        os.close(fd)


@contextlib.contextmanager
def output_directory(out: Path, force: bool, what: str) -> Iterator[Path]:
    """An ``--out`` directory for one run: a real directory (not a link), locked for this run,
    empty (or, with ``force``, emptied of what tftrace recorded writing there), with a fresh
    ownership record. Only claimed names are ever recorded (never "whatever is there at the
    end": a file the user put there meanwhile stays theirs)."""
    refuse_link_dir(out)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    failed = False
    try:
        with lock_directory(out, what):
            if os.path.lexists(out / ASIDE):  # a run killed while it replaced a report: that report comes back
                _undo_owned(out)
                restore_aside(out)
            if any(n not in _INTERNAL for n in os.listdir(out)):
                if not force:
                    raise TftraceError(*_not_empty(out, what))
                set_aside_owned(out, what)
            start_owned(out)
            try:
                yield out
            except BaseException:
                failed = True
                _undo_owned(out)
                restore_aside(out)
                raise
            drop_aside(out)
    finally:
        if created and (failed or not any(n not in _INTERNAL for n in os.listdir(out))):
            with contextlib.suppress(OSError):  # only if nothing is left in it: never a user's file
                (out / OWNED).unlink(missing_ok=True)
                out.rmdir()


_FINISHED = {"report": "report.json", "diagnosis": "diagnosis.json"}  # written last: the run is complete


def _not_empty(out: Path, what: str) -> tuple[str, str]:
    """Why a run may not write into ``out`` without --force, and the fix. Where everything in it is
    what tftrace recorded writing and the file a finished run writes last is absent, it is what a
    killed run left (SIGKILL, a machine's time running out): said so, as no report is there."""
    present = sorted(n for n in os.listdir(out) if n not in _INTERNAL)
    finished = _FINISHED.get(what)
    try:
        owned = set(_read_owned(out))
    except TftraceError:  # a damaged record: nothing is claimed from it
        owned = set()
    if finished is not None and owned and set(present) <= owned and finished not in present:
        return (f"output directory {out} holds what a tftrace run that did not finish left there "
                f"({listed(present, 5)}; no {finished})",
                "pass --force to replace it (it deletes only what tftrace recorded writing there), "
                "or choose another --out")
    return f"output directory {out} is not empty", "choose another --out, or pass --force to replace it"


def _undo_owned(directory: Path) -> None:
    """A run that failed takes back what it recorded writing (a first side's capture, the examples
    it passed on), so the directory is as it found it: nothing half-written looks like a result,
    and the same command can be run again without --force."""
    for name in _read_owned(directory):
        if "/" in name or name in (".", "..") or name in _INTERNAL:
            continue  # only plain names of this directory are ever recorded
        target = directory / name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                target.unlink()
    (directory / OWNED).unlink(missing_ok=True)
