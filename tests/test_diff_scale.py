"""diff-graph on a large inlined TF2 graph (issue 25 item 5): the table names what changed.

(The spread's growth with the op count is held by tests/test_match_scale.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import build_model, run_cli


def test_table_prints_the_scope_every_name_shares_once() -> None:
    """An inlined TF2 signature puts every op under ``StatefulPartitionedCall/``: the table names
    the ops after it, so the column shows which op changed, not the same truncated prefix."""
    from rich.console import Console

    from tracer.diff.records import GraphDiff, Rewrite
    from tracer.report.terminal import print_graph_diff

    scope = "StatefulPartitionedCall/retinanet/"
    rewrite = Rewrite("cast_inserted", [f"{scope}class/l3/Conv2D_17"], [f"{scope}class/l3/Conv2D_17", f"{scope}Cast_40"],
                      {"op": f"{scope}class/l3/Conv2D_17", "dtype_a": "float32", "dtype_b": "float16"})
    other = Rewrite("const_changed", [f"{scope}box/l4/mul/y"], [f"{scope}box/l4/mul/y"], {"max_abs_change": 1.2e-4})
    diff = GraphDiff(pairs={f"{scope}class/l3/Conv2D_17": (f"{scope}class/l3/Conv2D_17", "name")},
                     only_in_a=[], only_in_b=[f"{scope}Cast_40"], rewrites=[rewrite, other])
    console = Console(record=True, width=200)
    print_graph_diff(console, diff, "A", "B")
    text = console.export_text()
    assert f"(op names below are under {scope})" in text
    assert "class/l3/Conv2D_17" in text and "Cast_40" in text
    assert "op=class/l3/Conv2D_17, dtype_a=float32, dtype_b=float16" in text
    assert "box/l4/mul/y" in text
    assert text.count("StatefulPartitionedCall") == 1



def test_alike_rewrites_are_one_line_with_a_count_and_names_stay_whole_at_80_columns() -> None:
    """The Model Garden RetinaNet's mixed_float16 twin re-types 90 score thresholds alike: at 80
    columns that was 90 table rows of `filter_boxes_by_s…`; now one line says what changed, with
    its count and the first names whole."""
    from rich.console import Console

    from tracer.diff.records import GraphDiff, Rewrite
    from tracer.report.terminal import print_graph_diff

    scope = "StatefulPartitionedCall/generate_detections/"
    retyped = {"max_abs_change": 1.22e-05, "dtype": {"a": "float32", "b": "float16"}, "values": {"a": "0.05", "b": "0.0499878"}}
    rewrites = [Rewrite("const_changed", [f"{scope}filter_boxes_by_scores_{i}/Greater/y"],
                        [f"{scope}filter_boxes_by_scores_{i}/Greater/y"], dict(retyped)) for i in range(90)]
    rewrites.append(Rewrite("cast_inserted", [f"{scope}conv/Conv2D"], [f"{scope}Cast_4", f"{scope}conv/Conv2D"],
                            {"op": f"{scope}conv/Conv2D", "dtype_a": "float32", "dtype_b": "float16",
                             "casts": [f"{scope}Cast_4"]}))
    console = Console(record=True, width=80)
    print_graph_diff(console, GraphDiff(pairs={}, only_in_a=[], only_in_b=[], rewrites=rewrites), "A", "B")
    lines = console.export_text().splitlines()
    start = lines.index(f"(op names below are under {scope})") + 1
    assert lines[start:start + 2] == [  # a long kind line continues under its text, not from column 0
        "const_changed ×90: max_abs_change=1.22e-05, dtype=float32 → float16,",
        "  values=0.05 → 0.0499878"]
    assert lines[start + 2:start + 6] == ["    filter_boxes_by_scores_0/Greater/y", "    filter_boxes_by_scores_1/Greater/y",
                                          "    filter_boxes_by_scores_2/Greater/y", "    … and 87 more"]
    # a cast's own names are the line below it, not repeated in its detail
    assert lines[start + 6:] == ["cast_inserted: dtype_a=float32, dtype_b=float16", "    conv/Conv2D → Cast_4, conv/Conv2D"]
    assert not [line for line in lines if "…" in line and "more" not in line]  # no name is cut

RETYPED_TWINS = """
import sys
import tensorflow as tf
tf1 = tf.compat.v1
tf1.disable_eager_execution()
for name, half in (("fp32", False), ("fp16", True)):
    graph = tf1.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [None, 4], name="x")
        bias = tf1.constant([[0.5, -0.25, 0.125, 1.0]], tf.float32, name="bias")
        h = tf.cast(x, tf.float16) if half else x
        scale = tf1.constant(0.05, tf.float16 if half else tf.float32, name="score_scale")
        y = tf.multiply(h, scale, name="mul")
        y = tf.identity((tf.cast(y, tf.float32) if half else y) + bias, name="y")
        with tf1.Session(graph=graph) as session:
            tf1.saved_model.simple_save(session, sys.argv[1] + "/" + name, {"x": x}, {"y": y})
"""


@pytest.mark.slow
def test_a_retyped_constant_is_named_with_its_dtypes_and_both_values(tmp_path: Path) -> None:
    """A half-precision twin re-types a scalar 0.05 to float16 (0.0499878): the table says so, in the
    words a reader checks against the model code, not only the size of the change."""
    build_model(RETYPED_TWINS, tmp_path)
    proc = run_cli("diff-graph", str(tmp_path / "fp32"), str(tmp_path / "fp16"), "--json")
    assert proc.returncode == 0, proc.stderr
    changed = [r for r in json.loads(proc.stdout)["rewrites"] if r["kind"] == "const_changed"]
    assert [(r["a_nodes"], r["b_nodes"]) for r in changed] == [(["score_scale"], ["score_scale"])]
    detail = changed[0]["detail"]
    assert detail["dtype"] == {"a": "float32", "b": "float16"}
    assert detail["values"]["a"] == pytest.approx(0.05) and detail["values"]["b"] == float(np.float16(0.05))
    assert detail["max_abs_change"] == pytest.approx(abs(float(np.float16(0.05)) - float(np.float32(0.05))))
    table = " ".join(run_cli("diff-graph", str(tmp_path / "fp32"), str(tmp_path / "fp16")).stdout.split())
    assert "dtype=float32 → float16, values=0.05 → 0.0499878" in table
    assert "casts=Cast, Cast_1" in table  # names, not a Python list


def test_a_small_weights_values_are_printed_as_numbers() -> None:
    """(A weight of more than four numbers keeps only the size of its change:
    tests/test_graphdiff.py::test_const_changed_by_digest_and_by_value.)"""
    from tracer.report.summary import rewrite_detail
    from tracer.report.terminal import _detail

    # report.md and report.html say it in the same words
    assert rewrite_detail({"max_abs_change": 1.22e-5, "dtype": {"a": "float32", "b": "float16"},
                           "values": {"a": 0.05000000074505806, "b": 0.0499877929688}}) == \
        "max_abs_change: 1.22e-05; dtype: float32 → float16; values: 0.05 → 0.0499878"
    assert _detail({"max_abs_change": 0.25, "values": {"a": [0.0, 0.5], "b": [0.0, 0.75]}}) == \
        "max_abs_change=0.25, values=[0, 0.5] → [0, 0.75]"
