"""Importing TensorFlow quietly, only where it is needed.

Comparison and rendering never import TensorFlow (they work on capture directories, on a
machine without TF). Loading an artifact and running a side do, and go through here so the
import is lazy and TF's C++ log noise is kept off the user's terminal.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from types import ModuleType

from .errors import TftraceError

_tf: ModuleType | None = None
_import_window: tuple[float, float] | None = None  # perf_counter() before and after the import


def import_window() -> tuple[float, float] | None:
    """When this process imported TensorFlow through :func:`tf` (None: it has not)."""
    return _import_window


def tf() -> ModuleType:
    """Return the ``tensorflow`` module, importing it on first use."""
    global _tf, _import_window
    if _tf is None:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        began = time.perf_counter()
        try:
            with _each_line_once():
                import tensorflow  # noqa: PLC0415 - deliberately lazy
        except ImportError as exc:
            raise TftraceError(
                f"TensorFlow is not importable here ({exc})",
                "install it with `pip install 'tftrace[cpu]'` (or `tftrace[gpu]`), "
                "or run this step on the machine that has it",
            ) from exc
        tensorflow.get_logger().setLevel("ERROR")
        _tf = tensorflow
        _import_window = (began, time.perf_counter())
    return _tf


@contextlib.contextmanager
def _each_line_once() -> Iterator[None]:
    """What TensorFlow's import writes to stderr, each distinct line once.

    TensorFlow 2.21 loads two libraries that each log, before absl's logging is initialised (so
    ``TF_CPP_MIN_LOG_LEVEL`` cannot quiet them), the same two lines: "All log messages before
    absl::InitializeLog() …" and "oneDNN custom operations are on …". The C++ writes to file
    descriptor 2, so that is what is held here, then written back with repeats dropped: nothing
    TensorFlow says is lost, a banner is not shown twice."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # no real stderr (a notebook): nothing to hold
        yield
        return
    sys.stderr.flush()
    saved = os.dup(fd)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), fd)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, fd)
            os.close(saved)
            held.seek(0)
            seen: set[bytes] = set()
            for line in held.read().splitlines(keepends=True):
                key = _without_timestamp(line)
                if key not in seen:
                    seen.add(key)
                    os.write(fd, line)


def _without_timestamp(line: bytes) -> bytes:
    """``I0000 00:00:1796.08 641 port.cc:153] text`` -> ``I port.cc:153] text``: two logs of one
    message differ only in their time."""
    head, sep, rest = line.partition(b"] ")
    parts = head.split()
    if sep and len(parts) == 4 and parts[0][:1] in b"IWEF" and parts[0][1:].isdigit():
        return parts[0][:1] + b" " + parts[3] + sep + rest
    return line
