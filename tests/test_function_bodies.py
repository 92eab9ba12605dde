"""A TF2 while loop's body and cond are functions of the graph's library, called by name.

Two exports name one body differently (``while_body_243``, ``while_body_2087``: TensorFlow numbers
every function it traces) and may change what it computes under the same structure. diff-graph
once compared the names: a renamed, identical body was an ``attr_changed``, and a changed NMS
threshold inside the loop was no rewrite at all. The op graph now carries a digest of what each
called function computes (:class:`tracer.function_digests.FunctionDigests`), and the diff compares those.
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
    def export(path, step, extra_loops):
        g = tf.Graph()
        with g.as_default():
            for _ in range(extra_loops):  # traced first: shifts the numbers in the loop's function names
                tf.while_loop(lambda i: i < 3, lambda i: i + 1, [tf.constant(0)])
            x = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
            _, y = tf.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * 0.5 + step), [tf.constant(0), x])
            tf.identity(y, name="y")
        tf.io.write_graph(g.as_graph_def(), path, "loop.pb", as_text=False)
    export(sys.argv[1] + "/a", 1.0, 0)
    export(sys.argv[1] + "/renamed", 1.0, 2)
    export(sys.argv[1] + "/changed", 2.0, 0)
""")


@pytest.fixture(scope="module")
def loops(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("loops")
    subprocess.run([sys.executable, "-c", _LOOPS, str(out)], check=True, capture_output=True, timeout=300)
    return out


def _diff(loops: Path, b: str) -> dict:
    proc = run_cli("diff-graph", "--json", str(loops / "a" / "loop.pb"), str(loops / b / "loop.pb"),
                   "--outputs", "y", "--input-names", "x")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_loop_body_renamed_by_the_export_is_the_same_body(loops: Path) -> None:
    diff = _diff(loops, "renamed")
    assert diff["rewrites"] == []


def test_a_constant_changed_inside_the_loop_body_is_an_attr_change_of_the_loop(loops: Path) -> None:
    diff = _diff(loops, "changed")
    assert [(r["kind"], r["a_nodes"], sorted(r["detail"]["attrs"])) for r in diff["rewrites"]] == [
        ("attr_changed", ["while"], ["body"])]
    body = diff["rewrites"][0]["detail"]["attrs"]["body"]
    assert body["a"]["digest"] != body["b"]["digest"]
