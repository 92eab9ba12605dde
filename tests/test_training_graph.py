"""A TF1 checkpoint whose meta graph is the training graph (tests/fixtures/tf1_training_bn.py).

Its batch norm runs with is_training=True (each run's batch statistics) and updates its moving
averages as it runs. tftrace once called batch 1 against 4 "shape-dependent kernel choice", the
checkpoint against its inference SavedModel an "export-time rewrite" to "fold in both or in
neither", and said "2 weights differ" although the export restored the very same variables
(the captured moving averages were what the runs before had left). The cause is the training
graph, and nothing else is claimed.

Its batch norm, replayed on identical rows, was called "own error" (its kernel) although the
batch it normalises over is not the sides' same: it is its batch statistics. And once the runs'
updates of the moving averages were kept from being called changed weights, a moving mean that
really differs between two checkpoints was not said either: a capture keeps the variables the
runs write as the model loaded them, and compare tells the weights apart by those values.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import build_fixture, run_cli

pytestmark = pytest.mark.slow

TRAINING = "A's graph is a training graph: its batch norms (`bn1/FusedBatchNormV3`) run with is_training=True"
FALSE_CAUSES = ("Shape-dependent kernel choice", "hold different weights", "Export-time rewrites", "fold in both")


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fixture("tf1_training_bn.py", tmp_path_factory.mktemp("training_bn"))


NAMED = ("--outputs", "probs:0", "--input-names", "images:0")


def checkpoint_value(ckpt: Path, key: str) -> list[float]:
    """A variable's value as the checkpoint holds it, read in a child (this process keeps no TensorFlow)."""
    proc = subprocess.run([sys.executable, "-c", "import sys, json, tensorflow as tf; print(json.dumps(tf.train."
                           "load_checkpoint(sys.argv[1]).get_tensor(sys.argv[2]).tolist()))", str(ckpt), key],
                          capture_output=True, text=True, check=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": "-1"})
    return json.loads(proc.stdout.splitlines()[-1])


def report_md(out: Path) -> str:
    return " ".join((out / "report.md").read_text(encoding="utf-8").split())


def _compare(out: Path, *args: str) -> tuple[dict, str]:
    proc = run_cli("compare", *args, "--onednn", "off", "--out", str(out))
    assert proc.returncode == 1, proc.stderr
    return json.loads((out / "report.json").read_text()), proc.stdout


def _assert_training_graph(report: dict, stdout: str) -> None:
    answers = report["answers"]
    assert answers["causes"] == ["training_graph"]
    assert report["first_divergence"]["node"] == "bn1/FusedBatchNormV3"
    why = " ".join(answers["why"])
    assert TRAINING in why
    assert "depends on which examples share its run" in why
    assert "its runs write its variables (`bn1/AssignSubVariableOp`, `bn1/AssignSubVariableOp_1`)" in why
    assert "rebuild the model with is_training=False" in answers["prevent"][0]
    assert not [r for r in report["rewrites"] if r["kind"] == "const_changed"]
    text = " ".join(stdout.split())
    for false in FALSE_CAUSES:
        assert false not in why and false not in " ".join(answers["prevent"]) and false not in text


def test_checkpoint_against_its_inference_export_is_the_training_graph(trained: Path, tmp_path: Path) -> None:
    report, stdout = _compare(tmp_path / "out", str(trained / "ckpt"), str(trained / "savedmodel"))
    _assert_training_graph(report, stdout)
    assert "it differs from B's inference graph (is_training=False there: the moving averages)" in report["answers"]["why"][0]
    assert "weights differ" not in " ".join(stdout.split())
    isolation = report["first_divergence"]["isolation"]
    assert isolation["verdict"] == "batch_statistics"
    assert isolation["detail"].startswith(
        "A's FusedBatchNormV3 normalises each row with the statistics of the batch it runs in (is_training=True), "
        "B's with its moving averages (is_training=False): fed the same rows, the replays differ by up to ")


def test_batch_sizes_of_a_training_graph_are_not_kernel_choice(trained: Path, tmp_path: Path) -> None:
    ckpt = str(trained / "ckpt")
    report, stdout = _compare(tmp_path / "out", ckpt, ckpt, *NAMED, "--a-batch-size", "1", "--b-batch-size", "4")
    assert report["answers"]["why"][0].count("both sides' graphs are training graphs: their batch norms") == 1
    assert "the sides run different batch sizes, so the outputs differ" in report["answers"]["why"][0]
    assert report["answers"]["causes"] == ["training_graph"]
    assert not [r for r in report["rewrites"] if r["kind"] == "const_changed"]
    for false in FALSE_CAUSES:
        assert false not in " ".join(stdout.split())
    # fed the same rows, the batch norm still differs: over another batch, not by its kernel
    isolation = report["first_divergence"]["isolation"]
    assert isolation["verdict"] == "batch_statistics"
    assert isolation["detail"].startswith(
        "the sides batch the examples differently, and both sides' FusedBatchNormV3 normalise each row with the "
        "statistics of the batch it runs in (is_training=True): fed the same rows, the replays differ by up to ")
    text = " ".join(stdout.split())
    assert ("bn1/FusedBatchNormV3 (FusedBatchNormV3), max abs" in text and "— batch statistics: fed identical rows, "
            "the op alone still differs: it is computed from statistics over the batch it runs in (a batch norm in "
            "training mode, or a reduction over the batch axis), which the sides do not share; not its kernel" in text)
    assert "own error" not in text and "kernel differs" not in report_md(tmp_path / "out")


def test_a_moving_mean_that_differs_between_two_training_checkpoints_is_a_changed_weight(
        trained: Path, tmp_path: Path) -> None:
    """ckpt_recalibrated re-estimated bn1/moving_mean alone: the runs of both sides also update it
    (and bn1/moving_variance, equal in both checkpoints), so their reads differ either way; only
    the values as loaded tell which weight the artifacts really hold differently."""
    report, _ = _compare(tmp_path / "out", str(trained / "ckpt"), str(trained / "ckpt_recalibrated"), *NAMED,
                         "--a-batch-size", "1", "--b-batch-size", "4")
    changed = [r for r in report["rewrites"] if r["kind"] == "const_changed"]
    assert [(r["a_nodes"], r["b_nodes"]) for r in changed] == [
        (["bn1/moving_mean", "bn1/ReadVariableOp_2"], ["bn1/moving_mean", "bn1/ReadVariableOp_2"])]
    values = changed[0]["detail"]["values"]  # the checkpoints' own values, not what the runs left
    assert values == {"a": checkpoint_value(trained / "ckpt", "bn1/moving_mean"),
                      "b": checkpoint_value(trained / "ckpt_recalibrated", "bn1/moving_mean")}
    origins = {o["node"]: o for o in report["origins"]}
    assert origins["bn1/ReadVariableOp_2"]["rewrite"] == "const_changed"
    assert origins["bn1/ReadVariableOp_2"]["isolation"]["verdict"] == "weights_differ"  # not "set at each load"
    assert origins["bn1/ReadVariableOp_4"]["isolation"]["verdict"] == "state"  # the variance: the runs' updates
    assert report["answers"]["causes"] == ["training_graph", "weights"]
    assert "1 weight differs between A and B (`bn1/moving_mean`)" in report["answers"]["why"][1]


def test_only_the_runs_updates_differing_is_no_changed_weight(trained: Path, tmp_path: Path) -> None:
    """ckpt_again holds the very values of ckpt: at batch 1 against 4 the runs update the moving
    averages differently, which is the model's state, no weight."""
    report, _ = _compare(tmp_path / "out", str(trained / "ckpt"), str(trained / "ckpt_again"), *NAMED,
                         "--a-batch-size", "1", "--b-batch-size", "4")
    assert not [r for r in report["rewrites"] if r["kind"] == "const_changed"]
    origins = {o["node"]: o["isolation"]["verdict"] for o in report["origins"]}
    assert origins == {"bn1/FusedBatchNormV3": "batch_statistics", "bn1/ReadVariableOp_2": "state",
                       "bn1/ReadVariableOp_4": "state"}
    assert report["answers"]["causes"] == ["training_graph"]


def test_a_capture_keeps_the_values_the_runs_write_as_loaded(trained: Path, tmp_path: Path) -> None:
    from tracer.captures.reader import Capture

    proc = run_cli("capture", str(trained / "ckpt_recalibrated"), *NAMED, "--batch-size", "4", "--onednn", "off",
                   "--out", str(tmp_path / "cap"))
    assert proc.returncode == 0, proc.stderr
    capture = Capture.open(tmp_path / "cap")
    assert sorted(capture.manifest["loaded_values"]) == ["bn1/moving_mean", "bn1/moving_variance"]
    loaded = capture.loaded_value("bn1/moving_mean")
    assert loaded.tolist() == checkpoint_value(trained / "ckpt_recalibrated", "bn1/moving_mean")
    assert capture.tensor("bn1/ReadVariableOp_2:0").tolist() != loaded.tolist()  # what the runs before it left
    assert capture.loaded_value("bn1/gamma") is None  # no run writes it: its reads hold it


@pytest.fixture(scope="module")
def dense_trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fixture("tf1_dense_bn.py", tmp_path_factory.mktemp("dense_bn"))


@pytest.mark.parametrize(("folder", "norm", "words"), [
    ("ckpt", "bn1/FusedBatchNormV3", "both sides' graphs are training graphs: their batch norms (`bn1/FusedBatchNormV3`)"),
    ("ckpt_moments", "bn1/moments/SquaredDifference",
     "both sides' graphs take statistics over the batch, as a batch norm in training mode does"),
])
def test_a_training_batch_norm_after_the_first_divergence_is_still_named_and_weighed(
        dense_trained: Path, tmp_path: Path, folder: str, norm: str, words: str) -> None:
    """On the H200 a training checkpoint at batch 1 vs 8 differed first at its conv (another cuDNN
    algorithm per process), so the batch norm after it was no origin, and the causes were autotuning,
    atomics and the batch, 1e-3 each, for outputs 0.088 apart: the training graph went unnamed. Here
    the dense layer's MatMul differs at batch 1 vs 4 (Eigen's GEMV against its GEMM, 4.8e-7: beyond
    a zero tolerance), and the batch norm after it is replayed too: it is the cause, weighed by its
    replay on identical rows. Written by hand (tf.nn.moments over the batch axis), the op replayed is
    the first compared one computed from the batch's mean, which its replay recomputes."""
    ckpt = str(dense_trained / folder)
    report, _ = _compare(tmp_path / "out", ckpt, ckpt, "--outputs", "probs:0", "--input-names", "features:0",
                         "--a-batch-size", "1", "--b-batch-size", "4", "--atol", "0", "--rtol", "0")
    first = report["first_divergence"]
    assert (first["node"], first["isolation"]["verdict"]) == ("fc1/MatMul", "own_error")
    node = report["nodes"][norm]
    assert node["status"] == "propagated" and node["isolation"]["verdict"] == "batch_statistics"
    assert norm not in [o["node"] for o in report["origins"]]  # its inputs differ: no origin
    answers = report["answers"]
    assert answers["causes"] == ["training_graph", "batch"]
    assert answers["shares"][0]["max_abs"] == node["isolation"]["max_abs"] > 1.0
    assert answers["shares"][0]["measured"] == f"at `{norm}`, replayed alone on identical inputs"
    assert words in answers["why"][0]
    assert "the sides run different batch sizes, so the outputs differ" in answers["why"][0]
