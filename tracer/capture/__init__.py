"""Capturing one side of a comparison.

``store`` (capture directories: manifest + ``.npy``, written atomically, read lazily) never
imports TensorFlow, so comparisons run on machines without it.
"""

from __future__ import annotations

from .store import FORMAT, FORMAT_VERSION, Capture, CaptureWriter, safe_filename

__all__ = ["Capture", "CaptureWriter", "safe_filename", "FORMAT", "FORMAT_VERSION"]
