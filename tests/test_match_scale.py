"""The matcher's spread stays linear in the op count (issue 25 item 5: RetinaNet's 51,000 ops took
60 sweeps over every pair). Counts the pairs visited, not wall time."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

from tracer._tf import tf  # noqa: E402
from tracer.diff.match import SpreadStats, match_graphs  # noqa: E402
from tracer.opgraph import OpGraph  # noqa: E402

CHAIN = 3000


def _chain(scope: str) -> OpGraph:
    graph = tf().Graph()
    with graph.as_default():
        x = tf().compat.v1.placeholder(tf().float32, [None, 4], name="x")
        y = x
        with tf().compat.v1.name_scope(scope):
            for i in range(CHAIN):
                y = tf().math.sin(y) if i % 2 else tf().math.cos(y)
        out = tf().identity(y, name="out")
    return OpGraph.from_tf_graph(graph, {"x": x.name}, {"out": out.name})


@pytest.mark.slow
def test_spread_visits_grow_with_op_count_not_its_square() -> None:
    a, b = _chain("model"), _chain("model_1")  # every op renamed: structure pairs them all
    before = SpreadStats.visits
    pairs = match_graphs(a, b)
    visits = SpreadStats.visits - before
    assert len(pairs) == len(a) == CHAIN + 2
    assert pairs["model/Sin"][0] == "model_1/Sin" and pairs["model/Cos"][0] == "model_1/Cos"
    assert visits <= 4 * len(a), visits  # a sweep over every pair per step was ~CHAIN**2 / 2
