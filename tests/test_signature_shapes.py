"""Signatures whose declared shapes contradict the tensors they name (issue 25, item 3).

TensorFlow Serving's own ``saved_model_half_plus_three`` was written by TF 1.0, whose SavedModel
builder wrote each TensorInfo without a shape: read today, ``x`` and ``y`` are declared scalars
while ``x:0`` is ``[?, 1]`` (a ``ParseExample`` of a ``[1]`` feature behind an ``Identity``). A
session checks a feed against the tensor, not the TensorInfo, so the graph's shape decides how
the side is fed, and the side's notes say so. The model here is written the way TF 1.0 wrote it:
built with the TF1 builder, then its TensorInfos stripped of their shapes (the real file's
``serving_default`` has no ``tensor_shape`` at all).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import build_model, run_cli

HALF_PLUS_THREE_TF1_0 = """
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
tf1 = tf.compat.v1
path = sys.argv[1]
# As TF Serving's saved_model_half_plus_two.py wrote half_plus_three: x parsed from tf.Examples, y = 0.5x + 3.
with tf.Graph().as_default():
    a = tf1.Variable(0.5, name="a")
    b = tf1.Variable(3.0, name="b")
    serialized = tf1.placeholder(tf.string, [None], name="tf_example")
    x = tf.identity(tf1.parse_example(serialized, {"x": tf1.FixedLenFeature([1], tf.float32)})["x"], name="x")
    y = tf.add(tf.multiply(a, x), b, name="y")
    with tf1.Session() as session:
        session.run(tf1.global_variables_initializer())
        builder = tf1.saved_model.Builder(path)
        signature = tf1.saved_model.predict_signature_def({"x": x}, {"y": y})
        builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map={"serving_default": signature})
        builder.save()
# TF 1.0's builder wrote no shape into a TensorInfo: strip them, as in the real saved_model.pb.
model = saved_model_pb2.SavedModel()
with open(os.path.join(path, "saved_model.pb"), "rb") as fh:
    model.ParseFromString(fh.read())
sig = model.meta_graphs[0].signature_def["serving_default"]
for info in [*sig.inputs.values(), *sig.outputs.values()]:
    if sys.argv[2:] == ["unsized"]:  # a later writer's TensorInfo that knows the rank only: [?, ?]
        for dim in info.tensor_shape.dim:
            dim.size = -1
    else:
        info.ClearField("tensor_shape")
with open(os.path.join(path, "saved_model.pb"), "wb") as fh:
    fh.write(model.SerializeToString())
read = tf1.saved_model.load(tf1.Session(graph=tf.Graph()), ["serve"], path).signature_def["serving_default"]
assert [d.size for d in read.inputs["x"].tensor_shape.dim] == ([-1, -1] if sys.argv[2:] else [])  # [] reads as a scalar
"""
X = np.array([[1.0], [2.0], [5.0]], np.float32)  # TF Serving's own example: 0.5x+2 and 0.5x+3 exact in float32
NOTE = ("signature 'serving_default' declares input 'x' (x:0) as a scalar and output 'y' (y:0) as a scalar, but "
        "in the graph x:0 is [?, 1] and y:0 is [?, 1]: fed and read with the graph's shapes, as a session does")


@pytest.fixture(scope="module")
def half_plus_three(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A TF Serving version directory (``00000123``) holding half_plus_three as TF 1.0 wrote it."""
    root = tmp_path_factory.mktemp("tf1_0") / "saved_model_half_plus_three"
    build_model(HALF_PLUS_THREE_TF1_0, str(root / "00000123"))
    return root


@pytest.mark.slow
def test_half_plus_two_against_half_plus_three_feeds_the_graphs_shape(
    half_plus_three: Path, real_models: dict[str, Path], tmp_path: Path
) -> None:
    """It was "Cannot feed value of shape () for Tensor x:0, which has shape (None, 1)" in the child."""
    np.savez(tmp_path / "x.npz", x=X)
    out = tmp_path / "out"
    proc = run_cli("compare", str(real_models["half_plus_two"]), str(half_plus_three), "--out", str(out),
                   "--inputs", str(tmp_path / "x.npz"), "--onednn", "off", "--isolate", "0")
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.startswith("DIVERGED")
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["verdict"] == "diverged"
    y = report["outputs"]["y"]
    assert y["max_abs"] == 1.0 and y["within_tolerance"] is False and y["not_compared"] is None
    side_b = report["sides"]["b"]
    assert side_b["batch_size"] == 3 and side_b["one_example_per_run"] is False  # the 3 examples in one run, as A
    assert [n for n in side_b["notes"] if n.startswith("signature ")] == [
        NOTE + " (a TensorInfo written without a shape, as TF 1.0's SavedModel builder wrote them, reads as a scalar)"
    ]
    assert not any(n.startswith("signature ") for n in report["sides"]["a"]["notes"])  # A's TensorInfos agree
    assert NOTE.replace("'", "&#39;") in (out / "report.html").read_text(encoding="utf-8")  # the page's side notes


@pytest.mark.slow
def test_diff_graph_notes_the_contradicted_signature(half_plus_three: Path, real_models: dict[str, Path]) -> None:
    proc = run_cli("diff-graph", str(real_models["half_plus_two"]), str(half_plus_three))
    assert proc.returncode == 0, proc.stderr
    said = " ".join(proc.stdout.split())  # the console wraps a long note
    assert said.count("declares") == 1 and f"note (B): {NOTE} (a TensorInfo written without a shape" in said


@pytest.mark.slow
def test_a_signature_that_knows_less_than_its_graph_takes_the_graphs_sizes(tmp_path: Path) -> None:
    """TensorInfo [?, ?] for x:0 of [?, 1]: no contradiction, so no note; the generated examples
    take the graph's 1 (it was "input 'x' has unknown dimensions at axes [1]")."""
    model = tmp_path / "unsized"
    build_model(HALF_PLUS_THREE_TF1_0, str(model), "unsized")
    proc = run_cli("capture", str(model), "--out", str(tmp_path / "cap"), "--examples", "3")
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((tmp_path / "cap" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["signature"]["inputs"]["x"]["shape"] == [None, 1]
    assert manifest["examples"]["count"] == 3 and not any("declares" in n for n in manifest["notes"])
