"""How the two sides of a comparison are paired: on the same examples, under the same keys.

B runs on A's examples (a plain ``.npy`` when each signature has one input, which a signature
takes whatever its key), a model compared with a capture made elsewhere on that capture's; the
keys ``--map`` (or one input each) pairs are applied to B's view; and before anything is compared
the sides must have the same inputs and outputs and have been fed the same values. Never imports
TensorFlow.
"""

from __future__ import annotations

import ast
import hashlib
import io
import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from .align import CaptureView
from ..captures.inputs import ONE_ARRAY_REFUSAL, same_rows
from ..captures.reader import Capture, is_capture_dir
from ..errors import TftraceError
from ..runspec import InputSpec, Side
from ..safewrite import write_file

__all__ = ["apply_signature_map", "b_keys_as_a", "cannot_take_examples", "examples_digest", "examples_of_a_given_capture", "inputs_from", "is_capture",
           "one_input_each", "refused_examples", "require_pairable", "require_same_examples"]

# inputs.py's refusal of an .npz whose keys are not the signature's: the keys it expects
HAS_KEYS_REFUSAL = re.compile(r" has keys \[.*\] but the signature expects (\[.*?\])(?: \((?:missing|unexpected): .*)?$")
MAP_FIX = "map keys with --map A_KEY=B_KEY[,...], or choose matching signatures with --a-signature/--b-signature"


def examples_digest(view: CaptureView) -> str | None:
    """SHA-256 over the examples a side ran on (its signature inputs, in key order), so two
    sides fed the same values from differently named files are seen to agree. The keys are the
    view's: B's inputs under A's names where ``--map`` (or one input each) paired them."""
    digest = hashlib.sha256()
    inputs = view.graph.inputs
    for key, tensor in sorted(inputs.items()):
        if not view.capture.has(tensor):
            return None
        value = np.ascontiguousarray(view.capture.tensor(tensor))
        digest.update(f"{key}:{value.dtype.str}:{value.shape}".encode())
        digest.update(value.tobytes())
    return digest.hexdigest() if inputs else None


def is_capture(target: str | Side) -> bool:
    return isinstance(target, str) and is_capture_dir(target)


def examples_of_a_given_capture(a: str | Side, b: str | Side, out: Path,
                                 signature_map: dict[str, str]) -> InputSpec | None:
    """A model compared with a capture made elsewhere (the GPU server's) runs on the examples that
    capture holds, unless ``--inputs`` names others: it was refused as "fed different examples"
    when the capture had been given an inputs file."""
    if not is_capture(b) or is_capture(a) or (isinstance(a, Side) and a.inputs.inputs_file):
        return None
    reverse = {key_b: key_a for key_a, key_b in signature_map.items()}
    return inputs_from(Capture.open(str(b)), out, reverse, name="inputs_from_b")


def inputs_from(cap: Capture, out: Path, signature_map: dict[str, str], name: str = "inputs_from_a") -> InputSpec:
    """Feed the other side the very examples this capture saw (under its key names when ``--map``
    renames them): B those of A, or A those of a capture given as B (``name``).

    One input that ``--map`` does not name (it may map only outputs): a plain ``.npy``, which a
    signature of one input takes whatever its key (Keras's ``model.export`` keys it after the Input
    layer, ``tf.saved_model.save`` of the same model ``inputs``); :func:`one_input_each` then pairs
    the keys."""
    inputs = cap.inputs
    lost = {key: cap.uncaptured.get(t, "not stored") for key, t in inputs.items() if not cap.has(t)}
    if lost:  # feeding B without it would end in a misleading "cannot be paired"
        key, why = next(iter(lost.items()))
        other, this = ("B", "A") if name == "inputs_from_b" else ("A", "B")
        raise TftraceError(f"{other}'s input {key!r} was not kept in its capture ({why}), so {this} cannot be fed "
                           f"{other}'s examples",
                           "give both sides the same --inputs FILE.npz")
    arrays = {signature_map.get(key, key): np.asarray(cap.tensor(t)) for key, t in inputs.items()}
    buffer = io.BytesIO()
    if len(arrays) == 1 and not set(inputs) & set(signature_map):
        path = out / f"{name}.npy"
        np.save(buffer, next(iter(arrays.values())))
    else:
        path = out / f"{name}.npz"
        np.savez(buffer, **arrays)
    write_file(path, buffer.getvalue())
    examples = cap.examples.count or 1
    return InputSpec(inputs_file=str(path), seed=0, examples=examples)


def one_input_each(view_a: CaptureView, view_b: CaptureView, signature_map: dict[str, str] | None = None) -> dict[str, str]:
    """``{A's key: B's key}`` when each signature has one input and the keys differ: the one input
    each side has is the same input (B was fed A's examples). Noted on side B, for the report.
    ``--map`` that names neither input (``--map output_0=probs``: only the outputs differ) keeps
    this pairing; one that names either input decides it."""
    (key_a, *more_a), (key_b, *more_b) = list(view_a.graph.inputs) or [None], list(view_b.graph.inputs) or [None]
    if more_a or more_b or key_a is None or key_b is None or key_a == key_b:
        return {}
    if signature_map and (key_a in signature_map or key_b in signature_map.values()):
        return {}
    notes = view_b.capture.manifest.setdefault("notes", [])
    if isinstance(notes, list):  # in memory only, for the report: the capture on disk is not changed
        notes.append(f"its one input {key_b!r} was paired with A's one input {key_a!r} (keyed differently; "
                     "--map A_KEY=B_KEY pairs keys by hand)")
    return {key_a: key_b}


def cannot_take_examples(refusal: TftraceError, given: list[str] | None = None, giver: str = "A",
                         taker: str = "B") -> TftraceError:
    """The error for ``taker`` refusing ``giver``'s examples (B refusing A's; A refusing those of a
    capture given as B). ``--map`` helps only where the keys differ, as many on each side (an
    ``.npz`` under the giver's keys). Where the giver has another number of inputs (``given``: its
    keys) than the taker (one array for several inputs, two for one), or where the inputs were
    paired (by key, by ``--map`` or one input each) and an array does not fit (its shape or dtype),
    the two models take different inputs: renaming keys changes nothing, and no file fixes it, as
    both sides run on the same examples."""
    wanted = _taker_inputs(refusal.problem)
    if wanted is not None and given is not None and wanted[0] != len(given):
        count, keys = wanted
        what = (f"split {giver}'s one array into {taker}'s {count} inputs" if len(given) == 1 else
                f"turn {giver}'s {len(given)} inputs into {taker}'s {'one' if count == 1 else count}")
        return TftraceError(
            f"the two signatures cannot be paired: {taker} cannot take {giver}'s examples: {giver}'s signature has "
            f"{_inputs(len(given))} ({', '.join(given)}), {taker}'s has {'one' if count == 1 else count} ({keys})",
            f"both sides run on the same examples and --map only renames keys, it cannot {what}: compare two models "
            f"that take the same inputs, or choose {taker}'s signature that takes {giver}'s "
            f"{'one input' if len(given) == 1 else 'inputs'} with --{taker.lower()}-signature")
    fix = MAP_FIX if " has keys " in refusal.problem else (
        f"the inputs are paired, but the two models take different ones (another shape or dtype) and both sides "
        f"run on the same examples: compare two models that take the same input, or choose {taker}'s signature "
        f"that takes {giver}'s with --{taker.lower()}-signature")
    return TftraceError(f"the two signatures cannot be paired: {taker} cannot take {giver}'s examples "
                        f"({refusal.problem})", fix)


def _inputs(count: int) -> str:
    return "one input" if count == 1 else f"{count} inputs"


def _taker_inputs(problem: str) -> tuple[int, str] | None:
    """How many inputs the refusing signature has, and their keys as said, from the refusal of an
    inputs file (:mod:`tracer.captures.inputs`): one array for several inputs, or an ``.npz`` whose
    keys are not the signature's; None for any other refusal, or one that does not parse."""
    one_array = ONE_ARRAY_REFUSAL.search(problem)
    if one_array:
        return int(one_array.group(1)), one_array.group(2)
    has_keys = HAS_KEYS_REFUSAL.search(problem)
    if not has_keys:
        return None
    try:
        keys = ast.literal_eval(has_keys.group(1))
    except (ValueError, SyntaxError):
        return None
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        return None
    return len(keys), ", ".join(keys)


def refused_examples(exc: TftraceError) -> bool:
    """Whether a side's capture refused the examples it was fed, for its signature's inputs."""
    return any(phrase in exc.problem for phrase in ("the signature expects", "holds one array"))


def apply_signature_map(view_a: CaptureView, view_b: CaptureView, mapping: dict[str, str]) -> None:
    for key_a, key_b in mapping.items():
        for role in ("inputs", "outputs"):
            sig_b = getattr(view_b.graph, role)
            if key_b in sig_b and key_a in getattr(view_a.graph, role):
                sig_b[key_a] = sig_b.pop(key_b)


def b_keys_as_a(mapping: Mapping[str, str]) -> dict[str, str]:
    """``--map`` read from B's side: B's signature key -> the A key it is paired with, for the keys the
    map renames (a key both sides share is absent)."""
    return {key_b: key_a for key_a, key_b in mapping.items() if key_a != key_b}


def require_pairable(view_a: CaptureView, view_b: CaptureView) -> None:
    ga, gb = view_a.graph, view_b.graph
    problems = []
    for role in ("inputs", "outputs"):
        ka, kb = set(getattr(ga, role)), set(getattr(gb, role))
        if ka != kb:
            problems.append(f"{role}: A has {sorted(ka)}, B has {sorted(kb)}")
    common_outputs = set(ga.outputs) & set(gb.outputs)
    if not common_outputs or (set(ga.inputs) != set(gb.inputs)):
        raise TftraceError("the two signatures cannot be paired (" + "; ".join(problems) + ")", MAP_FIX)


def require_same_examples(view_a: CaptureView, view_b: CaptureView) -> None:
    na, nb = view_a.capture.examples.count, view_b.capture.examples.count
    if na != nb:
        raise TftraceError(
            f"the two sides ran different numbers of examples ({na} vs {nb})",
            "capture both with the same --examples/--inputs",
        )
    for key, ta in view_a.graph.inputs.items():
        tb = view_b.graph.inputs.get(key)
        if tb is None or not (view_a.capture.has(ta) and view_b.capture.has(tb)):
            continue
        xa, xb = view_a.capture.tensor(ta), view_b.capture.tensor(tb)
        if xa.shape[:1] == xb.shape[:1] and same_rows(xa.shape[1:], xb.shape[1:]):
            xb = xb.reshape(xa.shape)  # one side has no batch axis: its examples are rows too
        if xa.shape != xb.shape or not np.array_equal(xa, xb):
            raise TftraceError(
                f"the two sides were fed different examples for input {key!r} "
                f"(shapes {list(xa.shape)} and {list(xb.shape)})",
                "capture both with the same --inputs file, or the same --seed and --examples",
            )
