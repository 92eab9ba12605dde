"""Compare reads format 2 (packed) tensors chunk by chunk: the same metrics as format 1, and never
a whole tensor decoded at once. No TensorFlow: the captures are written by CaptureWriter."""

from __future__ import annotations

import weakref
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

import tracer.captures._stream as stream_module
import tracer.captures._unpack as unpack
from tracer.captures.store import Capture, CaptureWriter
from tracer.comparison.align import Alignment, NodeAlignment, TensorPair
from tracer.comparison.divergence import Tolerance
from tracer.comparison.measure import pair_metrics
from tracer.metrics.arrays import compare_arrays


def _node(name: str, op: str, inputs: list[str], **attrs: object) -> dict:
    return {"name": name, "op": op, "inputs": inputs, "control_inputs": [], "attrs": attrs}


GRAPH = {"nodes": [
    _node("conv", "Conv2D", ["x", "w"]),
    _node("bias", "Const", []),
    _node("badd", "BiasAdd", ["conv", "bias"], data_format="NHWC"),
    _node("scale", "Const", []), _node("offset", "Const", []), _node("mean", "Const", []), _node("var", "Const", []),
    _node("bn", "FusedBatchNormV3", ["badd", "scale", "offset", "mean", "var"], epsilon=1e-3, is_training=False),
    _node("relu", "Relu", ["bn"]),
    _node("add", "AddV2", ["relu", "conv"]),
    _node("out", "Relu", ["add"]),
]}
ROWS, STEP = 16, 2  # 8 chunks per tensor
SHAPE = (ROWS, 32, 32, 8)  # 32 KiB a row


def _values(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    conv = rng.normal(size=SHAPE).astype(np.float32)
    vec = {k: np.random.default_rng(7).uniform(0.5, 2, 8).astype(np.float32) for k in ("bias", "scale", "offset", "mean", "var")}
    badd = conv + vec["bias"]
    factor = vec["scale"] / np.sqrt(vec["var"] + np.float32(1e-3))
    bn = badd * factor + (vec["offset"] - vec["mean"] * factor)
    bn.view(np.uint32)[1, 0, 0, :3] ^= 1  # a prediction that is not exact everywhere
    relu = np.maximum(bn, 0)
    add = relu + conv
    values = {f"{k}:0": v for k, v in vec.items()}
    values.update({"conv:0": conv, "badd:0": badd, "bn:0": bn, "relu:0": relu, "add:0": add, "out:0": np.maximum(add, 0)})
    return values


def _capture(path: Path, values: dict[str, np.ndarray], packed: bool) -> Capture:
    with CaptureWriter(path, graph=GRAPH, packed=packed) as writer:
        for key in ("bias", "scale", "offset", "mean", "var"):
            writer.write_whole(f"{key}:0", values[f"{key}:0"])
        for start in range(0, ROWS, STEP):
            for name in ("conv:0", "badd:0", "bn:0", "relu:0", "add:0", "out:0"):
                writer.write_rows(name, values[name][start : start + STEP], start, ROWS)
        writer.finalize({})
    return Capture.open(path)


def _alignment() -> Alignment:
    nodes = {n["name"]: NodeAlignment(n["name"], n["name"], "name", "compared",
                                      [TensorPair(f"{n['name']}:0", f"{n['name']}:0", "name", True)])
             for n in GRAPH["nodes"] if n["op"] != "Const"}
    return Alignment(nodes, [])


@pytest.fixture
def live_decoded(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the bytes of decoded chunks alive at once (every packed read decodes through
    ``_unpack.decompress``; an array is counted until it is freed)."""
    seen = {"live": 0, "peak": 0}
    real = unpack.decompress

    def counting(*args: object, **kwargs: object) -> np.ndarray:
        out = real(*args, **kwargs)
        root = out if out.base is None else out.base
        if kwargs.get("out") is None:  # a fresh array (one decoded into a read's result is that result's)
            seen["live"] += root.nbytes
            seen["peak"] = max(seen["peak"], seen["live"])
            weakref.finalize(root, lambda n=root.nbytes: seen.__setitem__("live", seen["live"] - n))
        return out

    monkeypatch.setattr(unpack, "decompress", counting)
    return seen


def test_packed_pairs_are_streamed_with_format_1_metrics(tmp_path: Path) -> None:
    a_values, b_values = _values(1), _values(2)
    packed = {k: _capture(tmp_path / f"p{k}", v, True) for k, v in (("a", a_values), ("b", b_values))}
    plain = {k: _capture(tmp_path / f"f{k}", v, False) for k, v in (("a", a_values), ("b", b_values))}
    predicted = {n for n in a_values if "predict" in (packed["a"].record(n).get("encoding") or {})}
    assert predicted == {"badd:0", "bn:0", "relu:0", "add:0"}  # out:0 would be a fifth level: stored plainly
    assert len(packed["a"].record("out:0")["encoding"]["chunks"]) == ROWS // STEP
    assert packed["a"].stream("conv:0") is not None and plain["a"].stream("conv:0") is None
    got = pair_metrics(packed["a"], packed["b"], _alignment(), Tolerance())
    want = pair_metrics(plain["a"], plain["b"], _alignment(), Tolerance())
    assert list(got) == list(want) == [f"{n}:0" for n in ("conv", "badd", "bn", "relu", "add", "out")]
    for name in want:
        assert asdict(got[name]) == asdict(want[name]), name
        assert asdict(got[name]) == asdict(compare_arrays(a_values[name], b_values[name], rtols=(Tolerance().rtol,)))
    assert not got["out:0"].identical and got["out:0"].mismatch_count > 0
    # one side packed, the other format 1: the packed side is streamed against the mapped one
    mixed = pair_metrics(packed["a"], plain["b"], _alignment(), Tolerance())
    assert {k: asdict(v) for k, v in mixed.items()} == {k: asdict(v) for k, v in want.items()}


def test_a_compare_of_packed_captures_holds_a_few_chunks_not_a_tensor(
        tmp_path: Path, live_decoded: dict[str, int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream_module, "CHUNK_CACHE_BYTES", 0)
    a = _capture(tmp_path / "a", _values(1), True)
    b = _capture(tmp_path / "b", _values(2), True)
    tensor_bytes = int(np.prod(SHAPE)) * 4
    chunk_bytes = tensor_bytes // (ROWS // STEP)
    live_decoded["peak"] = live_decoded["live"] = 0
    got = pair_metrics(a, b, _alignment(), Tolerance())
    assert len(got) == 6
    # per side the piece scanned and the one being made, which reads its inputs' same rows (the
    # deepest chain here: add <- relu <- bn <- badd <- conv, one chunk each at a time)
    assert 0 < live_decoded["peak"] <= 6 * chunk_bytes < tensor_bytes
    assert live_decoded["live"] == 0  # and nothing is held after


def test_the_input_chunk_cache_saves_decoding_within_its_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}
    real = unpack.decompress

    def counting(*args: object, **kwargs: object) -> np.ndarray:
        calls["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(unpack, "decompress", counting)
    a, b = (_capture(tmp_path / k, _values(s), True) for k, s in (("a", 1), ("b", 2)))
    counts = {}
    for limit in (0, 1 << 30):
        monkeypatch.setattr(stream_module, "CHUNK_CACHE_BYTES", limit)
        for cap in (a, b):
            cap.forget()
            cap._chunk_cache = None
        calls["n"] = 0
        metrics = pair_metrics(a, b, _alignment(), Tolerance())
        counts[limit] = calls["n"]
        assert a._chunk_cache is not None and a._chunk_cache.nbytes <= limit
        if limit == 0:
            first = {k: asdict(v) for k, v in metrics.items()}
        else:
            assert {k: asdict(v) for k, v in metrics.items()} == first
    chunks = 2 * (6 * (ROWS // STEP) + 5)  # a side's six streamed tensors and five vectors, each chunk once
    assert counts[1 << 30] == chunks < counts[0]
