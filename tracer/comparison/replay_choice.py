"""Which ops isolation replays alone (``--isolate N``): the first divergence, the first batch norm
whose batch the sides do not share, then the top-ranked origins.

Why the batch norm: an origin is an op whose inputs agree and whose output does not. A training
graph run at two batch sizes differs first wherever the kernels do, and on a GPU they do at the
first convolution (another cuDNN algorithm per shape and per process, 1e-3 on the H200). Its
batch norm in training mode, just after, is then no origin: its inputs already differ. Yet it is
where the outputs' difference comes from (it normalises each row with its run's statistics:
0.76 at the batch norm, 0.088 at the outputs, against 0.001 at the conv on the H200). Replayed
alone on identical rows, it still differs (``batch_statistics``), and that replay is what lets the
causes name the training graph, and weigh it, beside the kernels' noise.
"""

from __future__ import annotations

from .align import Alignment, CaptureView
from .divergence import Divergence, NodeResult
from ..captures.inputs import batched_alike
from ..training import coupled_in_graph

__all__ = ["to_isolate", "first_unshared_norm"]

DIFFERING = ("origin", "propagated")  # beyond tolerance (and beyond the measured noise)


def to_isolate(divergence: Divergence, count: int, unshared_norm: NodeResult | None = None) -> list[NodeResult]:
    """The ops to replay, ``count`` in all: the first divergence (bitwise, then beyond tolerance),
    ``unshared_norm`` (:func:`first_unshared_norm`), then the top-ranked origins. The first divergence
    is the op every summary names first, so its verdict must be there even when others differ more."""
    firsts = [r for r in (divergence.first_bitwise, divergence.first_beyond_tolerance, unshared_norm) if r is not None]
    chosen = {r.name: r for r in [*firsts, *divergence.origins] if r.metrics is not None}
    return list(chosen.values())[: max(0, count)]


def first_unshared_norm(divergence: Divergence, alignment: Alignment, view_a: CaptureView,
                        view_b: CaptureView) -> NodeResult | None:
    """The first op beyond tolerance, in the order the examples flow, that normalises by its batch
    (:func:`tracer.training.coupled_in_graph`: itself, or an op above it that its replay recomputes)
    on a side whose batch the other does not share: the sides group the examples into other runs, or
    only one side normalises there (the other reads its moving averages). None where there is none."""
    alike = batched_alike(view_a.capture.manifest, view_b.capture.manifest)
    rank = view_a.graph.flow_order()
    for result in sorted(divergence.nodes.values(), key=lambda r: rank.get(r.name, (0, 0, 0))):
        if result.status not in DIFFERING or result.metrics is None or result.tensor is None:
            continue
        node = alignment.nodes.get(result.name)
        if node is None or not any(p.a == result.tensor and p.b for p in node.tensors):
            continue  # isolation feeds and fetches a pair of tensors
        b_node = node.b_node
        on_a = coupled_in_graph(view_a.graph, result.name, lambda op: getattr(divergence.nodes.get(op), "status", None))
        on_b = b_node is not None and coupled_in_graph(view_b.graph, b_node)  # B's graph has no statuses
        if (on_a or on_b) and (not alike or on_a != on_b):
            return result
    return None
