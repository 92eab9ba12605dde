"""Importing TensorFlow quietly, only where it is needed.

Comparison and rendering never import TensorFlow (they work on capture directories, on a
machine without TF). Loading an artifact and running a side do, and go through here so the
import is lazy and TF's C++ log noise is kept off the user's terminal.
"""

from __future__ import annotations

import os
from types import ModuleType

from .errors import TftraceError

_tf: ModuleType | None = None


def tf() -> ModuleType:
    """Return the ``tensorflow`` module, importing it on first use."""
    global _tf
    if _tf is None:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        try:
            import tensorflow  # noqa: PLC0415 - deliberately lazy
        except ImportError as exc:
            raise TftraceError(
                f"TensorFlow is not importable here ({exc})",
                "install it with `pip install 'tftrace[cpu]'` (or `tftrace[gpu]`), "
                "or run this step on the machine that has it",
            ) from exc
        tensorflow.get_logger().setLevel("ERROR")
        _tf = tensorflow
    return _tf
