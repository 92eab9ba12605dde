"""What a checkpoint without a graph (no ``.meta``) is, read from its ``.index`` without TensorFlow.

Why: a checkpoint whose ``.meta`` is missing cannot be run, and the fix depends on who wrote it.
A TF1 ``tf.compat.v1.train.Saver`` writes the graph beside the weights unless told not to; a TF2
``tf.train.Checkpoint`` (object-based) never writes one, and its index holds the key
``_CHECKPOINTABLE_OBJECT_GRAPH`` instead. Telling a TF2 user to turn on ``write_meta_graph``
helps nobody, so the refusal says which kind it is. The index is a TensorFlow table (the
LevelDB layout: blocks of prefix-compressed keys, an index block, a 48-byte footer); its keys are
read here in pure Python, so the command line can refuse such a checkpoint before any child
process imports TensorFlow (``tftrace diagnose`` once printed "capturing" first).
"""

from __future__ import annotations

import struct

from ..errors import TftraceError

__all__ = ["OBJECT_GRAPH_KEY", "graphless_checkpoint", "index_keys"]

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"  # what tf.train.Checkpoint writes, and Saver does not
TABLE_MAGIC = 0xDB4775248B80FB57  # tensorflow/core/lib/io/format.h kTableMagicNumber
FOOTER = 48
TRAILER = 5  # a block's type byte and CRC
UNCOMPRESSED = 0


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _block(data: bytes, offset: int, size: int) -> list[tuple[bytes, bytes]]:
    """The (key, value) entries of one uncompressed block; ValueError for anything else."""
    if offset + size + TRAILER > len(data) or data[offset + size] != UNCOMPRESSED:
        raise ValueError("not an uncompressed block")
    block = data[offset:offset + size]
    (restarts,) = struct.unpack_from("<I", block, size - 4)
    end, pos, key, entries = size - 4 - 4 * restarts, 0, b"", []
    while pos < end:
        shared, pos = _varint(block, pos)
        fresh, pos = _varint(block, pos)
        length, pos = _varint(block, pos)
        key = key[:shared] + block[pos:pos + fresh]
        pos += fresh
        entries.append((key, block[pos:pos + length]))
        pos += length
    return entries


def index_keys(data: bytes) -> list[str] | None:
    """Every key of a checkpoint's ``.index`` (the empty header key included), or None when the
    bytes are not an uncompressed TensorFlow table (a caller then cannot tell, and says nothing)."""
    try:
        if len(data) < FOOTER or struct.unpack_from("<Q", data, len(data) - 8)[0] != TABLE_MAGIC:
            return None
        pos = len(data) - FOOTER
        _, pos = _varint(data, pos)  # the metaindex block's handle: unused
        _, pos = _varint(data, pos)
        offset, pos = _varint(data, pos)
        size, _ = _varint(data, pos)
        keys = []
        for _, handle in _block(data, offset, size):
            block_offset, at = _varint(handle, 0)
            block_size, _ = _varint(handle, at)
            keys += [key.decode("utf-8", errors="replace") for key, _ in _block(data, block_offset, block_size)]
        return keys
    except (IndexError, ValueError, struct.error):
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
