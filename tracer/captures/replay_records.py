"""What an isolation child leaves for each op it was asked to replay, in its ``out_dir``.

Either ``ID.npy``, the replayed value, or ``ID.failed.json``, why it could not be replayed
(TensorFlow's one-line reason). The child writes them (:mod:`tracer.captures.isolate_worker`);
the parent reads them to judge (:func:`tracer.comparison.isolate.evaluate`), and marks the ops
of a child that crashed before reaching them. One module for both, importing no TensorFlow, so
the names cannot drift apart. A job, and so an ``ID``, may come from a received report: the
name is always built from the integer, never taken as a path.
"""

from __future__ import annotations

import json
import os
import stat

from ..jsonvalues import dumps
from ..safewrite import write_file

__all__ = ["replay_path", "record_value", "record_failure", "failure"]

REASON_LIMIT = 600  # characters of a reason kept: one line, not a traceback


def replay_path(out_dir: str, op_id: int) -> str:
    """Where op ``op_id``'s replayed value is written (``numpy.save`` format)."""
    return os.path.join(out_dir, f"{int(op_id)}.npy")


def _failure_path(out_dir: str, op_id: int) -> str:
    return os.path.join(out_dir, f"{int(op_id)}.failed.json")


def record_value(out_dir: str, op_id: int, npy: bytes) -> None:
    """Write op ``op_id``'s replayed value (``numpy.save`` bytes); a failure recorded by an
    earlier run into the same directory (``tftrace isolate --from`` again) no longer holds."""
    _remove(_failure_path(out_dir, op_id))
    write_file(replay_path(out_dir, op_id), npy)


def record_failure(out_dir: str, op_id: int, reason: str) -> None:
    """Write that op ``op_id`` could not be replayed, and why (cut to one short line); a value
    an earlier run left for it no longer holds."""
    _remove(replay_path(out_dir, op_id))
    line = " ".join(str(reason).split())[:REASON_LIMIT]
    write_file(_failure_path(out_dir, op_id), dumps({"reason": line}))


def _remove(path: str) -> None:
    """Delete a record (a planted link is removed itself, never followed)."""
    if os.path.lexists(path):
        os.unlink(path)


def failure(out_dir: str, op_id: int) -> str | None:
    """Why op ``op_id`` could not be replayed, or None when no failure was recorded for it."""
    path = _failure_path(out_dir, op_id)
    if not os.path.lexists(path):
        return None
    if not stat.S_ISREG(os.lstat(path).st_mode):  # a received report may plant a link: never read through it
        return "its failure record is not a plain file"
    try:
        with open(path, encoding="utf-8") as fh:
            reason = json.load(fh).get("reason")
    except (OSError, ValueError, AttributeError):
        return "its failure record is unreadable"
    return str(reason)[:REASON_LIMIT] if reason else "no reason recorded"
