"""TF1 graphs built with TF2's control flow: lower each ``If`` and ``While`` to the ops it runs.

TF1 code run on TensorFlow 2 with only ``tf.compat.v1.disable_eager_execution()`` (not
``disable_v2_behavior()``) builds its ``tf.cond`` and ``tf.while_loop`` as functional ops: one
``If``/``StatelessIf`` node whose branches are functions of the graph's library, one
``StatelessWhile`` for a ``dynamic_rnn``. Its checkpoint's ``.meta`` holds them so. Traced as
they stand, each is one opaque op: a training-mode batch norm inside ``bn1/cond`` is invisible,
so a batch-1-against-8 difference it causes reads as that op's own kernel differing.

TensorFlow does not run them so either: before a session runs such a graph, its lowering pass
replaces each one whose ``_lower_using_switch_merge`` attribute is set with Switch/Merge (a
cond) or Enter/Exit frames (a loop), inlining the functions. This module asks Grappler's
function optimizer for the same rewrite once, when the artifact loads, the way the TF2 SavedModel
path inlines its signature with ``lower_control_flow=True`` (:mod:`.tf2_inline`): every op the
model runs is then a node tftrace can fetch, compare and isolate. The nodes outside the functional
ops are preserved as they are, names included (the signature, the saver and the initialisers
refer to them), and the lowered op keeps its name for its outputs.

Grappler takes its time on a large graph (0.5 s for 200 conds, ``bench/lowering_notes.md``), and
one ``compare`` or ``diagnose`` loads a side in many processes: the parent, each capture, each
replay, each timing child. The first to lower a graph leaves the result in the command's folder
(:mod:`.lowered_folder`), under the hash of what was lowered, what was kept and the TensorFlow
that lowered it; the others read it back instead of asking Grappler again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

from .._tf import tf
from ..errors import TftraceError
from ..safewrite import write_file
from .lowered_folder import lowered_folder

__all__ = ["FUNCTIONAL_CONTROL_FLOW", "functional_control_flow", "lower_control_flow"]

FUNCTIONAL_CONTROL_FLOW = frozenset({"If", "StatelessIf", "While", "StatelessWhile", "Case", "StatelessCase"})
MAX_PASSES = 4  # Grappler calls at most, while functional ops remain


def _cache_path(meta_graph: Any, named: AbstractSet[str]) -> Path | None:
    folder = lowered_folder()
    if folder is None:
        return None
    digest = hashlib.sha256()
    for part in (tf().__version__, tf().version.GIT_VERSION, "\0".join(sorted(named))):
        digest.update(part.encode("utf-8") + b"\0")
    digest.update(meta_graph.SerializeToString(deterministic=True))
    return Path(folder) / f"{digest.hexdigest()}.pb"


def _read_cached(path: Path | None, named: AbstractSet[str]) -> Any | None:
    """The GraphDef another process of this command lowered from the same graph; None where there
    is none, or it cannot be read, or it still holds functional control flow (then lower again)."""
    if path is None or not path.is_file():
        return None
    from tensorflow.core.framework import graph_pb2  # noqa: PLC0415 - comes with TF

    graph_def = graph_pb2.GraphDef()
    try:
        graph_def.ParseFromString(path.read_bytes())
    except Exception:  # noqa: BLE001 - a cut or foreign file: lowering again is always right
        return None
    if not graph_def.node or any(name not in named for name in functional_control_flow(graph_def)):
        return None
    return graph_def


def functional_control_flow(graph_def: Any) -> list[str]:
    """The graph's top-level functional control-flow nodes that TensorFlow lowers before it runs
    them (their ``_lower_using_switch_merge`` attribute is true), in the graph's order."""
    return [node.name for node in graph_def.node
            if node.op in FUNCTIONAL_CONTROL_FLOW and _lowered_at_run_time(node)]


def lower_control_flow(meta_graph: Any, location: str, named: AbstractSet[str] = frozenset()) -> tuple[Any, str | None]:
    """``meta_graph`` with its functional control flow lowered (a copy), and a note saying so; the
    same object and None when it has none to lower. A lowered op's outputs become other nodes'
    (it stays as a NoOp), so one whose output is ``named`` (a signature output, ``--outputs``) is
    left as it stands, and the tensor keeps its name."""
    functional = [name for name in functional_control_flow(meta_graph.graph_def) if name not in named]
    if not functional:
        return meta_graph, None
    from tensorflow.core.protobuf import meta_graph_pb2  # noqa: PLC0415 - comes with TF

    cached = _cache_path(meta_graph, named)
    graph_def = _read_cached(cached, named)
    if graph_def is None:
        graph_def = _lowered(meta_graph, location, named, functional)
        if cached is not None:
            write_file(cached, graph_def.SerializeToString())  # whole or not at all
    result = meta_graph_pb2.MetaGraphDef()
    result.CopyFrom(meta_graph)
    result.graph_def.CopyFrom(graph_def)
    return result, (f"{len(functional)} functional control-flow op{'s' if len(functional) > 1 else ''} "
                    f"({', '.join(functional[:3])}{', ...' if len(functional) > 3 else ''}) lowered to the "
                    "Switch/Merge and loop-frame ops TensorFlow runs them as, so that the ops inside are traced")


def _lowered(meta_graph: Any, location: str, named: AbstractSet[str], functional: list[str]) -> Any:
    """Grappler's function optimizer on ``meta_graph``: its GraphDef with ``functional`` lowered."""
    from tensorflow.core.protobuf import config_pb2, meta_graph_pb2  # noqa: PLC0415 - comes with TF
    from tensorflow.python.grappler import tf_optimizer  # noqa: PLC0415 - the converter's own call

    config = config_pb2.ConfigProto()
    rewrites = config.graph_options.rewrite_options
    rewrites.min_graph_nodes = -1  # a small graph too
    rewrites.optimizers.append("function")  # inline the functions, lower If/While: nothing else
    # one pass a call, not Grappler's default two: the second found nothing left to do on a graph of
    # 200 conds (15,018 nodes) and took a quarter of the 0.7 s. One pass lowered conds nested in a
    # branch and in a loop body too (tests/test_lowered_control_flow.py); should one ever be left,
    # the graph goes through again rather than being refused
    rewrites.meta_optimizer_iterations = rewrites.ONE
    graph_def, left = meta_graph.graph_def, functional
    for _ in range(MAX_PASSES):
        asked = meta_graph_pb2.MetaGraphDef()
        asked.CopyFrom(meta_graph)
        asked.graph_def.CopyFrom(graph_def)
        preserved = meta_graph_pb2.CollectionDef()  # Grappler leaves its fetch nodes, named here, as they are
        lowered = set(left)
        preserved.node_list.value.extend(n.name for n in graph_def.node if n.name not in lowered)
        asked.collection_def["train_op"].CopyFrom(preserved)
        try:
            graph_def = tf_optimizer.OptimizeGraph(config, asked)
        except Exception as exc:  # noqa: BLE001 - Grappler raises TF's errors of several kinds
            raise TftraceError(
                f"TensorFlow could not lower the functional control flow of {location} "
                f"({', '.join(functional[:3])}{' ...' if len(functional) > 3 else ''}): {type(exc).__name__}: "
                f"{str(exc)[:300]}",
                "export the model with tf.compat.v1.disable_v2_behavior() (TF1 control flow), "
                "or give its frozen GraphDef or a SavedModel",
            ) from exc
        left = [name for name in functional_control_flow(graph_def) if name not in named]
        if not left:
            break
    if left:
        raise TftraceError(
            f"TensorFlow left the functional control flow of {location} unlowered ({', '.join(left[:3])})",
            "export the model with tf.compat.v1.disable_v2_behavior() (TF1 control flow)",
        )
    return graph_def


def _lowered_at_run_time(node: Any) -> bool:
    """TensorFlow's lowering pass lowers a functional op only where this attribute is true (TF2's
    graph building sets it; an op built for XLA or a TPU leaves it out, and runs as it stands)."""
    attr = node.attr.get("_lower_using_switch_merge")
    return bool(attr is not None and attr.b)
