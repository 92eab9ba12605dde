"""The words a comparison gives each op and the whole result: one list of each.

The classifier (:mod:`tracer.comparison.divergence`) assigns them, the report stage colours,
counts and labels them, and ``tracer/schemas/report.schema.json`` lists them as the contract
(a test holds the schema to these lists). Each word is one record: its key (the contract), its
label, its meaning (docs/verdicts.md gives the same words; a test holds the page to them) and what
else it decides (an overall verdict's exit code, an isolation verdict's sentence). Plain data:
importing it imports no numerics, so a re-render of a report (``tftrace report``) can use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import EXIT_DIVERGED, EXIT_OK
from ..optypes import loop_result

__all__ = ["OpStatus", "STATUS", "STATUSES", "STATUS_LABELS", "Verdict", "VERDICT", "VERDICTS", "verdict_label",
           "verdict_exit_code", "IsolationVerdict", "ISOLATION", "ISOLATION_VERDICTS", "BORN_HERE",
           "LOAD_STATE_WORDS", "DRAWN_AT_LOAD", "isolation_label", "isolation_words", "origin_isolation_words", "isolation_clause", "worse"]


@dataclass(frozen=True)
class OpStatus:
    """What the divergence stage says of one op of A's graph (report.json ``nodes[NAME].status``)."""

    key: str
    label: str  # a legend's or a table's words: "rewritten at export"
    meaning: str  # its definition, as docs/verdicts.md gives it (tests/test_docs.py holds the page to it)


# Worst first: the order a scope box uses to pick the colour of its worst op.
STATUS: dict[str, OpStatus] = {s.key: s for s in (
    OpStatus("origin", "origin", "the output differs beyond tolerance while every input is within tolerance: the "
             "difference **starts here**"),
    OpStatus("propagated", "propagated", "the output differs beyond tolerance and an input already did: the op passes "
             "on a difference from above"),
    OpStatus("unmatched", "unmatched", "the op has no counterpart in B (the graph diff paired nothing with it); "
             "`reason` says why"),
    OpStatus("rewritten", "rewritten at export", "the op is a member of an export rewrite (a conv folded with its batch "
             "norm, the first ops of a fused chain): compared and shown, but judged only through the rewrite's output, "
             "because the rewrite legitimately changes it"),
    OpStatus("within_tolerance", "within tolerance", "not bitwise equal, but |a − b| ≤ atol + rtol·|a| everywhere"),
    OpStatus("not_captured", "not captured", "the tensor could not be fetched (inside a while loop, a `tf.cond` branch "
             "that did not run, a dtype a session cannot return); `reason` says which"),
    OpStatus("not_compared", "not compared", "both sides captured it, but no pair of its tensors could be measured (its "
             "value depends on how examples are grouped into runs and the sides batch differently, shapes that do not "
             "line up, values kept only by digest that cannot be read back here); `reason` says why"),
    OpStatus("identical", "identical", "bitwise equal (or equal values in another dtype, where a mixed-precision export "
             "casts exactly)"),
)}
STATUSES: tuple[str, ...] = tuple(STATUS)
STATUS_LABELS: dict[str, str] = {k: v.label for k, v in STATUS.items()}  # what the page's script is handed


@dataclass(frozen=True)
class Verdict:
    """What a whole comparison says (report.json ``verdict``, ``verdict_ops``, ``verdict_outputs``)."""

    key: str
    label: str  # "within noise"; a badge or a title says it in capitals
    meaning: str  # its definition, as docs/verdicts.md gives it
    exit_code: int  # what compare, report and isolate exit with: 1 only where something diverged


# Best to worst: the worse of two verdicts is the later one.
VERDICT: dict[str, Verdict] = {v.key: v for v in (
    Verdict("identical", "identical", "every compared tensor and every output is bitwise equal, and no side moved "
            "between its own runs", EXIT_OK),
    Verdict("within_tolerance", "within tolerance", "something differs, nothing beyond tolerance", EXIT_OK),
    Verdict("within_noise", "within noise", "something differs beyond tolerance, but no more than each side differs "
            "from itself over `--repeat K` runs: the sides are as equal as each is to itself", EXIT_OK),
    Verdict("diverged", "diverged", "an op or an output differs beyond tolerance (and beyond any measured noise)",
            EXIT_DIVERGED),
)}
VERDICTS: tuple[str, ...] = tuple(VERDICT)


def worse(*verdicts: str) -> str:
    """The worst of some verdicts (the latest in VERDICTS)."""
    return max(verdicts, key=VERDICTS.index)


def verdict_label(verdict: object) -> str:
    """``within noise``; a verdict this release does not know (a newer report's) as it is spelled."""
    found = VERDICT.get(str(verdict))
    return found.label if found else str(verdict or "unknown").replace("_", " ")


def verdict_exit_code(verdict: object) -> int:
    """The CLI's exit code for a report's verdict; one it does not know cannot claim a pass."""
    found = VERDICT.get(str(verdict))
    return found.exit_code if found else EXIT_DIVERGED


@dataclass(frozen=True)
class IsolationVerdict:
    """One isolation verdict, worded once for every renderer (terminal, Markdown, HTML and its
    script, diagnose's answers). ``{replayed}`` in ``meaning`` stands for what ran alone: "the op
    alone", or "the while loop X (replayed whole)" for a loop's result, whose replay runs the loop."""

    key: str
    label: str  # a table cell: "own error"
    meaning: str  # what the replays showed, said after the label: "own error — fed identical inputs, ..."
    clause: str  # continues a sentence that names the op: "`conv` (Conv2D), whose own kernel differs ..."
    born_here: bool  # the difference begins at the op itself (its kernel, its weights, its batch): its origin ranks first
    # The catalogue cause (tracer.causes.CAUSES) the verdict points at by itself, or "" where the cause lies in
    # what else differs between the sides (an own error: their batch sizes, knobs or builds; inherited: upstream).
    cause: str = ""
    # tracer.causes' evidence for that cause; "{first}" is the op, "`node` (Op)"; empty: "{first}, " + clause
    evidence: str = ""
    # A first-divergence line's words where they say more than label and meaning (origin_isolation_words):
    rewritten: str = ""  # the op is one B computes in a rewritten form; "{rewrite}" is the rewrite's kind
    counted: str = ""  # with how many ops share the verdict; "{others}" is ", as N weights do" or ""


# tracer.comparison.judge decides the replayed ones; not_run: the replay is pending on the machine that
# has a side's model; not_replayed: TensorFlow could not run the replay (the detail gives its reason).
ISOLATION: dict[str, IsolationVerdict] = {v.key: v for v in (
    IsolationVerdict("own_error", "own error", "fed identical inputs, {replayed} still differs",
                     "whose own kernel differs given identical inputs", True,
                     rewritten="given identical inputs it differs as rewritten in B ({rewrite})"),
    # said of a fused batch norm in training mode and of an op computed from tf.nn.moments' Mean over the batch
    # (tf-slim's batch_norm(fused=False)) alike: neither words may call the op a batch norm or is_training its attr
    IsolationVerdict("batch_statistics", "batch statistics",
                     "fed identical rows, {replayed} still differs: it is computed from statistics over the batch it "
                     "runs in (a batch norm in training mode, or a reduction over the batch axis), which the sides do "
                     "not share; not its kernel",
                     "whose value is computed from statistics over the batch it runs in (a batch norm in training "
                     "mode, or a reduction over the batch axis), which the sides do not share (not its kernel)", True,
                     cause="training_graph"),
    IsolationVerdict("weights_differ", "weights differ",
                     "A and B hold different values for this weight; nothing computes it, so no kernel differs",
                     "a weight the two sides hold with different values (no kernel is involved)", True, cause="weights",
                     counted="its weights differ (A and B hold different values for it{others}; no kernel is involved)"),
    IsolationVerdict("inherited", "inherited",
                     "fed identical inputs, {replayed} agrees; the difference comes from upstream",
                     "which only inherits a difference from upstream", False),
    IsolationVerdict("nondeterministic", "nondeterministic",
                     "on identical inputs its result changes from run to run; not its kernel, not an export rewrite",
                     "whose result changes from run to run on identical inputs", False, cause="nondeterminism",
                     evidence="{first} changes from run to run on identical inputs"),
    IsolationVerdict("run_time_rewrite", "rewritten at run time",
                     "the two runs executed it as different kernels, and alone, on identical inputs, it agrees; "
                     "not its kernel, not run-to-run noise",
                     "which the two runs executed as different kernels (a rewrite at run time)", False,
                     cause="grappler"),
    IsolationVerdict("state", "model state",
                     "it reads a variable the graph writes on every run: the sides' earlier runs left it different; "
                     "not its kernel, not an export",
                     "which reads the model's own state (a variable the graph writes on every run)", False,
                     cause="state"),
    IsolationVerdict("not_reproduced", "not reproduced",
                     "fed identical inputs, {replayed} agrees on both sides, though the runs differed there",
                     "which agrees when replayed alone on identical inputs (not reproduced)", False,
                     cause="nondeterminism",
                     evidence="{first} differed between the runs although its inputs were identical, and agrees on "
                              "both sides when replayed alone: either it changes from run to run, or it computed "
                              "differently inside its whole graph than alone (`--repeat 2` tells which)"),
    IsolationVerdict("not_run", "not run", "the replay is pending on the machine that has a side's model",
                     "whose replay has not run yet", False),
    IsolationVerdict("not_replayed", "not replayed",
                     "TensorFlow could not run it alone on identical inputs, so own error vs inherited is unknown",
                     "which could not be replayed alone", False),
)}
ISOLATION_VERDICTS: tuple[str, ...] = tuple(ISOLATION)
# The isolation verdicts that say the difference is born at the op itself, so its origin is ranked first.
BORN_HERE: frozenset[str] = frozenset(k for k, v in ISOLATION.items() if v.born_here)


def isolation_label(verdict: object) -> str:
    """A table cell: ``own error``; "—" for none; a verdict this release does not know as it is spelled."""
    if not verdict:
        return "—"
    found = ISOLATION.get(str(verdict))
    return found.label if found else str(verdict).replace("_", " ")


def isolation_words(verdict: object, loop: str = "", loop_above: bool = False, sep: str = " — ") -> str:
    """``own error — fed identical inputs, the op alone still differs``; ``loop`` names the while
    loop a loop result's replay ran whole; ``loop_above``: the op was replayed with the while loop
    above it (isolation's ``loop``). An unknown verdict (a newer report) is said as it is."""
    found = ISOLATION.get(str(verdict))
    if found is None:
        return f"isolation: {verdict}"
    replayed = (f"the while loop {loop} (replayed whole)" if loop else
                "the op with the while loop above it" if loop_above else "the op alone")
    return f"{found.label}{sep}{found.meaning.format(replayed=replayed)}"


# A variable whose replay moved because it is set anew at each load (isolation's ``load_state``): said
# instead of its verdict's words, as that is what the replays found.
LOAD_STATE_WORDS = "its value changes from one load of the model to the next (set at load, not restored)"
# A node's reason in report.json when its difference is that of a value drawn anew at each load
DRAWN_AT_LOAD = "its value is drawn anew at every load of the model"


def origin_isolation_words(isolation: Mapping[str, Any] | None, op_type: str, *, rewrite: str = "",
                           weights_differing: int = 0, sep: str = ": ") -> str:
    """The isolation of one op in the words every renderer gives it, from report.json's record of it
    (``isolation``: verdict, loop, load_state, detail) and the op's type (a loop result's replay ran
    the loop). Given ``rewrite`` (the kind B computes the op as), an own error says so rather than
    blame a kernel; given ``weights_differing`` (how many weights differ in all), a weights_differ
    says they are one finding. The replay's ``detail`` is the caller's to place."""
    if not isolation or not isolation.get("verdict"):
        return "not isolated"
    verdict = str(isolation["verdict"])
    record = ISOLATION.get(verdict)
    loop = loop_result(op_type)
    if isolation.get("load_state"):
        words = LOAD_STATE_WORDS
    elif record is not None and record.rewritten and rewrite and not loop:
        words = record.rewritten.format(rewrite=rewrite)
    elif record is not None and record.counted and weights_differing:
        others = f", as {weights_differing} weights do" if weights_differing > 1 else ""
        words = record.counted.format(others=others)
    else:
        words = isolation_words(verdict, loop, loop_above=bool(isolation.get("loop")), sep=sep)
    return words


def isolation_clause(verdict: object, loop: str = "") -> str:
    """What a sentence naming the op adds, without its leading comma: "whose own kernel differs
    given identical inputs"; for a loop's result, "where the while loop X differs ..."; "" unknown."""
    if verdict == "own_error" and loop:
        return f"where the while loop {loop} differs given identical inputs"
    found = ISOLATION.get(str(verdict))
    return found.clause if found else ""
