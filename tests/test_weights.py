"""An export whose weights differ from the checkpoint's: recognised as different weights, not as a
kernel's error, an export rewrite's or nothing at all.

The TF Object Detection API (and many users) export the exponential moving averages of the
weights: the training checkpoint holds ``w`` and ``w/ExponentialMovingAverage``, the SavedModel
holds the averages in ``w``. The fast tests pin down each rule on hand-built graphs; the slow ones
(marked ``slow``) build that export for real, with TF1 ref variables and with resource variables
(tests/fixtures/ema_export.py), and compare it with its checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import Captured, run_cli, why_lines

from tracer.causes import explain_comparison
from tracer.comparison.align import ROLE_COMPARED, Alignment, NodeAlignment, TensorPair
from tracer.comparison.divergence import Tolerance, classify
from tracer.comparison.isolation_plan import PlannedOrigin
from tracer.comparison.judge import judge as judge_planned
from tracer.metrics import compare_arrays
from tracer.opgraph import OpGraph, weight_of, weight_reads


def judge(ra: Any, rb: Any, entry: dict[str, Any], *captures: Any) -> Any:
    """The judge on an origin given as its entry of isolation_index.json reads (missing fields at
    the defaults a report made before them gets), checked as a received index is."""
    planned = PlannedOrigin.from_json({"id": 0, "node": entry["a_tensor"].split(":")[0], **entry}, "the index")
    return judge_planned(ra, rb, planned, *captures)


def _graph(nodes: list[tuple[str, str, list[str]]]) -> OpGraph:
    docs = [{"name": name, "op": op, "device": "", "scope": "", "attrs": {}, "inputs": [f"{i}:0" for i in inputs],
             "control_inputs": [], "outputs": [{"dtype": "float32", "shape": [4], "capturable": True, "reason": ""}]}
            for name, op, inputs in nodes]
    return OpGraph.from_json({"inputs": {"x": "x:0"}, "outputs": {"y": f"{nodes[-1][0]}:0"}, "nodes": docs})


# Two layers; the second layer's variable is named so that it sorts, and is placed by a plain
# topological order, before the first layer's: "a_late" is read last, "z_early" first. The second
# layer scales its weight first ("a_scaled": arithmetic on the weight alone, as a batch norm's
# gamma * rsqrt(variance)), which a plain topological order also places before the first layer.
TWO_LAYERS = _graph([
    ("x", "Placeholder", []),
    ("a_late", "VarHandleOp", []),
    ("z_early", "VarHandleOp", []),
    ("layer1/ReadVariableOp", "ReadVariableOp", ["z_early"]),
    ("layer1/MatMul", "MatMul", ["x", "layer1/ReadVariableOp"]),
    ("layer1/Relu", "Relu", ["layer1/MatMul"]),
    ("layer2/ReadVariableOp", "ReadVariableOp", ["a_late"]),
    ("a_scaled", "Mul", ["layer2/ReadVariableOp", "layer2/ReadVariableOp"]),
    ("layer2/MatMul", "MatMul", ["layer1/Relu", "a_scaled"]),
    ("y", "Identity", ["layer2/MatMul"]),
])
BASE = np.array([1.0, 2.0, 3.0, 4.0], np.float32)


def test_a_weight_is_its_variable_or_constant_and_every_read_of_it() -> None:
    assert weight_of(TWO_LAYERS, "layer1/ReadVariableOp") == "z_early"
    assert weight_of(TWO_LAYERS, "z_early") == "z_early"
    assert weight_of(TWO_LAYERS, "layer1/MatMul") is None and weight_of(TWO_LAYERS, "y") is None  # y: Identity of a MatMul
    assert weight_reads(TWO_LAYERS, "a_late") == ["layer2/ReadVariableOp"]


def test_the_first_divergence_among_changed_weights_is_the_one_read_first() -> None:
    """Every weight differs; a plain topological order would name ``a_late`` (its name sorts
    first, and weights have no inputs to order them by). The examples meet ``z_early`` first."""
    assert TWO_LAYERS.topo_order()[:4] == ["a_late", "layer2/ReadVariableOp", "a_scaled", "x"]
    rank = TWO_LAYERS.flow_order()
    assert sorted(rank, key=rank.__getitem__) == [
        "x", "z_early", "layer1/ReadVariableOp", "layer1/MatMul", "layer1/Relu",
        "a_late", "layer2/ReadVariableOp", "a_scaled", "layer2/MatMul", "y"]
    nodes, metrics = {}, {}
    for name in TWO_LAYERS.topo_order():
        nodes[name] = NodeAlignment(name, name, "name", ROLE_COMPARED, [TensorPair(f"{name}:0", f"{name}:0", "name", True)])
        moved = BASE + np.float32(0.0 if name in ("x",) else 0.5)
        metrics[f"{name}:0"] = compare_arrays(BASE, moved, rtols=(1e-5,))
    result = classify(TWO_LAYERS, Alignment(nodes, []), metrics, Tolerance())
    assert result.first_bitwise.name == "z_early" and result.first_beyond_tolerance.name == "z_early"
    assert {r.name for r in result.origins} == {"a_late", "z_early"}


def test_the_first_divergence_is_always_among_the_origins_isolated() -> None:
    """``--isolate 2`` replays the first divergence (the op every summary names first) and then the
    top-ranked origin, even where two other origins differ more."""
    from tracer.comparison.divergence import Divergence, NodeResult  # noqa: PLC0415
    from tracer.comparison.pipeline import to_isolate  # noqa: PLC0415

    m = compare_arrays(BASE, BASE + np.float32(0.5))
    worst, second, first = (NodeResult(n, "origin", f"{n}:0", m) for n in ("a_late", "layer2/MatMul", "z_early"))
    divergence = Divergence({}, [worst, second, first], first, first)
    assert [r.name for r in to_isolate(divergence, 2)] == ["z_early", "a_late"]
    assert [r.name for r in to_isolate(divergence, 5)] == ["z_early", "a_late", "layer2/MatMul"]
    assert to_isolate(divergence, 0) == []


READ = {"a_tensor": "layer1/ReadVariableOp:0", "b_tensor": "layer1/ReadVariableOp:0", "a_op": "ReadVariableOp",
        "b_op": "ReadVariableOp", "inputs_identical": True, "reads_variable": True, "weight": "z_early"}
AVERAGE = BASE + np.float32(0.25)


def test_a_variable_loaded_with_other_values_is_weights_differ_not_its_kernel() -> None:
    """Each side's replay reproduces its own capture (the values are what each load restores), and
    the two differ: the artifacts hold different weights. No kernel computes a variable."""
    result = judge(BASE, AVERAGE, READ, Captured({READ["a_tensor"]: BASE}), Captured({READ["b_tensor"]: AVERAGE}))
    assert result.verdict == "weights_differ" and result.load_state is False
    assert result.max_abs == 0.25 and result.noise_max_abs == 0.0
    assert result.detail == ("the values A and B load into the variable `z_early`, which this op reads, differ by up "
                             "to 0.25 (rel 0.2, rel L2 0.0913); nothing computes them, so no kernel differs: the two "
                             "artifacts hold different weights")
    ref = {**READ, "a_tensor": "z_early:0", "b_tensor": "z_early:0", "a_op": "VariableV2", "b_op": "VariableV2"}
    assert judge(BASE, AVERAGE, ref, Captured({"z_early:0": BASE})).detail.startswith(
        "the values A and B load into the variable `z_early` differ by up to 0.25")
    const = {**ref, "reads_variable": False, "a_op": "Const", "b_op": "Const"}
    assert judge(BASE, AVERAGE, const, Captured({"z_early:0": BASE})).detail.startswith(
        "the values A's and B's graphs hold in the constant `z_early` differ by up to 0.25")


def test_a_variable_that_changes_from_load_to_load_is_still_load_state() -> None:
    """A's replay (a fresh load) differs from A's capture (another load): set at load, not restored."""
    result = judge(BASE, AVERAGE, READ, Captured({READ["a_tensor"]: BASE + np.float32(1.0)}), None)
    assert result.verdict == "nondeterministic" and result.load_state is True


def test_an_op_that_computes_is_still_judged_by_its_kernel() -> None:
    conv = {k: v for k, v in READ.items() if k not in ("reads_variable", "weight")}
    result = judge(BASE, AVERAGE, {**conv, "a_op": "MatMul", "b_op": "MatMul"}, Captured({READ["a_tensor"]: BASE}),
                   Captured({READ["b_tensor"]: AVERAGE}))
    assert result.verdict == "own_error"
    assert result.detail.startswith("given identical inputs, B's MatMul kernel differs from A's by up to 0.25")


def _changed(name: str, change: float, matches: bool | None = None) -> dict[str, Any]:
    detail: dict[str, Any] = {"max_abs_change": change}
    if matches is not None:
        detail["moving_average"] = {"checkpoint": "a", "key": f"{name}/ExponentialMovingAverage", "matches": matches}
    return {"kind": "const_changed", "a_nodes": [name, f"{name}/read"], "b_nodes": [name, f"{name}/read"],
            "detail": detail}


def test_weights_the_export_holds_as_averages_and_others_are_said_apart() -> None:
    """Two of three changed weights are exactly the checkpoint's averages, the third is not: the
    averages are named for those two only, and the third is a plain difference of weights."""
    first = {"node": "w1", "op": "VariableV2", "rewrite": "const_changed", "isolation": {"verdict": "weights_differ"}}
    report = {"verdict": "diverged", "sides": {"a": {}, "b": {}}, "origins": [first], "first_divergence": first,
              "rewrites": [_changed("w1", 0.5, True), _changed("w2", 0.25, True), _changed("w3", 0.125)]}
    answers = explain_comparison(report)
    assert answers["causes"] == ["moving_averages", "weights"]
    assert answers["why"] == [
        "The export holds the checkpoint's exponential moving averages of the weights "
        "(`<variable>/ExponentialMovingAverage`, restored into the variables as the Object Detection API's exporter "
        "does), not the weights the checkpoint's graph restores [up to 0.5 between the weights themselves]: 3 weights "
        "differ between A and B (`w1`, `w2`, `w3`), "
        "by up to 0.5. B holds, bit for bit, A's checkpoint's moving averages of 2 of them (`w1`, `w2`) (each "
        "`<variable>/ExponentialMovingAverage` in A's checkpoint): the export restored the moving averages into the "
        "variables, so it is compared with weights it does not hold.",
        "The two artifacts hold different weights (other values for the same variables or constants: an export "
        "written from another training step, from the weights' moving averages, or with weights changed on purpose) "
        "[up to 0.5 between the weights themselves]: the other weight (`w3`) is not A's checkpoint's moving average.",
        "The first divergence is `w1` (VariableV2): of the 3 weights that differ, the one the examples meet first."]


def test_no_weight_sentence_without_an_origin_in_the_weights() -> None:
    """A changed weight whose difference starts nothing (its reader's output is the same) explains nothing."""
    origin = {"node": "conv", "op": "Conv2D", "isolation": {"verdict": "own_error"}}
    report = {"verdict": "diverged", "sides": {"a": {"batch_size": 1}, "b": {"batch_size": 4}}, "origins": [origin],
              "first_divergence": origin, "rewrites": [_changed("w1", 0.5, True)]}
    assert explain_comparison(report)["causes"] == ["batch"]


# ------------------------------------------------------------------ the real export (tests/fixtures/ema_export.py)

VARIABLES = ("dense1/kernel", "dense1/bias", "dense2/kernel", "dense2/bias")  # in the order the examples meet them
# each variable's nodes in a const_changed: the variable and the ops that read it
READS = {
    "ref": {name: [name, f"{name}/read"] for name in VARIABLES},
    "resource": {name: [name, f"{name.split('/')[0]}/{'MatMul' if name.endswith('kernel') else 'BiasAdd'}/ReadVariableOp"]
                 for name in VARIABLES},
}
FIRST = {"ref": ("dense1/kernel", "VariableV2"), "resource": ("dense1/MatMul/ReadVariableOp", "ReadVariableOp")}
ENV = {"TF_ENABLE_ONEDNN_OPTS": "0"}
AVERAGES_WHY = (
    "The export holds the checkpoint's exponential moving averages of the weights "
    "(`<variable>/ExponentialMovingAverage`, restored into the variables as the Object Detection API's exporter does), "
    "not the weights the checkpoint's graph restores: 4 weights differ between A and B (`dense1/kernel`, "
    "`dense1/bias`, `dense2/kernel`, `dense2/bias`), by up to {largest:.3g}. B holds, bit for bit, A's checkpoint's "
    "moving averages of all of them (each `<variable>/ExponentialMovingAverage` in A's checkpoint): the export "
    "restored the moving averages into the variables, so it is compared with weights it does not hold.")


def _compare(a: Path, b: Path, out: Path) -> tuple[dict[str, Any], str, str]:
    """``tftrace compare A B``: report.json, the terminal's words (line breaks undone), report.md."""
    proc = run_cli("compare", str(a), str(b), "--out", str(out), "--examples", "4", "--onednn", "off", env=ENV)
    assert proc.returncode == 1, proc.stderr  # diverged
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    return report, " ".join(proc.stdout.split()), (out / "report.md").read_text(encoding="utf-8")


def _small_values_checked(rewrites: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rewrites with a const_changed's ``values`` (kept for a weight of at most 4 numbers: here
    ``dense2/bias``, 3) checked against its ``max_abs_change`` and then set aside."""
    out, small = [], []
    for rewrite in rewrites:
        detail = dict(rewrite["detail"])
        values = detail.pop("values", None)
        if values is not None:
            small.append(rewrite["a_nodes"][0])
            assert max(abs(a - b) for a, b in zip(values["a"], values["b"])) == detail["max_abs_change"]
        out.append({**rewrite, "detail": detail})
    assert small == ["dense2/bias"]
    return out


def _facts(ema_models: Path) -> dict[str, dict[str, float]]:
    return json.loads((ema_models / "facts.json").read_text(encoding="utf-8"))


@pytest.mark.slow
@pytest.mark.parametrize("variables", ["ref", "resource"])
def test_an_export_of_the_moving_averages_is_said_to_hold_them(ema_models: Path, tmp_path: Path, variables: str) -> None:
    """The checkpoint against its export of the averages: 4 const_changed (each with the ops
    reading the variable), every origin a weight whose values differ (not its kernel), the
    first divergence the weight the examples meet first, and the why naming the averages."""
    facts = _facts(ema_models)[variables]
    report, stdout, md = _compare(ema_models / variables / "ckpt", ema_models / variables / "savedmodel", tmp_path / "r")
    assert _small_values_checked(report["rewrites"]) == [
        {"kind": "const_changed", "a_nodes": READS[variables][name], "b_nodes": READS[variables][name],
         "detail": {"max_abs_change": facts[name],
                    "moving_average": {"checkpoint": "a", "key": f"{name}/ExponentialMovingAverage", "matches": True}}}
        for name in VARIABLES]
    node, op = FIRST[variables]
    first = report["first_divergence"]
    assert (first["node"], first["op"], first["rewrite"]) == (node, op, "const_changed")
    assert report["first_divergence_beyond_tolerance"]["node"] == node
    iso = first["isolation"]
    read = "" if variables == "ref" else ", which this op reads,"
    assert iso["verdict"] == "weights_differ" and iso["max_abs"] == facts["dense1/kernel"]
    assert iso["detail"] == (f"the values A and B load into the variable `dense1/kernel`{read} differ by up to "
                             f"{iso['max_abs']:.3g} (rel {iso['max_rel']:.3g}, rel L2 {iso['rel_l2']:.3g}); nothing "
                             "computes them, so no kernel differs: the two artifacts hold different weights")
    assert sorted(o["node"] for o in report["origins"]) == sorted(READS[variables][n][variables == "resource"]
                                                                   for n in VARIABLES)
    assert {(o["rewrite"], o["isolation"]["verdict"]) for o in report["origins"]} == {("const_changed", "weights_differ")}
    answers = report["answers"]
    assert answers["causes"] == ["moving_averages"]
    assert why_lines(answers) == [
        AVERAGES_WHY.format(largest=max(facts.values())),
        f"The first divergence is `{node}` ({op}): of the 4 weights that differ, the one the examples meet first."]
    assert answers["prevent"] == [
        "the export holds the checkpoint's exponential moving averages of the weights: compare the export against the "
        "checkpoint's averaged weights (restore the checkpoint with `tf.compat.v1.train.Saver(tf.compat.v1.train."
        "ExponentialMovingAverage(decay).variables_to_restore())`, save it with a plain `Saver()` and compare that "
        "checkpoint with the export), or export the raw weights if those are the ones to serve."]
    assert answers["cost"] == ["the export holds the checkpoint's exponential moving averages of the weights: none: "
                               "the averages are what the export serves."]
    assert (f"{node} ({op}), max abs {iso['max_abs']:.3g}" in stdout
            and "— its weights differ (A and B hold different values for it, as 4 weights do; no kernel is involved)"
            in stdout)
    for text in (stdout, md, json.dumps(answers)):
        assert "No setting, batch size, graph rewrite or environment difference explains it" not in text
        assert "own kernel differs" not in text and "own_error" not in text and "fold in both or in neither" not in text
    assert ("Weights differ: A and B hold different values for this weight; nothing computes it, so no kernel "
            "differs.") in md


@pytest.mark.slow
def test_weights_from_another_step_are_different_weights_and_no_moving_averages(ema_models: Path,
                                                                               tmp_path: Path) -> None:
    """A checkpoint without moving averages, exported two steps later: the weights differ, and
    nothing says "moving average"."""
    facts = _facts(ema_models)["steps"]
    report, stdout, _ = _compare(ema_models / "steps" / "ckpt", ema_models / "steps" / "savedmodel", tmp_path / "r")
    assert [r["detail"] for r in _small_values_checked(report["rewrites"])] == [
        {"max_abs_change": facts[name]} for name in VARIABLES]
    assert report["answers"]["causes"] == ["weights"]
    assert why_lines(report["answers"]) == [
        "The two artifacts hold different weights (other values for the same variables or constants: an export "
        "written from another training step, from the weights' moving averages, or with weights changed on purpose): "
        "4 weights differ between A and B (`dense1/kernel`, `dense1/bias`, `dense2/kernel`, `dense2/bias`), by up to "
        f"{max(facts.values()):.3g}.",
        "The first divergence is `dense1/kernel` (VariableV2): of the 4 weights that differ, the one the examples "
        "meet first."]
    assert "ExponentialMovingAverage" not in stdout and "restored the moving averages" not in json.dumps(report)


@pytest.mark.slow
def test_a_checkpoint_with_averages_the_export_does_not_hold_is_not_called_their_export(ema_models: Path,
                                                                                        tmp_path: Path) -> None:
    """The checkpoint holds moving averages, but the other side's weights are neither them nor the
    raw weights (a later step's): the digests say so, and no export of the averages is claimed."""
    report, _, _ = _compare(ema_models / "ref" / "ckpt", ema_models / "steps" / "savedmodel", tmp_path / "r")
    assert [r["detail"]["moving_average"] for r in report["rewrites"]] == [
        {"checkpoint": "a", "key": f"{name}/ExponentialMovingAverage", "matches": False} for name in VARIABLES]
    assert report["answers"]["causes"] == ["weights"]
    assert report["answers"]["why"][0].endswith(
        "; A's checkpoint also holds moving averages of 4 of them, but the other side's values are not those averages.")
    assert "restored the moving averages" not in json.dumps(report["answers"])


@pytest.mark.slow
def test_diff_graph_reads_the_averages_from_the_checkpoint(ema_models: Path) -> None:
    """Statically (no capture), the checkpoint's index and values tell the same."""
    facts = _facts(ema_models)["resource"]
    proc = run_cli("diff-graph", "--json", str(ema_models / "resource" / "ckpt"), str(ema_models / "resource" / "savedmodel"),
                   env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert _small_values_checked(json.loads(proc.stdout)["rewrites"]) == [
        {"kind": "const_changed", "a_nodes": READS["resource"][name], "b_nodes": READS["resource"][name],
         "detail": {"max_abs_change": facts[name],
                    "moving_average": {"checkpoint": "a", "key": f"{name}/ExponentialMovingAverage", "matches": True}}}
        for name in VARIABLES]


def test_a_weight_that_moved_between_fresh_processes_is_set_at_load() -> None:
    """Noise measured per tensor: a weight read that moved names its variable and every read of it;
    an op that computes (layer1/Relu) moves by its kernel and names nothing."""
    from tracer.comparison.isolate import weights_set_at_load  # noqa: PLC0415

    moved = {"layer2/ReadVariableOp:0": 1.5, "layer1/Relu:0": 0.25, "layer1/ReadVariableOp:0": 0.0, "x:0": 0.0}
    assert weights_set_at_load(moved, TWO_LAYERS) == {"a_late", "layer2/ReadVariableOp"}


@pytest.mark.slow
def test_a_weight_set_at_load_is_no_export_rewrite_when_the_noise_is_measured_first(
        real_models: dict[str, Path], tmp_path: Path) -> None:
    """TF Serving's half_plus_two_mkl sets `conv2d/kernel` anew at every load (it multiplies zeros, so
    `y` never moves). Measured first (`--repeat 2`, as every GPU side is), the weight's difference lay
    within the noise, was never replayed, and the SavedModel against itself got a const_changed
    rewrite (the H200, 2026-12-04: "values [-1.15645] -> [0.383119]")."""
    model = str(real_models["half_plus_two"])
    proc = run_cli("compare", model, model, "--repeat", "2", "--onednn", "off", "--out", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    node = report["nodes"]["conv2d/Conv2D/ReadVariableOp"]
    assert (node["status"], node["reason"]) == ("within_tolerance", "its value is drawn anew at every load of the model")
    assert report["rewrites"] == [] and report["verdict"] == "within_tolerance"
