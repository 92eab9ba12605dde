"""The examples fed to a side: read from the user's file or generated from the signature.

Generated inputs follow one documented rule so that two sides — two processes, two machines —
given the same seed see the same bytes: for each signature input key, a NumPy
``default_rng([seed, crc32(key)])`` draws

* floating inputs: standard normal N(0, 1), drawn in float64 and rounded to the input dtype;
* integer inputs: uniform integers in [0, 10);
* boolean inputs: fair coin flips.

The first dimension of every input is the example axis when the signature leaves it unknown
(``None``). A signature whose input shapes are all fully known has no batch axis (TF Serving's
``half_plus_two_tf2`` takes ``x`` of shape ``[1]``, ``half_plus_three`` a scalar): its examples
are stacked along a new first axis, ``[count, *shape]``, and each run feeds one of them
(``per_example``). Drawn that way, example ``i`` holds the same numbers as row ``i`` of a
batched signature whose rows have as many elements, so the two can be compared row by row.
A file's arrays may differ from the signature's per-example shape by axes of size 1 only
(``[N]`` for ``[?, 1]``, ``[N, 1]`` for a scalar): they are reshaped, never otherwise. A file
may stack examples for a signature with no batch axis whose shapes are not all known too: the
Object Detection API's ``[1, ?, ?, 3]`` given ``[N, H, W, 3]`` runs each image alone.
An input without a batch axis beside one with (a scalar ``score_threshold`` beside ``images`` of
``[?, H, W, 3]``) is no example: drawn (or read) in its own shape, it is fed whole to every run
(``shared``); so is a scalar a file gives for an input of unknown shape (TF1's ``keep_prob``). A
boolean one is a switch (``is_training``): never drawn, its value must be given.
Strings (serialized ``tf.Example`` protos) cannot be invented and need ``--inputs``.
"""

from __future__ import annotations

import functools
import hashlib
import os

import keyword
import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..artifacts.records import TensorSpec
from ..errors import TftraceError
from ..opgraph_records import NOT_FETCHABLE_DTYPES
from .warmup import looks_like_warmup, read_warmup

__all__ = ["Examples", "make_examples", "shared_inputs", "inputs_file_sha256", "batches", "same_rows", "run_batch_size",
           "batched_alike", "one_array_per_input", "ONE_ARRAY_REFUSAL"]


@dataclass
class Examples:
    arrays: dict[str, np.ndarray]  # signature input key -> all examples
    count: int  # number of examples (rows); 0 for signatures without inputs
    batch_major: bool  # False when the signature fixes the first dimension (no batching possible)
    source: str  # "generated (seed N)" or the file name
    per_example: bool = False  # no batch axis: arrays are [count, *shape], each run feeds one example
    file_sha256: str | None = None  # the inputs file's own sha256 (what ``sha256sum FILE`` prints)
    shared: frozenset[str] = frozenset()  # inputs without a batch axis beside batched ones: fed whole to every run

    def feed(self, key: str, start: int, stop: int) -> np.ndarray:
        """What input ``key`` is fed in the run over examples ``[start, stop)``."""
        array = self.arrays[key]
        if key in self.shared:
            return array
        if self.batch_major:
            return array[start:stop]
        return array[start] if self.per_example else array


def same_rows(shape_a: Sequence[int | None], shape_b: Sequence[int | None]) -> bool:
    """Whether two per-example shapes hold the same elements in the same order: equal once their
    axes of size 1 are dropped (``[1]``, ``[]`` and ``[1, 1]`` are one number)."""
    return [d for d in shape_a if d != 1] == [d for d in shape_b if d != 1]


def batches(count: int, batch_size: int | None) -> list[tuple[int, int]]:
    """Row ranges ``[start, stop)`` of each run: ceil(count / batch_size) runs, in order."""
    if count == 0:
        return [(0, 0)]
    size = batch_size or count
    return [(start, min(count, start + size)) for start in range(0, count, size)]


def run_batch_size(manifest: Mapping[str, Any]) -> int:
    """The batch a capture's model ran: the most examples one of its runs fed (``runs``), not the
    batch size asked for (``--batch-size 10`` over 8 examples runs a batch of 8). A manifest
    without ``runs`` (a minimal one) has only its recorded ``batch_size``."""
    runs = manifest.get("runs")
    if runs:
        return max(int(stop) - int(start) for start, stop in runs)
    return int(manifest.get("batch_size") or 0)


def batched_alike(manifest_a: Mapping[str, Any], manifest_b: Mapping[str, Any]) -> bool:
    """Whether two captures grouped their examples into runs the same way, so that every value
    computed over a run (a shape, a reduction over the batch, an index offset by a row's position)
    covers the same examples on both sides. The one definition: compare, the report, the causes
    and isolation all ask this."""
    runs_a, runs_b = manifest_a.get("runs"), manifest_b.get("runs")
    if runs_a and runs_b:
        return [list(map(int, r)) for r in runs_a] == [list(map(int, r)) for r in runs_b]
    return run_batch_size(manifest_a) == run_batch_size(manifest_b)


def make_examples(
    inputs: dict[str, TensorSpec],
    examples: int,
    seed: int,
    inputs_file: str | None,
    alternatives: Sequence[str] = (),
    file_sha256: str | None = None,
    signature: str = "serving_default",
) -> Examples:
    """The examples for a signature's ``inputs``: read from ``inputs_file`` or generated.

    ``alternatives`` are the model's signatures that take only generable tensors, named in the
    error when this one takes strings, so the user learns the way out in one message.
    ``file_sha256``: the file's sha256 as the parent took it (:func:`inputs_file_sha256`), else
    taken here. ``signature``: the side's signature key, which picks the requests of a TF Serving
    warmup file (:mod:`.warmup`).
    """
    if not inputs:
        return Examples({}, 0, False, "none (the signature takes no inputs)")
    batched, fixed, shared = _classify(inputs)
    unbatched = all(s.shape is not None and None not in s.shape for s in inputs.values())
    if inputs_file:  # no batch axis: a file may stack examples (an OD API export's [1, ?, ?, 3] fed one image a run)
        stackable = not batched and all(s.shape is not None for s in inputs.values())
        arrays, per_example = _read_file(inputs_file, inputs, stackable, shared, signature)
        source, file_sha256 = Path(inputs_file).name, file_sha256 or _file_sha256(inputs_file)
        if batched:  # a scalar given for an input of unknown shape (TF1's ``tf.placeholder(tf.float32)``) has no example axis
            shared |= {k for k, spec in inputs.items() if spec.shape is None and arrays[k].ndim == 0}
    else:
        _refuse_switches(inputs, shared)
        per_example = unbatched
        arrays = {key: _generate(key, spec, examples, seed, alternatives, per_example) for key, spec in inputs.items()}
        source, file_sha256 = f"generated (seed {seed}, {_drawn(arrays.values())})", None
    counts = {k: (a.shape[0] if a.ndim else 1) for k, a in arrays.items() if k not in shared}
    if len(set(counts.values())) > 1:
        raise TftraceError(
            f"the inputs disagree on the number of examples: {counts}",
            "give every input the same first dimension (one row per example)",
        )
    count = next(iter(counts.values()))
    if per_example:
        return Examples(arrays, count, batch_major=False, source=source, per_example=True, file_sha256=file_sha256)
    batch_major = not fixed and all(a.ndim > 0 for k, a in arrays.items() if k not in shared)
    return Examples(arrays, count, batch_major=batch_major, source=source, file_sha256=file_sha256, shared=shared)


def _refuse_switches(inputs: Mapping[str, TensorSpec], shared: frozenset[str]) -> None:
    """A boolean without a batch axis beside the examples (TF1's ``is_training`` placeholder) is a
    switch: drawn by a coin it could run a batch norm in training mode, a mode the model is never
    served in, and the comparison would then be true of nothing the user runs. Its value is asked for."""
    switches = sorted(k for k in shared if inputs[k].dtype == "bool")
    if switches:
        given = ", ".join(f"{k}=False" for k in switches)
        raise TftraceError(
            f"input {', '.join(repr(k) for k in switches)} is a boolean without a batch axis: a switch (a training "
            "flag, a mode) whose value tftrace will not guess",
            f"pass --inputs FILE.npz holding every input, the switch as it is served: numpy.savez(FILE, ..., {given})",
        )


def shared_inputs(inputs: Mapping[str, TensorSpec]) -> frozenset[str]:
    """The inputs fed whole to every run: those whose shape is fully known, without a batch axis
    (a scalar ``score_threshold``, an ``[1, 4]`` setting), in a signature where another input has
    one (``images`` of ``[?, H, W, 3]``). Each run takes the same value of them whatever its
    batch size; the other inputs give the examples."""
    return _classify(inputs)[2]


def _classify(inputs: Mapping[str, TensorSpec]) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """Each input's part, from its shape, decided here only: ``(batched, fixed, shared)``.

    * batched: the first dimension is unknown, the example axis;
    * shared: fully known, beside a batched input (:func:`shared_inputs`);
    * fixed: any other whose first dimension is known, so the signature cannot be batched.

    Inputs of unknown shape, and scalars without a batched input beside them, are in none.
    """
    first = {k: s.shape[0] for k, s in inputs.items() if s.shape is not None and len(s.shape) > 0}  # rank >= 1
    batched = frozenset(k for k, d in first.items() if d is None)
    shared = frozenset(k for k, s in inputs.items() if batched and s.shape is not None and None not in s.shape)
    return batched, frozenset(first) - batched - shared, shared


def inputs_file_sha256(path: str) -> str | None:
    """The inputs file's sha256, for the capture children a parent starts on it (a side, its noise
    repeats, diagnose's captures): taken once while the file stays the same (its inode, size and
    modification time), not in every child. None where it cannot be read: the child says why."""
    try:
        st = os.stat(path)
        return _sha256_while_unchanged(os.path.abspath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        return None


@functools.lru_cache(maxsize=8)
def _sha256_while_unchanged(path: str, *identity: int) -> str:
    return _file_sha256(path)


def _file_sha256(path: str) -> str:
    """The file's sha256, so a report names the file the way a reader checks it (``sha256sum``);
    the digest of the values fed (``examples_digest``) covers the signature's key names too, and
    equals no tool's digest of the file."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _drawn(arrays: Any) -> str:
    """What the generated examples are, in words, per kind of input (the rule in the module docstring)."""
    kinds = {"b" if a.dtype.kind == "b" else "i" if a.dtype.kind in "iu" else "f" for a in arrays}  # bfloat16: "f"
    return ", ".join(w for k, w in (("f", "N(0,1) floats"), ("i", "integers 0-9"), ("b", "coin-flip booleans"))
                     if k in kinds)


def _generate(
    key: str, spec: TensorSpec, examples: int, seed: int, alternatives: Sequence[str], per_example: bool = False
) -> np.ndarray:
    dtype = spec.dtype
    if dtype == "string" or dtype in NOT_FETCHABLE_DTYPES or dtype.startswith(("qu", "qi")):
        way_out = (
            f", or capture a signature that takes tensors: --signature {' or --signature '.join(alternatives)}"
            if alternatives
            else "; no signature of this model takes only tensors tftrace could generate"
        )
        strings = dtype == "string"
        raise TftraceError(
            f"input {key!r} is a {dtype} tensor{' (e.g. serialized tf.Example protos)' if strings else ''}, "
            "which tftrace cannot invent",
            "pass real examples with --inputs FILE.npz (one array per input key"
            f"{'; strings as bytes, e.g. np.array(serialized_examples, dtype=bytes)' if strings else ''}){way_out}",
        )
    if spec.shape is None:
        raise TftraceError(
            f"input {key!r} has an unknown shape (not even its rank is known), so tftrace cannot generate it",
            "pass real examples with --inputs FILE.npz",
        )
    shape = list(spec.shape)
    if per_example:
        shape = [examples, *shape]  # the examples' own axis: one per run
    elif shape and shape[0] is None:
        shape[0] = examples
    if any(d is None for d in shape):
        axes = [i for i, d in enumerate(shape) if d is None]
        raise TftraceError(
            f"input {key!r} has unknown dimensions at axes {axes} (shape {list(spec.shape)})",
            "pass real examples with --inputs FILE.npz",
        )
    rng = np.random.default_rng([seed, zlib.crc32(key.encode("utf-8"))])
    np_dtype = _numpy_dtype(dtype)
    if np_dtype.kind == "f" or dtype == "bfloat16":
        return rng.standard_normal(shape).astype(np_dtype)
    if np_dtype.kind in "iu":
        return rng.integers(0, 10, size=shape).astype(np_dtype)
    if np_dtype.kind == "b":
        return rng.random(shape) < 0.5
    raise TftraceError(f"input {key!r} has dtype {dtype}, which tftrace cannot generate", "pass --inputs FILE.npz")


def _numpy_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes  # noqa: PLC0415 - installed with TensorFlow, needed only for bf16 inputs

        return np.dtype(ml_dtypes.bfloat16)
    try:
        return np.dtype(name)
    except TypeError as exc:
        raise TftraceError(f"dtype {name!r} is not supported as an input", "pass inputs of a numeric dtype") from exc


def _read_file(
    path: str, inputs: dict[str, TensorSpec], stackable: bool, shared: frozenset[str], signature: str
) -> tuple[dict[str, np.ndarray], bool]:
    """The file's arrays, fitted to ``inputs``, and whether they are one example per run (a
    signature without a batch axis given arrays with one more, example, axis). ``shared``: the
    inputs fed whole to every run (:func:`shared_inputs`), fitted to their own shape."""
    if not Path(path).is_file():
        raise TftraceError(f"inputs file {path} does not exist", "give an .npz with one array per signature input")
    with open(path, "rb") as fh:
        head = fh.read(8)
    if looks_like_warmup(head):  # TF Serving's assets.extra/tf_serving_warmup_requests
        arrays = read_warmup(path, {key: spec.dtype for key, spec in inputs.items()}, signature)
        return _fitted(path, arrays, inputs, stackable, shared)
    try:
        loaded = np.load(path, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise TftraceError(f"cannot read inputs file {path}: {exc}", "write it with numpy.savez or numpy.save") from exc
    if isinstance(loaded, np.ndarray):
        if len(inputs) != 1:
            raise TftraceError(
                f"{path} holds one array but the signature has {len(inputs)} inputs ({', '.join(inputs)})",
                one_array_per_input(path, list(inputs)),
            )
        arrays = {next(iter(inputs)): loaded}
    else:
        with loaded:
            try:
                arrays = {k: loaded[k] for k in loaded.files}
            except ValueError as exc:  # an object array: numpy refuses it without pickle, which runs code
                raise TftraceError(
                    f"{path} holds an array of Python objects ({exc})",
                    "save plain arrays; strings as bytes, e.g. np.array([b'cat', b'dog']) or words.astype('S')",
                ) from exc
        missing = sorted(set(inputs) - set(arrays))
        extra = sorted(set(arrays) - set(inputs))
        if missing or extra:
            raise TftraceError(
                f"{path} has keys {sorted(arrays)} but the signature expects {sorted(inputs)}"
                + (f" (missing: {', '.join(missing)})" if missing else "")
                + (f" (unexpected: {', '.join(extra)})" if extra else ""),
                "name the arrays after the signature input keys",
            )
    return _fitted(path, arrays, inputs, stackable, shared)


def _fitted(
    path: str, arrays: dict[str, np.ndarray], inputs: dict[str, TensorSpec], stackable: bool, shared: frozenset[str]
) -> tuple[dict[str, np.ndarray], bool]:
    """A file's arrays, one per input key, fitted to the inputs (see :func:`_read_file`)."""
    stacked = {key for key, spec in inputs.items()
               if stackable and not _fits(arrays[key], spec) and _fits_rows(arrays[key], spec.shape)}
    if stacked and stacked != set(inputs):
        raise TftraceError(
            f"{path} holds several examples for {', '.join(sorted(stacked))} but one for "
            f"{', '.join(sorted(set(inputs) - stacked))}",
            "give every input the same number of examples along a first, example, axis",
        )
    for key, spec in inputs.items():
        array = arrays[key]
        if spec.dtype == "string" and array.dtype.kind == "U":  # TF feeds str as UTF-8 bytes: store what it saw
            arrays[key] = array = np.char.encode(array, "utf-8")
        if stacked:
            arrays[key] = array.reshape((array.shape[0], *_row_shape(array.shape[1:], spec.shape)))
        elif spec.shape and spec.shape[0] is None and not _fits(array, spec) and _fits_rows(array, spec.shape[1:]):
            arrays[key] = array.reshape((array.shape[0], *spec.shape[1:]))  # [N] for [?, 1], or back
        elif key in shared and not _fits(array, spec) and same_rows(array.shape, spec.shape):
            arrays[key] = array.reshape(spec.shape)  # [1] for a scalar threshold, or back
        _check_fits(key, arrays[key], spec, stacked=bool(stacked), shared=key in shared)
    return arrays, bool(stacked)


# the refusal of a plain .npy (one array) by a signature of several inputs, as said: its count and keys
ONE_ARRAY_REFUSAL = re.compile(r" holds one array but the signature has (\d+) inputs \((.*)\)$")


def one_array_per_input(path: str, keys: Sequence[str]) -> str:
    """The fix for a plain ``.npy`` given to a signature of several inputs: an ``.npz`` that holds
    one array per input, under its key (a ``.npy`` holds one array, which feeds one input only)."""
    if all(key.isidentifier() and not keyword.iskeyword(key) for key in keys):
        arrays = ", ".join(f"{key}=..." for key in keys)
    else:
        arrays = "**{" + ", ".join(f"{key!r}: ..." for key in keys) + "}"
    npz = f"{Path(path).stem or 'inputs'}.npz"
    return (f"give --inputs an .npz that holds one array per input, named after the input keys "
            f"{', '.join(keys)}: numpy.savez({npz!r}, {arrays})")


def _fits(array: np.ndarray, spec: TensorSpec) -> bool:
    return spec.shape is None or (
        array.ndim == len(spec.shape) and all(e is None or e == g for e, g in zip(spec.shape, array.shape)))


def _fits_rows(array: np.ndarray, per_example: Sequence[int | None] | None) -> bool:
    """``array`` is examples along axis 0, each holding ``per_example``'s elements (up to size-1 axes)."""
    return array.ndim >= 1 and _row_shape(array.shape[1:], per_example) is not None


def _row_shape(row: Sequence[int], per_example: Sequence[int | None] | None) -> tuple[int, ...] | None:
    """The shape ``per_example`` takes for one row of shape ``row``: size-1 axes added or dropped,
    an unknown dimension given the row's (``[48, 40, 3]`` for ``[1, ?, ?, 3]`` is ``[1, 48, 40, 3]``);
    None where the row does not fit it."""
    if per_example is None:
        return None
    sized = [d for d in row if d != 1]
    slots = [i for i, d in enumerate(per_example) if d != 1]  # a known 1 is added; an unknown takes a row's axis
    if len(sized) != len(slots) or any(per_example[i] not in (None, d) for i, d in zip(slots, sized)):
        return None
    shape = [1] * len(per_example)
    for i, d in zip(slots, sized):
        shape[i] = d
    return tuple(shape)


def _check_fits(key: str, array: np.ndarray, spec: TensorSpec, stacked: bool = False, shared: bool = False) -> None:
    """Refuse an array the signature cannot take (``stacked``: each of its rows is one example;
    ``shared``: the input is fed whole to every run, :func:`shared_inputs`)."""
    expected = _numpy_dtype(spec.dtype) if spec.dtype != "string" else None
    if expected is None:
        if array.dtype.kind not in "SU":
            raise TftraceError(f"input {key!r} is {array.dtype}, the signature expects strings", "pass bytes/str arrays")
    elif array.dtype != expected:
        raise TftraceError(
            f"input {key!r} is {array.dtype}, the signature expects {spec.dtype}",
            f"convert it, e.g. array.astype('{spec.dtype}')",
        )
    if spec.shape is None or stacked:
        return  # stacked: reshaped to [count, *shape] above
    if array.ndim != len(spec.shape) or any(e is not None and e != g for e, g in zip(spec.shape, array.shape)):
        shown = "[" + ", ".join("?" if d is None else str(d) for d in spec.shape) + "]"
        raise TftraceError(
            f"input {key!r} has shape {list(array.shape)}, the signature expects {shown}",
            f"give {key!r} one value of shape {shown}: it has no batch axis, so every run is fed the same one"
            if shared else "reshape the array to fit (the first axis is the example axis)",
        )
