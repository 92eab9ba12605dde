"""The "optimised for inference" export: frozen, batch norms folded by TensorFlow's own tool.

This reproduces what users run before serving (``freeze_graph`` then
``optimize_for_inference``), with TF's real code rather than a re-implementation, so the
folded weights and the renamed nodes are exactly what the tool produces in this TF version.

What ``optimize_for_inference`` does to this detector in TF 2.21 (read from its source and
checked on the output): ``fold_batch_norms`` handles ``FusedBatchNormV3`` but needs the conv
weights and the four BN parameters as ``Const`` inputs, hence freezing first and
``remove_training_nodes`` splicing out every ``<variable>/read`` Identity. For each block it
- removes ``blockN/conv/weights`` and the four ``blockN/bn/*`` parameter Consts (the last
  pass, ``fuse_resize_and_conv``, drops nodes nothing reads any more),
- adds ``blockN/conv/Conv2D_weights`` (weights x gamma/sqrt(var+eps), per output channel) and
  ``blockN/conv/Conv2D_bn_offset`` (beta - mean x gamma/sqrt(var+eps)),
- keeps ``blockN/conv/Conv2D`` (now reading the scaled weights), and
- replaces ``blockN/bn/FusedBatchNormV3`` by a ``BiasAdd`` *of the same name*.
Freezing turns the dense and head variables into Consts of the same name (VariableV2 -> Const).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from .tf1_detector import fresh_session, output_node_names, signature, write_savedmodel

__all__ = ["NodeDiff", "fold_graph_def", "export_folded"]


@dataclass(frozen=True)
class NodeDiff:
    """Node-level difference between the faithful inference graph and the folded one."""

    removed: tuple[str, ...]
    added: tuple[str, ...]
    op_changed: tuple[tuple[str, str, str], ...]
    """(name, op before, op after) for nodes that kept their name but not their op."""

    def lines(self) -> list[str]:
        """Human-readable diff, one node per line, for the generator's log and the README."""
        out = [f"- {name}" for name in self.removed]
        out += [f"+ {name}" for name in self.added]
        out += [f"~ {name}: {before} -> {after}" for name, before, after in self.op_changed]
        return out


def _diff(before: Any, after: Any) -> NodeDiff:
    ops_before = {node.name: node.op for node in before.node}
    ops_after = {node.name: node.op for node in after.node}
    return NodeDiff(
        removed=tuple(sorted(set(ops_before) - set(ops_after))),
        added=tuple(sorted(set(ops_after) - set(ops_before))),
        op_changed=tuple(
            (name, ops_before[name], ops_after[name])
            for name in sorted(set(ops_before) & set(ops_after))
            if ops_before[name] != ops_after[name]
        ),
    )


def fold_graph_def(tf: ModuleType, sess: Any) -> tuple[Any, NodeDiff]:
    """Freeze ``sess``'s graph and fold its batch norms; return the GraphDef and what changed.

    The diff is taken against the unfrozen graph pruned to the same outputs
    (``extract_sub_graph``): the inference part of the faithful export, without the
    save/restore and initialiser nodes that no tool compares.
    """
    from tensorflow.python.tools import optimize_for_inference_lib  # noqa: PLC0415 - TF-only

    outputs = output_node_names()
    frozen = tf.compat.v1.graph_util.convert_variables_to_constants(
        sess, sess.graph.as_graph_def(), outputs
    )
    folded = optimize_for_inference_lib.optimize_for_inference(
        frozen, ["images"], outputs, tf.float32.as_datatype_enum
    )
    pruned = tf.compat.v1.graph_util.extract_sub_graph(sess.graph.as_graph_def(), outputs)
    return folded, _diff(pruned, folded)


def export_folded(tf: ModuleType, ckpt_prefix: Path, path: Path) -> NodeDiff:
    """Restore the checkpoint (via its .meta), fold, and export the result as a SavedModel."""
    with fresh_session(tf) as (_graph, sess):
        meta_path = f"{ckpt_prefix}.meta"
        saver = tf.compat.v1.train.import_meta_graph(meta_path, clear_devices=True)
        saver.restore(sess, str(ckpt_prefix))
        folded, diff = fold_graph_def(tf, sess)
    with fresh_session(tf) as (graph, sess):
        tf.graph_util.import_graph_def(folded, name="")
        images = graph.get_tensor_by_name("images:0")
        outputs = {name.split("/", 1)[1]: graph.get_tensor_by_name(f"{name}:0")
                   for name in output_node_names()}
        write_savedmodel(tf, sess, path, signature(tf, images, outputs))
    return diff
