"""Capturing one side of a comparison.

``store`` writes capture directories (manifest + ``.npy``, manifest last and atomic) and
``reader`` opens them; neither imports TensorFlow, so comparisons run on machines without it.
"""

from __future__ import annotations

from ._format import FORMAT, FORMAT_VERSION
from .reader import Capture
from .store import CaptureWriter, safe_filename

__all__ = ["Capture", "CaptureWriter", "safe_filename", "FORMAT", "FORMAT_VERSION"]
