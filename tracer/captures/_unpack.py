"""Reading a packed tensor file (format version 2) back into an array; shared by the reader and
the writer (which decodes a residual-coded tensor before the tensor it was predicted from goes).

The manifest that describes a packed file is untrusted (see :mod:`.reader`): every chunk is
checked to lie inside the file and to decompress to exactly the bytes its rows declare, and a
predicted chunk's inputs are read through ``get_input``, which the caller bounds (inputs come
earlier in the manifest, so there is no cycle). Never imports TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ._packed import decompress, predict, xor

__all__ = ["read_packed", "chunk_rows"]

# name, first row, end row (None, None: the whole input) -> the input's values
GetInput = Callable[[str, "int | None", "int | None"], np.ndarray]


def chunk_rows(shape: tuple[int, ...], batch_major: bool, r0: int, r1: int) -> tuple[int, ...]:
    """The shape a chunk's bytes hold: rows ``[r0, r1)`` of a batch-major tensor, else all of it."""
    return (r1 - r0, *shape[1:]) if batch_major else shape


def read_packed(path: Path, record: dict[str, Any], encoding: dict[str, Any], stored: np.dtype,
                get_input: GetInput) -> np.ndarray:
    """The tensor's stored values (a fresh read-only array). Raises ValueError with what is wrong."""
    shape, batch_major = tuple(record["shape"]), bool(record["batch_major"])
    out = np.empty(shape, stored)
    spec = encoding.get("predict")
    with open(path, "rb") as f:
        for r0, r1, offset, nbytes, predicted in encoding["chunks"]:
            f.seek(offset)
            blob = f.read(nbytes)
            if len(blob) != nbytes:
                raise ValueError(f"a chunk at byte {offset} runs past the end of the file")
            rows_shape = chunk_rows(shape, batch_major, r0, r1)
            values = decompress(blob, stored, rows_shape)
            if predicted:
                if spec is None:
                    raise ValueError("a chunk is marked predicted but the record has no prediction")
                rows = (r0, r1) if batch_major else (None, None)
                inputs = [get_input(name, *rows) for name in spec["inputs"]]
                guess = predict(spec, inputs, stored, rows_shape)
                if guess is None:
                    raise ValueError(f"its {spec['op']} prediction cannot be made from its inputs")
                values = xor(values, guess)
            if batch_major:
                out[r0:r1] = values
            else:
                out[...] = values
    out.flags.writeable = False
    return out
