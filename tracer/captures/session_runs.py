"""One ``session.run`` of a capture, with what really ran: shared by the plain and the
instrumented runs of :mod:`tracer.captures.worker`.

Every run asks for the partition graphs (the op types that executed, Grappler's rewrites
included); a run given ``sizes`` is also traced, and the step statistics give every executed
tensor's bytes on this feed (how fetch chunks are sized when shapes are known only at run time).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from .._tf import tf
from .inputs import Examples
from .runtime import Runtime
from ..optypes import RUNTIME_PLUMBING

__all__ = ["RUNTIME_PLUMBING", "feed_for", "traced_run"]



def feed_for(runtime: Runtime, examples: Examples, start: int, stop: int) -> dict[Any, np.ndarray]:
    feed = {}
    for key, spec in runtime.signature.inputs.items():
        feed[runtime.graph.get_tensor_by_name(spec.name)] = examples.feed(key, start, stop)
    return feed


def traced_run(runtime: Runtime, fetches: list[Any], feed: dict[Any, np.ndarray],
                sizes: dict[str, int] | None = None, partitions: bool = True) -> tuple[list[Any], Counter, dict]:
    """Run with the partition graphs returned (the executed ops); with ``sizes``, also the step
    statistics, from which every executed tensor's bytes on this feed are put in ``sizes``."""
    t = tf()
    trace = t.compat.v1.RunOptions.SOFTWARE_TRACE if sizes is not None else t.compat.v1.RunOptions.NO_TRACE
    options = t.compat.v1.RunOptions(output_partition_graphs=partitions, trace_level=trace)
    metadata = t.compat.v1.RunMetadata()
    values = runtime.session.run(fetches, feed_dict=feed, options=options, run_metadata=metadata)
    if sizes is not None:
        _measured_sizes(metadata, sizes)
    ops: Counter = Counter()
    nodes: dict[str, str] = {}
    for partition in metadata.partition_graphs:
        for node in partition.node:
            if not node.op.startswith(RUNTIME_PLUMBING):
                ops[node.op] += 1
                nodes[node.name] = node.op
    return values, ops, nodes


def _measured_sizes(metadata: Any, sizes: dict[str, int]) -> None:
    """Each executed node output's bytes, from a traced run's step statistics (its real shape)."""
    for device in metadata.step_stats.dev_stats:
        for node in device.node_stats:
            for out in node.output:
                desc = out.tensor_description
                try:
                    count = int(np.prod([d.size for d in desc.shape.dim], dtype=object))
                    nbytes = count * tf().as_dtype(desc.dtype).size
                except (TypeError, ValueError):
                    nbytes = 0
                nbytes = max(nbytes, int(desc.allocation_description.requested_bytes))
                name = f"{node.node_name}:{out.slot}"
                sizes[name] = max(sizes.get(name, 0), nbytes)
