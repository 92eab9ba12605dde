"""TensorFlow Serving's warmup requests as a side's examples.

A model served by TF Serving often ships real requests beside it, in
``SAVEDMODEL/assets.extra/tf_serving_warmup_requests``: a TFRecord file of ``PredictionLog``
protos that the server replays when it loads the model. They are the very inputs the server
sees, in the layout it sees them, so ``--inputs`` takes that file as it takes an ``.npz``.

Each record holds one request:

- a ``predict_log``: the request's ``inputs`` map, one ``TensorProto`` per signature input key,
  its first axis the request's batch;
- a ``classify_log``, ``regress_log`` or ``multi_inference_log``: serialized ``tf.Example``
  protos (an ``Input``'s ``example_list``), fed to the signature's one string input as the
  server feeds them.

Only the requests addressed to the side's signature count (TF Serving's own default,
``serving_default``, where a request names none); their rows are stacked in file order.

The TFRecord framing is read here, both CRCs checked (a cut file is refused, not read short);
the ``PredictionLog`` wrapper is decoded here too, field by field, from protobuf's wire format (the field numbers of TF Serving's
``prediction_log.proto``, ``predict.proto``, ``classification.proto``, ``regression.proto``,
``inference.proto``, ``input.proto`` and ``model.proto``), so tftrace needs no
``tensorflow-serving-api``; only a predict request's ``TensorProto``s are TensorFlow's to read.
Runs in the capture child, which has TensorFlow.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator

import numpy as np

from ..artifacts.snappy import read_varint
from ..errors import TftraceError
from ._format import Unstorable, to_storage

__all__ = ["WARMUP_FILE", "looks_like_warmup", "read_warmup"]

WARMUP_FILE = "tf_serving_warmup_requests"  # its name under a SavedModel's assets.extra/
DEFAULT_SIGNATURE = "serving_default"  # what TF Serving runs for a request that names no signature

# PredictionLog's log_type fields, and what each holds
PREDICT, CLASSIFY, REGRESS, MULTI_INFERENCE, SESSION_RUN, PREDICT_STREAMED = 6, 2, 3, 4, 5, 7
KINDS = {PREDICT: "predict", CLASSIFY: "classify", REGRESS: "regress", MULTI_INFERENCE: "multi_inference",
         SESSION_RUN: "session_run", PREDICT_STREAMED: "predict_streamed"}
NOT_READ_FIX = ("write it with numpy.savez or numpy.save, or give TF Serving's "
                "assets.extra/tf_serving_warmup_requests as the server wrote it")
FIX = "write the warmup file as TF Serving documents it (PredictionLog records), or give an .npz of the examples"


def looks_like_warmup(head: bytes) -> bool:
    """Whether a file's first bytes are no ``.npy`` (its magic) and no ``.npz`` (a zip): the
    inputs file is then read as a TFRecord of warmup requests."""
    return not head.startswith((b"\x93NUMPY", b"PK\x03\x04", b"PK\x05\x06"))


def read_warmup(path: str, inputs: dict[str, str], signature: str) -> dict[str, np.ndarray]:
    """The examples of the requests in ``path`` addressed to ``signature``, one array per input key
    (``inputs``: key -> dtype name), their rows stacked in file order."""
    rows: dict[str, list[np.ndarray]] = {}
    elsewhere: Counter[str] = Counter()
    unused: Counter[str] = Counter()
    for number, record in enumerate(_records(path)):
        try:
            kind, addressed, decode = _request(record)
            if decode is None:
                unused[kind] += 1
            elif (addressed or DEFAULT_SIGNATURE) != signature:
                elsewhere[addressed or DEFAULT_SIGNATURE] += 1
            else:
                _add(rows, decode(inputs), number, path, set(inputs))
        except (ValueError, IndexError) as exc:
            raise TftraceError(f"warmup request {number} of {path} cannot be read: {exc}", FIX) from exc
    if not rows:
        found = [f"{n} for signature {s!r}" for s, n in sorted(elsewhere.items())]
        found += [f"{n} {kind} request(s), which tftrace cannot feed" for kind, n in sorted(unused.items())]
        raise TftraceError(
            f"{path} holds no warmup request for signature {signature!r}"
            + (f" ({'; '.join(found)})" if found else " (no records)"),
            "choose the signature its requests are for with --signature, or give an .npz of the examples",
        )
    return {key: _stacked(key, parts, path) for key, parts in rows.items()}


def _records(path: str) -> Iterator[bytes]:
    """The file's TFRecord payloads: each is a little-endian uint64 length, the masked CRC-32C of
    those 8 bytes, the payload and its masked CRC-32C, all checked (a file cut short, or no
    TFRecord at all, is refused, not read as fewer requests)."""
    with open(path, "rb") as fh:
        data = fh.read()
    at = 0
    while at < len(data):
        header = data[at:at + 12]
        length = int.from_bytes(header[:8], "little")
        if len(header) < 12 or _masked(header[:8]) != int.from_bytes(header[8:], "little"):
            what = "it is no .npy or .npz, and no TFRecord of TF Serving warmup requests either" if at == 0 else \
                f"the record at byte {at} has a damaged header (a file cut short?)"
            raise TftraceError(f"cannot read inputs file {path}: {what}", NOT_READ_FIX)
        payload, stored = data[at + 12:at + 12 + length], data[at + 12 + length:at + 16 + length]
        if len(stored) < 4 or _masked(payload) != int.from_bytes(stored, "little"):
            raise TftraceError(f"cannot read inputs file {path}: the record at byte {at} is cut short or damaged "
                               "(its CRC does not match)", NOT_READ_FIX)
        yield payload
        at += 16 + length


def _masked(data: bytes) -> int:
    """TFRecord's masked CRC-32C of ``data`` (as the checkpoint's tensor bundle masks it)."""
    from ..artifacts.bundle import crc32c, masked  # noqa: PLC0415 - compiled on first use

    return masked(crc32c(data))


def _request(record: bytes) -> tuple[str, str, Callable[[dict[str, str]], dict[str, np.ndarray]] | None]:
    """``(kind, signature it names, how to decode its arrays)`` of one PredictionLog; None for a
    kind tftrace cannot feed (a SessionRun, a streamed predict). Decoded only where it is wanted."""
    fields = _fields(record)
    kind = next((number for number in KINDS if number in fields), None)
    if kind is None:
        raise ValueError("it is no PredictionLog (none of its request kinds is set)")
    request = _fields(_fields(fields[kind][-1]).get(1, [b""])[-1])  # every log's request is its field 1
    if kind == PREDICT:
        return "predict", _signature(request), lambda _inputs: _tensors(request.get(2, []))
    if kind in (CLASSIFY, REGRESS, MULTI_INFERENCE):
        spec = request.get(1, [b""])[-1] if kind != MULTI_INFERENCE else _first_task_spec(request)
        return KINDS[kind], _spec_signature(spec), lambda inputs: _examples(request.get(2, [b""])[-1], inputs)
    return KINDS[kind], "", None


def _signature(request: dict[int, list[bytes]]) -> str:
    return _spec_signature(request.get(1, [b""])[-1])


def _spec_signature(spec: bytes) -> str:
    """A ModelSpec's ``signature_name`` (field 3), "" where it names none."""
    return _fields(spec).get(3, [b""])[-1].decode("utf-8", errors="replace")


def _first_task_spec(request: dict[int, list[bytes]]) -> bytes:
    """A MultiInferenceRequest's first task's ModelSpec (its tasks share one input)."""
    tasks = request.get(1, [])
    return _fields(tasks[0]).get(1, [b""])[-1] if tasks else b""


def _tensors(entries: list[bytes]) -> dict[str, np.ndarray]:
    """A PredictRequest's ``inputs`` map (entries of key 1, TensorProto 2) as arrays."""
    from tensorflow.core.framework import tensor_pb2  # noqa: PLC0415 - comes with TensorFlow

    from .._tf import tf  # noqa: PLC0415

    out = {}
    for entry in entries:
        fields = _fields(entry)
        key = fields.get(1, [b""])[-1].decode("utf-8", errors="replace")
        try:
            array = np.asarray(tf().make_ndarray(tensor_pb2.TensorProto.FromString(fields.get(2, [b""])[-1])))
        except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError, make_ndarray's TypeError: a bad tensor
            raise ValueError(f"its input {key!r} is no TensorProto ({exc})") from exc
        out[key] = _fixed_width(key, array) if array.dtype == object else array
    return out


def _fixed_width(key: str, array: np.ndarray) -> np.ndarray:
    """A string tensor (TensorFlow gives an array of bytes objects: encoded images, text) as
    fixed-width bytes, the form an ``.npz`` holds and a capture stores."""
    try:
        return to_storage(array)[1]
    except Unstorable as exc:
        raise ValueError(f"its string input {key!r} cannot be fed from a file: {exc}") from exc


def _examples(input_message: bytes, inputs: dict[str, str]) -> dict[str, np.ndarray]:
    """An ``Input``'s serialized tf.Examples (its ``example_list``), for the signature's one string input."""
    fields = _fields(input_message)
    if 2 in fields:
        raise ValueError("its examples come with a context (example_list_with_context), which tftrace does not merge")
    strings = [key for key, dtype in inputs.items() if dtype == "string"]
    if len(inputs) != 1 or len(strings) != 1:
        raise ValueError(f"it holds tf.Examples, and the signature takes {', '.join(inputs) or 'no input'}, "
                         "not one string input to feed them to")
    examples = _fields(fields.get(1, [b""])[-1]).get(1, [])
    return {strings[0]: np.array(examples, dtype=bytes) if examples else np.zeros((0,), "S1")}


def _add(rows: dict[str, list[np.ndarray]], arrays: dict[str, np.ndarray], number: int, path: str,
         keys: set[str]) -> None:
    if set(arrays) != keys:
        missing, extra = sorted(keys - set(arrays)), sorted(set(arrays) - keys)
        raise TftraceError(
            f"warmup request {number} of {path} has inputs {sorted(arrays)} but the signature expects {sorted(keys)}"
            + (f" (missing: {', '.join(missing)})" if missing else "")
            + (f" (unexpected: {', '.join(extra)})" if extra else ""),
            "choose the signature its requests are for with --signature",
        )
    for key, array in arrays.items():
        rows.setdefault(key, []).append(array if array.ndim else array.reshape(1))


def _stacked(key: str, parts: list[np.ndarray], path: str) -> np.ndarray:
    """One input's rows of every request, in file order (strings widened to the widest)."""
    shapes = {p.shape[1:] for p in parts}
    if len(shapes) > 1:
        raise TftraceError(
            f"the warmup requests of {path} give input {key!r} rows of different shapes "
            f"({', '.join(str(list(s)) for s in sorted(shapes))}): tftrace feeds one array per input",
            "give an .npz of examples of one shape (resize the images as the server's client does)",
        )
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def _fields(message: bytes) -> dict[int, list[bytes]]:
    """A protobuf message's length-delimited fields by number, each occurrence in order (scalar
    fields are skipped: the wrapper's fields read here are all messages or strings)."""
    out: dict[int, list[bytes]] = {}
    at, end = 0, len(message)
    while at < end:
        tag, at = read_varint(message, at, what="protobuf field")
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            _, at = read_varint(message, at, what="protobuf field")
        elif wire == 1:
            at += 8
        elif wire == 5:
            at += 4
        elif wire == 2:
            size, at = read_varint(message, at, what="protobuf field")
            if at + size > end:
                raise ValueError("a field runs past the end of its message")
            out.setdefault(number, []).append(message[at:at + size])
            at += size
        else:
            raise ValueError(f"wire type {wire} of field {number} is not protobuf's")
    if at != end:
        raise ValueError("a field runs past the end of its message")
    return out

