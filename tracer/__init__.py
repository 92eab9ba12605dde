"""tftrace: find where two runs of a TensorFlow model start to give different numbers, and why.

Nothing here imports TensorFlow at import time: comparisons and reports work on machines
without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import TftraceError

__all__ = ["TftraceError", "load", "diff_graphs", "__version__"]
__version__ = "0.1.0"

if TYPE_CHECKING:
    from .artifacts import Artifact, ArtifactRef
    from .static_diff import StaticDiff


def load(path: str | ArtifactRef) -> Artifact:
    """Detect and load an artifact (checkpoint, SavedModel, GraphDef) statically."""
    from .artifacts import load as _load  # noqa: PLC0415

    return _load(path)


def diff_graphs(a: str | ArtifactRef, b: str | ArtifactRef) -> StaticDiff:
    """Classify every rewrite between two artifacts' inference subgraphs."""
    from .static_diff import diff_artifacts  # noqa: PLC0415

    return diff_artifacts(a, b)

