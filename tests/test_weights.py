"""An export whose weights differ from the checkpoint's: recognised as different weights, not as a
kernel's error, an export rewrite's or nothing at all.

The TF Object Detection API (and many users) export the exponential moving averages of the
weights: the training checkpoint holds ``w`` and ``w/ExponentialMovingAverage``, the SavedModel
holds the averages in ``w``. The fast tests pin down each rule on hand-built graphs; the slow ones
(marked ``slow``) build that export for real, with TF1 ref variables and with resource variables
(tests/fixtures/ema_export.py), and compare it with its checkpoint.
"""

from __future__ import annotations

import numpy as np

from tracer.comparison.align import ROLE_COMPARED, Alignment, NodeAlignment, TensorPair
from tracer.comparison.divergence import Tolerance, classify, flow_order
from tracer.comparison.judge import judge
from tracer.metrics import compare_arrays
from tracer.opgraph import OpGraph, weight_of, weight_reads


def _graph(nodes: list[tuple[str, str, list[str]]]) -> OpGraph:
    docs = [{"name": name, "op": op, "device": "", "scope": "", "attrs": {}, "inputs": [f"{i}:0" for i in inputs],
             "control_inputs": [], "outputs": [{"dtype": "float32", "shape": [4], "capturable": True, "reason": ""}]}
            for name, op, inputs in nodes]
    return OpGraph.from_json({"inputs": {"x": "x:0"}, "outputs": {"y": f"{nodes[-1][0]}:0"}, "nodes": docs})


# Two layers; the second layer's variable is named so that it sorts, and is placed by a plain
# topological order, before the first layer's: "a_late" is read last, "z_early" first.
TWO_LAYERS = _graph([
    ("x", "Placeholder", []),
    ("a_late", "VarHandleOp", []),
    ("z_early", "VarHandleOp", []),
    ("layer1/ReadVariableOp", "ReadVariableOp", ["z_early"]),
    ("layer1/MatMul", "MatMul", ["x", "layer1/ReadVariableOp"]),
    ("layer1/Relu", "Relu", ["layer1/MatMul"]),
    ("layer2/ReadVariableOp", "ReadVariableOp", ["a_late"]),
    ("layer2/MatMul", "MatMul", ["layer1/Relu", "layer2/ReadVariableOp"]),
    ("y", "Identity", ["layer2/MatMul"]),
])
BASE = np.array([1.0, 2.0, 3.0, 4.0], np.float32)


def test_a_weight_is_its_variable_or_constant_and_every_read_of_it() -> None:
    assert weight_of(TWO_LAYERS, "layer1/ReadVariableOp") == "z_early"
    assert weight_of(TWO_LAYERS, "z_early") == "z_early"
    assert weight_of(TWO_LAYERS, "layer1/MatMul") is None and weight_of(TWO_LAYERS, "y") is None  # y: Identity of a MatMul
    assert weight_reads(TWO_LAYERS, "a_late") == ["layer2/ReadVariableOp"]


def test_the_first_divergence_among_changed_weights_is_the_one_read_first() -> None:
    """Every weight differs; a plain topological order would name ``a_late`` (its name sorts
    first, and weights have no inputs to order them by). The computation reads ``z_early`` first."""
    assert TWO_LAYERS.topo_order().index("a_late") < TWO_LAYERS.topo_order().index("z_early")
    rank = flow_order(TWO_LAYERS)
    assert sorted(rank, key=rank.__getitem__) == [
        "x", "z_early", "layer1/ReadVariableOp", "layer1/MatMul", "layer1/Relu",
        "a_late", "layer2/ReadVariableOp", "layer2/MatMul", "y"]
    nodes, metrics = {}, {}
    for name in TWO_LAYERS.topo_order():
        nodes[name] = NodeAlignment(name, name, "name", ROLE_COMPARED, [TensorPair(f"{name}:0", f"{name}:0", "name", True)])
        moved = BASE + np.float32(0.0 if name in ("x",) else 0.5)
        metrics[f"{name}:0"] = compare_arrays(BASE, moved, rtols=(1e-5,))
    result = classify(TWO_LAYERS, Alignment(nodes, []), metrics, Tolerance())
    assert result.first_bitwise.name == "z_early" and result.first_beyond_tolerance.name == "z_early"
    assert {r.name for r in result.origins} == {"a_late", "z_early"}


class _Captured:
    """What the judge reads of a capture: ``has`` and ``tensor``."""

    def __init__(self, tensors: dict[str, np.ndarray]) -> None:
        self.tensors = tensors

    def has(self, name: str) -> bool:
        return name in self.tensors

    def tensor(self, name: str) -> np.ndarray:
        return self.tensors[name]


READ = {"a_tensor": "layer1/ReadVariableOp:0", "b_tensor": "layer1/ReadVariableOp:0", "a_op": "ReadVariableOp",
        "b_op": "ReadVariableOp", "inputs_identical": True, "reads_variable": True, "weight": "z_early"}
AVERAGE = BASE + np.float32(0.25)


def test_a_variable_loaded_with_other_values_is_weights_differ_not_its_kernel() -> None:
    """Each side's replay reproduces its own capture (the values are what each load restores), and
    the two differ: the artifacts hold different weights. No kernel computes a variable."""
    result = judge(BASE, AVERAGE, READ, _Captured({READ["a_tensor"]: BASE}), _Captured({READ["b_tensor"]: AVERAGE}))
    assert result.verdict == "weights_differ" and result.load_state is False
    assert result.max_abs == 0.25 and result.noise_max_abs == 0.0
    assert result.detail == ("the values A and B load into the variable `z_early`, which this op reads, differ by up "
                             "to 0.25 (rel 0.2, rel L2 0.0913); nothing computes them, so no kernel differs: the two "
                             "artifacts hold different weights")
    ref = {**READ, "a_tensor": "z_early:0", "b_tensor": "z_early:0", "a_op": "VariableV2", "b_op": "VariableV2"}
    assert judge(BASE, AVERAGE, ref, _Captured({"z_early:0": BASE})).detail.startswith(
        "the values A and B load into the variable `z_early` differ by up to 0.25")
    const = {**ref, "reads_variable": False, "a_op": "Const", "b_op": "Const"}
    assert judge(BASE, AVERAGE, const, _Captured({"z_early:0": BASE})).detail.startswith(
        "the values A's and B's graphs hold in the constant `z_early` differ by up to 0.25")


def test_a_variable_that_changes_from_load_to_load_is_still_load_state() -> None:
    """A's replay (a fresh load) differs from A's capture (another load): set at load, not restored."""
    result = judge(BASE, AVERAGE, READ, _Captured({READ["a_tensor"]: BASE + np.float32(1.0)}), None)
    assert result.verdict == "nondeterministic" and result.load_state is True


def test_an_op_that_computes_is_still_judged_by_its_kernel() -> None:
    conv = {k: v for k, v in READ.items() if k not in ("reads_variable", "weight")}
    result = judge(BASE, AVERAGE, {**conv, "a_op": "MatMul", "b_op": "MatMul"}, _Captured({READ["a_tensor"]: BASE}),
                   _Captured({READ["b_tensor"]: AVERAGE}))
    assert result.verdict == "own_error"
    assert result.detail.startswith("given identical inputs, B's MatMul kernel differs from A's by up to 0.25")
