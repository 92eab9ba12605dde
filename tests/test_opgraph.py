"""The op graph: edges, order and JSON form (no TF), then built from real graphs (TF, in-process).

TensorFlow is imported once per test process, through the module-scoped ``tf`` fixture, and
only by the tests marked slow; the first half of this file runs without it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tracer.opgraph import OpGraph, tensor_op, tensor_slot


def node(name: str, op_type: str, inputs: list[str] | None = None, control: list[str] | None = None,
         outputs: int = 1) -> dict[str, Any]:
    info = {"dtype": "float32", "shape": [None, 2], "capturable": True, "reason": ""}
    return {"name": name, "op": op_type, "device": "", "scope": name.rpartition("/")[0], "attrs": {},
            "inputs": inputs or [], "control_inputs": control or [], "outputs": [dict(info) for _ in range(outputs)]}


# --------------------------------------------------------------------------- without TensorFlow


def test_tensor_names() -> None:
    assert (tensor_op("a/b:1"), tensor_slot("a/b:1")) == ("a/b", 1)
    assert (tensor_op("a/b"), tensor_slot("a/b")) == ("a/b", 0)
    assert tensor_op("^init/c") == "init/c"


def test_edges_carry_slot_index_and_control_flag() -> None:
    g = OpGraph.from_json({"inputs": {}, "outputs": {"out": "b:0"}, "nodes": [
        node("b", "AddV2", ["a:1", "a:0"], control=["c"]),
        node("a", "Split", outputs=2),
        node("c", "NoOp", outputs=0),
    ]})
    assert g.g.edges["a", "b"] == {"tensors": [(1, 0), (0, 1)], "control": False}
    assert g.g.edges["c", "b"] == {"tensors": [], "control": True}
    assert g.topo_order() == ["a", "c", "b"]
    assert [name for name, _ in g.tensors()] == ["a:0", "a:1", "b:0"]
    assert g.data_inputs("b") == ["a:1", "a:0"]
    assert g.output_info("a:1") == {"dtype": "float32", "shape": [None, 2], "capturable": True, "reason": ""}


def test_topological_order_is_deterministic_and_ignores_loop_back_edges() -> None:
    g = OpGraph.from_json({"inputs": {"x": "x:0"}, "outputs": {}, "nodes": [
        node("loop/merge", "Merge", ["loop/enter:0", "loop/next:0"]),
        node("loop/next", "NextIteration", ["loop/body:0"]),
        node("loop/body", "Neg", ["loop/merge:0"]),
        node("loop/enter", "Enter", ["x:0"]),
        node("x", "Placeholder"),
    ]})
    assert g.topo_order() == ["x", "loop/enter", "loop/merge", "loop/body", "loop/next"]
    assert g.fed_ops() == {"x"}


def test_shape_derived_ops_follow_shapes_not_values_and_loops() -> None:
    """A batch index built from the input's shape follows the batch size; a gather by it
    reads values; a loop counter fed back from a value-dependent body depends on values too."""
    g = OpGraph.from_json({"inputs": {"x": "x:0"}, "outputs": {"y": "gather:0"}, "nodes": [
        node("x", "Placeholder"),
        node("w", "Const"),
        node("shape", "Shape", ["x:0"]),
        node("n", "StridedSlice", ["shape:0"]),
        node("index", "Range", ["n:0"]),
        node("zeros", "ZerosLike", ["x:0"]),
        node("matmul", "MatMul", ["x:0", "w:0"]),
        node("gather", "GatherV2", ["matmul:0", "index:0"]),
        node("loop/enter", "Enter", ["w:0"]),
        node("loop/merge", "Merge", ["loop/enter:0", "loop/next:0"]),
        node("loop/body", "AddV2", ["loop/merge:0", "matmul:0"]),
        node("loop/next", "NextIteration", ["loop/body:0"]),
        node("counted", "Range", ["loop/merge:0"]),
    ]})
    assert g.shape_derived_ops() == {"shape", "n", "index", "zeros"}

def test_a_count_of_boxes_read_from_a_shape_depends_on_values_not_the_batch() -> None:
    """``num_detections = tf.shape(nms_indices)[0]``: the Shape reads an NMS's output, whose length
    the scores decide. It was taken for the batch size, and the output left "not compared" at
    batch 1 vs 8. The batch index from the input's own shape still follows the batch."""
    g = OpGraph.from_json({"inputs": {"x": "x:0"}, "outputs": {"n": "count:0", "rows": "index:0"}, "nodes": [
        node("x", "Placeholder"),
        node("scores", "Sigmoid", ["x:0"]),
        node("nms", "NonMaxSuppressionV3", ["x:0", "scores:0"]),
        node("kept", "GatherV2", ["x:0", "nms:0"]),
        node("kept_shape", "Shape", ["kept:0"]),
        node("count", "StridedSlice", ["kept_shape:0"]),
        node("shape", "Shape", ["x:0"]),
        node("n", "StridedSlice", ["shape:0"]),
        node("index", "Range", ["n:0"]),
    ]})
    assert g.batch_dependent_ops() == {"shape": "shape", "n": "shape", "index": "shape"}


def test_the_shape_of_a_tf1_map_fn_stack_is_the_batch_size_not_a_count_of_values() -> None:
    """A TF1 ``map_fn`` stacks its results with ``TensorArrayGatherV3(ta, Range(0, batch), flow)``:
    value-sized by its indices only. Its TensorArray holds values, yet its length is the batch
    size, so the next ``map_fn``'s ``Range(0, tf.shape(stacked)[0])`` is a batch index (it was
    taken for a count of values and judged an origin at batch 1 vs 8). A Where after the stack
    still sets its length from values: a count read from its shape is compared."""
    g = OpGraph.from_json({"inputs": {"x": "x:0"}, "outputs": {"y": "map2/gather:0", "n": "count:0"}, "nodes": [
        node("x", "Placeholder"),
        node("shape", "Shape", ["x:0"]),
        node("n", "StridedSlice", ["shape:0"]),
        node("map/ta", "TensorArrayV3", ["n:0"], outputs=2),
        node("map/unstack/range", "Range", ["n:0"]),
        node("map/scatter", "TensorArrayScatterV3", ["map/ta:0", "map/unstack/range:0", "x:0", "map/ta:1"]),
        node("map/read", "TensorArrayReadV3", ["map/ta:0", "map/unstack/range:0", "map/scatter:0"]),
        node("map/body", "Relu", ["map/read:0"]),
        node("map/out", "TensorArrayV3", ["n:0"], outputs=2),
        node("map/write", "TensorArrayWriteV3", ["map/out:0", "map/unstack/range:0", "map/body:0", "map/out:1"]),
        node("map/stack/range", "Range", ["n:0"]),
        node("map/stack", "TensorArrayGatherV3", ["map/out:0", "map/stack/range:0", "map/write:0"]),
        node("map2/shape", "Shape", ["map/stack:0"]),
        node("map2/n", "StridedSlice", ["map2/shape:0"]),
        node("map2/range", "Range", ["map2/n:0"]),
        node("map2/gather", "GatherV2", ["map/stack:0", "map2/range:0"]),
        node("kept", "Where", ["map/stack:0"]),
        node("kept_shape", "Shape", ["kept:0"]),
        node("count", "StridedSlice", ["kept_shape:0"]),
    ]})
    derived = g.batch_dependent_ops()
    assert {"map2/shape", "map2/n", "map2/range", "map/unstack/range", "map/stack/range"} <= set(derived)
    assert {"map/stack", "map2/gather", "kept", "kept_shape", "count"}.isdisjoint(derived)


def test_index_arithmetic_offset_by_the_batch_position_is_batch_dependent() -> None:
    """``argmax + Range(batch)*K`` indexes the flattened batch: its values depend on each row's
    position in its run (a gather index into the whole batch), so it is batch-dependent like the
    Range; the gather it feeds, the float reshape by a shape-derived target and a float op
    reading the offset are not: their values are the examples' own."""
    def int_node(*args: Any) -> dict[str, Any]:
        n = node(*args)
        n["outputs"][0]["dtype"] = "int32"
        return n

    g = OpGraph.from_json({"inputs": {"x": "x:0"}, "outputs": {"y": "gather:0", "z": "scaled:0"}, "nodes": [
        node("x", "Placeholder"),
        int_node("k", "Const"),
        int_node("shape", "Shape", ["x:0"]),
        int_node("n", "StridedSlice", ["shape:0"]),
        int_node("rows", "Range", ["n:0"]),
        int_node("offset", "Mul", ["rows:0", "k:0"]),
        int_node("argmax", "ArgMax", ["x:0"]),
        int_node("index", "AddV2", ["argmax:0", "offset:0"]),
        int_node("index/flat", "Reshape", ["index:0", "shape:0"]),
        node("flat", "Reshape", ["x:0", "shape:0"]),
        node("gather", "GatherV2", ["flat:0", "index/flat:0"]),
        node("scaled", "Mul", ["x:0", "offset:0"]),
    ]})
    assert g.batch_dependent_ops() == {"shape": "shape", "n": "shape", "rows": "shape", "offset": "shape",
                                       "index": "offset", "index/flat": "offset"}
    assert g.shape_derived_ops() == {"shape", "n", "rows", "offset", "index", "index/flat"}


def test_ops_in_while_frames_cross_control_edges_and_stop_at_exit() -> None:
    """Inside a TF1 while-loop frame: the Enter, what it reaches through data *and* control
    edges (a loop-body constant hangs off the pivot by a control edge only), never the Exit or
    what reads it; the capture's fetch plan marks exactly those as not capturable."""
    from tracer.captures.fetch_plan import WHILE_FRAME_REASON, fetch_plan  # noqa: PLC0415

    g = OpGraph.from_json({"inputs": {"x": "x:0"}, "outputs": {"y": "after:0"}, "nodes": [
        node("x", "Placeholder"),
        node("loop/enter", "Enter", ["x:0"]),
        node("loop/merge", "Merge", ["loop/enter:0", "loop/next:0"]),
        node("loop/pivot", "Identity", ["loop/merge:0"]),
        node("loop/one", "Const", control=["loop/pivot"]),
        node("loop/body", "AddV2", ["loop/pivot:0", "loop/one:0"]),
        node("loop/next", "NextIteration", ["loop/body:0"]),
        node("loop/exit", "Exit", ["loop/merge:0"]),
        node("after", "Relu", ["loop/exit:0"]),
    ]})
    inside = {"loop/enter", "loop/merge", "loop/pivot", "loop/one", "loop/body", "loop/next"}
    assert g.while_frame_ops() == inside
    plan = fetch_plan(g, [(0, 2)], 1 << 30)
    assert {tensor_op(t) for t, why in plan.uncaptured.items() if why == WHILE_FRAME_REASON} == inside
    assert plan.names == ["x:0", "loop/exit:0", "after:0"]


def test_state_changing_ops_follow_tensorflows_kernels() -> None:
    """One list for the observer and diagnose's replays: what writes a variable or a resource
    that outlives the run counts; a stack or TensorArray (per-step containers) does not."""
    from tracer.captures.observer import stateful_ops  # noqa: PLC0415
    from tracer.diagnosis.replays import state_changing_ops  # noqa: PLC0415
    from tracer.optypes import changes_state  # noqa: PLC0415

    assert [changes_state(t) for t in ("AssignAddVariableOp", "ScatterMin", "CountUpTo", "ResourceApplyAdam",
                                       "QueueDequeueV2", "StackPushV2", "TensorArrayWriteV3", "MatMul")] == [
        True, True, True, True, True, False, False, False]
    doc = {"inputs": {"x": "x:0"}, "outputs": {"y": "y:0"}, "nodes": [
        node("x", "Placeholder"),
        node("count", "VariableV2"),
        node("bump", "CountUpTo", ["count:0"]),
        node("ta", "TensorArrayV3", ["x:0"]),
        node("ta/write", "TensorArrayWriteV3", ["ta:0", "x:0"]),
        node("noise", "RandomUniform", ["x:0"]),
        node("y", "AddN", ["x:0", "bump:0", "ta/write:0", "noise:0"]),
    ]}
    assert stateful_ops(OpGraph.from_json(doc)) == ["bump"]
    assert state_changing_ops(doc) == {"state": ["bump"], "random": ["noise"]}


def test_a_queue_whose_dequeued_batch_is_fed_changes_no_state() -> None:
    """The CIFAR-10 tutorial's graph traced from its dequeued batch (``--input-names
    shuffle_batch:0``): the dequeue is fed, never runs, and takes nothing from the queue. Listed, it
    made the capture say the model changes its own state and diagnose blame the state for any
    run-to-run difference. A dequeue that does run changes the queue, whichever variant it is."""
    from tracer.captures.observer import stateful_ops  # noqa: PLC0415
    from tracer.diagnosis.replays import state_changing_ops  # noqa: PLC0415
    from tracer.optypes import changes_state  # noqa: PLC0415

    assert all(changes_state(t) for t in ("QueueDequeueManyV2", "QueueDequeueUpToV2", "QueueDequeue",
                                          "QueueEnqueueManyV2", "IteratorGetNextSync"))
    doc = {"inputs": {"shuffle_batch": "shuffle_batch:0"}, "outputs": {"probs": "probs:0"}, "nodes": [
        node("shuffle_batch", "QueueDequeueManyV2"),
        node("w", "VariableV2"),
        node("logits", "MatMul", ["shuffle_batch:0", "w:0"]),
        node("probs", "Softmax", ["logits:0"]),
    ]}
    assert stateful_ops(OpGraph.from_json(doc)) == []
    assert state_changing_ops(doc) == {"state": [], "random": []}
    fed_elsewhere = {**doc, "inputs": {"x": "logits:0"}}
    assert stateful_ops(OpGraph.from_json(fed_elsewhere)) == ["shuffle_batch"]
    assert state_changing_ops(fed_elsewhere) == {"state": ["shuffle_batch"], "random": []}


def test_json_round_trip_keeps_everything() -> None:
    doc = {"inputs": {"x": "x:0"}, "outputs": {"y": "y:0"}, "nodes": [
        node("x", "Placeholder"), node("s/neg", "Neg", ["x:0"]), node("y", "Identity", ["s/neg:0"], control=["x"]),
    ]}
    g = OpGraph.from_json(doc)
    assert g.to_json() == doc
    assert OpGraph.from_json(json.loads(json.dumps(g.to_json()))).to_json() == doc


# --------------------------------------------------------------------------- from real graphs


@pytest.fixture(scope="module")
def tf() -> Any:
    from tracer._tf import tf as import_tf  # noqa: PLC0415 - TensorFlow only for the slow tests

    return import_tf()


def _opgraph(path: Path | str, **ref: Any) -> tuple[OpGraph, Any]:
    from tracer.artifacts.loader import ArtifactRef, load  # noqa: PLC0415
    from tracer.artifacts.graph import build_opgraph  # noqa: PLC0415

    return build_opgraph(load(ArtifactRef(str(path), **ref)))


DETECTOR_OPS = ["AddV2", "BiasAdd", "CombinedNonMaxSuppression", "Const", "Conv2D", "Exp", "FusedBatchNormV3",
                "Identity", "MatMul", "Mul", "Pack", "Placeholder", "RealDiv", "Relu", "Reshape", "Softmax",
                "StridedSlice", "Sub", "Unpack", "VariableV2"]


@pytest.mark.slow
def test_checkpoint_graph_is_pruned_to_inference(tf: Any, models: dict[str, Path]) -> None:
    from tracer.artifacts.loader import load  # noqa: PLC0415
    from tracer.artifacts.graph import import_graph  # noqa: PLC0415

    g, sig = _opgraph(models["detector_ckpt"])
    everything = {op.name for op in import_graph(load(str(models["detector_ckpt"]))).get_operations()}
    assert (len(g), len(everything)) == (130, 231)
    assert sorted({g.op_type(n) for n in g.topo_order()}) == DETECTOR_OPS
    assert not [n for n in g.topo_order() if n.startswith(("save/", "init")) or "/Assign" in n or "Initializer" in n]
    assert {"save/restore_all", "save/SaveV2", "block1/conv/weights/Assign"} <= everything
    assert g.inputs == {"images": "images:0"}
    assert g.outputs == {key: f"outputs/{key}:0" for key in
                         ("boxes", "detection_boxes", "detection_classes", "detection_scores", "num_detections",
                          "scores")}
    assert sig.outputs["scores"].shape == (None, 64, 4)


@pytest.mark.slow
def test_topological_order_respects_every_edge(tf: Any, models: dict[str, Path]) -> None:
    g, _ = _opgraph(models["detector_ckpt"])
    position = {name: i for i, name in enumerate(g.topo_order())}
    assert len(position) == 130
    assert all(position[u] < position[v] for u, v in g.g.edges)
    assert g.topo_order()[:3] == ["anchors/anchors", "block1/bn/beta", "block1/bn/beta/read"]
    assert position["block1/conv/Conv2D"] < position["block1/bn/FusedBatchNormV3"] < position["block2/conv/Conv2D"]


@pytest.mark.slow
def test_node_data_shapes_dtypes_scopes_and_edges(tf: Any, models: dict[str, Path]) -> None:
    g, _ = _opgraph(models["detector_ckpt"])
    assert g.node("block1/conv/Conv2D") == {
        "op": "Conv2D",
        "device": "",
        "scope": "block1/conv",
        "attrs": {"T": "float32", "data_format": "NHWC", "dilations": [1, 1, 1, 1], "explicit_paddings": [],
                  "padding": "SAME", "strides": [1, 2, 2, 1], "use_cudnn_on_gpu": True},
        # at Conv2D's OpDef defaults (padding, strides, T have none): another release lacking one is no change
        "attr_defaults": ["data_format", "dilations", "explicit_paddings", "use_cudnn_on_gpu"],
        "inputs": ["images:0", "block1/conv/weights/read:0"],
        "control_inputs": [],
        "outputs": [{"dtype": "float32", "shape": [None, 32, 32, 16], "capturable": True, "reason": ""}],
    }
    bn = g.node("block4/bn/FusedBatchNormV3")
    assert (bn["attrs"]["epsilon"], bn["attrs"]["is_training"], bn["scope"]) == (0.001, False, "block4/bn")
    assert [o["shape"] for o in bn["outputs"]][:3] == [[None, 8, 8, 128], [128], [128]]
    assert len(bn["outputs"]) == 6
    assert g.node("block1/conv/weights")["outputs"][0]["shape"] == [3, 3, 3, 16]
    assert g.node("images")["scope"] == ""
    anchors = g.node("anchors/anchors")["attrs"]["value"]
    assert (anchors["dtype"], anchors["shape"], len(anchors["sha1"])) == ("float32", [64, 4], 40)
    nms = "nms/combined_non_max_suppression/CombinedNonMaxSuppression"
    assert [(o["dtype"], o["shape"]) for o in g.node(nms)["outputs"]] == [
        ("float32", [None, 10, 4]), ("float32", [None, 10]), ("float32", [None, 10]), ("int32", [None]),
    ]
    assert g.g.edges["block1/conv/Conv2D", "block1/bn/FusedBatchNormV3"] == {"tensors": [(0, 0)], "control": False}
    assert g.g.edges["block1/bn/moving_variance/read", "block1/bn/FusedBatchNormV3"]["tensors"] == [(0, 4)]
    readers = {v: g.g.edges[nms, v]["tensors"] for v in g.g.successors(nms)}
    assert readers == {"outputs/detection_boxes": [(0, 0)], "outputs/detection_scores": [(1, 0)],
                       "outputs/detection_classes": [(2, 0)], "outputs/num_detections": [(3, 0)]}


@pytest.mark.slow
def test_pruning_stops_at_the_fed_tensors(tf: Any, real_models: dict[str, Path]) -> None:
    """half_plus_two feeds ``x:0``, an Identity whose own input is a ParseExample."""
    g, _ = _opgraph(real_models["half_plus_two"])
    assert sorted(g.g) == [
        "Add", "Mul", "a", "a/read", "add_1", "b", "b/read", "conv2d/BiasAdd", "conv2d/BiasAdd/ReadVariableOp",
        "conv2d/Conv2D", "conv2d/Conv2D/ReadVariableOp", "conv2d/bias", "conv2d/kernel", "strided_slice",
        "strided_slice/stack", "strided_slice/stack_1", "strided_slice/stack_2", "x", "y", "zeros",
    ]
    assert g.node("x")["op"] == "Identity"
    assert g.node("x")["inputs"] == ["ParseExample/ParseExample:0"]  # recorded, but its producer is pruned
    assert list(g.g.predecessors("x")) == []
    assert g.node("conv2d/kernel")["outputs"] == [
        {"dtype": "resource", "shape": [], "capturable": False, "reason": "a resource handle holds no values"},
    ]
    # the regress signature feeds the serialized tf.Example instead, so ParseExample is in
    regress, sig = _opgraph(real_models["half_plus_two"], signature="regress_x_to_y")
    assert {"tf_example", "ParseExample/ParseExample", "x"} <= set(regress.g)
    assert (len(g), len(regress), sig.inputs["inputs"].dtype) == (20, 29, "string")


@pytest.mark.slow
def test_control_edges_and_multi_output_slots_from_a_tf_graph(tf: Any) -> None:
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        left, right = tf.split(x, 2, axis=1, name="halves")
        check = tf.debugging.check_numerics(x, "finite", name="check")
        with tf.control_dependencies([check]), tf.name_scope("head"):
            out = tf.subtract(right, left, name="diff")
        tf.identity(out * 3.0, name="unused")
    g = OpGraph.from_tf_graph(graph, {"x": "x"}, {"y": "head/diff"})
    assert g.inputs == {"x": "x:0"} and g.outputs == {"y": "head/diff:0"}
    assert g.g.edges["halves", "head/diff"] == {"tensors": [(1, 0), (0, 1)], "control": False}
    assert g.g.edges["check", "head/diff"] == {"tensors": [], "control": True}
    assert g.node("head/diff")["control_inputs"] == ["check"]
    assert g.node("head/diff")["scope"] == "head"
    assert "unused" not in g and "mul" not in g
    assert g.topo_order()[-1] == "head/diff"
    with pytest.raises(KeyError, match="nope"):
        OpGraph.from_tf_graph(graph, {}, {"y": "nope:0"})


@pytest.mark.slow
def test_real_graph_survives_json(tf: Any, models: dict[str, Path]) -> None:
    g, _ = _opgraph(models["detector_tf2"])
    doc = json.loads(json.dumps(g.to_json()))
    again = OpGraph.from_json(doc)
    assert again.to_json() == doc
    assert again.topo_order() == g.topo_order()
    assert sorted(again.g.edges(data=True)) == sorted(
        (u, v, {"tensors": [tuple(t) for t in d["tensors"]], "control": d["control"]})
        for u, v, d in g.g.edges(data=True)
    )
    assert "StatefulPartitionedCall/detector/block1/conv/Conv2D" in again
    assert "StatefulPartitionedCall" not in {again.op_type(n) for n in again.topo_order()}


def test_the_exit_of_a_loop_nested_in_another_loops_body_is_inside_the_outer_loop() -> None:
    """A Model Garden RetinaNet (per-class NMS: a loop in a loop's body, as TensorFlow lowers a
    While whose body holds another): the inner loop's Exit and what reads it run once per outer
    iteration. Fetching that Exit failed the whole run ("Retval[11149] has already been set",
    2026-12-02), and the walk that stopped at every Exit had planned it. Only the outer Exit and
    what follows it are outside."""
    from tracer.captures.fetch_plan import WHILE_FRAME_REASON, fetch_plan  # noqa: PLC0415

    g = OpGraph.from_json({"inputs": {"x": "x:0"}, "outputs": {"y": "after:0"}, "nodes": [
        node("x", "Placeholder"),
        node("outer/enter", "Enter", ["x:0"]),
        node("outer/merge", "Merge", ["outer/enter:0", "outer/next:0"]),
        node("outer/pivot", "Identity", ["outer/merge:0"]),
        node("inner/enter", "Enter", ["outer/pivot:0"]),
        node("inner/merge", "Merge", ["inner/enter:0", "inner/next:0"]),
        node("inner/body", "Relu", ["inner/merge:0"]),
        node("inner/next", "NextIteration", ["inner/body:0"]),
        node("inner/exit", "Exit", ["inner/merge:0"]),
        node("outer/body", "AddV2", ["inner/exit:0", "outer/pivot:0"]),
        node("outer/next", "NextIteration", ["outer/body:0"]),
        node("outer/exit", "Exit", ["outer/merge:0"]),
        node("after", "Relu", ["outer/exit:0"]),
    ]})
    outside = {"x", "outer/exit", "after"}
    assert g.while_frame_ops() == set(g.g.nodes) - outside
    assert "inner/exit" in g.while_frame_ops() and "outer/body" in g.while_frame_ops()
    plan = fetch_plan(g, [(0, 2)], 1 << 30)
    assert plan.names == ["x:0", "outer/exit:0", "after:0"]
    assert plan.uncaptured["inner/exit:0"] == WHILE_FRAME_REASON
