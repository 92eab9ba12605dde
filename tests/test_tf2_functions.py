"""A TF2 signature loaded alone from the SavedModel's files (issue 25: the 51,000-op RetinaNet loaded
1,829 functions to serve one signature that reaches 544) gives what TensorFlow's whole load gives:
the same inlined graph, the same variables and values, the same signature and notes. Where the
signature captures more than variables (a lookup table), the whole load still serves it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tracer._tf import tf
from tracer.artifacts import tf2_functions, tf2_inline
from tracer.artifacts.loader import _meta_graph, load
from tracer.artifacts.records import ArtifactRef, Artifact

from conftest import REPO

KERAS_EXPORTS = ["export", "tfsave", "bf16", "lstm", "gru", "augment"]  # loops, and a layer that writes its seed


def _graph_bytes(graph_def: Any) -> bytes:
    """The GraphDef without the debug info that names the loaded function (its number is per load)."""
    copy = type(graph_def)()
    copy.CopyFrom(graph_def)
    for node in copy.node:
        node.ClearField("experimental_debug_info")
    return copy.SerializeToString(deterministic=True)


def _whole_load(path: Path, monkeypatch: pytest.MonkeyPatch) -> Artifact:
    with monkeypatch.context() as patch:
        patch.setattr(tf2_inline, "signature_function", lambda *args: None)
        return load(ArtifactRef(str(path)))


def _assert_same(alone: Artifact, whole: Artifact) -> None:
    assert _graph_bytes(alone.graph_def) == _graph_bytes(whole.graph_def)
    assert alone.signature == whole.signature
    assert alone.notes == whole.notes
    assert sorted(alone.variable_values) == sorted(whole.variable_values)
    for name, value in whole.variable_values.items():
        assert alone.variable_values[name].dtype == value.dtype
        assert np.array_equal(alone.variable_values[name], value), name


@pytest.mark.slow
@pytest.mark.parametrize("export", KERAS_EXPORTS)
def test_a_keras_signature_loaded_alone_is_the_one_the_whole_load_gives(keras_models: Path, export: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    path = keras_models / export
    meta, _ = _meta_graph(ArtifactRef(str(path)), str(path))
    assert tf2_functions.signature_function(str(path), meta, "serving_default") is not None  # loaded alone
    alone = load(ArtifactRef(str(path)))
    _assert_same(alone, _whole_load(path, monkeypatch))
    assert _nodes(_imported_again(alone.graph_def)) == _nodes(alone.graph_def)


def test_the_sample_tf2_detector_loads_alone_as_whole(models: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    path = models["detector_tf2"]
    meta, _ = _meta_graph(ArtifactRef(str(path)), str(path))
    _, variables = tf2_functions.signature_function(str(path), meta, "serving_default")
    assert len(variables) == 26 and "block1/conv/weights" in {v.name for v in variables.values()}
    name = tf2_functions._signature_function_name(meta.object_graph_def, "serving_default")
    library = {f.signature.name for f in meta.graph_def.library.function}
    reached = {f.signature.name for f in tf2_functions._reached_library(meta.graph_def.library, name).function}
    assert name in reached and reached < library  # the object graph's other functions are left out
    _assert_same(load(ArtifactRef(str(path))), _whole_load(path, monkeypatch))


def test_the_inlined_graph_is_what_an_import_of_it_gives_back(models: dict[str, Path]) -> None:
    """The inliner's GraphDef is used as it is, not imported once more for nothing: an import and
    export hands back the same nodes (TensorFlow adds no default attribute, renames nothing)."""
    artifact = load(ArtifactRef(str(models["detector_tf2"])))
    assert _nodes(_imported_again(artifact.graph_def)) == _nodes(artifact.graph_def)


def _imported_again(graph_def: Any) -> Any:
    graph = tf().Graph()
    with graph.as_default():
        tf().compat.v1.import_graph_def(graph_def, name="")
    return graph.as_graph_def()


def _nodes(graph_def: Any) -> bytes:
    """The nodes alone (an export writes the versions of the TensorFlow that exports)."""
    return _graph_bytes(type(graph_def)(node=graph_def.node))


TABLE_MODEL = """
import sys, tensorflow as tf
class Vocab(tf.Module):
    def __init__(self):
        self.scale = tf.Variable(2.0)
        self.table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
            tf.constant(["a", "b", "c"]), tf.constant([0, 1, 2], tf.int64)), -1)

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
    def f(self, x):
        return {"y": self.scale * x * tf.cast(self.table.lookup(tf.constant("c")), tf.float32)}

module = Vocab()
tf.saved_model.save(module, sys.argv[1], signatures={"serving_default": module.f})
"""


def test_a_signature_that_captures_a_table_is_loaded_whole(tmp_path: Path) -> None:
    path = tmp_path / "vocab"
    subprocess.run([sys.executable, "-c", TABLE_MODEL, str(path)], cwd=REPO, check=True, capture_output=True,
                   timeout=300, env={**os.environ, "CUDA_VISIBLE_DEVICES": "-1"})
    meta, _ = _meta_graph(ArtifactRef(str(path)), str(path))
    assert tf2_functions.signature_function(str(path), meta, "serving_default") is None
    artifact = load(ArtifactRef(str(path)))
    assert [sorted(keys.tolist()) for keys, _ in artifact.table_values.values()] == [[b"a", b"b", b"c"]]
    assert [float(v) for v in artifact.variable_values.values()] == [2.0]


def test_a_tensorflow_whose_internals_refuse_the_shortcut_gets_the_whole_load(models: dict[str, Path],
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    path = models["detector_tf2"]
    meta, _ = _meta_graph(ArtifactRef(str(path)), str(path))

    def refused(*args: Any) -> Any:
        raise TypeError("load_function_def_library() got an unexpected keyword argument")

    monkeypatch.setattr(tf2_functions, "_load_alone", refused)
    assert tf2_functions.signature_function(str(path), meta, "serving_default") is None
    assert len(load(ArtifactRef(str(path))).variable_values) == 26  # loaded whole, as TensorFlow loads it
