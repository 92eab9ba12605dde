"""Capturing one side of a comparison.

``store`` writes capture directories (manifest + tensor files, manifest last and atomic; format 2
packs them as zstd chunks, elementwise outputs as residuals of their prediction, large restored
variables as a digest: ``_packed``) and ``reader`` opens them (format 1's ``.npy`` files too);
neither imports TensorFlow, so comparisons run on machines without it.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._format import FORMAT, FORMAT_VERSION
    from .reader import Capture
    from .store import CaptureWriter, safe_filename

# imported when first asked for: ``tftrace capture`` starts its child from ``launcher`` before it needs
# the reader, and importing the reader (numpy, networkx) first would delay that child by a fifth of a second
_HOME = {"Capture": "reader", "CaptureWriter": "store", "safe_filename": "store", "FORMAT": "_format",
         "FORMAT_VERSION": "_format"}

__all__ = list(_HOME)


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_HOME[name]}", __name__), name)
