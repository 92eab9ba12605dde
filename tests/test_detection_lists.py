"""The headline's "inside" line on a detector whose float16 twin swaps detections in NMS's lists.

The outputs of a detector are matched as detections (tests/test_detections.py); the tensors inside
the graph that hold the same lists (the stack after the per-image NMS loop, the clip of the cond
after it, the outputs' Identities) are measured the same way: between matched detections. Their
index-by-index largest difference, which pairs row k of A with row k of B whether or not they are
the same detection, once stood as the divergence's extent ("23 ops beyond tolerance, up to
0.359", at the NMS stack, where matched boxes moved by 3.46e-05); it is now said only as such. And
the ops holding the lists are judged so too (their status, whether one is the first divergence): with
a tolerance wide enough for every op before NMS, the NMS order alone once made the stack the first
divergence beyond tolerance.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console

from conftest import build_fixture, build_model, run_cli
from tracer.comparison.align import ROLE_COMPARED, Alignment, NodeAlignment, TensorPair
from tracer.comparison.detection_lists import DetectionList
from tracer.comparison.detections import detections_verdict, match_image, matched_rows, valid_detections
from tracer.comparison.divergence import Divergence, Tolerance, classify
from tracer.metrics import compare_arrays
from tracer.opgraph import OpGraph
from tracer.report.detections_view import list_note
from tracer.report.headline import build_headline
from tracer.report.markdown import render_markdown
from tracer.report.numbers import fmt
from tracer.report.render import render_report
from tracer.report.terminal import print_comparison

ENV = {"TF_ENABLE_ONEDNN_OPTS": "0", "CUDA_VISIBLE_DEVICES": "-1"}
NMS = "Postprocessor/BatchMultiClassNonMaxSuppression/map/"
# per control flow: the ops after NMS that hold the detection lists and are beyond tolerance index by index
LISTS = {
    # the If lowered as TensorFlow runs it (tracer/artifacts/lowering.py): its input Switch, the branch's
    # clip, its output Merge, named and numbered by TensorFlow's lowering
    "cf2": [f"{NMS}TensorArrayV2Stack/TensorListStack", f"{NMS}TensorArrayV2Stack_1/TensorListStack",
            f"cond/{NMS}TensorArrayV2Stack/TensorListStack/_95", "Func/cond/then/_90/input/_155",
            "cond/then/_90/clip_by_value/Minimum", "cond/then/_90/clip_by_value_0", "Func/cond/then/_90/output/_156",
            "cond/output/_96", "cond/Identity", "detection_boxes", "detection_scores"],
    "cf1": [f"{NMS}TensorArrayStack/TensorArrayGatherV3", f"{NMS}TensorArrayStack_1/TensorArrayGatherV3",
            "cond/clip_by_value/Minimum/Switch", "cond/clip_by_value/Minimum", "cond/clip_by_value", "cond/Merge",
            "detection_boxes", "detection_scores"],
}


@pytest.fixture(scope="module")
def detector(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fixture("nms_fp16_detector.py", tmp_path_factory.mktemp("nms_fp16") / "models")


def _compare(models: Path, flow: str, out: Path, *extra: str, exit_code: int = 1) -> tuple[Any, dict[str, Any]]:
    proc = run_cli("compare", str(models / flow / "savedmodel"), str(models / flow / "savedmodel_fp16"), "--inputs",
                   str(models / "images.npz"), "--onednn", "off", "--isolate", "0", "--out", str(out), *extra, env=ENV)
    assert proc.returncode == exit_code, proc.stderr
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
    # the first divergence, bitwise and beyond tolerance, is the float16 head, as before lists were judged matched
    first = ("heads/einsum/Einsum", "origin")
    assert (report["first_divergence"]["node"], report["first_divergence"]["status"]) == first
    assert (report["first_divergence_beyond_tolerance"]["node"], report["first_divergence_beyond_tolerance"]["status"]) == first
    inside = report["intermediates"]
    assert (inside["from"], inside["max_abs_at"]) == ("heads/einsum/Einsum", "heads/einsum/Einsum")
    assert inside["max_abs"] == report["nodes"]["heads/einsum/Einsum"]["max_abs"] < 1e-3
    lists = inside["detection_lists"]
    assert lists["ops"] == LISTS[flow] and lists["count"] == len(LISTS[flow]) and lists["not_matched"] == []
    stack, scores_stack = LISTS[flow][0], LISTS[flow][1]
    # index by index, the boxes' stack reads as a box off by its size; between matched detections it
    # moves as the matched outputs do: the scores by what the outputs' matching measured
    assert lists["index_max_abs_at"] == stack and lists["index_max_abs"] > 0.3
    assert lists["index_max_abs"] == report["outputs"]["detection_boxes"]["max_abs"]
    assert (lists["matched_max_abs_at"], lists["matched_max_abs"]) == (scores_stack, total["max_score_diff"])
    assert lists["matched_within_tolerance"] is False and lists["changes"] == 0
    # the op's own entry: its metric is between matched detections, the index-by-index one kept as such; at the
    # default tolerance the matched boxes (3.46e-05) are beyond it, and the stack passes on the heads' difference
    node = report["nodes"][stack]
    assert (node["status"], node["max_abs"]) == ("propagated", total["max_box_diff"])
    assert node["index_by_index"]["max_abs"] == lists["index_max_abs"]
    assert node["detection_list"] == {"output": "detection_boxes", "measured": "matched_detections", "matched_rows": 80,
                                      "changes": 0, "why": None, "matched_within_tolerance": False}
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


@pytest.mark.slow
@pytest.mark.parametrize("flow", ["cf2", "cf1"])
def test_a_reordering_by_nms_alone_is_no_first_divergence(detector: Path, tmp_path: Path, flow: str) -> None:
    """The H200's fp32 detector against its fp16 export (2026-12-04): every op before NMS within
    tolerance, NMS listing two near-tied detections in the other order, and the report said
    "DIVERGED — first divergence at `…/TensorListStack`" while saying that tensor's lists differ by
    1.04e-05 between matched detections (within tolerance).

    Built so on the CPU: the same float16 heads, with ``--atol 1e-3``, wider than the heads' difference
    (6.67e-04) and every op's after them up to NMS, so that what is left beyond tolerance is the NMS
    order alone (row k of A against row k of B: 0.359, a box's size); ``--intermediates-decide`` so the
    ops decide the verdict, as the wrong headline's DIVERGED did. Before the stack was judged between
    matched detections this exited 1: ``verdict_ops`` diverged, ``first_divergence_beyond_tolerance``
    the NMS stack (origin, max abs 0.359), then ``cond``, ``cond/Identity`` and ``detection_boxes``
    (cf1: the TensorArrayGatherV3, the clip and the Merge) propagated."""
    proc, report = _compare(detector, flow, tmp_path / "r", "--atol", "1e-3", "--intermediates-decide", exit_code=0)
    [group] = report["detections"]
    total = group["total"]
    assert group["verdict"] == "within_tolerance" and (total["matched"], total["changed_class"]) == (80, 0)
    assert (report["verdict"], report["verdict_ops"], report["verdict_outputs"]) == ("within_tolerance",) * 3
    # the heads still differ first, bitwise and within tolerance; nothing is beyond it
    first = report["first_divergence"]
    assert (first["node"], first["status"], first["level"]) == ("heads/einsum/Einsum", "within_tolerance", "bitwise")
    assert report["first_divergence_beyond_tolerance"] is None and report["intermediates"] is None
    assert [n for n, v in report["nodes"].items() if v["status"] in ("origin", "propagated")] == []
    assert all(o["level"] == "bitwise" for o in report["origins"])
    # the boxes' stack: within tolerance between matched detections, by what the outputs' matching measured
    stack = LISTS[flow][0]
    node = report["nodes"][stack]
    assert (node["status"], node["max_abs"]) == ("within_tolerance", total["max_box_diff"])
    assert 3e-5 < node["max_abs"] < 4e-5
    assert node["detection_list"] == {"output": "detection_boxes", "measured": "matched_detections", "matched_rows": 80,
                                      "changes": 0, "why": None, "matched_within_tolerance": True}
    # read index by index it is a box off by its size, kept under its own name, not as the op's metric
    index = node["index_by_index"]
    assert index["max_abs"] == report["outputs"]["detection_boxes"]["max_abs"] > 0.3
    assert index["within_tolerance"] is False
    for name in LISTS[flow]:  # every op holding the lists, the outputs' Identities too, as the stack
        assert report["nodes"][name]["status"] == "within_tolerance", name
        assert report["nodes"][name]["detection_list"]["measured"] == "matched_detections", name
    # every renderer names the same first divergence and says nothing differs beyond tolerance inside
    inside = "Inside, the numbers differ (within tolerance) from `heads/einsum/Einsum` (Einsum) on."
    assert report["headline"][1] == {"key": "inside", "text": inside}
    md = (tmp_path / "r" / "report.md").read_text(encoding="utf-8")
    assert md.startswith("## tftrace: WITHIN TOLERANCE — first divergence at `heads/einsum/Einsum` (Einsum)\n")
    assert inside in _flat(md) and _flat(inside) in _flat(proc.stdout)
    assert "First divergence beyond tolerance" not in proc.stdout + md


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


# ---- the judgement, on lists written out by hand (no TensorFlow) -----------------------------------

# one image, three rows of which two are detections: B lists A's two in the other order, A's first box
# moved by 1e-4 and its score by 2e-4
A_LISTS = {"boxes": np.array([[[0.0, 0.0, 1.0, 1.0], [2.0, 2.0, 3.0, 3.0], [0.0, 0.0, 0.0, 0.0]]], np.float32),
           "scores": np.array([[0.9, 0.8, 0.0]], np.float32), "classes": np.array([[1.0, 2.0, 0.0]], np.float32),
           "count": np.array([2.0], np.float32)}
B_LISTS = {"boxes": np.array([[[2.0, 2.0, 3.0, 3.0], [0.0, 0.0, 1.0001, 1.0], [0.0, 0.0, 0.0, 0.0]]], np.float32),
           "scores": np.array([[0.8, 0.9002, 0.0]], np.float32), "classes": np.array([[2.0, 1.0, 0.0]], np.float32),
           "count": np.array([2.0], np.float32)}
LIST_GRAPH = OpGraph.from_json({"inputs": {"x": "x:0"}, "outputs": {"detection_boxes": "boxes:0"}, "nodes": [
    {"name": name, "op": op, "device": "", "scope": "", "attrs": {}, "inputs": [f"{i}:0" for i in inputs],
     "control_inputs": [], "outputs": [{"dtype": "float32", "shape": [1, 3, 4], "capturable": True, "reason": ""}]}
    for name, op, inputs in (("x", "Placeholder", []), ("heads", "Einsum", ["x"]), ("stack", "TensorListStack", ["heads"]),
                             ("boxes", "Identity", ["stack"]))]})


def _per_image() -> list[tuple[Any, Any, Any]]:
    da, db = valid_detections(A_LISTS, 0), valid_detections(B_LISTS, 0)
    return [(da, db, match_image(da, db, "yxyx", 0.5)[0])]


def _classify(changes: int | None, atol: float = 1e-3) -> Divergence:
    """The heads within ``atol`` (1e-5 apart), the stack and the output holding B_LISTS' boxes; ``changes``:
    the detections that changed, as the outputs' matching counted them (None: no list judged so)."""
    rows = matched_rows(A_LISTS["boxes"], B_LISTS["boxes"], _per_image())
    assert rows is not None
    heads = np.arange(12, dtype=np.float32).reshape(1, 3, 4)
    values = {"x": (heads, heads), "heads": (heads, heads + np.float32(1e-5)),
              "stack": (A_LISTS["boxes"], B_LISTS["boxes"]), "boxes": (A_LISTS["boxes"], B_LISTS["boxes"])}
    nodes, metrics = {}, {}
    for op, (va, vb) in values.items():
        nodes[op] = NodeAlignment(op, op, "name", ROLE_COMPARED, [TensorPair(f"{op}:0", f"{op}:0", "name", True)])
        metrics[f"{op}:0"] = compare_arrays(va, vb, rtols=(1e-5,))
    lists = {} if changes is None else {
        f"{op}:0": DetectionList(f"{op}:0", "detection_boxes", rows.compare(1e-5), changes)
        for op in ("stack", "boxes")}
    return classify(LIST_GRAPH, Alignment(nodes, []), metrics, Tolerance(atol=atol), lists=lists)


def test_matched_rows_pair_each_detection_with_the_one_it_matched_and_index_the_worst_in_a() -> None:
    rows = matched_rows(A_LISTS["boxes"], B_LISTS["boxes"], _per_image())
    assert rows is not None and rows.at.tolist() == [[0, 0], [0, 1]]
    np.testing.assert_array_equal(rows.b, B_LISTS["boxes"][0, [1, 0]])
    m = rows.compare(1e-5)
    assert m.max_abs == float(np.float32(1.0001) - np.float32(1.0)) and m.mismatch_count == 1
    assert [list(w[0]) for w in m.worst] == [[0, 0, 2]]  # image 0, A's row 0, ymax
    assert matched_rows(A_LISTS["boxes"], B_LISTS["boxes"][:, :, :2], _per_image()) is None


def test_the_one_rule_judges_lists_as_it_judges_outputs() -> None:
    assert detections_verdict(True, 0, True) == "identical"
    assert detections_verdict(False, 0, True) == "within_tolerance"
    assert detections_verdict(False, 0, False) == "diverged"
    assert detections_verdict(False, 1, True) == "diverged"  # a detection changed: no tolerance excuses it


def test_a_list_that_nms_reordered_is_judged_between_matched_detections() -> None:
    before = _classify(None)  # index by index, the swap reads as a box off by 2.0
    assert before.nodes["stack"].status == "origin" and before.first_beyond_tolerance.name == "stack"
    after = _classify(0)
    stack = after.nodes["stack"]
    assert (stack.status, after.nodes["boxes"].status) == ("within_tolerance", "within_tolerance")
    assert after.first_beyond_tolerance is None and after.verdict == "within_tolerance"
    assert after.first_bitwise.name == "heads" and after.intermediates(LIST_GRAPH) is None
    assert stack.metrics.max_abs == float(np.float32(1.0001) - np.float32(1.0)) and stack.matched_within is True
    assert stack.index_metrics.max_abs == 2.0 and stack.detection_list.output == "detection_boxes"


def test_a_list_whose_detections_changed_stays_beyond_tolerance_whatever_its_rows_measure() -> None:
    changed = _classify(1)
    assert (changed.nodes["stack"].status, changed.nodes["boxes"].status) == ("origin", "propagated")
    assert changed.first_beyond_tolerance.name == "stack" and changed.verdict == "diverged"
    lists = changed.intermediates(LIST_GRAPH)["detection_lists"]
    assert (lists["ops"], lists["changes"], lists["matched_within_tolerance"]) == (["stack", "boxes"], 1, True)
    assert (lists["index_max_abs"], lists["index_max_abs_at"]) == (2.0, "stack")
    # and a matched detection beyond tolerance is beyond, as an output's would be
    tight = _classify(0, atol=1e-6)
    assert tight.nodes["heads"].status == "origin" and tight.nodes["stack"].status == "propagated"
    assert tight.nodes["stack"].matched_within is False


def test_a_list_op_named_as_a_first_divergence_says_its_figures_are_between_matched_detections(tmp_path: Path) -> None:
    """An NMS op made the first divergence by a detection that changed class: its figures are between matched
    detections (0 here: every matched one agrees), so each renderer says so, the change, and the
    index-by-index figure under that name."""
    report = json.loads((Path(__file__).parent / "fixtures" / "report_detector_planted.json").read_text("utf-8"))
    nms = {"node": "nms/CombinedNonMaxSuppression", "op": "CombinedNonMaxSuppression",
           "tensor": "nms/CombinedNonMaxSuppression:2", "max_abs": 0.0, "max_rel": 0.0, "level": "tolerance",
           "status": "origin", "rewrite": None, "isolation": None,
           "detection_list": {"output": "detection_classes", "measured": "matched_detections", "matched_rows": 79,
                              "changes": 1, "why": None, "matched_within_tolerance": True},
           "index_by_index": {"identical": False, "max_abs": 2.0, "max_rel": 1.0, "rel_l2": 0.05, "rel_to_peak": 1.0,
                              "mismatch_count": 3, "within_tolerance": False}}
    report["first_divergence"] = report["first_divergence_beyond_tolerance"] = nms
    report["origins"] = [{**nms, "rank": 1}]
    said = (", between matched detections (1 detection appeared, disappeared or changed class); read index by index "
            "(row k of A against row k of B), up to 2")
    assert list_note(nms) == said and list_note({**nms, "detection_list": None}) == ""
    md = render_markdown(report)
    assert ("- **First divergence, bitwise and beyond tolerance:** `nms/CombinedNonMaxSuppression` "
            f"(CombinedNonMaxSuppression), max abs 0, max rel 0{said}; ") in md
    console = Console(file=io.StringIO(), width=400, color_system=None)
    print_comparison(console, report)
    assert (f"First divergence, bitwise and beyond tolerance: nms/CombinedNonMaxSuppression "
            f"(CombinedNonMaxSuppression), max abs 0, max rel 0{said} — ") in console.file.getvalue()
    render_report(report, tmp_path)
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "<span>max abs index by index</span><b>2</b>" in page


def test_the_inside_line_names_the_detections_that_changed() -> None:
    """Lists whose matched detections agree but one of whose detections changed class are beyond tolerance
    for that change: the inside line says so, where it would otherwise read as a contradiction."""
    inside = {"from": "nms", "from_op": "CombinedNonMaxSuppression", "ops_beyond_tolerance": 2, "max_abs": None,
              "max_abs_at": None,
              "detection_lists": {"ops": ["nms", "classes"], "count": 2, "index_max_abs": 1.0, "index_max_abs_at": "nms",
                                  "matched_max_abs": 0.0, "matched_max_abs_at": "nms", "matched_within_tolerance": True,
                                  "changes": 1, "not_matched": []}}
    [line] = build_headline(_report(inside))
    assert line["text"] == (
        "Inside, the numbers differ beyond tolerance from `nms` (CombinedNonMaxSuppression) on (2 ops beyond "
        "tolerance; all of them hold lists of detections, which differ by up to 0 between matched detections (at "
        "`nms`, within tolerance; 1 detection appeared, disappeared or changed class); read index by index, which "
        "pairs row k of A with row k of B whether or not they are the same detection, `nms` differs by up to 1).")


@pytest.mark.slow
@pytest.mark.parametrize("flow", ["cf2", "cf1"])
def test_a_list_origin_is_replayed_with_the_lists_born_beside_it(detector: Path, tmp_path: Path, flow: str) -> None:
    """Every op before NMS within ``--atol 1e-3``, the boxes' stack held to 1e-6 (``--tol``): the stack is the
    first divergence beyond tolerance, by its matched boxes (3.46e-05). Its replays fetch, in the same runs,
    the scores', classes' and counts' stacks of the same loop, by which they are matched as detections
    (tests/test_list_runs.py has replays that differ); here both sides' loops agree given A's inputs."""
    stack = LISTS[flow][0]
    _proc, report = _compare(detector, flow, tmp_path / "r", "--atol", "1e-3", "--tol", f"{stack}=1e-6,1e-5",
                             "--isolate", "5", exit_code=0)
    first = report["first_divergence_beyond_tolerance"]
    assert (first["node"], first["status"]) == (stack, "origin") and 3e-5 < first["max_abs"] < 4e-5
    assert first["isolation"]["verdict"] == "inherited" and first["isolation"]["max_abs"] == 0.0
    [planned] = [o for o in json.loads((tmp_path / "r" / "work" / "isolation_index.json").read_text("utf-8"))["ops"]
                 if o["node"] == stack]
    born = {"cf2": [f"{NMS}TensorArrayV2Stack{s}/TensorListStack:0" for s in ("", "_1", "_2", "_3")],
            "cf1": [f"{NMS}TensorArrayStack{s}/TensorArrayGatherV3:0" for s in ("", "_1", "_2", "_3")]}[flow]
    roles = planned["detections"]["roles"]
    assert {role: entry["a_tensor"] for role, entry in roles.items()} == dict(zip(("boxes", "scores", "classes",
                                                                                  "count"), born))
    assert roles["boxes"]["id"] == planned["id"]
    for side in ("a", "b"):
        assert all((tmp_path / "r" / "work" / f"isolation_{side}" / f"{e['id']}.npy").is_file() for e in roles.values())


@pytest.mark.slow
@pytest.mark.parametrize("flow", ["cf2", "cf1"])
def test_with_repeats_the_lists_are_held_against_noise_measured_as_they_are(detector: Path, tmp_path: Path,
                                                                            flow: str) -> None:
    """``--repeat 2`` on the CPU: each side repeats itself bit for bit, its lists included (measured between
    the detections its two runs matched), and the answer is the one without repeats: the float16 head first,
    the lists passing its difference on."""
    _proc, report = _compare(detector, flow, tmp_path / "r", "--repeat", "2")
    assert (report["verdict"], report["verdict_ops"], report["verdict_outputs"]) == ("diverged",) * 3
    first = ("heads/einsum/Einsum", "origin")
    assert (report["first_divergence"]["node"], report["first_divergence"]["status"]) == first
    assert (report["first_divergence_beyond_tolerance"]["node"],
            report["first_divergence_beyond_tolerance"]["status"]) == first
    noise = report["noise"]
    assert noise["processes"] == 2 and noise["repeats"] == 2
    for side in ("a", "b"):
        assert (noise[side]["max_abs"], noise[side]["tensors_that_moved"], noise[side]["repeats_itself"]) == (0.0, 0, True)
    assert report["headline"][0]["key"] == "repeatable"
    for name in LISTS[flow]:
        node = report["nodes"][name]
        assert (node["status"], node["detection_list"]["measured"]) == ("propagated", "matched_detections"), name
    assert report["intermediates"]["detection_lists"]["ops"] == LISTS[flow]


RENAME = """
import os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf
src, dst, renamed = sys.argv[1], sys.argv[2], dict(p.split("=") for p in sys.argv[3].split(","))
v1 = tf.compat.v1
with tf.Graph().as_default() as graph, v1.Session(graph=graph) as session:
    signature = v1.saved_model.loader.load(session, ["serve"], src).signature_def["serving_default"]
    inputs = {k: graph.get_tensor_by_name(v.name) for k, v in signature.inputs.items()}
    outputs = {renamed.get(k, k): graph.get_tensor_by_name(v.name) for k, v in signature.outputs.items()}
    builder = v1.saved_model.Builder(dst)
    builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map={
        "serving_default": v1.saved_model.predict_signature_def(inputs, outputs)})
    builder.save()
"""
B_KEYS = {"detection_boxes": "boxes", "detection_scores": "scores", "detection_classes": "classes",
          "num_detections": "count"}


@pytest.mark.slow
def test_a_detector_whose_output_keys_are_mapped_is_compared_as_detections(detector: Path, tmp_path: Path) -> None:
    """``--map detection_boxes=boxes,...``: B (the float16 twin) exported under other output keys. ``--map``
    renames B's view of its outputs to A's keys, but the detections' matching looked B's own keys up in it,
    found none, and left the group uncompared ("no value for B's 'detection_boxes'"): the outputs were read
    index by index (boxes 0.359 apart) and no list inside was measured between matched detections. Now the
    group is compared as without the map: 80 of 80 detections matched, boxes within 3.46e-05."""
    renamed = tmp_path / "renamed_fp16"
    mapping = ",".join(f"{a}={b}" for a, b in B_KEYS.items())
    build_model(RENAME, detector / "cf2" / "savedmodel_fp16", renamed, mapping)
    proc = run_cli("compare", str(detector / "cf2" / "savedmodel"), str(renamed), "--inputs",
                   str(detector / "images.npz"), "--onednn", "off", "--isolate", "0", "--repeat", "2", "--map", mapping,
                   "--out", str(tmp_path / "r"), env=ENV)
    assert proc.returncode == 1, proc.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text(encoding="utf-8"))
    [group] = report["detections"]
    assert (group["compared"], group["not_compared"], group["verdict"]) == (True, None, "diverged")
    total = group["total"]
    assert (total["a"], total["b"], total["matched"], total["appeared"], total["disappeared"]) == (80, 80, 80, 0, 0)
    assert total["max_box_diff"] == pytest.approx(3.463e-05, rel=1e-3)
    assert report["outputs"]["detection_boxes"]["b_tensor"] and report["outputs"]["detection_boxes"]["max_abs"] == \
        pytest.approx(0.359, abs=1e-3)  # index by index, as such
    lists = report["intermediates"]["detection_lists"]
    assert lists["ops"] == LISTS["cf2"] and lists["matched_max_abs"] == pytest.approx(1.2487e-04, rel=1e-3)
    # B's runs are read under its own keys, its noise reported under A's: it repeats itself, its lists included
    assert report["noise"]["b"]["repeats_itself"] is True
    assert sorted(report["noise"]["b"]["outputs_max_abs"]) == sorted(B_KEYS)
    assert report["outputs"]["detection_classes"]["noise"]["cross_max_abs"] == 0.0
    # B's observer effect stays under its own keys, and says which of A's each is, for the causes
    assert report["observer_effect"]["b"]["a_keys"] == {b: a for a, b in B_KEYS.items()}
    assert "a_keys" not in report["observer_effect"]["a"]
