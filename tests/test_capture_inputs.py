"""The examples a side is fed: the documented generation rule, user files, and their refusals.

Pure numpy (no TensorFlow): the specs are written by hand, as the worker gets them from a
signature.
"""

from __future__ import annotations

import hashlib
import zlib
from pathlib import Path

import numpy as np
import pytest

from tracer.artifacts.loader import TensorSpec
from tracer.errors import TftraceError
import tracer.captures.inputs as inputs_module
from tracer.captures.inputs import batches, inputs_file_sha256, make_examples

IMAGES = {"images": TensorSpec("images:0", "float32", (None, 4, 4, 3))}


def test_batches_cover_every_example_once_in_order() -> None:
    assert batches(5, 2) == [(0, 2), (2, 4), (4, 5)]
    assert batches(8, None) == [(0, 8)] and batches(8, 8) == [(0, 8)] and batches(3, 10) == [(0, 3)]
    assert batches(0, 4) == [(0, 0)]  # a signature without inputs still runs once


def test_generated_examples_follow_the_documented_rule() -> None:
    specs = {
        "images": TensorSpec("images:0", "float32", (None, 4, 4, 3)),
        "ids": TensorSpec("ids:0", "int64", (None, 2)),
        "mask": TensorSpec("mask:0", "bool", (None,)),
    }
    ex = make_examples(specs, 5, 7, None)
    assert ex.count == 5 and ex.batch_major and ex.source == "generated (seed 7, N(0,1) floats, integers 0-9, coin-flip booleans)"
    expected = np.random.default_rng([7, zlib.crc32(b"images")]).standard_normal((5, 4, 4, 3)).astype(np.float32)
    np.testing.assert_array_equal(ex.arrays["images"], expected)
    np.testing.assert_array_equal(ex.arrays["ids"], np.random.default_rng([7, zlib.crc32(b"ids")]).integers(0, 10, (5, 2)))
    assert ex.arrays["ids"].dtype == np.int64 and ex.arrays["mask"].dtype == np.bool_
    # The first N examples do not depend on how many are asked for: batch 1 vs 8 sees the same rows.
    np.testing.assert_array_equal(make_examples(specs, 8, 7, None).arrays["images"][:5], expected)


def test_a_signature_without_a_batch_axis_runs_one_example_per_run() -> None:
    """A fixed first dimension is not an example axis; it was generated once and run once (one
    example however many were asked for), which left nothing to pair with a batched side's rows.
    Now the examples are stacked on a new axis and fed one per run."""
    ex = make_examples({"x": TensorSpec("x:0", "float32", (2, 3))}, 8, 0, None)
    assert ex.arrays["x"].shape == (8, 2, 3) and not ex.batch_major and ex.per_example and ex.count == 8
    assert ex.feed("x", 5, 6).shape == (2, 3) and np.array_equal(ex.feed("x", 5, 6), ex.arrays["x"][5])
    # TF Serving's half_plus_two_tf2 ([1]) and half_plus_three (a scalar) draw the numbers that
    # half_plus_two's [?, 1] rows hold: the same seed gives row-comparable examples.
    batched = make_examples({"x": TensorSpec("x:0", "float32", (None, 1))}, 8, 3, None)
    one = make_examples({"x": TensorSpec("x:0", "float32", (1,))}, 8, 3, None)
    scalar = make_examples({"x": TensorSpec("x:0", "float32", ())}, 8, 3, None)
    assert batched.arrays["x"].shape == (8, 1) and scalar.arrays["x"].shape == (8,)
    assert scalar.feed("x", 2, 3).shape == ()
    np.testing.assert_array_equal(one.arrays["x"], batched.arrays["x"])
    np.testing.assert_array_equal(scalar.arrays["x"], batched.arrays["x"][:, 0])


def test_a_file_of_rows_feeds_a_signature_without_a_batch_axis(tmp_path: Path) -> None:
    rows = np.array([[1.0], [2.0], [5.0]], np.float32)
    np.savez(tmp_path / "rows.npz", x=rows)
    scalar = make_examples({"x": TensorSpec("x:0", "float32", ())}, 8, 0, str(tmp_path / "rows.npz"))
    assert scalar.per_example and scalar.count == 3 and scalar.arrays["x"].tolist() == [1.0, 2.0, 5.0]
    one = make_examples({"x": TensorSpec("x:0", "float32", (1,))}, 8, 0, str(tmp_path / "rows.npz"))
    assert one.per_example and one.arrays["x"].shape == (3, 1)
    np.savez(tmp_path / "flat.npz", x=rows[:, 0])  # a scalar side's examples, fed to a batched [?, 1]
    batched = make_examples({"x": TensorSpec("x:0", "float32", (None, 1))}, 8, 0, str(tmp_path / "flat.npz"))
    assert batched.batch_major and not batched.per_example and batched.arrays["x"].shape == (3, 1)
    exact = make_examples({"x": TensorSpec("x:0", "float32", (1,))}, 8, 0, str(tmp_path / "flat.npz"))
    assert exact.per_example and exact.arrays["x"].shape == (3, 1)  # [3] for [1]: three scalars
    np.savez(tmp_path / "one.npz", x=rows[0])  # exactly the signature's shape: one run, as before
    whole = make_examples({"x": TensorSpec("x:0", "float32", (1,))}, 8, 0, str(tmp_path / "one.npz"))
    assert not whole.per_example and whole.count == 1 and whole.arrays["x"].shape == (1,)
    with pytest.raises(TftraceError, match=r"input 'x' has shape \[3, 2\], the signature expects \[\?, 1\]"):
        np.savez(tmp_path / "wide.npz", x=np.zeros((3, 2), np.float32))
        make_examples({"x": TensorSpec("x:0", "float32", (None, 1))}, 8, 0, str(tmp_path / "wide.npz"))


def test_a_scalar_beside_batched_inputs_is_fed_whole_to_every_run(tmp_path: Path) -> None:
    """A detector that takes ``images`` of ``[?, 8, 8, 3]`` and a scalar ``threshold``: the scalar
    is no example. It was counted as one, and every capture stopped at "the inputs disagree on the
    number of examples: {'images': 8, 'threshold': 1}", inputs tftrace itself had generated."""
    specs = {"images": TensorSpec("images:0", "float32", (None, 8, 8, 3)),
             "threshold": TensorSpec("threshold:0", "float32", ()),
             "window": TensorSpec("window:0", "int32", (1, 4))}
    ex = make_examples(specs, 8, 0, None)
    assert ex.count == 8 and ex.batch_major and not ex.per_example and ex.shared == {"threshold", "window"}
    assert ex.arrays["threshold"].shape == () and ex.arrays["window"].shape == (1, 4)
    for start, stop in batches(8, 3):
        assert ex.feed("images", start, stop).shape == (stop - start, 8, 8, 3)
        assert ex.feed("threshold", start, stop) is ex.arrays["threshold"]
        assert ex.feed("window", start, stop) is ex.arrays["window"]
    np.savez(tmp_path / "in.npz", images=np.zeros((3, 8, 8, 3), np.float32), threshold=np.float32(0.5),
             window=np.array([[0, 0, 8, 8]], np.int32))
    read = make_examples(specs, 8, 0, str(tmp_path / "in.npz"))
    assert read.count == 3 and read.batch_major and read.shared == {"threshold", "window"}
    assert float(read.feed("threshold", 2, 3)) == 0.5
    np.savez(tmp_path / "rows.npz", images=np.zeros((3, 8, 8, 3), np.float32), threshold=np.full(3, 0.5, np.float32),
             window=np.array([[0, 0, 8, 8]], np.int32))
    with pytest.raises(TftraceError) as info:  # one threshold per example: not what the signature takes
        make_examples(specs, 8, 0, str(tmp_path / "rows.npz"))
    assert str(info.value) == ("input 'threshold' has shape [3], the signature expects []. Give 'threshold' one value "
                               "of shape []: it has no batch axis, so every run is fed the same one.")
    np.savez(tmp_path / "one.npz", images=np.zeros((3, 8, 8, 3), np.float32), threshold=np.array([0.25], np.float32),
             window=np.array([0, 0, 8, 8], np.int32))  # size-1 axes added or dropped: reshaped, as for rows
    one = make_examples(specs, 8, 0, str(tmp_path / "one.npz"))
    assert one.arrays["threshold"].shape == () and one.arrays["window"].shape == (1, 4) and one.count == 3
    # where no input has a batch axis, nothing is shared: the examples are stacked, one per run
    assert make_examples({k: specs[k] for k in ("threshold", "window")}, 4, 0, None).shared == frozenset()


def test_images_for_a_signature_that_fixes_the_batch_at_one_are_fed_one_a_run(tmp_path: Path) -> None:
    """The Object Detection API's TF2 export takes ``input_tensor`` of ``[1, ?, ?, 3]``: one image a
    run. Four images in a file were refused ("has shape [4, 48, 40, 3], the signature expects
    [1, ?, ?, 3]. Reshape the array to fit (the first axis is the example axis)"), a fix that
    cannot be followed; a comparison of a detector could only ever see one image."""
    specs = {"input_tensor": TensorSpec("input_tensor:0", "uint8", (1, None, None, 3))}
    images = np.arange(4 * 48 * 40 * 3, dtype=np.uint32).reshape(4, 48, 40, 3).astype(np.uint8)
    np.save(tmp_path / "four.npy", images)
    four = make_examples(specs, 8, 0, str(tmp_path / "four.npy"))
    assert (four.count, four.per_example, four.batch_major) == (4, True, False)
    assert [four.feed("input_tensor", start, stop).shape for start, stop in batches(4, 1)] == [(1, 48, 40, 3)] * 4
    np.testing.assert_array_equal(four.feed("input_tensor", 2, 3), images[2:3])  # one run: image 2, as [1, 48, 40, 3]
    np.save(tmp_path / "one.npy", images[:1])  # what the signature takes: one run of it, as before
    one = make_examples(specs, 8, 0, str(tmp_path / "one.npy"))
    assert (one.count, one.per_example) == (1, False) and one.feed("input_tensor", 0, 1).shape == (1, 48, 40, 3)
    np.save(tmp_path / "gray.npy", images[..., 0])  # no channel axis: no way to read it as images of 3 channels
    with pytest.raises(TftraceError, match=r"has shape \[4, 48, 40\], the signature expects \[1, \?, \?, 3\]"):
        make_examples(specs, 8, 0, str(tmp_path / "gray.npy"))


def test_tf1_settings_beside_the_examples_are_given_not_guessed(tmp_path: Path) -> None:
    """The TF1 tutorial's graph: ``x`` of ``[?, 784]``, ``keep_prob = tf.placeholder(tf.float32)``
    (no shape at all) and ``is_training`` of ``[]``. A scalar keep_prob in the file was counted as
    one example ("the inputs disagree on the number of examples: {'x': 8, 'keep_prob': 1}"), and a
    generated is_training was a coin flip that could run the batch norms in training mode."""
    specs = {"x": TensorSpec("x:0", "float32", (None, 784)),
             "keep_prob": TensorSpec("keep_prob:0", "float32", None),
             "is_training": TensorSpec("is_training:0", "bool", ())}
    np.savez(tmp_path / "in.npz", x=np.zeros((8, 784), np.float32), keep_prob=np.float32(1.0), is_training=False)
    read = make_examples(specs, 8, 0, str(tmp_path / "in.npz"))
    assert read.count == 8 and read.batch_major and read.shared == {"keep_prob", "is_training"}
    assert read.feed("x", 2, 3).shape == (1, 784) and float(read.feed("keep_prob", 2, 3)) == 1.0
    assert not bool(read.feed("is_training", 2, 3))
    with pytest.raises(TftraceError) as info:
        make_examples({k: specs[k] for k in ("x", "is_training")}, 8, 0, None)
    assert str(info.value) == (
        "input 'is_training' is a boolean without a batch axis: a switch (a training flag, a mode) whose value "
        "tftrace will not guess. Pass --inputs FILE.npz holding every input, the switch as it is served: "
        "numpy.savez(FILE, ..., is_training=False).")
    # a boolean with a batch axis is an example, drawn as before
    assert make_examples({"x": specs["x"], "mask": TensorSpec("mask:0", "bool", (None,))}, 8, 0, None).count == 8


def test_a_signature_without_inputs() -> None:
    ex = make_examples({}, 8, 0, None)
    assert ex.count == 0 and ex.arrays == {} and not ex.batch_major


def test_strings_cannot_be_invented_and_the_error_names_the_way_out() -> None:
    specs = {"inputs": TensorSpec("tf_example:0", "string", (None,))}
    with pytest.raises(TftraceError) as info:
        make_examples(specs, 8, 0, None, alternatives=("predict", "serving_default"))
    assert str(info.value) == (
        "input 'inputs' is a string tensor (e.g. serialized tf.Example protos), which tftrace cannot invent. "
        "Pass real examples with --inputs FILE.npz (one array per input key; strings as bytes, e.g. "
        "np.array(serialized_examples, dtype=bytes)), or capture a signature that takes tensors: --signature "
        "predict or --signature serving_default."
    )
    with pytest.raises(TftraceError) as info:
        make_examples(specs, 8, 0, None)
    assert str(info.value).endswith("dtype=bytes)); no signature of this model takes only tensors tftrace could "
                                    "generate.")
    with pytest.raises(TftraceError) as info:
        make_examples({"h": TensorSpec("h:0", "resource", ())}, 8, 0, None)
    assert str(info.value) == ("input 'h' is a resource tensor, which tftrace cannot invent. Pass real examples with "
                               "--inputs FILE.npz (one array per input key); no signature of this model takes only "
                               "tensors tftrace could generate.")


def test_unknown_dimensions_other_than_the_first_need_a_file() -> None:
    with pytest.raises(TftraceError, match=r"input 'x' has unknown dimensions at axes \[1\]"):
        make_examples({"x": TensorSpec("x:0", "float32", (None, None))}, 2, 0, None)
    with pytest.raises(TftraceError, match="not even its rank is known"):
        make_examples({"x": TensorSpec("x:0", "float32", None)}, 2, 0, None)


def test_inputs_from_npz_and_npy(tmp_path: Path) -> None:
    images = np.arange(2 * 4 * 4 * 3, dtype=np.float32).reshape(2, 4, 4, 3)
    np.savez(tmp_path / "in.npz", images=images)
    np.save(tmp_path / "in.npy", images)
    for name in ("in.npz", "in.npy"):
        ex = make_examples(IMAGES, 8, 0, str(tmp_path / name))
        assert ex.count == 2 and ex.batch_major and ex.source == name
        assert ex.file_sha256 == hashlib.sha256((tmp_path / name).read_bytes()).hexdigest()
        np.testing.assert_array_equal(ex.arrays["images"], images)
    assert make_examples(IMAGES, 8, 0, None).file_sha256 is None


def test_an_inputs_file_is_hashed_once_by_the_parent_and_not_again_by_a_child_given_its_sha256(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The parent hashes the file once for every capture of it (inputs_file_sha256) while it stays
    the same; a child given that sha256 does not hash the file again, one given none does."""
    path = tmp_path / "in.npz"
    np.savez(path, images=np.zeros((2, 4, 4, 3), np.float32))
    hashed: list[str] = []
    real = inputs_module._file_sha256
    monkeypatch.setattr(inputs_module, "_file_sha256", lambda p: hashed.append(p) or real(p))
    expected = hashlib.sha256(path.read_bytes()).hexdigest()
    assert inputs_file_sha256(str(path)) == inputs_file_sha256(str(path)) == expected and len(hashed) == 1
    assert make_examples(IMAGES, 8, 0, str(path), file_sha256=expected).file_sha256 == expected and len(hashed) == 1
    assert make_examples(IMAGES, 8, 0, str(path)).file_sha256 == expected and len(hashed) == 2
    np.savez(path, images=np.zeros((3, 4, 4, 3), np.float32))  # written again: hashed again
    assert inputs_file_sha256(str(path)) == hashlib.sha256(path.read_bytes()).hexdigest() and len(hashed) == 3
    assert inputs_file_sha256(str(tmp_path / "missing.npz")) is None  # the child says why it cannot read it


@pytest.mark.parametrize(
    "arrays, message",
    [
        ({"image": np.zeros((1, 4, 4, 3), np.float32)},
         "has keys ['image'] but the signature expects ['images'] (missing: images) (unexpected: image)"),
        ({"images": np.zeros((1, 4, 4, 3), np.float64)}, "input 'images' is float64, the signature expects float32"),
        ({"images": np.zeros((1, 4, 3), np.float32)}, "input 'images' has shape [1, 4, 3], the signature expects [?, 4, 4, 3]"),
        ({"images": np.zeros((1, 4, 5, 3), np.float32)}, "input 'images' has shape [1, 4, 5, 3], the signature expects [?, 4, 4, 3]"),
    ],
)
def test_inputs_that_do_not_fit_name_expected_and_given(tmp_path: Path, arrays: dict, message: str) -> None:
    np.savez(tmp_path / "in.npz", **arrays)
    with pytest.raises(TftraceError) as info:
        make_examples(IMAGES, 8, 0, str(tmp_path / "in.npz"))
    assert message in str(info.value)


def test_one_array_for_several_inputs_and_disagreeing_counts(tmp_path: Path) -> None:
    specs = {"a": TensorSpec("a:0", "float32", (None,)), "b": TensorSpec("b:0", "float32", (None,))}
    np.save(tmp_path / "one.npy", np.zeros(3, np.float32))
    with pytest.raises(TftraceError, match=r"holds one array but the signature has 2 inputs \(a, b\)"):
        make_examples(specs, 8, 0, str(tmp_path / "one.npy"))
    np.savez(tmp_path / "two.npz", a=np.zeros(3, np.float32), b=np.zeros(4, np.float32))
    with pytest.raises(TftraceError, match=r"disagree on the number of examples: \{'a': 3, 'b': 4\}"):
        make_examples(specs, 8, 0, str(tmp_path / "two.npz"))
    with pytest.raises(TftraceError, match="does not exist"):
        make_examples(specs, 8, 0, str(tmp_path / "nope.npz"))
    (tmp_path / "junk.npz").write_bytes(b"not numpy")
    with pytest.raises(TftraceError, match="cannot read inputs file"):
        make_examples(specs, 8, 0, str(tmp_path / "junk.npz"))


def test_unicode_strings_are_fed_as_utf8_bytes_and_object_arrays_refused(tmp_path: Path) -> None:
    """``np.savez(f, words=np.array([['cat', 'dog']]))`` makes a ``<U3`` array: TensorFlow feeds it as
    UTF-8 bytes, and so it is kept (a unicode array was once dropped from the capture unsaid)."""
    words = {"words": TensorSpec("words:0", "string", (None, 2))}
    np.savez(tmp_path / "words.npz", words=np.array([["cat", "zèbre"], ["dog", "ox"]]))
    ex = make_examples(words, 8, 0, str(tmp_path / "words.npz"))
    assert ex.arrays["words"].dtype == np.dtype("S6") and ex.arrays["words"][0, 1] == "zèbre".encode()
    np.savez(tmp_path / "objects.npz", words=np.array([["cat", 1]], dtype=object))
    with pytest.raises(TftraceError, match=r"objects.npz holds an array of Python objects .*Save plain arrays; "
                                           r"strings as bytes"):
        make_examples(words, 8, 0, str(tmp_path / "objects.npz"))
