"""Where a command's seconds go in the child processes it starts.

Every child tftrace starts to run TensorFlow (a capture, an isolation replay, a read of
digest-kept weights, a timing child) is told when it was started (:data:`SPAWNED_AT_ENV`) and
says, once its model is loaded, how long it took to come up, to import TensorFlow and to load
the model (:func:`load_report`). The parent keeps one :class:`ChildTime` per child in a
process-wide ledger, tagged with what it was started for (:func:`tagged`: diagnose tags each
experiment), and :func:`summary` adds them up: diagnose writes that into ``diagnosis.json`` and
``make bench`` reports the shares.

Why a ledger and not a return value: the children are started deep inside compare, isolation and
the capture reader, and a figure of where the time went should not change their signatures.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import threading
import time
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

__all__ = ["SPAWNED_AT_ENV", "ChildTime", "stamp", "record", "tagged", "recorded", "summary",
           "note_start", "load_report"]

SPAWNED_AT_ENV = "TFTRACE_SPAWNED_AT"  # the parent's time.time() when it started the child
PARTS = ("start_s", "import_s", "model_s", "idle_s")


@dataclass(frozen=True)
class ChildTime:
    """One child process, as the parent saw it end and as it reported itself."""

    purpose: str  # capture, isolate, weights, timing
    tag: str  # what the parent was doing (a diagnose experiment's name), "" outside any
    wall_s: float  # started to ended, seen from the parent
    start_s: float | None = None  # started to its first line of tftrace code: the interpreter, numpy, tftrace
    import_s: float | None = None  # importing TensorFlow
    model_s: float | None = None  # loading the model into a session, TensorFlow's import excluded
    idle_s: float | None = None  # started ahead of its job, ready, and waiting for it (launcher.PreparedChild)


_ledger: list[ChildTime] = []
_lock = threading.Lock()
_tag: contextvars.ContextVar[str] = contextvars.ContextVar("tftrace_child_tag", default="")


# ---- in the parent -------------------------------------------------------------------------------


def stamp(env: MutableMapping[str, str]) -> float:
    """Put the start time in a child's environment; returns the parent's clock for :func:`record`."""
    env[SPAWNED_AT_ENV] = repr(time.time())
    return time.monotonic()


def record(purpose: str, started: float, reported: Mapping[str, Any] | None = None,
           job_sent: float | None = None) -> ChildTime:
    """Keep a child that ended now; ``started`` is :func:`stamp`'s value, ``reported`` the child's
    :func:`load_report` (None when it reported none: it failed, or it loads nothing).

    ``job_sent``: when a child started ahead of its job was given it (``time.monotonic()``). The
    time it spent ready and waiting is then said apart (``idle_s``), so that a child loaded
    ahead does not count its wait as work."""
    parts = {key: _seconds((reported or {}).get(key)) for key in PARTS if key != "idle_s"}
    if job_sent is not None and parts["model_s"] is not None:
        came_up = sum(parts[key] or 0.0 for key in ("start_s", "import_s", "model_s"))
        parts["idle_s"] = round(max(0.0, job_sent - started - came_up), 4)
    child = ChildTime(purpose, _tag.get(), round(time.monotonic() - started, 4), **parts)
    with _lock:
        _ledger.append(child)
    return child


@contextlib.contextmanager
def tagged(tag: str) -> Iterator[None]:
    """Children started inside this block (in this thread) are recorded under ``tag``."""
    token = _tag.set(tag)
    try:
        yield
    finally:
        _tag.reset(token)


def recorded() -> list[ChildTime]:
    """Every child recorded so far in this process, oldest first."""
    with _lock:
        return list(_ledger)


def summary(children: list[ChildTime]) -> dict[str, Any]:
    """The children's seconds added up: ``count``, ``wall_s`` and each of :data:`PARTS`, also per
    purpose. A part a child did not report counts as 0 (``reported`` says how many did)."""
    def total(group: list[ChildTime]) -> dict[str, Any]:
        return {"count": len(group), "reported": sum(c.model_s is not None for c in group),
                "wall_s": round(sum(c.wall_s for c in group), 2),
                **{key: round(sum(getattr(c, key) or 0.0 for c in group), 2) for key in PARTS}}

    purposes = sorted({c.purpose for c in children})
    return {**total(children), "by_purpose": {p: total([c for c in children if c.purpose == p]) for p in purposes}}


def _seconds(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1e7
    return round(float(value), 4) if ok else None


# ---- in the child --------------------------------------------------------------------------------

_started_after: float | None = None


def note_start() -> None:
    """Called first thing in a child: how long it took from the parent's start to here."""
    global _started_after  # noqa: PLW0603 - one start per process
    spawned = os.environ.pop(SPAWNED_AT_ENV, "")
    try:
        _started_after = max(0.0, time.time() - float(spawned))
    except ValueError:
        _started_after = None


def load_report(opened: tuple[float, float]) -> dict[str, float]:
    """What this child says of its start. ``opened`` is when it began and finished opening its
    model (``time.perf_counter()``); TensorFlow's import, wherever it happened, is said apart."""
    from ._tf import import_window  # noqa: PLC0415 - light; the parent never needs it

    window = import_window()
    imported = window[1] - window[0] if window else 0.0
    overlap = max(0.0, min(opened[1], window[1]) - max(opened[0], window[0])) if window else 0.0
    report = {"import_s": round(imported, 4), "model_s": round(max(0.0, opened[1] - opened[0] - overlap), 4)}
    if _started_after is not None:
        report["start_s"] = round(_started_after, 4)
    return report
