"""A batch norm written by hand in a TF1 training graph (tests/fixtures/tf1_moments_bn.py):
``tf.nn.moments(x, axes=[0, 1, 2])`` + ``tf.nn.batch_normalization``, no fused op.

Its batch statistics are ``Mean`` ops over the batch axis: their values, and everything computed
from them, depend on which examples share a run. tftrace recognised only the fused batch norm in
training mode, so batch 1 against 4 of the checkpoint was called the SquaredDifference's "own
error" and a "shape-dependent kernel choice". The training graph is the cause; and a Mean over
the spatial axes only (global average pooling, in an inference graph) is no batch statistic.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import build_fixture, run_cli
from tracer import training

pytestmark = pytest.mark.slow

NAMED = ("--outputs", "probs:0", "--input-names", "images:0")
FALSE_CAUSES = ("Shape-dependent kernel choice", "own error", "kernel differs", "Export-time rewrites")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fixture("tf1_moments_bn.py", tmp_path_factory.mktemp("moments_bn"))


def _compare(out: Path, *args: str) -> tuple[dict, str]:
    proc = run_cli("compare", *args, "--onednn", "off", "--out", str(out))
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads((out / "report.json").read_text()), " ".join(proc.stdout.split())


def test_batch_sizes_of_a_moments_batch_norm_are_its_batch_statistics(built: Path, tmp_path: Path) -> None:
    ckpt = str(built / "ckpt")
    report, stdout = _compare(tmp_path / "out", ckpt, ckpt, *NAMED, "--a-batch-size", "1", "--b-batch-size", "4")
    assert report["verdict"] == "diverged"
    first = report["first_divergence"]
    # the Mean over the batch is not comparable between batch 1 and 4; the first op it feeds that is, differs
    assert first["node"] == "bn1/moments/SquaredDifference"
    assert report["nodes"]["bn1/moments/mean"]["status"] == "not_compared"
    isolation = first["isolation"]
    assert isolation["verdict"] == "batch_statistics"
    assert isolation["detail"].startswith(
        "the sides batch the examples differently, and both sides' SquaredDifference is computed from statistics "
        "over the batch it runs in (`bn1/moments/mean`: a reduction over the batch axis, which its replay "
        "recomputes): fed the same rows, the replays differ by up to ")
    assert report["answers"]["causes"] == ["training_graph"]
    why = " ".join(report["answers"]["why"])
    assert ("both sides' graphs take statistics over the batch, as a batch norm in training mode does: their "
            "`bn1/moments/mean` (Mean) reduces over the batch axis (axis 0), so each example's output depends on which "
            "examples share its run; the sides run different batch sizes, so the outputs differ") in why
    assert "rebuild the model with is_training=False" in report["answers"]["prevent"][0]
    assert "bn1/moments/SquaredDifference (SquaredDifference), max abs" in stdout and "— batch statistics:" in stdout
    for false in FALSE_CAUSES:
        assert false not in stdout and false not in why
    for side in ("a", "b"):
        assert training.coupled_in_report(report, "bn1/moments/SquaredDifference", side) == ["bn1/moments/mean"]
        # itself: the walk up stops at the SquaredDifference it reduces, which was compared
        assert training.coupled_in_report(report, "bn1/moments/variance", side) == ["bn1/moments/variance"]


def test_the_checkpoint_against_its_inference_export_is_the_training_graph(built: Path, tmp_path: Path) -> None:
    report, stdout = _compare(tmp_path / "out", str(built / "ckpt"), str(built / "savedmodel"))
    first = report["first_divergence"]
    assert first["node"] == "bn1/batchnorm/add"
    assert first["isolation"]["verdict"] == "batch_statistics"
    assert first["isolation"]["detail"].startswith(
        "A's AddV2 is computed from statistics over the batch it runs in (`bn1/moments/mean`, "
        "`bn1/moments/variance`: a reduction over the batch axis, which its replay recomputes), B's takes no batch "
        "statistics there: fed the same rows, ")
    assert report["answers"]["causes"] == ["training_graph"]
    why = report["answers"]["why"][0]
    assert ("A's graph takes statistics over the batch, as a batch norm in training mode does: its "
            "`bn1/moments/mean`, `bn1/moments/variance` (Mean) reduce over the batch axis (axis 0)") in why
    assert "it differs from B's graph, which takes no statistics over the batch there" in why
    for false in FALSE_CAUSES:
        assert false not in stdout and false not in why


def test_a_global_average_pool_in_an_inference_graph_is_no_batch_statistic(built: Path, tmp_path: Path) -> None:
    """gap/Mean reduces the spatial axes [1, 2] of each example: batch 1 against 4 compares it, and
    whatever differs is not the training graph's."""
    gap = str(built / "gap")
    report, stdout = _compare(tmp_path / "out", gap, gap, "--a-batch-size", "1", "--b-batch-size", "4")
    assert report["nodes"]["gap/Mean"]["op"] == "Mean"
    assert report["nodes"]["gap/Mean"]["status"] == "identical"  # compared row by row: no batch coupling
    assert "training_graph" not in report["answers"]["causes"]
    assert training.training_graph(report) is None
    assert all((o.get("isolation") or {}).get("verdict") != "batch_statistics" for o in report["origins"])
    for side in ("a", "b"):
        assert training.coupled_in_report(report, "gap/Mean", side) == []
        assert training.coupled_in_report(report, "bn1/batchnorm/add_1", side) == []  # the moving averages: no batch
    assert "training graph" not in stdout and "batch statistics" not in stdout


SLIM_CHILD = '''
import json
import tensorflow as tf
from tensorflow.python.framework import ops
if not hasattr(ops, "Tensor"):  # tf_slim 1.1.0 checks ops.Tensor, which TF 2.21 no longer has
    ops.Tensor = tf.Tensor
import tf_slim as slim
from tracer.opgraph import OpGraph
from tracer.training import batch_coupled
tf.compat.v1.disable_eager_execution()
found = {}
for training in (True, False):
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 6, 6, 3], name="images")
        y = slim.conv2d(x, 4, [3, 3], normalizer_fn=slim.batch_norm,
                        normalizer_params={"fused": False, "is_training": training, "updates_collections": None})
        tf.identity(tf.reduce_mean(y, axis=[1, 2], name="gap"), name="out")
    graph = OpGraph.from_tf_graph(g, {"images": "images:0"}, {"out": "out:0"})
    found[str(training)] = [n for n in graph.topo_order() if batch_coupled(graph, n)]
print(json.dumps(found))
'''


def test_slims_unfused_batch_norm_in_training_mode_normalises_by_batch() -> None:
    """tf-slim's batch_norm(fused=False) takes its statistics with tf.nn.moments: its Means over the
    batch axis are found in the op graph (their axes from the Const they read); the inference mode's
    moving averages and a global average pool over [1, 2] are not."""
    import importlib.util
    import os
    import subprocess
    import sys

    from conftest import REPO

    if importlib.util.find_spec("tf_slim") is None:
        pytest.skip("tf-slim is in the dev extra: pip install -e '.[dev]'")
    proc = subprocess.run([sys.executable, "-c", SLIM_CHILD], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": "-1", "TF_ENABLE_ONEDNN_OPTS": "0",
                               "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == {
        "True": ["Conv/BatchNorm/moments/mean", "Conv/BatchNorm/moments/variance"], "False": []}


def _moments_report(mean_status: str) -> dict:
    """A report's nodes around `sub = conv - mean`, where `mean` is a Mean over the batch axis of
    `conv`, computed from the fed images; `sub` is the origin, `mean` has ``mean_status``."""
    def node(op: str, inputs: list[str], status: str = "identical", **more: object) -> dict:
        return {"op": op, "b_op": op, "inputs": inputs, "status": status, "dtype": "float32",
                "shape": [4, 3, 3, 2], **more}

    axes = {"value": {"values": [0, 1, 2]}}
    return {"nodes": {
        "images": node("Placeholder", [], topo_index=0),
        "conv": node("Conv2D", ["images"], topo_index=1),
        "axes": node("Const", [], attrs_a=axes, attrs_b=axes, topo_index=2),
        "mean": node("Mean", ["conv", "axes"], mean_status, topo_index=3),
        "sub": node("Sub", ["conv", "mean"], "differs", topo_index=4),
    }}


def test_a_compared_batch_mean_above_an_origin_does_not_couple_it() -> None:
    """An origin's batch coupling is what its replay recomputes with it (as in the op graph): a Mean
    over the batch whose value was compared is fed to the replay, not recomputed, so it couples the
    origin to nothing; the same Mean not compared (the sides' batches differ) is recomputed, and does."""
    for side in ("a", "b"):
        assert training.coupled_in_report(_moments_report("identical"), "sub", side) == []
        assert training.coupled_in_report(_moments_report("not_compared"), "sub", side) == ["mean"]
