"""A detector's outputs compared as detections (issue 25, item 2): matched between the sides per
image by class and IoU, on exports made the way their users make them — a TF1 Object Detection
API export and the one of the checkpoint a step later (one detection changes class), the same
weights exported with a higher score threshold (detections disappear), the sample detector, and a
TF2 detector whose outputs are named with ``--detections``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import REPO, assert_user_error, run_cli
from tracer.comparison.detections import (Detections, compare_detections, match_image, parse_spec, recognise,
                                          DetectionSpec)
from tracer.diagnosis.answers import build_answers
from tracer.errors import TftraceError

ENV = {"TF_ENABLE_ONEDNN_OPTS": "0", "CUDA_VISIBLE_DEVICES": "-1"}
OD_KEYS = ["detection_boxes", "detection_scores", "detection_multiclass_scores", "detection_classes",
           "num_detections", "raw_detection_boxes", "raw_detection_scores"]


# ---- matching, on detections written out by hand -------------------------------------------------


def _dets(boxes: list[list[float]], scores: list[float], classes: list[int]) -> Detections:
    return Detections(np.arange(len(scores)), np.array(boxes, float), np.array(scores, float), np.array(classes))


def test_two_detections_that_swap_rows_are_matched_and_a_class_change_is_one_changed_class():
    a = _dets([[0, 0, 1, 1], [2, 2, 3, 3], [5, 5, 6, 6]], [0.9, 0.8, 0.7], [1, 2, 1])
    b = _dets([[2, 2, 3, 3], [0, 0, 1, 1.05], [5, 5, 6, 6]], [0.81, 0.9, 0.7], [2, 1, 3])
    match, iou = match_image(a, b, "yxyx", 0.5)
    assert match.matched == [(0, 1), (1, 0)]
    assert match.changed_class == [(2, 2)]
    assert match.appeared == [] and match.disappeared == []
    assert iou[0, 1] == pytest.approx(1 / 1.05)


def test_a_box_that_moved_past_the_iou_threshold_disappeared_and_another_appeared():
    a = _dets([[0, 0, 1, 1]], [0.9], [1])
    b = _dets([[0, 0.6, 1, 1.6]], [0.9], [1])  # IoU 0.4 / 1.6 = 0.25
    match, _ = match_image(a, b, "yxyx", 0.5)
    assert (match.matched, match.disappeared, match.appeared) == ([], [0], [0])


def test_xywh_boxes_are_read_as_corners_before_their_iou():
    a = _dets([[0, 0, 2, 2]], [0.9], [0])  # x, y, w, h: the square [0, 2] x [0, 2]
    b = _dets([[1, 0, 2, 2]], [0.9], [0])  # shifted by half: IoU 2/6
    _, iou = match_image(a, b, "xywh", 0.5)
    assert iou[0, 0] == pytest.approx(2 / 6)
    _, iou = match_image(a, b, "xyxy", 0.5)  # read as corners: [0,0,2,2] vs [1,0,2,2], IoU 1/2
    assert iou[0, 0] == pytest.approx(0.5)


def test_a_box_clipped_to_no_area_is_the_same_detection_on_both_sides():
    a = _dets([[0, 0.13, 0, 0.26]], [0.69], [3])
    match, iou = match_image(a, a, "yxyx", 0.5)
    assert match.matched == [(0, 0)] and iou[0, 0] == 1.0


def test_padded_rows_are_not_detections_and_tolerances_judge_matched_ones():
    spec = DetectionSpec({"boxes": "b", "scores": "s", "classes": "c", "count": "n"}, "option")
    boxes = np.zeros((1, 4, 4), np.float32)
    boxes[0, :2] = [[0, 0, 1, 1], [2, 2, 3, 3]]
    a = {"boxes": boxes, "scores": np.array([[0.9, 0.8, 0, 0]], np.float32),
         "classes": np.array([[1, 2, 0, 0]], np.float32), "count": np.array([2], np.float32)}
    b = {**a, "scores": np.array([[0.9, 0.8 + 1e-4, 0, 0]], np.float32)}
    loose = compare_detections(spec, a, b, lambda key: (1e-3, 0.0))
    assert loose["total"]["a"] == loose["total"]["b"] == 2 and loose["total"]["matched"] == 2
    assert loose["verdict"] == "within_tolerance" and loose["total"]["max_score_diff"] == pytest.approx(1e-4, rel=1e-3)
    tight = compare_detections(spec, a, b, lambda key: (1e-6, 1e-5))
    assert tight["verdict"] == "diverged" and tight["total"]["matched_beyond_tolerance"] == 1
    assert compare_detections(spec, a, a, lambda key: (0.0, 0.0))["verdict"] == "identical"


def test_recognised_by_the_object_detection_api_and_kerascv_names_and_not_by_boxes_and_scores_alone():
    od = recognise(OD_KEYS)
    assert [(s.convention, dict(s.keys), s.box_format, s.per_detection) for s in od] == [
        ("object_detection_api", {"boxes": "detection_boxes", "scores": "detection_scores",
                                  "classes": "detection_classes", "count": "num_detections"}, "yxyx",
         ("detection_multiclass_scores",))]
    kcv = recognise(["boxes", "confidence", "classes", "num_detections"])
    assert [(s.convention, s.keys["scores"], s.box_format) for s in kcv] == [("keras_cv", "confidence", "xyxy")]
    assert "does not record" in kcv[0].box_format_source
    assert recognise(["scores", "boxes"]) == []  # the sample detector's pre-NMS outputs are tensors, not lists


def test_the_detections_option_is_checked_before_anything_runs_and_against_the_signature():
    spec = parse_spec("boxes=boxes,scores=scores,classes=classes,count=valid,format=center_xywh,iou=0.7")
    assert spec == {"keys": {"boxes": "boxes", "scores": "scores", "classes": "classes", "count": "valid"},
                    "format": "center_xywh", "iou": 0.7, "format_given": True}
    for bad, words in (("boxes=b", "needs scores=KEY"), ("boxes=b,scores=s,format=ltrb", "is not a box format"),
                       ("boxes=b,scores=s,iou=2", "is not an IoU threshold"), ("boxes=b,scores=s,labels=l", "does not know labels"),
                       ("boxes", "is not NAME=VALUE")):
        with pytest.raises(TftraceError, match=words):
            parse_spec(bad)
    with pytest.raises(TftraceError, match="'valid', which A's signature does not output"):
        recognise(["boxes", "scores"], parse_spec("boxes=boxes,scores=scores,count=valid"))


def test_detections_with_hostile_strings_and_wrong_types_render_escaped_everywhere(tmp_path: Path):
    """A received report.json: a key holding markup, a box that is not a list, counts that are strings."""
    from tracer.report.render import render_report
    from tracer.report.terminal import print_comparison
    from rich.console import Console

    report = json.loads((REPO / "tests" / "fixtures" / "report_detector_planted.json").read_text(encoding="utf-8"))
    evil = "<script>alert(1)</script>"
    spec = DetectionSpec({"boxes": evil, "scores": "s", "classes": "c"}, "option")
    a = {"boxes": np.array([[[0, 0, 1, 1]]], np.float32), "scores": np.array([[0.9]], np.float32),
         "classes": np.array([[1]], np.float32)}
    b = {**a, "classes": np.array([[2]], np.float32)}
    good = compare_detections(spec, a, b, lambda key: (0.0, 0.0))
    assert good["total"]["changed_class"] == 1
    broken = {**good, "keys": {"boxes": evil}, "total": {"matched": "many"}, "images": [None, {"image": evil}],
              "changes": [{"kind": "appeared", "b": {"box": evil, "class": evil}}, "x"], "box_format": 3}
    report["detections"] = [good, broken, "not a group"]
    result = render_report(report, tmp_path)
    html = result["html"].read_text(encoding="utf-8")
    md = result["md"].read_text(encoding="utf-8") if "md" in result else (tmp_path / "report.md").read_text()
    assert evil not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "1 changed class" in html and "image 0: class 1 → 2" in html
    assert evil not in md and "image 0: class 1 → 2" in md
    console = Console(record=True, width=200, file=open(os.devnull, "w"))
    print_comparison(console, report)
    text = " ".join(console.export_text().split())
    assert "Detections: <script>alert(1)</script>" in text and "0 of 1 matched (B has 1), 0 appeared" in text


# ---- the tolerance advice: per output, in its units; none for classes and counts -------------------


def _experiment(**extra: Any) -> dict[str, Any]:
    return {"name": "ckpt_vs_savedmodel_batch_8", "factor": "export", "verdict": "diverged",
            "max_abs_output_diff": 2.0, "first_divergence": None, "a": {"describe": "checkpoint"},
            "b": {"describe": "SavedModel"}, "latency_ms": None, "cost_pct": None, "remedy": None, "skipped": None,
            "settings": None, "rewrite_count": 1, "discrete_changes": {}, **extra}


DETECTOR_OUTPUTS = {"scores": 0.0035, "boxes": 0.000136, "detection_boxes": 0.624, "detection_scores": 0.31,
                    "detection_classes": 2.0, "num_detections": 0.0}


def _group(**total: Any) -> dict[str, Any]:
    counts = {"a": 80, "b": 80, "matched": 80, "appeared": 0, "disappeared": 0, "changed_class": 0,
              "max_score_diff": 0.00325, "max_box_diff": 0.000107, "min_iou": 0.999, **total}
    return {"keys": {"boxes": "detection_boxes", "scores": "detection_scores", "classes": "detection_classes",
                     "count": "num_detections"}, "compared": True, "verdict": "diverged", "total": counts,
            "per_detection_max_abs": {}, "discrete": ["detection_classes", "num_detections"]}


def test_a_reordered_detector_gets_a_tolerance_per_output_in_its_units_and_none_for_classes_or_counts():
    """Two detections swapped rows: index by index detection_boxes moved 0.624 and detection_classes
    2; as detections every one matched, its score within 0.00325 and its box within 0.000107."""
    answers = build_answers([_experiment(outputs=DETECTOR_OUTPUTS, detections=[_group()])],
                            {"atol": 1e-6, "rtol": 1e-5})
    text = answers["prevent"][0]
    assert ("Or accept it: tolerances of 0.0035 on `scores`, 0.000136 on `boxes`, 0.00325 on the matched "
            "detections' scores (`detection_scores`), 0.000107 on the matched detections' box coordinates "
            "(`detection_boxes`) cover what was measured, each in its output's units; no tolerance for "
            "`detection_classes`, `num_detections`: they must be equal.") in text
    assert "tolerance above" not in text and "0.624" not in text and " 2 " not in text


def test_a_detection_that_changed_class_gets_no_tolerance_but_its_count():
    answers = build_answers([_experiment(outputs=DETECTOR_OUTPUTS,
                                         detections=[_group(matched=79, changed_class=1)])],
                            {"atol": 1e-6, "rtol": 1e-5})
    text = answers["prevent"][0]
    assert "Or accept it" not in text
    assert ("A tolerance is no remedy here: discrete outputs changed (detections (`detection_boxes`…): "
            "1 changed class, 0 appeared, 0 disappeared of 80).") in text


def test_float_classes_and_counts_of_an_uncompared_group_are_discrete_and_a_compared_group_is_not_row_by_row():
    from tracer.diagnosis.outcomes import discrete_changes
    outputs = {"detection_classes": {"a_tensor": "detection_classes:0", "identical": False, "mismatch_count": 3},
               "detection_boxes": {"a_tensor": "detection_boxes:0", "identical": False, "mismatch_count": 12}}
    nodes = {"detection_classes": {"tensor": "detection_classes:0", "dtype": "float32"}}
    group = {"keys": {"boxes": "detection_boxes", "scores": "detection_scores", "classes": "detection_classes"},
             "compared": False, "not_compared": "B has 4 images, A 8"}
    assert discrete_changes({"outputs": outputs, "nodes": nodes, "detections": [group]}) == {
        "detection_classes": {"changed": 3, "dtype": "float32"}}
    assert discrete_changes({"outputs": outputs, "nodes": nodes, "detections": [{**group, "compared": True}]}) == {}


# ---- real exports ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def od_api(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/fixtures/od_api_export.py: an Object Detection API style export, the export a step
    later (one class bias moved), the export with a higher score threshold, images, facts."""
    out = tmp_path_factory.mktemp("od_api") / "models"
    subprocess.run([sys.executable, str(REPO / "tests" / "fixtures" / "od_api_export.py"), str(out)], cwd=REPO,
                   check=True, capture_output=True, timeout=300, env={**os.environ, **ENV})
    return out


def _compare(a: Path, b: Path, out: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict[str, Any]]:
    proc = run_cli("compare", str(a), str(b), "--out", str(out), "--isolate", "0", *extra, env=ENV)
    assert proc.returncode in (0, 1), proc.stderr
    return proc, json.loads((out / "report.json").read_text())


@pytest.mark.slow
def test_an_od_api_export_a_step_later_changes_the_class_of_exactly_one_detection(od_api: Path, tmp_path: Path):
    facts = json.loads((od_api / "facts.json").read_text())
    kept = sum(facts["kept"])
    proc, report = _compare(od_api / "exported" / "saved_model", od_api / "step_after" / "saved_model",
                            tmp_path / "r", "--inputs", str(od_api / "images.npz"))
    assert proc.returncode == 1 and report["verdict_outputs"] == "diverged"
    assert report["outputs"]["detection_classes"]["max_abs"] == facts["classes_max_abs"] == 1.0
    [group] = report["detections"]
    assert group["convention"] == "object_detection_api" and group["box_format"] == "yxyx"
    assert group["per_detection"] == ["detection_multiclass_scores"] and group["iou_threshold"] == 0.5
    total = group["total"]
    assert (total["a"], total["b"], total["matched"], total["changed_class"], total["appeared"],
            total["disappeared"]) == (kept, kept, kept - 1, 1, 0, 0)
    assert total["max_score_diff"] == 0.0 and total["max_box_diff"] == 0.0 and total["min_iou"] == 1.0
    flip = facts["flip"]
    assert facts["flip_seen"] == [[flip["image"], flip["row"]]]
    [change] = group["changes"]
    assert (change["image"], change["kind"], change["a"]["index"], change["a"]["class"], change["b"]["class"],
            change["iou"]) == (flip["image"], "changed_class", flip["row"], flip["from_class"], flip["to_class"], 1.0)
    per_image = {row["image"]: row for row in group["images"]}
    assert per_image[flip["image"]]["changed_class"] == 1
    assert sum(row["changed_class"] for row in group["images"]) == 1
    assert [row["a"] for row in group["images"]] == facts["kept"]
    assert group["per_detection_max_abs"]["detection_multiclass_scores"] > 0
    assert group["verdict"] == "diverged"
    # inside, the op holding the class lists is measured between matched detections (0: every matched one kept
    # its class) and stays beyond tolerance by the rule that judges the outputs: a detection changed class
    node = report["nodes"]["detection_classes"]
    assert (node["status"], node["max_abs"], node["index_by_index"]["max_abs"]) == ("propagated", 0.0, 1.0)
    assert (node["detection_list"]["changes"], node["detection_list"]["matched_within_tolerance"]) == (1, True)
    assert report["intermediates"]["detection_lists"]["changes"] == 1
    # every summary says it in the same words
    headline = (f"{kept - 1} of {kept} matched (B has {kept}), 0 appeared, 0 disappeared, 1 changed class")
    assert headline in proc.stderr.replace("\n", " ") or headline in proc.stdout.replace("\n", " ")
    change_line = f"image {flip['image']}: class {flip['from_class']} → {flip['to_class']}"
    assert change_line in (tmp_path / "r" / "report.md").read_text()
    html = (tmp_path / "r" / "report.html").read_text()
    assert headline in html and change_line in html


@pytest.mark.slow
def test_an_od_api_export_with_a_higher_score_threshold_loses_exactly_the_detections_below_it(od_api: Path,
                                                                                             tmp_path: Path):
    facts = json.loads((od_api / "facts.json").read_text())
    kept, below = sum(facts["kept"]), facts["threshold"]["below_b"]
    _, report = _compare(od_api / "exported" / "saved_model", od_api / "threshold" / "saved_model", tmp_path / "r",
                         "--inputs", str(od_api / "images.npz"))
    total = report["detections"][0]["total"]
    assert below > 0 and sum(facts["threshold"]["kept_b"]) == kept - below
    assert (total["a"], total["b"], total["matched"], total["disappeared"], total["appeared"],
            total["changed_class"]) == (kept, kept - below, kept - below, below, 0, 0)
    assert total["max_score_diff"] == 0.0 and total["matched_beyond_tolerance"] == 0
    assert {c["kind"] for c in report["detections"][0]["changes"]} == {"disappeared"}
    assert all(c["a"]["score"] < facts["threshold"]["b"] for c in report["detections"][0]["changes"])


@pytest.mark.slow
def test_the_sample_detector_with_a_planted_epsilon_keeps_every_detection_and_moves_their_scores(models, tmp_path):
    _, report = _compare(models["detector_ckpt"], models["detector_planted"], tmp_path / "r")
    [group] = report["detections"]
    total = group["total"]
    assert (total["a"], total["b"], total["matched"], total["appeared"], total["disappeared"],
            total["changed_class"]) == (80, 80, 80, 0, 0, 0)
    # the matched scores move as much as detection_scores does row by row: no row changed its detection
    assert total["max_score_diff"] == pytest.approx(report["outputs"]["detection_scores"]["max_abs"], rel=1e-6)
    assert total["matched_beyond_tolerance"] == 80 and group["verdict"] == "diverged"
    assert 0.99 < total["min_iou"] < 1.0


@pytest.mark.slow
def test_a_tf2_detector_named_with_the_option_is_matched_and_a_wrong_key_is_refused(tmp_path):
    a, b = tmp_path / "det", tmp_path / "det_scaled"
    for path, scale in ((a, "1.0"), (b, "1.001")):
        subprocess.run([sys.executable, str(REPO / "tests" / "fixtures" / "nms_detector.py"), str(path), scale],
                       check=True, capture_output=True, timeout=300, env={**os.environ, **ENV})
    option = "boxes=boxes,scores=scores,classes=classes,count=valid,format=yxyx"
    _, report = _compare(a, b, tmp_path / "r", "--detections", option)
    [group] = report["detections"]
    assert group["convention"] == "option" and group["box_format_source"] == "given with --detections"
    total = group["total"]
    assert total["matched"] == total["a"] == total["b"] > 0 and total["changed_class"] == 0
    assert 0 < total["max_box_diff"] <= report["outputs"]["boxes"]["max_abs"]
    assert total["max_score_diff"] == 0.0  # the scale moves the boxes only
    proc = run_cli("compare", str(a), str(b), "--out", str(tmp_path / "bad"), "--detections",
                   "boxes=boxes,scores=confidence", env=ENV)
    assert_user_error(proc, "--detections names 'confidence', which A's signature does not output",
                      "boxes, classes, scores, valid")


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("keras_cv") is None,
                    reason="keras-cv is not installed (`make setup` installs it with the dev extra): the KerasCV "
                           "YOLOv8 export needs it and its imports (tensorflow-datasets, dm-tree, regex, ...)")
def test_a_kerascv_yolov8_export_with_a_higher_confidence_threshold_loses_exactly_the_detections_below_it(tmp_path):
    models = tmp_path / "kcv"
    subprocess.run([sys.executable, str(REPO / "tests" / "fixtures" / "kerascv_export.py"), str(models)], cwd=REPO,
                   check=True, capture_output=True, timeout=600, env={**os.environ, **ENV})
    facts = json.loads((models / "facts.json").read_text())
    counts = facts["yolo"]["num_detections"]
    below = sum(sum(1 for c in row[:n] if c < facts["yolo_strict"]["threshold"])
                for row, n in zip(facts["yolo"]["confidence"], counts))
    assert below > 0 and sum(facts["yolo_strict"]["num_detections"]) == sum(counts) - below
    _, report = _compare(models / "yolo", models / "yolo_strict", tmp_path / "r", "--inputs",
                         str(models / "images.npz"), "--detections",
                         "boxes=boxes,scores=confidence,classes=classes,count=num_detections,format=xywh")
    [group] = report["detections"]
    assert group["box_format"] == "xywh" and group["convention"] == "option"
    total = group["total"]
    assert (total["a"], total["b"], total["matched"], total["disappeared"], total["appeared"],
            total["changed_class"]) == (sum(counts), sum(counts) - below, sum(counts) - below, below, 0, 0)
    assert [row["a"] for row in group["images"]] == counts
    assert total["max_score_diff"] == 0.0 and total["min_iou"] == 1.0 and report["verdict_outputs"] == "diverged"


def test_outputs_that_are_not_shaped_as_detections_are_not_compared_saying_why():
    spec = DetectionSpec({"boxes": "b", "scores": "s", "count": "n"}, "option")
    a = {"boxes": np.zeros((2, 3, 4), np.float32), "scores": np.zeros((2, 3), np.float32),
         "count": np.array(2.0, np.float32)}
    entry = compare_detections(spec, a, a, lambda key: (0.0, 0.0))
    assert (entry["compared"], entry["verdict"], entry["not_compared"]) == (
        False, None, "A's 'n' has shape [], not [2]")
    b = {**a, "count": np.array([1, 1]), "scores": np.zeros((2, 4), np.float32)}
    entry = compare_detections(spec, {**a, "count": np.array([1, 1])}, b, lambda key: (0.0, 0.0))
    assert entry["not_compared"] == "B's 's' has shape [2, 4], not [2, 3]"
    entry = compare_detections(spec, {**a, "count": None}, a, lambda key: (0.0, 0.0))
    assert entry["not_compared"] == "no value for A's 'n'"


def test_detections_that_change_between_two_runs_of_one_side_as_much_as_between_sides_are_within_noise():
    """The H200's sample detector (2026-12-01): B's own two runs changed a detection's class (noise 1.0
    on detection_classes, 0.508 on detection_boxes) and A vs B came no closer than that; the detections
    diverge as detections, but a side does that to itself, so the outputs are within the noise. Where
    the arrays are beyond the noise (or no noise was measured) the detections decide."""
    from tracer.comparison.detection_groups import detections_net_of_noise

    group = {"keys": {"boxes": "detection_boxes", "scores": "detection_scores", "classes": "detection_classes",
                      "count": "num_detections"}, "per_detection_max_abs": {"detection_multiclass_scores": 0.1}}
    as_detections = {k: "diverged" for k in [*group["keys"].values(), "detection_multiclass_scores"]}
    noisy = {"detection_boxes": "within_noise", "detection_scores": "within_noise",
             "detection_classes": "within_noise", "num_detections": "identical"}
    assert set(detections_net_of_noise(as_detections, noisy, [group]).values()) == {"within_noise"}
    beyond = {**noisy, "detection_scores": "diverged"}  # one output further apart than any side from itself
    assert detections_net_of_noise(as_detections, beyond, [group]) == as_detections
    unmeasured = {k: "diverged" for k in noisy}  # no noise measured: the arrays say nothing of the runs
    assert detections_net_of_noise(as_detections, unmeasured, [group]) == as_detections
    quiet = {k: "within_tolerance" for k in noisy}  # nothing moved by itself: the detections decide
    assert detections_net_of_noise(as_detections, quiet, [group]) == as_detections
