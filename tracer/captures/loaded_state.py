"""In the capture child: the variables the model's own runs write, read as the model loaded them.

A training graph's batch norms update their moving averages on every run (tf-slim's
``updates_collections=None``, or UPDATE_OPS wired as control inputs of the outputs); a Keras
random layer advances its seed. A captured read of such a variable holds what the runs before it
left, never the weight the artifact holds, so two sides' captured reads cannot tell whether the
artifacts hold different values. Read here once, after the model loaded and before its first run,
the values are kept in the capture (the manifest's ``loaded_values``), and a comparison tells the
weights apart by them (:func:`tracer.comparison.measure.value_source`) while the runs' own writes
stay the model's state.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..opgraph import OpGraph, variable_writes
from ..optypes import VARIABLE_OPS

__all__ = ["written_variables", "read_loaded_values"]


def written_variables(opgraph: OpGraph) -> list[str]:
    """The variable ops of the inference graph that its runs write, in topological order."""
    return [op for op in opgraph.topo_order() if opgraph.op_type(op) in VARIABLE_OPS and variable_writes(opgraph, op)]


def read_loaded_values(session: Any, graph: Any, opgraph: OpGraph) -> dict[str, np.ndarray]:
    """Variable op -> its value now, for the variables the runs write: call it before the first run.
    A variable that cannot be read without running anything else is left out (evidence only)."""
    found: dict[str, np.ndarray] = {}
    for variable in written_variables(opgraph):
        tensor = _plain_read(graph, variable)
        if tensor is None:
            continue
        try:
            found[variable] = np.asarray(session.run(tensor))
        except Exception:  # noqa: BLE001 - not initialised (set at each load) or unreadable: nothing to keep
            continue
    return found


def _plain_read(graph: Any, variable: str) -> Any:
    """A tensor holding ``variable``'s value whose run runs nothing else: a ref variable's own output,
    or a ``ReadVariableOp`` of a resource variable's handle with no control inputs (a read that waits
    on an update would run the update); None where the graph has none."""
    try:
        op = graph.get_operation_by_name(variable)
    except (KeyError, ValueError):
        return None
    if op.type != "VarHandleOp":
        return op.outputs[0]
    reads = [c for c in op.outputs[0].consumers() if c.type == "ReadVariableOp" and not c.control_inputs]
    return min(reads, key=lambda c: c.name).outputs[0] if reads else None
