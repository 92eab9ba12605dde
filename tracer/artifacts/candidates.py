"""What a graph without a signature probably takes and returns: the candidates a user is offered.

A TF1 training checkpoint's ``.meta`` holds the inference ops and everything around them: the
optimiser's updates and the gradients they apply, moving-average updates, initialisers, the
saver, summaries. A user choosing ``--outputs`` wants a prediction (probabilities, logits, a
detector's boxes), perhaps the loss; never a training update, which fetching would run. Those are
told apart by what the ops do, read from TensorFlow's op registry (:mod:`tracer.optypes`), not by
their names: an op that writes a variable, an op computed only for such writes, and an op that
waits on an optimiser's update are no model output (:func:`training_ops`). The scopes TF1's
helpers put their bookkeeping in (``save/``, ``init``, ``gradients/``) are left out too, for the
ops no type tells apart (the saver's filename placeholder).
"""

from __future__ import annotations

import re
from typing import Any

from ..opgraph_records import NOT_FETCHABLE_DTYPES
from ..optypes import (BOOKKEEPING_OPS, EXIT_OPS, FRAME_OPS, PLACEHOLDER_OPS, REF_PASSING_OPS, SHAPE_OPS, SOURCE_OPS,
                       VARIABLE_OPS, applies_gradients, changes_state)

__all__ = ["candidates", "training_ops"]

# ``Func/``: where TensorFlow's inliner puts a lowered cond's or loop's plumbing (:mod:`.lowering`)
BOOKKEEPING_SCOPE = re.compile(
    r"^(Func/)?(save|init|init_all_tables|gradients|report_uninitialized_variables|global_step)(_\d+)?(/|$)"
)
# what lowering a TF1 graph's If/While adds (:mod:`.lowering`): the inlined branch's input and output
# Identities (``Func/…``) and the marker of the branch that ran (``…/branch_executed/_9``); a dead
# branch's input is a leaf, but no model output
LOWERING_PLUMBING = re.compile(r"^Func/|/branch_executed/_\d+$")


def candidates(by_name: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The placeholders (and the queues and iterators a graph without one dequeues its examples
    from, :data:`SOURCE_OPS`), and the last ops computed from a given set of them — ops no reader
    extends without adding another placeholder (a prediction, read only by a loss that also needs
    the labels, is one; so is a sink). Only ops whose *values* come from a placeholder count: a
    Shape, a constant or a weight regulariser computes nothing from the input. Training,
    save/restore, initialisation and summaries are left out (:func:`training_ops`, bookkeeping
    op types). Best first: what keeps a value per example (a loss reduced to one number lies
    deeper than the prediction but is no model output), then what holds floating-point numbers (a
    prediction, not a loop's counter or a cond's flag), then what lies deeper in the graph, then
    what needs fewer placeholders (a prediction needs the images, a per-example loss the labels
    too). Depth comes before the count of placeholders: the tutorial's ``probs`` needs ``x``,
    ``keep_prob`` and ``is_training``, and the conv that only ``x`` reaches is no output."""
    training = training_ops(by_name)
    useful = {name: op for name, op in by_name.items() if name not in training and not _bookkeeping(op)}
    inputs = [name for name, op in useful.items() if op.type in PLACEHOLDER_OPS]
    inputs += [name for name, op in by_name.items() if op.type in SOURCE_OPS and _read_by(op, useful)]
    needs: dict[str, frozenset[str]] = {}
    depth: dict[str, int] = {}
    changed = True
    while changed:  # creation order is producers first, but for a loop's back edge: repeat until stable
        changed = False
        for op in by_name.values():
            if op.name in inputs:
                needs[op.name], depth[op.name] = frozenset([op.name]), 0
                continue
            ins = [] if op.type in SHAPE_OPS else [t.op.name for t in op.inputs]
            now = frozenset().union(*(needs.get(i, frozenset()) for i in ins))
            changed |= now != needs.get(op.name)
            needs[op.name] = now
            depth.setdefault(op.name, 1 + max((depth.get(i, 0) for i in ins), default=0))  # first pass: no cycle
    extended = {t.op.name for op in useful.values() for t in op.inputs
                if op.type not in SHAPE_OPS and needs.get(op.name) == needs.get(t.op.name)}
    in_loops = _in_while_frames(by_name)  # a loop's body and back edges cannot be fetched: its Exits can
    ranked = sorted(
        (_is_scalar(op), not _floating(op), -depth[name], len(needs[name]), name)
        for name, op in useful.items()
        if needs.get(name) and name not in inputs and name not in extended and op.outputs
        and op.type not in VARIABLE_OPS and name not in in_loops and not _handle(op)
        and not LOWERING_PLUMBING.search(name)
    )
    return inputs, [name for *_, name in ranked]


def training_ops(by_name: dict[str, Any]) -> set[str]:
    """The ops of a graph that train rather than infer:

    - ops that write state (:func:`_writes`): optimiser updates (``ApplyMomentum``,
      ``ResourceApplyAdam``), assignments (a moving average's ``AssignSub``, the global step's
      ``AssignAdd``, an initialiser's or a restore's ``Assign``);
    - ops computed only for them: every op that reads one of their values is one of them (a
      Shape read carries no value): the gradients an optimiser applies, a moving average's decay
      arithmetic, Adam's beta powers, an initialiser's random values, a learning-rate placeholder;
    - ops that wait on an optimiser's update, through data or control edges: fetching one runs a
      training step (slim's ``train_op``: the loss, with a control dependency on the update).

    A batch norm that updates its moving averages as it runs (``updates_collections=None``) is
    still inference: its output waits on an assignment, not on an optimiser."""
    ops = list(by_name.values())
    writes: dict[str, bool] = {}  # op type -> whether it writes (the registry's OpDef, read once a type)
    out = {op.name for op in ops if writes.setdefault(op.type, _writes(op))}
    changed = True
    while changed:  # consumers come after their producers, but for a loop's back edge: repeat until stable
        changed = False
        for op in reversed(ops):
            if op.name in out:
                continue
            readers = [c for t in op.outputs for c in t.consumers() if c.type not in SHAPE_OPS]
            if readers and all(c.name in out for c in readers):
                out.add(op.name)
                changed = True
    waiting: set[str] = set()
    changed = True
    while changed:
        changed = False
        for op in ops:
            if op.name not in waiting and (applies_gradients(op.type) or any(
                    t.op.name in waiting for t in op.inputs) or any(c.name in waiting for c in op.control_inputs)):
                waiting.add(op.name)
                changed = True
    return out | waiting


def _writes(op: Any) -> bool:
    """Whether an op writes state: its type is one that does (:func:`tracer.optypes.changes_state`),
    or its registered OpDef takes a variable as a TF1 ref (``is_ref``, not a string handle of a TF1
    queue or table) and it is no op that only passes the reference on (``RefSwitch``): what
    TensorFlow registers and this list does not yet name (a newer release's, a custom op) is
    told by its OpDef."""
    if changes_state(op.type):
        return True
    if op.type in REF_PASSING_OPS:
        return False
    try:
        args = op.op_def.input_arg
    except Exception:  # noqa: BLE001 - an op this TensorFlow does not register has no OpDef to read
        return False
    return any(arg.is_ref and arg.type != STRING_DTYPE for arg in args)


STRING_DTYPE = 7  # DataType DT_STRING: a TF1 queue's, reader's or table's handle (``Ref(string)``), no variable


def _bookkeeping(op: Any) -> bool:
    """Is this op part of saving, restoring, initialising or summarising (so no candidate to trace)?"""
    name = op.name
    return (
        op.type in BOOKKEEPING_OPS
        or bool(BOOKKEEPING_SCOPE.match(name))
        or "/Initializer/" in f"{name}/"
        or name.endswith(("/Read/ReadVariableOp", "/IsInitialized/VarIsInitializedOp"))
    )


def _read_by(op: Any, useful: dict[str, Any]) -> bool:
    """Whether one of ``useful``'s ops reads a value of ``op``."""
    return any(c.name in useful for t in op.outputs for c in t.consumers())


def _handle(op: Any) -> bool:
    """Whether the op's first output is a handle or a variant (a lowered cond's TensorList plumbing):
    no values to trace."""
    return op.outputs[0].dtype.name in NOT_FETCHABLE_DTYPES


def _floating(op: Any) -> bool:
    """Whether the op's first output holds floating-point numbers (a prediction, not a count or a flag)."""
    return op.outputs[0].dtype.is_floating


def _is_scalar(op: Any) -> bool:
    """Whether the op's first output is known to be one number (rank 0)."""
    return op.outputs[0].shape.rank == 0


def _in_while_frames(by_name: dict[str, Any]) -> set[str]:
    """Ops inside a TF1 while loop: reached from an Enter through data and control edges, up to
    (not including) an Exit. Their order of creation is no order of computation (a NextIteration
    feeds a Merge made before it), which once put back edges at the top of the candidate outputs."""
    inside: set[str] = set()
    stack = [op for op in by_name.values() if op.type in FRAME_OPS]
    while stack:
        op = stack.pop()
        if op.name in inside or op.type in EXIT_OPS:
            continue
        inside.add(op.name)
        stack.extend(c for t in op.outputs for c in t.consumers())
        stack.extend(getattr(op, "_control_outputs", []))
    return inside
