"""Sides that differ only as much as each differs from itself name no cause in what sets them apart.

TF Serving's ``saved_model_half_plus_two_mkl`` (TF 1.12) sets a conv kernel afresh at each load
(``conv2d/Conv2D/ReadVariableOp``) and then multiplies its output away: the weight moves between
any two processes, the outputs never. Compared at batch 1 against 4, tftrace named "Shape-dependent
kernel choice"; with oneDNN off against on, after that was mended for the batch alone, it named
oneDNN. Every op that differs there is within each side's own run-to-run noise and the outputs are
bit-identical, so no difference between the sides (batch size, a knob, device, build, CPU) is
measured to cause anything (:func:`tracer.causes._nothing_measured_apart`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli
from tracer.causes import explain_comparison

NOTHING_MEASURED = ("Every op that differs between the sides differs by no more than each side differs from itself "
                    "between fresh processes, and the outputs are bit-identical: nothing measured here is caused by "
                    "what sets the sides apart.")


def _noise_only(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    return {"verdict": "within_tolerance", "verdict_ops": "within_noise", "verdict_outputs": "identical",
            "sides": {"a": a, "b": b}, "origins": [], "nodes": {},
            "outputs": {"y": {"a_tensor": "y:0", "within_tolerance": True}}}


CPU = {"environment": {"tensorflow": "2.21.0", "build": {"is_cuda_build": False}, "cpu": {"model": "Xeon"}}, "device": "cpu", "batch_size": 1}
APART = {  # what sets the sides apart -> the cause it is named when an op differs beyond the noise
    "batch": ({**CPU, "batch_size": 4}, "batch"),
    "onednn knob": ({**CPU, "knobs": {"onednn": "on"}}, "onednn"),
    "device": ({**CPU, "device": "gpu:0"}, "tf32"),
    "build": ({**CPU, "environment": {**CPU["environment"], "tensorflow": "2.12.0"}}, "build"),
    "cpu": ({**CPU, "environment": {**CPU["environment"], "cpu": {"model": "EPYC"}}}, "onednn"),
}


@pytest.mark.parametrize("what", sorted(APART))
def test_what_sets_the_sides_apart_is_no_cause_when_every_op_is_within_the_noise(what: str) -> None:
    b, cause = APART[what]
    a = {**CPU, "knobs": {"onednn": "off"}} if what == "onednn knob" else CPU
    answers = explain_comparison(_noise_only(a, b))
    assert answers["causes"] == [] and answers["why"] == [NOTHING_MEASURED]
    # the control: an op beyond the noise, and the same difference is named
    assert explain_comparison({**_noise_only(a, b), "verdict_ops": "within_tolerance"})["causes"] == [cause]
    # and outputs that are not bit-identical are not "nothing measured" either
    assert explain_comparison({**_noise_only(a, b), "verdict_outputs": "within_tolerance"})["causes"] == [cause]


def test_what_is_drawn_at_each_load_is_named_as_the_mechanism() -> None:
    """Where isolation found the values drawn anew at each load, the why says so; where the noise
    alone judged them (no reason recorded), it says nothing of why they move."""
    report = _noise_only(CPU, {**CPU, "batch_size": 4})
    report["nodes"] = {"k1/read": {"status": "within_tolerance", "reason": "its value is drawn anew at every load of "
                                   "the model"},
                       "k2/read": {"status": "within_tolerance", "reason": "its value is drawn anew at every load of "
                                   "the model"},
                       "conv": {"status": "within_tolerance", "reason": "within the run-to-run noise of the sides"}}
    assert explain_comparison(report)["why"] == [
        NOTHING_MEASURED + " `k1/read`, `k2/read` are drawn anew at every load of the model (set at load, not "
        "restored), so they differ between any two loads."]


def test_a_side_of_its_own_is_still_named_when_the_sides_agree_within_the_noise() -> None:
    """The observer effect and a model that changes its own state are a side's own, not what sets
    the sides apart: they are still named."""
    report = _noise_only(CPU, {**CPU, "batch_size": 4})
    report["observer_effect"] = {"b": {"explained_by_state": True, "stateful_ops": ["AssignAddVariableOp"]}}
    assert explain_comparison(report)["causes"] == ["state"]


@pytest.mark.slow
@pytest.mark.parametrize("knobs", [("--a-batch-size", "1", "--b-batch-size", "4"),
                                   ("--a-onednn", "off", "--b-onednn", "on")], ids=["batch", "onednn"])
def test_half_plus_two_mkl_names_no_cause(real_models: dict[str, Path], tmp_path: Path, knobs: tuple[str, ...]) -> None:
    model = str(real_models["half_plus_two"])
    proc = run_cli("compare", model, model, *knobs, "--out", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["verdict_outputs"] == "identical" and report["verdict_ops"] == "within_noise"
    assert report["nodes"]["conv2d/Conv2D/ReadVariableOp"]["status"] == "within_tolerance"  # set at each load
    assert report["answers"]["causes"] == [] and report["answers"]["why"] == [
        NOTHING_MEASURED + " `conv2d/Conv2D/ReadVariableOp` is drawn anew at every load of the model (set at load, "
        "not restored), so it differs between any two loads."]
