"""Detection lists held against their run-to-run noise, their replays and their fetch-alone replays,
each measured as A's and B's lists are: between matched detections (tracer/comparison/list_runs.py).

On the H200 (2026-12-04, run n) the fp32 detector's side listed near-tied detections in another order
between two of its own processes (autotuned convolutions): read index by index that was noise of 0.402
on A and 0.551 on B, which every list's difference was held against and the headline gave as the sides'
noise, while the outputs matched as detections moved by 0. On the CPU nothing moves from run to run, so
the runs here are written out by hand: one image, two detections X (class 1) and Y (class 2) of nearly
equal score, and a row of padding. No TensorFlow.
"""

from __future__ import annotations

import io
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import numpy as np
from rich.console import Console

from tracer.comparison.align import ROLE_COMPARED, Alignment, CaptureView, NodeAlignment, TensorPair
from tracer.comparison.detection_lists import DetectionList, measure_detection_lists
from tracer.comparison.detections import recognise
from tracer.comparison.divergence import Tolerance, classify
from tracer.comparison.judge import judge
from tracer.comparison.list_runs import companions
from tracer.comparison.noise import Noise, side_noise
from tracer.opgraph import OpGraph
from tracer.report.headline import build_headline

F = np.float32
X_BOX, Y_BOX, PAD = [0.0, 0.0, 1.0, 1.0], [2.0, 2.0, 3.0, 3.0], [0.0, 0.0, 0.0, 0.0]
HEADS = np.arange(12, dtype=F).reshape(1, 3, 4) / F(8)
NOISE = F(2.0 ** -12)  # how far A's convolutions move between two of its processes

# the lists' ops and the output each names: a per-image NMS loop's stacks, the outputs' Identities
LISTS = {"boxes_list": ("detection_boxes", [1, 3, 4]), "scores_list": ("detection_scores", [1, 3]),
         "classes_list": ("detection_classes", [1, 3]), "count": ("num_detections", [1])}
GRAPH = OpGraph.from_json({
    "inputs": {"x": "x:0"}, "outputs": {output: f"{output}:0" for output, _shape in LISTS.values()},
    "nodes": [{"name": name, "op": op, "device": "", "scope": "", "attrs": {}, "inputs": [f"{i}:0" for i in inputs],
               "control_inputs": [], "outputs": [{"dtype": "float32", "shape": shape, "capturable": True,
                                                  "reason": ""}]}
              for name, op, inputs, shape in (
                  ("x", "Placeholder", [], [1, 4]), ("heads", "Einsum", ["x"], [1, 3, 4]),
                  *((name, "TensorListStack", ["heads"], shape) for name, (_o, shape) in LISTS.items()),
                  *((output, "Identity", [name], shape) for name, (output, shape) in LISTS.items()))]})
ALIGNMENT = Alignment({op: NodeAlignment(op, op, "name", ROLE_COMPARED, [TensorPair(f"{op}:0", f"{op}:0", "name", True)])
                       for op in GRAPH.topo_order()}, [])


def lists(first: tuple[list[float], float, int], second: tuple[list[float], float, int], heads: Any = HEADS
          ) -> dict[str, np.ndarray]:
    """Every tensor of one run (op -> value) whose NMS listed ``first`` then ``second`` (box, score, class)."""
    values = {"x": np.ones((1, 4), F), "heads": np.asarray(heads, F),
              "boxes_list": np.array([[first[0], second[0], PAD]], F),
              "scores_list": np.array([[first[1], second[1], 0.0]], F),
              "classes_list": np.array([[first[2], second[2], 0.0]], F), "count": np.array([2.0], F)}
    values.update({output: values[name] for name, (output, _shape) in LISTS.items()})
    return values


class Run:
    """One captured run, held in memory: what the noise, the lists and their alignment read of a Capture."""

    def __init__(self, values: dict[str, np.ndarray]) -> None:
        self.values = {f"{op}:0": v for op, v in values.items()}
        self.op_graph, self.tensor_layout = GRAPH, {}
        self.outputs = dict(GRAPH.outputs)
        # the plain runs (the signature's outputs alone) repeat themselves: as on the H200, only the
        # instrumented runs list the near-tied detections in another order
        self.plain = {key: values[key] for key in self.outputs}

    def has(self, tensor: str) -> bool:
        return tensor in self.values

    def tensor(self, tensor: str) -> np.ndarray:
        return self.values[tensor]

    def plain_output(self, key: str) -> np.ndarray | None:
        return self.plain.get(key)


X = (X_BOX, 0.625, 1)
Y_LOW, Y_HIGH = (Y_BOX, 0.6240234375, 2), (Y_BOX, 0.6259765625, 2)  # Y's score moved by 2**-9 between A's runs
A_1 = Run(lists(X, Y_LOW))
A_2 = Run(lists(Y_HIGH, X, HEADS + NOISE))  # A again: Y now scores higher, NMS lists it first
A_2.plain = A_1.plain
# B: A's first run, but X's box moved by 2**-6 (as a float16 head moves a box), and its convolutions by the noise
B_1 = Run({**lists(([0.0, 0.0, 1.015625, 1.0], 0.625, 1), Y_LOW, HEADS + NOISE)})
B_1.plain = A_1.plain | {"detection_boxes": B_1.values["detection_boxes:0"]}


def a_vs_b(a: Run = A_1) -> tuple[dict[str, Any], dict[str, DetectionList]]:
    """A's run ``a`` and B's first compared as compare does: every tensor index by index, the lists between
    the detections their outputs matched."""
    from tracer.metrics import compare_arrays  # noqa: PLC0415

    metrics = {t: compare_arrays(a.values[t], B_1.values[t], rtols=(1e-5,)) for t in a.values}
    groups = [{"keys": spec.keys, "compared": True} for spec in recognise(list(GRAPH.outputs))]
    found = measure_detection_lists(CaptureView(a), CaptureView(B_1), ALIGNMENT, Tolerance(), groups, {})
    return metrics, found


def test_a_list_that_only_comes_out_in_another_order_between_runs_is_no_noise() -> None:
    metrics, found = a_vs_b()
    assert sorted(found) == ["boxes_list:0", "classes_list:0", "detection_boxes:0", "detection_classes:0",
                             "detection_scores:0", "scores_list:0"]
    assert found["boxes_list:0"].matched.max_abs == 2.0 ** -6 and found["boxes_list:0"].changes == 0
    noise = Noise()
    side_a = side_noise("a", [A_1, A_2], ALIGNMENT, noise, {}, Tolerance(), found)
    side_b = side_noise("b", [B_1, B_1], ALIGNMENT, noise, {}, Tolerance(), found)
    # between the detections A's two runs matched: X did not move, Y's score by 2**-9; read index by index
    # (before), the boxes' rows read as a box off by 2.0 and the classes as 1.0 (1 and 2 swapped)
    assert noise.per_tensor == {"heads:0": 2.0 ** -12, "boxes_list:0": 0.0, "detection_boxes:0": 0.0,
                                "scores_list:0": 2.0 ** -9, "detection_scores:0": 2.0 ** -9,
                                "classes_list:0": 0.0, "detection_classes:0": 0.0}
    assert side_a == {"max_abs": 2.0 ** -9, "tensors_that_moved": 7, "repeats_itself": False,
                      "outputs_max_abs": {"detection_boxes": 0.0, "detection_scores": 0.0,
                                          "detection_classes": 0.0, "num_detections": 0.0}}
    assert side_b["repeats_itself"] is True and side_b["max_abs"] == 0.0
    [line] = build_headline({"noise": {"a": side_a, "b": side_b, "repeats": 2}})
    assert line == {"key": "noise", "text": "Side A changes from run to run: A's intermediates by up to 0.00195, its "
                                            "outputs not at all; B repeats itself bit for bit; A vs B not compared "
                                            "over the repeated runs."}
    # so X's box, 2**-6 off in B, is no longer within A's noise (it was, against the 2.0 of the re-ordering):
    # the boxes' stack is where the numbers part beyond tolerance, the convolutions being within their noise
    divergence = classify(GRAPH, ALIGNMENT, metrics, Tolerance(), noise.per_tensor, {}, lists=found)
    stack = divergence.nodes["boxes_list"]
    assert (stack.status, stack.within_noise, stack.metrics.max_abs) == ("origin", False, 2.0 ** -6)
    assert divergence.nodes["heads"].within_noise is True and divergence.nodes["heads"].status == "within_tolerance"
    assert divergence.first_beyond_tolerance.name == "boxes_list" and divergence.verdict == "diverged"
    assert divergence.nodes["detection_boxes"].status == "propagated"


def test_the_closest_a_and_b_come_over_every_pair_of_runs_is_between_matched_detections() -> None:
    """A's runs that list Y first, against B's that lists X first: in every pair the boxes' stack reads
    2.0 index by index (before), 2**-6 between matched detections (X's box)."""
    metrics, found = a_vs_b(A_2)
    assert metrics["boxes_list:0"].max_abs == 2.0 and found["boxes_list:0"].matched.max_abs == 2.0 ** -6
    a_3 = Run(lists(Y_HIGH, X, HEADS + 2 * NOISE))
    noise = Noise(per_tensor={"boxes_list:0": 2.0 ** -7}, runs={"a": [A_2, a_3], "b": [B_1]})
    noise.judge_pairs(ALIGNMENT, metrics, Tolerance(), found, {})
    assert noise.closest == {"boxes_list:0": 2.0 ** -6}


def test_a_list_whose_detections_changed_between_runs_moved_by_its_index_by_index_figure() -> None:
    """A detection that disappears between two runs of one side moves its lists by what no matching
    measures: the index-by-index figure stands for it (DetectionList.size)."""
    _metrics, found = a_vs_b()
    gone = lists(X, (PAD, 0.0, 0))
    gone["count"] = gone["num_detections"] = np.array([1.0], F)
    noise = Noise()
    side_noise("a", [A_1, Run(gone)], ALIGNMENT, noise, {}, Tolerance(), found)
    assert noise.per_tensor["boxes_list:0"] == 3.0 and noise.per_tensor["scores_list:0"] == 0.6240234375
    assert noise.per_tensor["count:0"] == 1.0


# ---- an origin that holds lists, replayed alone --------------------------------------------------------------

ROLES = {"boxes": "boxes_list:0", "scores": "scores_list:0", "classes": "classes_list:0", "count": "count:0"}


def test_the_lists_born_with_a_list_origin_are_replayed_with_it_and_a_row_keeping_one_alone() -> None:
    _metrics, found = a_vs_b()
    for tensor in ROLES.values():
        if tensor in found:
            assert companions(GRAPH, found[tensor], found) == ROLES
    # an Identity is fed A's rows in A's order on both sides: row k is one detection on both
    assert companions(GRAPH, found["detection_boxes:0"], found) is None


def _origin(inputs_identical: bool) -> Any:
    from tracer.comparison.isolation_plan import PlannedOrigin  # noqa: PLC0415

    roles = {role: {"id": i, "a_tensor": t, "b_tensor": t} for i, (role, t) in enumerate(ROLES.items())}
    return PlannedOrigin.from_json(
        {"id": 0, "node": "boxes_list", "a_tensor": "boxes_list:0", "b_tensor": "boxes_list:0", "a_op": "TensorListStack",
         "b_op": "TensorListStack", "inputs_identical": inputs_identical,
         "detections": {"output": "detection_boxes", "box_format": "yxyx", "iou_threshold": 0.5, "roles": roles}},
        "the index")


def _replays(values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {role: values[tensor.split(":")[0]] for role, tensor in ROLES.items()}


def test_replays_of_a_list_origin_that_list_the_same_detections_in_another_order_agree() -> None:
    """Fed A's inputs, B's NMS lists the near-tied X and Y the other way round: the same detections, bit
    for bit. Compared row k against row k (before) that was B's own error, "by up to 2"; as detections
    the replays agree, and the difference at the list, its inputs having differed, is inherited."""
    from conftest import Captured  # noqa: PLC0415

    a, b = lists(X, Y_LOW), lists(Y_LOW, X)
    roles = {role: (_replays(a)[role], _replays(b)[role]) for role in ROLES}
    captured = Captured({t: a[t.split(":")[0]] for t in ROLES.values()})
    result = judge(a["boxes_list"], b["boxes_list"], _origin(False), captured, None, roles)
    assert (result.verdict, result.max_abs, result.max_rel, result.noise_max_abs) == ("inherited", 0.0, 0.0, 0.0)
    assert result.detail == ("given A's inputs, B's kernel computes A's result bit for bit: the difference is "
                             "inherited (compared as detections: the same detections, bit for bit, listed in "
                             "another order)")
    # the same replays from a plan of an older release, or where the lists could not be fetched: index by index
    assert judge(a["boxes_list"], b["boxes_list"], _origin(False), captured).verdict == "own_error"


def test_replays_of_a_list_origin_that_lose_a_detection_differ_between_matched_detections() -> None:
    """B's NMS, fed A's inputs, drops Y (a score threshold its export raised): its own error, by what its
    matched detection moved (nothing) and the detection that disappeared, not by Y's row read against
    padding (0.624, index by index)."""
    from conftest import Captured  # noqa: PLC0415

    a, b = lists(X, Y_LOW), lists(X, (PAD, 0.0, 0))
    b["count"] = np.array([1.0], F)
    roles = {role: (_replays(a)[role], _replays(b)[role]) for role in ROLES}
    captured = Captured({t: a[t.split(":")[0]] for t in ROLES.values()})
    origin = _origin(True)
    result = judge(a["scores_list"], b["scores_list"], replace(origin, a_tensor="scores_list:0",
                                                                b_tensor="scores_list:0"), captured, None, roles)
    assert (result.verdict, result.max_abs, result.noise_max_abs) == ("own_error", 0.0, 0.0)
    assert result.detail == ("given identical inputs, B's while loop that filled its TensorList (replayed whole: a "
                             "session cannot fetch the ops inside a loop) differs from A's by up to 0 (rel 0, rel L2 "
                             "0) (compared as detections, between the detections the two runs matched; 1 detection "
                             "appeared, disappeared or changed class)")
    before = judge(a["scores_list"], b["scores_list"], replace(origin, a_tensor="scores_list:0",
                                                                b_tensor="scores_list:0"), captured)
    assert (before.verdict, before.max_abs) == ("own_error", 0.6240234375)


# ---- diagnose: the plain runs differ, walked op by op with fetch-alone replays -------------------------------


def test_fetch_alone_replays_judge_the_lists_between_matched_detections(monkeypatch: Any, tmp_path: Any) -> None:
    """Observed, the sides agree; their plain runs do not, and each tensor fetched alone on both sides shows
    B's NMS listing X and Y the other way round: the same detections, bit for bit. The walk's first
    divergence is the stack, as the compare would say it: bitwise only, by 0 between matched detections;
    index by index (before) it was a first divergence beyond tolerance, "max abs 2"."""
    from tracer.diagnosis import outcomes  # noqa: PLC0415
    from tracer.diagnosis.replays import Replay  # noqa: PLC0415

    metrics, found = a_vs_b()
    plain_b = lists(Y_LOW, X)

    def replay_alone(cap: Any, _source: Any, fetches: dict[str, str], *_args: Any, **_kwargs: Any) -> Replay:
        values = A_1.values if cap is A_1 else {f"{op}:0": v for op, v in plain_b.items()}
        return Replay([{name: values[name] for name in fetches}], 1)

    monkeypatch.setattr(outcomes, "replay_alone", replay_alone)
    for run in (A_1, B_1):
        run.tensor_layout = {t: "rows" for t in run.values}
        run.observer = SimpleNamespace(executed_nodes_plain={})
    comparison = SimpleNamespace(alignment=ALIGNMENT, metrics=metrics, view_a=SimpleNamespace(graph=GRAPH),
                                 detection_lists=found)
    try:
        first, converted = outcomes._unobserved(comparison, A_1, B_1, tmp_path, None, Tolerance(), False)
    finally:
        for run in (A_1, B_1):
            run.tensor_layout = {}
            del run.observer
    assert converted == []
    assert {k: v for k, v in first.items() if k != "isolation_detail"} == {
        "node": "boxes_list", "op": "TensorListStack", "max_abs": 0.0, "max_rel": 0.0, "level": "bitwise",
        "rewrite": None, "isolation": None, "observed": "fetch-alone replays"}


def test_plain_outputs_that_only_come_out_in_another_order_are_judged_between_matched_detections() -> None:
    """The H200, 2026-12-04 (run o): the sample detector's checkpoint against its SavedModel, both on
    the GPU. A's plain runs listed two near-tied detections in one order, B's in the other: index by
    index A and B read 1 apart on `detection_classes` "in every one of 4 pairs of runs", beyond each
    side's spread (0 on the classes), and the verdict was DIVERGED, while its 80 matched detections
    agreed within A's own run-to-run noise. Over every pair of plain runs a detector's outputs are
    now measured as A against B is: between matched detections."""
    from tracer.comparison.noise import _over_every_pair  # noqa: PLC0415

    _metrics, found = a_vs_b()

    def plain_run(first: tuple[list[float], float, int], second: tuple[list[float], float, int]) -> Run:
        run = Run(lists(first, second))
        run.plain = {key: run.values[f"{key}:0"] for key in run.outputs}
        return run

    y_lower = (Y_BOX, 0.6259765625 - 2.0 ** -10, 2)  # A's second process: Y's score moved by 2**-10
    runs = {"a": [plain_run(Y_HIGH, X), plain_run(y_lower, X)], "b": [plain_run(X, Y_LOW), plain_run(X, Y_LOW)]}
    before = _over_every_pair(runs, {}, Tolerance(), {})  # index by index, as before
    assert before["detection_classes"].spread == {"a": 0.0, "b": 0.0}
    assert before["detection_classes"].cross_closest == 1.0  # "beyond the noise in every pair of runs"
    outputs = _over_every_pair(runs, {}, Tolerance(), found)
    classes, scores = outputs["detection_classes"], outputs["detection_scores"]
    assert (classes.spread, classes.cross_max_abs, classes.cross_closest) == ({"a": 0.0, "b": 0.0}, 0.0, 0.0)
    assert classes.cross_identical is False and classes.cross_within_tolerance is True  # the bits differ, not the detections
    assert scores.spread == {"a": 2.0 ** -10, "b": 0.0}
    assert (scores.cross_closest, scores.cross_max_abs) == (2.0 ** -10, 2.0 ** -9)  # Y: 0.6240 in B; 0.6260, 0.6250 in A


def test_a_detectors_plain_outputs_are_matched_once_per_pair_of_runs_not_once_per_output(monkeypatch: Any) -> None:
    """Each side's spread and A against B over every pair of runs measure the group's outputs (boxes,
    scores, classes) between the same matched detections: one match per pair of runs and group, where
    there was one per output key (3 lists here, 4 for a group with per-detection outputs)."""
    import tracer.comparison.list_runs as list_runs  # noqa: PLC0415
    from tracer.comparison.noise import _over_every_pair  # noqa: PLC0415

    _metrics, found = a_vs_b()
    matched: list[tuple[int, int]] = []
    real = list_runs.match_lists

    def counted(spec: Any, x: Any, y: Any) -> Any:
        matched.append((id(x), id(y)))
        return real(spec, x, y)

    monkeypatch.setattr(list_runs, "match_lists", counted)

    def plain_run(first: tuple[list[float], float, int], second: tuple[list[float], float, int]) -> Run:
        run = Run(lists(first, second))
        run.plain = {key: run.values[f"{key}:0"] for key in run.outputs}
        return run

    runs = {"a": [plain_run(Y_HIGH, X), plain_run(X, Y_LOW)], "b": [plain_run(X, Y_LOW), plain_run(X, Y_LOW)]}
    outputs = _over_every_pair(runs, {}, Tolerance(), found)
    # 1 pair within A, 1 within B, 4 across: 6 pairs, each matched once (18 before: once per list output)
    assert len(matched) == 6
    assert outputs["detection_classes"].cross_max_abs == 0.0 and outputs["detection_boxes"].spread == {"a": 0.0, "b": 0.0}
    matched.clear()
    noise = Noise()
    side = side_noise("a", runs["a"], ALIGNMENT, noise, {}, Tolerance(), found)
    assert len(matched) == 2  # the captured lists once (lists_between), the plain outputs once (3 before)
    assert side["outputs_max_abs"] == {"detection_boxes": 0.0, "detection_scores": 2.0 ** -9, "detection_classes": 0.0,
                                       "num_detections": 0.0}


def test_the_observer_effect_on_a_detectors_outputs_is_measured_between_matched_detections() -> None:
    """The H200, 2026-12-04 (run p): fetching every tensor moved two near-tied scores and NMS listed the
    detections in the other order, so the capture's observer effect (its plain run against its instrumented
    run, index by index) read 0.242 for a pair whose matched detections agreed, and the causes held that
    against the difference between the sides. Here the plain run lists X then Y, the instrumented one Y
    (its score 2**-9 higher) then X: index by index the boxes moved by 2.0 and the classes by 1.0; between
    matched detections only Y's score moved."""
    from tracer.captures.observer import observer_effect  # noqa: PLC0415
    from tracer.cause_shares import shares  # noqa: PLC0415
    from tracer.comparison.list_runs import observed_detections  # noqa: PLC0415
    from tracer.report.build import observer_effect_entry  # noqa: PLC0415
    from tracer.report.detections_view import observer_note  # noqa: PLC0415

    run = Run(lists(Y_HIGH, X))  # the instrumented run
    plain = lists(X, Y_LOW)
    run.plain = {key: plain[key] for key in run.outputs}
    run.observer = SimpleNamespace(outputs_identical=False)
    # what the capture child records: index by index
    manifest = observer_effect(GRAPH.outputs, GRAPH,
                               {"outputs": [run.plain], "executed_ops": {}, "executed_nodes": {}},
                               {"outputs": [{k: run.values[f"{k}:0"] for k in run.outputs}], "executed_ops": {},
                                "executed_nodes": {}})
    assert manifest["outputs_max_abs_diff"] == {"detection_boxes": 2.0, "detection_scores": 0.0009765625,
                                                "detection_classes": 1.0, "num_detections": 0.0}
    figures = observed_detections(run, recognise(list(GRAPH.outputs)))
    assert figures == {"detection_boxes": 0.0, "detection_scores": 2.0 ** -9, "detection_classes": 0.0,
                       "num_detections": 0.0}
    side = observer_effect_entry(manifest, figures, {})
    assert side["outputs_max_abs_diff"] == figures and side["outputs_identical"] is False
    assert side["outputs_as_detections"] == sorted(figures)
    assert side["outputs_index_by_index"] == manifest["outputs_max_abs_diff"]
    assert observer_note(side) == ("detection_boxes, detection_classes, detection_scores, num_detections between the "
                                   "detections its plain and instrumented runs matched (index by index up to 2)")
    # what the causes measure the observer effect by: before, the size of a box
    found = {"observation": "on side A, fetching every tensor moved the outputs."}
    assert shares({"observer_effect": {"a": manifest}}, found)["observation"]["max_abs"] == 2.0
    assert shares({"observer_effect": {"a": side}}, found)["observation"]["max_abs"] == 2.0 ** -9
    # what `tftrace capture` prints of it: the same figures and words as the compare's report
    from tracer.cli import _print_observer_effect  # noqa: PLC0415

    run.manifest = {"observer_effect": manifest}
    printed = io.StringIO()
    _print_observer_effect(run, Console(file=printed, width=400))
    assert printed.getvalue() == (
        "observer effect: fetching every tensor moved the outputs by detection_boxes 0, detection_scores 0.00195, "
        "detection_classes 0, num_detections 0; detection_boxes, detection_classes, detection_scores, num_detections "
        "between the detections its plain and instrumented runs matched (index by index up to 2)\n")
    # a capture whose two runs agreed bit for bit is not read again
    run.observer = SimpleNamespace(outputs_identical=True)
    assert observed_detections(run, recognise(list(GRAPH.outputs))) == {}
