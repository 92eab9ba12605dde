"""TF-free: non-finite numbers in strict JSON, the cond-branch fetch schedule, and the report
texts for what was not captured, where NaN/Inf is born, and diagnose's empty answers."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tracer.captures.fetch_plan import DEAD_BRANCH_REASON, WHILE_FRAME_REASON, BranchSchedule, fetch_plan
from tracer.captures.observer import _max_abs_diff
from tracer.captures.store import Capture, CaptureWriter
from tracer.errors import TftraceError
from tracer.jsonvalues import dumps, is_number, loads, number
from tracer.metrics import compare_arrays
from tracer.opgraph import OpGraph
from tracer.report.markdown import render_markdown
from tracer.report.render import render_report
from tracer.report.summary import no_answer, nonfinite_context, not_captured_groups, not_captured_text

FIXTURES = Path(__file__).parent / "fixtures"


def test_non_finite_numbers_are_three_strings_in_strict_json() -> None:
    text = dumps({"values": [-math.inf, 1.5, np.float32(np.inf)], "mean": np.float64("nan"), "n": np.int64(3)})
    assert text == '{"values": ["-inf", 1.5, "inf"], "mean": "nan", "n": 3}'
    doc = loads(text)
    assert [number(v) for v in doc["values"]] == [-math.inf, 1.5, math.inf] and math.isnan(number(doc["mean"]))
    for token in ("NaN", "Infinity", "-Infinity"):
        with pytest.raises(ValueError, match="not JSON"):
            loads(f'{{"x": {token}}}')
    assert is_number("-inf") and is_number(None) and not is_number("Infinity") and not is_number(True)
    with pytest.raises(ValueError):
        number("-Infinity")


def test_a_manifest_holding_minus_inf_is_written_strict_and_read_back(tmp_path: Path) -> None:
    """The crash: a -inf Const value in the op graph made finalize raise 'Out of range float'."""
    with CaptureWriter(tmp_path / "cap") as writer:
        writer.write_whole("mask:0", np.array([-np.inf, 0.5], np.float32))
        const = _node("NotEqual/y", "Const", []) | {"attrs": {"value": {"values": [-math.inf]}, "upper_bound": math.inf}}
        writer.finalize({"graph": {"inputs": {}, "outputs": {"y": "NotEqual/y:0"}, "nodes": [const]},
                         "observer_effect": {"outputs_max_abs_diff": {"scores": math.nan}}})
    text = (tmp_path / "cap" / "manifest.json").read_text()
    attrs = loads(text)["graph"]["nodes"][0]["attrs"]  # strict: no NaN/Infinity token in it
    assert attrs == {"value": {"values": ["-inf"]}, "upper_bound": "inf"}
    cap = Capture.open(tmp_path / "cap")
    assert cap.manifest["observer_effect"]["outputs_max_abs_diff"]["scores"] == "nan"
    assert cap.record("mask:0")["stats"] == {"min": 0.5, "max": 0.5, "mean": 0.5, "nan": 0, "inf": 1}
    assert cap.tensor("mask:0")[0] == -np.inf
    (tmp_path / "cap" / "manifest.json").write_text(text.replace('"inf"', "Infinity"))
    with pytest.raises(TftraceError, match="not valid JSON"):
        Capture.open(tmp_path / "cap")


def test_equal_infinities_compare_identical() -> None:
    a = np.array([-np.inf, 1.0, np.inf], np.float32)
    m = compare_arrays(a, a.copy())
    assert m.identical and m.max_abs == 0 and m.inf_mismatch == 0
    assert not compare_arrays(a, np.array([np.inf, 1.0, np.inf], np.float32)).identical
    # the observer effect (plain vs instrumented outputs): an NMS output padded with -inf is unmoved
    assert _max_abs_diff(a, a.copy()) == (True, 0.0)
    assert _max_abs_diff(a, np.array([-np.inf, 1.5, np.inf], np.float32)) == (False, 0.5)
    assert _max_abs_diff(a, np.array([np.inf, 1.0, np.inf], np.float32)) == (False, None)


def _node(name: str, op: str, inputs: list[str], control: list[str] = (), outputs: int = 1) -> dict[str, Any]:
    return {"name": name, "op": op, "device": "", "scope": "", "attrs": {}, "inputs": inputs,
            "control_inputs": list(control),
            "outputs": [{"dtype": "float32", "shape": [None, 2], "capturable": True, "reason": ""}] * outputs}


def _cond_graph() -> OpGraph:
    """x -> pred; Switch(x, pred) -> then: Tanh (inner cond on it) | else: Abs; Merge -> y."""
    return OpGraph.from_json({"inputs": {"x": "x:0"}, "outputs": {"y": "y:0"}, "nodes": [
        _node("x", "Placeholder", []),
        _node("pred", "Greater", ["x:0"]),
        _node("switch", "Switch", ["x:0", "pred:0"], outputs=2),
        _node("then/tanh", "Tanh", ["switch:1"]),
        _node("then/pred", "Less", ["then/tanh:0"]),
        _node("then/switch", "Switch", ["then/tanh:0", "then/pred:0"], outputs=2),
        _node("then/inner_t", "Neg", ["then/switch:1"]),
        _node("then/inner_f", "Exp", ["then/switch:0"]),
        _node("then/merge", "Merge", ["then/inner_f:0", "then/inner_t:0"], outputs=2),
        _node("else/abs", "Abs", ["switch:0"]),
        _node("merge", "Merge", ["else/abs:0", "then/merge:0"], outputs=2),
        _node("y", "Identity", ["merge:0"]),
    ]})


def test_dead_branches_are_known_from_their_predicates_before_fetching() -> None:
    plan = fetch_plan(_cond_graph(), [(0, 4)], 1 << 30)
    assert plan.branches["else/abs:0"] == {("switch", 0)}
    assert plan.branches["then/inner_t:0"] == {("switch", 1), ("then/switch", 1)}
    assert "merge:0" not in plan.branches and "y:0" not in plan.branches  # a Merge runs whichever branch did
    assert plan.switches == {"switch": (frozenset(), "pred:0"), "then/switch": ({("switch", 1)}, "then/pred:0")}
    schedule = BranchSchedule(plan.names, plan)
    ready, dead, preds = schedule.next()
    assert ready == ["x:0", "pred:0", "merge:0", "y:0"] and dead == []  # (a Merge's value_index: unread) and preds == {"pred:0": ["switch"]}
    schedule.record("switch", np.bool_(True))  # the then branch runs
    ready, dead, preds = schedule.next()
    assert dead == ["switch:0", "else/abs:0"] and preds == {"then/pred:0": ["then/switch"]}
    assert ready == ["switch:1", "then/tanh:0", "then/pred:0", "then/merge:0"]
    schedule.record("then/switch", np.array(False))
    ready, dead, preds = schedule.next()
    assert ready == ["then/switch:0", "then/inner_f:0"] and dead == ["then/switch:1", "then/inner_t:0"]
    assert schedule.next() is None and schedule.leftover() == []


def test_a_branch_whose_predicate_is_not_fetched_is_left_to_be_fetched_alone() -> None:
    plan = fetch_plan(_cond_graph(), [(0, 4)], 1 << 30)
    schedule = BranchSchedule(plan.names, plan)
    schedule.next()  # the predicate "pred:0" is refused: nothing is recorded
    assert schedule.next() is None
    assert [b for b, _ in schedule.leftover()] == [{("switch", 0)}, {("switch", 1)}, {("switch", 1), ("then/switch", 0)},
                                                   {("switch", 1), ("then/switch", 1)}]


def _report_with_reasons() -> dict[str, Any]:
    reasons = {"loop": f"A: {WHILE_FRAME_REASON}; B: {WHILE_FRAME_REASON}", "dead1": f"A: {DEAD_BRANCH_REASON}",
               "dead2": "B: TensorFlow cannot fetch it: Retval[0] does not have value",
               "handle": "A: a resource handle holds no values", "noop": "", "refused": "A: TensorFlow cannot fetch it: x"}
    nodes = {name: {"status": "not_captured", "op": "X", "reason": r} for name, r in reasons.items()}
    nodes["fine"] = {"status": "identical", "op": "Conv2D", "reason": None}
    return {"verdict": "identical", "nodes": nodes}


def test_what_was_not_captured_is_counted_by_reason() -> None:
    report = _report_with_reasons()
    assert not_captured_groups(report) == [("in cond branches that did not run", 2), ("inside while-loop bodies", 1),
                                           ("resource handles or variants (no values)", 1),
                                           ("ops without output tensors (NoOp)", 1), ("refused by TensorFlow", 1)]
    assert not_captured_text(report).startswith("6 ops not captured: 2 in cond branches that did not run, ")
    assert not_captured_text({"nodes": {}}) == ""
    loops = {f"loop{i}": {"status": "not_captured", "op": "X", "reason": WHILE_FRAME_REASON} for i in range(36606)}
    assert not_captured_text({"nodes": loops}) == "36,606 ops not captured: 36,606 inside while-loop bodies"


def test_nan_inf_is_context_where_it_is_born_never_a_sentinel() -> None:
    born = {"node": "log", "op": "Log", "tensor": "log:0", "nan": 0, "inf": 3, "from_finite_inputs": True}
    old = {"node": "NotEqual/y", "op": "Const", "tensor": "NotEqual/y:0", "nan": 0, "inf": 1}  # an older report
    assert nonfinite_context({"verdict": "identical", "first_nonfinite": {"a": born, "b": born}}) == [
        "NaN/Inf first computed from finite inputs on both sides at log (Log, 3 Inf); the sides agree there"]
    assert nonfinite_context({"verdict": "diverged", "first_nonfinite": {"a": None, "b": born}}) == [
        "NaN/Inf first computed from finite inputs on B at log (Log, 3 Inf)"]
    assert nonfinite_context({"first_nonfinite": {"a": old, "b": old}}) == []


def test_diagnoses_own_report_never_says_run_diagnose(tmp_path: Path) -> None:
    report = json.loads((FIXTURES / "report_detector_planted.json").read_text())
    report["answers"] = {"why": ["None of the 9 experiments that ran changes the outputs beyond the tolerance."],
                         "prevent": [], "cost": [], "source": "diagnosis"}
    md = render_markdown(report)
    assert "tftrace diagnose` to" not in md
    # a diagnosis in which nothing diverged has nothing to prevent or pay: no such sections at all
    assert "### How to prevent it" not in md and "### What preventing it costs" not in md
    render_report(report | {"nodes": _report_with_reasons()["nodes"] | report["nodes"]}, tmp_path,
                  dot_command=str(tmp_path / "no-dot"))
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "tftrace diagnose</code> to measure" not in page and "How to prevent it" not in page
    assert "6 ops not captured: 2 in cond branches that did not run" in page
    assert no_answer("cost", "compare") == "Run `tftrace diagnose` to measure it on this model."
    assert no_answer("cost", "diagnosis") == "Nothing to pay: no remedy is needed."
