"""The self-contained ``report.html``: jinja2 templates from ``templates/`` with CSS, JS and SVG inline.

Two paths carry model strings into the page, and both escape them: the server-rendered parts
(header, environment, rewrites…) go through jinja2 with autoescape on; everything interactive
is drawn by the page's script from the report itself, embedded as JSON in a
``<script type="application/json">`` block with ``<``, ``>``, ``&`` and U+2028/U+2029 written
as ``\\uXXXX`` (so no string can close the script element) and put on screen with
``textContent`` only. The page loads nothing: a Content-Security-Policy of ``default-src
'none'`` backs up the rule that it holds no URL.
"""

from __future__ import annotations

import importlib.resources
import json
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup, escape

from ..comparison.statuses import ISOLATION, STATUS_LABELS, STATUSES, isolation_clause, isolation_label, verdict_label
from ..optypes import loop_result
from .headline import headline_texts
from .dot import PROPAGATED_SHADES, STYLES, OpIndex, legend
from .detections_view import (change_text, detection_groups, detection_headline, image_header, image_rows,
                              index_by_index, observer_note)
from .numbers import cost_cell, fmt
from .plots import error_growth_svg, histogram_svg
from .summary import (
    diagnosis_rows,
    answers,
    environment_rows,
    first_divergences,
    headline_divergence,
    isolation_text,
    json_safe,
    no_answer,
    noise_lines,
    nonfinite_context,
    not_captured_text,
    nothing_diverged,
    observed_beside,
    outputs_not_compared,
    rewrite_detail,
    side_rows,
    unobserved_divergence,
)

__all__ = ["PageView", "build_html", "script_json", "templates_dir"]

TABLE_CAP = 300  # server-rendered lists; everything is still in the embedded JSON


@dataclass
class PageView:
    """One graph tab: which ops it draws (positions) and which to centre on first."""

    id: str
    title: str
    kind: str  # "ops" or "scopes"
    members: list[int] = field(default_factory=list)
    focus: list[int] = field(default_factory=list)


def templates_dir() -> Path:
    """``<repo>/templates`` beside the running ``tracer`` in a checkout (an editable install made in
    another checkout or worktree maps ``tracer.templates`` to that one's), else the installed package."""
    beside = Path(__file__).resolve().parents[2] / "templates"
    if (beside / "report.html.j2").is_file():
        return beside
    try:
        found = importlib.resources.files("tracer.templates")
        if found.joinpath("report.html.j2").is_file():
            return Path(str(found))
    except ModuleNotFoundError:
        pass  # neither: the page's error says the templates are missing
    return beside


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())), autoescape=True,
                             undefined=jinja2.ChainableUndefined, trim_blocks=True, lstrip_blocks=True)
    # Lenient on purpose: a field missing from an older report shows as "—", not a failed render.
    env.filters["fmt"] = lambda value, digits=3: fmt(None if isinstance(value, jinja2.Undefined) else value, digits)
    env.filters["inline_code"] = inline_code
    env.filters["breakable"] = breakable
    env.filters["verdict_label"] = verdict_label  # the registry's words (tracer.comparison.statuses)
    env.filters["isolation_label"] = isolation_label
    return env


def _asset(name: str) -> Markup:
    """A CSS/JS file inlined verbatim; it must not be able to end its own element early."""
    text = (templates_dir() / name).read_text(encoding="utf-8")
    if "</" in text.lower().replace("<\\/", ""):
        raise RuntimeError(f"templates/{name} contains '</', which would end its inline element")
    return Markup(text)


def script_json(value: Any) -> Markup:
    """JSON safe inside ``<script type="application/json">``: nothing in it can close the element."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    for raw, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                     ("\u2029", "\\u2029")):
        text = text.replace(raw, esc)
    return Markup(text)


def inline_code(sentence: Any) -> Markup:
    """A sentence whose `backticked` parts are code, escaped part by part (never trusted HTML). A
    code span in running text needs no ``<wbr>``: ``overflow-wrap: break-word`` moves it whole to
    the next line and breaks it only where it is longer than a line."""
    parts = str(sentence).split("`")
    if len(parts) % 2 == 0:  # unbalanced backticks: show the text as it is
        return Markup(escape(str(sentence)))
    return Markup("").join(Markup("<code>{}</code>").format(p) if k % 2 else escape(p) for k, p in enumerate(parts))


_SEPARATOR = re.compile(r"([/_])")


def breakable(name: Any) -> Markup:
    """A name escaped, with a line-break opportunity (``<wbr>``) after each ``/`` and ``_``: in a
    narrow column ``block1/bn/FusedBatchNormV3`` wraps as ``block1/bn/`` + ``FusedBatchNormV3``,
    where the page's CSS would otherwise have to break it anywhere, a character at a time. Text
    with spaces in it (a side's note, a sentence) is running text, as :func:`inline_code` says:
    kept verbatim, it breaks at its spaces."""
    text = str(escape("" if name is None else name))
    return Markup(text if any(c.isspace() for c in text) else _SEPARATOR.sub(r"\1<wbr>", text))


def _status_css() -> str:
    """Chip and swatch colours from the same table as the graph, so the two never disagree."""
    rules = []
    for status, s in STYLES.items():
        rules.append(f".st-{status}{{--fill:{s.fill};--border:{s.border};--ink:{s.font}}}")
    for k, (_bound, fill, ink) in enumerate(PROPAGATED_SHADES):
        rules.append(f".shade-{k}{{--fill:{fill};--ink:{ink}}}")
    return "\n".join(rules)


def _origin_card(title: str, origin: Any, index: OpIndex) -> dict[str, Any] | None:
    if not isinstance(origin, dict) or not origin.get("node"):
        return None
    name = str(origin["node"])
    idx = index.position.get(name)
    node = index.nodes[idx] if idx is not None else {}
    isolation = origin.get("isolation") or node.get("isolation")
    return {
        "title": title, "name": name, "idx": idx, "op": origin.get("op") or node.get("op"),
        "level": origin.get("level"), "rewrite": origin.get("rewrite") or node.get("rewrite"),
        "metrics": [("max abs", fmt(origin.get("max_abs"))), ("max rel", fmt(origin.get("max_rel"))),
                    ("rel to peak", fmt(_either(origin, node, "rel_to_peak"))), ("rel L2", fmt(_either(origin, node, "rel_l2")))]
                   + _index_figure(origin),
        "own": (isolation or {}).get("verdict"),
        "isolation": isolation_text(isolation, str(origin.get("op") or node.get("op") or "")),
        "command": (isolation or {}).get("command"),
        "histogram": Markup(histogram_svg(node.get("diff_histogram"))),
    }


def _index_figure(origin: dict[str, Any]) -> list[tuple[str, str]]:
    """An origin holding detection lists shows its figures between matched detections, then its
    index-by-index largest difference, labelled as such."""
    index = index_by_index(origin)
    return [("max abs index by index", fmt(index.get("max_abs")))] if index else []


def _first_positions(report: dict[str, Any], index: OpIndex) -> list[int]:
    """Where the first divergences (bitwise, beyond tolerance) sit in the report's ops: the ops
    table's first rows."""
    found = (index.position.get(str(origin.get("node"))) for _title, origin in first_divergences(report))
    return list(dict.fromkeys(i for i in found if i is not None))


def _loop_results(index: OpIndex) -> dict[int, str]:
    """Position -> how the op's result comes out of a while loop (:func:`tracer.optypes.loop_result`),
    for the ops that are a loop's result: the page's isolation panel names the loop it replayed."""
    found = {i: loop_result(str((index.nodes[i] or {}).get("op") or "")) for i in range(len(index.names))}
    return {i: words for i, words in found.items() if words}


def _either(origin: dict[str, Any], node: dict[str, Any], key: str) -> Any:
    return origin.get(key) if origin.get(key) is not None else node.get(key)


def _observer(effect: Any) -> list[dict[str, Any]]:
    sides = []
    for key in ("a", "b"):
        side = (effect or {}).get(key) if isinstance(effect, dict) else None
        if not isinstance(side, dict) or not side:
            sides.append({"key": key.upper(), "recorded": False})
            continue
        diffs = side.get("outputs_max_abs_diff")
        sides.append({"key": key.upper(), "recorded": True, "identical": side.get("outputs_identical"),
                      "diffs": list(diffs.items())[:TABLE_CAP] if isinstance(diffs, dict) else [],
                      "only_plain": _strings(side.get("only_in_plain")),
                      "only_instrumented": _strings(side.get("only_in_instrumented")),
                      "as_detections": observer_note(side)})
    return sides


def _strings(value: Any) -> list[str]:
    """A report's list of names as text; anything else in its place (a hand-edited report) as none."""
    return [str(x) for x in value] if isinstance(value, list) else []


def _rewrites(report: dict[str, Any]) -> tuple[list[dict[str, Any]], Counter[str]]:
    rewrites = [r for r in report.get("rewrites") or [] if isinstance(r, dict)]
    rows = [{"kind": str(r.get("kind")), "a": _strings(r.get("a_nodes")), "b": _strings(r.get("b_nodes")),
             "detail": rewrite_detail(r.get("detail") or {})}
            for r in rewrites[:TABLE_CAP]]
    return rows, Counter(str(r.get("kind")) for r in rewrites)


def build_html(report: dict[str, Any], index: OpIndex, views: list[PageView], svgs: dict[str, str],
               scopes: list[dict[str, Any]], depth: int, notices: list[str]) -> str:
    """The whole page as one string (CSS, JS, SVG and data inline)."""
    sides = report.get("sides") or {}
    tolerance = report.get("tolerance") or {}
    cards = [_origin_card(title, origin, index) for title, origin in first_divergences(report)]
    headline_origin = headline_divergence(report)
    env_rows = environment_rows((sides.get("a") or {}).get("environment"), (sides.get("b") or {}).get("environment"))
    rewrite_rows, rewrite_kinds = _rewrites(report)
    graph_diff = report.get("graph_diff") or {}
    outputs = report.get("outputs") or {}
    status_counts = Counter(index.status(i) for i in range(len(index.names)))
    flow = index.flow_order()  # the ops table's and the growth plot's one order
    page_data = {"views": [asdict(v) for v in views], "scopes": scopes, "depth": depth,
                 "labels": STATUS_LABELS, "order": list(STATUSES), "loop_results": _loop_results(index),
                 "flow_order": flow, "first": _first_positions(report, index),
                 # the isolation verdicts' words, from their one registry: "{replayed}" is filled in by the script
                 "isolation_words": {k: f"{v.label} — {v.meaning}" for k, v in ISOLATION.items()}}
    context = {
        "report": report,
        "verdict": str(report.get("verdict") or "unknown"),
        "tool": report.get("tool") or {},
        "tolerance": tolerance,
        "overrides": list((tolerance.get("overrides") or {}).items())[:20],
        "sides": [{"key": k.upper(), "label": (sides.get(k) or {}).get("label") or k.upper(),
                   "facts": [(key, (a, b)[j], differs) for key, a, b, differs in side_rows(sides)]}
                  for j, k in enumerate(("a", "b"))],
        "cards": [c for c in cards if c],
        "headline": _headline(report, len(index.names)),
        "nonfinite": nonfinite_context(report),
        "not_captured": not_captured_text(report),
        "answers": answers(report),
        "no_answer": {k: no_answer(k, answers(report)["source"]) for k in ("why", "prevent", "cost")},
        "answer_sections": [("why", "Why it happens")] if nothing_diverged(report) else [
            ("why", "Why it happens"), ("prevent", "How to prevent it"), ("cost", "What preventing it costs")],
        "diagnosis": _diagnosis(report),
        "outputs": [(k, o, observed_beside(o)) for k, o in outputs.items() if isinstance(o, dict)],
        "outputs_plain": any(isinstance(o, dict) and o.get("compared_as") == "plain" for o in outputs.values()),
        "outputs_beside": any(isinstance(o, dict) and observed_beside(o) for o in outputs.values()),
        "unobserved": unobserved_divergence(report),
        "detections": _detections(report),
        "noise_lines": noise_lines(report),
        "origins": [(o, index.position.get(str(o.get("node")))) for o in (report.get("origins") or [])[:TABLE_CAP]
                    if isinstance(o, dict)],
        "origin_count": len(report.get("origins") or []),
        "rewrites": rewrite_rows, "rewrite_count": sum(rewrite_kinds.values()),
        "rewrite_kinds": rewrite_kinds.most_common(),
        "env_rows": env_rows, "env_diff_count": sum(1 for r in env_rows if r.differs),
        "observer": _observer(report.get("observer_effect")),
        "graph_diff": graph_diff,
        "only_in_a": [str(x) for x in (graph_diff.get("only_in_a") or [])[:TABLE_CAP]],
        "only_in_b": [str(x) for x in (graph_diff.get("only_in_b") or [])[:TABLE_CAP]],
        "renamed": list((graph_diff.get("renamed") or {}).items())[:TABLE_CAP],
        "unpaired_b": [str(x) for x in (report.get("unpaired_b") or [])[:TABLE_CAP]]
        if isinstance(report.get("unpaired_b"), list) else [],
        "command": str(report.get("command") or ""),
        "notices": notices,
        "views": [{"id": v.id, "title": v.title, "svg": Markup(svgs[v.id])} for v in views],
        "tabs": [v for v in views if not v.id.startswith("scope")],
        "overview_note": "no scope overview: too few name scopes to group these ops"
        if views and not scopes and "full" not in {v.id for v in views} else "",
        "legend": legend(),
        "shade_labels": _shade_labels(),
        "status_counts": [(s, STATUS_LABELS[s], status_counts[s]) for s in STATUSES if status_counts[s]],
        "op_count": len(index.names),
        "growth_svg": Markup(error_growth_svg(report, index, flow)) if index.names else Markup(""),
        "css": _asset("report.css"), "status_css": Markup(_status_css()), "js": _asset("report.js"),
        "report_json": script_json(report), "page_json": script_json(json_safe(page_data)),
        "first_name": headline_origin.get("node") if headline_origin else None,
    }
    return _environment().get_template("report.html.j2").render(context)


def _diagnosis(report: dict[str, Any]) -> dict[str, Any] | None:
    """diagnose's section: a row per experiment that ran, its cost cell by the one rule
    (:func:`tracer.report.numbers.cost_cell`, as its answers and the terminal state it); the skipped
    ones only as a count and, by reason, their names: a row each, counted among "N experiments",
    once made 6 that ran read as 19."""
    diagnosis = report.get("diagnosis")
    if not isinstance(diagnosis, dict):
        return None
    experiments = [e for e in diagnosis.get("experiments") or [] if isinstance(e, dict)]
    rows = [row | {"cost": cost_cell(exp), "latency": _timed_latency(exp) or row["latency"]}
            for row, exp in zip(diagnosis_rows(report), experiments, strict=False) if not exp.get("skipped")]
    skipped: dict[str, list[str]] = {}
    for exp in experiments:
        if exp.get("skipped"):
            skipped.setdefault(str(exp["skipped"]), []).append(str(exp.get("name") or ""))
    return {"rows": rows, "skipped": list(skipped.items()), "skipped_count": sum(map(len, skipped.values()))}


def _timed_latency(experiment: dict[str, Any]) -> str | None:
    """The medians a stated cost rests on (the interleaved timing; the recipe's against the plain
    base side), as its sentence gives them; None where no cost was timed (the capture medians
    stand)."""
    timing = experiment.get("timing") or experiment.get("combined_timing") or {}
    if not isinstance(timing, dict) or "ratio" not in timing:
        return None
    return f"{fmt(timing.get('median_a_ms'))} → {fmt(timing.get('median_b_ms'))}"


def _detections(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The Detections section: per group its headline, a row per image, the changed detections."""
    return [{"headline": detection_headline(g), "header": image_header(), "rows": image_rows(g)[:TABLE_CAP],
             "changes": [change_text(c) for c in (g.get("changes") or []) if isinstance(c, dict)][:TABLE_CAP]}
            for g in detection_groups(report)]


def _headline(report: dict[str, Any], op_count: int) -> str:
    """One sentence that answers the page's question before any scrolling."""
    verdict = report.get("verdict")
    outputs = [o for o in (report.get("outputs") or {}).values() if isinstance(o, dict)]
    differ = sum(1 for o in outputs if o.get("identical") is False)
    where = headline_divergence(report)  # the op report.json, report.md and the terminal name first
    missing = len(outputs_not_compared(report))
    caveat = f" {missing} of {len(outputs)} outputs could not be compared (see Outputs)." if missing else ""
    told = " ".join(headline_texts(report))  # noise first, then the outputs, then inside (tracer.report.headline)
    if verdict == "identical":
        return f"{told} A and B compute bit-identical results for all {op_count} compared ops.{caveat}".lstrip()
    if told and verdict != "diverged":
        head = told
    elif verdict == "within_tolerance":
        head = f"{differ} of {len(outputs)} outputs differ, but only within tolerance."
    elif verdict == "within_noise":
        head = (f"{differ} of {len(outputs)} outputs differ, but by no more than each side differs from itself "
                "from run to run (see Outputs).")
    elif verdict == "diverged":
        beyond_count = sum(1 for o in outputs if o.get("within_tolerance") is False)
        head = f"{beyond_count} of {len(outputs)} outputs differ beyond tolerance." if outputs else "The results diverge."
        head = told or head
    elif verdict:
        head = f"Verdict: {verdict}."
    else:
        head = "This report holds no verdict (an incomplete report.json?)."
    if isinstance(where, dict) and where.get("node") and verdict in ("diverged", "within_tolerance", "within_noise"):
        loop = loop_result(str(where.get("op") or ""))  # replayed whole: the loop's own error, not one kernel's
        own = isolation_clause((where.get("isolation") or {}).get("verdict"), loop)
        if own and (where.get("isolation") or {}).get("loop"):
            own += ", replayed with the while loop above it"
        head += f" The difference starts at `{where['node']}` ({where.get('op')})" + (f", {own}." if own else ".")
    return head + caveat


def _shade_labels() -> list[dict[str, str]]:
    """The propagated shades with the error band each stands for, for the legend."""
    out, lower = [], None
    for bound, fill, ink in PROPAGATED_SHADES:
        label = (f"< 1e{bound:g}" if lower is None else
                 f"≥ 1e{lower:g}" if bound == float("inf") else f"1e{lower:g}–1e{bound:g}")
        out.append({"fill": fill, "ink": ink, "label": label})
        lower = bound
    return out
