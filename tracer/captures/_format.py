"""The on-disk format shared by the capture writer and reader: dtypes, ``.npy`` files, fsync.

Everything here is about bytes on disk, so the writer (``store``) and the reader (``reader``)
cannot disagree about them. Like the rest of the store it never imports TensorFlow.
"""

from __future__ import annotations

import io
import os
import re
import tokenize
from pathlib import Path

import numpy as np

from ..errors import TftraceError

FORMAT = "tftrace-capture"
FORMAT_VERSION = 2  # 2: packed (zstd, predicted) tensor files and values kept in the artifact; 1 still read
MANIFEST = "manifest.json"
TENSORS = "tensors"
# Values kept apart from the graph's tensors (in TENSORS too), each group in a manifest field of its own
# (key -> record), with the words its files are named by: the plain runs' outputs, by signature key; the
# values of the variables the runs write, by op, as the model loaded them (read before any run wrote them).
APART = {"plain_outputs": "plain output", "loaded_values": "loaded value"}
MAX_TENSOR_BYTES = 2**40  # a record declaring more is damaged or hostile, not a real tensor
STRING = "string"
RERUN = "re-run the capture with --force"
# Variables whose values a checkpoint-restoring artifact holds: kept by digest from this size on
# (smaller ones, a bias or a batch norm's vectors, are stored: predictions read them).
DIGEST_OPS = frozenset({"VariableV2", "VariableV1", "Variable"})
MIN_DIGEST_BYTES = 16 << 10

# Plain numpy dtypes, stored as they are.
NATIVE = frozenset(
    "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 "
    "float16 float32 float64 complex64 complex128".split()
)
# ml_dtypes types that TensorFlow hands out: stored as the same-width unsigned int, because a
# reader may not have ml_dtypes; read back widened to a dtype every numpy has, exactly.
EXTENDED: dict[str, tuple[str, str]] = {
    "bfloat16": ("u2", "float32"),
    "float8_e4m3fn": ("u1", "float32"),
    "float8_e4m3fnuz": ("u1", "float32"),
    "float8_e4m3b11fnuz": ("u1", "float32"),
    "float8_e5m2": ("u1", "float32"),
    "float8_e5m2fnuz": ("u1", "float32"),
    "int4": ("u1", "int8"),
    "uint4": ("u1", "uint8"),
}
STORED_DTYPE = re.compile(r"[<>|=]([biufcS])([0-9]{1,9})")  # a string as wide as 999,999,999 bytes


class Unstorable(Exception):
    """Why an array cannot be stored; the writer records it as uncaptured instead."""


def to_storage(arr: np.ndarray) -> tuple[str, np.ndarray]:
    """Return the logical dtype name and the array as it is written to disk."""
    name = arr.dtype.name
    if name in NATIVE:
        return name, arr
    if name in EXTENDED:
        return name, arr.view(EXTENDED[name][0])
    if arr.dtype.kind in "SUO":
        return STRING, _as_fixed_bytes(arr)
    raise Unstorable(f"dtype {name} cannot be stored in a capture")


def storage_nbytes(arr: np.ndarray) -> int:
    """The bytes ``arr`` takes once stored (:func:`to_storage`), known before it is converted.

    A fetched string tensor is an array of Python objects: its ``nbytes`` counts pointers, and
    TensorFlow's step statistics count only its header, while the capture stores it fixed-width,
    every element as wide as the longest (a ``[2048]`` tensor with one 917 KB string is 1.8 GB).
    So strings are sized by their contents' lengths, the larger of the fixed-width size and the
    contents, and checked against --max-memory before anything is converted or written."""
    if arr.dtype.kind != "O":
        return int(arr.nbytes)  # a unicode array's 4 bytes a character bound its UTF-8
    lengths = [len(v) if isinstance(v, (bytes, str)) else 0 for v in arr.ravel().tolist()]
    return string_storage_nbytes(len(lengths), sum(lengths), max(lengths, default=0))


def string_storage_nbytes(count: int, total: int, widest: int) -> int:
    """The bytes a string tensor of ``count`` elements, ``total`` bytes in all and its longest
    ``widest`` bytes, takes as :func:`to_storage` stores it (fixed-width): what
    :func:`storage_nbytes` says of it once fetched, known from three numbers before it is."""
    return max(count * max(1, widest), total)


def _as_fixed_bytes(arr: np.ndarray) -> np.ndarray:
    """Strings as fixed-width ``S`` (mmap-able, no pickle); refuse what that would corrupt."""
    if arr.dtype.kind == "S":
        return arr
    if arr.dtype.kind == "U":
        return np.char.encode(arr, "utf-8")
    values = arr.ravel().tolist()
    if not all(isinstance(v, bytes) for v in values):
        kinds = sorted({type(v).__name__ for v in values if not isinstance(v, bytes)})
        raise Unstorable(f"object tensor holding {', '.join(kinds)} values cannot be stored")
    if any(v.endswith(b"\0") for v in values):
        raise Unstorable("a string value ends in a NUL byte, which fixed-width storage drops")
    return np.array(values, dtype="S").reshape(arr.shape) if values else np.zeros(arr.shape, "S1")


def widens(dtype_name: str) -> bool:
    """Whether a tensor of ``dtype_name`` is read back as other values than it is stored as
    (:func:`widen`): bfloat16 and the other ml_dtypes, stored as unsigned ints (:data:`EXTENDED`)."""
    return dtype_name in EXTENDED


def widen(stored: np.ndarray, dtype_name: str) -> np.ndarray:
    """Turn stored bits back into numbers; bfloat16 -> float32 is exact (a 16-bit shift)."""
    if not widens(dtype_name):
        return stored
    if dtype_name == "bfloat16":
        return (stored.astype(np.uint32) << 16).view(np.float32)
    try:
        import ml_dtypes  # noqa: PLC0415 - only needed for rare float8/int4 captures
    except ImportError as exc:
        raise TftraceError(
            f"reading a {dtype_name} tensor needs the ml_dtypes package", "pip install ml_dtypes"
        ) from exc
    return stored.view(getattr(ml_dtypes, dtype_name)).astype(EXTENDED[dtype_name][1])


# --------------------------------------------------------------------------- .npy files


def bitwise_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Same dtype, shape and bytes (NaN payloads and -0.0 included); never for object arrays,
    whose bytes are pointers (TensorFlow hands out strings as objects; stored, they are fixed bytes)."""
    if a.dtype != b.dtype or a.shape != b.shape or a.dtype.kind == "O":
        return False
    width = next(w for w in (8, 4, 2, 1) if a.dtype.itemsize % w == 0)  # compare words, not bytes: faster
    bits = [np.ascontiguousarray(x).reshape(-1).view(f"u{width}") for x in (a, b)]
    return bool(np.array_equal(*bits))


def npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """The ``.npy`` header for a C-order array, so a file can be preallocated and filled later."""
    buf = io.BytesIO()
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(buf, header)
    return buf.getvalue()


def write_at(path: Path, offset: int, arr: np.ndarray) -> None:
    """Write an array's bytes into an existing file at ``offset`` (open, write, close)."""
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(np.ascontiguousarray(arr).reshape(-1).view(np.uint8).data)


def open_npy(path: Path, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Memory-map a ``.npy`` read-only after checking its header agrees with what we expect.

    The check comes first so a hostile or truncated file can never make us allocate or map
    something other than the (already bounded) declared shape.
    """
    fmt = np.lib.format
    with open(path, "rb") as f:
        try:
            version = fmt.read_magic(f)
            if version == (1, 0):
                hshape, fortran, hdtype = fmt.read_array_header_1_0(f)
            elif version == (2, 0):
                hshape, fortran, hdtype = fmt.read_array_header_2_0(f)
            else:
                raise ValueError(f"unsupported .npy version {version}")
        except (ValueError, SyntaxError, TypeError, tokenize.TokenError, RecursionError) as exc:
            # numpy parses the header dict with tokenize and ast.literal_eval: a damaged header
            # raises any of these, never a single documented type
            raise damaged(path.parent.parent, f"{path.name} is not a valid .npy file ({str(exc)[:200]})") from exc
        offset, size = f.tell(), os.fstat(f.fileno()).st_size
    nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if tuple(hshape) != shape or fortran or hdtype != dtype or size - offset != nbytes:
        raise damaged(
            path.parent.parent,
            f"{path.name} holds {hdtype} {tuple(hshape)} in {size - offset} bytes but the manifest "
            f"declares {dtype} {shape} in {nbytes} bytes",
        )
    if nbytes == 0:
        return np.zeros(shape, dtype)
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape)


def fsync(path: Path) -> None:
    """Make a file's (or a directory's entries') bytes durable; directories only where POSIX allows."""
    if path.is_dir() and not hasattr(os, "O_DIRECTORY"):
        return
    fd = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if path.is_dir() else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def damaged(root: Path, detail: str) -> TftraceError:
    """The one error for a capture whose manifest or files cannot be trusted."""
    return TftraceError(
        f"damaged capture at {root}: {detail}", f"{RERUN}; capture directories are not meant to be edited"
    )


def storage_matches(dtype_name: str, kind: str, itemsize: int) -> bool:
    """Whether a stored dtype (kind + itemsize, from the ``.npy`` descr) can hold ``dtype_name``."""
    if dtype_name == STRING:
        return kind == "S" and itemsize >= 1
    want = np.dtype(EXTENDED[dtype_name][0]) if dtype_name in EXTENDED else np.dtype(dtype_name)
    return kind == want.kind and itemsize == want.itemsize
