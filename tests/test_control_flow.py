"""Models with control flow: a TF2 while loop and cond, inlined and lowered to Enter/Merge/Exit.

Shape inference gives up after the loop (its outputs have unknown rank), so whether a tensor's
first axis is the example axis must be decided from the values; the loop body cannot be fetched
by a session, so the loop's Exit is where a difference inside it shows; and replaying that Exit
needs the placeholder the inlined function waits on through control edges only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import build_model, run_cli
from tracer.comparison.statuses import isolation_words
from tracer.comparison.replay_plan import replay_plan
from tracer.opgraph import OpGraph

LOOP_EXIT = "StatefulPartitionedCall/while/exit/_26"  # the carried activation h, after the loop
BATCH_SUM = "StatefulPartitionedCall/Sum"  # reduce_sum(h) over the whole batch: feeds the cond
OUTPUT_OP = "Identity_1"  # y (Identity is the output "total")

MODEL = """
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf

class LoopModel(tf.Module):
    def __init__(self, step):
        self.w = tf.Variable(tf.random.stateless_normal([16, 16], seed=[1, 2]))
        self.step = step

    @tf.function(input_signature=[tf.TensorSpec([None, 16], tf.float32, name="x")])
    def __call__(self, x):
        def body(i, h):
            return i + 1, tf.nn.relu(tf.matmul(h, self.w)) * self.step + h
        _, h = tf.while_loop(lambda i, h: i < 3, body, [tf.constant(0), x])
        total = tf.reduce_sum(h)
        y = tf.cond(total > 0, lambda: tf.nn.softmax(h), lambda: tf.nn.sigmoid(h))
        return {"y": y, "total": tf.identity(total)}

model = LoopModel(float(sys.argv[2]))
tf.saved_model.save(model, sys.argv[1], signatures={"serving_default": model.__call__})
"""


@pytest.fixture(scope="module")
def loop_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The loop model, and a twin whose loop body scales by 0.5001 instead of 0.5."""
    root = tmp_path_factory.mktemp("loop")
    out = {}
    for name, step in (("loop", "0.5"), ("loop_planted", "0.5001")):
        out[name] = root / name
        build_model(MODEL, out[name], step)
    return out


TF1_MAP_MODEL = """
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf
tf1 = tf.compat.v1
tf1.disable_v2_behavior()
with tf.Graph().as_default():
    x = tf1.placeholder(tf.float32, [None, 8], name="x")
    w = tf1.get_variable("w", [8, 8], initializer=tf1.random_normal_initializer(seed=1))
    _, h = tf1.while_loop(lambda i, h: i < 3, lambda i, h: (i + 1, tf.nn.relu(tf.matmul(h, w)) * 0.5 + h),
                          [tf.constant(0), x])
    spread = tf.map_fn(lambda row: tf.reduce_max(row) - tf.reduce_min(row), h)  # a while loop over the rows
    y = tf.identity(tf.nn.softmax(h) * spread[:, None], name="y")
    with tf1.Session() as session:
        session.run(tf1.global_variables_initializer())
        tf1.train.Saver().save(session, os.path.join(sys.argv[1], "ckpt", "model.ckpt"))
        builder = tf1.saved_model.Builder(os.path.join(sys.argv[1], "savedmodel"))
        signature = tf1.saved_model.predict_signature_def({"x": x}, {"y": y})
        builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map={"serving_default": signature})
        builder.save()
"""


@pytest.fixture(scope="module")
def tf1_map_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A TF1 graph with a while loop and a map_fn (TensorArrays indexed by a Range over the
    batch), as a checkpoint and as the SavedModel exported from it."""
    root = tmp_path_factory.mktemp("tf1_map")
    build_model(TF1_MAP_MODEL, root)
    return root


TF1_TWO_MAPS_MODEL = """
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf
tf1 = tf.compat.v1
tf1.disable_v2_behavior()
with tf.Graph().as_default():
    x = tf1.placeholder(tf.float32, [None, 8], name="x")
    w = tf1.get_variable("w", [8], initializer=tf1.random_normal_initializer(seed=1))
    h = tf.map_fn(lambda row: tf.nn.relu(row) * 0.5, x * w, name="first")  # no GEMM: bit-identical at any batch
    spread = tf.map_fn(lambda row: tf.reduce_max(row) - tf.reduce_min(row), h, name="second")
    y = tf.identity(spread, name="y")
    with tf1.Session() as session:
        session.run(tf1.global_variables_initializer())
        builder = tf1.saved_model.Builder(os.path.join(sys.argv[1], "savedmodel"))
        signature = tf1.saved_model.predict_signature_def({"x": x}, {"y": y})
        builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map={"serving_default": signature})
        builder.save()
"""


def _compare(out: Path, a: Path, b: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    proc = run_cli("compare", str(a), str(b), "--out", str(out), "--onednn", "off", "--examples", "8", *args)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads((out / "report.json").read_text(encoding="utf-8")), proc.stdout


@pytest.mark.slow
def test_a_loop_and_a_cond_are_compared_through(loop_models: dict[str, Path], tmp_path: Path) -> None:
    code, report, stdout = _compare(tmp_path, loop_models["loop"], loop_models["loop"], "--batch-size", "4",
                                    "--keep-captures")
    assert code == 0 and report["verdict"] == "identical"
    assert report["outputs"]["y"]["identical"] is True and report["outputs"]["y"]["not_compared"] is None
    nodes = report["nodes"]
    # Unknown rank after the loop, yet batch-major: stored by rows, compared.
    layout = json.loads((tmp_path / "captures" / "a" / "manifest.json").read_text(encoding="utf-8"))["tensor_layout"]
    assert layout[f"{LOOP_EXIT}:0"] == "rows" and nodes[LOOP_EXIT]["status"] == "identical"
    # A sum over the batch changes from run to run; both sides batch alike, so it is compared.
    assert layout[f"{BATCH_SUM}:0"] == "varies" and nodes[BATCH_SUM]["status"] == "identical"
    body = [n for n in nodes if "/while/body/" in n and nodes[n]["op"] == "MatMul"]
    assert body and all(nodes[n]["status"] == "not_captured" for n in body)
    assert "inside a while-loop frame" in nodes[body[0]]["reason"]
    assert "not compared" not in stdout


@pytest.mark.slow
def test_different_batch_sizes_compare_the_loop_output_not_the_batch_sum(loop_models: dict[str, Path],
                                                                         tmp_path: Path) -> None:
    _code, report, stdout = _compare(tmp_path, loop_models["loop"], loop_models["loop"],
                                     "--a-batch-size", "1", "--b-batch-size", "4", "--isolate", "0")
    nodes = report["nodes"]
    assert report["outputs"]["y"]["identical"] is not None
    assert nodes[OUTPUT_OP]["status"] in ("identical", "within_tolerance")
    assert nodes[LOOP_EXIT]["status"] in ("identical", "within_tolerance")
    why = ("its value depends on which examples share a run (a shape, or a reduction over the batch), "
           "and A and B batch them differently")
    assert nodes[BATCH_SUM]["status"] == "not_compared" and nodes[BATCH_SUM]["reason"] == why
    # The output that is a sum over the batch cannot be compared either, and every summary says so.
    assert report["outputs"]["total"]["identical"] is None and report["outputs"]["total"]["not_compared"] == why
    assert stdout.splitlines()[0].endswith("(but 1 of 2 outputs not compared)")
    assert f"not compared: total: {why}" in " ".join(stdout.split())


@pytest.mark.slow
def test_assert_equivalent_fails_when_an_output_cannot_be_compared(loop_models: dict[str, Path],
                                                                   tmp_path: Path) -> None:
    import tracer  # noqa: PLC0415 - the public API, as a user's unit test calls it

    model = str(loop_models["loop"])
    with pytest.raises(AssertionError) as info:
        tracer.assert_equivalent(model, model, examples=4, onednn="off", out_dir=str(tmp_path / "r"),
                                 a_options={"batch_size": 1}, b_options={"batch_size": 4}, isolate=0)
    assert str(info.value).startswith(f"{model} and {model}: could not compare the output 'total' (its value depends on")
    assert str(info.value).endswith(f"report: {tmp_path / 'r'}/report.html")


@pytest.mark.slow
def test_a_change_inside_the_loop_body_shows_at_its_exit_and_is_isolated(loop_models: dict[str, Path],
                                                                         tmp_path: Path) -> None:
    code, report, stdout = _compare(tmp_path, loop_models["loop"], loop_models["loop_planted"], "--batch-size", "4")
    assert code == 1 and report["verdict"] == "diverged"
    assert isolation_words("own_error", loop="ending here", sep=": ") in " ".join(stdout.split())
    first = report["first_divergence"]
    assert (first["node"], first["op"]) == (LOOP_EXIT, "Exit")
    assert first["isolation"]["verdict"] == "own_error", first["isolation"]
    assert first["isolation"]["detail"].startswith(
        "given identical inputs, B's while loop ending here (replayed whole: a session cannot fetch the ops inside "
        "a loop) differs from A's by up to ")
    upstream = ["x", "Func/StatefulPartitionedCall/input/_0"]
    assert all(report["nodes"][n]["status"] == "identical" for n in upstream)
    assert report["outputs"]["y"]["identical"] is False


def test_replaying_an_op_feeds_what_its_control_edges_make_run() -> None:
    """An inlined function: the loop's Enter waits (control edge) on a NoOp that waits on the
    Identity of the input, so replaying the loop exit must feed the placeholder too."""
    def node(name: str, op: str, inputs: list[str], control: list[str] = ()) -> dict[str, Any]:
        return {"name": name, "op": op, "device": "", "scope": "", "attrs": {}, "inputs": inputs,
                "control_inputs": list(control),
                "outputs": [{"dtype": "float32", "shape": None, "capturable": True, "reason": ""}]}

    graph = OpGraph.from_json({"inputs": {"x": "x:0"}, "outputs": {"y": "exit:0"}, "nodes": [
        node("x", "Placeholder", []),
        node("input", "Identity", ["x:0"]),
        node("control", "NoOp", [], ["input"]),
        node("enter", "Enter", ["input:0"], ["control"]),
        node("exit", "Exit", ["enter:0"]),
    ]})
    captured = {"x:0": "x:0", "input:0": "input:0"}
    assert replay_plan(graph, "exit:0", captured) == {"input:0": "input:0", "x:0": "x:0"}
    assert replay_plan(graph, "exit:0", {"input:0": "input:0"}) == {"input:0": "input:0"}  # nothing else to feed


@pytest.mark.slow
def test_a_batch_index_from_the_shape_is_metadata_not_a_divergence(tf1_map_model: Path, tmp_path: Path) -> None:
    """map_fn indexes its TensorArrays with Range(batch size): [0] at batch 1, [0 1 2 3] at batch
    4. Those follow the shape, not the values: never an origin."""
    _code, report, _ = _compare(tmp_path, tf1_map_model / "ckpt", tf1_map_model / "savedmodel",
                                "--a-outputs", "y", "--a-input-names", "x", "--a-batch-size", "1",
                                "--b-batch-size", "4", "--isolate", "0")
    nodes = report["nodes"]
    for index in ("map/TensorArrayUnstack/range", "map/TensorArrayStack/range"):
        assert nodes[index]["status"] == "not_compared"
        assert nodes[index]["reason"] == ("computed from a shape, not from values (e.g. a batch index): "
                                          "depends on the batch size")
    assert all(o["op"] != "Range" for o in report["origins"])
    assert nodes["map/TensorArrayStack/TensorArrayGatherV3"]["status"] in ("identical", "within_tolerance")
    assert report["outputs"]["y"]["identical"] is not None


@pytest.mark.slow
def test_a_batch_index_from_the_shape_of_a_map_fn_result_is_metadata(tmp_path: Path) -> None:
    """A second TF1 map_fn unstacks the first one's stacked result: its Range(0, tf.shape(h)[0])
    follows the batch size like the first's. It was taken for a count of values (the first stack
    gathers a TensorArray, which holds values) and judged an origin "up to 3" at batch 1 vs 4
    while the outputs were bit-identical."""
    build_model(TF1_TWO_MAPS_MODEL, tmp_path / "model")
    code, report, stdout = _compare(tmp_path / "out", tmp_path / "model" / "savedmodel",
                                    tmp_path / "model" / "savedmodel", "--a-batch-size", "1", "--b-batch-size", "4")
    assert code == 0 and report["verdict"] == "identical" and stdout.startswith("IDENTICAL"), stdout
    assert report["origins"] == []
    for index in ("second/TensorArrayUnstack/range", "second/TensorArrayStack/range"):
        assert report["nodes"][index]["status"] == "not_compared"
        assert report["nodes"][index]["reason"] == ("computed from a shape, not from values (e.g. a batch index): "
                                                    "depends on the batch size")
    assert report["nodes"]["first/TensorArrayStack/TensorArrayGatherV3"]["status"] == "identical"
