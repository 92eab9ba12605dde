"""Issue 26: an isolation verdict is worded once, in its registry, and every renderer reads it there.

A renderer that keeps a table of its own (a dict keyed by the verdicts) falls out of step with the
registry the day a verdict is added or reworded; this fails when one does.
"""

from __future__ import annotations

import re
from pathlib import Path

from tracer.comparison.statuses import (BORN_HERE, ISOLATION, ISOLATION_VERDICTS, LOAD_STATE_WORDS, isolation_clause,
                                        isolation_words, origin_isolation_words)

REPO = Path(__file__).resolve().parent.parent
RENDERERS = [*sorted((REPO / "tracer" / "report").glob("*.py")), *sorted((REPO / "tracer" / "diagnosis").glob("*.py")),
             REPO / "tracer" / "causes.py", REPO / "templates" / "report.js"]


def test_every_isolation_verdict_is_one_complete_record() -> None:
    assert tuple(ISOLATION) == ISOLATION_VERDICTS and len(ISOLATION) == 10
    for key, record in ISOLATION.items():
        assert record.key == key and record.label and record.meaning and record.clause, key
        assert record.meaning.format(replayed="the op alone")  # only {replayed} stands in it
    assert len({r.label for r in ISOLATION.values()}) == len(ISOLATION)  # a reader tells them apart
    assert BORN_HERE == {"own_error", "batch_statistics", "weights_differ"}


def test_the_words_fill_in_what_was_replayed() -> None:
    assert isolation_words("own_error") == "own error — fed identical inputs, the op alone still differs"
    assert isolation_words("inherited", loop="while_3") == (
        "inherited — fed identical inputs, the while loop while_3 (replayed whole) agrees; the difference comes "
        "from upstream")
    assert isolation_words("own_error", loop_above=True, sep=": ") == (
        "own error: fed identical inputs, the op with the while loop above it still differs")
    assert isolation_words("a_newer_verdict") == "isolation: a_newer_verdict"
    assert isolation_clause("own_error", loop="while_3") == "where the while loop while_3 differs given identical inputs"
    assert isolation_clause("a_newer_verdict") == ""


def test_an_origins_words_come_from_its_record_with_what_the_report_knows_of_it() -> None:
    """The variants a first-divergence line needs (an op B computes rewritten, a weight among
    several, a value set at load) live in the registry too, not in the terminal."""
    own = {"verdict": "own_error"}
    assert origin_isolation_words(own, "MatMul") == "own error: fed identical inputs, the op alone still differs"
    assert origin_isolation_words(own, "MatMul", rewrite="cast_inserted") == (
        "given identical inputs it differs as rewritten in B (cast_inserted)")
    # a loop's result replays the loop: a rewrite inside it is not what differs alone
    assert origin_isolation_words(own, "Exit", rewrite="cast_inserted") == (
        "own error: fed identical inputs, the while loop ending here (replayed whole) still differs")
    assert origin_isolation_words({"verdict": "own_error", "loop": "while"}, "Conv2D") == (
        "own error: fed identical inputs, the op with the while loop above it still differs")
    weights = {"verdict": "weights_differ"}
    assert origin_isolation_words(weights, "VariableV2", weights_differing=4) == (
        "its weights differ (A and B hold different values for it, as 4 weights do; no kernel is involved)")
    assert origin_isolation_words(weights, "VariableV2", weights_differing=1) == (
        "its weights differ (A and B hold different values for it; no kernel is involved)")
    assert origin_isolation_words({"verdict": "nondeterministic", "load_state": True}, "ReadVariableOp") == LOAD_STATE_WORDS
    assert origin_isolation_words(None, "MatMul") == origin_isolation_words({}, "MatMul") == "not isolated"
    for key, record in ISOLATION.items():  # a variant only where its record says more
        assert bool(record.rewritten) == (key == "own_error") and bool(record.counted) == (key == "weights_differ")


def test_no_renderer_keeps_a_table_of_isolation_verdicts_of_its_own() -> None:
    """Three or more verdicts as keys of one literal is a table: only the registry may hold one."""
    keys = "|".join(k for k in ISOLATION_VERDICTS if k != "state")  # "state" is a common word
    key = re.compile(rf"""(?:^\s*|[{{,]\s*)["']?\b({keys})\b["']?\s*:""", re.M)  # a key, not `if x == "k":`
    tables = {}
    for path in RENDERERS:
        text = path.read_text(encoding="utf-8")
        for block in re.split(r"\n\s*\n", text):
            found = set(key.findall(block))
            if len(found) >= 3:
                tables[path.relative_to(REPO).as_posix()] = sorted(found)
    assert tables == {}


def test_every_op_status_and_overall_verdict_is_one_complete_record() -> None:
    from tracer.comparison.statuses import STATUS, STATUS_LABELS, STATUSES, VERDICT, VERDICTS, verdict_exit_code
    from tracer.errors import EXIT_DIVERGED, EXIT_OK

    for key, status in STATUS.items():
        assert status.key == key and status.label and status.meaning, key
    assert STATUS_LABELS == {k: v.label for k, v in STATUS.items()} and tuple(STATUS) == STATUSES
    for key, verdict in VERDICT.items():
        assert verdict.key == key and verdict.label and verdict.meaning, key
    assert tuple(VERDICT) == VERDICTS == ("identical", "within_tolerance", "within_noise", "diverged")
    assert {k: v.exit_code for k, v in VERDICT.items()} == {
        "identical": EXIT_OK, "within_tolerance": EXIT_OK, "within_noise": EXIT_OK, "diverged": EXIT_DIVERGED}
    assert verdict_exit_code("a_newer_verdict") == EXIT_DIVERGED  # what it does not know claims no pass


def test_a_renderers_style_tables_cover_the_registry_exactly() -> None:
    """Colours are the renderer's own, but keyed by the registry's words: a new verdict or status
    fails here rather than falling back to plain text or grey on the page."""
    from tracer.comparison.statuses import STATUSES, VERDICTS
    from tracer.report.dot import STYLES
    from tracer.diagnosis.cli import VERDICT_COLOURS
    from tracer.report.terminal import VERDICT_STYLE

    assert set(VERDICT_STYLE) == set(VERDICTS) == set(VERDICT_COLOURS)
    assert set(STATUSES) <= set(STYLES)


def test_verdicts_are_labelled_from_their_records_in_every_renderer() -> None:
    """The verdict's words come from its record: no renderer spells a verdict key out itself."""
    from tracer.comparison.statuses import verdict_label

    assert verdict_label("within_noise") == "within noise" and verdict_label("a_newer_one") == "a newer one"
    for path in RENDERERS:
        text = path.read_text(encoding="utf-8")
        assert 'verdict.replace("_", " ")' not in text and "verdict.replace('_', ' ')" not in text, path


def test_the_cause_a_verdict_points_at_is_read_from_its_record() -> None:
    """causes.py keeps no if-chain of verdicts: a verdict's cause and evidence are its record's, so a
    verdict added to the registry is explained without touching causes.py."""
    from dataclasses import replace

    from tracer.causes import CAUSES, explain_comparison

    for key, record in ISOLATION.items():
        assert record.cause == "" or record.cause in CAUSES, key
        assert record.evidence.format(first="`x` (Op)") == record.evidence.replace("{first}", "`x` (Op)"), key
    assert {k: r.cause for k, r in ISOLATION.items() if r.cause} == {
        "batch_statistics": "training_graph", "weights_differ": "weights", "nondeterministic": "nondeterminism",
        "run_time_rewrite": "grappler", "state": "state", "not_reproduced": "nondeterminism"}

    def report(verdict: str) -> dict:
        side = {"device": "cpu", "batch_size": 8, "knobs": {}, "environment": {}}
        first = {"node": "conv", "op": "Conv2D", "isolation": {"verdict": verdict}}
        return {"verdict": "diverged", "sides": {"a": side, "b": dict(side)}, "first_divergence": first,
                "origins": [first], "outputs": {}, "rewrites": [], "nodes": {}}

    said = explain_comparison(report("nondeterministic"))
    assert said["causes"] == ["nondeterminism"]
    assert "`conv` (Conv2D) changes from run to run on identical inputs." in said["why"][0]
    newer = replace(ISOLATION["inherited"], key="jittered", clause="whose timer jitters", cause="nondeterminism")
    ISOLATION["jittered"] = newer
    try:
        said = explain_comparison(report("jittered"))
    finally:
        del ISOLATION["jittered"]
    assert said["causes"] == ["nondeterminism"] and "`conv` (Conv2D), whose timer jitters." in said["why"][0]
    assert explain_comparison(report("inherited"))["causes"] == []  # points at nothing by itself
