"""A side without a signature borrows the other side's; auto-numbered names are no evidence.

The artifacts are made the way TF1 users made them in 2018-19 (``slim_models``: a tf_slim net in
graph mode, a ``tf.compat.v1.train.Saver`` training checkpoint without a signature and a
``tf.compat.v1.saved_model.Builder`` export from the same session keyed ``images``/``scores``),
and every command runs as the user runs it, in a child process.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import assert_user_error, run_cli

pytestmark = pytest.mark.slow

SCORES = "net/predictions/Reshape_1:0"  # slim.softmax's output: a Reshape back to the logits' shape


def _json(proc) -> dict:  # noqa: ANN001
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_diff_graph_of_a_training_checkpoint_borrows_the_savedmodels_signature(slim_models: Path) -> None:
    ckpt, sm = slim_models / "ckpt", slim_models / "savedmodel"
    doc = _json(run_cli("diff-graph", "--json", str(ckpt), str(sm)))
    assert doc["rewrites"] == [] and doc["only_in_a"] == [] and doc["only_in_b"] == []
    assert doc["matched"] > 40 and doc["renamed"] == {}
    text = run_cli("diff-graph", str(ckpt), str(sm))
    assert text.returncode == 0, text.stderr
    flat = " ".join(text.stdout.split())
    assert (f"note (A): no signature of its own: borrowed signature 'serving_default' of {sm} "
            f"(inputs images=input:0; outputs scores={SCORES}; found by name)") in flat
    # the other way round, B borrows
    reverse = run_cli("diff-graph", str(sm), str(ckpt))
    assert reverse.returncode == 0 and "note (B): no signature of its own" in " ".join(reverse.stdout.split())


def test_a_savedmodel_exported_without_signature_borrows_too(slim_models: Path) -> None:
    doc = _json(run_cli("diff-graph", "--json", str(slim_models / "savedmodel"), str(slim_models / "savedmodel_unsigned")))
    assert (doc["rewrites"], doc["only_in_a"], doc["only_in_b"], doc["renamed"]) == ([], [], [], {})
    proc = run_cli("diff-graph", str(slim_models / "savedmodel_unsigned"), str(slim_models / "ckpt"))
    assert_user_error(proc, "has no signature to say what to trace, and neither has",
                      "candidate outputs, best first: net/predictions/Reshape_1, total_loss)")


def test_compare_checkpoint_and_its_savedmodel_just_works_and_is_identical(slim_models: Path, tmp_path: Path) -> None:
    ckpt, sm = slim_models / "ckpt", slim_models / "savedmodel"
    proc = run_cli("compare", str(ckpt), str(sm), "--out", str(tmp_path / "r"), "--examples", "4", "--keep-captures")
    assert proc.returncode == 0, proc.stderr
    lines = [" ".join(line.split()) for line in proc.stdout.splitlines()]
    assert lines[0] == "IDENTICAL"
    assert f"no signature of its own: traced with signature 'serving_default' borrowed from {sm}" in " ".join(lines)
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["verdict"] == "identical"
    assert report["sides"]["a"]["signature"] == {"key": "serving_default", "from_user": False, "borrowed_from": str(sm)}
    assert report["sides"]["b"]["signature"]["borrowed_from"] == ""
    assert list(report["outputs"]) == ["scores"] and report["outputs"]["scores"]["identical"] is True
    md = (tmp_path / "r" / "report.md").read_text()
    assert "(borrowed from" in md and "this side has none)" in md
    # the capture records the resolved signature: replays (isolate) need not load the SavedModel again
    spec = json.loads((tmp_path / "r" / "captures" / "a" / "manifest.json").read_text())["spec"]["artifact"]
    assert spec["borrowed"]["inputs"]["images"]["name"] == "input:0"
    assert spec["borrowed"]["outputs"]["scores"]["name"] == SCORES
    assert "signature_from" not in spec  # resolved: the SavedModel's path is no longer needed
    from tracer.artifacts.loader import ArtifactRef, load  # noqa: PLC0415 - imports TensorFlow, as a replay child does

    again = load(ArtifactRef.from_json(spec))
    assert again.signature is not None and again.signature.inputs["images"].name == "input:0"
    assert again.notes[-1].endswith("found as recorded)")


def test_outputs_named_by_hand_take_the_lenders_keys_without_map(slim_models: Path, tmp_path: Path) -> None:
    proc = run_cli("compare", str(slim_models / "ckpt"), str(slim_models / "savedmodel"), "--out", str(tmp_path / "r"),
                   "--examples", "2", "--isolate", "0", "--a-outputs", SCORES.split(":")[0])
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert list(report["outputs"]) == ["scores"] and report["verdict"] == "identical"


def test_two_checkpoints_named_by_hand_borrow_nothing_from_each_other(slim_models: Path, tmp_path: Path) -> None:
    """Neither side has a signature and both are named with --outputs/--input-names: each traces
    its own named tensors, and nothing claims a signature was borrowed."""
    ckpt = str(slim_models / "ckpt")
    proc = run_cli("compare", ckpt, ckpt, "--out", str(tmp_path / "r"), "--examples", "2", "--isolate", "0",
                   "--outputs", SCORES.split(":")[0], "--input-names", "input")
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["verdict"] == "identical" and list(report["outputs"]) == [SCORES.split(":")[0]]
    for side in report["sides"].values():
        assert side["signature"] == {"key": "(from --outputs)", "from_user": True, "borrowed_from": ""}
    assert "borrowed" not in proc.stdout and "no signature of its own" not in proc.stdout
    # one side named by hand, the other borrows those names: said in words, not as a signature key
    proc = run_cli("compare", ckpt, ckpt, "--out", str(tmp_path / "r2"), "--examples", "2", "--isolate", "0",
                   "--a-outputs", SCORES.split(":")[0], "--a-input-names", "input")
    assert proc.returncode == 0, proc.stderr
    flat = " ".join(proc.stdout.split())
    assert f"no signature of its own: traced with the tensors named by --outputs/--input-names for {ckpt}" in flat
    assert "(from --outputs)" not in flat


def test_a_renamed_export_is_borrowed_from_by_structure(slim_models: Path) -> None:
    renamed = slim_models / "renamed"  # frozen, re-exported under exported/: no name is kept
    proc = run_cli("diff-graph", "--json", str(slim_models / "ckpt"), str(renamed))
    doc = _json(proc)
    assert doc["only_in_a"] == [] and doc["only_in_b"] == []
    assert {r["kind"] for r in doc["rewrites"]} == {"variable_frozen"}
    assert all(r["detail"]["exact"] for r in doc["rewrites"])
    assert doc["renamed"]["input"] == "exported/input"
    assert doc["renamed"][SCORES.split(":")[0]] == "exported/" + SCORES.split(":")[0]
    text = " ".join(run_cli("diff-graph", str(slim_models / "ckpt"), str(renamed)).stdout.split())
    assert f"(inputs images=input:0; outputs scores={SCORES}; found by structure)" in text


def test_neither_side_with_a_signature_lists_the_prediction_first(slim_models: Path) -> None:
    proc = run_cli("diff-graph", str(slim_models / "ckpt"), str(slim_models / "v1"))
    # not the Shape, Const and regulariser ops that used to be listed: they compute nothing from the input
    assert_user_error(proc, "has no signature to say what to trace, and neither has",
                      "candidate inputs: input, labels; candidate outputs, best first: net/predictions/Reshape_1, total_loss)",
                      "Name them with --outputs")


def test_a_v1_format_checkpoint_loads_and_runs(slim_models: Path, tmp_path: Path) -> None:
    v1 = slim_models / "v1"  # export.meta + export-00000-of-00001, as TF Serving's bad_half_plus_two
    assert sorted(p.name for p in v1.iterdir()) == ["export-00000-of-00001", "export.meta"]
    proc = run_cli("compare", str(v1), str(slim_models / "savedmodel"), "--out", str(tmp_path / "r"),
                   "--examples", "2", "--isolate", "0")
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["verdict"] == "identical"  # the V1 shard's weights were restored, not initial values
    assert any("a V1-format checkpoint" in n for n in report["sides"]["a"]["notes"])


def test_a_meta_without_weights_names_what_it_found(slim_models: Path) -> None:
    proc = run_cli("diff-graph", str(slim_models / "meta_only"), str(slim_models / "savedmodel"))
    assert_user_error(proc, "is only the graph (a .meta file)", "model.ckpt-3.index and",
                      "or give the SavedModel or frozen GraphDef exported from it")


def test_diagnose_borrows_the_savedmodels_signature_and_takes_outputs(slim_models: Path, tmp_path: Path) -> None:
    proc = run_cli("diagnose", str(slim_models / "ckpt"), "--savedmodel", str(slim_models / "savedmodel"),
                   "--only", "export", "--batch-sizes", "2", "--timing-runs", "5", "--out", str(tmp_path / "d"),
                   "--outputs", SCORES.split(":")[0], "--input-names", "input")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "d" / "diagnosis.json").read_text())
    export = [e for e in doc["experiments"] if e["factor"] == "export"]
    assert [(e["name"], e["verdict"], e["max_abs_output_diff"]) for e in export] == [
        ("ckpt_vs_savedmodel_batch_2", "identical", 0.0)]


# --------------------------------------------------------------------------- auto-numbered names


def _diff(slim_models: Path, b: str) -> dict:
    d = slim_models / "renumbered"
    return _json(run_cli("diff-graph", "--json", str(d / "a.pbtxt"), str(d / f"{b}.pbtxt"),
                         "--outputs", "y", "--input-names", "x"))


def test_an_extra_op_built_first_shifts_names_but_is_no_rewrite(slim_models: Path) -> None:
    doc = _diff(slim_models, "b")  # B built an unrelated Reshape first
    assert doc["rewrites"] == [] and doc["only_in_a"] == [] and doc["only_in_b"] == []
    assert doc["renamed"]["Reshape"] == "Reshape_1" and doc["renamed"]["Reshape_2"] == "Reshape_3"


def test_the_same_ops_built_in_another_order_are_no_rewrite(slim_models: Path) -> None:
    doc = _diff(slim_models, "reordered")
    assert doc["rewrites"] == [] and doc["only_in_a"] == [] and doc["only_in_b"] == []
    assert doc["renamed"] == {"Const": "Const_1", "Const_1": "Const_2", "Const_2": "Const"}


def test_a_planted_constant_change_is_still_reported_exactly(slim_models: Path) -> None:
    doc = _diff(slim_models, "b_changed")  # the scale 2.0 became 3.0
    assert [(r["kind"], r["a_nodes"], r["b_nodes"], r["detail"]) for r in doc["rewrites"]] == [
        ("const_changed", ["Const_1"], ["Const_2"], {"max_abs_change": 1.0, "values": {"a": 2.0, "b": 3.0}})]
