"""Packed tensor files (format version 2): byte-shuffled zstd chunks, some coded as residuals.

Measured on a ResNet-50 capture (batch 1, 191 MB of float32 activations): byte-shuffled zstd
(level 1) gives 1.24x on dense float32 (the low mantissa bytes are noise) at ~450 MB/s, 1.7x
on ReLU outputs; lz4 1.1x, blosc2 the same as zstd at the cost of a much larger dependency.
What pays far more is that most activations are elementwise functions of other captured
tensors: a BiasAdd, Relu or Add output equals numpy's float32 result bit for bit, and an
inference FusedBatchNorm's differs in the last bits at most. So such a chunk is stored as the
XOR of its bits with that *prediction*: zero where it is exact, a few low bits where not, and
compressed to almost nothing. Decoding computes the same prediction from the inputs (read
first) and XORs the residual back: lossless whatever the prediction was, exact or not, since
the residual is whatever it takes. Never imports TensorFlow.

A chunk is ``[first_row, end_row, offset, nbytes, predicted]`` (rows of the first axis for a
batch-major tensor; ``[0, 1, ...]`` for the whole of any other); its bytes decompress to the
rows' bytes, shuffled (byte ``k`` of every element, then byte ``k + 1``...).
"""

from __future__ import annotations

import functools
import hashlib
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ._format import to_storage

__all__ = ["CODEC", "PACKED_SUFFIX", "compress", "decompress", "predictor_for", "predict", "forms", "choose_form", "digest",
           "MAX_LEVEL", "BN_FORMS"]

CODEC = "zstd"
LEVEL = 1  # level 3 gains <1% here for 40% more time
PACKED_SUFFIX = ".zst"
MAX_LEVEL = 4  # a prediction's chain of predicted inputs, at most: bounds what one read decodes
CHUNK_BYTES = 4 << 20  # rows per chunk so a chunk holds at most this (at least one row)
FLOATS = frozenset({"float16", "float32", "float64"})


def _zstd() -> Any:
    import zstandard  # noqa: PLC0415 - imported where packed files are written or read

    return zstandard


def _shuffled(stored: np.ndarray) -> bytes:
    data = np.ascontiguousarray(stored).reshape(-1).view(np.uint8)
    width = stored.dtype.itemsize
    return data.reshape(-1, width).T.tobytes() if width > 1 else data.tobytes()


def compress(stored: np.ndarray) -> bytes:
    """One chunk's bytes: shuffled by byte position, then zstd with a checksum (a flipped byte is
    refused, never read as other values); thread-safe: a compressor per call.

    An all-zero chunk — the residual of every exact prediction (a BiasAdd, Relu or Add output) —
    is the same frame whatever its dtype: made once per size. Shuffling and compressing a 3 MB
    chunk of zeros ran at ~1.3 GB/s here, the check for zeros at ~40 GB/s."""
    stored = np.ascontiguousarray(stored)  # once: the check and the shuffle read the same bytes
    flat = stored.reshape(-1).view(np.uint8)
    words = flat.view(np.uint64) if flat.size % 8 == 0 else flat
    if not words.any():
        return _zero_frame(flat.size)
    return _compressor().compress(_shuffled(stored))


def _compressor() -> Any:
    return _zstd().ZstdCompressor(level=LEVEL, write_content_size=True, write_checksum=True)


@functools.lru_cache(maxsize=16)
def _zero_frame(nbytes: int) -> bytes:
    """The frame of ``nbytes`` zero bytes (shuffled zeros are zeros)."""
    return _compressor().compress(bytes(nbytes))


def decompress(blob: bytes, dtype: np.dtype, shape: tuple[int, ...], out: np.ndarray | None = None,
               guess: np.ndarray | None = None) -> np.ndarray:
    """A chunk back as an array of ``dtype``/``shape`` (written into ``out`` when given: C-contiguous,
    that shape and dtype); ValueError when its bytes do not decode to exactly that many (a damaged or
    hostile file never allocates more than the declared size; the frame's checksum is verified).
    ``guess``: a predicted chunk's prediction (that dtype and shape), XORed into the residuals it
    stores; for 4-byte elements in the unshuffle's own pass, which saves a pass over the chunk."""
    n = int(np.prod(shape, dtype=object))
    size = n * dtype.itemsize
    zstd = _zstd()
    try:
        declared = zstd.frame_content_size(blob)
        if declared != size:
            raise ValueError(f"a chunk declares {declared} bytes, not {size}")
        raw = zstd.ZstdDecompressor().decompress(blob, max_output_size=size)
    except zstd.ZstdError as exc:
        raise ValueError(f"a chunk does not decompress ({exc})") from exc
    if len(raw) != size:
        raise ValueError(f"a chunk holds {len(raw)} bytes, not {size}")
    result = np.empty(shape, dtype) if out is None else out
    width = dtype.itemsize
    planes = np.frombuffer(raw, np.uint8).reshape(width, n)
    if guess is not None and (guess.dtype != dtype or guess.shape != tuple(shape)):
        raise ValueError(f"a prediction of {guess.dtype} {guess.shape} for a chunk of {dtype} {tuple(shape)}")
    if width == 4 and sys.byteorder == "little":
        words = result.reshape(-1).view(np.uint32)
        _unshuffle(planes, words, None if guess is None else np.ascontiguousarray(guess).reshape(-1).view(np.uint32))
        return result
    target = result.reshape(-1).view(np.uint8).reshape(n, width)
    for k in range(width):  # one byte plane at a time: ~3x faster than a transposed copy
        target[:, k] = planes[k]
    if guess is not None:
        xor(result, guess, out=result)
    return result


def _unshuffle(planes: np.ndarray, words: np.ndarray, guess: np.ndarray | None) -> None:
    """4-byte elements back from their byte planes, XORed with ``guess``'s words where given:
    compiled where numba imports (about 10x faster, :mod:`tracer.captures._unshuffle`), else in
    numpy (another TensorFlow's environment)."""
    try:
        from ._unshuffle import unshuffle4  # noqa: PLC0415 - numba, imported by readers only
    except ImportError:
        _unshuffle4(planes, words)
        if guess is not None:
            np.bitwise_xor(words, guess, out=words)
    else:
        unshuffle4(planes, words, guess)


def _unshuffle4(planes: np.ndarray, words: np.ndarray, step: int = 1 << 16) -> None:
    """4-byte elements back from their byte planes, as ``p0 | p1 << 8 | p2 << 16 | p3 << 24``
    (little-endian), a cache-sized stretch at a time: 1.4x faster than a plane at a time."""
    tmp = np.empty(min(step, words.size), np.uint32)
    for s in range(0, words.size, step):
        w, t = words[s : s + step], tmp[: min(step, words.size - s)]
        np.left_shift(planes[3, s : s + step], 24, out=w, dtype=np.uint32)
        for k in (2, 1):
            np.left_shift(planes[k, s : s + step], 8 * k, out=t, dtype=np.uint32)
            np.bitwise_or(w, t, out=w)
        np.bitwise_or(w, planes[0, s : s + step], out=w, dtype=np.uint32)


def digest(stored: np.ndarray) -> str:
    """sha256 of a tensor's stored bytes (C order), with its stored dtype and shape: equal digests
    mean bitwise-identical tensors."""
    return digest_of_pieces(stored.dtype, stored.shape, [np.ascontiguousarray(stored).reshape(-1).view(np.uint8)])


def digest_of_pieces(stored_dtype: np.dtype, shape: Sequence[int], pieces: Iterable[np.ndarray]) -> str:
    """:func:`digest` of a tensor whose stored bytes come piece by piece (a weight read from its
    checkpoint a few MB at a time, never held whole)."""
    h = hashlib.sha256(f"{np.dtype(stored_dtype).str}{list(shape)}".encode())
    for piece in pieces:
        h.update(piece.data)
    return "sha256:" + h.hexdigest()


def content_digest(array: np.ndarray) -> str:
    """:func:`digest` of a value as a capture stores it: equal to the digest a capture keeps of a
    weight with these values, so a value read elsewhere (a checkpoint's moving average) can be
    matched with a captured weight without storing either."""
    return digest(np.require(to_storage(np.asarray(array))[1], requirements="C"))


# --------------------------------------------------------------------------- predictions

_Fn = Callable[[Sequence[np.ndarray], Mapping[str, Any]], np.ndarray]


def _bn(x: Sequence[np.ndarray], attrs: Mapping[str, Any]) -> np.ndarray:
    """An inference batch norm, in the arithmetic order ``attrs["form"]`` names (see BN_FORMS)."""
    x0, scale, offset, mean, var = x
    eps = np.asarray(attrs.get("epsilon", 1e-3), x0.dtype)
    inv = np.asarray(1, x0.dtype) / np.sqrt(var + eps)
    if attrs.get("form") == "centered_fma" and x0.dtype.itemsize <= 4:
        # oneDNN's: fma((x - mean) * inv, scale, offset); float64 holds the product of two float32
        # exactly, so one rounding to float32 after the add is the fused multiply-add's (but for
        # rare double roundings, which the residual absorbs)
        centered = (x0 - mean) * inv
        flat = centered.reshape(-1, centered.shape[-1]) if centered.ndim else centered.reshape(1, 1)
        step = max(1, (1 << 16) // max(1, flat.shape[1]))  # rows of a float64 stretch of ~512 KiB: the
        wide = np.empty((min(step, len(flat)), flat.shape[1]), np.float64)  # widening never holds a chunk
        for start in range(0, len(flat), step):
            part, w = flat[start : start + step], wide[: min(step, len(flat) - start)]
            np.multiply(part, scale, out=w, dtype=np.float64)
            w += offset
            part[...] = w  # rounds to float32 once, in place
        return centered
    if attrs.get("form") == "centered_scaled":
        # Eigen's (TensorFlow's CPU kernel without oneDNN): (x - mean) * factor + offset, its factor
        # rsqrt(var + eps) * scale from a vectorised rsqrt that can be a few ULPs off the rounded
        # one: those ULPs, one digit per channel ("3" = none), are recorded in attrs["ulps"]
        factor = _stepped(inv, str(attrs.get("ulps", ""))) * scale
        out = x0 - mean
        out *= factor
        out += offset
        return out
    factor = scale * inv
    out = x0 * factor
    out += offset - mean * factor  # in place: the same bits as ``x0 * factor + (...)``, one buffer less
    return out


ULP_STEPS = 3  # the per-channel ULPs "centered_scaled" may step the reciprocal square root by, each way


def _stepped(inv: np.ndarray, ulps: str) -> np.ndarray:
    """``inv`` (positive float32) moved by the recorded ULPs per channel ('0'..'6': -3..+3)."""
    if not ulps:
        return inv
    steps = np.frombuffer(ulps.encode("ascii"), np.uint8).astype(np.int32) - (ord("0") + ULP_STEPS)
    if inv.dtype != np.float32 or steps.shape != inv.shape:
        raise ValueError("the recorded ULPs do not fit the batch norm's channels")
    return (inv.view(np.int32) + steps).view(np.float32)


def _fit_ulps(spec: Mapping[str, Any], inputs: Sequence[np.ndarray], part: np.ndarray) -> dict[str, Any] | None:
    """The attrs of "centered_scaled" that reproduce the most elements of ``part``: per channel,
    the ULP step of the reciprocal square root whose prediction matches most often."""
    x0, scale, offset, mean, var = inputs
    if part.dtype != np.float32 or part.ndim == 0 or scale.shape != part.shape[-1:]:
        return None
    eps = np.asarray(spec.get("attrs", {}).get("epsilon", 1e-3), part.dtype)
    with np.errstate(all="ignore"):
        inv = np.asarray(1, part.dtype) / np.sqrt(var + eps)
        centered = (x0 - mean).reshape(-1, part.shape[-1])
        want = part.reshape(-1, part.shape[-1]).view(np.uint32)
        best, hits = np.zeros(inv.shape, np.int32), np.full(inv.shape, -1)
        for step in sorted(range(-ULP_STEPS, ULP_STEPS + 1), key=abs):  # a tie keeps the smaller step
            factor = (inv.view(np.int32) + step).view(np.float32) * scale
            matched = ((centered * factor + offset).view(np.uint32) == want).sum(axis=0)
            better = matched > hits
            best[better], hits[better] = step, matched[better]
    return {**spec.get("attrs", {}), "form": "centered_scaled",
            "ulps": (best + ord("0") + ULP_STEPS).astype(np.uint8).tobytes().decode("ascii")}


# The arithmetic orders a batch norm kernel is known to use: the first chunk of each tensor is
# predicted in each, and the one that matches most elements is recorded in the spec's attrs
# ("form"; absent: "affine"). Measured on a ResNet-50 capture: with oneDNN on, "affine" matched 53%
# of the elements and "centered_fma" all of them; with it off, "centered_scaled" all of them.
BN_FORMS = ("affine", "centered_fma", "centered_scaled")


PREDICTORS: dict[str, tuple[int, _Fn]] = {  # op type -> (data inputs used, numpy definition)
    "Relu": (1, lambda x, _: np.maximum(x[0], np.asarray(0, x[0].dtype))),
    "Relu6": (1, lambda x, _: np.minimum(np.maximum(x[0], np.asarray(0, x[0].dtype)), np.asarray(6, x[0].dtype))),
    "BiasAdd": (2, lambda x, _: x[0] + x[1]),
    "Add": (2, lambda x, _: x[0] + x[1]),
    "AddV2": (2, lambda x, _: x[0] + x[1]),
    "Sub": (2, lambda x, _: x[0] - x[1]),
    "Mul": (2, lambda x, _: x[0] * x[1]),
    "FusedBatchNorm": (5, _bn),
    "FusedBatchNormV2": (5, _bn),
    "FusedBatchNormV3": (5, _bn),
}


def predictor_for(node: Mapping[str, Any], slot: int) -> dict[str, Any] | None:
    """How output ``slot`` of a graph node (the manifest's op-graph JSON) can be predicted from
    its inputs: ``{"op", "inputs", "attrs"}``, or None. Channels-last only (a bias or a batch
    norm's vectors broadcast over the last axis), inference batch norms only."""
    op = node.get("op")
    if slot != 0 or op not in PREDICTORS:
        return None
    attrs = node.get("attrs") or {}
    if attrs.get("data_format", "NHWC") not in ("NHWC", "NDHWC", b"NHWC") or attrs.get("is_training") is True:
        return None
    count = PREDICTORS[op][0]
    inputs = [i for i in node.get("inputs", []) if not i.startswith("^")][:count]
    if len(inputs) != count:
        return None
    inputs = [i if ":" in i else f"{i}:0" for i in inputs]
    kept = {"epsilon": attrs["epsilon"]} if "epsilon" in attrs and isinstance(attrs["epsilon"], (int, float)) else {}
    return {"op": op, "inputs": inputs, "attrs": kept}


def forms(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The arithmetic orders a prediction may take (more than one: choose on the first chunk)."""
    return BN_FORMS if str(spec.get("op", "")).startswith("FusedBatchNorm") else ()


FORM_SAMPLE_ELEMENTS = 1 << 16  # the leading elements of a first chunk that the forms are tried on


def choose_form(spec: dict[str, Any], inputs: Sequence[np.ndarray], part: np.ndarray) -> np.ndarray | None:
    """Predict ``part`` in each of the spec's forms, record the best in ``spec["attrs"]["form"]``,
    and return its prediction (None when none can be made).

    The forms are tried on the chunk's leading positions (:func:`_form_sample`), then the chosen
    one predicts the whole chunk: trying three forms, one of them in seven ULP steps, on every
    element of each batch norm's first chunk was a fifth of a ResNet-50 capture's writing."""
    sample_inputs, sample = _form_sample(inputs, part)
    best: tuple[int, dict[str, Any], np.ndarray] | None = None
    for form in forms(spec):
        attrs = (_fit_ulps(spec, sample_inputs, sample) if form == "centered_scaled"
                 else {**spec.get("attrs", {}), "form": form})
        guess = None if attrs is None else predict({**spec, "attrs": attrs}, sample_inputs, sample.dtype, sample.shape)
        if guess is None:
            continue
        missed = int(np.count_nonzero(xor(np.ascontiguousarray(sample), guess).view(f"u{sample.dtype.itemsize}")))
        if best is None or missed < best[0]:
            best = (missed, attrs, guess)
    if best is None:
        return None
    spec["attrs"] = best[1]
    return best[2] if sample is part else predict(spec, inputs, part.dtype, part.shape)


def _form_sample(inputs: Sequence[np.ndarray], part: np.ndarray) -> tuple[Sequence[np.ndarray], np.ndarray]:
    """The first :data:`FORM_SAMPLE_ELEMENTS` elements of ``part`` as (positions, channels), and
    the same positions of the inputs shaped like it (per-channel inputs as they are); the whole
    chunk where it is that small or not channels-last. A few thousand positions per channel tell
    the form that matches most as well as the whole chunk, and a worse choice would cost only
    size: a chunk is stored as its residual against the prediction, lossless either way."""
    if part.ndim < 2 or part.size <= FORM_SAMPLE_ELEMENTS:
        return inputs, part
    channels = part.shape[-1]  # at least 1: the part holds more than the sample
    rows = max(1, FORM_SAMPLE_ELEMENTS // channels)
    if rows >= part.size // channels:
        return inputs, part
    return ([x.reshape(-1, channels)[:rows] if x.shape == part.shape else x for x in inputs],
            part.reshape(-1, channels)[:rows])


def predict(spec: Mapping[str, Any], inputs: Sequence[np.ndarray], dtype: np.dtype,
            shape: tuple[int, ...]) -> np.ndarray | None:
    """The prediction of a chunk from its inputs' values (same rows), or None when it cannot be
    made (another dtype or shape than the chunk's: then the chunk is stored as it is)."""
    if dtype.name not in FLOATS or any(x.dtype != dtype for x in inputs):
        return None
    with np.errstate(all="ignore"):
        try:
            out = np.asarray(PREDICTORS[spec["op"]][1](inputs, spec.get("attrs", {})))
        except (ValueError, TypeError, KeyError, IndexError):  # shapes that do not broadcast, a bad spec
            return None
    return out if out.dtype == dtype and out.shape == shape else None


def xor(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Bits of ``a`` XOR bits of ``b`` (same float dtype), as that dtype (into ``out`` when given)."""
    word = f"u{a.dtype.itemsize}"
    result = np.bitwise_xor(a.view(word), np.ascontiguousarray(b).view(word),
                            out=None if out is None else out.view(word))
    return result.view(a.dtype)
