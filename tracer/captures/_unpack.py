"""Reading a packed tensor file (format version 2) back into an array; shared by the reader and
the writer (which decodes a residual-coded tensor before the tensor it was predicted from goes).

The manifest that describes a packed file is untrusted (see :mod:`.reader`): every chunk is
checked to lie inside the file and to decompress to exactly the bytes its rows declare, and a
predicted chunk's inputs are read through ``get_input``, which the caller bounds (inputs come
earlier in the manifest, so there is no cycle). Never imports TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ._format import damaged
from ..text import count
from ._packed import CHUNK_BYTES, CODEC, MAX_LEVEL, PREDICTORS, decompress, forms, predict

__all__ = ["read_packed", "iter_packed", "decode_chunk", "chunk_rows", "validate_chunks", "validate_prediction"]

# name, first row, end row (None, None: the whole input) -> the input's values
GetInput = Callable[[str, "int | None", "int | None"], np.ndarray]


def chunk_rows(shape: tuple[int, ...], batch_major: bool, r0: int, r1: int) -> tuple[int, ...]:
    """The shape a chunk's bytes hold: rows ``[r0, r1)`` of a batch-major tensor, else all of it."""
    return (r1 - r0, *shape[1:]) if batch_major else shape


def read_packed(path: Path, record: dict[str, Any], encoding: dict[str, Any], stored: np.dtype,
                get_input: GetInput, rows: tuple[int, int] | None = None) -> np.ndarray:
    """The tensor's stored values, or only rows ``[r0, r1)`` of a batch-major one (decoding only
    the chunks that hold them), as a fresh read-only array. Raises ValueError with what is wrong.

    Each chunk decodes straight into its place in the result; a predicted chunk asks
    ``get_input`` for its inputs' same rows only, so a read never needs a whole input.
    """
    shape, batch_major = tuple(record["shape"]), bool(record["batch_major"])
    first, end = rows if rows is not None and batch_major else (0, shape[0] if batch_major and shape else 1)
    out: np.ndarray | None = None  # made once the first chunk's prediction is: a read holds no buffer while
    spec = encoding.get("predict")  # its inputs are read (they may be predicted, and so on, MAX_LEVEL deep)
    with open(path, "rb") as f:
        for r0, r1, offset, nbytes, predicted in encoding["chunks"]:
            lo, hi = max(r0, first), min(r1, end)
            if batch_major and lo >= hi and r0 != r1:
                continue  # none of the rows asked for
            rows_shape = chunk_rows(shape, batch_major, r0, r1)
            guess = _prediction(spec, predicted, get_input, stored, rows_shape, (r0, r1) if batch_major else None)
            blob = _chunk_bytes(f, offset, nbytes)
            if out is None:
                out = np.empty((end - first, *shape[1:]) if batch_major else shape, stored)
            whole_chunk = not batch_major or (lo, hi) == (r0, r1)
            target = (out[r0 - first : r1 - first] if batch_major else out) if whole_chunk else None
            values = decompress(blob, stored, rows_shape, out=target, guess=guess)
            del blob, guess
            if target is None:
                out[lo - first : hi - first] = values[lo - r0 : hi - r0]
    if out is None:  # no chunk holds a row asked for (an empty tensor)
        out = np.empty((end - first, *shape[1:]) if batch_major else shape, stored)
    out.flags.writeable = False
    return out


def iter_packed(path: Path, record: dict[str, Any], encoding: dict[str, Any], stored: np.dtype,
                get_input: GetInput) -> Iterator[tuple[int, int, np.ndarray]]:
    """The tensor's stored values chunk by chunk, in row order: ``(r0, r1, rows)`` (``(0, 1, all)``
    for a tensor that is not batch-major), each a fresh read-only array. What a reader that
    consumes a tensor once (compare) holds is one chunk, never the tensor. Same checks as
    :func:`read_packed` (the index was validated on open: the chunks cover every row once)."""
    shape, batch_major = tuple(record["shape"]), bool(record["batch_major"])
    with open(path, "rb") as f:
        for chunk in sorted(encoding["chunks"]):
            values = decode_chunk(f, shape, batch_major, chunk, encoding.get("predict"), stored, get_input)
            yield chunk[0], chunk[1], values
            del values  # not held while the next chunk is decoded


def decode_chunk(f: Any, shape: tuple[int, ...], batch_major: bool, chunk: list[int], spec: dict[str, Any] | None,
                 stored: np.dtype, get_input: GetInput) -> np.ndarray:
    """One chunk ``[first_row, end_row, offset, nbytes, predicted]`` of an open packed file, as a
    fresh read-only array (its prediction made from its inputs' same rows first, so they are let
    go before its own bytes are decoded)."""
    r0, r1, offset, nbytes, predicted = chunk
    rows = chunk_rows(shape, batch_major, r0, r1)
    guess = _prediction(spec, predicted, get_input, stored, rows, (r0, r1) if batch_major else None)
    blob = _chunk_bytes(f, offset, nbytes)
    values = decompress(blob, stored, rows, guess=guess)
    del blob, guess
    values.flags.writeable = False
    return values


def _prediction(spec: dict[str, Any] | None, predicted: Any, get_input: GetInput, stored: np.dtype,
                rows_shape: tuple[int, ...], span: tuple[int, int] | None) -> np.ndarray | None:
    """A predicted chunk's prediction from its inputs' same rows (``span``; None: the whole
    tensor), or None for a chunk stored as it is. Made before the chunk's own bytes are decoded,
    so its inputs are let go first."""
    if not predicted:
        return None
    if spec is None:
        raise ValueError("a chunk is marked predicted but the record has no prediction")
    guess = predict(spec, [get_input(name, *(span or (None, None))) for name in spec["inputs"]], stored, rows_shape)
    if guess is None:
        raise ValueError(f"its {spec['op']} prediction cannot be made from its inputs")
    return guess


def _chunk_bytes(f: Any, offset: int, nbytes: int) -> bytes:
    f.seek(offset)
    blob = f.read(nbytes)
    if len(blob) != nbytes:
        raise ValueError(f"a chunk at byte {offset} runs past the end of the file")
    return blob


def validate_chunks(bad: Any, encoding: Any, shape: list[int], batch_major: Any, itemsize: int, size: int) -> None:
    """A packed file's index: chunks inside the file that cover every row exactly once."""
    if not isinstance(encoding, dict) or encoding.get("codec") != CODEC or not isinstance(encoding.get("chunks"), list):
        raise bad(f"its encoding is not {CODEC} chunks")
    chunks = encoding["chunks"]
    if not all(isinstance(c, list) and len(c) == 5 and all(type(x) is int and x >= 0 for x in c) and c[0] <= c[1] and c[4] <= 1
               for c in chunks):
        raise bad("a chunk is not [first_row, end_row, offset, nbytes, predicted]")
    rows = shape[0] if batch_major is True and shape else 1
    if batch_major is not True and (len(chunks) != 1 or chunks[0][:2] != [0, 1]):
        raise bad("a tensor that is not batch-major must be one chunk [0, 1, ...]")
    # the writer puts at most CHUNK_BYTES of rows in a chunk (one row when a row is larger): a chunk
    # declaring more rows is not one tftrace wrote, and would inflate past that before any check
    # (a decompression bomb: a few KB of zstd declaring a GiB, issue 24)
    row_bytes = max(1, int(np.prod(shape[1:], dtype=object)) * itemsize) if batch_major is True and shape else 0
    most = max(1, CHUNK_BYTES // row_bytes) if row_bytes else 1
    covered = 0
    for r0, r1, offset, nbytes, _ in sorted(chunks):
        if r0 != covered or offset + nbytes > size:
            raise bad(f"chunk of rows {r0}:{r1} overlaps another, leaves rows out or lies outside the file")
        if r1 - r0 > most:
            raise bad(f"chunk of rows {r0}:{r1} holds {(r1 - r0) * row_bytes:,} bytes of rows; tftrace writes at most "
                      f"{count(most, 'row')} of this tensor per chunk ({CHUNK_BYTES:,} bytes, or one row)")
        covered = r1
    if covered != rows:
        raise bad(f"its chunks cover {covered} of {rows} rows")


def validate_prediction(root: Path, tensors: dict[str, Any], levels: dict[str, int], name: str, rec: dict) -> int:
    """A predicted tensor's inputs must be captured tensors recorded before it (so no read ever
    loops), of its dtype, at most MAX_LEVEL predictions deep; returns its depth."""
    spec = (rec.get("encoding") or {}).get("predict")
    if "alias_of" in rec:
        return levels.get(rec["alias_of"], 0)
    if spec is None:
        return 0
    inputs = spec.get("inputs") if isinstance(spec, dict) else None
    if not (isinstance(spec, dict) and spec.get("op") in PREDICTORS and isinstance(spec.get("attrs", {}), dict)
            and isinstance(inputs, list) and all(isinstance(i, str) for i in inputs) and len(inputs) == PREDICTORS[spec["op"]][0]):
        raise damaged(root, f"tensor {name!r}: its prediction {spec!r} is not one tftrace makes")
    form, ulps = spec.get("attrs", {}).get("form"), spec.get("attrs", {}).get("ulps")
    if form is not None and form not in forms(spec):
        raise damaged(root, f"tensor {name!r}: its prediction's arithmetic order {form!r} is not one tftrace knows")
    if ulps is not None and not (isinstance(ulps, str) and set(ulps) <= set("0123456")):
        raise damaged(root, f"tensor {name!r}: its prediction's per-channel steps are not digits 0 to 6")
    for source in inputs:
        if source not in levels or tensors[source].get("stored_dtype") != rec["stored_dtype"]:
            raise damaged(root, f"tensor {name!r} is predicted from {source!r}, which is not a captured tensor "
                                "of its dtype recorded before it")
        if tensors[source].get("values") == "artifact":
            raise damaged(root, f"tensor {name!r} is predicted from {source!r}, whose values are not in the capture")
    level = 1 + max(levels[source] for source in inputs)
    if level > MAX_LEVEL:
        raise damaged(root, f"tensor {name!r} is predicted {level} levels deep, more than {MAX_LEVEL}")
    return level
