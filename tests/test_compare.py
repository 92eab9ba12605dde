"""`tftrace compare` on the sample pairs: the exact op where the numbers start to differ.

Every comparison runs two captures and the isolation replays in child processes, as a user's
would. oneDNN is pinned (conftest sets TF_ENABLE_ONEDNN_OPTS=0; tests of the setting pass it).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from conftest import assert_user_error, build_model, run_cli

pytestmark = pytest.mark.slow
EXAMPLES = ("--examples", "4")


def _compare(tmp: Path, a: Path | str, b: Path | str, *extra: str) -> tuple[int, dict, str]:
    out = tmp / "report"
    proc = run_cli("compare", str(a), str(b), "--out", str(out), "--keep-captures", *EXAMPLES, *extra)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads((out / "report.json").read_text()), proc.stdout


def _ancestors(report: dict, node: str) -> set[str]:
    g = nx.DiGraph(report["edges"])
    return nx.ancestors(g, node) if node in g else set()


@pytest.fixture(scope="module")
def planted(models, tmp_path_factory):
    return _compare(tmp_path_factory.mktemp("planted"), models["detector_ckpt"], models["detector_planted"])


def test_faithful_export_is_identical(models, tmp_path):
    code, report, stdout = _compare(tmp_path, models["detector_ckpt"], models["detector"])
    assert code == 0
    assert report["verdict"] == "identical"
    assert report["first_divergence"] is None and report["origins"] == []
    assert all(o["identical"] for o in report["outputs"].values())
    assert report["rewrites"] == []
    assert "IDENTICAL" in stdout


def test_planted_op_is_the_first_divergence_and_nothing_upstream_differs(planted):
    code, report, stdout = planted
    assert code == 1 and report["verdict"] == "diverged"
    first = report["first_divergence"]
    assert first["node"] == "block2/bn/FusedBatchNormV3" and first["op"] == "FusedBatchNormV3"
    assert report["first_divergence_beyond_tolerance"]["node"] == "block2/bn/FusedBatchNormV3"
    assert first["isolation"]["verdict"] == "own_error"
    assert first["isolation"]["detail"].startswith("given identical inputs, B's FusedBatchNormV3 kernel differs from A's by up to ")
    assert first["rewrite"] == "attr_changed"
    upstream = _ancestors(report, "block2/bn/FusedBatchNormV3")
    assert "block2/conv/Conv2D" in upstream and "block1/relu" in upstream
    statuses = {report["nodes"][n]["status"] for n in upstream}
    assert statuses == {"identical"}, statuses
    assert [o["node"] for o in report["origins"]] == ["block2/bn/FusedBatchNormV3"]
    assert report["nodes"]["dense/MatMul"]["status"] == "propagated"
    assert report["outputs"]["scores"]["max_abs"] > 1e-4  # the size the users reported
    assert "block2/bn/FusedBatchNormV3" in stdout


def test_report_contract_fields(planted):
    _, report, _ = planted
    for key in ("schema_version", "verdict", "sides", "first_divergence", "first_divergence_beyond_tolerance",
                "origins", "nodes", "outputs", "rewrites", "observer_effect"):
        assert key in report
    node = report["nodes"]["block2/bn/FusedBatchNormV3"]
    for key in ("status", "op", "max_abs", "max_rel", "ulp_max", "cosine", "amplification", "isolation"):
        assert key in node
    assert node["status"] == "origin" and node["alignment"] == "name"
    assert report["nodes"]["block3/conv/Conv2D"]["amplification"] is not None
    assert set(report["sides"]) == {"a", "b"}
    assert report["sides"]["a"]["environment"]["tf_env"]["TF_ENABLE_ONEDNN_OPTS"] == "0"


def _fold_ground_truth(models: dict, x: np.ndarray, conv_input: str, bn: str) -> float:
    """max |folded conv (B) - conv + batch norm (A)| on the same input, in two plain sessions:
    what isolating a folded batch norm must measure (on this CPU, with the pinned oneDNN setting)."""
    from tracer._tf import tf as import_tf  # noqa: PLC0415

    tf = import_tf()
    values = []
    for load in ("ckpt", "folded"):
        graph = tf.Graph()
        with graph.as_default(), tf.compat.v1.Session(graph=graph) as sess:
            if load == "ckpt":
                prefix = str(models["detector_ckpt"] / "model.ckpt")
                tf.compat.v1.train.import_meta_graph(f"{prefix}.meta", clear_devices=True).restore(sess, prefix)
            else:
                tf.compat.v1.saved_model.loader.load(sess, ["serve"], str(models["detector_folded"]))
            values.append(sess.run(f"{bn}:0", {conv_input: x}))
    return float(np.max(np.abs(values[0].astype(np.float64) - values[1].astype(np.float64))))


def test_folded_export_origins_are_the_folded_batch_norms(models, tmp_path):
    code, report, stdout = _compare(tmp_path, models["detector_ckpt"], models["detector_folded"])
    folds = {r["detail"]["batch_norm"]: r["detail"]["conv"] for r in report["rewrites"] if r["kind"] == "batchnorm_folded"}
    assert set(folds) == {f"block{i}/bn/FusedBatchNormV3" for i in range(1, 5)}
    assert report["origins"], "folding changes the arithmetic: somewhere it must show"
    for origin in report["origins"]:
        assert origin["node"] in folds and origin["rewrite"] == "batchnorm_folded", origin
    for bn, conv in folds.items():
        assert report["nodes"][conv]["status"] == "rewritten"  # rescaled weights: never an origin on their own
        assert report["nodes"][bn]["alignment"] == "fold group"
    assert all(o["within_tolerance"] for o in report["outputs"].values()), report["outputs"]
    assert code == (1 if report["verdict"] == "diverged" else 0)

    # Isolation replays each fold group whole, from the conv's input, on both sides: its own
    # error is the fold's (the size of the origin's difference), not a scaled conv against an
    # unscaled one (that replay reported 2.14).
    from tracer.captures.reader import Capture  # noqa: PLC0415

    capture_a = Capture.open(report["sides"]["a"]["capture_dir"])
    for origin in report["origins"]:
        bn = origin["node"]
        conv_input = report["nodes"][folds[bn]]["inputs"][0] + ":0"
        truth = _fold_ground_truth(models, capture_a.tensor(conv_input), conv_input, bn)
        iso = origin["isolation"]
        assert iso["verdict"] == ("own_error" if truth > 0 else "inherited"), (bn, iso, truth)
        assert iso["max_abs"] == pytest.approx(truth, rel=0.5, abs=1e-12), (bn, iso, truth)
        assert iso["max_abs"] <= 4 * origin["max_abs"], (bn, iso, origin)
        assert iso["detail"].startswith(f"given identical inputs, B's folded batch norm (`{bn}`, BiasAdd, "), iso
        assert f"both replayed whole from the group's inputs (`{conv_input}`)" in iso["detail"], iso

    # One first divergence everywhere (report.json, report.md's title, the terminal), and a
    # relative figure beside max rel that near-zero elements cannot inflate.
    first = report["first_divergence"]
    md = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    title = report["verdict"].replace("_", " ").upper()  # within tolerance: the outputs decide (tests/test_verdict.py)
    assert md.startswith(f"## tftrace: {title} — first divergence at `{first['node']}` ({first['op']})")
    assert " ".join(stdout.split()).count(f": {first['node']} ({first['op']}), max abs ") >= 1
    for origin in report["origins"]:
        a = np.asarray(capture_a.tensor(origin["tensor"]), np.float64)
        assert origin["rel_to_peak"] == pytest.approx(origin["max_abs"] / np.max(np.abs(a)), rel=1e-6)
        assert origin["rel_to_peak"] < origin["max_rel"]
    # B is fed A's examples (from a file A's were written to): the same values, not flagged as a difference
    digests = {k: report["sides"][k]["examples"]["digest"] for k in ("a", "b")}
    assert digests["a"] == digests["b"] and len(digests["a"]) == 64
    assert "| examples | " in md and "| examples **≠**" not in md


def test_bf16_export_first_origin_is_the_converted_matmul(models, tmp_path):
    code, report, _ = _compare(tmp_path, models["detector_ckpt"], models["detector_bf16"])
    assert code == 1
    first = report["first_divergence"]
    assert first["node"] == "dense/MatMul" and first["rewrite"] == "cast_inserted"
    assert first["isolation"]["verdict"] == "own_error"
    assert report["nodes"]["dense/MatMul"]["alignment"] == "cast region"
    assert report["nodes"]["dense/MatMul"]["b_node"] == "dense/to_fp32"
    iso = first["isolation"]
    assert iso["detail"] == (
        "given identical inputs, B's replacement for it (`dense/to_fp32`, Cast, with the ops between it and those inputs) "
        f"differs from A's MatMul by up to {iso['max_abs']:.3g} (rel {iso['max_rel']:.3g}, rel L2 {iso['rel_l2']:.3g})"
    ) and iso["max_abs"] > 0.01
    assert report["nodes"]["flatten/Reshape"]["status"] == "identical"
    assert "Mixed precision" in " ".join(report["answers"]["why"])


def test_tf2_export_is_identical_despite_other_names(models, tmp_path):
    code, report, _ = _compare(tmp_path, models["detector_ckpt"], models["detector_tf2"])
    assert code == 0 and report["verdict"] == "identical"
    assert report["nodes"]["block1/conv/Conv2D"]["b_node"] == "StatefulPartitionedCall/detector/block1/conv/Conv2D"
    assert report["nodes"]["block1/conv/Conv2D"]["alignment"] == "structure"


@pytest.mark.parametrize("onednn", ["off", "on"])
def test_batch_1_vs_4_first_divergence_is_the_ops_own_kernel(models, tmp_path, onednn):
    """Which op differs first between batch 1 and 4 depends on the CPU (oneDNN and Eigen pick
    kernels per shape and instruction set): the expected op comes from plain sessions here."""
    from plain_truth import captured_inputs, first_row_divergence  # noqa: PLC0415

    code, report, _ = _compare(
        tmp_path, models["detector"], models["detector"], "--a-batch-size", "1", "--b-batch-size", "4",
        "--onednn", onednn,
    )
    inputs = captured_inputs(report["sides"]["a"]["capture_dir"])
    tol = report["tolerance"]
    truth = first_row_divergence(models["detector"], inputs, 1, inputs, 4, list(range(4)), onednn=onednn,
                                 atol=tol["atol"], rtol=tol["rtol"])
    first = report["first_divergence"]
    assert truth["bitwise"] is not None, "batch 1 vs 4 agreed bitwise in plain sessions: nothing to trace here"
    assert first["node"] == truth["bitwise"], (first, truth)
    assert (report["first_divergence_beyond_tolerance"] or {}).get("node") == truth["beyond_tolerance"], truth
    assert first["isolation"]["verdict"] == "own_error"
    assert report["sides"]["a"]["batch_size"] == 1 and report["sides"]["b"]["batch_size"] == 4
    upstream = _ancestors(report, first["node"])
    assert {report["nodes"][n]["status"] for n in upstream} <= {"identical"}
    assert "batch 1 vs 4" in " ".join(report["answers"]["why"])


def test_artifact_vs_capture_and_capture_vs_capture_agree_with_artifacts(models, tmp_path, planted):
    _, expected, _ = planted
    cap_a, cap_b = tmp_path / "cap_a", tmp_path / "cap_b"
    for model, out in ((models["detector_ckpt"], cap_a), (models["detector_planted"], cap_b)):
        proc = run_cli("capture", str(model), "--out", str(out), *EXAMPLES)
        assert proc.returncode == 0, proc.stderr
    for a, b, name in ((cap_a, cap_b, "caps"), (models["detector_ckpt"], cap_b, "mixed"), (cap_a, models["detector_planted"], "mixed2")):
        _, report, _ = _compare(tmp_path / name, a, b)
        assert report["first_divergence"]["node"] == expected["first_divergence"]["node"]
        assert [o["node"] for o in report["origins"]] == [o["node"] for o in expected["origins"]]
        for key, out in expected["outputs"].items():
            assert report["outputs"][key]["max_abs"] == out["max_abs"]


def test_first_nan_op_is_named(models, tmp_path):
    code, report, stdout = _compare(tmp_path, models["nan_model_safe"], models["nan_model"])
    assert code == 1
    assert report["first_nonfinite"]["a"] is None
    assert report["first_nonfinite"]["b"]["node"] == "layer/Log"
    assert report["first_nonfinite"]["b"]["nan"] > 0
    assert report["outputs"]["y"]["nan_mismatch"] > 0
    assert report["first_nonfinite"]["b"]["from_finite_inputs"] is True  # born there: MatMul's output is finite
    assert "Context: NaN/Inf first computed from finite inputs on B at layer/Log (Log, " in stdout


def test_signatures_that_cannot_be_paired(models, real_models, tmp_path):
    """One input each (``images``, ``x``): paired, and A's images do not fit B's ``[?, 1]``; --map
    would pair the same two."""
    proc = run_cli("compare", str(models["detector"]), str(real_models["half_plus_two"]), "--out", str(tmp_path / "r"),
                   *EXAMPLES)
    assert_user_error(proc, "cannot be paired", "the two models take different ones", "--b-signature")
    assert "--map" not in proc.stderr


WIDTH_MODEL = """
import sys
import tensorflow as tf

class Scale(tf.Module):
    def __init__(self, width):
        self.w = tf.Variable(tf.ones([width]))

    @tf.function(input_signature=[tf.TensorSpec([None, int(sys.argv[2])], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": x * self.w}

model = Scale(int(sys.argv[2]))
tf.saved_model.save(model, sys.argv[1], signatures={"serving_default": model.__call__})
"""


def test_inputs_whose_keys_pair_but_whose_shapes_differ_are_not_sent_to_map(tmp_path: Path) -> None:
    """Keys that pair (``x`` and ``x``, by name or by ``--map x=x``) with inputs of other shapes:
    renaming keys cannot help, yet the error said "Map keys with --map"."""
    for width in (4, 6):
        build_model(WIDTH_MODEL, tmp_path / f"w{width}", width)
    for extra in ((), ("--map", "x=x,y=y")):
        proc = run_cli("compare", str(tmp_path / "w4"), str(tmp_path / "w6"), "--out", str(tmp_path / "r"), *EXAMPLES,
                       *extra)
        assert_user_error(proc, "B cannot take A's examples (input 'x' has shape [4, 4], the signature expects [?, 6])",
                          "The inputs are paired, but the two models take different ones (another shape or dtype)",
                          "--b-signature")
        assert "--map" not in proc.stderr.replace("--map x=x,y=y", "")


def test_incomplete_capture_is_refused(models, tmp_path):
    broken = tmp_path / "broken"
    (broken / "tensors").mkdir(parents=True)
    proc = run_cli("compare", str(broken), str(models["detector"]), "--out", str(tmp_path / "r"))
    assert_user_error(proc, "incomplete capture")


def test_existing_report_dir_needs_force(models, tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    (out / "something").write_text("x")
    proc = run_cli("compare", str(models["detector"]), str(models["detector"]), "--out", str(out))
    assert_user_error(proc, "not empty", "--force")


def test_assert_equivalent_explains_itself(models, tmp_path):
    import tracer

    with pytest.raises(AssertionError) as info:
        tracer.assert_equivalent(str(models["detector_ckpt"]), str(models["detector_planted"]), examples=2,
                                 out_dir=str(tmp_path / "r"))
    message = str(info.value)
    assert "block2/bn/FusedBatchNormV3" in message and "FusedBatchNormV3" in message
    assert "report.html" in message or "report" in message
    result = tracer.assert_equivalent(str(models["detector_ckpt"]), str(models["detector"]), examples=2,
                                      out_dir=str(tmp_path / "ok"))
    assert result.verdict == "identical"


def test_assert_equivalent_leaves_nothing_behind_when_it_passes_and_keeps_the_report_it_names(
        models, tmp_path, monkeypatch):
    """A test suite calling it often left a 1.5-4.5 MB temporary directory a call, passes included."""
    import tempfile

    import tracer

    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    tracer.assert_equivalent(str(models["detector_ckpt"]), str(models["detector"]), examples=2)
    assert list(temp.iterdir()) == []
    with pytest.raises(AssertionError) as info:
        tracer.assert_equivalent(str(models["detector_ckpt"]), str(models["detector_planted"]), examples=2)
    [kept] = list(temp.iterdir())
    assert f"{kept}/report.html" in str(info.value) and (kept / "report.json").is_file()


def test_report_rerender_from_json(planted, tmp_path):
    _, report, _ = planted
    out = tmp_path / "copy"
    out.mkdir()
    (out / "report.json").write_text(json.dumps(report))
    proc = run_cli("report", str(out))
    assert proc.returncode == 1, proc.stderr
    assert "block2/bn/FusedBatchNormV3" in proc.stdout
    assert json.loads((out / "report.json").read_text())["first_divergence"]["node"] == "block2/bn/FusedBatchNormV3"
    shutil.rmtree(out)
    assert not os.path.exists(out)


def test_isolation_of_a_side_captured_elsewhere_runs_there(models, tmp_path):
    """B captured from a model this machine no longer has (the GPU server's copy): compare
    prints the `tftrace isolate` command; running it against a local copy completes the report."""
    remote_model = tmp_path / "gpu_server" / "savedmodel"
    shutil.copytree(models["detector_planted"], remote_model)
    cap_b = tmp_path / "cap_b"
    assert run_cli("capture", str(remote_model), "--out", str(cap_b), *EXAMPLES).returncode == 0
    shutil.rmtree(remote_model.parent)
    out = tmp_path / "report"
    proc = run_cli("compare", str(models["detector_ckpt"]), str(cap_b), "--out", str(out), *EXAMPLES)
    assert proc.returncode == 1, proc.stderr
    report = json.loads((out / "report.json").read_text())
    isolation = report["first_divergence"]["isolation"]
    assert isolation["verdict"] == "not_run"
    assert isolation["command"].startswith("tftrace isolate MODEL --from ")
    assert "tftrace isolate MODEL --from" in proc.stdout
    proc = run_cli("isolate", str(models["detector_planted"]), "--from", str(out))
    assert proc.returncode == 1, proc.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["first_divergence"]["node"] == "block2/bn/FusedBatchNormV3"
    assert report["first_divergence"]["isolation"]["verdict"] == "own_error"
    assert report["nodes"]["block2/bn/FusedBatchNormV3"]["isolation"]["verdict"] == "own_error"


def test_a_signature_without_inputs_is_labelled_by_its_one_run_not_batch_0(real_models, tmp_path):
    """TF Serving's counter model (TF 1.5): `incr_counter` takes no input and changes its own state."""
    model = str(real_models["counter"])
    code, report, stdout = _compare(tmp_path, model, model, "--signature", "incr_counter")
    assert code == 0 and report["verdict"] == "identical"
    assert report["sides"]["a"]["label"] == "cpu, no inputs (one run)"
    # made to be pasted into a public issue: the machine's name stays in the capture, out of the report
    import socket

    kept = json.loads((tmp_path / "report" / "captures" / "a" / "manifest.json").read_text())
    assert kept["environment"]["hostname"] == socket.gethostname()
    assert "hostname" not in report["sides"]["a"]["environment"]
    pages = [(tmp_path / "report" / page).read_text() for page in ("report.md", "report.html", "report.json")]
    assert not any("hostname" in page for page in pages)  # no row, no key
    assert "[cpu, no inputs (one run)]" in stdout and "batch 0" not in stdout
    # the plain run and then the instrumented one each added 1: the state moved the output, not observing it
    assert ("Observer effect on A: outputs moved by output 1 (not the observation: the graph changes its "
            "own state on every run, incr_counter_op/AssignAdd)") in " ".join(stdout.split())


def test_a_model_against_a_capture_runs_on_the_captures_examples(models, tmp_path):
    """The capture from the GPU server was made with the user's --inputs; the model here is compared
    with it without them. It was refused as "fed different examples"; it now runs on the capture's."""
    images = np.random.default_rng(5).uniform(0, 255, (3, 64, 64, 3)).astype(np.float32)
    np.save(tmp_path / "images.npy", images)
    cap = tmp_path / "server_capture"
    proc = run_cli("capture", str(models["detector"]), "--out", str(cap), "--inputs", str(tmp_path / "images.npy"))
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / "report"
    proc = run_cli("compare", str(models["detector_ckpt"]), str(cap), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["verdict"] == "identical"
    a, b = report["sides"]["a"]["examples"], report["sides"]["b"]["examples"]
    assert (a["source"], a["count"], b["source"], b["count"]) == ("inputs_from_b.npy", 3, "images.npy", 3)
    assert a["digest"] == b["digest"]
