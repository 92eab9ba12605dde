"""Graph matching and rewrite classification on small hand-built op graphs (no TensorFlow).

Each graph is an ``OpGraph.from_json`` document, the form every capture manifest stores, so
these tests run in milliseconds and pin down one rule each: how ops are paired (name,
signature, structure, through Identity plumbing) and which rewrite kind each difference gets.
The sample-model pairs that exercise the same rules on real exports are in
``test_diff_graph_cli.py``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from tracer.diff.records import GraphDiff, Rewrite
from tracer.diff.rewrites import REWRITE_KINDS, diff_graphs
from tracer.diff.match import canonical_tensor, match_graphs
from tracer.opgraph import OpGraph

# --------------------------------------------------------------------------- tiny graph builder


def op(
    name: str,
    op_type: str,
    inputs: Iterable[str] = (),
    *,
    attrs: dict[str, Any] | None = None,
    dtype: str = "float32",
    shape: list[int | None] | None = None,
    control: Iterable[str] = (),
    outputs: int = 1,
) -> dict[str, Any]:
    """One node of an op-graph document, with the fields ``OpGraph.to_json`` writes."""
    info = {"dtype": dtype, "shape": [None, 4] if shape is None else shape, "capturable": True, "reason": ""}
    return {
        "name": name,
        "op": op_type,
        "device": "",
        "scope": name.rsplit("/", 1)[0] if "/" in name else "",
        "attrs": {"T": dtype} if attrs is None else attrs,
        "inputs": list(inputs),
        "control_inputs": list(control),
        "outputs": [dict(info) for _ in range(outputs)],
    }


def const(name: str, sha1: str, shape: list[int] | None = None) -> dict[str, Any]:
    """A constant: the op graph keeps its dtype, shape and digest, not its bytes."""
    shape = [4, 4] if shape is None else shape
    return op(name, "Const", attrs={"dtype": "float32", "value": {"dtype": "float32", "shape": shape, "sha1": sha1}},
              shape=shape)


def variable(name: str, shape: list[int] | None = None) -> list[dict[str, Any]]:
    """A TF1 variable and its ``/read`` Identity."""
    shape = [4, 4] if shape is None else shape
    return [
        op(name, "VariableV2", attrs={"dtype": "float32", "shape": shape, "shared_name": ""}, shape=shape),
        op(f"{name}/read", "Identity", [f"{name}:0"], shape=shape),
    ]


def graph(nodes: list[dict[str, Any]], inputs: dict[str, str], outputs: dict[str, str]) -> OpGraph:
    return OpGraph.from_json({"inputs": inputs, "outputs": outputs, "nodes": nodes})


def dense_model(prefix: str = "", relu: str = "Relu", w: list[dict[str, Any]] | None = None) -> OpGraph:
    """x -> MatMul(x, w) -> BiasAdd(., b) -> Relu -> y, with TF1 variables."""
    p = prefix
    weights = w if w is not None else variable(f"{p}w")
    w_read = weights[-1]["name"]
    nodes = [
        op(f"{p}x", "Placeholder", attrs={"dtype": "float32", "shape": [None, 4]}),
        *weights,
        *variable(f"{p}b", [4]),
        op(f"{p}dense/MatMul", "MatMul", [f"{p}x:0", f"{w_read}:0"],
           attrs={"T": "float32", "transpose_a": False, "transpose_b": False}),
        op(f"{p}dense/BiasAdd", "BiasAdd", [f"{p}dense/MatMul:0", f"{p}b/read:0"],
           attrs={"T": "float32", "data_format": "NHWC"}),
        op(f"{p}dense/act", relu, [f"{p}dense/BiasAdd:0"]),
        op(f"{p}y", "Identity", [f"{p}dense/act:0"]),
    ]
    return graph(nodes, {"x": f"{p}x:0"}, {"y": f"{p}y:0"})


def kinds(diff: GraphDiff) -> list[str]:
    return [r.kind for r in diff.rewrites]


def sha(array: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(array).tobytes()).hexdigest()


def values(table: dict[str, np.ndarray]) -> Callable[[str], np.ndarray | None]:
    return table.get


# --------------------------------------------------------------------------- matching


def test_identical_graphs_match_by_name_with_no_rewrites() -> None:
    diff = diff_graphs(dense_model(), dense_model())
    assert diff.matched == 9
    assert diff.only_in_a == diff.only_in_b == []
    assert diff.rewrites == []
    assert {reason for _, reason in diff.pairs.values()} == {"name"}
    assert diff.renamed() == {}


def test_renamed_graph_is_matched_by_signature_then_structure() -> None:
    a, b = dense_model(), dense_model(prefix="export/")
    pairs = match_graphs(a, b)
    assert pairs == {
        "x": ("export/x", "signature"),
        "y": ("export/y", "signature"),
        "dense/act": ("export/dense/act", "structure"),
        "dense/BiasAdd": ("export/dense/BiasAdd", "structure"),
        "dense/MatMul": ("export/dense/MatMul", "structure"),
        "w": ("export/w", "structure"),
        "w/read": ("export/w/read", "structure"),
        "b": ("export/b", "structure"),
        "b/read": ("export/b/read", "structure"),
    }
    diff = diff_graphs(a, b)
    assert diff.rewrites == []
    assert diff.only_in_a == diff.only_in_b == []


def test_single_input_and_output_anchor_the_match_even_under_other_keys() -> None:
    a = dense_model()
    b_doc = dense_model(prefix="m/").to_json()
    b = graph(b_doc["nodes"], {"images": "m/x:0"}, {"logits": "m/y:0"})
    diff = diff_graphs(a, b)
    assert diff.matched == 9
    assert diff.pairs["x"] == ("m/x", "signature")
    assert diff.pairs["dense/MatMul"] == ("m/dense/MatMul", "structure")
    assert diff.rewrites == []


def test_structure_looks_through_identity_and_read_variable_plumbing() -> None:
    """TF1 ``w -> w/read`` against TF2 inlined ``VarHandleOp -> Identity -> ReadVariableOp``."""
    tf2_weights = [
        op("fn/w", "VarHandleOp", attrs={"dtype": "float32", "shape": [4, 4], "shared_name": "fn/w"},
           dtype="resource", shape=[]),
        op("Func/input/_1", "Identity", ["fn/w:0"], attrs={"T": "resource"}, dtype="resource", shape=[]),
        op("fn/dense/MatMul/ReadVariableOp", "ReadVariableOp", ["Func/input/_1:0"], attrs={"dtype": "float32"},
           shape=[4, 4]),
    ]
    a = dense_model()
    b = dense_model(prefix="fn/", w=tf2_weights)
    w = np.arange(16, dtype=np.float32).reshape(4, 4)
    diff = diff_graphs(a, b, values({"w": w}), values({"fn/w": w}), b_inlined_by_loader=True)
    # the reader side is paired (both hold the weight), the resource-typed Identity is left over
    assert diff.pairs["w/read"] == ("fn/dense/MatMul/ReadVariableOp", "structure")
    assert diff.pairs["w"] == ("fn/w", "structure")
    assert diff.only_in_b == ["Func/input/_1"]
    assert diff.rewrites == []  # loader plumbing, same values, same structure
    assert canonical_tensor(b, "fn/dense/MatMul/ReadVariableOp:0") == "fn/w:0"


def test_ambiguous_readers_are_not_guessed() -> None:
    """Two unmatched readers of one tensor with the same op type and index: no structural pair."""
    a = graph([op("x", "Placeholder"), op("p", "Neg", ["x:0"]), op("q", "Neg", ["x:0"])], {"x": "x:0"}, {})
    b = graph([op("x", "Placeholder"), op("r", "Neg", ["x:0"]), op("s", "Neg", ["x:0"])], {"x": "x:0"}, {})
    assert match_graphs(a, b) == {"x": ("x", "name")}


def _half_head(scope: str, cast_to: str | None) -> OpGraph:
    """image -> two Relus -> Sub -> Softmax -> output, under ``scope``; with ``cast_to``, a Cast of
    the Sub to that dtype inserted before the Softmax, which then computes in it (a float16 head on
    a float32 body). The input's two readers have one op type, so structure cannot tell them apart
    from the input: only the way down from the output reaches them, and it passes the cast."""
    p = f"{scope}/"
    head = "float32" if cast_to is None else cast_to
    nodes = [
        op("image", "Placeholder", attrs={"dtype": "float32", "shape": [None, 4]}),
        op(f"{p}left/Relu", "Relu", ["image:0"]),
        op(f"{p}right/Relu", "Relu", ["image:0"]),
        op(f"{p}diff/Sub", "Sub", [f"{p}left/Relu:0", f"{p}right/Relu:0"]),
        op(f"{p}head/Softmax", "Softmax", [f"{p}diff/Sub:0" if cast_to is None else f"{p}head/Cast:0"], dtype=head),
        op("Identity", "Identity", [f"{p}head/Softmax:0"], dtype=head),
    ]
    if cast_to is not None:
        nodes.append(op(f"{p}head/Cast", "Cast", [f"{p}diff/Sub:0"],
                        attrs={"SrcT": "float32", "DstT": cast_to, "Truncate": False}, dtype=cast_to))
    return graph(nodes, {"image": "image:0"}, {"output_0": "Identity:0"})


def test_structure_crosses_a_cast_inserted_on_one_side_under_a_renamed_scope() -> None:
    """Keras auto-names a mixed-precision twin built in the same script (``functional_1_1`` where
    the float32 model is ``functional_1``), so only structure pairs its ops, and its casts are on
    one side only: the ops above B's cast are paired across it, the cast is left to the detector."""
    a, b = _half_head("functional_1", None), _half_head("functional_1_1", "float16")
    pairs = {
        "image": ("image", "name"),
        "Identity": ("Identity", "name"),
        "functional_1/head/Softmax": ("functional_1_1/head/Softmax", "structure"),
        "functional_1/diff/Sub": ("functional_1_1/diff/Sub", "structure"),
        "functional_1/left/Relu": ("functional_1_1/left/Relu", "structure"),
        "functional_1/right/Relu": ("functional_1_1/right/Relu", "structure"),
    }
    assert match_graphs(a, b) == pairs
    # and symmetrically, with the cast in A
    assert match_graphs(b, a) == {y: (x, how) for x, (y, how) in pairs.items()}
    diff = diff_graphs(a, b)
    assert [r.to_json() for r in diff.rewrites] == [
        {"kind": "cast_inserted", "a_nodes": ["functional_1/head/Softmax"],
         "b_nodes": ["functional_1_1/head/Cast", "functional_1_1/head/Softmax"],
         "detail": {"op": "functional_1/head/Softmax", "dtype_a": "float32", "dtype_b": "float16",
                    "casts": ["functional_1_1/head/Cast"]}},
    ]
    assert diff.only_in_a == [] and diff.only_in_b == ["functional_1_1/head/Cast"]


def test_a_cast_is_crossed_only_between_floats_and_only_to_an_op_of_the_same_type() -> None:
    """A cast to an integer changes the values, and an op of another type above the cast is
    another computation: neither is paired across (the ops stay unmatched, as before)."""
    a = _half_head("functional_1", None)
    to_int = _half_head("functional_1_1", "int32")
    assert match_graphs(a, to_int) == {"image": ("image", "name"), "Identity": ("Identity", "name"),
                                       "functional_1/head/Softmax": ("functional_1_1/head/Softmax", "structure")}
    doc = _half_head("functional_1_1", "float16").to_json()
    for node in doc["nodes"]:
        if node["name"] == "functional_1_1/diff/Sub":
            node["op"] = "AddV2"
    assert match_graphs(a, OpGraph.from_json(doc)) == {
        "image": ("image", "name"), "Identity": ("Identity", "name"),
        "functional_1/head/Softmax": ("functional_1_1/head/Softmax", "structure")}


def test_casts_on_both_sides_pair_with_each_other() -> None:
    """A float16 head against a bfloat16 one: the casts are paired as ops (their DstT differs), not
    looked through."""
    diff = diff_graphs(_half_head("functional_1", "float16"), _half_head("functional_1_1", "bfloat16"))
    assert diff.pairs["functional_1/head/Cast"] == ("functional_1_1/head/Cast", "structure")
    assert diff.pairs["functional_1/diff/Sub"] == ("functional_1_1/diff/Sub", "structure")
    assert diff.only_in_a == diff.only_in_b == []
    assert [(r.kind, r.a_nodes, r.detail) for r in diff.rewrites] == [
        ("attr_changed", ["functional_1/head/Cast"], {"attrs": {"DstT": {"a": "float16", "b": "bfloat16"}}}),
        ("attr_changed", ["functional_1/head/Softmax"], {"attrs": {"T": {"a": "float16", "b": "bfloat16"}}}),
    ]


def test_a_pair_across_a_cast_never_overrides_a_name_match() -> None:
    """B's right Relu bears A's left Relu's name: the name pair stands, although the Subs, paired
    across B's cast, read the two Relus the other way round (B's Sub is then reported rewired)."""
    doc = _half_head("functional_1_1", "float16").to_json()
    for node in doc["nodes"]:
        if node["name"] == "functional_1_1/right/Relu":
            node["name"] = "functional_1/left/Relu"
        node["inputs"] = ["functional_1/left/Relu:0" if t == "functional_1_1/right/Relu:0" else t
                          for t in node["inputs"]]
    a, b = _half_head("functional_1", None), OpGraph.from_json(doc)
    assert match_graphs(a, b) == {
        "image": ("image", "name"),
        "functional_1/left/Relu": ("functional_1/left/Relu", "name"),
        "Identity": ("Identity", "name"),
        "functional_1/right/Relu": ("functional_1_1/left/Relu", "structure"),  # the input's one free reader
        "functional_1/head/Softmax": ("functional_1_1/head/Softmax", "structure"),
        "functional_1/diff/Sub": ("functional_1_1/diff/Sub", "structure"),
    }
    assert [(r.kind, r.a_nodes) for r in diff_graphs(a, b).rewrites] == [
        ("rewired", ["functional_1/diff/Sub"]), ("cast_inserted", ["functional_1/head/Softmax"])]


# --------------------------------------------------------------------------- per-node rewrites


def test_op_changed() -> None:
    diff = diff_graphs(dense_model(), dense_model(relu="Relu6"))
    assert [r.to_json() for r in diff.rewrites] == [
        {"kind": "op_changed", "a_nodes": ["dense/act"], "b_nodes": ["dense/act"],
         "detail": {"a_op": "Relu", "b_op": "Relu6"}},
    ]


def test_attr_changed_names_the_attr_and_both_values() -> None:
    b_doc = dense_model().to_json()
    matmul = next(n for n in b_doc["nodes"] if n["name"] == "dense/MatMul")
    matmul["attrs"]["transpose_b"] = True
    diff = diff_graphs(dense_model(), OpGraph.from_json(b_doc))
    assert [r.to_json() for r in diff.rewrites] == [
        {"kind": "attr_changed", "a_nodes": ["dense/MatMul"], "b_nodes": ["dense/MatMul"],
         "detail": {"attrs": {"transpose_b": {"a": False, "b": True}}}},
    ]


def test_rewired_inputs_are_listed_by_index() -> None:
    def model(swap: bool) -> OpGraph:
        first, second = ("n:0", "m:0") if swap else ("m:0", "n:0")
        return graph(
            [op("x", "Placeholder"), op("m", "Neg", ["x:0"]), op("n", "Exp", ["x:0"]), op("s", "Sub", [first, second])],
            {"x": "x:0"},
            {"s": "s:0"},
        )

    diff = diff_graphs(model(False), model(True))
    assert [r.to_json() for r in diff.rewrites] == [
        {"kind": "rewired", "a_nodes": ["s"], "b_nodes": ["s"],
         "detail": {"inputs": [{"index": 0, "a": "m:0", "b": "n:0"}, {"index": 1, "a": "n:0", "b": "m:0"}]}},
    ]


def _with_scale(model: OpGraph) -> OpGraph:
    """The same model with ``dense/scale = BiasAdd * c`` inserted before the activation."""
    doc = model.to_json()
    for node in doc["nodes"]:
        if node["name"] == "dense/act":
            node["inputs"] = ["dense/scale:0"]
    doc["nodes"] += [const("dense/c", "c" * 40, []), op("dense/scale", "Mul", ["dense/BiasAdd:0", "dense/c:0"])]
    return OpGraph.from_json(doc)


def test_node_added_and_the_reader_rewired() -> None:
    diff = diff_graphs(dense_model(), _with_scale(dense_model()))
    assert diff.only_in_b == ["dense/c", "dense/scale"]
    assert [r.to_json() for r in diff.rewrites] == [
        {"kind": "rewired", "a_nodes": ["dense/act"], "b_nodes": ["dense/act"],
         "detail": {"inputs": [{"index": 0, "a": "dense/BiasAdd:0", "b": "dense/scale:0"}]}},
        {"kind": "node_added", "a_nodes": [], "b_nodes": ["dense/c"], "detail": {"op": "Const"}},
        {"kind": "node_added", "a_nodes": [], "b_nodes": ["dense/scale"], "detail": {"op": "Mul"}},
    ]


def test_node_removed_is_the_mirror_image() -> None:
    diff = diff_graphs(_with_scale(dense_model()), dense_model())
    assert diff.only_in_a == ["dense/c", "dense/scale"]
    assert sorted((r.kind, tuple(r.a_nodes), tuple(r.b_nodes)) for r in diff.rewrites) == [
        ("node_removed", ("dense/c",), ()),
        ("node_removed", ("dense/scale",), ()),
        ("rewired", ("dense/act",), ("dense/act",)),
    ]


def test_const_changed_by_digest_and_by_value() -> None:
    def model(digest: str) -> OpGraph:
        return dense_model(w=[const("w", digest), op("w/read", "Identity", ["w:0"], shape=[4, 4])])

    by_digest = diff_graphs(model("a" * 40), model("b" * 40))
    assert [r.to_json() for r in by_digest.rewrites] == [
        {"kind": "const_changed", "a_nodes": ["w", "w/read"], "b_nodes": ["w", "w/read"],
         "detail": {"max_abs_change": None}},
    ]
    assert diff_graphs(model("a" * 40), model("a" * 40)).rewrites == []

    wa = np.full((4, 4), 0.5, np.float32)
    wb = wa.copy()
    wb[2, 3] = 0.75
    by_value = diff_graphs(model(sha(wa)), model(sha(wb)), values({"w": wa}), values({"w": wb}))
    assert [r.to_json() for r in by_value.rewrites] == [
        {"kind": "const_changed", "a_nodes": ["w", "w/read"], "b_nodes": ["w", "w/read"],
         "detail": {"max_abs_change": 0.25}},
    ]


def resource_variable(name: str, reads: Iterable[str], shape: list[int] | None = None) -> list[dict[str, Any]]:
    """A resource variable (``use_resource=True``, TF2): its handle and one ReadVariableOp per use."""
    shape = [4, 4] if shape is None else shape
    handle = op(name, "VarHandleOp", attrs={"dtype": "float32", "shape": shape, "shared_name": name},
                dtype="resource", shape=[])
    return [handle, *(op(r, "ReadVariableOp", [f"{name}:0"], attrs={"dtype": "float32"}, shape=shape) for r in reads)]


def test_a_changed_resource_variable_carries_its_reads() -> None:
    """A resource handle holds no values (it is never captured): the difference shows at its
    ReadVariableOps, so they belong to the const_changed of their variable, on both sides."""
    def model() -> OpGraph:
        # two reads, as a layer that also reads its kernel for a regulariser has; MatMul reads the last
        return dense_model(w=resource_variable("w", ["w_norm/ReadVariableOp", "dense/MatMul/ReadVariableOp"]))

    wa = np.full((4, 4), 0.5, np.float32)
    wb = wa.copy()
    wb[0, 1] = 0.625
    diff = diff_graphs(model(), model(), values({"w": wa}), values({"w": wb}))
    assert [r.to_json() for r in diff.rewrites] == [
        {"kind": "const_changed", "a_nodes": ["w", "dense/MatMul/ReadVariableOp", "w_norm/ReadVariableOp"],
         "b_nodes": ["w", "dense/MatMul/ReadVariableOp", "w_norm/ReadVariableOp"],
         "detail": {"max_abs_change": 0.125}},
    ]


def test_variable_frozen_is_exact_only_when_the_values_agree() -> None:
    w = np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4)
    frozen = dense_model(w=[const("w", sha(w)), op("w/read", "Identity", ["w:0"], shape=[4, 4])])
    same = diff_graphs(dense_model(), frozen, values({"w": w}))
    assert [r.to_json() for r in same.rewrites] == [
        {"kind": "variable_frozen", "a_nodes": ["w"], "b_nodes": ["w"],
         "detail": {"exact": True, "verified_by_value": True}},
    ]
    moved = w.copy()
    moved[1, 2] += np.float32(0.125)
    changed = diff_graphs(dense_model(), frozen, values({"w": moved}), values({"w": w}))
    assert [r.to_json() for r in changed.rewrites] == [
        {"kind": "const_changed", "a_nodes": ["w", "w/read"], "b_nodes": ["w", "w/read"],
         "detail": {"max_abs_change": 0.125}},
    ]
    unknown = diff_graphs(dense_model(), frozen)  # no checkpoint to read A's value from
    assert [r.detail for r in unknown.rewrites] == [{"exact": False, "verified_by_value": False}]


def test_fed_inputs_are_compared_by_what_they_accept() -> None:
    """An input that is an Identity in one export and a Placeholder in another is not a rewrite;
    a different dtype of what is fed is."""
    a = dense_model()
    b_doc = dense_model().to_json()
    x = next(n for n in b_doc["nodes"] if n["name"] == "x")
    x.update(op="Identity", inputs=[], attrs={"T": "float32"})
    assert diff_graphs(a, OpGraph.from_json(b_doc)).rewrites == []
    x["outputs"][0]["dtype"] = "float16"
    assert [r.to_json() for r in diff_graphs(a, OpGraph.from_json(b_doc)).rewrites] == [
        {"kind": "attr_changed", "a_nodes": ["x"], "b_nodes": ["x"],
         "detail": {"attrs": {"outputs": {"a": [["float32", [None, 4]]], "b": [["float16", [None, 4]]]}}}},
    ]


# --------------------------------------------------------------------------- export patterns


def _conv_bn_model(folded: bool) -> OpGraph:
    nodes = [op("images", "Placeholder", attrs={"dtype": "float32", "shape": [None, 8, 8, 3]}, shape=[None, 8, 8, 3])]
    if folded:
        nodes += [
            const("conv/Conv2D_weights", "f" * 40, [3, 3, 3, 2]),
            op("conv/Conv2D", "Conv2D", ["images:0", "conv/Conv2D_weights:0"], shape=[None, 8, 8, 2]),
            const("conv/Conv2D_bn_offset", "e" * 40, [2]),
            op("bn/FusedBatchNormV3", "BiasAdd", ["conv/Conv2D:0", "conv/Conv2D_bn_offset:0"], shape=[None, 8, 8, 2]),
        ]
    else:
        nodes += [*variable("conv/weights", [3, 3, 3, 2]),
                  op("conv/Conv2D", "Conv2D", ["images:0", "conv/weights/read:0"], shape=[None, 8, 8, 2])]
        for param in ("gamma", "beta", "mean", "var"):
            nodes += variable(f"bn/{param}", [2])
        nodes.append(op("bn/FusedBatchNormV3", "FusedBatchNormV3",
                        ["conv/Conv2D:0", "bn/gamma/read:0", "bn/beta/read:0", "bn/mean/read:0", "bn/var/read:0"],
                        attrs={"T": "float32", "U": "float32", "epsilon": 0.001, "is_training": False},
                        shape=[None, 8, 8, 2], outputs=6))
    nodes.append(op("relu", "Relu", ["bn/FusedBatchNormV3:0"], shape=[None, 8, 8, 2]))
    return graph(nodes, {"images": "images:0"}, {"out": "relu:0"})


def test_batchnorm_folded_names_the_batch_norm_its_conv_and_every_member() -> None:
    a, b = _conv_bn_model(False), _conv_bn_model(True)
    wa = np.ones((3, 3, 3, 2), np.float32)
    wb = np.full((3, 3, 3, 2), 0.5, np.float32)
    diff = diff_graphs(a, b, values({"conv/weights": wa}), values({"conv/Conv2D_weights": wb}))
    assert [r.to_json() for r in diff.rewrites] == [
        {
            "kind": "batchnorm_folded",
            "a_nodes": ["bn/FusedBatchNormV3", "conv/Conv2D", "conv/weights/read", "conv/weights",
                        "bn/gamma/read", "bn/gamma", "bn/beta/read", "bn/beta", "bn/mean/read", "bn/mean",
                        "bn/var/read", "bn/var"],
            "b_nodes": ["conv/Conv2D", "conv/Conv2D_weights", "bn/FusedBatchNormV3", "conv/Conv2D_bn_offset"],
            "detail": {"batch_norm": "bn/FusedBatchNormV3", "conv": "conv/Conv2D", "epsilon": 0.001,
                       "replaced_by": "BiasAdd", "weights_max_abs_change": 0.5},
        },
    ]


def test_a_resize_fused_into_the_folded_conv_is_named_and_its_filter_found() -> None:
    """optimize_for_inference folds the batch norm and fuses the resize before the conv into one
    FusedResizeAndPadConv2D(input, size, paddings, filter): the filter was taken as input 1 (the
    size), so the fold's weight change read None, and the fusion, which changes what the resize
    computes, was not named at all."""
    a_doc = _conv_bn_model(False).to_json()
    for node in a_doc["nodes"]:
        if node["name"] == "conv/Conv2D":
            node["inputs"][0] = "resize/ResizeBilinear:0"
    a_doc["nodes"] += [const("resize/size", "1" * 40, [2]),
                       op("resize/ResizeBilinear", "ResizeBilinear", ["images:0", "resize/size:0"],
                          attrs={"T": "float32", "half_pixel_centers": True}, shape=[None, 8, 8, 3])]
    b_doc = _conv_bn_model(True).to_json()
    for node in b_doc["nodes"]:
        if node["name"] == "conv/Conv2D":
            node["op"] = "FusedResizeAndPadConv2D"
            node["inputs"] = ["images:0", "resize/size:0", "conv/paddings:0", "conv/Conv2D_weights:0"]
    b_doc["nodes"] += [const("resize/size", "1" * 40, [2]), const("conv/paddings", "2" * 40, [4, 2])]
    wa, wb = np.ones((3, 3, 3, 2), np.float32), np.full((3, 3, 3, 2), 0.5, np.float32)
    diff = diff_graphs(OpGraph.from_json(a_doc), OpGraph.from_json(b_doc), values({"conv/weights": wa}),
                       values({"conv/Conv2D_weights": wb}))
    by_kind = {r.kind: r for r in diff.rewrites}
    fused = by_kind["fused"]
    assert (fused.a_nodes, fused.b_nodes, fused.detail["fused_op"]) == (
        ["resize/ResizeBilinear", "conv/Conv2D"], ["conv/Conv2D"], "FusedResizeAndPadConv2D")
    folded = by_kind["batchnorm_folded"].detail
    assert (folded["weights_max_abs_change"], folded["conv_became"]) == (0.5, "FusedResizeAndPadConv2D")
    assert "resize/size" not in by_kind["batchnorm_folded"].b_nodes


def test_cast_inserted_around_a_narrowed_op() -> None:
    a = dense_model()
    doc = dense_model().to_json()
    for node in doc["nodes"]:
        if node["name"] == "dense/MatMul":
            node["inputs"] = ["dense/to_bf16_input:0", "dense/to_bf16_weights:0"]
            node["attrs"]["T"] = "bfloat16"
            node["outputs"][0]["dtype"] = "bfloat16"
        if node["name"] == "dense/BiasAdd":
            node["inputs"][0] = "dense/to_fp32:0"
    doc["nodes"] += [
        op("dense/to_bf16_input", "Cast", ["x:0"], attrs={"SrcT": "float32", "DstT": "bfloat16", "Truncate": False},
           dtype="bfloat16"),
        op("dense/to_bf16_weights", "Cast", ["w/read:0"],
           attrs={"SrcT": "float32", "DstT": "bfloat16", "Truncate": False}, dtype="bfloat16", shape=[4, 4]),
        op("dense/to_fp32", "Cast", ["dense/MatMul:0"],
           attrs={"SrcT": "bfloat16", "DstT": "float32", "Truncate": False}),
    ]
    diff = diff_graphs(a, OpGraph.from_json(doc))
    assert [r.to_json() for r in diff.rewrites] == [
        {"kind": "cast_inserted", "a_nodes": ["dense/MatMul"],
         "b_nodes": ["dense/to_bf16_weights", "dense/to_bf16_input", "dense/to_fp32", "dense/MatMul"],
         "detail": {"op": "dense/MatMul", "dtype_a": "float32", "dtype_b": "bfloat16",
                    "casts": ["dense/to_bf16_weights", "dense/to_bf16_input", "dense/to_fp32"]}},
    ]  # B's casts in its topological order (ties broken by name)
    assert diff.only_in_b == ["dense/to_bf16_weights", "dense/to_bf16_input", "dense/to_fp32"]


def test_fused_chain_named_after_its_last_op() -> None:
    """Grappler's remapper gives the fused op the name of the chain's last op (here the Relu)."""
    a = dense_model()
    doc = dense_model().to_json()
    doc["nodes"] = [n for n in doc["nodes"] if n["name"] not in ("dense/MatMul", "dense/BiasAdd", "dense/act")]
    doc["nodes"].append(op("dense/act", "_FusedMatMul", ["x:0", "w/read:0", "b/read:0"],
                           attrs={"T": "float32", "fused_ops": ["BiasAdd", "Relu"]}))
    diff = diff_graphs(a, OpGraph.from_json(doc))
    assert [r.to_json() for r in diff.rewrites] == [
        {"kind": "fused", "a_nodes": ["dense/MatMul", "dense/BiasAdd", "dense/act"], "b_nodes": ["dense/act"],
         "detail": {"fused_op": "_FusedMatMul", "fused_ops": ["BiasAdd", "Relu"],
                    "chain": ["dense/MatMul", "dense/BiasAdd", "dense/act"]}},
    ]


def test_rewrite_json_round_trip_and_kinds() -> None:
    rewrite = Rewrite("attr_changed", ["n"], ["n"], {"attrs": {"epsilon": {"a": 0.001, "b": 0.01}}})
    assert Rewrite.from_json(rewrite.to_json()) == rewrite
    assert REWRITE_KINDS == ("node_added", "node_removed", "op_changed", "attr_changed", "const_changed", "rewired",
                             "variable_frozen", "batchnorm_folded", "cast_inserted", "fused")



# --------------------------------------------------------------------------- auto-numbered names


def _two_reshapes(first: str, second: str, scale_sha: str) -> OpGraph:
    """x -> Reshape(first) -> Mul(., scale) -> Reshape(second) -> y: TF's auto-generated names,
    numbered in the order the ops were built."""
    nodes = [
        op("x", "Placeholder", attrs={"dtype": "float32", "shape": [None, 4]}),
        const(f"{first}/shape", "s1", [2]),
        op(first, "Reshape", ["x:0", f"{first}/shape:0"]),
        const("Const", scale_sha, []),
        op("mul", "Mul", [f"{first}:0", "Const:0"]),
        const(f"{second}/shape", "s2", [2]),
        op(second, "Reshape", ["mul:0", f"{second}/shape:0"]),
        op("y", "Identity", [f"{second}:0"]),
    ]
    return graph(nodes, {"x": "x:0"}, {"y": "y:0"})


def test_names_differing_only_by_their_number_are_paired_by_structure() -> None:
    # B built one unrelated Reshape first (pruned away): its Reshape_1 is A's Reshape, and its
    # Reshape_2 is A's Reshape_1 — which B's name Reshape_1 would have paired wrongly.
    a = _two_reshapes("Reshape", "Reshape_1", "k")
    b = _two_reshapes("Reshape_1", "Reshape_2", "k")
    diff = diff_graphs(a, b)
    assert diff.rewrites == [] and diff.only_in_a == [] and diff.only_in_b == []
    assert diff.pairs["Reshape"][0] == "Reshape_1" and diff.pairs["Reshape_1"][0] == "Reshape_2"
    assert diff.pairs["Reshape_1/shape"][0] == "Reshape_2/shape"
    assert diff.pairs["x"] == ("x", "name")  # a name nothing else shares is still evidence


def test_a_planted_change_still_shows_among_renumbered_names() -> None:
    diff = diff_graphs(_two_reshapes("Reshape", "Reshape_1", "k"), _two_reshapes("Reshape_1", "Reshape_2", "other"))
    assert [(r.kind, r.a_nodes, r.b_nodes) for r in diff.rewrites] == [("const_changed", ["Const"], ["Const"])]


def test_numbered_names_structure_cannot_tell_apart_fall_back_to_their_names() -> None:
    # two Relus read the same input, and the op reading both changed type: neither the reader
    # (other op) nor the input (two readers of one type) pairs them, so equal names decide
    def branches(reader: str) -> OpGraph:
        nodes = [op("x", "Placeholder", attrs={"dtype": "float32", "shape": [None, 4]}),
                 op("Relu", "Relu", ["x:0"]), op("Relu_1", "Relu", ["x:0"]),
                 op("y", reader, ["Relu:0", "Relu_1:0"])]
        return graph(nodes, {"x": "x:0"}, {"y": "y:0"})

    diff = diff_graphs(branches("Add"), branches("Mul"))
    assert diff.pairs["Relu"] == ("Relu", "name") and diff.pairs["Relu_1"] == ("Relu_1", "name")
    assert [(r.kind, r.a_nodes) for r in diff.rewrites] == [("op_changed", ["y"])]


# --------------------------------------------------------------------------- the registry of kinds


def test_rewrite_registry_is_complete() -> None:
    """Every kind a detector in tracer/diff/rewrites.py emits (``Rewrite("kind", ...)``) has one
    record, and every record is complete: a detector pass that exists, a cause from the catalogue
    (or none: exact), its own display rank; the kinds that pair tensors their own way say how."""
    import ast  # noqa: PLC0415
    import inspect  # noqa: PLC0415

    from tracer.causes import CAUSES  # noqa: PLC0415
    from tracer.diff import kinds, rewrites  # noqa: PLC0415

    tree = ast.parse(inspect.getsource(rewrites))
    emitted = {call.args[0].value for call in ast.walk(tree)
               if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "Rewrite"
               and call.args and isinstance(call.args[0], ast.Constant)}
    assert emitted == set(kinds.KINDS) == set(REWRITE_KINDS)
    assert REWRITE_KINDS == tuple(kinds.KINDS)
    for name, kind in kinds.KINDS.items():
        assert kind.name == name
        assert kind.detector in kinds.PASSES and callable(getattr(rewrites._Context, kind.detector))
        assert kind.cause is None or kind.cause in CAUSES, name
        assert kind.pairs is None or callable(kind.pairs)
        assert kind.group is None or kind.pairs is not None, name  # a group is paired as a whole
    assert sorted(k.order for k in kinds.KINDS.values()) == list(range(len(kinds.KINDS)))
    assert {k.name for k in kinds.KINDS.values() if k.exact} == {"variable_frozen"}
    assert all(callable(getattr(rewrites._Context, p)) for p in kinds.PASSES)


def test_a_new_kind_is_added_in_one_place(monkeypatch: Any) -> None:
    """A record is all alignment, the causes and the listings need: registered here only, a
    made-up kind pairs A's op with the B tensor its record names, points at its cause, and is
    listed at its rank; an exact kind marks no op as rewritten."""
    from tracer.causes import explain_comparison  # noqa: PLC0415
    from tracer.comparison.align import _rewrite_kind, _rewrite_roles  # noqa: PLC0415
    from tracer.diff.kinds import KINDS, RewriteKind, display_rank  # noqa: PLC0415

    def pairs(rewrite: Rewrite, ga: OpGraph, gb: OpGraph, diff: GraphDiff) -> Any:
        return {"a/pre": "part of the toy"}, {"a/out": ("b/out:1", "toy pairing")}

    monkeypatch.setitem(KINDS, "toy", RewriteKind("toy", "per_pair", "xla", -1, pairs, "toy group"))
    graph = OpGraph.from_json({"inputs": {}, "outputs": {}, "nodes": []})
    diff = GraphDiff({}, [], [], [Rewrite("toy", ["a/pre", "a/out"], ["b/out"]),
                                  Rewrite("variable_frozen", ["a/out"], ["b/w"])])
    members, special = _rewrite_roles(graph, graph, diff)
    assert members == {"a/pre": ("toy", "part of the toy")}
    assert special == {"a/out": ("b/out:1", "toy pairing", "toy")}
    assert _rewrite_kind(diff, "a/out") == "toy"
    assert sorted(["fused", "toy", "variable_frozen", "unknown"], key=display_rank) == [
        "toy", "fused", "variable_frozen", "unknown"]
    report = {"verdict": "beyond_tolerance", "sides": {"a": {}, "b": {}},
              "origins": [{"node": "a/out", "op": "MatMul", "rewrite": "toy"}]}
    assert explain_comparison(report)["causes"] == ["xla"]


def test_origins_in_rewrites_point_at_their_kinds_cause() -> None:
    """A cast-wrapped origin points at mixed precision (also beside other rewrites), a fold at
    the export, a frozen variable (exact) at nothing."""
    from tracer.causes import explain_comparison  # noqa: PLC0415

    def causes(*kinds: str) -> list[str]:
        origins = [{"node": f"n{i}", "op": "MatMul", "rewrite": k} for i, k in enumerate(kinds)]
        report = {"verdict": "beyond_tolerance", "sides": {"a": {}, "b": {}}, "origins": origins}
        return explain_comparison(report)["causes"]

    assert causes("batchnorm_folded") == ["export"]
    assert causes("const_changed") == ["weights"]  # a weight's values differ: tests/test_weights.py says how
    assert causes("const_changed", "batchnorm_folded") == ["weights", "export"]
    assert causes("fused", "cast_inserted") == ["mixed_precision"]
    assert causes("variable_frozen") == []
