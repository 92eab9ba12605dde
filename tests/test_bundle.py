"""Reading a checkpoint's tensors without TensorFlow (tracer.artifacts.bundle).

The values must be TensorFlow's own, bit for bit, on checkpoints written the way users write them
(a TF1 Saver, sharded across devices, TF2's object checkpoint, SavedModels from old releases);
what the reader leaves to TensorFlow (strings, a partitioned variable's slices) and what is
damaged or hostile is refused with a reason, never read wrong.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from tracer.artifacts.bundle import Bundle, NotReadableHere, crc32c
from tracer.captures._packed import content_digest
from tracer.captures._values import _digest_in

REAL = Path(__file__).parent / "real_models"
HALF_PLUS_TWO = REAL / "saved_model_half_plus_two_mkl" / "00000123" / "variables" / "variables"


def test_crc32c_is_castagnolis() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the standard check value of CRC-32C
    assert crc32c(b"") == 0
    assert crc32c(bytes(32)) == 0x8A9136AA  # RFC 3720's 32 zero bytes


def test_savedmodels_written_by_old_releases_are_read() -> None:
    bundle = Bundle(str(HALF_PLUS_TWO))
    assert bundle.num_shards == 1
    assert sorted(bundle.entries) == ["a", "b", "c", "conv2d/bias", "conv2d/kernel", "conv2d_1/bias",
                                      "conv2d_1/kernel", "conv2d_2/bias", "conv2d_2/kernel"]
    assert (bundle.read("a"), bundle.read("b"), bundle.read("c")) == (0.5, 2.0, 3.0)
    kernel = bundle.read("conv2d_1/kernel")
    assert kernel.dtype == np.float32 and kernel.shape == (1, 1, 1, 1) and kernel.flags.writeable
    counter = Bundle(str(REAL / "saved_model_counter" / "00000123" / "variables" / "variables"))
    assert counter.read("counter") == 0.0 and counter.read("counter").shape == ()


@pytest.fixture
def copied(tmp_path: Path) -> Path:
    """The half-plus-two checkpoint, copied to be damaged."""
    for suffix in (".index", ".data-00000-of-00001"):
        shutil.copy(str(HALF_PLUS_TWO) + suffix, tmp_path / f"variables{suffix}")
    return tmp_path / "variables"


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_changed_byte_of_a_tensor_is_refused_by_its_checksum(copied: Path) -> None:
    bundle = Bundle(str(copied))
    entry = bundle.entries["c"]
    _flip(Path(f"{copied}.data-00000-of-00001"), entry.offset)
    with pytest.raises(NotReadableHere, match=r"'c': its bytes in .*variables.data-00000-of-00001 do not match the "
                                              r"checksum its entry records"):
        bundle.read("c")
    assert bundle.read("a") == 0.5  # the others are unharmed


def test_a_data_file_cut_short_is_refused(copied: Path) -> None:
    data = Path(f"{copied}.data-00000-of-00001")
    bundle = Bundle(str(copied))
    last = max(bundle.entries.values(), key=lambda e: e.offset)
    data.write_bytes(data.read_bytes()[: last.offset + 1])
    name = next(k for k, e in bundle.entries.items() if e == last)
    with pytest.raises(NotReadableHere, match=rf"ends before {name!r}'s {last.size} bytes"):
        bundle.read(name)


@pytest.mark.parametrize(("damage", "message"), [
    ("flip_block", r"a block's checksum does not match"),
    ("truncate", r"is not a checkpoint index \(no table footer\)"),
    ("garbage", r"is not a checkpoint index \(no table footer\)"),
    ("empty", r"is not a checkpoint index \(no table footer\)"),
    ("missing", r"variables.index does not exist \(not a V2 checkpoint here\)"),
])
def test_a_damaged_index_is_refused_with_its_reason(copied: Path, damage: str, message: str) -> None:
    index = Path(f"{copied}.index")
    raw = index.read_bytes()
    if damage == "flip_block":
        _flip(index, 10)  # inside the first data block
    elif damage == "truncate":
        index.write_bytes(raw[:-3])
    elif damage == "garbage":
        index.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    elif damage == "empty":
        index.write_bytes(b"")
    else:
        index.unlink()
    with pytest.raises(NotReadableHere, match=message):
        Bundle(str(copied))


def test_a_tensor_it_does_not_hold_is_refused(copied: Path) -> None:
    with pytest.raises(NotReadableHere, match=r"holds no tensor 'nope'"):
        Bundle(str(copied)).read("nope")


# --------------------------------------------------------------------------- against TensorFlow's own reader


def _all_equal_to_tensorflows(prefix: str) -> tuple[int, dict[str, str]]:
    """Every tensor TensorFlow's reader returns, read here too: how many were equal bit for bit,
    and why the others were left to TensorFlow (a value read wrong fails the test)."""
    import tensorflow as tf  # noqa: PLC0415

    reader = tf.compat.v1.train.NewCheckpointReader(prefix)
    bundle = Bundle(prefix)
    equal, refused = 0, {}
    for key in reader.get_variable_to_shape_map():
        try:
            mine = bundle.read(key)
        except NotReadableHere as exc:
            refused[key] = str(exc)
            continue
        theirs = np.asarray(reader.get_tensor(key))
        assert (mine.dtype, mine.shape) == (theirs.dtype, theirs.shape), key
        assert mine.tobytes() == theirs.tobytes(), key
        assert _digest_in(bundle, key) == content_digest(theirs), key  # a capture's digest, taken piece by piece
        equal += 1
    return equal, refused


@pytest.mark.slow
def test_a_tf1_saver_checkpoint_of_every_numeric_dtype_reads_as_tensorflow_does(tmp_path: Path) -> None:
    import tensorflow as tf  # noqa: PLC0415

    rng = np.random.default_rng(7)
    values = {
        "f32": rng.normal(size=(3, 5, 7)).astype(np.float32), "f64": rng.normal(size=(4,)),
        "f16": rng.normal(size=(6, 2)).astype(np.float16), "i32": rng.integers(-9, 9, (5,), dtype=np.int32),
        "i64": rng.integers(-2**40, 2**40, (2, 2), dtype=np.int64), "u8": rng.integers(0, 255, (9,), dtype=np.uint8),
        "i8": rng.integers(-100, 100, (3,), dtype=np.int8), "i16": rng.integers(-999, 999, (3,), dtype=np.int16),
        "b": np.array([True, False, True]), "c64": (rng.normal(size=3) + 1j * rng.normal(size=3)).astype(np.complex64),
        "scalar": np.float32(2.5), "empty": np.zeros((0, 4), np.float32),
        "big": rng.normal(size=(300, 1000)).astype(np.float32),  # 1.2 MB: several crc32c words
    }
    graph = tf.Graph()
    with graph.as_default():
        for name, value in values.items():
            tf.compat.v1.Variable(value, name=name)
        tf.compat.v1.Variable(b"text", name="words")
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            prefix = saver.save(session, str(tmp_path / "model.ckpt"), global_step=3)
    equal, refused = _all_equal_to_tensorflows(prefix)
    assert equal == len(values)
    assert list(refused) == ["words"] and "has TensorFlow dtype 7" in refused["words"]  # a string: TensorFlow's
    np.testing.assert_array_equal(Bundle(prefix).read("big"), values["big"])
    copies = [p.tobytes() for p in Bundle(prefix).pieces("big", piece_bytes=1 << 16)]  # each valid until the next
    assert len(copies) == 19 and b"".join(copies) == values["big"].tobytes()  # 1.2 MB in 64 KiB pieces


@pytest.mark.slow
def test_sharded_partitioned_and_object_checkpoints(tmp_path: Path) -> None:
    """A Saver sharded over two devices (two data files), a partitioned variable (saved as slices:
    left to TensorFlow, which assembles them) and TF2's object-based checkpoint."""
    import tensorflow as tf  # noqa: PLC0415

    graph = tf.Graph()
    with graph.as_default():
        with tf.device("/cpu:0"):
            tf.compat.v1.Variable(np.arange(6, dtype=np.float32), name="on_first")
        with tf.device("/cpu:1"):
            tf.compat.v1.Variable(np.arange(8, dtype=np.int64), name="on_second")
        tf.compat.v1.get_variable("split", shape=(8, 3), partitioner=tf.compat.v1.fixed_size_partitioner(2),
                                  initializer=tf.compat.v1.ones_initializer())
        saver = tf.compat.v1.train.Saver(sharded=True)
        config = tf.compat.v1.ConfigProto(device_count={"CPU": 2})
        with tf.compat.v1.Session(graph=graph, config=config) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            (tmp_path / "sharded").mkdir()
            prefix = saver.save(session, str(tmp_path / "sharded" / "model.ckpt"))
    bundle = Bundle(prefix)
    assert bundle.entries["on_first"].shard != bundle.entries["on_second"].shard  # one data file per device
    assert bundle.num_shards == len({e.shard for e in bundle.entries.values()}) >= 2
    equal, refused = _all_equal_to_tensorflows(prefix)
    assert equal == 2 and list(refused) == ["split"]
    assert "saved as slices of a partitioned variable" in refused["split"]
    np.testing.assert_array_equal(bundle.read("on_second"), np.arange(8))

    checkpoint = tf.train.Checkpoint(w=tf.Variable(np.eye(3, dtype=np.float32)), step=tf.Variable(5, dtype=tf.int64))
    object_prefix = checkpoint.save(str(tmp_path / "objects" / "ckpt"))
    equal, refused = _all_equal_to_tensorflows(object_prefix)
    assert equal >= 2 and all("has TensorFlow dtype 7" in why for why in refused.values())  # the object graph
    np.testing.assert_array_equal(Bundle(object_prefix).read("w/.ATTRIBUTES/VARIABLE_VALUE"), np.eye(3))


def test_an_entry_that_claims_more_bytes_than_its_file_holds_is_refused_before_any_allocation(copied: Path) -> None:
    """A hostile index may declare a tensor of any shape: the data file's size bounds what is read."""
    from dataclasses import replace  # noqa: PLC0415

    bundle = Bundle(str(copied))
    entry = bundle.entries["c"]
    bundle.entries["c"] = replace(entry, shape=(1 << 20, 1 << 20), size=(1 << 42))  # 4 TiB of float32
    with pytest.raises(NotReadableHere, match=r"ends before 'c''s 4398046511104 bytes"):
        bundle.read("c")
    with pytest.raises(NotReadableHere, match=r"ends before"):
        next(bundle.pieces("c"))


def test_an_index_over_the_bound_is_left_to_tensorflow(copied: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tracer.artifacts import bundle as module  # noqa: PLC0415

    monkeypatch.setattr(module, "MAX_INDEX_BYTES", 100)
    with pytest.raises(NotReadableHere, match=r"variables.index is larger than 100 bytes"):
        Bundle(str(copied))


def test_an_index_whose_blocks_are_snappy_compressed_reads_as_the_plain_one(copied: Path) -> None:
    """TensorFlow's table format allows snappy blocks (TF 1.1 wrote them); they were refused here
    and left to a TensorFlow child."""
    from table_bytes import compress_index  # noqa: PLC0415

    plain = Bundle(str(HALF_PLUS_TWO))
    index = Path(f"{copied}.index")
    index.write_bytes(compress_index(index.read_bytes()))
    assert index.stat().st_size < Path(f"{HALF_PLUS_TWO}.index").stat().st_size
    compressed = Bundle(str(copied))
    assert compressed.entries == plain.entries
    assert all(np.array_equal(compressed.read(k), plain.read(k)) for k in plain.entries)


@pytest.mark.parametrize(("stream", "message"), [
    (b"\x05\x10abcd", r"a snappy literal runs past its block"),  # a literal of 5 bytes, 4 there
    (b"\x08\x0cabcd\x01\x00", r"a snappy copy reaches outside its block"),  # offset 0
    (b"\x08\x0cabcd\x01\x05", r"a snappy copy reaches outside its block"),  # offset beyond what was written
    (b"\x06\x0cabcd\x01\x04", r"a snappy copy reaches outside its block"),  # copies past the declared length
    (b"\x09\x0cabcd\x01\x04", r"holds 8 bytes, not the 9 it declares"),
    (b"\xff\xff\xff\x7f\x00a", r"a snappy block declares 268,435,455 bytes"),  # a bomb: refused before allocating
    (b"\xff\xff\xff\xff\xff\xff", r"a malformed snappy length"),
    (b"\x04\xf0", r"a truncated snappy literal length"),
])
def test_a_malformed_snappy_block_is_refused(stream: bytes, message: str) -> None:
    from tracer.artifacts.snappy import decompress  # noqa: PLC0415

    with pytest.raises(ValueError, match=message):
        decompress(stream, 1 << 20)


def test_snappy_copies_overlapping_and_not_decompress_as_written() -> None:
    from table_bytes import snappy_compress  # noqa: PLC0415
    from tracer.artifacts.snappy import decompress  # noqa: PLC0415

    assert decompress(b"\x08\x04ab\x09\x02", 100) == b"abababab"  # "ab", then 6 bytes from 2 back: overlapping
    data = bytes(range(200)) * 3 + b"x" * 500 + np.random.default_rng(1).integers(0, 4, 3000, dtype=np.uint8).tobytes()
    packed = snappy_compress(data)
    assert len(packed) < len(data) // 2 and decompress(packed, len(data)) == data
    with pytest.raises(ValueError, match="declares"):
        decompress(packed, len(data) - 1)
