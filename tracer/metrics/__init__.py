"""Stage 6 — how far apart two tensors are: :func:`compare_arrays` is the one entry point.

Inside: ``arrays`` drives the comparison (blocks, worker threads, memory-mapped inputs);
``scan`` keeps each worker's totals; the block kernel that reads every element once is
compiled (``kernel``, numba) with a numpy twin (``block``) that gives the same bits; ``result``
holds :class:`TensorMetrics` and the declaration of every metric (:data:`METRICS`).

How to add a metric: declare it once, as a field of :class:`TensorMetrics` in ``result.py``
with :func:`~tracer.metrics.result.metric` (label, how it combines the scan's ``Totals``, its
value for exact kinds); its computation, JSON field and display follow from that declaration.
Only a metric that needs a new per-element quantity also touches the block kernel, in both
twins (``block.py`` and ``kernel.py``): ``result.py``'s docstring has the steps.
"""

from .arrays import DEFAULT_CHUNK_ELEMS, compare_arrays, summary_stats
from .result import HISTOGRAM_DECADES, METRICS, Metric, TensorMetrics, within_tolerance

__all__ = [
    "compare_arrays",
    "TensorMetrics",
    "within_tolerance",
    "summary_stats",
    "METRICS",
    "Metric",
    "HISTOGRAM_DECADES",
    "DEFAULT_CHUNK_ELEMS",
]
