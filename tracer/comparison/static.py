"""The static half of a comparison (``tftrace diff-graph``): load two artifacts and diff their
inference subgraphs. It sits with the comparison, above both stages it joins, so that the diff
stage itself (:mod:`tracer.diff`) works on op graphs and never imports the loader."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..artifacts.loader import Artifact, ArtifactRef, Signature, loads_by_running
from ..artifacts.side_by_side import LoadedSide, load_side_by_side, load_with_graph
from ..artifacts.graph import value_source
from ..captures._packed import content_digest
from ..diff.records import GraphDiff
from ..diff.rewrites import diff_graphs
from ..opgraph import OpGraph

__all__ = ["StaticDiff", "diff_artifacts"]


@dataclass
class StaticDiff:
    a: Artifact
    b: Artifact
    graph_a: OpGraph
    graph_b: OpGraph
    signature_a: Signature
    signature_b: Signature
    diff: GraphDiff


def diff_artifacts(a: ArtifactRef | str, b: ArtifactRef | str, *, allow_unsafe_ops: bool = False) -> StaticDiff:
    """Load both artifacts and classify every rewrite between them (imports TensorFlow).

    TF1 graphs are only parsed; a TF2 SavedModel is loaded to be inlined, which runs its
    initialisers, so one whose loading reaches outside the computation is refused unless
    ``allow_unsafe_ops``.
    """
    ref_a = ArtifactRef(a) if isinstance(a, str) else a
    ref_b = ArtifactRef(b) if isinstance(b, str) else b
    # a side without a signature (a TF1 training checkpoint) borrows the other's
    ref_a, ref_b = (replace(ref_a, signature_from=ref_a.signature_from or ref_b.lender()),
                    replace(ref_b, signature_from=ref_b.signature_from or ref_a.lender()))
    (art_a, graph_a, sig_a), (art_b, graph_b, sig_b) = _load_sides(ref_a, ref_b, allow_unsafe_ops)
    diff = diff_graphs(
        graph_a,
        graph_b,
        value_source(art_a, graph_a, content_digest),
        value_source(art_b, graph_b, content_digest),
        a_inlined_by_loader=art_a.inlined_by_loader,
        b_inlined_by_loader=art_b.inlined_by_loader,
    )
    return StaticDiff(art_a, art_b, graph_a, graph_b, sig_a, sig_b, diff)


def _load_sides(ref_a: ArtifactRef, ref_b: ArtifactRef, allow_unsafe_ops: bool) -> tuple[LoadedSide, LoadedSide]:
    """Both sides loaded and their op graphs built: two TF2 SavedModels in two processes at once
    (TensorFlow's loader keeps one core busy for tens of seconds on a large model); any other kind
    is parsed from its files in a moment, here. A side without a signature of its own (a training
    checkpoint) is never a TF2 SavedModel, so what it borrows from the other loads as before."""
    # ram:// lives in this process's memory: a child would find nothing there
    apart = all(loads_by_running(ref) and not ref.path.startswith("ram://") for ref in (ref_a, ref_b))
    if apart:
        return load_side_by_side(ref_a, ref_b, allow_unsafe_ops)
    return load_with_graph(ref_a, allow_unsafe_ops), load_with_graph(ref_b, allow_unsafe_ops)
