"""TF Serving's batching, without TF Serving: its parameters file, and how it pads a request.

``--batching_parameters_file`` is a text-format ``tensorflow.serving.BatchingParameters``
message::

    max_batch_size { value: 8 }
    batch_timeout_micros { value: 0 }
    num_batch_threads { value: 4 }
    allowed_batch_sizes: 2
    allowed_batch_sizes: 8          # or: allowed_batch_sizes: [2, 8]
    pad_variable_length_inputs: true

It is parsed by protobuf's own ``text_format`` into TF Serving's own message type, so a file is
accepted exactly when the server's ``TextFormat`` parser accepts it (a wrapper field written
``max_batch_size: 8``, a misspelt field, an unclosed brace are refused with the line and column,
because a file the server would refuse must not be emulated as if it worked).

Where the message type comes from: the ``tensorflow-serving-api`` wheel (2.21.0 on PyPI) ships
the ``apis`` and ``config`` protos but not ``session_bundle_config_pb2``, and it depends on the
``tensorflow`` distribution (it would install beside ``tensorflow-cpu``); TF's own protos would
import TensorFlow into a process that must not need it. So :func:`batching_parameters_class`
builds the descriptor here, field for field (names, numbers, types) from ``message
BatchingParameters`` in ``tensorflow_serving/servables/tensorflow/session_bundle_config.proto``
of the tensorflow/serving repository, as it stands since TF Serving 2.3 (read in the copy of
the fork marevol/serving at commit 98e4bc4477ab16c54fdc62fe50cbce45c86f73b8: fields 1-9; the
two upstream copies the search index holds, 75d29e28 and 03f8b6b5, are older releases with fields
1-6 and 1-7). It lives in a private descriptor pool, so a real ``session_bundle_config_pb2``
imported later does not clash.

How the server pads (tensorflow_serving/batching/batching_session.cc, ``MergeInputTensors``):
the merged batch is rounded up to the smallest allowed batch size that holds it, and the
missing rows are copies of the first row of the last request in the batch. A single request's
rows padded into a batch of ``S`` are therefore that request followed by copies of its first
row — which is what :func:`pad_requests` builds, one request of one row at a time.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import TftraceError

__all__ = ["BatchingParameters", "BATCHING_FIELDS", "batching_parameters_class", "parse_batching_parameters",
           "read_batching_parameters", "pad_requests", "padding_groups", "round_up_to_allowed"]

PROTO_FILE = "tensorflow_serving/servables/tensorflow/session_bundle_config.proto"
MESSAGE = "tensorflow.serving.BatchingParameters"
# message BatchingParameters of PROTO_FILE: (name, number, type); "int64[]" is `repeated int64`,
# a dotted type is a message (the google.protobuf wrappers).
BATCHING_FIELDS: tuple[tuple[str, int, str], ...] = (
    ("max_batch_size", 1, "google.protobuf.Int64Value"),
    ("batch_timeout_micros", 2, "google.protobuf.Int64Value"),
    ("max_enqueued_batches", 3, "google.protobuf.Int64Value"),
    ("num_batch_threads", 4, "google.protobuf.Int64Value"),
    ("thread_pool_name", 5, "google.protobuf.StringValue"),
    ("allowed_batch_sizes", 6, "int64[]"),
    ("pad_variable_length_inputs", 7, "bool"),
    ("enable_large_batch_splitting", 8, "google.protobuf.BoolValue"),
    ("max_execution_batch_size", 9, "google.protobuf.Int64Value"),
)
EXAMPLE = ("e.g. `max_batch_size { value: 8 }` (the wrapped fields take `{ value: N }`), `allowed_batch_sizes: 2` "
           "(one line per size, or `allowed_batch_sizes: [2, 8]`), `pad_variable_length_inputs: true`")


@functools.cache
def batching_parameters_class() -> type:
    """TF Serving's ``BatchingParameters`` message class, built from :data:`BATCHING_FIELDS`."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, wrappers_pb2  # noqa: PLC0415

    kinds = descriptor_pb2.FieldDescriptorProto
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
    proto = descriptor_pb2.FileDescriptorProto(name=PROTO_FILE, package=MESSAGE.rsplit(".", 1)[0], syntax="proto3",
                                               dependency=[wrappers_pb2.DESCRIPTOR.name])
    message = proto.message_type.add(name=MESSAGE.rsplit(".", 1)[1])
    for name, number, kind in BATCHING_FIELDS:
        entry = message.field.add(name=name, number=number, json_name=name, label=kinds.LABEL_OPTIONAL)
        if kind == "int64[]":
            entry.type, entry.label = kinds.TYPE_INT64, kinds.LABEL_REPEATED
        elif kind == "bool":
            entry.type = kinds.TYPE_BOOL
        else:
            entry.type, entry.type_name = kinds.TYPE_MESSAGE, f".{kind}"
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(MESSAGE))


@dataclass(frozen=True)
class BatchingParameters:
    """The fields that decide which batch shapes a request can run in, plus the rest as read."""

    max_batch_size: int | None = None
    allowed_batch_sizes: tuple[int, ...] = ()
    batch_timeout_micros: int | None = None
    num_batch_threads: int | None = None
    pad_variable_length_inputs: bool = False
    other: dict[str, Any] = field(default_factory=dict)  # read, but not used by the emulation
    path: str = ""

    def emulated_sizes(self) -> tuple[int, ...]:
        """The batch sizes a one-row request can be run in: every allowed size above 1, or, with
        no allowed sizes, ``max_batch_size`` (the server then merges up to it without padding)."""
        sizes = self.allowed_batch_sizes or ((self.max_batch_size,) if self.max_batch_size else ())
        return tuple(s for s in sizes if s > 1)

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "max_batch_size": self.max_batch_size,
                "allowed_batch_sizes": list(self.allowed_batch_sizes),
                "batch_timeout_micros": self.batch_timeout_micros, "num_batch_threads": self.num_batch_threads,
                "pad_variable_length_inputs": self.pad_variable_length_inputs, "other": dict(self.other)}


def _refuse(path: str, what: str, line: int | None, column: int | None = None, text: str = "") -> TftraceError:
    """A refused file: the line (and column), what is wrong, and how to write it instead."""
    where = "" if line is None else f" at line {line}" + ("" if column is None else f", column {column}")
    source = text.splitlines()[line - 1] if text and line and line <= len(text.splitlines()) else ""
    wrapped = [name for name, _, kind in BATCHING_FIELDS if "." in kind and name in source.split("#", 1)[0]]
    if wrapped and 'Expected "{"' in what:  # the commonest slip: `max_batch_size: 8` for a wrapper field
        kind = dict((n, k) for n, _, k in BATCHING_FIELDS)[wrapped[0]]
        fix = f"write `{wrapped[0]} {{ value: ... }}`: {wrapped[0]} is a {kind} message"
    else:
        fix = (f"write TF Serving's BatchingParameters in protobuf text format, {EXAMPLE}; its fields: "
               + ", ".join(name for name, _, _ in BATCHING_FIELDS))
    return TftraceError(f"the batching parameters file {path}{where}: {what}", fix)


def _line_of(text: str, name: str) -> int | None:
    """The first line that sets ``name`` (protobuf has parsed it, so only its value is wrong)."""
    return next((i for i, line in enumerate(text.splitlines(), 1) if name in line.split("#", 1)[0]), None)


def parse_batching_parameters(text: str, path: str = "<text>") -> BatchingParameters:
    """Parse and check a ``BatchingParameters`` text proto the way TF Serving would accept it."""
    from google.protobuf import text_format  # noqa: PLC0415

    message = batching_parameters_class()()
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as exc:
        what = str(exc).split(" : ", 1)[-1] if exc.GetLine() is not None else str(exc)
        raise _refuse(path, f"does not parse: {what}", exc.GetLine(), exc.GetColumn(), text) from None
    values: dict[str, Any] = {}
    for name, _, kind in BATCHING_FIELDS:
        if kind == "int64[]":
            values[name] = tuple(getattr(message, name))
            bad = [v for v in values[name] if v < 1]
            if bad:
                raise _refuse(path, f"allowed_batch_sizes entry {bad[0]} is not a positive integer",
                              _line_of(text, name))
        elif kind == "bool":
            values[name] = getattr(message, name)
        elif message.HasField(name):
            values[name] = getattr(message, name).value
            if kind == "google.protobuf.Int64Value" and values[name] < 0:
                raise _refuse(path, f"{name} {values[name]} is not a non-negative integer", _line_of(text, name))
    params = BatchingParameters(
        max_batch_size=values.pop("max_batch_size", None),
        allowed_batch_sizes=values.pop("allowed_batch_sizes"),
        batch_timeout_micros=values.pop("batch_timeout_micros", None),
        num_batch_threads=values.pop("num_batch_threads", None),
        pad_variable_length_inputs=values.pop("pad_variable_length_inputs"),
        other=values,
        path=path,
    )
    _check(params)
    return params


def _check(params: BatchingParameters) -> None:
    """The rules TF Serving enforces before it starts batching with these parameters."""
    allowed = params.allowed_batch_sizes
    splitting = bool(params.other.get("enable_large_batch_splitting"))
    limit_name = "max_execution_batch_size" if splitting else "max_batch_size"
    limit = params.other.get("max_execution_batch_size") if splitting else params.max_batch_size
    problem = ""
    if allowed and any(b <= a for a, b in zip(allowed, allowed[1:])):
        problem = f"allowed_batch_sizes {list(allowed)} must increase strictly"
    elif allowed and limit is not None and allowed[-1] != limit:
        problem = f"the last allowed_batch_sizes entry ({allowed[-1]}) must equal {limit_name} ({limit})"
    elif not allowed and not params.max_batch_size:
        problem = "it sets neither allowed_batch_sizes nor max_batch_size, so there is no batch shape to emulate"
    if problem:
        raise TftraceError(f"the batching parameters file {params.path}: {problem}",
                           "fix the file (TF Serving refuses it the same way)")


def read_batching_parameters(path: str) -> BatchingParameters:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise TftraceError(f"cannot read the batching parameters file {path}: {exc.strerror}",
                           "check the path") from exc
    except UnicodeDecodeError as exc:
        raise TftraceError(f"the batching parameters file {path} is not text ({exc.reason})",
                           "pass the text-format file given to TF Serving's --batching_parameters_file") from exc
    return parse_batching_parameters(text, path)


def round_up_to_allowed(rows: int, allowed: tuple[int, ...]) -> int:
    """The batch size the server runs ``rows`` merged rows in (no allowed sizes: no padding)."""
    return next((s for s in allowed if s >= rows), rows)


def padding_groups(sizes: tuple[int, ...], cap: int = 64) -> list[tuple[int, tuple[int, ...]]]:
    """Group batch sizes that can share one padded input file: ``(copies, sizes)`` pairs.

    A file in which each request row is repeated ``copies`` times, run at batch ``S`` with ``S``
    dividing ``copies``, puts every request in batches of exactly its own row and its copies —
    the server's padding. One file serves all sizes when their least common multiple is small.
    """
    if not sizes:
        return []
    common = math.lcm(*sizes)
    if common <= cap:
        return [(common, tuple(sizes))]
    return [(s, (s,)) for s in sizes]


def pad_requests(arrays: dict[str, np.ndarray], copies: int) -> dict[str, np.ndarray]:
    """Each row (one request) followed by ``copies - 1`` copies of itself, for every input."""
    if copies < 1:
        raise ValueError(f"copies must be positive, got {copies}")
    return {key: np.repeat(np.asarray(value), copies, axis=0) for key, value in arrays.items()}
