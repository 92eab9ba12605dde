"""Keras 3 models, exported the ways Keras users export them (``keras_models``).

Every node of such an export sits under ``StatefulPartitionedCall/<model>_1/…``, and Keras names
the reads of a layer's variables after auto-numbered casts (``stem_bn_1/Cast_3/ReadVariableOp``).
Under a mixed-precision policy the casts are built in another order, so the same name reads
another variable: tftrace once paired those reads by name and reported a ReadVariableOp whose "own
kernel differs" as the first divergence. oneDNN is set off explicitly (its default depends on the CPU).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import assert_user_error, run_cli

pytestmark = pytest.mark.slow

CONV = "StatefulPartitionedCall/detector_1/stem_conv_1/convolution"
OFF = {"TF_ENABLE_ONEDNN_OPTS": "0"}


def _report(out: Path) -> dict[str, Any]:
    return json.loads((out / "report.json").read_text(encoding="utf-8"))


def test_mixed_bfloat16_export_diverges_at_the_first_conv_it_casts(keras_models: Path, tmp_path: Path) -> None:
    proc = run_cli("compare", str(keras_models / "export"), str(keras_models / "bf16"), "--out", str(tmp_path / "r"),
                   env=OFF)
    assert proc.returncode == 1, proc.stderr
    report = _report(tmp_path / "r")
    first = report["first_divergence"]
    # B's value of it is the bfloat16 conv cast back to float32 for the batch norm
    assert (first["node"], first["b_node"], first["op"]) == (CONV, "StatefulPartitionedCall/detector_1/stem_bn_1/Cast",
                                                             "Conv2D")
    assert first["rewrite"] == "cast_inserted"
    assert first["isolation"]["verdict"] == "own_error"
    assert not [o["node"] for o in report["origins"] if o["op"] == "ReadVariableOp"]
    assert report["answers"]["causes"] == ["mixed_precision"]
    assert "Keras: build under the `float32` policy" in report["answers"]["prevent"][0]
    assert set(report["outputs"]) == {"output_0", "output_1"}
    assert all(0 < out["max_abs"] < 0.05 for out in report["outputs"].values())


def test_diff_graph_pairs_each_variable_read_with_the_read_of_the_same_variable(keras_models: Path) -> None:
    proc = run_cli("diff-graph", str(keras_models / "export"), str(keras_models / "bf16"), "--json", env=OFF)
    assert proc.returncode == 0, proc.stderr
    diff = json.loads(proc.stdout)
    cast = {r["a_nodes"][0]: r for r in diff["rewrites"] if r["kind"] == "cast_inserted"}
    assert CONV in cast and cast[CONV]["detail"]["dtype_b"] == "bfloat16"
    # the batch norm's four reads: same variable on both sides, numbered one apart
    renamed = diff["renamed"]
    bn = "StatefulPartitionedCall/detector_1/stem_bn_1/"
    assert {a: renamed[a] for a in renamed if a.startswith(bn) and a.endswith("ReadVariableOp")} == {
        f"{bn}Cast{a}/ReadVariableOp": f"{bn}Cast_{b}/ReadVariableOp" for a, b in (("", 1), ("_1", 2), ("_2", 3), ("_3", 4))}
    assert not [r for r in diff["rewrites"] if r["kind"] == "rewired" and "ReadVariableOp" in r["a_nodes"][0]]


def test_model_export_and_tf_saved_model_save_compute_identically_their_inputs_paired(keras_models: Path, tmp_path: Path) -> None:
    proc = run_cli("compare", str(keras_models / "export"), str(keras_models / "tfsave"), "--out",
                   str(tmp_path / "r"), env=OFF)
    assert proc.returncode == 0, proc.stderr
    report = _report(tmp_path / "r")
    assert report["verdict"] == "identical"
    assert proc.stdout.startswith("IDENTICAL")
    # model.export keys the input after the Input layer, tf.saved_model.save calls it 'inputs': one each, paired
    assert ("its one input 'inputs' was paired with A's one input 'image' (keyed differently; --map A_KEY=B_KEY "
            "pairs keys by hand)") in report["sides"]["b"]["notes"]
    assert report["sides"]["b"]["examples"]["source"].endswith("inputs_from_a.npy")
    assert report["sides"]["a"]["examples"]["digest"] == report["sides"]["b"]["examples"]["digest"]


def test_a_keras_file_is_refused_with_the_export_that_makes_it_readable(keras_models: Path) -> None:
    proc = run_cli("compare", str(keras_models / "model.keras"), str(keras_models / "export"))
    assert_user_error(proc, f"{keras_models}/model.keras is a Keras model file",
                      f"keras.models.load_model('{keras_models}/model.keras').export('exported')")


def test_a_tensor_cast_exactly_to_float16_is_no_divergence(keras_models: Path, tmp_path: Path) -> None:
    """mixed_float16 casts block_conv's bias to float16, where its values happen to be exact: the
    same numbers in another dtype. tftrace once called that Reshape the first divergence (max abs 0)
    and said its "own kernel differs"."""
    proc = run_cli("compare", str(keras_models / "export"), str(keras_models / "fp16"), "--out", str(tmp_path / "r"),
                   env=OFF)
    assert proc.returncode == 1, proc.stderr
    report = _report(tmp_path / "r")
    assert report["first_divergence"]["node"] == CONV
    assert report["first_divergence_beyond_tolerance"]["node"] == CONV
    reshape = report["nodes"]["StatefulPartitionedCall/detector_1/block_conv_1/Reshape"]
    assert (reshape["status"], reshape["max_abs"], reshape["dtype"], reshape["dtype_b"]) == (
        "identical", 0.0, "float32", "float16")
    assert reshape["reason"] == "the same values, as float32 in A and float16 in B"
    flat = " ".join(proc.stdout.split())
    assert f"{CONV} (Conv2D)" in flat and "given identical inputs it differs as rewritten in B (cast_inserted)" in flat


# A float32 model and its mixed_float16 twin built without names in one script (auto_f32/, auto_fp16/):
# Keras auto-names the second, so no name pairs their ops and B's casts stand between them.
AUTO_A = "StatefulPartitionedCall/functional_1/"
AUTO_B = "StatefulPartitionedCall/functional_1_1/"


def test_diff_graph_finds_the_casts_of_an_auto_named_mixed_float16_twin(keras_models: Path) -> None:
    """tftrace once matched nothing across those casts: every conv, batch norm and ReLU was reported
    removed from A and added to B, and no cast_inserted. Now it finds what the named twin's diff finds."""
    proc = run_cli("diff-graph", str(keras_models / "auto_f32"), str(keras_models / "auto_fp16"), "--json", env=OFF)
    assert proc.returncode == 0, proc.stderr
    diff = json.loads(proc.stdout)
    cast = {r["a_nodes"][0]: (r["b_nodes"][-1], r["detail"]["dtype_b"], r["detail"]["casts"])
            for r in diff["rewrites"] if r["kind"] == "cast_inserted"}
    assert cast == {
        f"{AUTO_A}block_conv_1/Reshape": (f"{AUTO_B}block_conv_1/Reshape", "float16",
                                          [f"{AUTO_B}block_conv_1/Reshape/Cast"]),
        f"{AUTO_A}stem_conv_1/convolution": (f"{AUTO_B}stem_conv_1/convolution", "float16",
                                             [f"{AUTO_B}Cast", f"{AUTO_B}stem_conv_1/convolution/Cast",
                                              f"{AUTO_B}stem_bn_1/Cast"]),
        f"{AUTO_A}stem_relu_1/Relu": (f"{AUTO_B}stem_relu_1/Relu", "float16", [f"{AUTO_B}stem_bn_1/Cast_5"]),
        f"{AUTO_A}block_conv_1/convolution": (f"{AUTO_B}block_conv_1/convolution", "float16",
                                              [f"{AUTO_B}block_conv_1/convolution/Cast"]),
        f"{AUTO_A}block_conv_1/Relu": (f"{AUTO_B}block_conv_1/Relu", "float16", [f"{AUTO_B}gap_1/Cast"]),
    }
    assert diff["matched"] == 68 and diff["only_in_a"] == []
    # B's only ops left unpaired are its casts; the three that no narrowed op explains (the pooled
    # features cast to float16 and back for the two float32 heads) are listed as added, as for the named twin
    assert sorted(diff["only_in_b"]) == sorted(
        [b for _, _, casts in cast.values() for b in casts] + [f"{AUTO_B}gap_1/Cast_1", f"{AUTO_B}Cast_1", f"{AUTO_B}Cast_2"])
    assert not [r for r in diff["rewrites"] if r["kind"] == "node_removed"]


def test_compare_an_auto_named_mixed_float16_twin_blames_mixed_precision_at_its_first_conv(
        keras_models: Path, tmp_path: Path) -> None:
    """tftrace once said no rewrite explained the divergence ("the origins are Conv2D ops")."""
    proc = run_cli("compare", str(keras_models / "auto_f32"), str(keras_models / "auto_fp16"), "--out",
                   str(tmp_path / "r"), env=OFF)
    assert proc.returncode == 1, proc.stderr
    report = _report(tmp_path / "r")
    first = report["first_divergence"]
    assert (first["node"], first["b_node"], first["op"], first["rewrite"]) == (
        f"{AUTO_A}stem_conv_1/convolution", f"{AUTO_B}stem_bn_1/Cast", "Conv2D", "cast_inserted")
    assert report["first_divergence_beyond_tolerance"]["node"] == f"{AUTO_A}stem_conv_1/convolution"
    assert first["isolation"]["verdict"] == "own_error"
    assert report["answers"]["causes"] == ["mixed_precision"]
    flat = " ".join(proc.stdout.split())
    assert "given identical inputs it differs as rewritten in B (cast_inserted)" in flat


def test_an_auto_named_float32_twin_is_the_same_graph_renamed(keras_models: Path) -> None:
    """The control: the same weights, named by Keras and not by hand, and no casts: every op paired,
    no rewrite."""
    proc = run_cli("diff-graph", str(keras_models / "export"), str(keras_models / "auto_f32"), "--json", env=OFF)
    assert proc.returncode == 0, proc.stderr
    diff = json.loads(proc.stdout)
    assert (diff["rewrites"], diff["only_in_a"], diff["only_in_b"], diff["matched"]) == ([], [], [], 68)
    conv = "StatefulPartitionedCall/detector_1/stem_conv_1/convolution"
    assert diff["renamed"][conv] == f"{AUTO_A}stem_conv_1/convolution"
