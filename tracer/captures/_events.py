"""How a child process speaks to tftrace: one JSON line per event on a private pipe.

Shared by the capture worker and the isolation replay (``progress``, ``stage``, ``error``,
``timings``); the launcher reads them (:mod:`tracer.captures.launcher`) and checks every field (:func:`valid`).

The channel is its own file descriptor, named to the child in :data:`EVENT_FD_ENV` (taken out of
the environment and made non-inheritable at once), never stdout: the model runs in this process,
and a ``PrintV2`` to stdout is allowed, so on stdout a model could speak as tftrace (an ``error``
event telling the user to pass ``--allow-unsafe-ops``; issue 24). The child's stdout goes to its
stderr file instead.
"""

from __future__ import annotations

import json
import os
import sys
from typing import IO, Any

__all__ = ["emit", "claim_channel", "valid", "EVENT_FD_ENV"]

EVENT_FD_ENV = "TFTRACE_EVENT_FD"
_channel: IO[str] | None = None

# event -> its fields and their types (a bool is not an int here)
_FIELDS: dict[str, dict[str, type]] = {
    "stage": {"text": str},
    "progress": {"done": int, "total": int, "bytes": int},
    "error": {"problem": str, "fix": str},
    "timings": {"import_s": float, "model_s": float},  # how the child came up (tracer.children)
}
# fields an event may carry, checked like the others where present
_OPTIONAL: dict[str, dict[str, type]] = {
    # the run in hand: tensors stored so far, of how many; its bytes stored so far, of those planned
    "progress": {"stored": int, "tensors": int, "run_bytes": int, "planned": int},
    "timings": {"start_s": float},
}


def claim_channel() -> None:
    """Open the parent's event pipe (before the model is loaded), so nothing the child starts
    later inherits it or learns its number; without one (a worker run by hand) events go to stdout."""
    global _channel  # noqa: PLW0603 - one channel per process
    fd = os.environ.pop(EVENT_FD_ENV, None)
    if _channel is not None or fd is None or not fd.isdigit():
        return
    os.set_inheritable(int(fd), False)
    _channel = os.fdopen(int(fd), "w", encoding="utf-8")


def emit(event: str, **fields: Any) -> None:
    """One JSON line to the parent."""
    if _channel is None:
        claim_channel()
    out = _channel if _channel is not None else sys.stdout
    out.write(json.dumps({"event": event, **fields}) + "\n")
    out.flush()


def valid(event: Any) -> bool:
    """Whether a parsed line is an event the parent acts on: a known kind with every field of
    its type (text bounded), so a damaged or foreign line is dropped, never a crash (KeyError)."""
    if not isinstance(event, dict) or event.get("event") not in _FIELDS:
        return False
    optional = _OPTIONAL.get(event["event"], {})
    for key, kind in [*_FIELDS[event["event"]].items(), *((k, t) for k, t in optional.items() if k in event)]:
        value = event.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            return False
        if kind in (int, float) and not 0 <= value < 2**63:  # a count or seconds: never negative, nan or inf
            return False
        if kind is str and len(value) > 100_000:
            return False
    return True
