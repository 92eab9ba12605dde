"""Comparing tensors a capture kept only by digest (format 2: the checkpoint holds the values).

Equal digests are identical without a read; differing ones are measured from the checkpoints
(a TensorFlow child), and where the checkpoint is not there the pair says so and how to fix it.
"""

from __future__ import annotations

import json

from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from conftest import build_model, run_cli
from tracer.captures.store import Capture, CaptureWriter
from tracer.comparison.align import Alignment, NodeAlignment, TensorPair
from tracer.comparison.divergence import Tolerance
from tracer.comparison.measure import pair_metrics
from tracer.comparison.pipeline import compare
from tracer.metrics.arrays import compare_arrays

GRAPH = {"nodes": [{"name": "w", "op": "VariableV2", "inputs": [], "control_inputs": [], "attrs": {}}]}


def _side(path: Path, kernel: np.ndarray) -> Capture:
    with CaptureWriter(path, graph=GRAPH, artifact_values=True) as writer:
        writer.write_whole("w:0", kernel)
        writer.finalize({"spec": {"artifact": {"path": str(path / "no-such-model")}}})
    return Capture.open(path)


def _alignment() -> Alignment:
    return Alignment({"w": NodeAlignment("w", "w", "name", "compared", [TensorPair("w:0", "w:0", "name", True)])}, [])


def test_equal_digests_are_identical_without_reading_the_values(tmp_path: Path) -> None:
    kernel = np.random.default_rng(1).normal(size=(64, 128)).astype(np.float32)
    kernel[0, :3] = [np.nan, np.inf, -np.inf]
    a, b = _side(tmp_path / "a", kernel), _side(tmp_path / "b", kernel.copy())
    assert a.digest("w:0") == b.digest("w:0") is not None
    got = pair_metrics(a, b, _alignment(), Tolerance())["w:0"]  # reading would fail: the model is not there
    assert asdict(got) == asdict(compare_arrays(kernel, kernel.copy(), rtols=(Tolerance().rtol,)))


def test_a_stored_side_is_judged_by_the_digest_of_its_values(tmp_path: Path) -> None:
    kernel = np.arange(64 * 128, dtype=np.float32).reshape(64, 128)
    a = _side(tmp_path / "a", kernel)
    with CaptureWriter(tmp_path / "b") as writer:  # a format 1 style side: the values themselves
        writer.write_whole("w:0", kernel.copy())
        writer.finalize({})
    got = pair_metrics(a, Capture.open(tmp_path / "b"), _alignment(), Tolerance())["w:0"]
    assert got.identical and got.size == kernel.size


def test_differing_digests_without_the_model_are_reported_not_guessed(tmp_path: Path) -> None:
    kernel = np.ones((64, 128), np.float32)
    a, b = _side(tmp_path / "a", kernel), _side(tmp_path / "b", kernel * 2)
    alignment = _alignment()
    assert pair_metrics(a, b, alignment, Tolerance()) == {}
    pair = alignment.nodes["w"].tensors[0]
    assert not pair.comparable
    assert pair.note.startswith("values not measured: the values of 'w:0'")
    assert "is not on this machine" in pair.note and "--keep-weights" in pair.note


MODEL = """
import sys
import numpy as np
import tensorflow as tf

out, scale = sys.argv[1], float(sys.argv[2])
tf.compat.v1.disable_eager_execution()
graph = tf.Graph()
with graph.as_default(), tf.compat.v1.Session(graph=graph) as sess:
    x = tf.compat.v1.placeholder(tf.float32, [None, 8], name="x")
    kernel = (np.arange(8 * 512, dtype=np.float32).reshape(8, 512) % 7) * np.float32(scale)
    w = tf.compat.v1.Variable(kernel, name="w", use_resource=False)  # 16 KiB: kept by digest
    b = tf.compat.v1.Variable(np.ones(512, np.float32), name="b", use_resource=False)
    y = tf.nn.relu(tf.nn.bias_add(tf.matmul(x, w), b), name="y")
    sess.run(tf.compat.v1.global_variables_initializer())
    sig = tf.compat.v1.saved_model.signature_def_utils.predict_signature_def(inputs={"x": x}, outputs={"y": y})
    saver = tf.compat.v1.train.Saver()
    prefix = out + "/model.ckpt"
    saver.save(sess, prefix, write_meta_graph=False)
    meta = saver.export_meta_graph()
    meta.signature_def["serving_default"].CopyFrom(sig)
    open(prefix + ".meta", "wb").write(meta.SerializeToString())
"""


@pytest.mark.slow
def test_capture_then_compare_measures_differing_weights_from_the_checkpoints(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Two checkpoints that differ in one weight: captured (format 2, the kernel kept by digest)
    and compared as a user does; the kernel's difference is measured from the checkpoints, read in
    this process (no TensorFlow child), and the report equals the one made from captures that
    stored the weights (--keep-weights)."""
    import subprocess  # noqa: PLC0415

    from tracer.captures import _values  # noqa: PLC0415

    children: list[list[dict]] = []
    real_run = subprocess.run

    def counted(args: list[str], **kw: object) -> subprocess.CompletedProcess:
        if "tracer.captures.values_worker" in args:
            children.append(json.loads(args[-1]))
        return real_run(args, **kw)

    monkeypatch.setattr(_values.subprocess, "run", counted)
    for name, scale in (("a", 1.0), ("b", 2.0)):
        (tmp_path / name).mkdir()
        build_model(MODEL, tmp_path / name, scale)
    reports = {}
    for keep in (False, True):
        caps = {}
        for name in ("a", "b"):
            caps[name] = tmp_path / f"cap_{name}_{keep}"
            args = ["capture", str(tmp_path / name), "--examples", "3", "--out", str(caps[name])]
            proc = run_cli(*args, *(["--keep-weights"] if keep else []))
            assert proc.returncode == 0, proc.stderr
        cap_a = Capture.open(caps["a"])
        assert (cap_a.record("w:0").get("values") == "artifact") is not keep
        assert cap_a.record("b:0").get("values") is None  # 2 KiB: stored
        result = compare(str(caps["a"]), str(caps["b"]), tmp_path / f"report_{keep}", isolate=0)
        m = result.metrics["w:0"]
        kernel = (np.arange(8 * 512, dtype=np.float32).reshape(8, 512) % 7)
        assert not m.identical and m.max_abs == 6.0 and m.mismatch_count == np.count_nonzero(kernel)
        reports[keep] = {k: asdict(v) for k, v in result.metrics.items()}
        # kept by digest: both checkpoints read here (tracer.artifacts.bundle); stored: nothing read
        assert children == []
    assert reports[False] == reports[True]


def test_packed_tensors_with_equal_values_digests_are_compared_without_a_read(tmp_path: Path) -> None:
    """Format 2 digests every packed tensor's values row by row: the same values batched
    differently digest alike, a single flipped bit does not, and compare reads neither side of
    an equal pair written by this run (its files are gone here; a received capture's digests are
    checked against its bytes first: test_received.py)."""
    rows = np.random.default_rng(3).normal(size=(6, 5)).astype(np.float32)
    changed = rows.copy()
    changed.view(np.uint32)[4, 2] ^= 1
    caps = {}
    for key, value, batches in (("a", rows, ((0, 6),)), ("b", rows, ((0, 2), (4, 6), (2, 4))), ("c", changed, ((0, 6),))):
        with CaptureWriter(tmp_path / key) as writer:
            for start, stop in batches:
                writer.write_rows("t:0", value[start:stop], start, 6)
            writer.write_rows("t/read:0", value, 0, 6, same_as="t:0")
            writer.finalize({})
        caps[key] = Capture.open(tmp_path / key, received=False)  # as the capture child of this run wrote it
    assert caps["a"].values_digest("t:0") == caps["b"].values_digest("t:0") == caps["b"].values_digest("t/read:0")
    assert caps["a"].values_digest("t:0") != caps["c"].values_digest("t:0")
    assert caps["a"].values_digest("t:0").startswith("xxh3-128:") and len(caps["a"].values_digest("t:0")) == 41
    for path in (tmp_path / "b" / "tensors").iterdir():
        path.unlink()  # compare must not need them
    alignment = Alignment({"t": NodeAlignment("t", "t", "name", "compared", [TensorPair("t:0", "t:0", "name", True)])}, [])
    got = pair_metrics(caps["a"], caps["b"], alignment, Tolerance())["t:0"]
    assert asdict(got) == asdict(compare_arrays(rows, rows.copy(), rtols=(Tolerance().rtol,)))
    differs = pair_metrics(caps["a"], caps["c"], alignment, Tolerance())["t:0"]
    assert not differs.identical and differs.mismatch_count == 1 and differs.ulp_max == 1


def test_a_values_digest_meets_only_its_own_kind(tmp_path: Path) -> None:
    """Captures of the first format-2 release carry sha256 values digests: still read, and never
    equal to an xxh3 one, so a pair of the two kinds is compared by reading both."""
    rows = np.arange(12, dtype=np.float32).reshape(3, 4)
    caps = {}
    for key in ("old", "new"):
        with CaptureWriter(tmp_path / key) as writer:
            writer.write_rows("t:0", rows, 0, 3)
            writer.finalize({})
        caps[key] = tmp_path / key
    manifest = json.loads((caps["old"] / "manifest.json").read_text())
    manifest["tensors"]["t:0"]["values_digest"] = "sha256:" + "0" * 64
    (caps["old"] / "manifest.json").write_text(json.dumps(manifest))
    old, new = Capture.open(caps["old"], received=False), Capture.open(caps["new"], received=False)
    assert old.values_digest("t:0") == "sha256:" + "0" * 64 and new.values_digest("t:0").startswith("xxh3-128:")
    assert Capture.open(caps["old"]).values_digest("t:0") is None  # received: a kind it cannot check is not used
    alignment = Alignment({"t": NodeAlignment("t", "t", "name", "compared", [TensorPair("t:0", "t:0", "name", True)])}, [])
    assert pair_metrics(old, new, alignment, Tolerance())["t:0"].identical  # read, not trusted from the digests
