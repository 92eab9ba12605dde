"""The headline's "inside" line on a detector whose float16 twin swaps detections in NMS's lists.

The outputs of a detector are matched as detections (tests/test_detections.py); the tensors inside
the graph that hold the same lists (the stack after the per-image NMS loop, the clip of the cond
after it, the outputs' Identities) are measured the same way: between matched detections. Their
index-by-index largest difference, which pairs row k of A with row k of B whether or not they are
the same detection, once stood as the divergence's extent ("23 ops beyond tolerance, up to
0.359", at the NMS stack, where matched boxes moved by 3.46e-05); it is now said only as such.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import build_fixture, run_cli
from tracer.report.headline import build_headline
from tracer.report.numbers import fmt

ENV = {"TF_ENABLE_ONEDNN_OPTS": "0", "CUDA_VISIBLE_DEVICES": "-1"}
NMS = "Postprocessor/BatchMultiClassNonMaxSuppression/map/"
# per control flow: the ops after NMS that hold the detection lists and are beyond tolerance index by index
LISTS = {
    "cf2": [f"{NMS}TensorArrayV2Stack/TensorListStack", f"{NMS}TensorArrayV2Stack_1/TensorListStack", "cond",
            "cond/Identity", "detection_boxes", "detection_scores"],
    "cf1": [f"{NMS}TensorArrayStack/TensorArrayGatherV3", f"{NMS}TensorArrayStack_1/TensorArrayGatherV3",
            "cond/clip_by_value/Minimum/Switch", "cond/clip_by_value/Minimum", "cond/clip_by_value", "cond/Merge",
            "detection_boxes", "detection_scores"],
}


@pytest.fixture(scope="module")
def detector(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fixture("nms_fp16_detector.py", tmp_path_factory.mktemp("nms_fp16") / "models")


def _compare(models: Path, flow: str, out: Path) -> tuple[Any, dict[str, Any]]:
    proc = run_cli("compare", str(models / flow / "savedmodel"), str(models / flow / "savedmodel_fp16"), "--inputs",
                   str(models / "images.npz"), "--onednn", "off", "--isolate", "0", "--out", str(out), env=ENV)
    assert proc.returncode == 1, proc.stderr
    return proc, json.loads((out / "report.json").read_text(encoding="utf-8"))


def _flat(text: str) -> str:
    return " ".join(text.replace("\\", "").split())


@pytest.mark.slow
@pytest.mark.parametrize("flow", ["cf2", "cf1"])
def test_the_inside_line_measures_the_nms_lists_between_matched_detections(detector: Path, tmp_path: Path,
                                                                          flow: str) -> None:
    proc, report = _compare(detector, flow, tmp_path / "r")
    [group] = report["detections"]
    total = group["total"]
    assert (total["a"], total["matched"], total["appeared"], total["disappeared"]) == (80, 80, 0, 0)
    inside = report["intermediates"]
    assert (inside["from"], inside["max_abs_at"]) == ("heads/einsum/Einsum", "heads/einsum/Einsum")
    assert inside["max_abs"] == report["nodes"]["heads/einsum/Einsum"]["max_abs"] < 1e-3
    lists = inside["detection_lists"]
    assert lists["ops"] == LISTS[flow] and lists["count"] == len(LISTS[flow]) and lists["not_matched"] == []
    stack, scores_stack = LISTS[flow][0], LISTS[flow][1]
    # index by index, the boxes' stack reads as a box off by its size; between matched detections it
    # moves as the matched outputs do: the scores by what the outputs' matching measured
    assert lists["index_max_abs_at"] == stack and lists["index_max_abs"] > 0.3
    assert lists["index_max_abs"] == report["nodes"][stack]["max_abs"]
    assert lists["index_max_abs"] == report["outputs"]["detection_boxes"]["max_abs"]
    assert (lists["matched_max_abs_at"], lists["matched_max_abs"]) == (scores_stack, total["max_score_diff"])
    assert lists["matched_within_tolerance"] is False
    expected = (
        f"Inside, the numbers differ beyond tolerance from `heads/einsum/Einsum` (Einsum) on "
        f"({inside['ops_beyond_tolerance']} ops beyond tolerance, up to {fmt(inside['max_abs'])}; "
        f"{len(LISTS[flow])} of them hold lists of detections, which differ by up to "
        f"{fmt(total['max_score_diff'])} between matched detections (at `{scores_stack}`, beyond tolerance); "
        f"read index by index, which pairs row k of A with row k of B whether or not they are the same "
        f"detection, `{stack}` differs by up to {fmt(lists['index_max_abs'])}).")
    assert report["headline"][1] == {"key": "inside", "text": expected}
    assert f"up to {fmt(lists['index_max_abs'])})" not in expected.split(";")[0]
    # every renderer says it as report.json does
    md = _flat((tmp_path / "r" / "report.md").read_text(encoding="utf-8"))
    html = _flat((tmp_path / "r" / "report.html").read_text(encoding="utf-8").replace("<code>", "`")
                 .replace("</code>", "`"))
    assert _flat(expected) in _flat(proc.stdout) and _flat(expected) in md
    assert _flat(expected).replace("`", "") in html.replace("`", "")


def _report(inside: dict[str, Any], verdict_outputs: str = "diverged") -> dict[str, Any]:
    return {"intermediates": inside, "verdict_outputs": verdict_outputs, "verdict_decided_by": "outputs"}


def test_a_report_without_detection_lists_reads_as_before_and_lists_alone_give_no_magnitude() -> None:
    before = {"from": "x", "from_op": "MatMul", "ops_beyond_tolerance": 3, "max_abs": 0.359, "max_abs_at": "y"}
    [line] = build_headline(_report(before))
    assert line["text"] == ("Inside, the numbers differ beyond tolerance from `x` (MatMul) on (3 ops beyond tolerance, "
                            "up to 0.359).")
    only_lists = {**before, "max_abs": None, "max_abs_at": None, "ops_beyond_tolerance": 2,
                  "detection_lists": {"ops": ["stack", "boxes"], "count": 2, "index_max_abs": 0.359,
                                      "index_max_abs_at": "stack", "matched_max_abs": 2e-7,
                                      "matched_max_abs_at": "stack", "matched_within_tolerance": True,
                                      "not_matched": []}}
    [line] = build_headline(_report(only_lists, "within_tolerance"))
    assert line["text"] == (
        "Inside, the numbers differ beyond tolerance from `x` (MatMul) on (2 ops beyond tolerance; all of them hold "
        "lists of detections, which differ by up to 2e-07 between matched detections (at `stack`, within "
        "tolerance); read index by index, which pairs row k of A with row k of B whether or not they are the same "
        "detection, `stack` differs by up to 0.359): the outputs decide the verdict (--intermediates-decide lets "
        "the intermediates decide too).")
