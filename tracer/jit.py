"""The one way tftrace compiles a numeric loop with numba."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba

__all__ = ["compiled"]


def compiled(fn: Callable[..., Any]) -> Any:
    """``njit(cache=True, nogil=True)`` (compiled once per machine, run without the GIL so that two
    threads share the work); without a cache when no cache directory is writable."""
    try:
        return numba.njit(cache=True, nogil=True)(fn)
    except RuntimeError:  # numba: "cannot cache function ...: no locator available"
        return numba.njit(nogil=True)(fn)
