"""What a checkpoint without a graph (no ``.meta``) is, read from its ``.index`` without TensorFlow.

Why: a checkpoint whose ``.meta`` is missing cannot be run, and the fix depends on who wrote it.
A TF1 ``tf.compat.v1.train.Saver`` writes the graph beside the weights unless told not to; a TF2
``tf.train.Checkpoint`` (object-based) never writes one, and its index holds the key
``_CHECKPOINTABLE_OBJECT_GRAPH`` instead. Telling a TF2 user to turn on ``write_meta_graph``
helps nobody, so the refusal says which kind it is. The index is a TensorFlow table (the
LevelDB layout: blocks of prefix-compressed keys, each plain or snappy-compressed, an index
block, a 48-byte footer); its keys are read without TensorFlow (:mod:`tracer.artifacts.bundle`),
so the command line can refuse such a checkpoint before any child process imports TensorFlow
(``tftrace diagnose`` once printed "capturing" first; a compressed index was once taken for a
TF1 checkpoint's and told to turn on ``write_meta_graph``).
"""

from __future__ import annotations

import struct

from ..errors import TftraceError
from .bundle import NotReadableHere, table_entries

__all__ = ["OBJECT_GRAPH_KEY", "graphless_checkpoint", "index_keys"]

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"  # what tf.train.Checkpoint writes, and Saver does not


def index_keys(data: bytes) -> list[str] | None:
    """Every key of a checkpoint's ``.index`` (the empty header key included), or None when the
    bytes are no TensorFlow table this reader can read (a caller then cannot tell, and says nothing).
    Read by :mod:`tracer.artifacts.bundle`'s table reader: checksums checked, snappy blocks decompressed."""
    try:
        return [key.decode("utf-8", errors="replace") for key, _ in table_entries(data, "the index")]
    except (NotReadableHere, IndexError, struct.error):
        return None
    except ImportError:  # a child under another environment's Python, without numba for the checksums
        return None


def graphless_checkpoint(prefix: str, index: bytes | None) -> TftraceError:
    """The refusal of checkpoint ``prefix`` whose ``.meta`` is missing, given its ``.index`` bytes
    (None: unreadable): a tf.train.Checkpoint is said to be one, with the export that helps it."""
    meta = f"{prefix}.meta"
    keys = index_keys(index) if index is not None else None
    if keys is not None and OBJECT_GRAPH_KEY in keys:
        return TftraceError(
            f"checkpoint {prefix} is a TF2 object-based checkpoint (tf.train.Checkpoint; its index holds "
            f"{OBJECT_GRAPH_KEY}), which holds weights but no graph ({meta} does not exist, and TF2 never writes one)",
            "rebuild the model in Python, restore this checkpoint into it and export it: tf.saved_model.save(model, "
            "'exported') (Keras 3: model.export('exported')); then give that directory",
        )
    return TftraceError(
        f"checkpoint {prefix} has no graph: {meta} is missing",
        "tftrace needs the .meta file written by tf.compat.v1.train.Saver (write_meta_graph=True); "
        "or give the SavedModel or frozen GraphDef exported from it",
    )
