"""TF Serving's warmup requests as ``--inputs``: ``SAVEDMODEL/assets.extra/tf_serving_warmup_requests``,
written here as TF Serving's guide has its users write them (``tensorflow_serving.apis``'
``PredictionLog`` records in a ``tf.io.TFRecordWriter``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from conftest import build_model, require_packages, run_cli
from tracer.artifacts.records import TensorSpec
from tracer.captures.inputs import make_examples
from tracer.errors import TftraceError


SCORER = """
import os, sys
import tensorflow as tf
class Scorer(tf.Module):
    def __init__(self):
        self.w = tf.Variable(tf.random.stateless_normal([4, 3], seed=[1, 2]))
    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def serve(self, x):
        return {"probs": tf.nn.softmax(tf.matmul(x, self.w))}
model = Scorer()
tf.saved_model.save(model, sys.argv[1], signatures={"serving_default": model.serve, "other": model.serve})
"""


def _write(path: Path, logs: list) -> Path:
    import tensorflow as tf  # noqa: PLC0415

    path.parent.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for log in logs:
            writer.write(log.SerializeToString())
    return path


def _predict(inputs: dict[str, np.ndarray], signature: str = "") -> object:
    require_packages("tensorflow_serving")  # make setup installs tensorflow-serving-api
    import tensorflow as tf  # noqa: PLC0415
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2  # noqa: PLC0415

    request = predict_pb2.PredictRequest(model_spec=model_pb2.ModelSpec(name="scorer", signature_name=signature))
    for key, value in inputs.items():
        request.inputs[key].CopyFrom(tf.make_tensor_proto(value))
    return prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))


def _classify(serialized: list[bytes]) -> object:
    require_packages("tensorflow_serving")
    import tensorflow as tf  # noqa: PLC0415
    from tensorflow_serving.apis import classification_pb2, input_pb2, model_pb2, prediction_log_pb2  # noqa: PLC0415

    examples = [tf.train.Example.FromString(s) for s in serialized]
    request = classification_pb2.ClassificationRequest(
        model_spec=model_pb2.ModelSpec(name="classifier"),
        input=input_pb2.Input(example_list=input_pb2.ExampleList(examples=examples)))
    return prediction_log_pb2.PredictionLog(classify_log=prediction_log_pb2.ClassifyLog(request=request))


ROWS = [np.random.RandomState(i).randn(n, 4).astype(np.float32) for i, n in enumerate((2, 1, 3))]


@pytest.mark.slow
def test_a_savedmodels_warmup_requests_are_its_examples(tmp_path: Path) -> None:
    """Three predict requests of 2, 1 and 3 rows, and one for another signature: the six rows of
    the default signature's requests, in file order, are what both sides ran."""
    model = tmp_path / "scorer"
    build_model(SCORER, model)
    warmup = _write(model / "assets.extra" / "tf_serving_warmup_requests",
                    [_predict({"x": ROWS[0]}), _predict({"x": np.ones((5, 4), np.float32)}, "other"),
                     _predict({"x": ROWS[1]}, "serving_default"), _predict({"x": ROWS[2]})])
    out = tmp_path / "out"
    proc = run_cli("compare", str(model), str(model), "--inputs", str(warmup), "--a-batch-size", "1",
                   "--out", str(out), env={"TF_ENABLE_ONEDNN_OPTS": "0"})
    assert proc.returncode in (0, 1), proc.stderr
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    examples = report["sides"]["a"]["examples"]
    assert examples["count"] == 6 and examples["source"] == "tf_serving_warmup_requests"
    assert report["sides"]["a"]["batch_size"] == 1 and report["sides"]["b"]["batch_size"] == 6
    np.testing.assert_array_equal(np.load(out / "inputs_from_a.npy"), np.concatenate(ROWS))
    proc = run_cli("capture", str(model), "--out", str(tmp_path / "generated"), env={"TF_ENABLE_ONEDNN_OPTS": "0"})
    assert proc.returncode == 0, proc.stderr
    notes = json.loads((tmp_path / "generated" / "manifest.json").read_text(encoding="utf-8"))["notes"]
    assert (f"generated inputs, though the model carries TF Serving's warmup requests: --inputs {warmup} runs the "
            "server's own") in notes


@pytest.mark.slow
def test_a_classify_signatures_warmup_examples_feed_its_string_input(tmp_path: Path) -> None:
    """ClassifyLog requests carry tf.Example protos: their serialized bytes are the rows of the
    signature's one string input, as the server feeds them."""
    from test_diagnose import CLASSIFIER  # noqa: PLC0415 - the Estimator-style export

    model, examples = tmp_path / "classifier", tmp_path / "examples.npy"
    build_model(CLASSIFIER, model, examples)
    serialized = list(np.load(examples))
    warmup = _write(model / "assets.extra" / "tf_serving_warmup_requests",
                    [_classify(serialized[:3]), _classify(serialized[3:8])])
    cap = tmp_path / "cap"
    proc = run_cli("capture", str(model), "--out", str(cap))
    assert proc.returncode == 2 and not cap.exists()
    assert (f"which tftrace cannot invent. --inputs {warmup} feeds the requests TF Serving warms this model up with; "
            "or pass real examples") in " ".join(proc.stderr.split())
    proc = run_cli("capture", str(model), "--inputs", str(warmup), "--out", str(cap), env={"TF_ENABLE_ONEDNN_OPTS": "0"})
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((cap / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["examples"]["count"] == 8 and manifest["examples"]["source"] == "tf_serving_warmup_requests"
    from tracer.captures.reader import Capture  # noqa: PLC0415

    fed = Capture.open(cap).tensor("input_example_tensor:0")
    assert [bytes(v) for v in fed] == [bytes(v) for v in serialized[:8]]


def test_warmup_files_that_cannot_feed_the_signature_are_refused_saying_why(tmp_path: Path) -> None:
    specs = {"x": TensorSpec("x:0", "float32", (None, 4))}
    elsewhere = _write(tmp_path / "other", [_predict({"x": ROWS[0]}, "other"), _predict({"x": ROWS[1]}, "other")])
    with pytest.raises(TftraceError) as info:
        make_examples(specs, 8, 0, str(elsewhere))
    assert str(info.value) == (
        f"{elsewhere} holds no warmup request for signature 'serving_default' (2 for signature 'other'). Choose the "
        "signature its requests are for with --signature, or give an .npz of the examples.")
    assert make_examples(specs, 8, 0, str(elsewhere), signature="other").count == 3
    wrong_key = _write(tmp_path / "key", [_predict({"images": ROWS[0]})])
    with pytest.raises(TftraceError, match=r"warmup request 0 of .* has inputs \['images'\] but the signature "
                                           r"expects \['x'\] \(missing: x\) \(unexpected: images\)"):
        make_examples(specs, 8, 0, str(wrong_key))
    ragged = _write(tmp_path / "ragged", [_predict({"x": ROWS[0]}), _predict({"x": np.zeros((1, 5), np.float32)})])
    with pytest.raises(TftraceError, match=r"give input 'x' rows of different shapes \(\[4\], \[5\]\)"):
        make_examples({"x": TensorSpec("x:0", "float32", (None, None))}, 8, 0, str(ragged))
    examples_for_floats = _write(tmp_path / "classify", [_classify([b""])])
    with pytest.raises(TftraceError, match="it holds tf.Examples, and the signature takes x, not one string input"):
        make_examples(specs, 8, 0, str(examples_for_floats))
    images = {"image_bytes": TensorSpec("image_bytes:0", "string", (None,))}
    encoded = _write(tmp_path / "encoded", [_predict({"image_bytes": np.array([b"\xff\xd8jpeg\xff\xd9", b"png"],
                                                                              dtype=object)})])
    fed = make_examples(images, 8, 0, str(encoded)).arrays["image_bytes"]
    assert fed.dtype.kind == "S" and fed.tolist() == [b"\xff\xd8jpeg\xff\xd9", b"png"]
    nul = _write(tmp_path / "nul", [_predict({"image_bytes": np.array([b"ends in nul\x00"], dtype=object)})])
    with pytest.raises(TftraceError, match="its string input 'image_bytes' cannot be fed from a file: a string value "
                                           "ends in a NUL byte"):
        make_examples(images, 8, 0, str(nul))
    import tensorflow as tf  # noqa: PLC0415

    for payload, said in ((b"\x0a\xff", "a malformed protobuf field"),
                          (b"\x0a\x00", "it is no PredictionLog (none of its request kinds is set)")):
        with tf.io.TFRecordWriter(str(tmp_path / "garbage")) as writer:
            writer.write(payload)
        with pytest.raises(TftraceError, match=rf"warmup request 0 of .*garbage cannot be read: {re.escape(said)}"):
            make_examples(specs, 8, 0, str(tmp_path / "garbage"))
    whole = _write(tmp_path / "good", [_predict({"x": ROWS[0]})]).read_bytes()
    (tmp_path / "cut").write_bytes(whole[:-3])
    with pytest.raises(TftraceError, match="the record at byte 0 is cut short or damaged"):
        make_examples(specs, 8, 0, str(tmp_path / "cut"))
    (tmp_path / "two").write_bytes(whole + whole[:10])
    with pytest.raises(TftraceError, match=rf"the record at byte {len(whole)} has a damaged header"):
        make_examples(specs, 8, 0, str(tmp_path / "two"))
