"""A training graph, recognised from the graph itself (cause ``training_graph``).

Users commonly hand tftrace the checkpoint ``tf.compat.v1.train.Saver`` wrote during training:
its ``.meta`` is the TRAINING graph. Its batch norms run with ``is_training=True``: they
normalise with the statistics of the examples in the run, so each example's output depends on
which examples share its run (batch 1 against batch N differs, whatever the kernels), and an
inference export (``is_training=False``, the moving averages) computes something else. With
tf-slim's ``updates_collections=None`` (or UPDATE_OPS wired as control inputs of the outputs)
the same runs also update the moving averages, so the values read there are what the runs
before left, not the checkpoint's weights.

None of that is a kernel's choice, an export's folding or other weights: :func:`training_graph`
finds the batch norms in training mode from the report's node attributes, and
:mod:`tracer.causes` says it instead of those. Isolation asks :func:`normalises_by_batch` of each
origin's op on both sides: replayed on identical rows, such an op still differs where the sides do
not normalise over the same batch, and the judge says that (``batch_statistics``), not that its
kernel differs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["normalises_by_batch", "training_batch_norm", "training_graph"]

BATCH_NORM_PREFIX = "FusedBatchNorm"  # FusedBatchNorm, V2, V3: tf.compat.v1.nn.fused_batch_norm, slim, Keras
NAMED = 2  # the batch norms a sentence names before "and N more"


def normalises_by_batch(op_type: object, attrs: Mapping[str, Any] | None) -> bool:
    """Whether an op of ``op_type`` with ``attrs`` (an op graph node's, JSON values) normalises
    each row with the statistics of the whole batch it runs in: a batch norm in training mode.
    Its output then depends on which rows share its run, not on the row alone."""
    return str(op_type or "").startswith(BATCH_NORM_PREFIX) and (attrs or {}).get("is_training") is True


def training_batch_norm(node: dict[str, Any], side: str) -> bool:
    """Whether report node ``node`` is, on ``side`` ("a" or "b"), a batch norm in training mode."""
    op = node.get("op") if side == "a" else node.get("b_op")
    return normalises_by_batch(op, node.get(f"attrs_{side}"))


def _in_training(report: dict[str, Any], side: str) -> list[str]:
    """The side's batch norms in training mode, by A's node names, in the report's order."""
    nodes = report.get("nodes") or {}
    return [name for name, node in nodes.items() if isinstance(node, dict) and training_batch_norm(node, side)]


def _named(names: list[str]) -> str:
    shown = ", ".join(f"`{n}`" for n in names[:NAMED])
    return shown + (f" and {len(names) - NAMED} more" if len(names) > NAMED else "")


def _updates(report: dict[str, Any], side: str) -> str:
    """", and they update their moving averages on every run (`…AssignSubVariableOp`, …)" where the
    side's runs wrote variables (the capture's ``observer_effect.stateful_ops``)."""
    ops = ((report.get("observer_effect") or {}).get(side) or {}).get("stateful_ops") or []
    if not ops:
        return ""
    return (f", and its runs write its variables ({_named([str(o) for o in ops])}), as moving-average updates do, "
            "so a variable read there holds what the runs before left, not the checkpoint's value")


def training_graph(report: dict[str, Any]) -> tuple[str, set[str]] | None:
    """``(evidence, the batch norms)`` when a side's graph is a training graph and a difference
    starts at one of its batch norms in training mode (an origin) whose batch the sides do not
    share: they run other batch sizes, or the other side normalises with its moving averages.
    Two training graphs over the same batches normalise alike: a difference there is the kernels'
    (oneDNN on one side), as isolation says (``own_error``, not ``batch_statistics``). None otherwise."""
    origins = {o.get("node") for o in report.get("origins") or [] if isinstance(o, dict)}
    sides, nodes = report.get("sides") or {}, report.get("nodes") or {}
    for side in ("a", "b"):
        other = "b" if side == "a" else "a"
        batches = [(sides.get(k) or {}).get("batch_size") for k in (side, other)]
        norms = _in_training(report, side)
        unshared = {n for n in norms if batches[0] != batches[1] or not training_batch_norm(nodes.get(n) or {}, other)}
        if not origins & unshared:
            continue
        against = ("the sides run different batch sizes, so the outputs differ"
                   if batches[0] != batches[1] else "it differs")
        inference = [n for n in norms if not training_batch_norm(nodes.get(n) or {}, other)]
        if inference:
            against += f" from {other.upper()}'s inference graph (is_training=False there: the moving averages)"
        whose = f"{side.upper()}'s graph is a training graph: its" if inference else \
            "both sides' graphs are training graphs: their"
        evidence = (f"{whose} batch norms ({_named(norms)}) run with "
                    "is_training=True and normalise with each run's batch statistics, so each example's output "
                    f"depends on which examples share its run{_updates(report, side)}; {against}: the batch norms' "
                    "mode, not their kernel, an export's folding or other weights.")
        return evidence, set(norms)
    return None
