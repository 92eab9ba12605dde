"""Divergence classification on hand-built graphs (fast, no TensorFlow)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tracer.comparison.align import ROLE_COMPARED, ROLE_REWRITTEN, Alignment, NodeAlignment, TensorPair
from tracer.comparison.divergence import Divergence, NodeResult, Tolerance, classify
from tracer.comparison.pairing import cannot_take_examples, inputs_from
from tracer.comparison.pipeline import to_isolate
from tracer.errors import TftraceError
from tracer.metrics import compare_arrays
from tracer.opgraph import OpGraph


def _graph(chain: list[tuple[str, str, list[str]]]) -> OpGraph:
    nodes = [
        {"name": name, "op": op, "device": "", "scope": "", "attrs": {}, "inputs": [f"{i}:0" for i in inputs],
         "control_inputs": [], "outputs": [{"dtype": "float32", "shape": [4], "capturable": True, "reason": ""}]}
        for name, op, inputs in chain
    ]
    return OpGraph.from_json({"inputs": {"x": "x:0"}, "outputs": {"y": f"{chain[-1][0]}:0"}, "nodes": nodes})


GRAPH = _graph([
    ("x", "Placeholder", []),
    ("w", "Const", []),
    ("conv", "Conv2D", ["x", "w"]),
    ("bn", "FusedBatchNormV3", ["conv"]),
    ("relu", "Relu", ["bn"]),
    ("out", "Identity", ["relu"]),
])
BASE = np.array([1.0, 2.0, 3.0, 4.0], np.float32)


def _run(deltas: dict[str, float], roles: dict[str, str] | None = None, noise: dict[str, float] | None = None,
         drawn_at_load: frozenset[str] = frozenset()):
    roles = roles or {}
    nodes, metrics = {}, {}
    for op in GRAPH.topo_order():
        pair = TensorPair(f"{op}:0", f"{op}:0", "name", True)
        nodes[op] = NodeAlignment(op, op, "name", roles.get(op, ROLE_COMPARED), [pair])
        b = BASE.copy()
        b[0] += deltas.get(op, 0.0)
        metrics[f"{op}:0"] = compare_arrays(BASE, b, rtols=(1e-5,))
    return classify(GRAPH, Alignment(nodes, []), metrics, Tolerance(), noise, drawn_at_load=drawn_at_load)


def test_identical_everywhere():
    result = _run({})
    assert result.verdict == "identical"
    assert result.first_bitwise is None and result.first_beyond_tolerance is None and result.origins == []


def test_origin_then_propagated_with_amplification():
    result = _run({"bn": 1e-3, "relu": 1e-2, "out": 1e-2})
    assert result.nodes["conv"].status == "identical"
    assert result.nodes["bn"].status == "origin" and result.nodes["bn"].bitwise_origin
    assert result.nodes["relu"].status == "propagated"
    assert result.first_bitwise.name == "bn" and result.first_beyond_tolerance.name == "bn"
    assert [r.name for r in result.origins] == ["bn"]
    assert result.nodes["relu"].amplification is not None and result.nodes["relu"].amplification > 5
    assert result.nodes["bn"].amplification is None  # nothing upstream to amplify
    assert result.verdict == "diverged"


def test_bitwise_origin_within_tolerance_is_reported_but_not_beyond():
    result = _run({"conv": 1e-7, "bn": 1e-7, "relu": 1e-7, "out": 1e-7})
    assert result.nodes["conv"].status == "within_tolerance"
    assert result.first_bitwise.name == "conv"
    assert result.first_beyond_tolerance is None
    assert result.verdict == "within_tolerance"


def test_tolerance_origin_whose_inputs_differ_a_little():
    result = _run({"conv": 1e-7, "bn": 1e-2, "relu": 1e-2, "out": 1e-2})
    assert result.first_bitwise.name == "conv"
    assert result.first_beyond_tolerance.name == "bn"
    assert result.nodes["bn"].status == "origin" and not result.nodes["bn"].bitwise_origin


def test_rewritten_members_are_looked_through():
    # conv rescaled by a fold: it differs wildly, yet bn (judged against x) is the origin.
    result = _run({"conv": 5.0, "bn": 1e-3, "relu": 1e-3, "out": 1e-3}, roles={"conv": ROLE_REWRITTEN})
    assert result.nodes["conv"].status == "rewritten"
    assert result.nodes["bn"].status == "origin"
    assert result.nodes["bn"].frontier == ["w", "x"]
    assert result.first_bitwise.name == "bn"


def test_noise_is_never_an_origin():
    deltas = {"bn": 1e-3, "relu": 1e-3, "out": 1e-3}
    noisy = _run(deltas, noise={"bn:0": 2e-3, "relu:0": 2e-3, "out:0": 2e-3})
    assert noisy.nodes["bn"].status == "within_tolerance" and noisy.nodes["bn"].within_noise
    assert noisy.first_bitwise is None and noisy.origins == []
    quiet = _run(deltas, noise={"bn:0": 1e-5})
    assert quiet.nodes["bn"].status == "origin"


def test_a_value_drawn_anew_at_every_load_is_within_the_noise_whatever_its_draws_measured():
    """TF Serving's half_plus_two initialises a kernel at random at every load: two loads of one
    side measured 0.42 apart, A and B 1.5 apart in their closest pair. Which pair of draws lands
    closest is chance (one time in fifteen with two runs a side), so the replay's finding decides:
    the op is within the noise, never an origin; an op the replay did not find so is judged as before."""
    w_drawn = _run({"w": 1.5}, noise={"w:0": 0.42}, drawn_at_load=frozenset({"w"}))
    assert w_drawn.nodes["w"].status == "within_tolerance" and w_drawn.nodes["w"].within_noise
    assert w_drawn.nodes["w"].reason == "its value is drawn anew at every load of the model"
    assert w_drawn.origins == [] and w_drawn.verdict == "within_noise"
    assert _run({"w": 1.5}, noise={"w:0": 0.42}).nodes["w"].status == "origin"


def test_per_tensor_tolerance_override():
    loose = classify.__globals__["Tolerance"](overrides=(("bn", 1e-2, 1e-2), ("relu", 1e-2, 1e-2), ("out", 1e-2, 1e-2)))
    nodes, metrics = {}, {}
    for op in GRAPH.topo_order():
        pair = TensorPair(f"{op}:0", f"{op}:0", "name", True)
        nodes[op] = NodeAlignment(op, op, "name", ROLE_COMPARED, [pair])
        b = BASE.copy()
        b[0] += 1e-3 if op in ("bn", "relu", "out") else 0.0
        metrics[f"{op}:0"] = compare_arrays(BASE, b, rtols=(1e-5, 1e-2))
    result = classify(GRAPH, Alignment(nodes, []), metrics, loose)
    assert result.nodes["bn"].status == "within_tolerance"
    assert result.verdict == "within_tolerance"


def test_the_first_divergences_are_isolated_whatever_their_rank() -> None:
    """An unrolled LSTM at batch 1 vs 8 had 12 origins; its first MatMul, ranked twelfth by relative
    error, fell outside the default --isolate 5 and the report's headline said "not isolated"."""
    measured = object()  # any metrics: only whether there are some matters here
    ranked = [NodeResult(f"op{i}", "origin", f"op{i}:0", measured) for i in range(12)]  # type: ignore[arg-type]
    first = ranked[-1]
    unmeasured = NodeResult("nan_only", "origin", "nan_only:0", None)
    divergence = Divergence({r.name: r for r in ranked}, ranked + [unmeasured], first, first)
    assert [r.name for r in to_isolate(divergence, 5)] == ["op11", "op0", "op1", "op2", "op3"]  # the first, first
    assert to_isolate(divergence, 0) == []  # --isolate 0: nothing replayed, as asked
    assert [r.name for r in to_isolate(divergence, 20)] == ["op11"] + [f"op{i}" for i in range(11)]
    # a batch norm past the first divergence whose batch the sides do not share is replayed next (replay_choice)
    norm = NodeResult("bn", "propagated", "bn:0", measured)  # type: ignore[arg-type]
    assert [r.name for r in to_isolate(divergence, 3, norm)] == ["op11", "bn", "op0"]
    assert to_isolate(divergence, 0, norm) == []


def test_b_is_not_fed_without_an_input_that_a_could_not_keep(tmp_path: Path) -> None:
    """A's examples are B's: an input A's capture did not keep is said, not dropped (dropped, it
    surfaced as "the two signatures cannot be paired ... Map keys with --map")."""
    class Stub:
        inputs = {"words": "words:0"}
        uncaptured = {"words:0": "object tensor holding str values cannot be stored"}

        @staticmethod
        def has(name: str) -> bool:
            return False

    with pytest.raises(TftraceError, match=r"A's input 'words' was not kept in its capture \(object tensor holding "
                                           r"str values cannot be stored\), so B cannot be fed A's examples"):
        inputs_from(Stub(), tmp_path, {})  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_map_is_offered_only_when_b_refused_as_examples_keys() -> None:
    """B refusing A's examples: keys that differ are fixed by --map; an array whose key pairs but whose
    shape does not fit is not (the models take different inputs)."""
    keys = cannot_take_examples(TftraceError("r/inputs_from_a.npz has keys ['image'] but the signature expects "
                                             "['inputs']", "name the arrays after the signature input keys"))
    assert str(keys) == ("the two signatures cannot be paired: B cannot take A's examples (r/inputs_from_a.npz has "
                         "keys ['image'] but the signature expects ['inputs']). Map keys with --map A_KEY=B_KEY[,...], "
                         "or choose matching signatures with --a-signature/--b-signature.")
    shape = cannot_take_examples(TftraceError("input 'images' has shape [8, 32, 32, 3], the signature expects "
                                              "[?, 24, 24, 3]", "reshape the array to fit"))
    assert shape.fix == ("the inputs are paired, but the two models take different ones (another shape or dtype) and "
                         "both sides run on the same examples: compare two models that take the same input, or choose "
                         "B's signature that takes A's with --b-signature")
    assert "--map" not in str(shape)


# After a TF1 tf.map_fn: the input h unstacked into a TensorArray (scatter), a loop (not
# captured) that reads, computes and writes each row, and a gather whose flow input is the
# loop's Exit: a dummy scalar, identical on both sides whatever the loop wrote.
def _map_fn_graph() -> OpGraph:
    def node(name: str, op: str, inputs: list[str], outputs: tuple[str, ...] = ("float32",)) -> dict:
        return {"name": name, "op": op, "device": "", "scope": "", "attrs": {}, "inputs": inputs,
                "control_inputs": [], "outputs": [{"dtype": d, "shape": [4], "capturable": d == "float32",
                                                   "reason": ""} for d in outputs]}
    array = ("resource", "float32")
    return OpGraph.from_json({"inputs": {"x": "x:0"}, "outputs": {"y": "y:0"}, "nodes": [
        node("x", "Placeholder", []), node("h", "Relu", ["x:0"]), node("size", "Const", []), node("rows", "Const", []),
        node("ta_in", "TensorArrayV3", ["size:0"], array),
        node("scatter", "TensorArrayScatterV3", ["ta_in:0", "rows:0", "h:0", "ta_in:1"]),
        node("ta_out", "TensorArrayV3", ["size:0"], array),
        node("read_flow", "Enter", ["scatter:0"]), node("write_flow", "Enter", ["ta_out:1"]),
        node("read", "TensorArrayReadV3", ["ta_in:0", "rows:0", "read_flow:0"]), node("body", "Tanh", ["read:0"]),
        node("write", "TensorArrayWriteV3", ["ta_out:0", "rows:0", "body:0", "write_flow:0"]),
        node("exit_flow", "Exit", ["write:0"]),
        node("gather", "TensorArrayGatherV3", ["ta_out:0", "rows:0", "exit_flow:0"]),
        node("y", "Identity", ["gather:0"]),
    ]})


MAP_FN = _map_fn_graph()
IN_THE_LOOP = ("read_flow", "write_flow", "read", "body", "write")


def _run_map_fn(deltas: dict[str, float]):
    nodes, metrics = {}, {}
    for op in MAP_FN.topo_order():
        outputs = MAP_FN.node(op)["outputs"]
        slot = len(outputs) - 1  # a TensorArrayV3's flow: its handle holds no values
        tensor = f"{op}:{slot}"
        captured = op not in IN_THE_LOOP and outputs[slot]["capturable"]
        note = "" if captured else "A: inside a while-loop frame: a session cannot fetch it"
        nodes[op] = NodeAlignment(op, op, "name", ROLE_COMPARED, [TensorPair(tensor, tensor, "name", captured, note)])
        if captured:
            b = BASE.copy()
            b[0] += deltas.get(op, 0.0)
            metrics[tensor] = compare_arrays(BASE, b, rtols=(1e-5,))
    return classify(MAP_FN, Alignment(nodes, []), metrics, Tolerance())


def test_a_tensor_array_gather_is_judged_against_the_loops_inputs_not_its_flow():
    """A difference that reached the loop (an fp16 conv upstream) propagates through the gather;
    its inputs the flow (the loop's Exit) and the indices agree, but its data came from the loop."""
    result = _run_map_fn({"h": 1e-3, "gather": 1e-3, "y": 1e-3})
    assert result.nodes["exit_flow"].status == "identical" and result.nodes["scatter"].status == "identical"
    assert result.nodes["gather"].status == "propagated"
    assert result.nodes["gather"].frontier == ["h", "rows", "size"]
    assert [r.name for r in result.origins] == ["h"]


def test_a_difference_born_inside_the_loop_is_an_origin_at_the_gather():
    result = _run_map_fn({"gather": 1e-3, "y": 1e-3})
    assert result.nodes["gather"].status == "origin" and result.nodes["gather"].bitwise_origin
    assert [r.name for r in result.origins] == ["gather"]
