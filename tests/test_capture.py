"""`tftrace capture` end to end: every side runs in its own child process, as a user runs it.

The captures are shared: module-scoped fixtures start them a few at a time (the machine has two
cores) and the tests read the resulting directories. Where an answer depends on the CPU (which
op first differs between batch sizes or oneDNN settings) it comes from plain sessions run here
(tests/plain_truth.py); the conftest pins TF_ENABLE_ONEDNN_OPTS=0 for every child that does not
pass --onednn.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import struct
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import REPO, assert_user_error, run_cli
from tracer.captures.fingerprint import tensorflow_env
from tracer.captures import Capture
from tracer.errors import TftraceError

pytestmark = pytest.mark.slow

PARALLEL = 3  # concurrent captures: TF import and loading overlap well with computing on 2 cores
PLAIN_FUSED = {"_FusedConv2D": 4, "_FusedMatMul": 3}  # detector, oneDNN off: conv+bn+relu, dense+bias(+relu)


def _run_all(jobs: dict[str, list[str]], env: dict[str, str] | None = None) -> dict[str, subprocess.CompletedProcess]:
    """Run several ``tftrace`` command lines, PARALLEL at a time; name -> finished process."""
    with ThreadPoolExecutor(PARALLEL) as pool:
        futures = {name: pool.submit(run_cli, *args, env=env) for name, args in jobs.items()}
        return {name: future.result() for name, future in futures.items()}


def _ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)


def _output(cap: Capture, key: str) -> np.ndarray:
    """A signature output by its key (TF1 and TF2 exports name the tensors differently)."""
    return cap.tensor(cap.manifest["signature"]["outputs"][key]["name"])


def _bitwise_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


def _tf_example(x: float) -> bytes:
    """A serialized tf.Example {"x": float_list [x]}, written byte by byte (no TF in the test process)."""
    value = struct.pack("<f", x)
    float_list = b"\x0a\x04" + value  # FloatList.value, packed
    feature = b"\x12" + bytes([len(float_list)]) + float_list  # Feature.float_list
    entry = b"\x0a\x01x" + b"\x12" + bytes([len(feature)]) + feature  # map entry: key "x", value
    features = b"\x0a" + bytes([len(entry)]) + entry  # Features.feature
    return b"\x0a" + bytes([len(features)]) + features  # Example.features


# --------------------------------------------------------------------------- shared captures


# A shell that also runs Terraform: its variables share TensorFlow's TF_ prefix, some are secrets.
TERRAFORM_SHELL = {"TF_VAR_db_password": "hunter2", "TF_API_TOKEN": "tok-3141", "TF_LOG": "TRACE",
                   "TF_CLI_CONFIG_FILE": "/home/me/.terraformrc"}


@pytest.fixture(scope="module")
def det(models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The detector captures most tests read: name -> capture directory."""
    root = tmp_path_factory.mktemp("det")
    model, tf2 = str(models["detector"]), str(models["detector_tf2"])
    off = ["--onednn", "off", "--examples", "8", "--batch-size", "8"]
    jobs = {
        "b8": [model, *off],
        "b8_again": [model, *off],
        "b1": [model, "--onednn", "off", "--examples", "8", "--batch-size", "1", "--timing-runs", "3"],
        "on": [model, "--onednn", "on", "--examples", "8", "--batch-size", "8"],
        "tf2": [tf2, *off],
        "five_by_two": [model, "--onednn", "off", "--examples", "5", "--batch-size", "2"],
        "chunked": [model, *off, "--max-memory", "20000000"],
        "knobs": [model, "--examples", "2", "--determinism", "--threads", "1,1", "--env", "TF_TFTRACE_PROBE=yes"],
        "xla": [model, "--examples", "2", "--xla", "on"],
    }
    results = _run_all({name: ["capture", *args, "--out", str(root / name)] for name, args in jobs.items()},
                       env=TERRAFORM_SHELL)
    for proc in results.values():
        _ok(proc)
    return {name: root / name for name in jobs}


@pytest.fixture(scope="module")
def hpt_inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Input files for half_plus_two (x: float32 [?, 1]) and its tf.Example signatures."""
    root = tmp_path_factory.mktemp("inputs")
    x = np.array([[1.0], [2.0], [5.0]], np.float32)
    files = {
        "npz": root / "x.npz", "npy": root / "x.npy", "missing": root / "missing.npz",
        "dtype": root / "dtype.npz", "shape": root / "shape.npz", "examples": root / "examples.npz",
    }
    np.savez(files["npz"], x=x)
    np.save(files["npy"], x)
    np.savez(files["missing"], y=x)
    np.savez(files["dtype"], x=x.astype(np.float64))
    np.savez(files["shape"], x=np.ones((3, 2), np.float32))
    np.savez(files["examples"], inputs=np.array([_tf_example(v) for v in (1.0, 2.0, 5.0)], dtype="S"))
    return files


@pytest.fixture(scope="module")
def hpt(real_models: dict[str, Path], hpt_inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory,
        while_loop_model: Path) -> dict[str, Any]:
    """Captures and refusals of the small real models: name -> (directory, finished process)."""
    root = tmp_path_factory.mktemp("hpt")
    model, counter = str(real_models["half_plus_two"]), str(real_models["counter"])
    config, bad_config = root / "session.pbtxt", root / "bad.pbtxt"
    config.write_text("intra_op_parallelism_threads: 1\ngraph_options { rewrite_options { remapping: OFF } }\n")
    bad_config.write_text("intra_op_parallelism_threads: one\n")
    jobs = {
        "npy": [model, "--inputs", str(hpt_inputs["npy"])],
        "remapping_off": [model, "--inputs", str(hpt_inputs["npy"]), "--grappler", "remapping=off"],
        "session_config": [model, "--inputs", str(hpt_inputs["npy"]), "--session-config", str(config)],
        "bad_session_config": [model, "--session-config", str(bad_config)],
        "missing_key": [model, "--inputs", str(hpt_inputs["missing"])],
        "wrong_dtype": [model, "--inputs", str(hpt_inputs["dtype"])],
        "wrong_shape": [model, "--inputs", str(hpt_inputs["shape"])],
        "string_generated": [model, "--signature", "regress_x_to_y"],
        "string_given": [model, "--signature", "regress_x_to_y", "--inputs", str(hpt_inputs["examples"])],
        "counter": [counter, "--signature", "get_counter"],
        "while_loop": [str(while_loop_model), "--examples", "2"],
        "determinism": [model, "--determinism"],
    }
    results = _run_all({name: ["capture", *args, "--out", str(root / name)] for name, args in jobs.items()})
    return {name: (root / name, results[name]) for name in jobs}


@pytest.fixture(scope="module")
def while_loop_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A TF1 SavedModel with a v1 while loop (Enter/Merge/Switch/Exit frames): y = relu(x*8 + 7)."""
    out = tmp_path_factory.mktemp("while") / "model"
    script = textwrap.dedent(
        """
        import sys
        import tensorflow as tf
        tf.compat.v1.disable_eager_execution()
        tf.compat.v1.disable_control_flow_v2()
        graph = tf.Graph()
        with graph.as_default():
            x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
            _, acc = tf.compat.v1.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * 2.0 + 1.0),
                                             [tf.constant(0, name="i0"), x], name="loop")
            y = tf.identity(tf.nn.relu(acc, name="relu"), name="y")
            with tf.compat.v1.Session(graph=graph) as sess:
                builder = tf.compat.v1.saved_model.Builder(sys.argv[1])
                sig = tf.compat.v1.saved_model.predict_signature_def({"x": x}, {"y": y})
                builder.add_meta_graph_and_variables(sess, ["serve"], signature_def_map={"serving_default": sig})
                builder.save()
        """
    )
    subprocess.run([sys.executable, "-c", script, str(out)], check=True, capture_output=True, timeout=300)
    return out


# --------------------------------------------------------------------------- what is captured


def test_captured_tensors_equal_a_direct_session_run(det: dict[str, Path], models: dict[str, Path],
                                                     tmp_path: Path) -> None:
    """The same fetches in a plain TF1 session over the same inputs give the same bits."""
    cap = Capture.open(det["b8"])
    names = [n for n in cap.tensor_names if n != "images:0"]
    for name in ("block3/conv/Conv2D:0", "dense/MatMul:0", "block1/bn/FusedBatchNormV3:0", "outputs/scores:0",
                 "outputs/detection_boxes:0", "nms/combined_non_max_suppression/CombinedNonMaxSuppression:0"):
        assert name in names
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"model": str(models["detector"]), "capture": str(det["b8"]), "names": names}))
    script = textwrap.dedent(
        """
        import json, sys
        import numpy as np
        import tensorflow as tf
        from tracer.captures import Capture
        req = json.load(open(sys.argv[1]))
        images = np.asarray(Capture.open(req["capture"]).tensor("images:0"))
        graph = tf.Graph()
        with tf.compat.v1.Session(graph=graph) as sess:
            tf.compat.v1.saved_model.loader.load(sess, ["serve"], req["model"])
            values = sess.run(req["names"], feed_dict={"images:0": images})
        np.savez(sys.argv[2], *values)
        """
    )
    direct_file = tmp_path / "direct.npz"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "-1", "TF_ENABLE_ONEDNN_OPTS": "0", "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", script, str(request), str(direct_file)], check=True, env=env,
                   capture_output=True, timeout=300)
    with np.load(direct_file) as direct:
        differing = [n for i, n in enumerate(names) if not _bitwise_equal(cap.tensor(n), direct[f"arr_{i}"])]
    assert differing == []
    assert cap.tensor("block3/conv/Conv2D:0").shape == (8, 8, 8, 64)
    assert cap.tensor("dense/MatMul:0").shape == (8, 512)


def test_capture_layout_and_manifest(det: dict[str, Path]) -> None:
    cap = Capture.open(det["b8"])
    m = cap.manifest
    assert m["runs"] == [[0, 8]] and m["batch_size"] == 8 and m["fetch_chunks"] == 1
    assert m["examples"] == {"count": 8, "source": "generated (seed 0, N(0,1) floats)", "batch_major": True}
    assert len(cap.tensor_names) == 139
    assert m["tensor_layout"]["block1/conv/Conv2D:0"] == "rows" and m["tensor_layout"]["dense/weights:0"] == "const"
    record = cap.record("block1/conv/Conv2D:0")
    assert record["shape"] == [8, 32, 32, 16] and record["batch_major"] is True and record["dtype"] == "float32"
    assert set(record["stats"]) == {"min", "max", "mean", "nan", "inf"} and record["stats"]["nan"] == 0
    order = [node["name"] for node in m["graph"]["nodes"]]
    ops = [n.rsplit(":", 1)[0] for n in cap.tensor_names]
    assert [o for o in order if o in set(ops)] == list(dict.fromkeys(ops))  # written in topological order
    # FusedBatchNormV3's reserve outputs exist only in training: listed, with the reason.
    assert cap.uncaptured == {f"block{b}/bn/FusedBatchNormV3:{s}": "an output nothing in the model reads"
                              for b in range(1, 5) for s in range(1, 6)}
    stored = [r for r in m["tensors"].values() if r.get("values") != "artifact"]  # the rest: digests of the checkpoint's
    assert all(not Path(r["file"]).name.count("/") and ".." not in r["file"] for r in stored)


OUTPUT_IDENTITIES = {  # the detector's outputs/* Identities and the tensors they repeat
    "outputs/boxes:0": "decode/boxes:0",
    "outputs/scores:0": "class_head/scores:0",
    "outputs/detection_boxes:0": "nms/combined_non_max_suppression/CombinedNonMaxSuppression:0",
    "outputs/detection_scores:0": "nms/combined_non_max_suppression/CombinedNonMaxSuppression:1",
    "outputs/detection_classes:0": "nms/combined_non_max_suppression/CombinedNonMaxSuppression:2",
    "outputs/num_detections:0": "nms/combined_non_max_suppression/CombinedNonMaxSuppression:3",
}


@pytest.mark.parametrize("name", ["b8", "five_by_two"])
def test_pass_through_tensors_are_stored_once(det: dict[str, Path], name: str) -> None:
    """Each variable and its /read, each output Identity and its input: one file with two names,
    over one run (b8) and over three (five_by_two: the rows arrive batch by batch)."""
    cap = Capture.open(det[name])
    ops = {node["name"]: node["op"] for node in cap.manifest["graph"]["nodes"]}
    aliases = {n: cap.alias_of(n) for n in cap.tensor_names if cap.alias_of(n)}
    variables = [n for n in cap.tensor_names if ops[n.rsplit(":", 1)[0]] == "VariableV2"]
    assert len(variables) == 26
    assert aliases == {**{v.replace(":0", "/read:0"): v for v in variables}, **OUTPUT_IDENTITIES}
    assert {cap.manifest["tensor_layout"][n] for n in OUTPUT_IDENTITIES} == {"rows"}
    # the large variables (and their reads) keep a digest only: the checkpoint holds their values
    kept = {n for n in cap.tensor_names if cap.record(n).get("values") == "artifact"}
    assert kept and {ops[n.rsplit(":", 1)[0]] for n in kept} == {"VariableV2", "Identity"}
    assert all(cap.record(n)["size_bytes"] >= 16 << 10 for n in kept)
    files = {n: cap.path / cap.record(n)["file"] for n in cap.tensor_names if n not in kept}
    for alias, target in aliases.items():
        if alias in kept:
            assert target in kept and cap.digest(alias) == cap.digest(target) is not None
            assert cap.record(alias)["stats"] == cap.record(target)["stats"]
            continue
        assert files[alias] != files[target] and os.path.samefile(files[alias], files[target])
        assert _bitwise_equal(cap.tensor(alias), cap.tensor(target))
        assert cap.record(alias)["stats"] == cap.record(target)["stats"]
    sizes = {n: f.stat().st_size for n, f in files.items()}
    on_disk = {(f.stat().st_dev, f.stat().st_ino): f.stat().st_size for f in files.values()}
    assert len(on_disk) == len(files) - len(set(aliases) - kept) == len(cap.tensor_names) - 32 - len(kept) // 2
    assert sum(on_disk.values()) == sum(sizes.values()) - sum(sizes[a] for a in aliases if a not in kept)
    weights = sum(cap.record(a)["size_bytes"] for a in aliases if a.endswith("/read:0"))
    assert weights == 18_222_528  # the weights' bytes, no longer written twice


def test_two_captures_of_the_same_side_are_bit_identical(det: dict[str, Path]) -> None:
    a, b = Capture.open(det["b8"]), Capture.open(det["b8_again"])
    assert a.tensor_names == b.tensor_names and a.uncaptured == b.uncaptured
    assert [n for n in a.tensor_names if not _bitwise_equal(a.tensor(n), b.tensor(n))] == []
    assert a.manifest["observer_effect"]["executed_ops"] == b.manifest["observer_effect"]["executed_ops"]


def test_batch_1_and_batch_8_keep_rows_aligned(det: dict[str, Path], models: dict[str, Path]) -> None:
    one, eight = Capture.open(det["b1"]), Capture.open(det["b8"])
    assert one.manifest["runs"] == [[i, i + 1] for i in range(8)] and eight.manifest["runs"] == [[0, 8]]
    assert one.tensor_names == eight.tensor_names
    assert _bitwise_equal(one.tensor("images:0"), eight.tensor("images:0"))
    conv1, conv8 = one.tensor("block1/conv/Conv2D:0"), eight.tensor("block1/conv/Conv2D:0")
    assert conv1.shape == conv8.shape == (8, 32, 32, 16)
    for row in range(8):
        np.testing.assert_allclose(conv1[row], conv8[row], rtol=0, atol=1e-5)
    dense1, dense8 = one.tensor("dense/MatMul:0"), eight.tensor("dense/MatMul:0")
    assert np.max(np.abs(dense1 - dense8)) < 1e-4
    # Which op first differs bitwise between batch 1 and 8 depends on the CPU's kernels: plain
    # sessions here say; the captures agree bitwise up to that op, row by row, and differ there.
    from plain_truth import captured_inputs, first_row_divergence  # noqa: PLC0415

    inputs = captured_inputs(det["b8"])
    truth = first_row_divergence(models["detector"], inputs, 1, inputs, 8, list(range(8)), onednn="off")
    for op in truth["agreeing"]:
        if one.has(f"{op}:0") and eight.has(f"{op}:0"):
            assert _bitwise_equal(one.tensor(f"{op}:0"), eight.tensor(f"{op}:0")), (op, truth["bitwise"])
    if truth["bitwise"] is not None:
        first = f"{truth['bitwise']}:0"
        assert not _bitwise_equal(one.tensor(first), eight.tensor(first)), truth["bitwise"]


def test_examples_5_at_batch_2_make_3_runs_with_rows_at_their_example_indices(det: dict[str, Path]) -> None:
    cap, eight = Capture.open(det["five_by_two"]), Capture.open(det["b8"])
    assert cap.manifest["runs"] == [[0, 2], [2, 4], [4, 5]] and cap.manifest["batch_size"] == 2
    assert cap.manifest["examples"]["count"] == 5
    images = cap.tensor("images:0")
    assert images.shape == (5, 64, 64, 3)
    assert _bitwise_equal(images, np.asarray(eight.tensor("images:0")[:5]))  # same seed: the same first 5 examples
    np.testing.assert_allclose(cap.tensor("block1/conv/Conv2D:0"), eight.tensor("block1/conv/Conv2D:0")[:5],
                               rtol=0, atol=1e-5)
    np.testing.assert_allclose(_output(cap, "scores"), _output(eight, "scores")[:5], rtol=0, atol=1e-5)
    assert cap.manifest["observer_effect"]["outputs_identical"] is True


def test_onednn_setting_really_reaches_the_child(det: dict[str, Path], models: dict[str, Path]) -> None:
    """oneDNN is off by default on this AVX2 CPU (TF turns it on only for AVX512_VNNI/BF16,
    AVX_VNNI or AMX: tensorflow/core/util/port.cc); --onednn on must switch it on in the child."""
    on, off = Capture.open(det["on"]), Capture.open(det["b8"])
    assert on.environment["tf_env"]["TF_ENABLE_ONEDNN_OPTS"] == "1"
    assert off.environment["tf_env"]["TF_ENABLE_ONEDNN_OPTS"] == "0"
    assert on.environment["onednn"]["TF_ENABLE_ONEDNN_OPTS"] == "1" and on.environment["onednn"]["enabled"] is True
    assert off.environment["onednn"]["TF_ENABLE_ONEDNN_OPTS"] == "0" and off.environment["onednn"]["enabled"] is False
    assert on.spec["knobs"]["onednn"] == "on" and off.spec["knobs"]["onednn"] == "off"
    plain_on = on.manifest["observer_effect"]["executed_ops"]["plain"]
    plain_off = off.manifest["observer_effect"]["executed_ops"]["plain"]
    assert {op: n for op, n in plain_on.items() if op.startswith("_Mkl")} == {
        "_MklNativeFusedConv2D": 4, "_MklNativeFusedMatMul": 3, "_MklSoftmax": 1}
    assert not [op for op in plain_off if op.startswith("_Mkl")]
    assert on.environment["onednn"]["ops_executed"] == ["_MklNativeFusedConv2D", "_MklNativeFusedMatMul", "_MklSoftmax"]
    assert off.environment["onednn"]["ops_executed"] == []
    instrumented_on = on.manifest["observer_effect"]["executed_ops"]["instrumented"]
    assert instrumented_on["_MklNativeConv2D"] == 4 and "_MklNativeFusedConv2D" not in instrumented_on
    # The settings change the numbers; where they first do depends on the CPU, so plain sessions
    # on this machine say, and the two captures agree bitwise up to that op and differ there.
    from plain_truth import captured_inputs, first_row_divergence  # noqa: PLC0415

    inputs = captured_inputs(det["on"])
    truth = first_row_divergence(models["detector"], inputs, 8, inputs, 8, list(range(8)), onednn="on", b_onednn="off")
    assert truth["bitwise"] is not None, "oneDNN on and off agree bitwise in plain sessions on this machine"
    first = f"{truth['bitwise']}:0"
    assert not _bitwise_equal(on.tensor(first), off.tensor(first)), truth
    for op in truth["agreeing"]:
        tensor = f"{op}:0"
        if on.has(tensor) and off.has(tensor):
            assert _bitwise_equal(on.tensor(tensor), off.tensor(tensor)), tensor
    assert not _bitwise_equal(_output(on, "scores"), _output(off, "scores"))


def test_observer_effect_on_the_detector(det: dict[str, Path]) -> None:
    effect = Capture.open(det["b8"]).manifest["observer_effect"]
    plain, instrumented = effect["executed_ops"]["plain"], effect["executed_ops"]["instrumented"]
    assert {op: plain[op] for op in PLAIN_FUSED} == PLAIN_FUSED
    assert not set(PLAIN_FUSED) & set(instrumented)
    assert instrumented["Conv2D"] == 4 and instrumented["FusedBatchNormV3"] == 4 and instrumented["MatMul"] == 3
    assert effect["only_in_plain"] == ["_FusedConv2D", "_FusedMatMul"]
    assert set(effect["only_in_instrumented"]) == {"BiasAdd", "Conv2D", "FusedBatchNormV3", "MatMul", "Relu"}
    assert {n: effect["executed_nodes_plain"][n] for n in ("block1/relu", "dense/Relu")} == {
        "block1/relu": "_FusedConv2D", "dense/Relu": "_FusedMatMul"}
    # Measured: with oneDNN off the fused and unfused kernels agree bitwise on these outputs.
    assert effect["outputs_identical"] is True
    assert set(effect["outputs_max_abs_diff"].values()) == {0.0} and len(effect["outputs_max_abs_diff"]) == 6
    on = Capture.open(det["on"]).manifest["observer_effect"]
    diffs = on["outputs_max_abs_diff"]
    assert all(d is not None and 0 <= d < 1e-5 for d in diffs.values())
    assert on["outputs_identical"] is (max(diffs.values()) == 0)


def test_observer_effect_on_half_plus_two(hpt: dict[str, Any]) -> None:
    """A model made elsewhere (TF 1.12): conv2d/BiasAdd is fused only when nobody watches."""
    path, proc = hpt["npy"]
    _ok(proc)
    effect = Capture.open(path).manifest["observer_effect"]
    assert effect["executed_nodes_plain"] == {"conv2d/BiasAdd": "_FusedConv2D"}
    assert effect["only_in_plain"] == ["_FusedConv2D"] and effect["only_in_instrumented"] == ["BiasAdd", "Conv2D"]
    assert effect["outputs_identical"] is True and effect["outputs_max_abs_diff"] == {"y": 0.0}


def test_fingerprint_records_the_environment(det: dict[str, Path]) -> None:
    env = Capture.open(det["b8"]).environment
    assert env["tensorflow"] == "2.21.0" and env["tf_git_version"].startswith("v2.21")
    assert env["build"]["is_cuda_build"] is False
    assert env["devices"] == ["/physical_device:CPU:0"] and env["gpus"] == [] and env["cuda_visible_devices"] == "-1"
    with open("/proc/cpuinfo", encoding="utf-8") as fh:
        model = next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
    assert env["cpu"]["model"] == model and env["cpu"]["cores"] == os.cpu_count()
    assert {"sse4_2", "avx", "avx2", "fma"} <= set(env["cpu"]["vector_flags"])
    assert env["onednn"]["default_on_this_cpu"] is ("avx512_vnni" in env["cpu"]["vector_flags"]
                                                   or "avx_vnni" in env["cpu"]["vector_flags"]
                                                   or "avx512_bf16" in env["cpu"]["vector_flags"]
                                                   or "amx_tile" in env["cpu"]["vector_flags"])
    assert env["python"] == sys.version.split()[0] and env["numpy"] == np.__version__
    assert env["hostname"] == os.uname().nodename
    assert abs(datetime.now(timezone.utc) - datetime.fromisoformat(env["time_utc"])) < timedelta(hours=1)
    expected_tf_env = tensorflow_env({**os.environ, **TERRAFORM_SHELL, "TF_ENABLE_ONEDNN_OPTS": "0"})
    assert env["tf_env"] == expected_tf_env and env["tf_env"]["TF_ENABLE_ONEDNN_OPTS"] == "0"
    assert env["tf_env"]["TF_API_TOKEN"] == "(set; value not recorded)"
    assert not {"TF_VAR_db_password", "TF_LOG", "TF_CLI_CONFIG_FILE"} & set(env["tf_env"])
    manifest = (det["b8"] / "manifest.json").read_text(encoding="utf-8")
    assert "hunter2" not in manifest and "tok-3141" not in manifest and "terraformrc" not in manifest
    assert env["op_determinism"] is False and env["tf32_enabled"] is None


def test_timings_are_present_and_positive(det: dict[str, Path]) -> None:
    timings = Capture.open(det["b8"]).manifest["timings"]
    assert timings["load_s"] > 0 and timings["instrumented_s"] > 0 and timings["total_s"] > timings["load_s"]
    latency = timings["plain_latency_ms"]
    assert latency["runs"] == 1 and latency["batch_rows"] == 8  # one timed run by default
    assert 0 < latency["min"] == latency["median"] == latency["max"]
    asked = Capture.open(det["b1"]).manifest["timings"]["plain_latency_ms"]  # --timing-runs 3
    assert asked["runs"] == 3 and asked["batch_rows"] == 1
    assert 0 < asked["min"] <= asked["median"] <= asked["max"]


def test_timing_runs_below_one_are_refused_before_anything_runs(tmp_path: Path, models: dict[str, Path]) -> None:
    out = tmp_path / "cap"
    proc = run_cli("capture", str(models["detector"]), "--timing-runs", "0", "--out", str(out))
    assert_user_error(proc, "--timing-runs 0 is not positive", "Use --timing-runs 1 or more.")
    assert not out.exists()


def test_tf2_savedmodel_is_captured_from_the_inside(det: dict[str, Path]) -> None:
    tf2, tf1 = Capture.open(det["tf2"]), Capture.open(det["b8"])
    inner = "StatefulPartitionedCall/detector/"
    for op in ("block1/conv/Conv2D", "block4/relu", "dense/MatMul", "class_head/scores", "decode/boxes"):
        assert tf2.has(f"{inner}{op}:0")
        assert _bitwise_equal(tf2.tensor(f"{inner}{op}:0"), tf1.tensor(f"{op}:0"))
    assert tf2.manifest["artifact"]["kind"] == "saved_model_v2" and tf2.manifest["artifact"]["inlined_by_loader"]
    for key in tf1.manifest["signature"]["outputs"]:
        assert _bitwise_equal(_output(tf2, key), _output(tf1, key)), key
    # Variables are resource handles: listed with the reason, their read values captured instead.
    handles = {n for n, r in tf2.uncaptured.items() if r == "a resource handle holds no values"}
    dtypes = {f"{node['name']}:{slot}": out["dtype"] for node in tf2.manifest["graph"]["nodes"]
              for slot, out in enumerate(node["outputs"])}
    assert {n for n, dtype in dtypes.items() if dtype == "resource"} == handles
    assert len({n for n in handles if not n.startswith("Func/")}) == 26  # one VarHandleOp per variable
    assert tf2.has(f"{inner}block1/conv/Conv2D/ReadVariableOp:0")


def test_uncapturable_tensors_are_listed_with_reasons(hpt: dict[str, Any]) -> None:
    """Tensors inside a TF1 while-loop frame cannot be fetched (constants in the body included:
    they hang off the loop by a control edge); the capture lists them and keeps the rest."""
    path, proc = hpt["while_loop"]
    _ok(proc)
    cap = Capture.open(path)
    assert cap.tensor_names == ["i0:0", "x:0", "loop/Exit_1:0", "relu:0", "y:0"]
    inside = "inside a while-loop frame: a session cannot fetch it"
    assert len(cap.uncaptured) == 23 and set(cap.uncaptured.values()) == {inside}
    for name in ("loop/Enter:0", "loop/Merge:0", "loop/Less/y:0", "loop/mul/y:0", "loop/NextIteration_1:0"):
        assert cap.uncaptured[name] == inside
    x = cap.tensor("x:0")
    np.testing.assert_array_equal(cap.tensor("y:0"), np.maximum(x * 8 + 7, 0))
    graph = {n["name"]: n for n in cap.manifest["graph"]["nodes"]}  # the manifest's op graph agrees
    assert graph["loop/Less/y"]["outputs"] == [{"dtype": "int32", "shape": [], "capturable": False, "reason": inside}]


# --------------------------------------------------------------------------- inputs


def _captured_from_python(real_models: dict[str, Path], hpt_inputs: dict[str, Path], out: Path,
                          max_memory: int = 2 << 30) -> dict[str, Any]:
    """half_plus_two captured through the Python API by a parent that never imports TensorFlow:
    what it saw (``events``) and read back."""
    script = textwrap.dedent(
        """
        import json, sys
        from tracer.artifacts.records import ArtifactRef
        from tracer.captures.launcher import capture
        from tracer.runspec import InputSpec, Side
        events = []
        side = Side(ArtifactRef(sys.argv[1]), batch_size=2, inputs=InputSpec(inputs_file=sys.argv[2]),
                    max_memory=int(sys.argv[4]))
        cap = capture(side, sys.argv[3], on_event=events.append)
        print(json.dumps({"events": events, "tensorflow": "tensorflow" in sys.modules, "x": cap.tensor("x:0").tolist(),
                          "y": cap.tensor("y:0").tolist(), "runs": cap.manifest["runs"],
                          "source": cap.manifest["examples"]["source"]}))
        """
    )
    proc = subprocess.run([sys.executable, "-c", script, str(real_models["half_plus_two"]), str(hpt_inputs["npz"]),
                           str(out), str(max_memory)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_progress_events_and_a_parent_without_tensorflow(real_models: dict[str, Path], hpt_inputs: dict[str, Path],
                                                         tmp_path: Path) -> None:
    """The Python API from a parent that never imports TensorFlow; --inputs .npz keyed by input."""
    result = _captured_from_python(real_models, hpt_inputs, tmp_path / "cap")
    assert result["tensorflow"] is False
    assert result["x"] == [[1.0], [2.0], [5.0]] and result["y"] == [[2.5], [3.0], [4.5]]
    assert result["runs"] == [[0, 2], [2, 3]] and result["source"] == "x.npz"
    stages = [e["text"] for e in result["events"] if e["event"] == "stage"]
    assert stages[:3] == ["loading model", "plain run", "instrumented run"]
    # each run's fetch, then its storing, named with how many tensors; then the finish
    fetched = [t for t in stages if t.startswith("instrumented run: fetching ")]
    assert len(fetched) == 2 and stages[-1] == "finishing: outputs, manifest, the last writes made durable"
    assert all(t.endswith(" tensors") for t in stages[3:-1])
    # the second run fetches what the first fetched, constants included, so TensorFlow reuses its executor
    # (a new set of fetches is pruned and optimised anew: 13-16 s a run on the 35,000-op RetinaNet stand-in)
    assert fetched[0] == fetched[1] == "instrumented run: fetching 18 tensors"
    stored = [t for t in stages if t.startswith("instrumented run: storing ")]
    assert stored == ["instrumented run: storing 18 tensors", "instrumented run: storing 5 tensors"]  # not the constants
    progress = [e for e in result["events"] if e["event"] == "progress"]
    runs = [e for e in progress if "tensors" not in e]
    assert [(e["done"], e["total"]) for e in runs] == [(1, 2), (2, 2)]
    storing = [e for e in progress if "tensors" in e]  # where a run's storing stands, told after each fetch
    assert [e["done"] for e in storing] == [0, 1] and all(0 < e["stored"] <= e["tensors"] for e in storing)
    assert 0 < runs[0]["bytes"] < runs[1]["bytes"]
    # the bar moves by bytes: each run stores what was planned for its rows (2, then 1; shapes known but for the batch)
    assert [e["run_bytes"] for e in storing] == [e["planned"] for e in storing]
    assert storing[1]["planned"] * 2 < storing[0]["planned"]  # run 1 has half the rows, and no constants again
    assert sum(e["run_bytes"] for e in storing) == runs[1]["bytes"]


def test_a_run_split_under_max_memory_says_which_part_of_how_many_it_fetches(
        real_models: dict[str, Path], hpt_inputs: dict[str, Path], tmp_path: Path) -> None:
    """--max-memory of 400 bytes (its largest tensor): half_plus_two's first run, 2 rows, is fetched in
    parts; each part says its place among them, and the values are the unsplit run's."""
    result = _captured_from_python(real_models, hpt_inputs, tmp_path / "cap", max_memory=400)
    assert result["y"] == [[2.5], [3.0], [4.5]]
    first_run = []
    for event in result["events"]:
        if event["event"] == "progress" and "tensors" not in event:
            break  # the first run is done
        if event["event"] == "stage" and event["text"].startswith("instrumented run: fetching "):
            first_run.append(event["text"])
    parts = len(first_run)
    assert parts > 2
    assert [t.endswith(f" (part {i} of {parts})") for i, t in enumerate(first_run, 1)] == [False] + [True] * (parts - 1)


def test_single_npy_for_a_one_input_model(hpt: dict[str, Any], hpt_inputs: dict[str, Path]) -> None:
    path, proc = hpt["npy"]
    _ok(proc)
    cap = Capture.open(path)
    assert cap.manifest["examples"]["source"] == "x.npy" and cap.manifest["runs"] == [[0, 3]]
    # the file's own digest, as sha256sum prints it: what a report's Reproduce section names
    assert cap.manifest["examples"]["file_sha256"] == hashlib.sha256(hpt_inputs["npy"].read_bytes()).hexdigest()
    np.testing.assert_array_equal(cap.tensor("x:0"), [[1.0], [2.0], [5.0]])
    np.testing.assert_array_equal(cap.tensor("y:0"), [[2.5], [3.0], [4.5]])
    assert "captured 18 tensors (2 not capturable)" in proc.stdout


@pytest.mark.parametrize(
    "case, fragments",
    [
        ("missing_key", ("has keys ['y'] but the signature expects ['x']", "missing: x")),
        ("wrong_dtype", ("input 'x' is float64, the signature expects float32",)),
        ("wrong_shape", ("input 'x' has shape [3, 2], the signature expects [?, 1]",)),
    ],
)
def test_inputs_that_do_not_fit_the_signature_are_refused(hpt: dict[str, Any], case: str,
                                                         fragments: tuple[str, ...]) -> None:
    path, proc = hpt[case]
    assert_user_error(proc, *fragments)
    assert not path.exists()  # refused before the capture directory was made: re-running needs no --force


def test_string_inputs_cannot_be_invented(hpt: dict[str, Any]) -> None:
    path, proc = hpt["string_generated"]
    assert_user_error(proc, "input 'inputs' is a string tensor", "--inputs FILE.npz",
                      "--signature regress_x2_to_y3 or --signature serving_default")
    assert not path.exists()


def test_string_inputs_given_are_fed_and_captured(hpt: dict[str, Any]) -> None:
    path, proc = hpt["string_given"]
    _ok(proc)
    cap = Capture.open(path)
    assert cap.tensor("tf_example:0").tolist() == [_tf_example(v) for v in (1.0, 2.0, 5.0)]
    assert cap.record("tf_example:0")["dtype"] == "string"
    np.testing.assert_array_equal(cap.tensor("y:0"), [[2.5], [3.0], [4.5]])


def test_signature_without_inputs(hpt: dict[str, Any]) -> None:
    path, proc = hpt["counter"]
    _ok(proc)
    cap = Capture.open(path)
    assert cap.manifest["examples"]["count"] == 0 and cap.manifest["runs"] == [[0, 0]]
    assert cap.tensor_names == ["counter:0"] and float(cap.tensor("counter:0")) == 0.0
    assert cap.manifest["observer_effect"]["executed_ops"]["plain"] == {"VariableV2": 1}


# --------------------------------------------------------------------------- knobs


def test_grappler_remapping_off_removes_the_fusion(hpt: dict[str, Any]) -> None:
    path, proc = hpt["remapping_off"]
    _ok(proc)
    cap = Capture.open(path)
    effect = cap.manifest["observer_effect"]
    assert "_FusedConv2D" not in effect["executed_ops"]["plain"]
    assert effect["executed_ops"]["plain"]["Conv2D"] == 1 and effect["executed_ops"]["plain"]["BiasAdd"] == 1
    assert effect["only_in_plain"] == [] and effect["executed_nodes_plain"] == {}
    assert cap.spec["knobs"]["grappler"] == {"remapping": "off"}
    assert "remapping: OFF" in cap.manifest["session_config"]


def test_unknown_grappler_key_lists_the_known_ones(tmp_path: Path, real_models: dict[str, Path]) -> None:
    proc = run_cli("capture", str(real_models["half_plus_two"]), "--out", str(tmp_path / "c"), "--grappler", "remaping=off")
    assert_user_error(proc, "unknown Grappler option 'remaping'", "remapping, layout_optimizer, constant_folding, "
                      "arithmetic_optimization, auto_mixed_precision, auto_mixed_precision_onednn_bfloat16, "
                      "disable_meta_optimizer")


def test_session_config_file_is_applied(hpt: dict[str, Any]) -> None:
    path, proc = hpt["session_config"]
    _ok(proc)
    cap = Capture.open(path)
    config = cap.manifest["session_config"]
    assert "intra_op_parallelism_threads: 1" in config and "remapping: OFF" in config
    assert "_FusedConv2D" not in cap.manifest["observer_effect"]["executed_ops"]["plain"]
    assert cap.spec["knobs"]["session_config_path"].endswith("session.pbtxt")


def test_unparsable_session_config_is_refused(hpt: dict[str, Any]) -> None:
    path, proc = hpt["bad_session_config"]
    assert_user_error(proc, "bad.pbtxt is not a valid text ConfigProto", "Couldn't parse integer: one")
    assert not path.exists()


def test_determinism_threads_and_env_reach_the_child(det: dict[str, Path]) -> None:
    cap = Capture.open(det["knobs"])
    env = cap.environment
    assert env["op_determinism"] is True and "op determinism enabled" in cap.manifest["notes"]
    assert env["tf_env"]["TF_DETERMINISTIC_OPS"] == "1" and env["tf_env"]["TF_TFTRACE_PROBE"] == "yes"
    assert "intra_op_parallelism_threads: 1\ninter_op_parallelism_threads: 1\n" in cap.manifest["session_config"]
    assert env["session_devices"] == [{"name": "/job:localhost/replica:0/task:0/device:CPU:0", "type": "CPU",
                                       "memory_limit_bytes": env["session_devices"][0]["memory_limit_bytes"]}]
    assert cap.spec["knobs"]["threads"] == [1, 1] and cap.spec["knobs"]["env"] == {"TF_TFTRACE_PROBE": "yes"}


def test_determinism_refused_by_a_model_says_so(hpt: dict[str, Any]) -> None:
    """half_plus_two's loader runs an unseeded RandomUniform initializer, which TF refuses under
    op determinism: the message carries TF's reason, not just "Graph execution error"."""
    path, proc = hpt["determinism"]
    assert_user_error(proc, "RandomUniform'; When determinism is enabled, random ops must have a seed specified",
                      "capture it without --determinism")
    assert not path.exists()


def test_xla_on_compiles_clusters(det: dict[str, Path]) -> None:
    cap = Capture.open(det["xla"])
    plain = cap.manifest["observer_effect"]["executed_ops"]["plain"]
    assert plain["_XlaCompile"] >= 1 and plain["_XlaRun"] >= 1
    assert cap.environment["tf_env"]["TF_XLA_FLAGS"] == "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"
    assert "global_jit_level: ON_2" in cap.manifest["session_config"]


def test_gpu_without_a_gpu_lists_the_devices_tf_sees(tmp_path: Path, models: dict[str, Path]) -> None:
    proc = run_cli("capture", str(models["detector"]), "--out", str(tmp_path / "c"), "--device", "gpu")
    assert_user_error(proc, "--device gpu asked for a GPU but TensorFlow sees 0 GPUs",
                      "(devices: /physical_device:CPU:0)", "--device cpu")
    assert not (tmp_path / "c").exists()


# --------------------------------------------------------------------------- scale


def test_max_memory_splits_the_fetch_into_chunks(det: dict[str, Path]) -> None:
    chunked, whole = Capture.open(det["chunked"]), Capture.open(det["b8"])
    assert chunked.manifest["fetch_chunks"] > 1 and whole.manifest["fetch_chunks"] == 1
    assert any("chunks to stay under --max-memory 20,000,000" in note for note in chunked.manifest["notes"])
    assert chunked.tensor_names == whole.tensor_names and chunked.uncaptured == whole.uncaptured
    assert [n for n in whole.tensor_names if not _bitwise_equal(chunked.tensor(n), whole.tensor(n))] == []


def test_a_tensor_larger_than_max_memory_is_refused(tmp_path: Path, models: dict[str, Path]) -> None:
    # the folded detector: its weights are constants (a checkpoint is measured before it is restored:
    # test_runtime_limits.py::test_checkpoint_larger_than_max_memory_is_refused_before_restoring)
    proc = run_cli("capture", str(models["detector_folded"]), "--out", str(tmp_path / "c"), "--max-memory", "1000000")
    assert_user_error(proc, "tensor dense/weights:0 alone needs about 16,777,216 bytes per run",
                      "more than --max-memory 1,000,000")
    assert not (tmp_path / "c").exists()


# --------------------------------------------------------------------------- robustness


def test_non_empty_output_directory_is_refused_without_force(tmp_path: Path, models: dict[str, Path]) -> None:
    out = tmp_path / "c"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    proc = run_cli("capture", str(models["detector"]), "--out", str(out))
    assert_user_error(proc, f"{out} is not empty", "--force")
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and (out / "notes.txt").read_text() == "mine"


def _children(pid: int) -> Iterator[tuple[int, str]]:
    """(pid, command line) of the direct children of ``pid``, from /proc."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue  # exited while we looked
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            yield int(entry.name), cmdline


def test_a_killed_capture_leaves_an_incomplete_directory(tmp_path: Path, models: dict[str, Path]) -> None:
    out = tmp_path / "c"
    cli = subprocess.Popen(
        [sys.executable, "-m", "tracer.cli", "capture", str(models["detector"]), "--out", str(out),
         "--examples", "300", "--batch-size", "4"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (out / "tensors").is_dir() or not any((out / "tensors").iterdir()):
            assert cli.poll() is None and time.monotonic() < deadline, cli.communicate()
            time.sleep(0.05)
        workers = [pid for pid, cmd in _children(cli.pid) if "tracer.interpreter" in cmd]
        assert len(workers) == 1
        os.kill(workers[0], signal.SIGKILL)
        stdout, stderr = cli.communicate(timeout=60)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.communicate()
    assert_user_error(subprocess.CompletedProcess(cli.args, cli.returncode, stdout, stderr),
                      "was killed by signal 9; the tail of its stderr:", "any partial output is left incomplete")
    with pytest.raises(TftraceError, match="incomplete capture .* manifest.json is missing"):
        Capture.open(out)
    proc = run_cli("capture", str(models["detector"]), "--out", str(out), "--examples", "2")
    assert_user_error(proc, "was interrupted", "--force")
    _ok(run_cli("capture", str(models["detector"]), "--out", str(out), "--examples", "2", "--force"))
    assert Capture.open(out).manifest["examples"]["count"] == 2


def test_timeout_stops_the_child(tmp_path: Path, models: dict[str, Path]) -> None:
    started = time.monotonic()
    proc = run_cli("capture", str(models["detector"]), "--out", str(tmp_path / "c"), "--timeout", "0.5")
    assert_user_error(proc, "did not finish within --timeout 0.5 s and was stopped", "Raise --timeout")
    assert time.monotonic() - started < 30
    assert not (tmp_path / "c" / "manifest.json").exists()


_LOOKUP_MODELS = textwrap.dedent("""
    import sys, tensorflow as tf
    class M(tf.Module):
        def __init__(self):
            self.table = tf.Variable(tf.reshape(tf.range(12, dtype=tf.float32), [4, 3]))
        @tf.function(input_signature=[tf.TensorSpec([None], tf.int64, name="ids")])
        def embed(self, ids):
            return {"vectors": tf.gather(self.table, ids)}
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="words")])
        def lengths(self, words):
            return {"lengths": tf.cast(tf.strings.length(words), tf.float32) * self.table[0, 1]}
    m = M()
    tf.saved_model.save(m, sys.argv[1] + "/embed", signatures={"serving_default": m.embed})
    tf.saved_model.save(m, sys.argv[1] + "/words", signatures={"serving_default": m.lengths})
""")


@pytest.fixture(scope="module")
def lookup_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two TF2 SavedModels with a variable (so TF adds ``__saved_model_init_op``): a 4-row embedding
    fed integer ids, and one whose only signature takes strings."""
    out = tmp_path_factory.mktemp("lookup")
    subprocess.run([sys.executable, "-c", _LOOKUP_MODELS, str(out)], check=True, capture_output=True, timeout=300)
    return out


@pytest.mark.slow
def test_generated_ids_outside_an_embedding_are_said_to_be_tftraces_own(lookup_models: Path, tmp_path: Path) -> None:
    proc = run_cli("capture", str(lookup_models / "embed"), "--out", str(tmp_path / "cap"))
    assert_user_error(proc, "the model fails on these inputs (InvalidArgumentError)", "not in [0, 4)",
                      "These inputs were generated by tftrace (seed 0, integers 0-9), which may be outside what the "
                      "model accepts (an embedding's vocabulary, an image's value range)",
                      "pass real examples with --inputs FILE.npz")
    assert "fed them as given" not in proc.stderr and not (tmp_path / "cap").exists()


@pytest.mark.slow
def test_a_string_signature_never_suggests_tensorflows_init_op(lookup_models: Path, tmp_path: Path) -> None:
    proc = run_cli("capture", str(lookup_models / "words"), "--out", str(tmp_path / "cap"))
    assert_user_error(proc, "input 'words' is a string tensor",
                      "; no signature of this model takes only tensors tftrace could generate.")
    assert "__saved_model_init_op" not in proc.stderr


REFUSED_BY_NAME = """
import json
import tensorflow as tf
from tracer.captures import instrumented

tf.compat.v1.disable_eager_execution()
tf.compat.v1.disable_control_flow_v2()
built = tf.Graph()
with built.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [2], name="x")
    def body(i, v):
        return i + 1, tf.math.multiply(v, 1.5, name="inside")
    tf.compat.v1.while_loop(lambda i, v: i < 3, body, [tf.constant(0), x], name="loop")
    for i in range(1000):
        tf.identity(x, name=f"t{i:03d}")
graph = tf.Graph()
with graph.as_default():  # imported, as tftrace loads a model: no Python loop context guards the body
    tf.import_graph_def(built.as_graph_def(), name="")

class Session(tf.compat.v1.Session):
    runs = 0
    def run(self, fetches, feed_dict=None):
        Session.runs += 1
        return super().run(fetches, feed_dict=feed_dict)

class Runtime:
    pass

runtime = Runtime()
runtime.graph, runtime.session = graph, Session(graph=graph)
names = [f"t{i:03d}:0" for i in range(1000)]
# in the list at 17, 400 and 999; sorted, TensorFlow counts them at 2, 3 and 4 ("loop/..." < "t...")
for i, loop_tensor in zip((17, 400, 999), ("loop/inside:0", "loop/Merge_1:0", "loop/Switch_1:1")):
    names[i] = loop_tensor
got, values, refused, _, _ = instrumented._run_chunk(runtime, names, {"x:0": [1.0, 2.0]}, traced=False)
print(json.dumps({"runs": Session.runs, "got": got, "refused": refused}))
"""


def test_a_fetch_tensorflow_refuses_from_inside_a_loop_is_dropped_by_its_name_in_one_run() -> None:
    """A Model Garden RetinaNet's fetches held some that run once per iteration of a loop
    ('Retval[11149] has already been set'). TensorFlow's index counts the fetches in sorted order,
    not in the order given, so the fetch is found by the `_retval_` node the error names: each
    refusal costs one run (here three of 1,000 in a real session), and no innocent tensor is lost."""
    proc = subprocess.run([sys.executable, "-c", REFUSED_BY_NAME], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "CUDA_VISIBLE_DEVICES": "-1", "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(result["refused"]) == ["loop/Merge_1:0", "loop/Switch_1:1", "loop/inside:0"]
    assert len(result["got"]) == 997 and all(name.startswith("t") for name in result["got"])
    assert result["runs"] == 4
    assert all("Retval" in why and "inside a loop" in why for why in result["refused"].values())
