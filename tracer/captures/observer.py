"""The observer effect: what fetching every tensor changed about the run it observed.

Fetching a tensor keeps Grappler and oneDNN from fusing the op that produces it, so the
instrumented run can execute other kernels than the plain one. Never hidden: the manifest
records both runs' executed op types and how far the outputs moved between them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..opgraph import OpGraph
from ..optypes import changes_state

__all__ = ["observer_effect", "stateful_ops"]

def stateful_ops(opgraph: OpGraph) -> list[str]:
    """Ops of the inference subgraph that change state a later run sees (a counter, a running
    statistic: the model then answers differently on every run because of its state, not because
    of observation or nondeterminism), in topological order. A fed op never runs: a queue or an
    iterator whose dequeued tensor is the side's input changes nothing."""
    fed = opgraph.fed_ops()
    return [op for op in opgraph.topo_order() if op not in fed and changes_state(opgraph.op_type(op))]


def _max_abs_diff(a: np.ndarray, b: np.ndarray | None) -> tuple[bool, float | None]:
    """(identical, max |a - b| where both are finite); the difference is None when it cannot be
    a number: missing or reshaped output, strings, or NaN/inf in different places."""
    if b is None or a.shape != b.shape:
        return False, None
    if a.dtype.kind not in "biufc" or b.dtype.kind not in "biufc":
        return bool(np.array_equal(a, b)), None
    wide_a, wide_b = a.astype(np.complex128), b.astype(np.complex128)  # exact for every numeric dtype TF returns
    if np.array_equal(wide_a, wide_b, equal_nan=True):
        return True, 0.0
    finite = np.isfinite(wide_a)
    if not np.array_equal(finite, np.isfinite(wide_b)) or not np.array_equal(wide_a[~finite], wide_b[~finite], equal_nan=True):
        return False, None
    return False, float(np.max(np.abs(wide_a[finite] - wide_b[finite]), initial=0.0))


def observer_effect(outputs: dict[str, Any], opgraph: OpGraph, plain: dict, instrumented: dict) -> dict:
    """How much fetching everything moved the outputs, and which executed ops it changed."""
    diffs: dict[str, float | None] = {}
    identical = True
    for key in outputs:
        worst: float | None = 0.0
        for run_plain, run_inst in zip(plain["outputs"], instrumented["outputs"]):
            same, diff = _max_abs_diff(np.asarray(run_plain[key]), run_inst.get(key))
            identical = identical and same
            worst = None if diff is None or worst is None else max(worst, diff)
            if not same and diff is None:
                break
        diffs[key] = worst
    ops_plain, ops_inst = plain["executed_ops"], instrumented["executed_ops"]
    state = stateful_ops(opgraph)
    return {
        "stateful_ops": state,
        "explained_by_state": bool(state) and not identical,
        "outputs_identical": identical,
        "outputs_max_abs_diff": diffs,
        "executed_ops": {"plain": dict(sorted(ops_plain.items())), "instrumented": dict(sorted(ops_inst.items()))},
        "only_in_plain": sorted(set(ops_plain) - set(ops_inst)),
        "only_in_instrumented": sorted(set(ops_inst) - set(ops_plain)),
        "executed_nodes_plain": _renamed_at_runtime(opgraph, plain["executed_nodes"]),
        "executed_nodes_instrumented": _renamed_at_runtime(opgraph, instrumented["executed_nodes"]),
    }


def _renamed_at_runtime(opgraph: OpGraph, executed: dict[str, str]) -> dict[str, str]:
    """Executed nodes whose op type is not the graph's (fusions, oneDNN, XLA) or that are new."""
    return {
        name: op
        for name, op in sorted(executed.items())
        if name not in opgraph or opgraph.op_type(name) != op
    }
