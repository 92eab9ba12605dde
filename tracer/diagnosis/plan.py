"""The words a diagnose plan is written in: a :class:`Run` (one side to capture), a
:class:`Planned` experiment (two runs that differ in one factor), the :class:`PlanContext` the
plan depends on, and the :class:`Factor` record — everything about one factor, declared once
in :mod:`tracer.diagnosis.experiments`. Nothing here runs anything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Literal

from ..artifacts.records import ArtifactRef
from ..runspec import Side

if TYPE_CHECKING:  # a type only: the capture reader (numpy, networkx) is not needed to build the parser
    from ..captures.reader import Capture

__all__ = ["Factor", "Run", "Planned", "PlanContext", "at_batch", "with_grappler", "with_knobs"]


@dataclass(frozen=True)
class Run:
    """One side to capture; ``instance`` tells apart deliberate re-runs of an identical side."""

    side: Side
    describe: str  # what this side is, in the words of the experiment ("oneDNN on")
    instance: int = 0

    def key(self) -> str:
        # the interpreter is no part of a side's JSON (never taken from a file) but makes another run
        return json.dumps({**self.side.to_json(), "python": self.side.python}, sort_keys=True) + f"#{self.instance}"


@dataclass(frozen=True)
class Planned:
    name: str
    factor: str
    kind: str  # compare | repeat_process | observation | skipped
    a: Run | None = None
    b: Run | None = None
    skipped: str | None = None
    remedy: str | None = None  # the exact setting side B stands for, when B is a remedy
    notes: tuple[str, ...] = ()
    repeats: int = 2  # repeat_process: runs in the one process
    per_row: bool = False  # latency compared per example (the sides run different batch sizes)
    noise_removed_of: str | None = None  # this pair is that experiment's, run with the noise removed


@dataclass
class PlanContext:
    """What the plan depends on, known once the base side has been captured."""

    base: Side  # the model at the reference batch size, default knobs
    model_kind: str  # the base capture's artifact kind
    savedmodel: ArtifactRef | None
    batch_sizes: tuple[int, ...]  # sorted; the first is the reference
    factors: tuple[str, ...]  # selected, in FACTORS order
    quick: bool
    batch_major: bool  # False: the signature fixes the batch dimension
    onednn_on: bool | None  # oneDNN state of the base side (the capture's fingerprint)
    xla_on: bool  # the base environment already auto-clusters
    gpu: str | None  # None = a GPU is visible; else why the GPU experiments are skipped
    serving_inputs: dict[int, tuple[str, int]] = field(default_factory=dict)  # size -> (padded .npz, rows)
    serving_batching: str | None = None  # the file, or None
    session_config: tuple[str, str] | None = None  # (path, text)
    autotune_on: bool = True  # cuDNN autotuning is on where the sides run (TF_CUDNN_USE_AUTOTUNE unset or 1)
    tf32_on: bool | None = None  # the base capture ran with TF32 on (its fingerprint); None: not a GPU capture
    other_python: str | None = None  # --other-python: the interpreter of the other TensorFlow


Remedy = Literal["setting", "shape", "determinism", "none"]


@dataclass(frozen=True)
class Factor:
    """One factor of the matrix, declared once: how its pairs of sides are built (and when they
    are skipped), how the answers name it, and how its cost is read.

    ``plan`` returns the factor's experiments, with side B the remedy where there is one; it
    returns skipped experiments, with the reason, when the context cannot run them (a factor with
    ``gpu=True`` is skipped for it when no GPU is visible). The texts: ``title`` starts every answer
    line, ``description`` says what the experiments compare (``--only``'s list, the table),
    ``cause`` is a key of :data:`tracer.causes.CAUSES` (the "Cause:" of *why* and the fallback
    remedy), ``prevent`` is the remedy when the factor has no setting to change, ``prevent_note``
    is added to every remedy. The cost: ``costless`` factors have nothing to set and so no cost
    line; ``cost_text`` replaces the default sentence (format keys: title, both, pct, a, b,
    a_rows, b_rows, noise); ``per_example_cost`` compares latency per example (the sides run
    different batch sizes). ``setting`` reads the factor's value from a capture's manifest, as it
    really ran, so the answers can tell which other experiments ran with this remedy on both sides.
    """

    key: str
    title: str
    description: str
    plan: Callable[[PlanContext], list[Planned]]
    cause: str | None = None
    remedy: Remedy = "none"  # what side B's remedy is: a setting, one fixed shape, op determinism
    prevent: str | None = None
    prevent_note: str = ""
    costless: bool = False
    cost_text: str | None = None
    per_example_cost: bool = False
    setting: Callable[[Capture], Any] | None = None  # what a capture says the factor was
    quick: bool = False  # part of --quick
    gpu: bool = False  # needs a visible GPU
    cheap: bool = False  # usually identical (no isolation children): scheduled last
    same_graph_is_nondeterminism: bool = False  # no rewrite + a differing fresh-process repeat: not this factor


def with_grappler(side: Side, **options: str) -> Side:
    merged = dict(side.knobs.grappler) | options
    return side.with_(knobs=replace(side.knobs, grappler=tuple(sorted(merged.items()))))


def with_knobs(side: Side, **changes: Any) -> Side:
    return side.with_(knobs=replace(side.knobs, **changes))


def at_batch(side: Side, batch_size: int | None = None) -> Run:
    """``side`` (at ``batch_size``) as the plain run of the model on its device: "cpu, batch 8"."""
    side = side if batch_size is None else side.with_(batch_size=batch_size)
    return Run(side, f"{side.device}, batch {side.batch_size}")
