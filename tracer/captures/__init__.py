"""Capturing one side of a comparison.

``store`` writes capture directories (manifest + tensor files, manifest last and atomic; format 2
packs them as zstd chunks, elementwise outputs as residuals of their prediction, large restored
variables as a digest: ``_packed``) and ``reader`` opens them (format 1's ``.npy`` files too);
neither imports TensorFlow, so comparisons run on machines without it.
"""

from __future__ import annotations

from ._format import FORMAT, FORMAT_VERSION
from .reader import Capture
from .store import CaptureWriter, safe_filename

__all__ = ["Capture", "CaptureWriter", "safe_filename", "FORMAT", "FORMAT_VERSION"]
