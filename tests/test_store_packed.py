"""Capture format 2: packed tensor files, residuals of predictions, values kept by digest, and
format 1 captures still read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tracer.captures._packed import digest
from tracer.captures._values import ValuesNotStored
from tracer.captures.store import FORMAT_VERSION, Capture, CaptureWriter
from tracer.errors import TftraceError

RNG = np.random.default_rng(7)
NUMERIC = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "float16", "float32", "float64", "complex64", "complex128"]


def _values(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    raw = np.asarray(RNG.normal(size=shape) * 100)
    if dtype == "bool":
        return raw > 0
    if dtype.startswith("complex"):
        return (raw + 1j * np.asarray(raw) ** 2).astype(dtype)
    value = raw.astype(dtype)
    if dtype.startswith("float") and value.size > 3:
        value.reshape(-1)[:3] = [np.nan, -np.inf, -0.0]  # bits a float codec must keep
    return value


def _node(name: str, op: str, inputs: list[str], **attrs: Any) -> dict[str, Any]:
    return {"name": name, "op": op, "inputs": inputs, "control_inputs": [], "attrs": attrs}


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "npy"])
@pytest.mark.parametrize("dtype", NUMERIC)
def test_every_numeric_dtype_round_trips_bit_for_bit(tmp_path: Path, dtype: str, packed: bool) -> None:
    rows, whole = _values(dtype, (7, 3, 5)), _values(dtype, (4, 6))
    with CaptureWriter(tmp_path / "cap", packed=packed) as writer:
        for start, stop in ((0, 3), (5, 7), (3, 5)):  # out of order, as batches may finish
            writer.write_rows("t:0", rows[start:stop], start, 7)
        writer.write_whole("w:0", whole)
        writer.write_whole("s:0", _values(dtype, ()))
        writer.finalize({})
    cap = Capture.open(tmp_path / "cap")
    for name, value in (("t:0", rows), ("w:0", whole)):
        got = cap.tensor(name)
        assert got.dtype == value.dtype and got.shape == value.shape
        assert got.tobytes() == value.tobytes()  # bits: NaN, -inf and -0.0 included
    assert cap.tensor("s:0").shape == ()
    record = cap.record("t:0")
    assert record["file"].endswith(".zst" if packed else ".npy")
    assert ("encoding" in record) is packed
    if packed:
        assert record["encoding"]["codec"] == "zstd" and [c[:2] for c in record["encoding"]["chunks"]] == [[0, 3], [3, 5], [5, 7]]


def test_ml_dtypes_and_strings_round_trip_in_a_packed_capture(tmp_path: Path) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf16 = np.array([[1.5, -2.25], [np.inf, 0.0]], dtype=ml_dtypes.bfloat16)
    strings = np.array([[b"a", b"longer string"], [b"", b"x"]], dtype=object)
    with CaptureWriter(tmp_path / "cap") as writer:
        writer.write_rows("b:0", bf16, 0, 2)
        writer.write_rows("s:0", strings[:1], 0, 2)
        writer.write_rows("s:0", strings[1:], 1, 2)
        writer.finalize({})
    cap = Capture.open(tmp_path / "cap")
    np.testing.assert_array_equal(cap.tensor("b:0"), bf16.astype(np.float32))
    assert cap.record("b:0")["file"].endswith(".zst")
    assert cap.tensor("s:0").tolist() == [[b"a", b"longer string"], [b"", b"x"]]
    assert cap.record("s:0")["file"].endswith(".npy")  # strings widen in place: they stay .npy


def test_empty_tensors_round_trip(tmp_path: Path) -> None:
    with CaptureWriter(tmp_path / "cap") as writer:
        writer.write_rows("r:0", np.zeros((2, 0), np.float32), 0, 2)
        writer.write_whole("w:0", np.zeros((0, 3), np.int32))
        writer.finalize({})
    cap = Capture.open(tmp_path / "cap")
    assert cap.tensor("r:0").shape == (2, 0) and cap.tensor("w:0").shape == (0, 3)


def test_random_floats_shrink_and_zeros_almost_vanish(tmp_path: Path) -> None:
    noise = RNG.normal(size=(4, 64, 64)).astype(np.float32)
    with CaptureWriter(tmp_path / "cap") as writer:
        writer.write_rows("noise:0", noise, 0, 4)
        writer.write_rows("relu:0", np.maximum(noise, 0), 0, 4)  # no graph: stored plainly, half zeros
        writer.write_rows("zeros:0", np.zeros_like(noise), 0, 4)
        writer.finalize({})
    cap = Capture.open(tmp_path / "cap")
    size = {n: (cap.path / cap.record(n)["file"]).stat().st_size for n in ("noise:0", "relu:0", "zeros:0")}
    assert size["noise:0"] < 0.95 * noise.nbytes and size["relu:0"] < 0.6 * noise.nbytes
    assert size["zeros:0"] < 0.01 * noise.nbytes


# --------------------------------------------------------------------------- predictions

GRAPH = {"nodes": [
    _node("x", "Placeholder", []),
    _node("bias", "Const", []),
    _node("conv", "Conv2D", ["x", "w"]),
    _node("badd", "BiasAdd", ["conv", "bias"], data_format="NHWC"),
    _node("scale", "Const", []), _node("offset", "Const", []), _node("mean", "Const", []), _node("var", "Const", []),
    _node("bn", "FusedBatchNormV3", ["badd", "scale", "offset", "mean", "var"], epsilon=1e-3, is_training=False),
    _node("relu", "Relu", ["bn:0"]),
    _node("add", "AddV2", ["relu", "conv:0"]),
    _node("odd", "Relu", ["conv"]),
]}


def _predicted_capture(path: Path, tamper_odd: bool = True) -> dict[str, np.ndarray]:
    """A small conv block whose outputs are numpy's, except ``odd`` (not ``conv``'s Relu: a
    prediction that is wrong in places must still read back exactly)."""
    rng = np.random.default_rng(7)  # its own: the form a batch norm's sample picks must not hang on test order
    conv = rng.normal(size=(6, 4, 4, 8)).astype(np.float32)
    vectors = {k: rng.uniform(0.5, 2, 8).astype(np.float32) for k in ("bias", "scale", "offset", "mean", "var")}
    badd = conv + vectors["bias"]
    factor = vectors["scale"] / np.sqrt(vectors["var"] + np.float32(1e-3))
    bn = (badd * factor + (vectors["offset"] - vectors["mean"] * factor)).astype(np.float32)
    bn.view(np.uint32)[0, 0, 0, :3] ^= 1  # one ULP off numpy's formula, as TensorFlow's kernel can be
    relu = np.maximum(bn, 0)
    odd = np.maximum(conv, 0)
    if tamper_odd:
        odd[2, 1, 1, 1] = 42.0
    values = {"conv:0": conv, "badd:0": badd, "bn:0": bn, "relu:0": relu, "add:0": relu + conv, "odd:0": odd}
    with CaptureWriter(path, graph=GRAPH) as writer:
        for key, vec in vectors.items():
            writer.write_whole(f"{key}:0", vec)
        for start, stop in ((0, 4), (4, 6)):
            for name, value in values.items():
                writer.write_rows(name, value[start:stop], start, 6)
        writer.finalize({})
    return values


def test_elementwise_outputs_are_stored_as_residuals_and_read_back_exactly(tmp_path: Path) -> None:
    values = _predicted_capture(tmp_path / "cap")
    cap = Capture.open(tmp_path / "cap")
    for name, value in values.items():
        assert cap.tensor(name).tobytes() == value.tobytes(), name
    predicted = {n for n in values if "predict" in cap.record(n)["encoding"]}
    assert predicted == {"badd:0", "bn:0", "relu:0", "add:0", "odd:0"}
    assert cap.record("bn:0")["encoding"]["predict"] == {
        "op": "FusedBatchNormV3", "inputs": ["badd:0", "scale:0", "offset:0", "mean:0", "var:0"], "attrs": {"epsilon": 1e-3, "form": "affine"}}
    assert all(c[4] == 1 for c in cap.record("relu:0")["encoding"]["chunks"])
    files = {n: (cap.path / cap.record(n)["file"]).stat().st_size for n in values}
    assert files["badd:0"] < 0.05 * values["badd:0"].nbytes  # exact predictions: residuals of zeros
    assert files["bn:0"] < 0.2 * values["bn:0"].nbytes  # a few ULPs off in places
    assert files["conv:0"] > 0.7 * values["conv:0"].nbytes  # nothing to predict it from


def _batch_norm_capture(path: Path, x: np.ndarray, vec: dict[str, np.ndarray], bn: np.ndarray) -> Capture:
    """A capture of one inference batch norm ``bn`` of ``x`` (its vectors ``vec``), in two batches."""
    graph = {"nodes": [_node("x", "Placeholder", []), *(_node(k, "Const", []) for k in vec),
                       _node("bn", "FusedBatchNormV3", ["x", "scale", "offset", "mean", "var"], epsilon=1e-3,
                             is_training=False)]}
    with CaptureWriter(path, graph=graph) as writer:
        for key, value in vec.items():
            writer.write_whole(f"{key}:0", value)
        for start, stop in ((0, 3), (3, 6)):
            writer.write_rows("x:0", x[start:stop], start, 6)
            writer.write_rows("bn:0", bn[start:stop], start, 6)
        writer.finalize({})
    return Capture.open(path)


def test_a_batch_norm_computed_in_onednns_order_is_predicted_in_that_order_exactly(tmp_path: Path) -> None:
    """oneDNN's inference batch norm is fma((x - mean) * rsqrt(var + eps), scale, offset): the first
    chunk picks that form over the affine one, and every later chunk's residual is zero."""
    rng = np.random.default_rng(7)  # its own, as in _predicted_capture
    x = rng.normal(size=(6, 4, 4, 8)).astype(np.float32)
    vec = {k: rng.uniform(0.5, 2, 8).astype(np.float32) for k in ("scale", "offset", "mean", "var")}
    inv = np.float32(1) / np.sqrt(vec["var"] + np.float32(1e-3))
    bn = (((x - vec["mean"]) * inv).astype(np.float64) * vec["scale"] + vec["offset"]).astype(np.float32)
    cap = _batch_norm_capture(tmp_path / "cap", x, vec, bn)
    assert cap.tensor("bn:0").tobytes() == bn.tobytes()
    assert cap.record("bn:0")["encoding"]["predict"]["attrs"] == {"epsilon": 1e-3, "form": "centered_fma"}
    chunks = cap.record("bn:0")["encoding"]["chunks"]
    assert all(c[4] == 1 and c[3] < 32 for c in chunks)  # predicted, each a frame of zeros (~23 bytes)


@pytest.mark.parametrize("shape", [(6, 4, 4, 8), (6, 32, 32, 32)])  # the second: forms tried on a sample
def test_a_batch_norm_computed_in_eigens_order_records_each_channels_ulps(tmp_path: Path, shape: tuple[int, ...]) -> None:
    """TensorFlow's CPU kernel without oneDNN: (x - mean) * (rsqrt(var + eps) * scale) + offset, with a
    vectorised rsqrt a few ULPs off in some channels: the steps found on the first chunk are recorded
    per channel, and every chunk's residual is zero. A first chunk larger than the sample the forms
    are tried on (a batch of 3 x 32,768 elements) finds the same steps from its leading positions."""
    from tracer.captures._packed import FORM_SAMPLE_ELEMENTS

    channels = shape[-1]
    x = RNG.normal(size=shape).astype(np.float32)
    vec = {k: RNG.uniform(0.5, 2, channels).astype(np.float32) for k in ("scale", "offset", "mean", "var")}
    inv = np.float32(1) / np.sqrt(vec["var"] + np.float32(1e-3))
    steps = np.resize(np.array([0, 1, -1, 2, 0, -2, 3, 0], np.int32), channels)
    assert (x.size > FORM_SAMPLE_ELEMENTS) == (channels == 32)
    factor = (inv.view(np.int32) + steps).view(np.float32) * vec["scale"]
    bn = (x - vec["mean"]) * factor + vec["offset"]
    cap = _batch_norm_capture(tmp_path / "cap", x, vec, bn)
    assert cap.tensor("bn:0").tobytes() == bn.tobytes()
    attrs = cap.record("bn:0")["encoding"]["predict"]["attrs"]
    assert set(attrs) == {"epsilon", "form", "ulps"} and attrs["form"] == "centered_scaled"
    found = np.frombuffer(attrs["ulps"].encode(), np.uint8).astype(np.int32) - ord("3")  # '3' = no step
    # the steps found give the planted factors (a smaller step that rounds to the same factor wins a tie)
    assert np.array_equal((inv.view(np.int32) + found).view(np.float32) * vec["scale"], factor)
    assert np.all(np.abs(found) <= np.abs(steps))
    # every chunk predicted, its residual all zeros: a zstd frame of a few dozen bytes
    assert all(c[4] == 1 and c[3] < 64 for c in cap.record("bn:0")["encoding"]["chunks"])
    # a hand-edited manifest naming steps that are no digits is refused, not decoded
    manifest = json.loads((tmp_path / "cap" / "manifest.json").read_text())
    manifest["tensors"]["bn:0"]["encoding"]["predict"]["attrs"]["ulps"] = "3425610x"
    (tmp_path / "cap" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(TftraceError, match="per-channel steps are not digits 0 to 6"):
        Capture.open(tmp_path / "cap")


def test_a_prediction_input_dropped_later_leaves_its_dependents_readable(tmp_path: Path) -> None:
    conv = RNG.normal(size=(4, 3)).astype(np.float32)
    with CaptureWriter(tmp_path / "cap", graph=GRAPH) as writer:
        writer.write_rows("conv:0", conv[:2], 0, 4)
        writer.write_rows("odd:0", np.maximum(conv[:2], 0), 0, 4)
        writer.write_rows("odd:0", np.maximum(conv[2:], 0), 2, 4)  # not predicted: conv's rows 2:4 never came
        writer.finalize({})  # conv:0 lacks rows 2:4: uncaptured; odd:0 was predicted from it
    cap = Capture.open(tmp_path / "cap")
    assert "only 2 of 4 rows" in cap.uncaptured["conv:0"]
    np.testing.assert_array_equal(cap.tensor("odd:0"), np.maximum(conv, 0))
    assert "predict" not in cap.record("odd:0")["encoding"]


# --------------------------------------------------------------------------- values kept by digest

VARS = {"nodes": [_node("w", "VariableV2", []), _node("w/read", "Identity", ["w"]), _node("b", "VariableV2", [])]}


def test_large_restored_variables_keep_only_a_digest(tmp_path: Path) -> None:
    kernel = RNG.normal(size=(64, 128)).astype(np.float32)  # 32 KiB: kept by digest
    bias = RNG.normal(size=(128,)).astype(np.float32)  # small: stored
    with CaptureWriter(tmp_path / "cap", graph=VARS, artifact_values=True) as writer:
        writer.write_whole("w:0", kernel)
        writer.write_whole("w/read:0", kernel.copy(), same_as="w:0")
        writer.write_whole("b:0", bias)
        assert writer.stored_equals("w:0", kernel.copy()) and not writer.stored_equals("w:0", kernel + 1)
        writer.finalize({"spec": {"artifact": {"path": str(tmp_path / "gone")}}})
    cap = Capture.open(tmp_path / "cap")
    record = cap.record("w:0")
    assert record["values"] == "artifact" and "file" not in record and record["checkpoint_key"] == "w"
    assert record["digest"] == digest(kernel) == cap.digest("w/read:0")
    assert record["stats"]["max"] == float(kernel.max())
    assert sorted(p.name for p in (cap.path / "tensors").iterdir()) == ["b_0-" + cap.record("b:0")["file"].split("-")[-1]]
    np.testing.assert_array_equal(cap.tensor("b:0"), bias)
    assert cap.digest("b:0") is None and cap.digest("b:0", compute=True) == digest(bias)
    with pytest.raises(ValuesNotStored, match=r"'w:0'.* is not on this machine.*--keep-weights"):
        cap.tensor("w:0")


def test_without_artifact_values_variables_are_stored(tmp_path: Path) -> None:
    kernel = RNG.normal(size=(64, 128)).astype(np.float32)
    with CaptureWriter(tmp_path / "cap", graph=VARS) as writer:
        writer.write_whole("w:0", kernel)
        writer.finalize({})
    np.testing.assert_array_equal(Capture.open(tmp_path / "cap").tensor("w:0"), kernel)


# --------------------------------------------------------------------------- older and damaged captures


def test_a_format_1_capture_is_still_read(tmp_path: Path) -> None:
    """Format 1 wrote every tensor as a .npy and knew nothing of encodings: such a manifest opens,
    and an ``encoding`` in it means nothing (its files are .npy)."""
    rows = RNG.normal(size=(3, 2)).astype(np.float32)
    with CaptureWriter(tmp_path / "cap", packed=False) as writer:
        writer.write_rows("t:0", rows, 0, 3)
        writer.write_whole("w:0", rows[0])
        writer.write_whole("w/read:0", rows[0].copy(), same_as="w:0")
        writer.finalize({})
    path = tmp_path / "cap" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["format_version"] = 1
    path.write_text(json.dumps(manifest))
    cap = Capture.open(tmp_path / "cap")
    np.testing.assert_array_equal(cap.tensor("t:0"), rows)
    np.testing.assert_array_equal(cap.tensor("w/read:0"), rows[0])
    assert cap.alias_of("w/read:0") == "w:0" and cap.digest("w:0") is None and FORMAT_VERSION == 2


def _tamper(tmp_path: Path, change: Any) -> Path:
    _predicted_capture(tmp_path / "cap")
    path = tmp_path / "cap" / "manifest.json"
    manifest = json.loads(path.read_text())
    change(manifest["tensors"])
    path.write_text(json.dumps(manifest))
    return tmp_path / "cap"


@pytest.mark.parametrize("change, message", [
    (lambda t: t["conv:0"]["encoding"]["chunks"][0].__setitem__(3, 10**9), r"lies outside the file"),
    (lambda t: t["conv:0"]["encoding"]["chunks"].pop(), r"cover 4 of 6 rows"),
    (lambda t: t["conv:0"]["encoding"].__setitem__("codec", "lz4"), r"not zstd chunks"),
    (lambda t: t["badd:0"]["encoding"]["predict"].__setitem__("inputs", ["add:0", "bias:0"]), r"recorded before it"),
    (lambda t: t["badd:0"]["encoding"]["predict"].__setitem__("op", "Conv2D"), r"not one tftrace makes"),
    (lambda t: t["conv:0"].update(values="artifact"), r"yet it names a file"),
])
def test_a_damaged_packed_index_is_refused_on_open(tmp_path: Path, change: Any, message: str) -> None:
    with pytest.raises(TftraceError, match=message):
        Capture.open(_tamper(tmp_path, change))


def test_chunk_bytes_that_do_not_decode_are_refused_on_read(tmp_path: Path) -> None:
    cap_dir = _tamper(tmp_path, lambda t: t["conv:0"]["encoding"]["chunks"][0].__setitem__(2, 1))
    with pytest.raises(TftraceError, match=r"damaged capture .*'conv:0'"):
        Capture.open(cap_dir).tensor("conv:0")


@pytest.mark.slow
def test_tensor_format_npy_writes_files_numpy_reads_and_compares_as_the_packed_one(
    models: dict[str, Path], tmp_path: Path
) -> None:
    """``--tensor-format npy`` keeps format 1's plain capture (docs/contracts.md) (every file a ``.npy``, weights
    included) for tools that read tensors themselves; it holds the same values as the packed one."""
    from conftest import run_cli  # noqa: PLC0415

    plain, packed = tmp_path / "npy", tmp_path / "packed"
    for out, extra in ((plain, ["--tensor-format", "npy"]), (packed, [])):
        proc = run_cli("capture", str(models["detector"]), "--out", str(out), "--examples", "2", *extra)
        assert proc.returncode == 0, proc.stderr
    manifest = json.loads((plain / "manifest.json").read_text())
    assert manifest["spec"]["tensor_format"] == "npy"
    records = manifest["tensors"]
    files = {rec["file"] for rec in records.values() if rec.get("file")}
    assert files and all(f.endswith(".npy") for f in files)
    assert not any(rec.get("values") == "artifact" for rec in records.values())  # weights stored, not digests
    a, b = Capture.open(plain), Capture.open(packed)
    assert any(rec.get("values") == "artifact" for rec in b.manifest["tensors"].values())
    for name, rec in records.items():
        if not rec.get("file"):
            continue
        direct = np.load(plain / rec["file"], allow_pickle=False)
        assert np.array_equal(direct, a.tensor(name), equal_nan=direct.dtype.kind in "fc"), name
    report = tmp_path / "report"
    proc = run_cli("compare", str(plain), str(packed), "--out", str(report), "--isolate", "0")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((report / "report.json").read_text())["verdict"] == "identical"


def test_the_compiled_unshuffle_gives_numpys_words() -> None:
    """Format 2 reads 4-byte elements back through a compiled loop where numba imports, else
    numpy's shifts: both give the same words, every byte in its place."""
    from tracer.captures._packed import _unshuffle4
    from tracer.captures._unshuffle import unshuffle4

    planes = np.random.default_rng(4).integers(0, 256, size=(4, 70_001), dtype=np.uint8)
    compiled, plain = np.empty(70_001, np.uint32), np.empty(70_001, np.uint32)
    unshuffle4(planes, compiled)
    _unshuffle4(planes, plain)
    assert np.array_equal(compiled, plain)
    assert compiled[0] == int(planes[0, 0]) | int(planes[1, 0]) << 8 | int(planes[2, 0]) << 16 | int(planes[3, 0]) << 24


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int32"])
@pytest.mark.parametrize("compiled", [True, False])
def test_a_predicted_chunk_decodes_with_its_prediction_xored_in_the_unshuffle(
        dtype: str, compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A predicted chunk stores its values XOR its prediction; decompress XORs the prediction back
    as it unshuffles (4-byte elements, compiled or in numpy where numba is missing) or after (other
    widths): every value comes back bit for bit, and a prediction of another shape is refused."""
    import builtins  # noqa: PLC0415
    from tracer.captures._packed import compress, decompress, xor  # noqa: PLC0415

    if not compiled:  # another TensorFlow's environment: no numba
        real_import = builtins.__import__

        def no_numba(name, *args, **kwargs):  # noqa: ANN001, ANN202
            if name.endswith("_unshuffle") or (args and args[2] and "_unshuffle" in args[2]):
                raise ImportError("numba is not installed here")
            return real_import(name, *args, **kwargs)
        monkeypatch.setattr(builtins, "__import__", no_numba)
    rng = np.random.default_rng(5)
    values = rng.standard_normal((37, 29)).astype(dtype) if dtype != "int32" else \
        rng.integers(-2**31, 2**31 - 1, (37, 29), dtype=np.int32)
    guess = (values * 1.0001).astype(dtype) if dtype != "int32" else values ^ np.int32(5)
    stored = compress(xor(values, guess))
    out = np.empty_like(values)
    back = decompress(stored, values.dtype, values.shape, out=out, guess=guess)
    assert back is out and back.view(f"u{values.dtype.itemsize}").tolist() == \
        values.view(f"u{values.dtype.itemsize}").tolist()
    with pytest.raises(ValueError, match="a prediction of"):
        decompress(stored, values.dtype, values.shape, guess=guess[:3])


def _checkpoint_holding(directory: Path, kernel: np.ndarray) -> Path:
    """A TF1 Saver checkpoint directory whose variable ``w`` holds ``kernel`` (what a capture's
    digest-kept weights are read back from)."""
    import tensorflow as tf  # noqa: PLC0415 - only these tests write a checkpoint

    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.Variable(kernel, name="w")
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, str(directory / "model"))
    return directory


def _capture_keeping_digest(path: Path, kernel: np.ndarray, model: Path, *, located: bool) -> Capture:
    """A capture keeping ``w`` by digest; ``located``: its manifest names the checkpoint prefix it
    ran on, as every capture tftrace writes does (read in this process), else only the model's
    path (read in a TensorFlow child, which finds the prefix the way a capture does)."""
    meta: dict[str, Any] = {"spec": {"artifact": {"path": str(model)}}}
    if located:
        meta["artifact"] = {"kind": "checkpoint", "location": str(model / "model"), "inlined_by_loader": False}
    with CaptureWriter(path, graph=VARS, artifact_values=True) as writer:
        writer.write_whole("w:0", kernel)
        writer.finalize(meta)
    return Capture.open(path)


@pytest.mark.slow
@pytest.mark.parametrize("located", [True, False], ids=["in_this_process", "in_a_tensorflow_child"])
def test_digest_kept_values_are_read_back_together_and_checked(tmp_path: Path, located: bool) -> None:
    """Both sides of a compare read their weights (in this process where the manifest names a
    checkpoint it can read, else in one child); a side whose checkpoint changed since its capture
    is refused by name, and the other side still gets its values. The changed side's digest, as a
    received capture's claim, is found false (it was once taken as "the model is not here" and let
    stand)."""
    from tracer import children  # noqa: PLC0415
    from tracer.captures._values import ArtifactReads  # noqa: PLC0415

    kernel = RNG.normal(size=(64, 128)).astype(np.float32)
    for name in ("ckpt_a", "ckpt_b"):
        (tmp_path / name).mkdir()
    same = _capture_keeping_digest(tmp_path / "a", kernel, _checkpoint_holding(tmp_path / "ckpt_a", kernel),
                                   located=located)
    changed = _capture_keeping_digest(tmp_path / "b", kernel, _checkpoint_holding(tmp_path / "ckpt_b", kernel + 1),
                                      located=located)
    before = len(children.recorded())
    same.artifact_reads = changed.artifact_reads = ArtifactReads([same, changed])
    np.testing.assert_array_equal(same.tensor("w:0"), kernel)
    with pytest.raises(ValuesNotStored, match=r"'w:0'.* cannot be used: the checkpoint of .*ckpt_b no longer holds "
                                              r"the values captured for 'w:0' \(their digest differs\)"):
        changed.tensor("w:0")
    # a received capture's digest is a claim: checked against what its model holds before it decides
    same.bear_out("w:0")
    with pytest.raises(TftraceError, match=r"tensor 'w:0': its digest .* is not the digest of the values its artifact "
                                           r"holds"):
        changed.bear_out("w:0")
    weights_children = [c for c in children.recorded()[before:] if c.purpose == "weights"]
    assert len(weights_children) == (0 if located else 1)  # one child for both sides, or none at all


@pytest.mark.slow
def test_a_weight_kept_by_digest_is_read_and_checked_once_however_often_it_is_asked_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """isolate's replays ask for a weight once per run: the checkpoint is read, checksummed and
    hashed once, and the same read-only values come back each time."""
    from tracer.artifacts import bundle  # noqa: PLC0415

    kernel = RNG.normal(size=(64, 128)).astype(np.float32)
    (tmp_path / "ckpt").mkdir()
    capture = _capture_keeping_digest(tmp_path / "a", kernel, _checkpoint_holding(tmp_path / "ckpt", kernel),
                                      located=True)
    reads: list[str] = []
    real_read = bundle.Bundle.read
    monkeypatch.setattr(bundle.Bundle, "read", lambda self, key: reads.append(key) or real_read(self, key))
    first, second = capture.tensor("w:0"), capture.tensor("w:0")
    np.testing.assert_array_equal(second, kernel)
    assert reads == ["w"]
    assert not second.flags.writeable and np.shares_memory(first, second)


def test_the_bytes_written_do_not_depend_on_how_many_threads_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine with more cores gets more writer threads; every file's bytes, residuals and
    statistics must be the same as with two, since a file's jobs run in order whatever the count."""
    import sys

    from tracer.captures import _jobs

    module = sys.modules[__name__]
    written: dict[int, dict[str, bytes]] = {}
    for threads in (2, 8):
        monkeypatch.setattr(_jobs, "writer_threads", lambda threads=threads: threads)
        monkeypatch.setattr(module, "RNG", np.random.default_rng(11))  # the same values each time
        path = tmp_path / f"threads{threads}"
        _predicted_capture(path)
        written[threads] = {str(f.relative_to(path)): f.read_bytes() for f in sorted(path.rglob("*")) if f.is_file()}
    assert written[2] == written[8] and len(written[2]) > 6


@pytest.mark.parametrize(("cores", "threads"), [(1, 2), (2, 2), (5, 2), (6, 3), (16, 8), (128, 8)])
def test_writer_threads_are_half_the_cores_between_two_and_eight(monkeypatch: pytest.MonkeyPatch, cores: int,
                                                                 threads: int) -> None:
    from tracer.captures import _jobs

    monkeypatch.setattr(_jobs.os, "sched_getaffinity", lambda _pid: set(range(cores)))
    assert _jobs.writer_threads() == threads
