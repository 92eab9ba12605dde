"""The plain runs' warm-up on one example: when it may stand in for the whole first batch, and
that what a capture records from it is what a full-batch warm-up records.

The warm-up builds the executor for the plain fetch set and traces it (executed ops and nodes,
every tensor's bytes). At a large batch its compute is a full run; on one example it is a
fraction, with the same executor. It is allowed only when one example's trace tells every
planned tensor's size at the whole batch (:func:`sizes_scale_with_rows`, checked against the
trace by :func:`scaled_sizes`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import REPO
from tracer.captures.fetch_plan import fetch_plan, scaled_sizes, sizes_scale_with_rows
from tracer.opgraph import OpGraph


def _out(dtype: str, shape: list[Any]) -> dict[str, Any]:
    return {"dtype": dtype, "shape": shape, "capturable": True, "reason": ""}


def _graph(extra_op: str | None = None, feature_shape: list[Any] | None = None) -> OpGraph:
    """x [?, 4] -> relu [?, 4] -> (optionally another op) -> y; float32."""
    shape = [None, 4] if feature_shape is None else feature_shape
    nodes = [
        {"name": "x", "op": "Placeholder", "inputs": [], "outputs": [_out("float32", shape)]},
        {"name": "relu", "op": "Relu", "inputs": ["x:0"], "outputs": [_out("float32", shape)]},
    ]
    last = "relu"
    if extra_op:
        nodes.append({"name": "extra", "op": extra_op, "inputs": ["relu:0"], "outputs": [_out("int64", [None, 2])]})
        last = "extra"
    nodes.append({"name": "y", "op": "Identity", "inputs": [f"{last}:0"], "outputs": [dict(nodes[-1]["outputs"][0])]})
    for node in nodes:
        node.update(control_inputs=[], attrs={}, device="", scope="")
    return OpGraph.from_json({"inputs": {"x": "x:0"}, "outputs": {"y": "y:0"}, "nodes": nodes})


def test_a_batch_axis_model_warms_up_on_one_example_and_its_sizes_scale() -> None:
    graph = _graph()
    plan = fetch_plan(graph, [(0, 8)], 1 << 30)
    assert sizes_scale_with_rows(graph, plan)
    one_row = {name: 16 for name in plan.names}  # one row of 4 float32
    assert scaled_sizes(graph, plan, one_row, 8) == {name: 128 for name in plan.names}
    assert scaled_sizes(graph, plan, one_row, 8) == plan.sizes  # the static estimate, confirmed by the trace


def test_a_trace_that_contradicts_the_static_shape_means_the_whole_batch_is_traced() -> None:
    graph = _graph()
    plan = fetch_plan(graph, [(0, 8)], 1 << 30)
    one_row = {name: 16 for name in plan.names}
    one_row["relu:0"] = 32  # two rows where one example went in: the first axis is not the batch
    assert scaled_sizes(graph, plan, one_row, 8) is None


@pytest.mark.parametrize("op", ["Where", "Unique", "NonMaxSuppressionV3", "Range"])
def test_a_value_sized_op_keeps_the_full_batch_warm_up(op: str) -> None:
    graph = _graph(op)
    assert not sizes_scale_with_rows(graph, fetch_plan(graph, [(0, 8)], 1 << 30))


def test_an_open_trailing_axis_keeps_the_full_batch_warm_up() -> None:
    graph = _graph(feature_shape=[None, None])
    assert not sizes_scale_with_rows(graph, fetch_plan(graph, [(0, 8)], 1 << 30))


# --------------------------------------------------------------------------- in TensorFlow

PLAIN_RUNS_BOTH_WAYS = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from tracer.artifacts.loader import ArtifactRef
    from tracer.captures.fetch_plan import fetch_plan, refit_sizes
    from tracer.captures.inputs import batches, make_examples
    from tracer.captures.runtime import open_runtime
    from tracer.captures.worker import _plain_runs
    from tracer.runspec import InputSpec, Side

    side = Side(ArtifactRef(sys.argv[1]), inputs=InputSpec(inputs_file=sys.argv[2]))
    runtime = open_runtime(side)
    examples = make_examples(runtime.signature.inputs, 8, 0, side.inputs.inputs_file)
    ranges = batches(examples.count, None)
    out = {}
    for how, plan in (("full", None), ("one", fetch_plan(runtime.opgraph, ranges, side.max_memory))):
        plain = _plain_runs(runtime, examples, ranges, 1, plan)
        refit = fetch_plan(runtime.opgraph, ranges, side.max_memory)
        refit_sizes(refit, plain["sizes"])
        out[how] = {"ops": dict(plain["executed_ops"]), "nodes": plain["executed_nodes"],
                    "sizes": refit.sizes, "latency": plain["latency_ms"],
                    "outputs": {k: np.asarray(v).tolist() for k, v in plain["outputs"][0].items()}}
    print(json.dumps(out))
    """
)


@pytest.mark.slow
def test_the_one_example_warm_up_records_what_the_full_batch_one_records(tmp_path: Path,
                                                                         real_models: dict[str, Path]) -> None:
    """half_plus_two (made by TF 1.12) on 5 examples in one run: the plain runs warmed up on the
    whole batch and on its first example record the same executed ops and nodes (its fused
    conv included), the same tensor sizes and the same outputs; only ``warmup_rows`` differs."""
    x = np.arange(5, dtype=np.float32).reshape(5, 1)
    np.save(tmp_path / "x.npy", x)
    proc = subprocess.run([sys.executable, "-c", PLAIN_RUNS_BOTH_WAYS, str(real_models["half_plus_two"]),
                           str(tmp_path / "x.npy")], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "PYTHONPATH": str(REPO), "TF_ENABLE_ONEDNN_OPTS": "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    full, one = got["full"], got["one"]
    assert full["latency"]["warmup_rows"] == 5 and one["latency"]["warmup_rows"] == 1
    assert one["latency"]["batch_rows"] == full["latency"]["batch_rows"] == 5
    assert one["ops"] == full["ops"] and "_FusedConv2D" in one["ops"]
    assert one["nodes"] == full["nodes"] and one["nodes"]["conv2d/BiasAdd"] == "_FusedConv2D"
    assert one["sizes"] == full["sizes"]
    assert one["outputs"] == full["outputs"] and np.asarray(one["outputs"]["y"]).shape[0] == 5
