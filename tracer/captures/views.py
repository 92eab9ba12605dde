"""Typed, read-only views of the parts of a capture's manifest that readers reason about.

``manifest.json`` stays the contract (docs/contracts.md); :mod:`tracer.captures._checks` checks
its parts' shapes when a capture is opened. These views give the fields names and types, so a
reader writes ``capture.observer.outputs_identical`` rather than reaching into nested dicts, and a
field a manifest written by an older release lacks has one default here, not one per reader.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ExamplesRecord", "ObserverEffect", "Timings"]


@dataclass(frozen=True)
class ExamplesRecord:
    """What a capture recorded of the examples its side ran: how many, where they came from, how
    they were laid out (the values themselves are :class:`tracer.captures.inputs.Examples`, made
    by the worker, and the capture's input tensors)."""

    count: int
    source: str  # "generated (seed 0, N(0,1) floats)", or the inputs file's name
    batch_major: bool  # the first axis of every input is the example axis
    per_example: bool = False  # the inputs were fed one example per run
    file_sha256: str | None = None  # the inputs file's own sha256; None for generated examples and older captures
    shared: frozenset[str] = frozenset()  # input keys fed whole to every run (no batch axis beside batched ones)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ExamplesRecord:
        return cls(int(doc["count"]), str(doc.get("source") or ""), bool(doc.get("batch_major")),
                   bool(doc.get("per_example")), doc.get("file_sha256"), frozenset(doc.get("shared") or ()))


@dataclass(frozen=True)
class ObserverEffect:
    """How the instrumented run (every tensor fetched) compared with the plain run (outputs only)."""

    outputs_identical: bool  # the two runs' signature outputs agree bit for bit
    outputs_max_abs_diff: Mapping[str, Any]  # per output key
    executed_ops: Mapping[str, Mapping[str, int]]  # "plain"/"instrumented" -> op type -> times executed
    only_in_plain: tuple[str, ...]  # op types only the plain run executed (a fusion fetching prevented)
    only_in_instrumented: tuple[str, ...]
    stateful_ops: tuple[str, ...]  # ops that change the model's state on every run
    explained_by_state: bool  # the outputs moved because those ops changed the state, not because of fetching
    executed_nodes_plain: Mapping[str, str]  # node -> op type, as the plain run executed them
    executed_nodes_instrumented: Mapping[str, str]

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ObserverEffect:
        executed = doc.get("executed_ops") or {}
        return cls(
            outputs_identical=bool(doc["outputs_identical"]),
            outputs_max_abs_diff=dict(doc.get("outputs_max_abs_diff") or {}),
            executed_ops={run: dict(executed.get(run) or {}) for run in ("plain", "instrumented")},
            only_in_plain=tuple(doc.get("only_in_plain") or ()),
            only_in_instrumented=tuple(doc.get("only_in_instrumented") or ()),
            stateful_ops=tuple(doc.get("stateful_ops") or ()),
            explained_by_state=bool(doc.get("explained_by_state")),
            executed_nodes_plain=dict(doc.get("executed_nodes_plain") or {}),
            executed_nodes_instrumented=dict(doc.get("executed_nodes_instrumented") or {}),
        )


@dataclass(frozen=True)
class Timings:
    """What the capture measured of its own runs."""

    plain_latency_ms: Mapping[str, Any]  # the timed plain runs: median, runs, batch_rows, ...
    instrumented_s: float | None  # every instrumented run together, writing included
    load_s: float | None

    @property
    def rows_per_run(self) -> int:
        """The examples one timed plain run computed (1 where not recorded)."""
        return max(1, int(self.plain_latency_ms.get("batch_rows") or 1))

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Timings:
        def seconds(key: str) -> float | None:
            value = doc.get(key)
            return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

        return cls(dict(doc["plain_latency_ms"]), seconds("instrumented_s"), seconds("load_s"))
