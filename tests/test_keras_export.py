"""Keras 3 models, exported the ways Keras users export them (``keras_models``).

Every node of such an export sits under ``StatefulPartitionedCall/<model>_1/…``, and Keras names
the reads of a layer's variables after auto-numbered casts (``stem_bn_1/Cast_3/ReadVariableOp``).
Under a mixed-precision policy the casts are built in another order, so the same name reads
another variable: tftrace once paired those reads by name and reported a ReadVariableOp whose "own
kernel differs" as the first divergence. oneDNN is set off explicitly (its default depends on the CPU).

Recurrent layers (LSTM, GRU, SimpleRNN) and random augmentation layers once failed to load at all:
inlining froze their variables, though a recurrent loop is handed its weights as resources and a
random layer writes its seed state back on every call.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tracer.comparison.statuses import isolation_words

from conftest import assert_user_error, run_cli, why_lines

pytestmark = pytest.mark.slow

CONV = "StatefulPartitionedCall/detector_1/stem_conv_1/convolution"
OFF = {"TF_ENABLE_ONEDNN_OPTS": "0"}
LSTM = "StatefulPartitionedCall/lstm_model_1/lstm_1/"
AUGMENT = "StatefulPartitionedCall/augment_1/"
SEED_WRITES = [f"{AUGMENT}{layer}_1/AssignVariableOp" for layer in ("flip", "rotate", "zoom")]


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


def test_mapping_only_the_outputs_keeps_the_one_input_each_pairing(keras_models: Path, tmp_path: Path) -> None:
    """``model.export`` vs a ``tf.Module`` saved with its own keys: the outputs need ``--map``, the
    one input each does not. Mapping the outputs alone once turned that pairing off: B was fed
    A's examples under A's key and refused them ("… has keys ['image'] but the signature expects
    ['inputs']")."""
    proc = run_cli("compare", str(keras_models / "export"), str(keras_models / "module"), "--map",
                   "output_0=scores,output_1=boxes", "--out", str(tmp_path / "r"), env=OFF)
    assert proc.returncode == 0, proc.stderr
    report = _report(tmp_path / "r")
    assert report["verdict"] == "identical" and proc.stdout.startswith("IDENTICAL")
    assert set(report["outputs"]) == {"output_0", "output_1"}
    assert ("its one input 'inputs' was paired with A's one input 'image' (keyed differently; --map A_KEY=B_KEY "
            "pairs keys by hand)") in report["sides"]["b"]["notes"]
    assert report["sides"]["b"]["examples"]["source"].endswith("inputs_from_a.npy")


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


def _truth(keras_models: Path) -> dict[str, Any]:
    return json.loads((keras_models / "truth.json").read_text(encoding="utf-8"))


def test_an_lstm_export_at_batch_1_vs_8_differs_after_its_loop_within_tolerance(keras_models: Path,
                                                                               tmp_path: Path) -> None:
    """Exit 0: the loop's matrix products round differently at batch 1 and 8 (by 6e-8 here, as
    TensorFlow alone computes it, truth.json), far inside the default atol 1e-6. The first op a
    session can see after the loop is the slice of its last step; its replay runs the loop too."""
    seq = str(keras_models / "seq.npz")
    proc = run_cli("compare", str(keras_models / "lstm"), str(keras_models / "lstm"), "--a-batch-size", "1",
                   "--b-batch-size", "8", "--inputs", seq, "--out", str(tmp_path / "r"), env=OFF)
    assert proc.returncode == 0, proc.stderr
    report = _report(tmp_path / "r")
    truth = _truth(keras_models)["lstm_batch_1_vs_8"]
    assert report["outputs"]["output_0"]["max_abs"] == truth["max_abs"]  # the plain runs are the served model's
    if truth["bitwise_equal"]:  # a CPU whose kernels do not block by batch size
        assert report["verdict"] == "identical" and proc.stdout.startswith("IDENTICAL")
        return
    assert report["verdict"] == "within_tolerance" and proc.stdout.startswith("WITHIN TOLERANCE")
    first = report["first_divergence"]
    assert (first["node"], first["op"], first["status"]) == (f"{LSTM}strided_slice_3", "StridedSlice",
                                                             "within_tolerance")
    assert report["first_divergence_beyond_tolerance"] is None
    assert (first["isolation"]["verdict"], first["isolation"]["loop"]) == ("own_error", f"{LSTM}while/exit/_38")
    assert first["isolation"]["detail"].startswith(
        f"given identical inputs, B's StridedSlice, with the while loop above it (ending at `{LSTM}while/exit/_38`, "
        "replayed whole: a session cannot fetch the ops inside a loop, and nothing between them was compared), "
        "differs from A's by up to ")
    assert [(o["node"], o["isolation"]["verdict"]) for o in report["origins"]] == [
        (f"{LSTM}strided_slice_3", "own_error"), (f"{LSTM}while/exit/_39", "own_error"),
        (f"{LSTM}while/exit/_40", "own_error")]
    assert report["answers"]["causes"] == ["batch"]
    assert why_lines(report["answers"])[0] == (
        "Shape-dependent kernel choice (GEMM blocking on CPU, cuDNN/cuBLAS algorithm per shape on GPU): the sides "
        f"run batch 1 vs 8; the difference starts at `{LSTM}strided_slice_3` (StridedSlice), which, replayed with the "
        "while loop above it, differs given identical inputs.")
    assert isolation_words("own_error", loop_above=True, sep=": ") in " ".join(proc.stdout.split())
    assert "its own kernel differs" not in proc.stdout


def test_an_lstm_export_and_its_tf_saved_model_save_are_identical(keras_models: Path, tmp_path: Path) -> None:
    proc = run_cli("compare", str(keras_models / "lstm"), str(keras_models / "lstm_tfsave"), "--inputs",
                   str(keras_models / "seq.npz"), "--out", str(tmp_path / "r"), env=OFF)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("IDENTICAL")
    report = _report(tmp_path / "r")
    assert report["verdict"] == "identical" and report["origins"] == []
    assert report["outputs"]["output_0"]["identical"] is True
    diff = run_cli("diff-graph", str(keras_models / "lstm"), str(keras_models / "lstm_tfsave"), "--json", env=OFF)
    assert diff.returncode == 0, diff.stderr
    graph_diff = json.loads(diff.stdout)
    assert (graph_diff["rewrites"], graph_diff["only_in_a"], graph_diff["only_in_b"]) == ([], [], [])


@pytest.mark.parametrize("name", ["lstm", "gru", "simple_rnn", "lstm_unrolled"])
def test_a_recurrent_export_captures_what_its_signature_serves(keras_models: Path, tmp_path: Path, name: str) -> None:
    """Bit for bit what ``tf.saved_model.load(...).signatures['serving_default']`` returns."""
    from tracer.captures.reader import Capture  # noqa: PLC0415

    proc = run_cli("capture", str(keras_models / name), "--batch-size", "8", "--inputs",
                   str(keras_models / "seq.npz"), "--out", str(tmp_path / "c"), env=OFF)
    assert proc.returncode == 0, proc.stderr
    served = np.asarray(_truth(keras_models)["outputs"][name], dtype=np.float32)
    captured = Capture.open(tmp_path / "c").plain_output("output_0")
    assert captured.dtype == np.float32 and captured.shape == (8, 8)
    assert np.array_equal(captured, served)


def test_a_random_augmentation_export_loads_and_agrees_with_itself_run_for_run(keras_models: Path,
                                                                              tmp_path: Path) -> None:
    """Each side is a fresh load making the same runs, so they agree bit for bit; every run moves
    the seed state, which the report says (the instrumented run, a later one, computed other outputs)."""
    proc = run_cli("compare", str(keras_models / "augment"), str(keras_models / "augment"), "--out",
                   str(tmp_path / "r"), env=OFF)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("IDENTICAL")
    report = _report(tmp_path / "r")
    assert report["verdict"] == "identical"
    for key in ("a", "b"):
        observer = report["observer_effect"][key]
        assert (observer["explained_by_state"], observer["outputs_identical"], observer["stateful_ops"]) == (
            True, False, SEED_WRITES)
        assert report["sides"][key]["notes"] == [
            "TF2 signature function inlined for tracing (its variables kept as variables)",
            "the signature writes 3 of its variables on every run (seed_generator/seed_generator_state, "
            "seed_generator_1/seed_generator_state, seed_generator_2/seed_generator_state): kept as variables, so "
            "each run reads what the runs before it left, as in the served model"]
    assert report["answers"]["why"] == [
        "The two sides compute bit-identical results for these examples.",
        f"The model changes its own variables on every run ({', '.join(SEED_WRITES)}): the sides agree run for run "
        "from a fresh load, but its results on the same inputs change from one run to the next."]
    assert report["answers"]["causes"] == []
    assert (f"(not the observation: the graph changes its own state on every run, {', '.join(SEED_WRITES)})"
            in " ".join(proc.stdout.split()))


def test_a_random_augmentation_export_at_batch_1_vs_8_differs_by_its_own_state(keras_models: Path,
                                                                              tmp_path: Path) -> None:
    """Batch 1 makes 8 runs where batch 8 makes one, and each run advances the seeds: the first
    difference is a read of a seed state, which both sides load alike. That is the model's state:
    not nondeterminism, not the batch's kernels, not the export."""
    proc = run_cli("compare", str(keras_models / "augment"), str(keras_models / "augment"), "--a-batch-size", "1",
                   "--b-batch-size", "8", "--out", str(tmp_path / "r"), env=OFF)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith("DIVERGED")
    report = _report(tmp_path / "r")
    first = report["first_divergence"]
    assert (first["node"], first["op"]) == (f"{AUGMENT}flip_1/Add/ReadVariableOp", "ReadVariableOp")
    assert report["first_divergence_beyond_tolerance"]["node"] == first["node"]
    isolation = first["isolation"]
    assert (isolation["verdict"], isolation["writes"], isolation["load_state"], isolation["max_abs"]) == (
        "state", [SEED_WRITES[0]], False, 0.0)
    assert {o["isolation"]["verdict"] for o in report["origins"] if o.get("isolation")} == {"state"}
    assert report["answers"]["causes"] == ["state"]
    assert why_lines(report["answers"]) == [
        "The model updates its own variables when it runs (a stateful signature): "
        f"`{AUGMENT}flip_1/Add/ReadVariableOp` (ReadVariableOp) reads a variable that the model writes on every run "
        f"(`{SEED_WRITES[0]}`), so each run reads what the runs before it left; the sides run batch 1 vs 8, so they "
        "had run the model a different number of times before the runs compared; replayed in fresh processes both "
        "sides read the same value: no kernel, input or export differs.",
        f"The first divergence is `{AUGMENT}flip_1/Add/ReadVariableOp` (ReadVariableOp)."]
    flat = " ".join(proc.stdout.split())
    assert isolation_words("state", sep=": ") in flat  # the registry's words for the verdict
