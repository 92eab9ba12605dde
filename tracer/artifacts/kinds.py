"""Which kind of artifact a path holds, before anything is loaded (stage 1's first half).

``detect`` tells a capture directory (complete or not), a TF1 checkpoint (a directory with a
``checkpoint`` file whose absolute paths from the training machine are re-rooted, one ``.meta``,
a prefix, or one of its files), a SavedModel (or a TF Serving base directory, whose newest
numbered version is taken) and a frozen GraphDef apart, or says what it found instead. Every
path goes through ``tf.io.gfile``, so ``gs://`` and ``ram://`` paths work like local ones.
"""

from __future__ import annotations

import difflib
import os
import posixpath
import re
from typing import Any

from .._tf import tf
from ..errors import TftraceError
from .checkpoint_index import graphless_checkpoint
from ..text import listed

__all__ = ["CAPTURE_MANIFEST", "detect", "exists_here", "io_gfile", "local_checkpoint_prefix", "refuse_graphless_local",
           "refuse_missing_local"]

CAPTURE_MANIFEST = "manifest.json"


def io_gfile() -> Any:
    """``tf.io.gfile``: local, ``gs://`` and ``ram://`` paths alike (TensorFlow imported on first use)."""
    return tf().io.gfile




def exists_here(path: str) -> bool:
    """Whether a local model path is on this machine: a checkpoint prefix (``model.ckpt-2``) names
    no file of its own, only its ``.index`` and ``.meta``. A URL (``gs://``) is not local."""
    return "://" not in path and any(os.path.exists(path + end) for end in ("", ".index", ".meta"))


def refuse_missing_local(path: str, side: str = "") -> None:
    """Refuse a local path that does not exist, before TensorFlow is imported or a child started.

    A typo in B's path used to be found by B's loader, after A's child had imported TensorFlow
    (~10 s), and the line did not say which side. A URL (``gs://``) is left to ``detect``, which
    reads it through ``tf.io.gfile``; a checkpoint prefix exists through its ``.index``/``.meta``."""
    if "://" in path or exists_here(path):
        return
    parent, name = os.path.split(path.rstrip("/") or path)
    try:
        near = difflib.get_close_matches(name, os.listdir(parent or "."), n=1, cutoff=0.6)
    except OSError:
        near = []
    where = f"side {side.upper()}'s path {path}" if side else path
    hint = f" (did you mean {os.path.join(parent, near[0])}?)" if near else ""
    raise TftraceError(f"{where} does not exist{hint}", "check the path (and the scheme, for gs:// or ram://)")


def refuse_graphless_local(path: str) -> None:
    """Refuse a local checkpoint that has no graph (no ``.meta``) before TensorFlow is imported or a
    child started, in the words the loader would use (:func:`tracer.artifacts.checkpoint_index.
    graphless_checkpoint`): ``tftrace diagnose`` printed "capturing" before refusing it. A path that
    is anything else, or remote, is left to ``detect``."""
    if "://" in path:
        return
    prefix = local_checkpoint_prefix(path)
    if prefix is None or os.path.exists(prefix + ".meta") or not os.path.isfile(prefix + ".index"):
        return
    with open(prefix + ".index", "rb") as file:
        raise graphless_checkpoint(prefix, file.read())


def local_checkpoint_prefix(path: str) -> str | None:
    """The checkpoint prefix a local path names as ``detect`` finds it, or None when it names no
    checkpoint (or one only ``detect`` can resolve, which then refuses it in its own words)."""
    if os.path.isdir(path):
        entries = os.listdir(path)
        if any(e in entries for e in (CAPTURE_MANIFEST, "saved_model.pb", "saved_model.pbtxt")) or \
                not os.path.isfile(os.path.join(path, "checkpoint")):
            return None
        try:
            return _prefix_from_checkpoint_file(path, local=True)
        except TftraceError:
            return None
    base = os.path.basename(path)
    if path.endswith(".index") or ".data-" in base:
        return path.split(".data-")[0].removesuffix(".index")
    return path if os.path.exists(path + ".index") else None


def _listdir(path: str) -> list[str]:
    return sorted(entry.rstrip("/") for entry in io_gfile().listdir(path))


def detect(path: str) -> tuple[str, str]:
    """Return ``(kind, location)`` for a path, or raise a TftraceError that says what was found.

    kind is one of ``capture``, ``incomplete_capture``, ``checkpoint``, ``saved_model``,
    ``graphdef``. For checkpoints, location is the checkpoint prefix.
    """
    gfile = io_gfile()
    if not gfile.exists(path):
        if gfile.exists(path + ".index") or gfile.exists(path + ".meta"):
            return "checkpoint", path  # a checkpoint prefix names files, not itself a file
        raise TftraceError(f"{path} does not exist", "check the path (and the scheme, for gs:// or ram://)")
    if not gfile.isdir(path):
        return _detect_file(path)
    entries = _listdir(path)
    if CAPTURE_MANIFEST in entries:
        return "capture", path
    if "tensors" in entries and "saved_model.pb" not in entries:
        return "incomplete_capture", path
    if "saved_model.pb" in entries or "saved_model.pbtxt" in entries:
        return "saved_model", path
    held = _version_listings(path, entries)
    versions = [v for v, inside in held.items() if "saved_model.pb" in inside or "saved_model.pbtxt" in inside]
    if versions:  # TF Serving layout: base_path/<version>/saved_model.pb
        return "saved_model", posixpath.join(path, max(versions, key=int))
    _refuse_tflite(path, entries, held)
    versions = [v for v, inside in held.items() if _holds_checkpoint(inside)]
    if versions:  # TF Serving's older layout (SessionBundle): base_path/<version>/{export.meta, export, checkpoint}
        return detect(posixpath.join(path, max(versions, key=int)))
    if "checkpoint" in entries and not gfile.isdir(posixpath.join(path, "checkpoint")):  # the state file
        return "checkpoint", _prefix_from_checkpoint_file(path)
    metas = sorted((e for e in entries if e.endswith(".meta")), key=_step_order)
    if len(metas) == 1:
        return "checkpoint", posixpath.join(path, metas[0][: -len(".meta")])
    if len(metas) > 1:
        shown = listed(metas, 10)
        newest = posixpath.join(path, metas[-1][: -len(".meta")])
        raise TftraceError(
            f"{path} holds several checkpoints ({shown}) and no `checkpoint` file says which is current",
            f"pass one checkpoint prefix (or its .meta file) instead of the directory, e.g. {newest}",
        )
    shown = ", ".join(entries[:12]) + (" …" if len(entries) > 12 else "") if entries else "nothing"
    keras = [e for e in entries if e.endswith((".keras", ".h5", ".hdf5"))]
    if keras:  # the directory a Keras user saved into: the file's own message says how to export it
        _detect_file(posixpath.join(path, keras[0]))
    raise TftraceError(
        f"{path} is neither a checkpoint nor a SavedModel nor a capture (it contains {shown})",
        "point at a directory with saved_model.pb, a TF1 checkpoint directory (with a `checkpoint` "
        "file or one .meta), a checkpoint prefix, or a frozen .pb/.pbtxt GraphDef",
    )


def _step_order(file_name: str) -> tuple[str, int]:
    """Sort ``model.ckpt-200`` before ``model.ckpt-1000`` (training steps, not characters)."""
    match = re.search(r"^(.*?)(\d+)\.meta$", file_name)
    return (match.group(1), int(match.group(2))) if match else (file_name, -1)


def _version_listings(path: str, entries: list[str]) -> dict[str, list[str]]:
    """TF Serving's version directories under base path ``path`` (its numbered folders, among
    ``entries``) -> what each holds, listed once for every layout :func:`detect` tries."""
    gfile = io_gfile()
    return {e: _listdir(posixpath.join(path, e)) for e in entries
            if e.isdigit() and gfile.isdir(posixpath.join(path, e))}


def _holds_checkpoint(entries: list[str]) -> bool:
    """A TF1 checkpoint directory as :func:`detect` resolves one, by what it holds (``entries``): a
    ``checkpoint`` state file or exactly one ``.meta`` graph."""
    return "checkpoint" in entries or sum(e.endswith(".meta") for e in entries) == 1


def _refuse_tflite(path: str, entries: list[str], versions: dict[str, list[str]]) -> None:
    """A TensorFlow Lite flatbuffer, in ``path`` or in one of its version directories (``versions``:
    :func:`_version_listings`; TF Serving serves them from ``base_path/<version>/model.tflite``): its ops
    run in the TFLite interpreter, with kernels of its own, so there is no TensorFlow graph here to trace."""
    found = [e for e in entries if e.endswith(".tflite")]
    found += [posixpath.join(v, f) for v, inside in versions.items() for f in inside if f.endswith(".tflite")]
    if found:
        raise _tflite_error(posixpath.join(path, found[0]))


def _tflite_error(path: str) -> TftraceError:
    return TftraceError(
        f"{path} is a TensorFlow Lite model: it runs in the TFLite interpreter with its own kernels, not as a "
        "TensorFlow graph tftrace can capture op by op",
        "give the SavedModel, checkpoint or Keras export it was converted from (what tf.lite.TFLiteConverter read)",
    )


def _detect_file(path: str) -> tuple[str, str]:
    gfile = io_gfile()
    base = posixpath.basename(path)
    if base.endswith(".tflite"):
        raise _tflite_error(path)
    if base in ("saved_model.pb", "saved_model.pbtxt"):
        return "saved_model", posixpath.dirname(path)
    if base == CAPTURE_MANIFEST:
        return "capture", posixpath.dirname(path)
    if path.endswith(".meta"):
        return "checkpoint", path[: -len(".meta")]
    if path.endswith(".index") or ".data-" in base:
        return "checkpoint", path.split(".data-")[0].removesuffix(".index")
    if path.endswith((".pb", ".pbtxt", ".graphdef")):
        return "graphdef", path
    if gfile.exists(path + ".index") or gfile.exists(path + ".meta"):
        return "checkpoint", path
    if path.endswith((".weights.h5", ".weights.hdf5")):
        raise TftraceError(
            f"{path} holds a Keras model's weights only (model.save_weights), not a graph tftrace can run",
            "rebuild the model in Python, load these weights into it (model.load_weights(...)) and export it as a "
            "SavedModel: model.export('exported'); then give that directory",
        )
    if path.endswith((".keras", ".h5", ".hdf5")):
        raise TftraceError(
            f"{path} is a Keras model file; tftrace reads TensorFlow graphs, and a Keras file holds a Python model",
            f"export it as a SavedModel and give that directory: in Python, keras.models.load_model({path!r})"
            ".export('exported') (Keras 3; `tf.saved_model.save(model, 'exported')` works too)",
        )
    raise TftraceError(
        f"{path} is a file tftrace does not recognise",
        "give a SavedModel directory, a checkpoint directory or prefix, or a GraphDef ending in .pb or .pbtxt",
    )


def _prefix_from_checkpoint_file(directory: str, local: bool = False) -> str:
    """Read the ``checkpoint`` state file; re-root absolute paths written on another machine.
    ``local``: through ``os`` (a local path, before TensorFlow is imported), else ``tf.io.gfile``."""
    exists = os.path.exists if local else (lambda p: io_gfile().exists(p))
    state = posixpath.join(directory, "checkpoint")
    # bytes, decoded leniently: a damaged state file is refused below for what it lacks, not with a UnicodeDecodeError
    with (open(state, "rb") if local else io_gfile().GFile(state, "rb")) as file:
        text = file.read().decode("utf-8", errors="replace")
    prefix = None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model_checkpoint_path":
            prefix = value.strip().strip('"')
    if not prefix:
        raise TftraceError(
            f"{directory}/checkpoint has no model_checkpoint_path line",
            "pass the checkpoint prefix directly, e.g. DIR/model.ckpt-1000",
        )
    if not posixpath.isabs(prefix) and "://" not in prefix:
        return posixpath.join(directory, prefix)
    if exists(prefix + ".index") or exists(prefix + ".meta"):
        return prefix
    # Trained elsewhere: the absolute path belongs to another machine. Use the same file name here.
    return posixpath.join(directory, posixpath.basename(prefix))
