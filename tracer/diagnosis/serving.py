"""TF Serving's batching, without TF Serving: its parameters file, and how it pads a request.

``--batching_parameters_file`` is a text-format ``BatchingParameters`` proto::

    max_batch_size { value: 8 }
    batch_timeout_micros { value: 0 }
    num_batch_threads { value: 4 }
    allowed_batch_sizes: 2
    allowed_batch_sizes: 8          # or: allowed_batch_sizes: [2, 8]
    pad_variable_length_inputs: true

It is read here by a small text-proto reader (no TensorFlow or protobuf schema needed), which
accepts what protobuf's text format accepts for these fields: comments, optional ``:`` before
``{``, ``,``/``;`` separators, repeated fields written one per line or as a ``[..]`` list, and
scalars with or without the ``{ value: N }`` wrapper. Anything else is refused with the line
and column, because a file the server would refuse must not be emulated as if it worked.

How the server pads (tensorflow_serving/batching/batching_session.cc, ``MergeInputTensors``):
the merged batch is rounded up to the smallest allowed batch size that holds it, and the
missing rows are copies of the first row of the last request in the batch. A single request's
rows padded into a batch of ``S`` are therefore that request followed by copies of its first
row — which is what :func:`pad_requests` builds, one request of one row at a time.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import TftraceError

__all__ = ["BatchingParameters", "parse_batching_parameters", "read_batching_parameters", "pad_requests",
           "padding_groups", "round_up_to_allowed"]

INT_FIELDS = ("max_batch_size", "batch_timeout_micros", "max_enqueued_batches", "num_batch_threads",
              "max_execution_batch_size")
KNOWN_FIELDS = (*INT_FIELDS, "allowed_batch_sizes", "pad_variable_length_inputs", "thread_pool_name",
                "enable_large_batch_splitting")
_TOKEN = re.compile(r"""\s+|\#[^\n]*|(?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')|(?P<word>[A-Za-z_][\w.]*)"""
                    r"""|(?P<num>[-+]?(?:0[xX][0-9a-fA-F]+|\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?))"""
                    r"""|(?P<punct>[{}\[\]:,;<>])""")


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


class _Reader:
    """Tokens of a text proto, with positions for the error messages."""

    def __init__(self, text: str, path: str) -> None:
        self.path = path
        self.tokens: list[tuple[str, str, int]] = []  # (kind, text, offset)
        self.text = text
        pos = 0
        while pos < len(text):
            match = _TOKEN.match(text, pos)
            if match is None:
                raise self.error(f"unexpected character {text[pos]!r}", pos)
            if match.lastgroup:
                self.tokens.append((match.lastgroup, match.group(), pos))
            pos = match.end()
        self.i = 0

    def error(self, what: str, offset: int | None = None) -> TftraceError:
        if offset is None:
            offset = self.tokens[self.i][2] if self.i < len(self.tokens) else len(self.text)
        line = self.text.count("\n", 0, offset) + 1
        column = offset - (self.text.rfind("\n", 0, offset) + 1) + 1
        return TftraceError(
            f"the batching parameters file {self.path} does not parse: {what} at line {line}, column {column}",
            "write it in protobuf text format, e.g. `max_batch_size { value: 8 }` and `allowed_batch_sizes: 2` "
            "(one line per size, or `allowed_batch_sizes: [2, 8]`)",
        )

    def peek(self) -> tuple[str, str, int] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self, *texts: str) -> bool:
        token = self.peek()
        if token is not None and token[0] == "punct" and token[1] in texts:
            self.i += 1
            return True
        return False

    def expect(self, *texts: str) -> None:
        if not self.take(*texts):
            token = self.peek()
            raise self.error(f"expected {' or '.join(repr(t) for t in texts)}, found "
                             f"{repr(token[1]) if token else 'the end of the file'}")

    def message(self, closing: str | None, opened_at: int = 0) -> list[tuple[str, Any, int]]:
        """``name: scalar``, ``name: [a, b]`` and ``name { ... }`` entries up to ``closing``."""
        entries: list[tuple[str, Any, int]] = []
        while True:
            token = self.peek()
            if token is None:
                if closing is not None:
                    opening = self.text[opened_at]
                    raise self.error(f"unclosed {opening!r} (no matching {closing!r})", opened_at)
                return entries
            if token[0] == "punct" and token[1] == closing:
                self.i += 1
                return entries
            if token[0] != "word":
                raise self.error(f"expected a field name, found {token[1]!r}")
            self.i += 1
            name, offset = token[1], token[2]
            colon = self.take(":")
            if self.take("{", "<"):
                brace = self.tokens[self.i - 1]
                entries.append((name, self.message("}" if brace[1] == "{" else ">", brace[2]), offset))
            elif colon and self.take("["):
                entries.extend((name, value, offset) for value in self.list_values())
            elif colon:
                entries.append((name, self.scalar(), offset))
            else:
                raise self.error(f"expected ':' or '{{' after {name!r}")
            self.take(",", ";")

    def list_values(self) -> list[Any]:
        values: list[Any] = []
        if self.take("]"):
            return values
        while True:
            values.append(self.scalar())
            if self.take("]"):
                return values
            self.expect(",")

    def scalar(self) -> Any:
        token = self.peek()
        if token is None or token[0] == "punct":
            raise self.error(f"expected a value, found {repr(token[1]) if token else 'the end of the file'}")
        self.i += 1
        kind, text, _ = token
        if kind == "str":
            return text[1:-1]
        if kind == "num":
            return int(text, 0) if re.fullmatch(r"[-+]?(0[xX][0-9a-fA-F]+|\d+)", text) else float(text)
        return {"true": True, "True": True, "t": True, "false": False, "False": False, "f": False}.get(text, text)


def parse_batching_parameters(text: str, path: str = "<text>") -> BatchingParameters:
    """Parse and check a ``BatchingParameters`` text proto the way TF Serving would accept it."""
    reader = _Reader(text, path)
    values: dict[str, Any] = {}
    allowed: list[int] = []
    for name, value, offset in reader.message(None):
        if isinstance(value, list):  # a wrapper message: { value: N }
            inner = [v for n, v, _ in value if n == "value"]
            if len(inner) != 1 or len(value) != 1:
                raise reader.error(f"{name} {{ ... }} must hold exactly one `value: ...`", offset)
            value = inner[0]
        if name == "allowed_batch_sizes":
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise reader.error(f"allowed_batch_sizes entry {value!r} is not a positive integer", offset)
            allowed.append(value)
        elif name in INT_FIELDS:
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise reader.error(f"{name} {value!r} is not a non-negative integer", offset)
            values[name] = value
        elif name in ("pad_variable_length_inputs", "enable_large_batch_splitting"):
            if not isinstance(value, bool):
                raise reader.error(f"{name} must be true or false, not {value!r}", offset)
            values[name] = value
        else:
            values[name] = value  # thread_pool_name and fields of newer TF Serving releases
    params = BatchingParameters(
        max_batch_size=values.pop("max_batch_size", None),
        allowed_batch_sizes=tuple(allowed),
        batch_timeout_micros=values.pop("batch_timeout_micros", None),
        num_batch_threads=values.pop("num_batch_threads", None),
        pad_variable_length_inputs=bool(values.pop("pad_variable_length_inputs", False)),
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
