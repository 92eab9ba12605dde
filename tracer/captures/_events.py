"""How a child process speaks to tftrace: one JSON line per event on stdout.

Shared by the capture worker and the isolation replay (``progress``, ``stage``, ``error``); the
launcher reads them (:mod:`tracer.captures.launcher`).
"""

from __future__ import annotations

import json
import sys
from typing import Any

__all__ = ["emit"]


def emit(event: str, **fields: Any) -> None:
    """One JSON line to the parent."""
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()
