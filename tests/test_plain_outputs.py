"""The outputs a user sees are the plain run's: stored by every capture, compared by compare.

Fetching every tensor changes what runs: with oneDNN's bfloat16 auto-mixed-precision rewrite
on, a plain run converts the convolutions to bfloat16 while the instrumented run, whose every
op is fetched and so "preserved", converts nothing. Compared op by op the two sides are then
bit-identical; compared as production computes them they are not. The plain values are
checked against an independent plain ``session.run`` in a child process of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, run_cli
from tracer.captures.reader import Capture
from tracer.captures.store import CaptureWriter
from tracer.errors import TftraceError

AMP = "auto_mixed_precision_onednn_bfloat16"
BESIDE = "instrumented (every tensor fetched)"


# ---- the store and the reader (no TensorFlow) --------------------------------------------------


def _capture_with_plain(path: Path, plain: dict[str, np.ndarray]) -> Path:
    with CaptureWriter(path) as writer:
        writer.write_whole("y:0", np.arange(6, dtype=np.float32).reshape(2, 3))
        for key, value in plain.items():
            writer.write_plain_output(key, value)
        writer.finalize({"notes": []})
    return path


def test_plain_outputs_are_stored_apart_and_read_back(tmp_path: Path) -> None:
    values = {"y": np.array([[0.5, -1.25]], np.float32), "<script>alert(1)</script>": np.array([b"a", b"bc"])}
    cap = Capture.open(_capture_with_plain(tmp_path / "cap", values))
    assert cap.tensor_names == ["y:0"]  # not graph tensors: never aligned or compared op by op
    assert set(cap.manifest["plain_outputs"]) == set(values)
    for key, value in values.items():
        assert np.array_equal(cap.plain_output(key), value) and cap.plain_output(key).dtype == value.dtype
        file = cap.manifest["plain_outputs"][key]["file"]
        assert file.startswith("tensors/plain_output") and "<" not in file
    assert cap.plain_output("missing") is None


@pytest.mark.parametrize(("edit", "message"), [
    (lambda m: m.update(plain_outputs=[1]), '"plain_outputs" is not a JSON object'),
    (lambda m: m["plain_outputs"]["y"].update(file="../manifest.json"), "contains '..'"),
    (lambda m: m["plain_outputs"]["y"].update(shape=[4, 4]), "size_bytes"),
    (lambda m: m["plain_outputs"]["y"].update(alias_of="y:0"), "a plain output claims alias_of"),
    (lambda m: m["plain_outputs"].update(z={"file": "tensors/nope.npy", "dtype": "float32", "stored_dtype": "<f4",
                                            "shape": [], "size_bytes": 4, "batch_major": False}), "is missing"),
])
def test_a_hand_made_plain_output_record_is_refused(tmp_path: Path, edit, message: str) -> None:
    path = _capture_with_plain(tmp_path / "cap", {"y": np.ones((1, 2), np.float32)})
    manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    edit(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(TftraceError) as err:
        Capture.open(path)
    assert "damaged capture" in err.value.problem and message in err.value.problem


# ---- compare on real models --------------------------------------------------------------------

PLAIN_RUN = textwrap.dedent("""
    import sys
    import numpy as np
    import tensorflow as tf
    ckpt, images, amp, out = sys.argv[1:]
    config = tf.compat.v1.ConfigProto(allow_soft_placement=True)
    if amp == "on":
        config.graph_options.rewrite_options.auto_mixed_precision_onednn_bfloat16 = 1  # ON
    graph = tf.Graph()
    with graph.as_default():
        session = tf.compat.v1.Session(graph=graph, config=config)
        tf.compat.v1.train.import_meta_graph(ckpt + "/model.ckpt.meta", clear_devices=True).restore(
            session, ckpt + "/model.ckpt")
        np.save(out, session.run("outputs/scores:0", {"images:0": np.load(images)}))
""")


def _plain_scores(ckpt: Path, images: np.ndarray, amp: str, work: Path) -> np.ndarray:
    """outputs/scores from an independent plain session.run (oneDNN on, the rewrite as asked)."""
    np.save(work / "images.npy", images)
    env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    subprocess.run([sys.executable, "-c", PLAIN_RUN, str(ckpt), str(work / "images.npy"), amp,
                    str(work / f"scores_{amp}.npy")], cwd=REPO, env=env, check=True, timeout=300)
    return np.load(work / f"scores_{amp}.npy")


@pytest.fixture(scope="module")
def amp_report(models, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("amp") / "report"
    proc = run_cli("compare", str(models["detector_ckpt"]), str(models["detector_ckpt"]), "--examples", "4",
                   "--onednn", "on", "--a-grappler", f"{AMP}=on", "--out", str(out), "--keep-captures")
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    return {"out": out, "proc": proc, "report": json.loads((out / "report.json").read_text(encoding="utf-8"))}


@pytest.mark.slow
def test_observation_hides_the_bf16_rewrite_and_the_verdict_says_diverged(amp_report, models, tmp_path) -> None:
    report, out = amp_report["report"], amp_report["out"]
    assert report["verdict_ops"] == "identical"  # every op fetched: nothing converted, bit for bit the same
    assert report["verdict_outputs"] == "diverged" and report["verdict"] == "diverged"
    assert report["first_divergence"] is None and report["origins"] == []
    scores = report["outputs"]["scores"]
    assert scores["compared_as"] == "plain" and scores["instrumented"]["identical"] is True
    assert scores["instrumented"]["max_abs"] == 0.0
    # The stored plain outputs are what a plain session.run computes, on each side.
    a, b = Capture.open(out / "captures" / "a"), Capture.open(out / "captures" / "b")
    images = np.asarray(a.tensor("images:0"))
    expected_a = _plain_scores(models["detector_ckpt"], images, "on", tmp_path)
    expected_b = _plain_scores(models["detector_ckpt"], images, "off", tmp_path)
    np.testing.assert_allclose(a.plain_output("scores"), expected_a, rtol=0, atol=1e-6)
    np.testing.assert_allclose(b.plain_output("scores"), expected_b, rtol=0, atol=1e-6)
    independent = float(np.max(np.abs(expected_a - expected_b)))
    assert independent > 1e-3  # bfloat16 convolutions: the size users report
    assert scores["max_abs"] == pytest.approx(independent, abs=2e-6) and scores["identical"] is False
    assert scores["within_tolerance"] is False
    # Observed, A computed B's float32 numbers: the instrumented tensor is not A's plain output.
    assert np.array_equal(np.asarray(a.tensor("outputs/scores:0")), np.asarray(b.tensor("outputs/scores:0")))


@pytest.mark.slow
def test_every_summary_shows_the_plain_outputs_and_the_observed_beside(amp_report) -> None:
    out, stdout = amp_report["out"], amp_report["proc"].stdout
    assert stdout.startswith("DIVERGED")
    assert "Outputs (plain runs, as in production)" in stdout and BESIDE in stdout
    assert "identical when observed" in stdout and "Not seen op by op: the plain runs' outputs differ beyond" in stdout
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "### Outputs (plain runs, as in production)" in md and f"| {BESIDE} |" in md
    assert "identical when observed" in md and "**Not seen op by op:**" in md
    assert "- Every captured op agrees; the plain runs' outputs do not (see Outputs)." in md
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "plain runs, as in production" in html and f"<th>{BESIDE}</th>" in html
    assert "identical when observed" in html and "Not seen op by op:" in html


@pytest.mark.slow
def test_where_observation_changes_nothing_the_outputs_read_as_before(models, tmp_path) -> None:
    out = tmp_path / "report"
    proc = run_cli("compare", str(models["detector_ckpt"]), str(models["detector"]), "--examples", "4",
                   "--out", str(out), "--keep-captures")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["verdict"] == report["verdict_ops"] == report["verdict_outputs"] == "identical"
    cap = Capture.open(out / "captures" / "a")
    assert cap.manifest["observer_effect"]["outputs_identical"] is True
    for key, output in report["outputs"].items():
        assert output["compared_as"] == "plain" and output["identical"] is True
        assert output["instrumented"] == {k: output[k] for k in output["instrumented"]}
        # oneDNN off: the fused plain kernels and the unfused observed ones agree bit for bit
        tensor = cap.manifest["graph"]["outputs"][key]
        assert np.array_equal(cap.plain_output(key), np.asarray(cap.tensor(tensor))), key
    assert "Outputs (plain runs, as in production)" in proc.stdout and BESIDE not in proc.stdout
    assert "Not seen op by op" not in proc.stdout


@pytest.mark.slow
def test_assert_equivalent_fails_on_what_only_the_plain_runs_show(models, tmp_path) -> None:
    import tracer  # noqa: PLC0415

    ckpt = str(models["detector_ckpt"])
    with pytest.raises(AssertionError) as err:
        tracer.assert_equivalent(ckpt, ckpt, examples=2, onednn="on", a_options={"grappler": {AMP: "on"}},
                                 out_dir=str(tmp_path / "r"))
    message = str(err.value)
    assert "diverge beyond atol=1e-06, rtol=1e-05: the plain runs' outputs differ beyond tolerance while every " \
           "captured tensor is identical" in message
    assert "first at op" not in message and f"report: {tmp_path / 'r'}/report.html" in message


@pytest.mark.slow
def test_plain_outputs_of_several_runs_are_laid_out_as_the_captured_tensors(models, tmp_path) -> None:
    """5 examples at batch 2 make 3 plain runs: their rows go to the examples' indices."""
    proc = run_cli("capture", str(models["detector"]), "--out", str(tmp_path / "cap"), "--examples", "5",
                   "--batch-size", "2")
    assert proc.returncode == 0, proc.stderr
    cap = Capture.open(tmp_path / "cap")
    assert cap.manifest["runs"] == [[0, 2], [2, 4], [4, 5]]
    assert cap.manifest["observer_effect"]["outputs_identical"] is True  # oneDNN off: fused == unfused here
    assert set(cap.manifest["plain_outputs"]) == set(cap.manifest["graph"]["outputs"])
    for key, tensor in cap.manifest["graph"]["outputs"].items():
        plain, captured = cap.plain_output(key), np.asarray(cap.tensor(tensor))
        assert plain.shape == captured.shape and plain.shape[0] == 5, key
        assert np.array_equal(plain, captured), key


CONSTANT_OUTPUT = '''
import sys
import tensorflow as tf

class Scorer(tf.Module):  # a serving signature that also returns the model's version, a constant
    def __init__(self):
        self.kernel = tf.Variable(tf.random.stateless_normal([3, 3, 3, 4], seed=[3, 4]))

    @tf.function(input_signature=[tf.TensorSpec([None, 8, 8, 3], tf.float32, name="images")])
    def serve(self, images):
        scores = tf.reduce_max(tf.nn.relu(tf.nn.conv2d(images, self.kernel, 1, "SAME")), axis=[1, 2])
        return {"scores": scores, "version": tf.constant(3, tf.int32)}

scorer = Scorer()
tf.saved_model.save(scorer, sys.argv[1], signatures={"serving_default": scorer.serve})
'''


@pytest.mark.slow
def test_a_constant_output_over_several_runs_is_no_observer_effect(tmp_path) -> None:
    """A constant is fetched again in later runs but stored once; its value was left out of those
    runs' outputs, so every capture of more than one run said the instrumented run had moved
    `version` ("Observer effect on A: outputs moved by ... version —", ``outputs_identical`` false)."""
    from conftest import build_model  # noqa: PLC0415

    model = tmp_path / "scorer"
    build_model(CONSTANT_OUTPUT, model)
    proc = run_cli("capture", str(model), "--out", str(tmp_path / "cap"), "--examples", "4", "--batch-size", "1",
                   env={"CUDA_VISIBLE_DEVICES": "-1", "TF_ENABLE_ONEDNN_OPTS": "0"})
    assert proc.returncode == 0, proc.stderr
    cap = Capture.open(tmp_path / "cap")
    assert len(cap.runs) == 4 and cap.manifest["tensor_layout"][cap.outputs["version"]] == "const"
    observer = cap.manifest["observer_effect"]
    assert observer["outputs_identical"] is True
    assert observer["outputs_max_abs_diff"] == {"scores": 0.0, "version": 0.0}
