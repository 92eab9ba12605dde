"""The sample-model generator: determinism, layout, and that each model is the situation it claims.

TensorFlow never runs in the pytest process (other tests check that comparing and rendering
work without it, and TF reads its environment once at import). The generator runs through its
CLI, and everything that needs TF runs in a child process: this same file executed as a script
(``python tests/test_sample_models.py facts DIR``), which prints one JSON document of facts that
the tests below assert on. The child sets ``TF_ENABLE_ONEDNN_OPTS=0`` so the TF1 / TF2
comparison does not depend on which oneDNN kernels this CPU would pick.

The models are generated fresh into a temporary directory once per session (about 10 s),
rather than reusing ``sample_models/generated``: the generator itself is under test.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
BLOCKS = ("block1", "block2", "block3", "block4")
OUTPUT_KEYS = ("boxes", "detection_boxes", "detection_classes", "detection_scores",
               "num_detections", "scores")
SAVEDMODELS = ("detector", "detector_folded", "detector_bf16", "detector_planted",
               "detector_tf2", "nan_model", "nan_model_safe")
# Files that legitimately differ between two generations: the checkpoint state file names the
# (different) absolute output paths, and TF2's fingerprint.pb carries a random UUID.
NOT_BYTE_STABLE = {"detector/ckpt/checkpoint", "detector_tf2/savedmodel/fingerprint.pb"}

pytestmark = pytest.mark.slow


# --------------------------------------------------------------------------- child process


def _digest(array: Any) -> dict[str, Any]:
    return {"dtype": str(array.dtype), "shape": list(array.shape),
            "sha256": hashlib.sha256(array.tobytes()).hexdigest()}


def _checkpoint_digests(tf: Any, prefix: str) -> dict[str, dict[str, Any]]:
    reader = tf.train.load_checkpoint(prefix)
    return {name: _digest(reader.get_tensor(name))
            for name in sorted(reader.get_variable_to_shape_map())
            if not name.startswith("_CHECKPOINTABLE_OBJECT_GRAPH")}


def _graph(saved_model_dir: Path) -> Any:
    from tensorflow.core.protobuf import saved_model_pb2  # noqa: PLC0415 - child only

    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((saved_model_dir / "saved_model.pb").read_bytes())
    return saved.meta_graphs[0].graph_def


def _node_differences(a: Any, b: Any) -> list[list[str]]:
    """Every difference between two GraphDefs, node by node: [node, what, a, b]."""
    nodes_a = {node.name: node for node in a.node}
    nodes_b = {node.name: node for node in b.node}
    out = [[name, "only_in_a", "", ""] for name in sorted(set(nodes_a) - set(nodes_b))]
    out += [[name, "only_in_b", "", ""] for name in sorted(set(nodes_b) - set(nodes_a))]
    for name in sorted(set(nodes_a) & set(nodes_b)):
        x, y = nodes_a[name], nodes_b[name]
        for field in ("op", "device"):
            if getattr(x, field) != getattr(y, field):
                out.append([name, field, getattr(x, field), getattr(y, field)])
        if list(x.input) != list(y.input):
            out.append([name, "input", ",".join(x.input), ",".join(y.input)])
        for attr in sorted(set(x.attr) | set(y.attr)):
            if x.attr[attr] != y.attr[attr]:
                out.append([name, f"attr:{attr}", _attr_text(x.attr[attr]),
                            _attr_text(y.attr[attr])])
    return out


def _attr_text(value: Any) -> str:
    import numpy as np  # noqa: PLC0415

    kind = value.WhichOneof("value")
    if kind == "f":
        return str(np.float32(value.f))
    if kind == "type":
        from tensorflow.python.framework import dtypes  # noqa: PLC0415

        return dtypes.as_dtype(value.type).name
    return str(value).strip()


def _run_tf1(tf: Any, path: Path, feeds: dict[str, Any], fetch_nodes: tuple[str, ...] = ()
             ) -> dict[str, Any]:
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as sess:
        meta = tf.compat.v1.saved_model.load(sess, ["serve"], str(path))
        sig = meta.signature_def["serving_default"]
        fetches = {key: info.name for key, info in sig.outputs.items()}
        fetches.update({node: f"{node}:0" for node in fetch_nodes})
        return sess.run(fetches, {sig.inputs[k].name: v for k, v in feeds.items()})


def _images() -> Any:
    import numpy as np  # noqa: PLC0415

    return np.random.RandomState(0).normal(size=(8, 64, 64, 3)).astype(np.float32)


def _output_diffs(ref: dict[str, Any], other: dict[str, Any]) -> dict[str, dict[str, Any]]:
    import numpy as np  # noqa: PLC0415

    return {key: {"bitwise": bool(np.array_equal(ref[key], other[key])),
                  "max_abs": float(np.max(np.abs(np.asarray(ref[key], np.float64)
                                                 - np.asarray(other[key], np.float64))))}
            for key in sorted(ref)}


def _facts(root: Path) -> dict[str, Any]:
    """Everything the tests assert on that needs TensorFlow, from one generated tree."""
    import numpy as np  # noqa: PLC0415
    import tensorflow as tf  # noqa: PLC0415
    from tensorflow.core.protobuf import meta_graph_pb2  # noqa: PLC0415

    facts: dict[str, Any] = {
        "checkpoint": _checkpoint_digests(tf, str(root / "detector/ckpt/model.ckpt"))}
    facts["savedmodel_variables"] = {
        name: sorted(d["sha256"] for d in _checkpoint_digests(
            tf, str(root / name / "savedmodel/variables/variables")).values())
        for name in ("detector", "detector_bf16", "detector_planted", "detector_tf2")
    }
    meta = meta_graph_pb2.MetaGraphDef()
    meta.ParseFromString((root / "detector/ckpt/model.ckpt.meta").read_bytes())
    sig = meta.signature_def["serving_default"]
    facts["meta_signature"] = {"inputs": {k: v.name for k, v in sig.inputs.items()},
                               "outputs": {k: v.name for k, v in sig.outputs.items()}}
    faithful = _graph(root / "detector/savedmodel")
    planted, bf16 = (_graph(root / name / "savedmodel")
                     for name in ("detector_planted", "detector_bf16"))
    facts["planted_vs_faithful"] = _node_differences(faithful, planted)
    facts["bf16_vs_faithful"] = _node_differences(faithful, bf16)
    facts["bf16_casts"] = sorted(
        [node.name, _attr_text(node.attr["SrcT"]), _attr_text(node.attr["DstT"])]
        for node in bf16.node if node.op == "Cast")
    folded = _graph(root / "detector_folded/savedmodel")
    facts["folded_ops"] = {node.name: node.op for node in folded.node}
    x = _images()
    ref = _run_tf1(tf, root / "detector/savedmodel", {"images": x})
    facts["variant_output_diffs"] = {
        name: _output_diffs(ref, _run_tf1(tf, root / name / "savedmodel", {"images": x}))
        for name in ("detector_folded", "detector_bf16", "detector_planted")
    }
    tf2 = tf.saved_model.load(str(root / "detector_tf2/savedmodel"))
    serve = tf2.signatures["serving_default"]
    tf2_out = {k: v.numpy() for k, v in serve(images=tf.constant(x)).items()}
    facts["tf2_signature"] = {"inputs": sorted(serve.structured_input_signature[1]),
                              "outputs": sorted(serve.structured_outputs)}
    facts["tf2_vs_tf1"] = _output_diffs(ref, tf2_out)
    xs = np.random.RandomState(0).normal(size=(8, 4)).astype(np.float32)
    for name in ("nan_model", "nan_model_safe"):
        out = _run_tf1(tf, root / name / "savedmodel", {"x": xs}, ("layer/MatMul", "layer/Log"))
        facts[name] = {key: {"nan_rows": int(np.isnan(value).reshape(8, -1).any(axis=1).sum()),
                             "shape": list(value.shape)} for key, value in out.items()}
    return facts


def _child_main(argv: list[str]) -> int:
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    command, root = argv[0], Path(argv[1])
    if command == "facts":
        result: Any = _facts(root)
    elif command == "checkpoint-digests":
        import tensorflow as tf  # noqa: PLC0415

        result = _checkpoint_digests(tf, str(root / "detector/ckpt/model.ckpt"))
    else:
        raise SystemExit(f"unknown command {command!r}")
    print(json.dumps(result))
    return 0


# --------------------------------------------------------------------------- parent side


def _generate(out: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "sample_models.generate", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]


def _child(command: str, root: Path) -> Any:
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="0", TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, __file__, command, str(root)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sample_models") / "models"
    _generate(out)
    return out


@pytest.fixture(scope="session")
def facts(generated: Path) -> dict[str, Any]:
    return _child("facts", generated)


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_layout_has_every_artifact(generated: Path) -> None:
    ckpt = generated / "detector/ckpt"
    for name in ("model.ckpt.meta", "model.ckpt.index", "model.ckpt.data-00000-of-00001",
                 "checkpoint"):
        assert (ckpt / name).is_file(), name
    for name in SAVEDMODELS:
        assert (generated / name / "savedmodel/saved_model.pb").is_file(), name
    for name in set(SAVEDMODELS) - {"detector_folded"}:
        assert (generated / name / "savedmodel/variables/variables.index").is_file(), name
    assert json.loads((generated / "models.json").read_text())["detector_folded"] == \
        "detector_folded/savedmodel"
    assert not generated.with_name("models.partial").exists()


def test_checkpoint_state_names_absolute_paths_that_no_longer_exist(generated: Path) -> None:
    state = (generated / "detector/ckpt/checkpoint").read_text()
    paths = re.findall(r'^\w+: "(.*)"$', state, flags=re.MULTILINE)
    staged = str(generated.with_name("models.partial") / "detector/ckpt/model.ckpt")
    assert paths == [staged, staged]
    assert not Path(staged + ".index").exists()


def test_generation_is_deterministic_and_replaces_the_old_tree(
        generated: Path, facts: dict[str, Any], tmp_path: Path) -> None:
    second = tmp_path / "models"
    second.mkdir()
    (second / "stale.txt").write_text("from an older run")
    _generate(second)
    assert not (second / "stale.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models"]
    assert _child("checkpoint-digests", second) == facts["checkpoint"]
    first_files, second_files = _files(generated), _files(second)
    assert sorted(first_files) == sorted(second_files)
    changed = {name for name in first_files if first_files[name] != second_files[name]}
    assert changed <= NOT_BYTE_STABLE


def test_checkpoint_holds_the_detector_variables(facts: dict[str, Any]) -> None:
    variables = facts["checkpoint"]
    expected = {f"{b}/conv/weights" for b in BLOCKS}
    expected |= {f"{b}/bn/{p}" for b in BLOCKS
                 for p in ("gamma", "beta", "moving_mean", "moving_variance")}
    expected |= {f"{h}/{p}" for h in ("dense", "class_head", "box_head")
                 for p in ("weights", "biases")}
    assert set(variables) == expected
    assert variables["dense/weights"]["shape"] == [8192, 512]
    assert variables["block4/conv/weights"]["shape"] == [3, 3, 64, 128]
    assert {v["dtype"] for v in variables.values()} == {"float32"}


def test_every_export_holds_the_checkpoint_values(facts: dict[str, Any]) -> None:
    wanted = sorted(d["sha256"] for d in facts["checkpoint"].values())
    for name, digests in facts["savedmodel_variables"].items():
        assert digests == wanted, name


def test_meta_graph_carries_the_serving_signature(facts: dict[str, Any]) -> None:
    assert facts["meta_signature"] == {
        "inputs": {"images": "images:0"},
        "outputs": {key: f"outputs/{key}:0" for key in OUTPUT_KEYS},
    }


def test_planted_export_differs_in_exactly_one_attr(facts: dict[str, Any]) -> None:
    assert facts["planted_vs_faithful"] == [
        ["block2/bn/FusedBatchNormV3", "attr:epsilon", "0.001", "0.01"]]
    diffs = facts["variant_output_diffs"]["detector_planted"]
    assert diffs["scores"]["max_abs"] > 1e-4


def test_folded_export_has_no_batch_norm_left(facts: dict[str, Any], generated: Path) -> None:
    ops = facts["folded_ops"]
    assert "FusedBatchNormV3" not in ops.values()
    assert "VariableV2" not in ops.values()
    for block in BLOCKS:
        assert ops[f"{block}/bn/FusedBatchNormV3"] == "BiasAdd"
        assert ops[f"{block}/conv/Conv2D"] == "Conv2D"
        assert ops[f"{block}/conv/Conv2D_weights"] == "Const"
        assert ops[f"{block}/conv/Conv2D_bn_offset"] == "Const"
        assert f"{block}/conv/weights" not in ops
        assert f"{block}/bn/gamma" not in ops
    diff = (generated / "detector_folded/node_diff.txt").read_text().splitlines()
    assert sum(line.startswith("+ ") for line in diff) == 8
    assert sum(line.startswith("~ ") and line.endswith("FusedBatchNormV3 -> BiasAdd")
               for line in diff) == 4
    assert 0.0 < facts["variant_output_diffs"]["detector_folded"]["scores"]["max_abs"] < 1e-5


def test_bf16_export_adds_exactly_the_casts_around_dense(facts: dict[str, Any]) -> None:
    assert facts["bf16_casts"] == [
        ["dense/to_bf16_input", "float32", "bfloat16"],
        ["dense/to_bf16_weights", "float32", "bfloat16"],
        ["dense/to_fp32", "bfloat16", "float32"],
    ]
    assert facts["bf16_vs_faithful"] == [
        ["dense/to_bf16_input", "only_in_b", "", ""],
        ["dense/to_bf16_weights", "only_in_b", "", ""],
        ["dense/to_fp32", "only_in_b", "", ""],
        ["dense/BiasAdd", "input", "dense/MatMul,dense/biases/read",
         "dense/to_fp32,dense/biases/read"],
        ["dense/MatMul", "input", "flatten/Reshape,dense/weights/read",
         "dense/to_bf16_input,dense/to_bf16_weights"],
        ["dense/MatMul", "attr:T", "float32", "bfloat16"],
    ]
    assert facts["variant_output_diffs"]["detector_bf16"]["scores"]["max_abs"] > 1e-4


def test_tf2_export_computes_the_same_numbers_bitwise(facts: dict[str, Any]) -> None:
    assert facts["tf2_signature"] == {"inputs": ["images"], "outputs": sorted(OUTPUT_KEYS)}
    assert facts["tf2_vs_tf1"] == {key: {"bitwise": True, "max_abs": 0.0} for key in OUTPUT_KEYS}


def test_nan_model_produces_nan_at_log_and_its_twin_does_not(facts: dict[str, Any]) -> None:
    assert facts["nan_model"] == {
        "layer/MatMul": {"nan_rows": 0, "shape": [8, 6]},
        "layer/Log": {"nan_rows": 8, "shape": [8, 6]},
        "y": {"nan_rows": 8, "shape": [8]},
    }
    assert facts["nan_model_safe"] == {
        "layer/MatMul": {"nan_rows": 0, "shape": [8, 6]},
        "layer/Log": {"nan_rows": 0, "shape": [8, 6]},
        "y": {"nan_rows": 0, "shape": [8]},
    }


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
