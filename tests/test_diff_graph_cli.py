"""``tftrace diff-graph``: the exact rewrites of every sample export, the JSON contract, bad input.

The static diffs of the sample pairs run in-process (TensorFlow imported once per test process);
what a user sees — JSON on stdout, the table, one-line errors with exit code 2 — runs the real
command in a child process through ``run_cli``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import assert_user_error, run_cli

pytestmark = pytest.mark.slow

BLOCKS = ("block1", "block2", "block3", "block4")
BN_PARAMS = ("gamma", "beta", "moving_mean", "moving_variance")
HEADS = ("dense", "class_head", "box_head")


@pytest.fixture(scope="module")
def tf() -> Any:
    from tracer._tf import tf as import_tf  # noqa: PLC0415

    return import_tf()


@pytest.fixture(scope="module")
def diffs(tf: Any, models: dict[str, Path]) -> dict[str, Any]:
    """The checkpoint against each of its exports: name -> GraphDiff."""
    from tracer.comparison.static import diff_artifacts  # noqa: PLC0415

    ckpt = str(models["detector_ckpt"])
    names = ("detector", "detector_folded", "detector_bf16", "detector_planted", "detector_tf2")
    return {name: diff_artifacts(ckpt, str(models[name])).diff for name in names}


# --------------------------------------------------------------------------- the sample exports


def test_faithful_export_has_no_rewrites(diffs: dict[str, Any]) -> None:
    diff = diffs["detector"]
    assert (diff.matched, diff.only_in_a, diff.only_in_b, diff.rewrites) == (130, [], [], [])
    assert diff.renamed() == {}  # every op under its own name; auto-numbered ones (Reshape_1) paired by structure
    assert {reason for _, reason in diff.pairs.values()} == {"name", "structure"}


def _folded_scale(models: dict[str, Path], tf: Any, block: str) -> float:
    """max |w - w * gamma / sqrt(var + eps)| of one block, from the checkpoint (float32, as TF folds)."""
    reader = tf.train.load_checkpoint(f"{models['detector_ckpt']}/model.ckpt")
    w = reader.get_tensor(f"{block}/conv/weights")
    gamma, var = reader.get_tensor(f"{block}/bn/gamma"), reader.get_tensor(f"{block}/bn/moving_variance")
    folded = w * (gamma / np.sqrt(var + np.float32(0.001)))
    return float(np.max(np.abs(w.astype(np.float64) - folded.astype(np.float64))))


def test_folded_export_four_batchnorm_folds_and_six_frozen_variables(
    diffs: dict[str, Any], models: dict[str, Path], tf: Any
) -> None:
    diff = diffs["detector_folded"]
    assert [r.kind for r in diff.rewrites] == ["batchnorm_folded"] * 4 + ["variable_frozen"] * 6
    for block, rewrite in zip(BLOCKS, diff.rewrites[:4]):
        bn, conv = f"{block}/bn/FusedBatchNormV3", f"{block}/conv/Conv2D"
        members = [f"{block}/conv/weights/read", f"{block}/conv/weights"]
        for param in BN_PARAMS:
            members += [f"{block}/bn/{param}/read", f"{block}/bn/{param}"]
        assert rewrite.a_nodes == [bn, conv] + members
        assert rewrite.b_nodes == [conv, f"{conv}_weights", bn, f"{conv}_bn_offset"]
        detail = dict(rewrite.detail)
        change = detail.pop("weights_max_abs_change")
        assert detail == {"batch_norm": bn, "conv": conv, "epsilon": 0.001, "replaced_by": "BiasAdd"}
        assert change == pytest.approx(_folded_scale(models, tf, block), rel=1e-6, abs=1e-7)
    frozen = {(tuple(r.a_nodes), tuple(r.b_nodes)): r.detail for r in diff.rewrites[4:]}
    assert frozen == {
        ((f"{head}/{part}", f"{head}/{part}/read"), (f"{head}/{part}",)): {"exact": True, "verified_by_value": True}
        for head in HEADS for part in ("weights", "biases")
    }
    # node_diff.txt: 46 removed, of which the 4 conv kernels are paired with their folded kernels
    assert diff.matched == 88
    assert sorted(diff.only_in_a) == sorted(
        [f"{b}/conv/weights/read" for b in BLOCKS]
        + [f"{b}/bn/{p}{s}" for b in BLOCKS for p in BN_PARAMS for s in ("", "/read")]
        + [f"{h}/{part}/read" for h in HEADS for part in ("weights", "biases")]
    )
    assert diff.only_in_b == [f"{b}/conv/Conv2D_bn_offset" for b in BLOCKS]
    assert {diff.pairs[f"{b}/conv/weights"][0] for b in BLOCKS} == {f"{b}/conv/Conv2D_weights" for b in BLOCKS}


def test_bf16_export_one_cast_region_at_the_dense_layer(diffs: dict[str, Any]) -> None:
    diff = diffs["detector_bf16"]
    casts = ["dense/to_bf16_weights", "dense/to_bf16_input", "dense/to_fp32"]
    assert [r.to_json() for r in diff.rewrites] == [{
        "kind": "cast_inserted",
        "a_nodes": ["dense/MatMul"],
        "b_nodes": casts + ["dense/MatMul"],
        "detail": {"op": "dense/MatMul", "dtype_a": "float32", "dtype_b": "bfloat16", "casts": casts},
    }]
    assert (diff.matched, diff.only_in_a, diff.only_in_b) == (130, [], casts)


def test_planted_export_exactly_the_planted_epsilon(diffs: dict[str, Any]) -> None:
    diff = diffs["detector_planted"]
    assert [r.to_json() for r in diff.rewrites] == [{
        "kind": "attr_changed",
        "a_nodes": ["block2/bn/FusedBatchNormV3"],
        "b_nodes": ["block2/bn/FusedBatchNormV3"],
        "detail": {"attrs": {"epsilon": {"a": 0.001, "b": 0.01}}},
    }]
    assert (diff.matched, diff.only_in_a, diff.only_in_b) == (130, [], [])


def test_tf2_export_maps_every_op_with_no_false_rewrites(diffs: dict[str, Any]) -> None:
    diff = diffs["detector_tf2"]
    assert (diff.matched, diff.only_in_a, diff.rewrites) == (130, [], [])
    renamed = diff.renamed()
    assert renamed["block1/conv/Conv2D"] == "StatefulPartitionedCall/detector/block1/conv/Conv2D"
    assert renamed["dense/weights/read"] == "StatefulPartitionedCall/detector/dense/MatMul/ReadVariableOp"
    assert renamed["outputs/scores"] == "Identity_5"  # signature outputs are paired by key
    compute = {a: b for a, b in renamed.items() if not a.endswith("/read") and not a.startswith("outputs/")}
    assert compute == {a: f"StatefulPartitionedCall/detector/{a}" for a in compute}
    assert len(compute) == 71
    # the variables keep their own names once inlined, so they pair by name and by value
    assert all(diff.pairs[f"{b}/conv/weights"] == (f"{b}/conv/weights", "name") for b in BLOCKS)
    assert (diff.pairs["images"], diff.pairs["anchors/anchors"]) == (
        ("images", "name"), ("StatefulPartitionedCall/detector/anchors/anchors", "structure"))
    # what is left in B is the plumbing tftrace's own inlining added
    assert {n.split("/")[0] for n in diff.only_in_b} == {"Func", "StatefulPartitionedCall", "NoOp"}


# --------------------------------------------------------------------------- the command


def test_json_contract(models: dict[str, Path], diffs: dict[str, Any]) -> None:
    proc = run_cli("diff-graph", "--json", str(models["detector_ckpt"]), str(models["detector_folded"]))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert {"matched", "only_in_a", "only_in_b", "rewrites"} <= set(doc)
    assert isinstance(doc["matched"], int) and doc["matched"] == 88
    assert all(set(r) == {"kind", "a_nodes", "b_nodes", "detail"} for r in doc["rewrites"])
    assert doc == json.loads(json.dumps(diffs["detector_folded"].to_json()))


def test_readable_summary(models: dict[str, Path]) -> None:
    proc = run_cli("diff-graph", str(models["detector_ckpt"]), str(models["detector_planted"]))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "130 ops matched" in out and "attr_changed" in out and "block2/bn/FusedBatchNormV3" in out
    assert "0.001" in out and "0.01" in out
    assert "Traceback" not in proc.stderr


def _renamed_half_plus_two(tf: Any, real_models: dict[str, Path], out: Path) -> Path:
    """half_plus_two re-exported by another tool: frozen from its checkpoint, every op renamed,
    the input a Placeholder instead of the parsed tf.Example."""
    from tensorflow.core.framework import graph_pb2  # noqa: PLC0415
    from tensorflow.core.protobuf import saved_model_pb2  # noqa: PLC0415

    version = real_models["half_plus_two"] / "00000123"
    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((version / "saved_model.pb").read_bytes())
    nodes = {n.name: n for n in saved.meta_graphs[0].graph_def.node}
    reader = tf.train.load_checkpoint(str(version / "variables" / "variables"))
    rename = {
        "x": "input_x", "a": "slope", "a/read": "slope/value", "b": "offset", "b/read": "offset/value",
        "Mul": "scale", "Add": "y_pre", "add_1": "y_sum", "y": "output_y", "zeros": "blank",
        "conv2d/kernel": "bias_conv/k", "conv2d/Conv2D/ReadVariableOp": "bias_conv/k_value",
        "conv2d/Conv2D": "bias_conv/conv", "conv2d/bias": "bias_conv/b",
        "conv2d/BiasAdd/ReadVariableOp": "bias_conv/b_value",
        "conv2d/BiasAdd": "bias_conv/add", "strided_slice/stack": "take/begin", "strided_slice/stack_1": "take/end",
        "strided_slice/stack_2": "take/step", "strided_slice": "take",
    }
    graph = graph_pb2.GraphDef()
    graph.versions.CopyFrom(saved.meta_graphs[0].graph_def.versions)
    for old, new in rename.items():
        src, node = nodes[old], graph.node.add()
        node.name = new
        if old == "x":
            node.op = "Placeholder"
            node.attr["dtype"].type = tf.float32.as_datatype_enum
            node.attr["shape"].shape.CopyFrom(tf.TensorShape([None, 1]).as_proto())
            continue
        if src.op in ("VariableV2", "VarHandleOp"):  # frozen with the checkpoint's value
            node.op = "Const"
            node.attr["dtype"].type = tf.float32.as_datatype_enum
            node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(reader.get_tensor(old)))
            continue
        node.op = "Identity" if src.op == "ReadVariableOp" else src.op
        for key, value in src.attr.items():
            if key not in ("_class", "dtype") or src.op != "ReadVariableOp":
                node.attr[key].CopyFrom(value)
        if src.op == "ReadVariableOp":
            node.attr["T"].type = tf.float32.as_datatype_enum
        node.attr.pop("_class", None)
        node.input.extend(rename[i.split(":")[0]] + (":" + i.split(":")[1] if ":" in i else "") for i in src.input)
    path = out / "renamed.pb"
    path.write_bytes(graph.SerializeToString())
    return path


def test_renamed_reexport_is_matched_by_structure(tf: Any, real_models: dict[str, Path], tmp_path: Path) -> None:
    renamed = _renamed_half_plus_two(tf, real_models, tmp_path)
    proc = run_cli("diff-graph", "--json", str(real_models["half_plus_two"]), str(renamed),
                   "--b-outputs", "output_y", "--b-input-names", "input_x")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["matched"], doc["only_in_a"], doc["only_in_b"]) == (20, [], [])
    frozen = {"a": "slope", "b": "offset", "conv2d/kernel": "bias_conv/k", "conv2d/bias": "bias_conv/b"}
    assert sorted((r["kind"], r["a_nodes"], r["b_nodes"], r["detail"]) for r in doc["rewrites"]) == sorted(
        ("variable_frozen", [a], [b], {"exact": True, "verified_by_value": True}) for a, b in frozen.items()
    )
    assert doc["renamed"] == {
        "x": "input_x", "y": "output_y", "Mul": "scale", "Add": "y_pre", "add_1": "y_sum", "zeros": "blank",
        "a/read": "slope/value", "b/read": "offset/value", "conv2d/Conv2D": "bias_conv/conv",
        "conv2d/Conv2D/ReadVariableOp": "bias_conv/k_value", "conv2d/BiasAdd": "bias_conv/add",
        "conv2d/BiasAdd/ReadVariableOp": "bias_conv/b_value", "strided_slice": "take",
        "strided_slice/stack": "take/begin", "strided_slice/stack_1": "take/end", "strided_slice/stack_2": "take/step",
        **frozen,
    }


def test_gpu_pinned_model_prints_a_notice(models: dict[str, Path], tmp_path: Path, tf: Any) -> None:
    from tensorflow.core.protobuf import saved_model_pb2  # noqa: PLC0415

    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((models["detector"] / "saved_model.pb").read_bytes())
    for node in saved.meta_graphs[0].graph_def.node:
        if not node.device:
            node.device = "/device:GPU:0"
    shutil.copytree(models["detector"] / "variables", tmp_path / "variables")
    (tmp_path / "saved_model.pb").write_bytes(saved.SerializeToString())
    proc = run_cli("diff-graph", str(models["detector"]), str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "No rewrites in the inference subgraph." in proc.stdout
    assert "note (B): " in proc.stdout and "are pinned to /device:GPU:0" in proc.stdout
    assert "soft placement" in proc.stdout


# --------------------------------------------------------------------------- bad input


def test_path_does_not_exist(models: dict[str, Path], tmp_path: Path) -> None:
    proc = run_cli("diff-graph", str(tmp_path / "nope"), str(models["detector"]))
    assert_user_error(proc, f"{tmp_path}/nope does not exist", "Check the path")


def test_directory_that_is_no_model(models: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "weights.bin").write_bytes(b"\x00\x01")  # (a Keras .h5 is named as such: test_artifacts.py)
    (tmp_path / "notes.txt").write_text("trained on friday")
    proc = run_cli("diff-graph", str(models["detector"]), str(tmp_path))
    assert_user_error(proc, "is neither a checkpoint nor a SavedModel", "(it contains notes.txt, weights.bin)",
                      "Point at a directory with saved_model.pb")


def test_truncated_saved_model(models: dict[str, Path], tmp_path: Path) -> None:
    shutil.copytree(models["detector"], tmp_path / "sm")
    pb = tmp_path / "sm" / "saved_model.pb"
    pb.write_bytes(pb.read_bytes()[:5000])
    proc = run_cli("diff-graph", str(tmp_path / "sm"), str(models["detector"]))
    assert_user_error(proc, f"{pb} is not a valid SavedModel", "truncated or corrupt", "Re-export or re-copy it")


def test_meta_without_its_weights(models: dict[str, Path], tmp_path: Path) -> None:
    shutil.copy(models["detector_ckpt"] / "model.ckpt.meta", tmp_path / "model.ckpt.meta")
    proc = run_cli("diff-graph", str(tmp_path), str(models["detector"]))
    assert_user_error(
        proc,
        f"the .meta is there but {tmp_path}/model.ckpt.index and {tmp_path}/model.ckpt.data-* are missing",
        "Copy the complete checkpoint (.meta, .index and every .data-* shard)",
    )


def test_several_checkpoints_and_no_checkpoint_file(models: dict[str, Path], tmp_path: Path) -> None:
    for step in (100, 2000):
        for ext in ("meta", "index", "data-00000-of-00001"):
            shutil.copy(models["detector_ckpt"] / f"model.ckpt.{ext}", tmp_path / f"model.ckpt-{step}.{ext}")
    proc = run_cli("diff-graph", str(tmp_path), str(models["detector"]))
    assert_user_error(proc, "holds several checkpoints (model.ckpt-100.meta, model.ckpt-2000.meta)",
                      "Pass one checkpoint prefix (or its .meta file) instead of the directory, "
                      f"e.g. {tmp_path}/model.ckpt-2000")


def test_unknown_tag_set(models: dict[str, Path]) -> None:
    proc = run_cli("diff-graph", str(models["detector_ckpt"]), str(models["detector"]), "--b-tag", "serve,tpu")
    assert_user_error(proc, "has no tag set 'serve,tpu'; it has 'serve'", "Choose one with --tag")


def test_unknown_signature_lists_the_available_ones(real_models: dict[str, Path]) -> None:
    proc = run_cli("diff-graph", str(real_models["half_plus_two"]), str(real_models["half_plus_two"]),
                   "--signature", "predict_y")
    assert_user_error(
        proc,
        "no signature 'predict_y' (available — tags 'serve': classify_x_to_y, regress_x2_to_y3, regress_x_to_y, "
        "regress_x_to_y2, serving_default)",
        "Choose one with --signature",
    )


def test_graph_def_with_an_op_unknown_to_tensorflow(models: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "custom.pbtxt").write_text(
        'node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } }\n'
        'node { name: "q" op: "AcmeQuantize" input: "x" }\n'
    )
    proc = run_cli("diff-graph", str(tmp_path / "custom.pbtxt"), str(models["detector"]), "--a-outputs", "q")
    assert_user_error(proc, f"the graph of {tmp_path}/custom.pbtxt uses ops unknown to TensorFlow",
                      "AcmeQuantize (node 'q')", "tf.load_op_library")


def test_graph_def_calling_a_function_it_does_not_define(models: dict[str, Path], tmp_path: Path) -> None:
    """optimize_for_inference rebuilds a graph node by node and drops its function library: a TF2
    while loop then calls a body nobody defines, and the run failed later with a hint at the inputs."""
    (tmp_path / "dropped.pbtxt").write_text(
        'node { name: "x" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } }\n'
        'node { name: "loop" op: "StatefulPartitionedCall" input: "x" '
        'attr { key: "f" value { func { name: "map_while_body_243" } } } '
        'attr { key: "Tin" value { list { type: DT_FLOAT } } } attr { key: "Tout" value { list { type: DT_FLOAT } } } }\n'
    )
    proc = run_cli("diff-graph", str(tmp_path / "dropped.pbtxt"), str(models["detector"]), "--a-outputs", "loop")
    assert_user_error(proc, f"the graph of {tmp_path}/dropped.pbtxt calls functions it does not define: "
                      "map_while_body_243 (called by 'loop')", "Export it again with its function library")


def test_graph_without_signature_borrows_the_other_sides_or_needs_outputs(
    models: dict[str, Path], tmp_path: Path, tf: Any
) -> None:
    from tensorflow.core.protobuf import saved_model_pb2  # noqa: PLC0415

    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((models["detector_folded"] / "saved_model.pb").read_bytes())
    (tmp_path / "folded.pb").write_bytes(saved.meta_graphs[0].graph_def.SerializeToString())
    borrowed = run_cli("diff-graph", "--json", str(models["detector_folded"]), str(tmp_path / "folded.pb"))
    doc = json.loads(borrowed.stdout)  # the same graph, traced with A's signature: nothing differs
    assert (doc["rewrites"], doc["only_in_a"], doc["only_in_b"]) == ([], [], [])
    proc = run_cli("diff-graph", str(tmp_path / "folded.pb"), str(tmp_path / "folded.pb"))
    assert_user_error(proc, "has no signature to say what to trace, and neither has",
                      "(candidate inputs: images; candidate outputs, best first: ",
                      "outputs/scores", "Name them with --outputs NAME[,NAME...] and --input-names")
    traced = run_cli("diff-graph", "--json", str(models["detector_folded"]), str(tmp_path / "folded.pb"),
                     "--b-outputs", "outputs/scores,outputs/boxes", "--b-input-names", "images")
    assert traced.returncode == 0, traced.stderr
    doc = json.loads(traced.stdout)
    # B traces only two of the six outputs: the NMS branch is A's alone; the rest is the same graph
    assert doc["rewrites"] and {r["kind"] for r in doc["rewrites"]} == {"node_removed"}
    assert doc["only_in_b"] == []
    assert all(n.startswith(("nms/", "outputs/detection", "outputs/num")) for n in doc["only_in_a"])


def test_debug_shows_the_traceback(tmp_path: Path, models: dict[str, Path]) -> None:
    proc = run_cli("--debug", "diff-graph", str(tmp_path / "nope"), str(models["detector"]))
    assert proc.returncode == 2
    assert "Traceback" in proc.stderr and proc.stderr.strip().splitlines()[-1].startswith("tftrace: error: ")


def test_debug_works_after_the_subcommand_too_and_version_is_printed(tmp_path: Path) -> None:
    after = run_cli("report", str(tmp_path / "nope"), "--debug")
    before = run_cli("--debug", "report", str(tmp_path / "nope"))
    plain = run_cli("report", str(tmp_path / "nope"))
    for proc in (after, before):
        assert proc.returncode == 2 and "Traceback" in proc.stderr and "does not exist" in proc.stderr
    assert_user_error(plain, "does not exist")
    version = run_cli("--version")
    assert version.returncode == 0 and version.stdout.strip() == "tftrace 0.1.0"
