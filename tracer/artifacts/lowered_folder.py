"""The folder through which the processes of one command share the graphs they lowered.

One ``compare`` or ``diagnose`` loads a side in many processes (its own, each capture, replay and
timing child), and lowering a TF1 graph's functional control flow (:mod:`.lowering`) takes
Grappler a while on a large graph. The command's top process names a folder in
:data:`CACHE_ENV`, which its children inherit. The first process that lowers a graph makes the
folder and leaves the graph there; the others read it back.

The folder is made only when a graph is lowered, so a command whose graphs need none leaves
nothing in the temporary directory, even when it is killed. It is made with mode 0700 under a
name nobody can guess, and used only when it is this user's own real folder. The top process
removes it when the command ends, whether it succeeded or failed. A SIGKILL gives it no chance to
do so, and the next command that makes its own folder removes those whose maker no longer runs
(only then: a command that lowers nothing does not list the temporary directory).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["CACHE_ENV", "lowered_folder", "shared_lowering"]

CACHE_ENV = "TFTRACE_LOWERED_GRAPHS"
PREFIX = "tftrace-lowered-"
_NAME = re.compile(rf"{re.escape(PREFIX)}(\d+)-[0-9a-f]+$")


@contextlib.contextmanager
def shared_lowering() -> Iterator[None]:
    """For one command: name a folder for its processes' lowered graphs and remove it at the end.
    Inside a command that named one (a child, or tftrace run by tftrace), that one is used."""
    if os.environ.get(CACHE_ENV):
        yield
        return
    try:
        temp = tempfile.gettempdir()
    except OSError:  # no temporary directory at all: each process lowers for itself
        yield
        return
    folder = os.path.join(temp, f"{PREFIX}{os.getpid()}-{secrets.token_hex(8)}")
    os.environ[CACHE_ENV] = folder
    try:
        yield
    finally:
        os.environ.pop(CACHE_ENV, None)
        if _own_folder(Path(folder)):
            shutil.rmtree(folder, ignore_errors=True)


def lowered_folder() -> Path | None:
    """The command's folder, made now if this is its first lowered graph; None where there is none
    to share (no command named one, it cannot be made, or it is not this user's own folder)."""
    named = os.environ.get(CACHE_ENV)
    if not named:
        return None
    folder = Path(named)
    try:
        folder.mkdir(mode=0o700)
    except OSError:  # made already by another process of the command, or not to be made here
        pass
    else:
        _remove_abandoned(folder.parent)  # this command's first lowered graph: tidy what killed ones left
    return folder if _own_folder(folder) else None


def _own_folder(folder: Path) -> bool:
    """A real folder (not a link), this user's, that no one else may write in."""
    try:
        info = folder.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077


def _remove_abandoned(temp: Path) -> None:
    """Remove this user's lowered-graph folders whose command was killed (its process is gone)."""
    try:
        entries = list(temp.iterdir())
    except OSError:
        return
    for entry in entries:
        match = _NAME.match(entry.name)
        if match and _own_folder(entry) and not _running(int(match.group(1))):
            shutil.rmtree(entry, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: running
        return True
    return True
