"""diff-graph on a large inlined TF2 graph (issue 25 item 5): the table names what changed.

(The spread's growth with the op count is held by tests/test_match_scale.py.)
"""

from __future__ import annotations


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
