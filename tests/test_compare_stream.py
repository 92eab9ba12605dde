"""Compare reads format 2 (packed) tensors chunk by chunk: the same metrics as format 1, and never
a whole tensor decoded at once. No TensorFlow: the captures are written by CaptureWriter."""

from __future__ import annotations

import json
import weakref
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

import tracer.captures._stream as stream_module
from tracer.captures._stream import common_steps
import tracer.captures._unpack as unpack
from tracer.captures.store import Capture, CaptureWriter
from tracer.errors import TftraceError
from tracer.comparison.align import Alignment, NodeAlignment, TensorPair
from tracer.comparison.divergence import Tolerance
import tracer.comparison.measure as measure
from tracer.comparison.measure import pair_metrics
from tracer.metrics.arrays import compare_arrays
from tracer.metrics.in_step import PairScan


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


def _capture(path: Path, values: dict[str, np.ndarray], packed: bool, step: int = STEP) -> Capture:
    """Written ``step`` rows a run, as a capture batched so writes them: a packed tensor's chunks
    are then ``step`` rows each (a row is 32 KiB)."""
    with CaptureWriter(path, graph=GRAPH, packed=packed) as writer:
        for key in ("bias", "scale", "offset", "mean", "var"):
            writer.write_whole(f"{key}:0", values[f"{key}:0"])
        for start in range(0, ROWS, step):
            for name in ("conv:0", "badd:0", "bn:0", "relu:0", "add:0", "out:0"):
                writer.write_rows(name, values[name][start : start + step], start, ROWS)
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


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the chunks decoded (every packed read decodes through ``_unpack.decompress``)."""
    calls = {"n": 0}
    real = unpack.decompress

    def counting(*args: object, **kwargs: object) -> np.ndarray:
        calls["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(unpack, "decompress", counting)
    return calls


def _fresh(*caps: Capture) -> None:
    for cap in caps:
        cap.forget()
        cap._chunk_cache = None


def _metrics_and_decodes(a: Capture, b: Capture, most: int, monkeypatch: pytest.MonkeyPatch,
                         decodes: dict[str, int]) -> tuple[dict[str, dict], int]:
    """Every pair's metrics (as dicts) and the chunks decoded, read in runs of at most ``most`` pairs."""
    monkeypatch.setattr(measure, "MAX_IN_STEP", most)
    _fresh(a, b)
    decodes["n"] = 0
    return {k: asdict(v) for k, v in pair_metrics(a, b, _alignment(), Tolerance()).items()}, decodes["n"]


EACH_CHUNK_ONCE = 2 * (6 * (ROWS // STEP) + 5)  # a side's six streamed tensors and five vectors, each chunk once


def test_the_input_chunk_cache_saves_decoding_within_its_bound(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, decodes: dict[str, int]) -> None:
    """Pairs compared one after another (``MAX_IN_STEP = 1``): a predicted chunk's inputs come from
    the cache where it holds them, else they are decoded again."""
    monkeypatch.setattr(measure, "MAX_IN_STEP", 1)
    a, b = (_capture(tmp_path / k, _values(s), True) for k, s in (("a", 1), ("b", 2)))
    counts = {}
    for limit in (0, 1 << 30):
        monkeypatch.setattr(stream_module, "CHUNK_CACHE_BYTES", limit)
        _fresh(a, b)
        decodes["n"] = 0
        metrics = pair_metrics(a, b, _alignment(), Tolerance())
        counts[limit] = decodes["n"]
        assert a._chunk_cache is not None and a._chunk_cache.nbytes <= limit
        if limit == 0:
            first = {k: asdict(v) for k, v in metrics.items()}
        else:
            assert {k: asdict(v) for k, v in metrics.items()} == first
    assert counts[1 << 30] == EACH_CHUNK_ONCE < counts[0]


def test_pairs_read_in_step_decode_each_chunk_once_with_the_same_metrics(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, decodes: dict[str, int]) -> None:
    """The six pairs share their chunks' rows: read in step, a chain's chunk k is decoded once for
    all its members, with no cache at all, and every metric is the one read pair by pair gives."""
    monkeypatch.setattr(stream_module, "CHUNK_CACHE_BYTES", 0)
    a, b = (_capture(tmp_path / k, _values(s), True) for k, s in (("a", 1), ("b", 2)))
    (one_by_one, decoded_one_by_one), (in_step, decoded_in_step) = (
        _metrics_and_decodes(a, b, most, monkeypatch, decodes) for most in (1, 6))
    assert list(in_step) == list(one_by_one) and in_step == one_by_one
    assert decoded_in_step == EACH_CHUNK_ONCE < decoded_one_by_one
    # runs of at most MAX_IN_STEP pairs: two runs of three decode the conv's chunks again for the add
    monkeypatch.setattr(measure, "MAX_IN_STEP", 3)
    _fresh(a, b)
    decodes["n"] = 0
    assert {k: asdict(v) for k, v in pair_metrics(a, b, _alignment(), Tolerance()).items()} == one_by_one
    assert EACH_CHUNK_ONCE < decodes["n"] < decoded_one_by_one


@pytest.mark.parametrize("steps", [[(r, r + STEP) for r in range(0, ROWS, STEP)], [(0, 4), (4, 12), (12, 16)]])
def test_in_step_pieces_are_each_tensors_values_step_by_step(tmp_path: Path, steps: list[tuple[int, int]]) -> None:
    """Rows of each step of each name in turn (a step of several chunks joined), a name given
    twice read twice (decoded once)."""
    cap = _capture(tmp_path / "a", _values(1), True)
    names = ["conv:0", "badd:0", "relu:0", "relu:0", "out:0"]
    assert len({cap.chunk_spans(n) for n in names}) == 1 and cap.chunk_spans("bias:0") is None
    pieces = list(cap.in_step(names, steps))
    assert len(pieces) == len(names) * len(steps)
    for j, name in enumerate(names):
        np.testing.assert_array_equal(np.concatenate(pieces[j :: len(names)]), np.asarray(cap.tensor(name)).reshape(-1))


def test_sides_batched_otherwise_are_read_in_the_coarser_sides_steps(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, decodes: dict[str, int]) -> None:
    """A ran 2 rows a run and B 4 (chunks of 2 and 4 rows): read in B's steps, each chunk of both
    sides is decoded once, with the metrics of one pair after another. Where neither side's chunk
    boundaries hold the other's (runs of 2 and of 3 rows), the pairs are read one after another."""
    monkeypatch.setattr(stream_module, "CHUNK_CACHE_BYTES", 0)
    a = _capture(tmp_path / "a", _values(1), True, step=2)
    b = _capture(tmp_path / "b", _values(2), True, step=4)
    assert common_steps(a.chunk_spans("conv:0"), b.chunk_spans("conv:0")) == [(0, 4), (4, 8), (8, 12), (12, 16)]
    found = {most: _metrics_and_decodes(a, b, most, monkeypatch, decodes) for most in (1, 6)}
    assert found[6][0] == found[1][0]
    assert found[6][1] == 6 * (ROWS // 2) + 6 * (ROWS // 4) + 2 * 5 < found[1][1]
    assert common_steps([(0, 2), (2, 4), (4, 6)], [(0, 3), (3, 6)]) is None
    assert common_steps([(0, 6)], [(0, 3), (3, 6)]) == [(0, 6)]


@pytest.mark.parametrize("pieces", [[7, 1, 300_000, 1, 0, 123_456, 5], [1 << 18] * 3 + [89_000], [2 ** 20 - 1, 3]])
def test_a_pair_fed_in_pieces_of_any_size_gets_compare_arrays_result(pieces: list[int]) -> None:
    """The blocks decide the sums' bits: fed in pieces that end anywhere, a pair is scanned in the
    very blocks compare_arrays takes, so every metric is bit for bit the same."""
    size = sum(pieces)
    rng = np.random.default_rng(3)
    a = rng.normal(size=size).astype(np.float32)
    b = a + rng.normal(scale=1e-6, size=size).astype(np.float32)
    b[::997] = np.nan
    scan = PairScan(a, b, rtols=(1e-5,))
    at = 0
    for n in pieces:
        scan.feed(a[at : at + n], b[at : at + n])
        at += n
    got, want = scan.result(), compare_arrays(a, b, rtols=(1e-5,))
    assert got.nan_b == want.nan_b > 0 and got.to_json() == want.to_json()  # (NaN in worst: compared as text)
    short = PairScan(a, b, rtols=(1e-5,))
    short.feed(a[:10], b[:10])
    with pytest.raises(ValueError, match=f"fed 10 of the {size} elements"):
        short.result()
    with pytest.raises(ValueError, match="more than the"):
        PairScan(a[:5], b[:5], rtols=()).feed(a[:6], b[:6])


def test_received_identical_pairs_have_their_digests_checked_in_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, decodes: dict[str, int]) -> None:
    """Two received captures of the same values: every pair is decided identical by equal values
    digests, which are claims, each checked against the stored bytes as the rows are read in step
    (each chunk decoded once, where checking one tensor after another decoded the chains again);
    a claim the bytes do not bear out is still refused."""
    monkeypatch.setattr(stream_module, "CHUNK_CACHE_BYTES", 0)
    a, b = (_capture(tmp_path / k, _values(1), True) for k in ("a", "b"))
    assert a.received and b.received
    counts = {}
    for most in (1, 6):
        monkeypatch.setattr(measure, "MAX_IN_STEP", most)
        _fresh(a, b)
        decodes["n"] = 0
        got = pair_metrics(a, b, _alignment(), Tolerance())
        assert all(m.identical for m in got.values()) and len(got) == 6
        counts[most] = decodes["n"]
    assert counts[6] == EACH_CHUNK_ONCE < counts[1]
    # B's relu:0 given badd:0's chunks and prediction, keeping relu:0's claim: equal claims would
    # make the pair identical, and the bytes say otherwise
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    relu, badd = manifest["tensors"]["relu:0"], manifest["tensors"]["badd:0"]
    relu["file"], relu["encoding"] = badd["file"], badd["encoding"]
    (tmp_path / "b" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(TftraceError, match="tensor 'relu:0': its values_digest xxh3-128:.* is not the digest of its "
                                           "stored values"):
        pair_metrics(a, Capture.open(tmp_path / "b"), _alignment(), Tolerance())
