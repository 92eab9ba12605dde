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


def test_a_reduction_over_the_batch_axis_normalises_by_batch() -> None:
    """tf.nn.moments' Mean over [0, 1, 2] (or -4 of a rank-4 activation) couples a run's rows; a
    global average pool over [1, 2], or a reduction over the last axis, does not."""
    assert normalises_by_batch("Mean", {"keep_dims": True}, [0, 1, 2], 4)
    assert normalises_by_batch("Sum", {}, [-4, -3], 4) and normalises_by_batch("Max", {}, 0, 2)
    assert not normalises_by_batch("Mean", {}, [1, 2], 4) and not normalises_by_batch("Mean", {}, [-1], 4)
    assert not normalises_by_batch("Mean", {}, None, 4) and not normalises_by_batch("Relu", {}, [0], 4)
    assert not normalises_by_batch("Mean", {}, [True], 4)  # a boolean is no axis


def _moments(axes: list[int], source: str = "Placeholder", dtype: str = "float32", reason: str | None = None
             ) -> dict[str, Any]:
    """A report of x -> Mean(x, axes) -> sub(x, mean), the sub an origin at batch 1 against 8."""
    const = {"value": {"dtype": "int32", "shape": [len(axes)], "values": axes}}
    nodes = {
        "x": {"op": source, "b_op": source, "status": "identical", "inputs": [], "shape": [8, 4, 4, 3],
              "dtype": dtype, "attrs_a": {}, "attrs_b": {}, "topo_index": 0},
        "m/axes": {"op": "Const", "b_op": "Const", "status": "identical", "inputs": [], "attrs_a": const,
                   "attrs_b": const, "topo_index": 1},
        "m/mean": {"op": "Mean", "b_op": "Mean", "status": "not_compared", "inputs": ["x", "m/axes"], "reason": reason,
                   "attrs_a": {"keep_dims": True}, "attrs_b": {"keep_dims": True}, "topo_index": 2},
        "m/sub": {"op": "Sub", "b_op": "Sub", "status": "origin", "inputs": ["x", "m/mean"], "attrs_a": {},
                  "attrs_b": {}, "topo_index": 3},
    }
    first = {"node": "m/sub", "op": "Sub", "max_abs": 0.5, "isolation": {"verdict": "batch_statistics"}}
    sides = {key: {"device": "cpu", "batch_size": size, "knobs": {"onednn": "off"}, "environment": {}}
             for key, size in (("a", 1), ("b", 8))}
    return {"verdict": "diverged", "sides": sides, "nodes": nodes, "origins": [first], "first_divergence": first,
            "outputs": {}, "rewrites": []}


def test_an_origin_computed_from_a_mean_over_the_batch_is_the_training_graph() -> None:
    from tracer.training import coupled_in_report

    report = _moments([0, 1, 2])
    assert coupled_in_report(report, "m/sub", "a") == ["m/mean"] == coupled_in_report(report, "m/sub", "b")
    evidence, ops = training_graph(report)
    assert ops == {"m/sub", "m/mean"}
    assert evidence.startswith("both sides' graphs take statistics over the batch, as a batch norm in training mode "
                               "does: their `m/mean` (Mean) reduces over the batch axis (axis 0)")
    assert explain_comparison(report)["causes"] == ["training_graph"]
    assert training_graph(_moments([-4])) is not None  # axis -4 of a rank-4 activation is its batch axis


def test_a_mean_over_other_axes_or_of_a_weight_is_no_batch_statistic() -> None:
    from tracer.training import coupled_in_report

    # a pool over space; a weight's mean; a mean of integers (shape arithmetic); one inside a map_fn's body,
    # whose tensors are one example's (its axis 0 is no batch)
    for report in (_moments([1, 2]), _moments([0], source="Const"), _moments([0], dtype="int32"),
                   _moments([0], reason="A: inside a while-loop frame: a session cannot fetch it")):
        assert coupled_in_report(report, "m/sub", "a") == []
        assert training_graph(report) is None
