"""How examples are laid out in runs: values that depend on an example's position in its run,
and signatures that take one example without a batch axis (TF Serving's half_plus_two family).

Each model is written by a child process the way its authors wrote theirs; tftrace runs as a
user would (``run_cli``), and every expected number comes from the model's own definition.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import build_model, run_cli

OFFSET_MODEL = """
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf

class PickPerRow(tf.Module):
    # Per-row argmax indices offset by row*K into the flattened batch, then gathered: the way
    # a detector's batched NMS picks its boxes (idx + row*525).
    @tf.function(input_signature=[tf.TensorSpec([None, 6, 5], tf.float32, name="x")])
    def __call__(self, x):
        batch = tf.shape(x)[0]
        best = (tf.argmin if sys.argv[2:] == ["argmin"] else tf.argmax)(x, axis=2, output_type=tf.int32)
        within = best + tf.range(6)[tf.newaxis, :] * 5
        index = within + (tf.range(batch) * 30)[:, tf.newaxis]
        picked = tf.gather(tf.reshape(x, [-1]), index)
        return {"y": picked * 2.0}

model = PickPerRow()
tf.saved_model.save(model, sys.argv[1], signatures={"serving_default": model.__call__})
"""
OFFSET_ADD = "PartitionedCall/add_1"  # within + row*30
GATHER = "PartitionedCall/GatherV2"


def _compare(out: Path, a: Path | str, b: Path | str, *args: str) -> tuple[int, dict[str, Any], str]:
    proc = run_cli("compare", str(a), str(b), "--out", str(out), "--onednn", "off", "--isolate", "0",
                   "--keep-captures", *args)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads((out / "report.json").read_text(encoding="utf-8")), proc.stdout


@pytest.fixture(scope="module")
def offset_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("offset") / "pick_per_row"
    build_model(OFFSET_MODEL, str(path))
    return path


@pytest.fixture(scope="module")
def argmin_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same model picking each row's argmin: its integer indices differ from the argmax's."""
    path = tmp_path_factory.mktemp("offset") / "pick_per_row_argmin"
    build_model(OFFSET_MODEL, str(path), "argmin")
    return path


@pytest.mark.slow
def test_an_index_offset_by_the_row_position_is_not_an_origin(offset_model: Path, tmp_path: Path) -> None:
    """Batch 1 vs 4: the gather index ``argmax + row*30`` is [0..29] in every run of one example and
    [0..119] across a run of four, while what it gathers is the same row for row. Before, the
    AddV2 was the first divergence (max abs 90) of outputs that are identical."""
    code, report, stdout = _compare(tmp_path, offset_model, offset_model, "--examples", "4",
                                    "--a-batch-size", "1", "--b-batch-size", "4")
    assert code == 0 and report["verdict"] == "identical" and stdout.startswith("IDENTICAL")
    assert report["outputs"]["y"]["identical"] is True
    nodes = report["nodes"]
    assert nodes[OFFSET_ADD]["op"] == "AddV2" and nodes[OFFSET_ADD]["status"] == "not_compared"
    assert nodes[OFFSET_ADD]["reason"].startswith("index arithmetic offset by the example's position in its run")
    assert nodes[GATHER]["status"] == "identical" and nodes["PartitionedCall/ArgMax"]["status"] == "identical"
    assert report["origins"] == [] and report["first_divergence"] is None


@pytest.mark.slow
def test_integer_indices_that_differ_say_by_how_much_and_how_many(
    offset_model: Path, argmin_model: Path, tmp_path: Path
) -> None:
    """argmax vs argmin of the same rows: the first integer op that differs reports the largest
    index shift and how many indices moved (it said "max abs 0" next to the mismatches)."""
    import numpy as np

    from tracer.captures import Capture

    code, report, stdout = _compare(tmp_path, offset_model, argmin_model, "--examples", "4", "--batch-size", "4")
    x = np.asarray(Capture.open(tmp_path / "captures" / "a").tensor("x:0"))
    shift = np.abs(np.argmax(x, axis=2).astype(np.int64) - np.argmin(x, axis=2))
    moved = int(np.count_nonzero(shift))
    first = report["first_divergence"]
    assert code == 1 and first["dtype"] == "int32" and moved > 0
    assert (first["max_abs"], first["mismatch_count"]) == (float(shift.max()), moved)
    node = report["nodes"][first["node"]]
    assert (node["max_abs"], node["mismatch_count"]) == (float(shift.max()), moved)
    line = next(ln for ln in " ".join(stdout.split()).split("First divergence") if ln.startswith((" (bitwise)", ", bitwise and beyond tolerance")))
    assert f"max abs {int(shift.max())}," in line and f"{moved} elements differ" in line
    assert f"{moved} elements differ" in (tmp_path / "report.md").read_text("utf-8")


@pytest.mark.slow
def test_the_same_index_is_compared_when_both_sides_batch_alike(offset_model: Path, tmp_path: Path) -> None:
    code, report, _ = _compare(tmp_path, offset_model, offset_model, "--examples", "4", "--batch-size", "4")
    assert code == 0 and report["nodes"][OFFSET_ADD]["status"] == "identical"


@pytest.mark.slow
def test_batch_sizes_10_and_8_over_8_examples_are_batched_alike(offset_model: Path, tmp_path: Path) -> None:
    """``--a-batch-size 10 --b-batch-size 8`` over 8 examples: both sides run the 8 examples in one
    run, so the index offset by the row's position is the same on both and is compared, and the
    report shows the batch that ran, 8, on both. Before, A's manifest said batch 10, and alignment
    called the sides batched alike by their runs but differently by their batch sizes: the AddV2
    was left not compared and the report said batch 10 vs 8."""
    code, report, _ = _compare(tmp_path, offset_model, offset_model, "--examples", "8",
                               "--a-batch-size", "10", "--b-batch-size", "8")
    assert code == 0 and report["verdict"] == "identical"
    assert report["sides"]["a"]["batch_size"] == report["sides"]["b"]["batch_size"] == 8
    assert report["nodes"][OFFSET_ADD]["status"] == "identical"
    manifest = json.loads((tmp_path / "captures" / "a" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["runs"] == [[0, 8]] and manifest["batch_size"] == 8 and manifest["spec"]["batch_size"] == 10


HALF_PLUS_MODELS = """
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf
tf1 = tf.compat.v1
root = sys.argv[1]

def tf1_model(path, shape, b_value):
    # As TF Serving's saved_model_half_plus_two.py wrote its TF 1.x models: y = a*x + b.
    with tf.Graph().as_default():
        a = tf1.Variable(0.5, name="a")
        b = tf1.Variable(b_value, name="b")
        x = tf1.placeholder(tf.float32, shape, name="x")
        y = tf.add(tf.multiply(a, x), b, name="y")
        with tf1.Session() as session:
            session.run(tf1.global_variables_initializer())
            builder = tf1.saved_model.Builder(path)
            signature = tf1.saved_model.predict_signature_def({"x": x}, {"y": y})
            builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map={"serving_default": signature})
            builder.save()

class HalfPlusTwo(tf.Module):
    # As saved_model_half_plus_two_tf2.py: one example of shape [1], no batch axis.
    def __init__(self):
        self.a = tf.Variable(0.5, name="a")
        self.b = tf.Variable(2.0, name="b")

    @tf.function(input_signature=[tf.TensorSpec([1], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": self.a * x + self.b}

tf1_model(os.path.join(root, "half_plus_two_cpu"), [None, 1], 2.0)
with tf.Graph().as_default():  # [1], the sum taken in float16: B's kernel differs given A's inputs
    a = tf1.Variable(0.5, name="a")
    b = tf1.Variable(2.0, name="b")
    x = tf1.placeholder(tf.float32, [1], name="x")
    y = tf.cast(tf.add(tf.cast(tf.multiply(a, x), tf.float16), tf.cast(b, tf.float16)), tf.float32, name="y")
    with tf1.Session() as session:
        session.run(tf1.global_variables_initializer())
        builder = tf1.saved_model.Builder(os.path.join(root, "half_plus_two_fp16"))
        signature = tf1.saved_model.predict_signature_def({"x": x}, {"y": y})
        builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map={"serving_default": signature})
        builder.save()
tf1_model(os.path.join(root, "half_plus_three"), [], 3.0)
model = HalfPlusTwo()
tf.saved_model.save(model, os.path.join(root, "half_plus_two_tf2_cpu"), signatures={"serving_default": model.__call__})
"""
X = [[1.0], [2.0], [5.0]]  # TF Serving's own example: exact in float32, so are 0.5x+2 and 0.5x+3


@pytest.fixture(scope="module")
def half_plus(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Stand-ins for TF Serving's half_plus_two_cpu ([?, 1]), half_plus_two_tf2_cpu ([1]) and
    half_plus_three (a scalar, y = 0.5x + 3), made the way their authors made them."""
    root = tmp_path_factory.mktemp("half_plus")
    build_model(HALF_PLUS_MODELS, str(root))
    return {name: root / name for name in ("half_plus_two_cpu", "half_plus_two_tf2_cpu", "half_plus_three",
                                           "half_plus_two_fp16")}


@pytest.mark.slow
@pytest.mark.parametrize("order", ["batched_first", "unbatched_first"])
def test_a_signature_without_a_batch_axis_runs_one_example_per_run(
    half_plus: dict[str, Path], tmp_path: Path, order: str
) -> None:
    """[?, 1] against [1]: it was "B cannot take A's examples … Map keys with --map"."""
    sides = [half_plus["half_plus_two_cpu"], half_plus["half_plus_two_tf2_cpu"]]
    unbatched = "b" if order == "batched_first" else "a"
    if order == "unbatched_first":
        sides.reverse()
    code, report, stdout = _compare(tmp_path, *sides, "--examples", "5")
    assert code == 0 and report["verdict"] == "identical" and stdout.startswith("IDENTICAL")
    assert report["outputs"]["y"]["identical"] is True and report["outputs"]["y"]["not_compared"] is None
    side = report["sides"][unbatched]
    assert side["one_example_per_run"] is True and side["batch_size"] == 1
    assert side["label"] == "cpu, one example per run (the signature has no batch axis), onednn=off"
    assert "the signature has no batch axis: ran the 5 examples one per run" in side["notes"]
    assert report["sides"]["b" if unbatched == "a" else "a"]["one_example_per_run"] is False
    flat = " ".join(stdout.split())
    assert f"{unbatched.upper()}: {sides[0 if unbatched == 'a' else 1]} [cpu, one example per run" in flat
    assert "cpu, one example per run (the signature has no batch axis)" in (tmp_path / "report.md").read_text("utf-8")
    manifest = json.loads((tmp_path / "captures" / unbatched / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["runs"] == [[i, i + 1] for i in range(5)] and manifest["examples"]["per_example"] is True
    assert report["nodes"]["x"]["status"] == "identical"


@pytest.mark.slow
@pytest.mark.parametrize("batched", ["stand_in", "real"])
def test_half_plus_three_against_half_plus_two_diverges_at_b_by_one(
    half_plus: dict[str, Path], real_models: dict[str, Path], tmp_path: Path, batched: str
) -> None:
    """A scalar signature against [?, 1], row by row: y differs by exactly 1 (3 - 2) in every row,
    starting where b is read. The real half_plus_two (TF 1.12, VariableV2) reads b through
    ``b/read``; the stand-in's resource variable through ``y/ReadVariableOp``."""
    import numpy as np

    np.savez(tmp_path / "x.npz", x=np.array(X, np.float32))
    a = half_plus["half_plus_two_cpu"] if batched == "stand_in" else real_models["half_plus_two"] / "00000123"
    code, report, stdout = _compare(tmp_path / "out", a, half_plus["half_plus_three"],
                                    "--inputs", str(tmp_path / "x.npz"))
    x = np.array(X, np.float32)
    expected = float(np.max(np.abs((np.float32(0.5) * x + np.float32(3)) - (np.float32(0.5) * x + np.float32(2)))))
    assert expected == 1.0
    assert code == 1 and report["verdict"] == "diverged" and stdout.startswith("DIVERGED")
    read_b = "y/ReadVariableOp" if batched == "stand_in" else "b/read"
    assert report["first_divergence"]["node"] == read_b and report["first_divergence"]["max_abs"] == 1.0
    y = report["outputs"]["y"]
    assert (y["max_abs"], y["mismatch_count"], y["identical"]) == (expected, 3, False)
    assert report["nodes"]["y"]["status"] == "propagated" and report["sides"]["b"]["one_example_per_run"] is True


@pytest.mark.slow
def test_an_origin_is_replayed_on_a_side_without_a_batch_axis(half_plus: dict[str, Path], tmp_path: Path) -> None:
    """Isolation feeds A's rows ([1, 1] each) to B's tensors of shape [1] and stacks B's answers
    back into rows: B's float16 sum differs given identical inputs, by what numpy's float16 says."""
    import numpy as np

    from tracer.captures import Capture

    proc = run_cli("compare", str(half_plus["half_plus_two_cpu"]), str(half_plus["half_plus_two_fp16"]),
                   "--out", str(tmp_path), "--onednn", "off", "--examples", "6", "--keep-captures")
    assert proc.returncode == 1, proc.stderr
    report = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    x = np.asarray(Capture.open(tmp_path / "captures" / "a").tensor("x:0"))
    half = ((np.float32(0.5) * x).astype(np.float16) + np.float16(2)).astype(np.float32)
    expected = float(np.max(np.abs(half - (np.float32(0.5) * x + np.float32(2)))))
    first = report["first_divergence"]
    assert first["node"] == "y" and first["max_abs"] == expected > 0
    assert first["isolation"]["verdict"] == "own_error" and first["isolation"]["max_abs"] == expected


@pytest.mark.slow
def test_a_batch_size_a_signature_without_a_batch_axis_cannot_run_is_said_beside_the_verdict(
    half_plus: dict[str, Path], tmp_path: Path
) -> None:
    """Batch 1 against batch 4 on a [1] signature: both sides ran one example per run, so the
    verdict says nothing about the batch size the user asked about. The side's label, printed under
    the verdict, says the asked size could not apply (it was only in the side's notes)."""
    model = half_plus["half_plus_two_tf2_cpu"]
    code, report, stdout = _compare(tmp_path, model, model, "--examples", "4", "--a-batch-size", "1",
                                    "--b-batch-size", "4")
    assert code == 0 and report["verdict"] == "identical"
    assert report["sides"]["a"]["label"] == "cpu, one example per run (the signature has no batch axis), onednn=off"
    assert report["sides"]["b"]["label"] == (
        "cpu, one example per run (the signature has no batch axis; --batch-size 4 cannot apply), onednn=off")
    assert "--batch-size 4 cannot apply)" in " ".join(stdout.split())
