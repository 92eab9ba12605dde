"""The training graph named from a report alone (tracer.training), without running a model.

A batch norm in training mode normalises each row with its batch's statistics: that is the
difference's cause only where the sides do not share the batch (other batch sizes, or the other
side in inference mode). Two training graphs over the same batches normalise alike, so a
difference at the batch norm is its kernel's: oneDNN on against off on the same training
checkpoint (1.49e-08 at `conv1/BatchNorm/FusedBatchNormV3` of a tf-slim net) was once put to
the training graph, first among the causes, with "the batch norms' mode, not their kernel".
"""

from __future__ import annotations

from typing import Any

from tracer.causes import explain_comparison
from tracer.training import normalises_by_batch, training_graph

BN = "bn1/FusedBatchNormV3"


def _report(a_training: bool, b_training: bool, batches: tuple[int, int], knobs: tuple[str, str] = ("off", "off"),
            isolation: str = "own_error") -> dict[str, Any]:
    node = {"op": "FusedBatchNormV3", "b_op": "FusedBatchNormV3", "status": "origin",
            "attrs_a": {"is_training": a_training}, "attrs_b": {"is_training": b_training}}
    first = {"node": BN, "op": "FusedBatchNormV3", "max_abs": 1.49e-08,
             "isolation": {"verdict": isolation, "max_abs": 1.49e-08}}
    sides = {key: {"device": "cpu", "batch_size": size, "knobs": {"onednn": knob}, "environment": {}}
             for key, size, knob in (("a", batches[0], knobs[0]), ("b", batches[1], knobs[1]))}
    return {"verdict": "diverged", "sides": sides, "nodes": {BN: node}, "origins": [first],
            "first_divergence": first, "outputs": {}, "rewrites": []}


def test_a_batch_norm_normalises_by_its_batch_only_in_training_mode() -> None:
    assert normalises_by_batch("FusedBatchNormV3", {"is_training": True})
    assert not normalises_by_batch("FusedBatchNormV3", {"is_training": False})
    assert not normalises_by_batch("Conv2D", {"is_training": True}) and not normalises_by_batch(None, None)


def test_two_training_graphs_over_the_same_batches_are_not_the_training_graphs_doing() -> None:
    report = _report(True, True, (1, 1), knobs=("on", "off"))
    assert training_graph(report) is None
    assert explain_comparison(report)["causes"] == ["onednn"]


def test_a_training_graph_is_named_where_the_sides_do_not_share_the_batch() -> None:
    batches = _report(True, True, (1, 8), isolation="batch_statistics")
    evidence, norms = training_graph(batches)
    assert norms == {BN} and "the sides run different batch sizes, so the outputs differ" in evidence
    assert explain_comparison(batches)["causes"] == ["training_graph"]
    export = _report(True, False, (1, 1), isolation="batch_statistics")
    evidence, _ = training_graph(export)
    assert evidence.startswith("A's graph is a training graph") and "from B's inference graph" in evidence
