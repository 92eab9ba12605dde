"""What a ``report.json`` says, as numbers and short texts shared by the HTML and Markdown pages.

A report is read back from JSON, possibly written by an older or newer tftrace, so every
reader here tolerates a missing field and the strings ``"inf"``, ``"-inf"``, ``"nan"`` that
stand for non-finite floats: a report that is partly empty must still render, because the
page is what the user opens to find out what went wrong.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from ..artifacts.records import USER_SIGNATURE, kind_label
from ..causes import why_shown
from ..comparison.statuses import ISOLATION, STATUS_LABELS, STATUSES, isolation_clause, origin_isolation_words
from ..jsonvalues import jsonable
from ..text import count
from .numbers import fmt, num

__all__ = [
    "mismatch_note",
    "STATUSES",
    "STATUS_LABELS",
    "severity",
    "short_name",
    "scope_of",
    "flatten",
    "EnvRow",
    "environment_rows",
    "tensorflow_builds",
    "side_text",
    "side_facts",
    "outputs_not_compared",
    "observed_beside",
    "unobserved_divergence",
    "not_captured_groups",
    "not_captured_text",
    "nonfinite_context",
    "isolation_text",
    "noise_lines",
    "first_divergences",
    "headline_divergence",
    "relative_text",
    "side_rows",
    "nothing_diverged",
    "rewrite_detail",
    "answers",
    "no_answer",
    "json_safe",
]


def severity(status: str | None) -> int:
    """Higher is worse; unknown statuses rank just above ``identical`` so they stay visible."""
    if status in STATUSES:
        return len(STATUSES) - STATUSES.index(status)
    return 1


def mismatch_note(origin: dict[str, Any]) -> str:
    """``", 700 elements differ"`` for an integer or bool tensor (an index, a count, a class):
    how many moved says as much as by how much; empty for floats and for none."""
    n = origin.get("mismatch_count")
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        return ""
    if not str(origin.get("dtype") or "").startswith(("int", "uint", "bool")):
        return ""
    return f", {n:,} element{'s differ' if n != 1 else ' differs'}"


def short_name(name: str) -> str:
    """The last path component of an op name (``block2/bn/FusedBatchNormV3`` -> ``FusedBatchNormV3``)."""
    tail = name.rstrip("/").rsplit("/", 1)[-1]
    return tail or name


def scope_of(name: str, node: dict[str, Any]) -> str:
    """The node's name scope: the report's ``scope`` field, else everything before the last ``/``."""
    scope = node.get("scope")
    if isinstance(scope, str):
        return scope.strip("/")
    return name.rsplit("/", 1)[0] if "/" in name else ""


def _scalar_text(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) or (isinstance(value, str) and num(value) is not None):
        return fmt(value, 6)
    if isinstance(value, (list, tuple)):
        return ", ".join(_scalar_text(v) for v in value) if value else "(none)"
    return str(value)


def side_text(value: Any) -> str:
    """One side's value of a changed weight: a number, a few in brackets, or a dtype's name."""
    return f"[{_scalar_text(value)}]" if isinstance(value, list) else _scalar_text(value)


def flatten(value: Any, prefix: str = "") -> dict[str, str]:
    """Nested dicts to dotted keys with printable values, so two environments line up row by row."""
    out: dict[str, str] = {}
    if isinstance(value, dict):
        if not value and prefix:
            out[prefix] = "(none)"
        for key, inner in value.items():
            out.update(flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
    else:
        out[prefix or "value"] = _scalar_text(value)
    return out


@dataclass(frozen=True)
class EnvRow:
    key: str
    a: str
    b: str

    @property
    def volatile(self) -> bool:
        """Keys that differ between any two captures (clock, process id): never a cause."""
        return self.key.rsplit(".", 1)[-1] in VOLATILE_ENV_KEYS

    @property
    def differs(self) -> bool:
        return self.a != self.b and not self.volatile


VOLATILE_ENV_KEYS = frozenset({"time_utc", "pid", "created_utc"})


def environment_rows(env_a: Any, env_b: Any) -> list[EnvRow]:
    """Both sides' environment fingerprints flattened and aligned by key (A's order first)."""
    flat_a, flat_b = flatten(env_a or {}), flatten(env_b or {})
    keys = list(dict.fromkeys([*flat_a, *flat_b]))
    return [EnvRow(k, flat_a.get(k, "—"), flat_b.get(k, "—")) for k in keys]


BUILD_KEYS = ("tensorflow", "tf_git_version", "build")  # what tells one TensorFlow build from another


def tensorflow_builds(sides: dict[str, Any]) -> dict[str, str]:
    """Each side's TensorFlow (``{"a": "TensorFlow 2.21.0 (v2.21.0-…)", "b": …}``) when the two
    sides ran different builds (another release: ``--python``), else nothing: the summary says
    them beside the sides, as the environment table does row by row."""
    envs = [((sides.get(k) or {}).get("environment") or {}) for k in ("a", "b")]
    if all(envs[0].get(key) == envs[1].get(key) for key in BUILD_KEYS):
        return {}
    return {k: f"TensorFlow {env.get('tensorflow', '?')}" + (f" ({env['tf_git_version']})" if env.get("tf_git_version")
                                                             else "")
            for k, env in zip(("a", "b"), envs)}


def side_facts(side: dict[str, Any]) -> list[tuple[str, str]]:
    """The rows that identify a side: what was run, where, at which batch size, with which knobs."""
    artifact = side.get("artifact") or {}
    knobs = side.get("knobs") or {}
    timings = side.get("timings") or {}
    timed = timings.get("plain_latency_ms") or {}
    latency = timed.get("median")
    examples = side.get("examples") or {}
    rows = [
        ("artifact", str(artifact.get("path") or artifact.get("location") or "—")),
        ("kind", kind_label(artifact.get("kind"))),
        ("device", str(side.get("device") or "—")),
        ("batch size", _scalar_text(side.get("batch_size"))),
        ("knobs", ", ".join(f"{k}={_scalar_text(v)}" for k, v in flatten(knobs).items()) if knobs else "defaults"),
    ]
    signature = side.get("signature") if isinstance(side.get("signature"), dict) else {}
    if signature.get("key"):
        lent = f" (borrowed from {signature['borrowed_from']}: this side has none)" if signature.get("borrowed_from") else ""
        named = signature["key"] == USER_SIGNATURE
        rows.append(("signature", ("tensors named by --outputs/--input-names" if named else signature["key"]) + lent))
    if examples:
        rows.append(("examples", f"{_scalar_text(examples.get('count'))} from {_scalar_text(examples.get('source'))}"))
    if latency is not None:
        runs = timed.get("runs")
        basis = f"median of {runs} timed runs" if isinstance(runs, int) and runs > 1 else "one timed run"
        rows.append(("plain latency", f"{fmt(latency)} ms ({basis}; tftrace diagnose measures costs)"))
    notes = side.get("notes")
    if notes:
        rows.append(("notes", "; ".join(str(n) for n in notes) if isinstance(notes, list) else str(notes)))
    return rows


def outputs_not_compared(report: dict[str, Any]) -> dict[str, str]:
    """Output key -> why it has no metrics, for every output that could not be compared."""
    return {str(key): str(o.get("not_compared") or "not compared")
            for key, o in (report.get("outputs") or {}).items() if isinstance(o, dict) and o.get("identical") is None}


def noise_lines(report: dict[str, Any]) -> list[str]:
    """Each output that differs or moves by itself, its magnitude next to the run-to-run noise the
    repeats measured: a difference explained by noise is still a difference, never "identical, 0".
    Over every pair of runs where they were judged so (the output's ``noise``)."""
    noise = report.get("noise") if isinstance(report.get("noise"), dict) else None
    if not noise:
        return []
    runs = noise.get("repeats")
    lines = []
    for key, o in (report.get("outputs") or {}).items():
        if not isinstance(o, dict) or o.get("noise_max_abs") is None:
            continue
        diff, floor, over = o.get("max_abs"), o.get("noise_max_abs"), o.get("noise")
        if not isinstance(diff, (int, float)) or not isinstance(floor, (int, float)):
            continue
        if o.get("identical") is not False and not floor and not (isinstance(over, dict) and over.get("cross_max_abs")):
            continue
        if isinstance(over, dict) and over.get("pairs"):
            spread = over.get("spread") or {}
            sides = ", ".join(f"{k.upper()} {fmt(v)}" for k, v in spread.items())
            where = "within" if o.get("verdict") != "diverged" else "beyond"
            lines.append(f"{key}: A vs B up to {fmt(over.get('cross_max_abs'))} over {over.get('pairs')} pairs of runs "
                         f"(closest {fmt(over.get('cross_closest'))}), {where} the run-to-run noise of {fmt(floor)} "
                         f"({sides} between runs of one side)")
            continue
        where = "within" if diff <= floor else "beyond"
        lines.append(f"{key} differs by {fmt(diff)}, {where} the run-to-run noise of {fmt(floor)} "
                     f"over {runs} runs of each side")
    return lines


def observed_beside(output: dict[str, Any]) -> str | None:
    """What the captured (instrumented) outputs said, where it differs from the plain runs'
    comparison the output row shows; None where they agree or only one was compared."""
    observed = output.get("instrumented")
    if output.get("compared_as") != "plain" or not isinstance(observed, dict):
        return None
    keys = ("identical", "within_tolerance", "max_abs", "max_rel")
    if all(observed.get(k) == output.get(k) for k in keys):
        return None
    if observed.get("identical"):
        return "identical when observed"
    verdict = "within tolerance" if observed.get("within_tolerance") else "beyond tolerance"
    return f"observed: max abs {fmt(observed.get('max_abs'))}, max rel {fmt(observed.get('max_rel'))} ({verdict})"


def unobserved_divergence(report: dict[str, Any]) -> str | None:
    """The sentence for a report whose plain outputs are worse than anything seen op by op: the
    difference exists only when nobody watches (fetching every tensor changes what runs)."""
    order = ("identical", "within_tolerance", "within_noise", "diverged")
    ops, outs = report.get("verdict_ops"), report.get("verdict_outputs")
    if ops not in order or outs not in order or order.index(outs) <= order.index(ops):
        return None
    what = "differ beyond tolerance" if outs == "diverged" else "differ (within tolerance)"
    if ops == "within_noise":  # the noise inside hides where it starts, whatever fetching changes
        return (f"the plain runs' outputs {what} while every captured tensor differs no more than the sides "
                "differ from themselves between runs: the run-to-run noise inside the model hides where the "
                "difference starts (and observing every tensor changes what runs: see the observer effect)")
    return (f"the plain runs' outputs {what} while every captured tensor is "
            f"{ops.replace('_', ' ')}: observing every tensor changes what runs (a fetched op is not fused "
            "or converted), so the first divergence cannot be seen in the captures (see the observer effect)")


# Why ops were not captured, grouped: (label, phrases of the reasons the capture writes). The
# reasons come from tracer.opgraph (dtypes), tracer.captures.fetch_plan (loops, dead branches,
# unread outputs), the worker (TensorFlow's refusals) and the store (rows); first match wins.
UNCAPTURED_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("in cond branches that did not run", ("cond branch that did not run", "does not have value")),
    ("inside while-loop bodies", ("while-loop frame",)),
    ("resource handles or variants (no values)", ("resource handle", "variant tensor")),
    ("outputs nothing in the model reads", ("output nothing in the model reads",)),
    ("refused by TensorFlow", ("TensorFlow cannot fetch", "TensorFlow refused")),
    ("batch layout differed between runs", ("not the example axis", "rows were written")),
)
NO_OUTPUT_KIND = "ops without output tensors (NoOp)"
OTHER_KIND = "other reasons"


def not_captured_groups(report: dict[str, Any]) -> list[tuple[str, int]]:
    """``(why, how many ops)`` for the report's ``not_captured`` ops, most first.

    An op's reason lists its tensors' reasons on both sides (``A: …; B: …``); it is counted
    once, under the first kind of :data:`UNCAPTURED_KINDS` its reason names.
    """
    counts: Counter[str] = Counter()
    for node in (report.get("nodes") or {}).values():
        if not isinstance(node, dict) or node.get("status") != "not_captured":
            continue
        reason = str(node.get("reason") or "")
        kind = next((label for label, phrases in UNCAPTURED_KINDS if any(p in reason for p in phrases)), None)
        counts[kind or (OTHER_KIND if reason else NO_OUTPUT_KIND)] += 1
    return counts.most_common()


def not_captured_text(report: dict[str, Any]) -> str:
    """One line: ``"519 ops not captured: 424 inside while-loop bodies, 70 …"``; empty when none."""
    groups = not_captured_groups(report)
    total = sum(n for _, n in groups)
    if not total:
        return ""
    return f"{count(total, 'op')} not captured: " + ", ".join(f"{n:,} {label}" for label, n in groups)


def nonfinite_context(report: dict[str, Any]) -> list[str]:
    """Where NaN/Inf is first computed from finite inputs, per side, as context (not a finding).

    ``first_nonfinite`` never names a constant (a ``-inf`` sentinel is data); when both sides
    name the same op it is one line. Reports from older tftrace versions named the first op
    holding NaN/Inf at all, often such a constant: without ``from_finite_inputs`` it is skipped.
    """
    found = {k: v for k, v in (report.get("first_nonfinite") or {}).items()
             if isinstance(v, dict) and v.get("node") and v.get("from_finite_inputs") is True}
    if not found:
        return []

    def words(nf: dict[str, Any]) -> str:
        counts = [f"{fmt(nf.get(k))} {label}" for k, label in (("nan", "NaN"), ("inf", "Inf")) if num(nf.get(k))]
        return f"{nf.get('node')} ({nf.get('op')}, {' and '.join(counts) or 'NaN/Inf'})"
    nodes = {(v.get("node"), v.get("op")) for v in found.values()}
    agree = "; the sides agree there" if report.get("verdict") == "identical" else ""
    if len(found) == 2 and len(nodes) == 1:
        return [f"NaN/Inf first computed from finite inputs on both sides at {words(found['a'])}{agree}"]
    return [f"NaN/Inf first computed from finite inputs on {k.upper()} at {words(v)}{agree}" for k, v in found.items()]


def changed_weights(report: dict[str, Any]) -> list[str]:
    """The weights (variables, constants) whose values differ between the sides: the A node of
    each ``const_changed`` rewrite, in the report's order. One change to the model's weights shows
    as one rewrite per weight, so a summary counts them together."""
    return [str(r["a_nodes"][0]) for r in report.get("rewrites") or []
            if isinstance(r, dict) and r.get("kind") == "const_changed" and r.get("a_nodes")]


def moving_average_text(average: dict[str, Any]) -> str:
    """A const_changed's ``moving_average`` detail in words: which side's checkpoint holds an
    average of the variable, and whether the other side's value is it."""
    own = str(average.get("checkpoint", "a")).upper()
    other = "B" if own == "A" else "A"
    held = {True: f"{other} holds exactly {own}'s checkpoint's `{average.get('key')}`",
            False: f"{own}'s checkpoint also holds `{average.get('key')}`, but {other}'s value is not it"}
    return held.get(average.get("matches"), f"{own}'s checkpoint also holds `{average.get('key')}` "
                                            f"({other}'s value could not be compared with it)")


def isolation_text(isolation: dict[str, Any] | None, op_type: str = "") -> str:
    """Own error vs inherited, in words: the fact a reader needs to know where to look.

    ``op_type`` is the origin's: the replay of a loop's result (an Exit, a TensorArray reader)
    ran the whole loop, so the words name the loop rather than "the op alone"."""
    if not isolation:
        return "isolation not recorded"
    verdict = isolation.get("verdict")
    head = origin_isolation_words(isolation, str(op_type), sep=": ")
    if verdict == "own_error":
        head += f" (max abs {fmt(isolation.get('max_abs'))}, {relative_text(isolation)})"
    detail = str(isolation.get("detail") or "").strip()
    head = head[:1].upper() + head[1:]
    return f"{head}. {detail[:1].upper()}{detail[1:]}" if detail else head


def headline_divergence(report: dict[str, Any]) -> dict[str, Any] | None:
    """The op a report's title, headline and "why" name: report.json's ``first_divergence``
    (the first origin, bitwise), the same op the terminal's "(bitwise)" line names."""
    for key in ("first_divergence", "first_divergence_beyond_tolerance"):
        origin = report.get(key)
        if isinstance(origin, dict) and origin.get("node"):
            return origin
    return None


def first_divergences(report: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(title, origin)`` for the first divergence, bitwise and beyond tolerance (one entry
    when they are the same op), as every output format lists them."""
    first, beyond = report.get("first_divergence"), report.get("first_divergence_beyond_tolerance")
    first = first if isinstance(first, dict) and first.get("node") else None
    beyond = beyond if isinstance(beyond, dict) and beyond.get("node") else None
    if first and beyond and first["node"] == beyond["node"]:
        return [("First divergence, bitwise and beyond tolerance", first)]
    return [(title, o) for title, o in (("First divergence (bitwise)", first),
                                        ("First divergence beyond tolerance", beyond)) if o]


def relative_text(values: dict[str, Any]) -> str:
    """``max rel R (rel to peak P, rel L2 L)``: max rel is |a-b|/max(|a|,|b|) at its worst
    element, which near-zero elements drive up; the peak-relative figure (max |a-b| / max |a|)
    and the relative L2 norm of the difference are what a reader can judge a tensor by."""
    extra = [f"{label} {fmt(values.get(key))}" for key, label in (("rel_to_peak", "rel to peak"), ("rel_l2", "rel L2"))
             if num(values.get(key)) is not None]
    return f"max rel {fmt(values.get('max_rel'))}" + (f" ({', '.join(extra)})" if extra else "")


def side_rows(sides: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    """``(key, A, B, differs)`` for the sides table. The examples differ only when their values
    do (compared by digest when both sides recorded one): the same values read from two
    differently named files are the same examples."""
    side_a, side_b = (sides.get(k) if isinstance(sides.get(k), dict) else {} for k in ("a", "b"))
    facts_a, facts_b = dict(side_facts(side_a)), dict(side_facts(side_b))
    digests = [(s.get("examples") or {}).get("digest") if isinstance(s.get("examples"), dict) else None
               for s in (side_a, side_b)]
    rows = []
    for key in dict.fromkeys([*facts_a, *facts_b]):
        a, b = facts_a.get(key, "—"), facts_b.get(key, "—")
        differs = a != b
        if key == "examples" and all(digests):
            differs = digests[0] != digests[1]
            same = "same values" if not differs else "different values"
            a, b = (f"{a} ({same}, values digest {str(digests[0])[:12]})",
                    f"{b} ({same}, values digest {str(digests[1])[:12]})")
        rows.append((key, a, b, differs))
    return rows


def nothing_diverged(report: dict[str, Any]) -> bool:
    """No cause to explain: a comparison whose verdict is identical, or a diagnosis in which no
    experiment diverged. Such a report has no "how to prevent it" or "what it costs"."""
    given = report.get("answers") if isinstance(report.get("answers"), dict) else {}
    if given.get("source") == "diagnosis":
        return not given.get("factors") and not given.get("prevent")
    return report.get("verdict") == "identical"


def rewrite_detail(detail: Any) -> str:
    """A rewrite's detail on one line; changed attributes as ``name: a → b`` like the terminal's."""
    if not isinstance(detail, dict):
        return _scalar_text(detail)
    parts = []
    for key, value in detail.items():
        if value is None or value == [] or value == {}:
            continue
        if key == "attrs" and isinstance(value, dict) and all(isinstance(v, dict) for v in value.values()):
            parts += [f"{name}: {_scalar_text(v.get('a'))} → {_scalar_text(v.get('b'))}" for name, v in value.items()]
        elif isinstance(value, dict) and set(value) == {"a", "b"}:  # a const_changed's dtype and values
            parts.append(f"{key}: {side_text(value['a'])} → {side_text(value['b'])}")
        else:
            parts += [f"{k}: {v}" for k, v in flatten(value, str(key)).items()]
    return "; ".join(parts)


def answers(report: dict[str, Any]) -> dict[str, Any]:
    """The three answers: the report's own when present, else a "why" built from the origins."""
    given = report.get("answers")
    if isinstance(given, dict) and any(given.get(k) for k in ("why", "prevent", "cost")):
        said = {k: [str(s) for s in given.get(k) or []] for k in ("why", "prevent", "cost")}
        return said | {"why": why_shown(report, said["why"]), "source": str(given.get("source") or "compare")}
    origins = report.get("origins") or []
    verdict = report.get("verdict")
    if verdict == "identical" or not origins:
        why = ["The two sides compute bit-identical results for every compared op."] if verdict == "identical" else []
        return {"why": why, "prevent": [], "cost": [], "source": "report"}
    counts = Counter(str(o.get("op") or "?") for o in origins)
    types = ", ".join(f"{n} {op}" for op, n in counts.most_common())
    first = headline_divergence(report) or origins[0]
    why = [f"The difference starts at {count(len(origins), 'op')}: {types}.",
           f"The first is `{first.get('node')}` ({first.get('op')}), {relative_text(first)}."]
    if first.get("rewrite"):
        why.append(f"It sits in an export rewrite ({first['rewrite']}).")
    if first.get("isolation"):
        why.append(isolation_text(first["isolation"], str(first.get("op") or "")).rstrip(".") + ".")
    return {"why": why, "prevent": [], "cost": [], "source": "report"}


def no_answer(key: str, source: str) -> str:
    """What an empty answer says. A report written by ``diagnose`` never tells the user to run
    diagnose: it ran, and measured nothing to prevent or pay for."""
    if key == "why":
        return "Nothing to explain."
    if source == "diagnosis":
        return ("Nothing to prevent: no tested factor changes the outputs beyond the tolerance." if key == "prevent"
                else "Nothing to pay: no remedy is needed.")
    return "Run `tftrace diagnose` to measure it on this model."


def json_safe(value: Any) -> Any:
    """Non-finite floats to the report's strings, so the page's JSON is strict JSON for ``JSON.parse``
    (the one encoding of :mod:`tracer.jsonvalues`)."""
    return jsonable(value, numpy=False)


def diagnosis_rows(report: dict[str, Any]) -> list[dict[str, str]]:
    """One row per experiment of a diagnosis (empty for a plain comparison report)."""
    diagnosis = report.get("diagnosis")
    if not isinstance(diagnosis, dict):
        return []
    rows = []
    for exp in diagnosis.get("experiments") or []:
        if not isinstance(exp, dict):
            continue
        first = exp.get("first_divergence") if isinstance(exp.get("first_divergence"), dict) else {}
        latency = exp.get("latency_ms") if isinstance(exp.get("latency_ms"), dict) else {}
        iso = first.get("isolation") if isinstance(first.get("isolation"), dict) else {}
        own = ISOLATION[iso["verdict"]].label if iso.get("verdict") in ISOLATION else ""
        where = f"{first.get('node')} ({first.get('op')})" if first.get("node") else ""
        rows.append({
            "name": str(exp.get("name") or ""),
            "factor": str(exp.get("factor") or ""),
            "verdict": "skipped" if exp.get("skipped") else str(exp.get("verdict") or ""),
            "diff": fmt(exp.get("max_abs_output_diff")),
            "first": f"{where}{', ' + own if own and where else ''}",
            "latency": f"{fmt(_latency(latency.get('a')))} → {fmt(_latency(latency.get('b')))}" if latency else "",
            "cost": "" if exp.get("cost_pct") is None else f"{fmt(exp.get('cost_pct'))} %",
            "skipped": str(exp.get("skipped") or ""),
            "shown": "yes" if exp.get("name") == diagnosis.get("shown") else "",
        })
    return rows


def _latency(value: Any) -> Any:
    return value.get("median") if isinstance(value, dict) else value
