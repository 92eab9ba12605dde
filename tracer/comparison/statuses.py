"""The words a comparison gives each op and the whole result: one list of each.

The classifier (:mod:`tracer.comparison.divergence`) assigns them, the report stage colours,
counts and labels them, and ``tracer/schemas/report.schema.json`` lists them as the contract
(a test holds the schema to these lists). Plain data: importing it imports nothing else, so a
re-render of a report (``tftrace report``) can use it without the comparison's numerics.
"""

from __future__ import annotations

__all__ = ["STATUSES", "STATUS_LABELS", "VERDICTS", "ISOLATION_VERDICTS", "BORN_HERE", "worse"]

# An op's status, worst first (the order a scope box uses to pick the colour of its worst op) -> its label.
STATUS_LABELS: dict[str, str] = {
    "origin": "origin",
    "propagated": "propagated",
    "unmatched": "unmatched",
    "rewritten": "rewritten at export",
    "within_tolerance": "within tolerance",
    "not_captured": "not captured",
    "not_compared": "not compared",
    "identical": "identical",
}
STATUSES: tuple[str, ...] = tuple(STATUS_LABELS)

# A comparison's verdict, best to worst: the worse of two verdicts is the later one.
VERDICTS: tuple[str, ...] = ("identical", "within_tolerance", "within_noise", "diverged")


def worse(*verdicts: str) -> str:
    """The worst of some verdicts (the latest in VERDICTS)."""
    return max(verdicts, key=VERDICTS.index)


# An origin's isolation verdict (tracer.comparison.judge names the replayed ones; the README's table):
# not_run, its replay is pending on the machine that has a side's model; not_replayed, TensorFlow
# could not run the replay (the detail gives its reason).
ISOLATION_VERDICTS: tuple[str, ...] = ("own_error", "weights_differ", "inherited", "nondeterministic",
                                       "run_time_rewrite", "state", "not_reproduced", "not_run", "not_replayed")
# The isolation verdicts that say the difference is born at the op itself — its kernel computes
# differently, or the weights it holds differ — so its origin is ranked before the others.
BORN_HERE: frozenset[str] = frozenset({"own_error", "weights_differ"})
