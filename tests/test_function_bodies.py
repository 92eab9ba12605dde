"""A TF2 while loop's body and cond are functions of the graph's library, called by name.

Two exports name one body differently (``while_body_243``, ``while_body_2087``: TensorFlow numbers
every function it traces) and may change what it computes under the same structure. diff-graph
once compared the names: a renamed, identical body was an ``attr_changed``, and a changed NMS
threshold inside the loop was no rewrite at all.

A loop TensorFlow lowers before it runs it (``_lower_using_switch_merge``, what TF2's graph
building sets) is lowered when it loads (:mod:`tracer.artifacts.lowering`): the changed constant is
then a ``const_changed`` at the very node in the body, and the renamed loop, whose lowered nodes are
named and numbered after it, is still no rewrite. A loop left functional (built for XLA) is one
op: the op graph carries a digest of what each called function computes
(:class:`tracer.function_digests.FunctionDigests`), and the diff compares those.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import run_cli

pytestmark = pytest.mark.slow

_LOOPS = textwrap.dedent("""
    import sys, tensorflow as tf
    tf.compat.v1.disable_eager_execution()  # graph mode, TF2 control flow: While with function bodies
    def export(path, step, extra_loops, lowered=True):
        g = tf.Graph()
        with g.as_default():
            for _ in range(extra_loops):  # traced first: shifts the numbers in the loop's function names
                tf.while_loop(lambda i: i < 3, lambda i: i + 1, [tf.constant(0)])
            x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
            _, y = tf.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * 0.5 + step), [tf.constant(0), x])
            tf.identity(y, name="y")
        graph_def = g.as_graph_def()
        for node in graph_def.node:  # as XLA's clustering leaves a loop: TensorFlow runs it as one op
            if node.op in ("While", "StatelessWhile") and not lowered:
                node.attr["_lower_using_switch_merge"].b = False
        tf.io.write_graph(graph_def, path, "loop.pb", as_text=False)
    for kept, lowered in (("", True), ("functional_", False)):
        export(sys.argv[1] + f"/{kept}a", 1.0, 0, lowered)
        export(sys.argv[1] + f"/{kept}renamed", 1.0, 2, lowered)
        export(sys.argv[1] + f"/{kept}changed", 2.0, 0, lowered)
""")


@pytest.fixture(scope="module")
def loops(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("loops")
    subprocess.run([sys.executable, "-c", _LOOPS, str(out)], check=True, capture_output=True, timeout=300)
    return out


def _diff(loops: Path, b: str, a: str = "a") -> dict:
    proc = run_cli("diff-graph", "--json", str(loops / a / "loop.pb"), str(loops / b / "loop.pb"),
                   "--outputs", "y", "--input-names", "x")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_loop_body_renamed_by_the_export_is_the_same_body(loops: Path) -> None:
    assert _diff(loops, "renamed")["rewrites"] == []
    assert _diff(loops, "functional_renamed", "functional_a")["rewrites"] == []


def test_a_constant_changed_inside_a_lowered_loop_body_is_a_const_change_at_its_node(loops: Path) -> None:
    diff = _diff(loops, "changed")
    assert [(r["kind"], r["a_nodes"], r["b_nodes"], r["detail"]["values"]) for r in diff["rewrites"]] == [
        ("const_changed", ["while/body/_1/add_1/y"], ["while/body/_1/add_1/y"], {"a": 1.0, "b": 2.0})]


def test_a_constant_changed_inside_a_functional_loop_body_is_an_attr_change_of_the_loop(loops: Path) -> None:
    diff = _diff(loops, "functional_changed", "functional_a")
    assert [(r["kind"], r["a_nodes"], sorted(r["detail"]["attrs"])) for r in diff["rewrites"]] == [
        ("attr_changed", ["while"], ["body"])]
    body = diff["rewrites"][0]["detail"]["attrs"]["body"]
    assert body["a"]["digest"] != body["b"]["digest"]
