"""Dead cond branches, NaN/Inf as data, and what a report says was not captured, on models a
user exports: a small TF2 detector with padded NMS (a ``-inf`` constant, while loops, conds
lowered to Switch/Merge) and a TF1 graph with a data-dependent ``tf.cond`` and a
``DebugNumericSummary`` (float attrs ±inf).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import REPO, build_model, run_cli
from tracer.captures import Capture
from tracer.captures.fetch_plan import DEAD_BRANCH_REASON

ENV = {**os.environ, "CUDA_VISIBLE_DEVICES": "-1", "TF_CPP_MIN_LOG_LEVEL": "2"}
SENTINEL = "StatefulPartitionedCall/non_max_suppression_padded/PartitionedCall/NotEqual/y"  # a -inf Const
TAKEN = "StatefulPartitionedCall/cond/then/_10/cond/Tanh"  # the branch that runs: sigmoid scores > 0
UNTAKEN = "StatefulPartitionedCall/cond/else/_11/cond/Abs"
PLANTED = "StatefulPartitionedCall/cond/then/_10/cond/mul/y"  # the twin's scale, 1.001 instead of 1.0


def _strict(text: str) -> Any:
    def refuse(token: str) -> Any:
        raise AssertionError(f"{token} in strict JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def detectors(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("nms")
    out = {"det": root / "det", "det_planted": root / "det_planted"}
    for path, scale in zip(out.values(), ("1.0", "1.001")):
        subprocess.run([sys.executable, str(REPO / "tests" / "fixtures" / "nms_detector.py"), str(path), scale],
                       check=True, capture_output=True, timeout=300, env=ENV)
    return out


@pytest.fixture(scope="module")
def det_capture(detectors: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cap") / "det"
    proc = run_cli("capture", str(detectors["det"]), "--out", str(out), "--examples", "8", "--batch-size", "4",
                   env={"TF_ENABLE_ONEDNN_OPTS": "0"})
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.slow
def test_a_minus_inf_constant_is_written_as_strict_json_and_read_back(det_capture: Path) -> None:
    manifest = _strict((det_capture / "manifest.json").read_text())
    node = next(n for n in manifest["graph"]["nodes"] if n["name"] == SENTINEL)
    assert node["attrs"]["value"]["values"] == ["-inf"]
    cap = Capture.open(det_capture)
    assert cap.tensor(f"{SENTINEL}:0").item() == -np.inf
    assert cap.record(f"{SENTINEL}:0")["stats"] == {"min": None, "max": None, "mean": None, "nan": 0, "inf": 1}


@pytest.mark.slow
def test_the_untaken_branch_is_known_dead_and_nothing_else_is_refused(det_capture: Path) -> None:
    cap = Capture.open(det_capture)
    assert cap.uncaptured[f"{UNTAKEN}:0"] == DEAD_BRANCH_REASON
    assert cap.has(f"{TAKEN}:0")
    dead = [n for n, r in cap.uncaptured.items() if r == DEAD_BRANCH_REASON]
    assert not [n for n in dead if "/cond/then/" in n and "non_max" not in n]  # the taken branch is whole
    assert not [r for r in cap.uncaptured.values() if r.startswith("TensorFlow cannot fetch")]
    # the taken branch's values: tanh of what it was fed, to float32 rounding (libm may differ)
    nodes = {n["name"]: n for n in cap.manifest["graph"]["nodes"]}
    fed = cap.tensor(nodes[TAKEN]["inputs"][0])
    np.testing.assert_allclose(cap.tensor(f"{TAKEN}:0"), np.tanh(fed.astype(np.float64)), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(cap.tensor("StatefulPartitionedCall/cond/Identity:0"), cap.tensor(f"{TAKEN}:0"))
    # fetched after the predicates: one run per level of nested conds, not one per branch or tensor
    assert cap.manifest["fetch_chunks"] <= 4
    assert cap.manifest["observer_effect"]["outputs_identical"] is True


@pytest.mark.slow
def test_compare_reports_the_planted_branch_and_what_was_not_captured(detectors: dict[str, Path],
                                                                     tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    proc = run_cli("compare", str(detectors["det"]), str(detectors["det_planted"]), "--out", str(out),
                   "--examples", "8", "--onednn", "off", "--isolate", "0")
    assert proc.returncode == 1, proc.stderr
    report = _strict((out / "report.json").read_text())
    assert report["first_divergence"]["node"] == PLANTED
    assert report["nodes"][SENTINEL]["status"] == "identical"  # -inf == -inf: equal infinities agree
    assert report["first_nonfinite"] == {"a": None, "b": None}  # the -inf is a sentinel, nothing computes one
    dead = sum(1 for n in report["nodes"].values() if n["status"] == "not_captured"
               and "cond branch that did not run" in (n.get("reason") or ""))
    loops = sum(1 for n in report["nodes"].values() if n["status"] == "not_captured"
                and "while-loop frame" in (n.get("reason") or ""))
    assert dead > 0 and loops > 0
    for text in (proc.stdout.replace("\n", " "), (out / "report.md").read_text(), (out / "report.html").read_text()):
        assert "First NaN/Inf" not in text
    md = (out / "report.md").read_text()
    assert f"{dead} in cond branches that did not run" in md and f"{loops} inside while-loop bodies" in md
    assert f"{dead} in cond branches that did not run" in (out / "report.html").read_text()


TF1_COND = """
import math, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf
tf1 = tf.compat.v1
tf1.disable_v2_behavior()
with tf.Graph().as_default():
    x = tf1.placeholder(tf.float32, [None, 4], name="x")
    big = tf.reduce_max(tf.abs(x)) > 1e6  # never, for the inputs tftrace draws
    y = tf.cond(big, lambda: tf.identity(x * 1e-6, name="scaled"), lambda: tf.subtract(tf.nn.relu(x), 1.0, name="shifted"))
    summary = tf.raw_ops.DebugNumericSummary(input=x, lower_bound=-math.inf, upper_bound=math.inf, tensor_name="x:0",
                                           name="summary")
    logs = tf.math.log(tf.nn.relu(x), name="log")  # log(0) = -inf: born here, from finite inputs
    with tf1.Session() as session:
        builder = tf1.saved_model.Builder(sys.argv[1])
        signature = tf1.saved_model.predict_signature_def(
            {"x": x}, {"y": tf.identity(y, name="y"), "summary": tf.identity(summary, name="s"),
                       "logs": tf.identity(logs, name="logs_out")})
        builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map={"serving_default": signature})
        builder.save()
"""


@pytest.mark.slow
def test_tf1_cond_and_debug_numeric_summary(tmp_path: Path) -> None:
    model = tmp_path / "tf1_cond"
    build_model(TF1_COND, model)
    out = tmp_path / "cap"
    proc = run_cli("capture", str(model), "--out", str(out), "--examples", "8", env={"TF_ENABLE_ONEDNN_OPTS": "0"})
    assert proc.returncode == 0, proc.stderr
    manifest = _strict((out / "manifest.json").read_text())
    attrs = next(n for n in manifest["graph"]["nodes"] if n["name"] == "summary")["attrs"]
    assert (attrs["lower_bound"], attrs["upper_bound"]) == ("-inf", "inf")
    cap = Capture.open(out)
    x = cap.tensor("x:0")
    assert cap.uncaptured["cond/scaled:0"] == DEAD_BRANCH_REASON
    np.testing.assert_array_equal(cap.tensor("cond/shifted:0"), np.maximum(x, 0) - np.float32(1))
    # NaN/Inf is born at log (relu gives exact zeros for the negative inputs), not before
    report_dir = tmp_path / "same"
    proc = run_cli("compare", str(out), str(out), "--out", str(report_dir), "--isolate", "0")
    assert proc.returncode == 0, proc.stderr
    report = _strict((report_dir / "report.json").read_text())
    assert report["verdict"] == "identical"
    born = report["first_nonfinite"]["a"]
    assert (born["node"], born["inf"]) == ("log", int((x <= 0).sum()))
    assert "Context: NaN/Inf first computed from finite inputs on both sides at log (Log, " in proc.stdout.replace("\n", " ")
    assert "the sides agree there" in (report_dir / "report.md").read_text()


TF1_COND_PER_RUN = """
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import numpy as np
import tensorflow as tf
tf1 = tf.compat.v1
tf1.disable_v2_behavior()
with tf.Graph().as_default():
    x = tf1.placeholder(tf.float32, [None, 1], name="x")
    y = tf.cond(tf.reduce_sum(x) > 0, lambda: tf.multiply(x, tf.constant(3.0, name="three"), name="tripled"),
                lambda: tf.subtract(x, 1.0, name="lowered"))
    with tf1.Session() as session:
        builder = tf1.saved_model.Builder(sys.argv[1])
        signature = tf1.saved_model.predict_signature_def({"x": x}, {"y": tf.identity(y, name="y")})
        builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map={"serving_default": signature})
        builder.save()
np.savez(sys.argv[2], x=np.array([[1.0], [2.0], [-3.0], [-4.0]], np.float32))
"""


@pytest.mark.slow
def test_a_constant_in_a_branch_that_dies_in_a_later_run_keeps_its_first_runs_value(tmp_path: Path) -> None:
    """Run 0 (rows 1, 2) takes the branch that holds the constant 3; run 1 (rows -3, -4) the other. A
    capture's later runs fetch what run 0 fetched, constants again (so TensorFlow reuses its executor),
    but not a constant inside a branch: run 1's dead branch would have dropped the value run 0 stored."""
    model, inputs = tmp_path / "tf1_cond_per_run", tmp_path / "x.npz"
    build_model(TF1_COND_PER_RUN, model, inputs)
    out = tmp_path / "cap"
    proc = run_cli("capture", str(model), "--out", str(out), "--inputs", str(inputs), "--batch-size", "2",
                   env={"TF_ENABLE_ONEDNN_OPTS": "0"})
    assert proc.returncode == 0, proc.stderr
    cap = Capture.open(out)
    three = next(n for n in cap.tensor_names if n.endswith("three:0"))
    assert cap.tensor(three) == np.float32(3.0) and cap.tensor_layout[three] == "const"
    np.testing.assert_array_equal(cap.plain_output("y"), [[3.0], [6.0], [-4.0], [-5.0]])
    # the branch tensors that change with the rows ran in one run only: not captured, and said why
    tripled = next(n for n in cap.uncaptured if n.endswith("tripled:0"))
    lowered = next(n for n in cap.uncaptured if n.endswith("lowered:0"))
    assert cap.uncaptured[tripled] == cap.uncaptured[lowered] == DEAD_BRANCH_REASON
