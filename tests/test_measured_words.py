"""Words in a report that must say no more than was measured.

Each report dict below holds what tftrace measured on a model a user exported (the figures are
those of the reproductions: a dense SavedModel and a batch-normed one at batch 1 vs 8, a detector
against its float16 export); the tests hold the sentence built from it.
"""

from __future__ import annotations

from typing import Any

from tracer.causes import explain_comparison
from tracer.report.headline import build_headline

SIDE = {"device": "cpu", "knobs": {}}


def _batch_report(first: dict[str, Any], beyond: dict[str, Any] | None, verdict: str) -> dict[str, Any]:
    origins = [first] + ([beyond] if beyond and beyond is not first else [])
    return {"verdict": verdict, "sides": {"a": {**SIDE, "batch_size": 1}, "b": {**SIDE, "batch_size": 8}},
            "origins": origins, "first_divergence": first, "first_divergence_beyond_tolerance": beyond}


def test_a_share_never_says_beyond_tolerance_when_nothing_was() -> None:
    """Batch 1 vs 8 of a dense SavedModel: `fc/MatMul` differs by 1.86e-09, within tolerance;
    report.json's first_divergence_beyond_tolerance is null, and the share once said "the first
    divergence beyond tolerance" all the same."""
    first = {"node": "fc/MatMul", "op": "MatMul", "max_abs": 1.86e-09, "isolation": {"verdict": "own_error"}}
    why = explain_comparison(_batch_report(first, None, "within_tolerance"))["why"][0]
    assert "[up to 1.86e-09 the first divergence (bitwise; nothing differs beyond tolerance), `fc/MatMul`]" in why
    assert "beyond tolerance," not in why


def test_a_share_names_the_first_divergence_beyond_tolerance_where_there_is_one() -> None:
    first = {"node": "fc/MatMul", "op": "MatMul", "max_abs": 2e-06, "isolation": {"verdict": "own_error"}}
    why = explain_comparison(_batch_report(first, first, "diverged"))["why"][0]
    assert "[up to 2e-06 the first divergence beyond tolerance, `fc/MatMul`]" in why


def test_the_own_kernel_sentence_names_the_op_isolated_as_its_own_error() -> None:
    """Batch 1 vs 8 of a batch-normed model: `fc1/MatMul` is the first divergence and its own
    error; the first beyond tolerance, the batch norm after it, only inherits it. The sentence
    once said "the origin op's own kernel differs" beside the batch norm's name."""
    first = {"node": "fc1/MatMul", "op": "MatMul", "max_abs": 1.19e-06, "isolation": {"verdict": "own_error"}}
    beyond = {"node": "fc1/BatchNorm/FusedBatchNormV3", "op": "FusedBatchNormV3", "max_abs": 1.45e-06,
              "isolation": {"verdict": "inherited"}}
    why = explain_comparison(_batch_report(first, beyond, "within_tolerance"))["why"][0]
    assert why.endswith(
        "[up to 1.45e-06 the first divergence beyond tolerance, `fc1/BatchNorm/FusedBatchNormV3`]: the sides run "
        "batch 1 vs 8; the difference starts at `fc1/MatMul` (MatMul), whose own kernel differs given identical "
        "inputs; `fc1/BatchNorm/FusedBatchNormV3` (FusedBatchNormV3), the first beyond tolerance, only inherits it.")
    assert "the origin op" not in why


def test_no_own_kernel_is_claimed_without_an_own_error() -> None:
    first = {"node": "fc1/MatMul", "op": "MatMul", "max_abs": 1.19e-06, "isolation": {"verdict": "inherited"}}
    why = explain_comparison(_batch_report(first, first, "diverged"))["why"][0]
    assert why.endswith("the sides run batch 1 vs 8.")


KEYS = {"boxes": "detection_boxes", "scores": "detection_scores", "classes": "detection_classes",
        "count": "num_detections"}


def _output(max_abs: float) -> dict[str, Any]:
    return {"identical": max_abs == 0, "within_tolerance": max_abs == 0, "max_abs": max_abs,
            "compared_as": "plain", "verdict": "diverged"}  # a compared group's outputs carry its verdict


def _detector(extra: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """A detector against its float16 export: every detection matched, boxes within 3.46e-05, while
    row by row `detection_boxes` differs by 0.359 (two detections traded rows)."""
    outputs = {"detection_boxes": _output(0.359), "detection_classes": _output(0.0),
               "detection_scores": _output(0.000125), "num_detections": _output(0.0), **(extra or {})}
    group = {"keys": KEYS, "compared": True, "verdict": "diverged", "iou_threshold": 0.5,
             "total": {"a": 80, "b": 80, "matched": 80, "appeared": 0, "disappeared": 0, "changed_class": 0,
                       "matched_beyond_tolerance": 80, "max_score_diff": 0.000125, "min_iou": 0.9991,
                       "max_box_diff": 3.46e-05}}
    return {"verdict": "diverged", "verdict_outputs": "diverged", "outputs": outputs, "detections": [group]}


def _outputs_line(report: dict[str, Any]) -> str:
    return next(line["text"] for line in build_headline(report) if line["key"] == "outputs")


def test_a_detectors_headline_leads_with_what_the_matching_measured() -> None:
    line = _outputs_line(_detector())
    assert line == (
        "Detections (`detection_boxes`, `detection_scores`, `detection_classes`, `num_detections`), matched by class "
        "and IoU, differ beyond tolerance in the plain runs: 80 of 80 matched (B has 80), 0 appeared, 0 disappeared, "
        "0 changed class; matched detections' scores within 0.000125, box coordinates within 3.46e-05 (80 beyond "
        "tolerance). Read index by index, which pairs row k of A with row k of B whether or not they are the same "
        "detection, `detection_boxes` differs by up to 0.359.")
    assert "The largest difference is 0.359" not in line and "4 of 4" not in line


def test_outputs_beside_the_detections_are_judged_index_by_index() -> None:
    line = _outputs_line(_detector({"features": {**_output(0.02), "verdict": "diverged"}}))
    assert line.split(". Read index by index")[0].endswith(
        "(80 beyond tolerance). 1 of 1 other output differs beyond tolerance. The largest difference is 0.02 on "
        "`features` (the plain runs, as production computes them)")


def test_outputs_without_detections_keep_their_headline() -> None:
    report = {"verdict": "diverged", "outputs": {"y": _output(0.5), "z": {**_output(0.0), "verdict": "identical"}}}
    assert _outputs_line(report) == ("1 of 2 outputs differ beyond tolerance. The largest difference is 0.5 on `y` "
                                     "(the plain runs, as production computes them).")


def test_an_output_one_side_lost_to_nan_is_not_said_to_differ_by_zero() -> None:
    """tf_slim's resnet_v1_50 checkpoint after 2 steps against its inference export: the export's
    barely-moved moving averages overflow it, and every probability B returns is NaN. No difference
    measures a NaN, so the largest difference read 0, and the headline once said only "The largest
    difference is 0 on `probs`" under a diverged verdict."""
    probs = {**_output(0.0), "identical": False, "nan_mismatch": 40, "inf_mismatch": 0}
    assert _outputs_line({"verdict": "diverged", "outputs": {"probs": probs}}) == (
        "1 of 1 output differs beyond tolerance. In `probs`, 40 elements are NaN or ±inf on one side and not the same "
        "on the other; where both sides are finite, the largest difference is 0 on `probs` (the plain runs, as "
        "production computes them).")


def _measured_twice(moved_a: float = 0.0) -> dict:
    side = {"max_abs": 0.0, "tensors_that_moved": 0, "outputs_max_abs": {"scores": 0.0}, "repeats_itself": True,
            "runs": 2}
    a = {**side, "max_abs": moved_a, "tensors_that_moved": int(moved_a > 0), "repeats_itself": moved_a == 0}
    return {"a": a, "b": dict(side), "repeats": 2, "processes": 2, "seconds": 16.3}


def _replayed(moved: list[str] | None, noise: float | None) -> dict:
    return {"block1/conv/Conv2D": {"status": "diverged", "isolation": {
        "verdict": "nondeterministic", "replay_moved": moved, "noise_max_abs": noise}}}


def test_repeats_that_agreed_are_not_said_to_repeat_themselves_plainly_when_a_replay_moved() -> None:
    """Run s on the H200: each side's two runs agreed bit for bit, and B's replay of the first
    divergence, in a third process, differed from B's capture by 7.65e-4. The headline said only
    "A and B each repeat themselves bit for bit"; the replay is a measurement of that run too."""
    report = {"noise": _measured_twice(), "nodes": _replayed(["b"], 0.0007653236389160156)}
    line = build_headline(report)[0]
    assert line == {"key": "repeatable", "text": (
        "Run-to-run noise measured: A and B each repeat themselves bit for bit over 2 runs (measured with 2 more "
        "fresh processes, 16.3 s); but B's replay of `block1/conv/Conv2D` in another process differed from B's "
        "capture by up to 0.000765: B does not always repeat itself from one process to the next, and more runs "
        "(`--repeat K`) measure how far.")}
    # a replay that moved nothing, or moved a side already said to move, adds nothing
    assert build_headline({"noise": _measured_twice(), "nodes": _replayed(None, 0.0)})[0]["text"].endswith(
        "over 2 runs (measured with 2 more fresh processes, 16.3 s).")
    moving = build_headline({"noise": _measured_twice(moved_a=1e-6), "nodes": _replayed(["a"], 1e-6)})[0]["text"]
    assert "replay" not in moving and moving.startswith("Side A changes from run to run: A's intermediates by up to")
    # B said to repeat itself beside a moving A: qualified by B's replay
    both = build_headline({"noise": _measured_twice(moved_a=1e-6), "nodes": _replayed(["b"], 2e-4)})[0]["text"]
    assert "B repeats itself bit for bit; but B's replay of `block1/conv/Conv2D` in another process differed" in both


def _run_more(noise: dict, moved_b: float = 0.0) -> dict:
    """``noise`` after judging ran B twice more (judging._repeats_that_missed): 4 runs of B."""
    because = ("its 2 runs repeated `block1/conv/Conv2D` bit for bit, but its replay of it in one more process "
               "differed from its capture by up to 0.000765")
    b = {**noise["b"], "runs": 4, "more_runs": {"added": 2, "because": because}, "max_abs": moved_b,
         "tensors_that_moved": int(moved_b > 0), "repeats_itself": moved_b == 0,
         "outputs_max_abs": {"scores": moved_b}}
    return {**noise, "b": b, "repeats": 4, "processes": 4}


def test_the_further_runs_a_replay_asked_for_are_said_with_what_they_showed() -> None:
    """Where B's runs agreed and its replay did not, judging runs B twice more: the headline says
    each side's count of runs, why B ran more, and what those runs showed."""
    report = {"noise": _run_more(_measured_twice()), "nodes": _replayed(["b"], 0.0007653236389160156)}
    assert build_headline(report)[0] == {"key": "repeatable", "text": (
        "Run-to-run noise measured: A and B each repeat themselves bit for bit (A over 2 runs, B over 4 runs) "
        "(measured with 4 more fresh processes, 16.3 s); B's replay of `block1/conv/Conv2D` in another process "
        "differed from B's capture by up to 0.000765, so B ran 2 more times, which repeated it bit for bit too: "
        "alone in a fresh process the op computed other numbers, while in the whole model it did not change over 4 "
        "runs; comparing again with `--autotune off` (or `--determinism`) on both sides shows whether that is what "
        "differs between A and B.")}
    moved = build_headline({"noise": _run_more(_measured_twice(), moved_b=2e-4), "nodes": _replayed(["b"], 7.65e-4)})
    assert moved[0]["text"].startswith(
        "Side B changes from run to run: A repeats itself bit for bit; B by up to 0.0002 (on `scores`) (B ran 2 more "
        "times because its 2 runs repeated `block1/conv/Conv2D` bit for bit, but its replay of it in one more process "
        "differed from its capture by up to 0.000765); "), moved[0]["text"]
