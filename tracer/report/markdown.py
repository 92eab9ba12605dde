"""``report.md``: the summary a user pastes into an issue tracker.

It must fit an issue body whatever the model size (GitHub refuses bodies over 65,536
characters), so every table is cut with "… N more", and if the whole still comes out too long
the limits are halved until it fits. Model strings are escaped for Markdown *and* HTML (issue
trackers render both): table pipes, emphasis characters, backticks and angle brackets never
reach the renderer raw. Names that are harmless are shown as code.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ..comparison.statuses import isolation_label, verdict_label
from ..text import printable
from .detections_view import (change_text, detection_groups, detection_headline, image_header, image_rows, list_note,
                              observer_note)
from .numbers import fmt
from .headline import headline_texts, reproduce_command, reproduce_facts
from .summary import (
    answers,
    diagnosis_rows,
    environment_rows,
    first_divergences,
    headline_divergence,
    isolation_text,
    mismatch_note,
    no_answer,
    noise_lines,
    nonfinite_context,
    not_captured_text,
    nothing_diverged,
    num,
    observed_beside,
    relative_text,
    rewrite_detail,
    side_rows,
    unobserved_divergence,
)

__all__ = ["render_markdown", "md_text", "md_code", "MD_LIMIT"]

MD_LIMIT = 60_000  # GitHub's issue-body limit is 65,536; leave room for the user's own words
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")  # the rest only matter at a line start, where model text never is
_CODE_SAFE = re.compile(r"^[^`|<>&\r\n\\]*$")


def md_text(value: Any, limit: int = 160) -> str:
    """Model text as inert Markdown: one line, bounded, HTML and Markdown syntax escaped."""
    text = " ⏎ ".join(printable(value).splitlines()) if value is not None else "—"
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", text)


def md_code(value: Any, limit: int = 120) -> str:
    """A name as inline code when nothing in it can break out of the code span, else as text."""
    text = printable(value) if value is not None else "—"
    if text and len(text) <= limit and _CODE_SAFE.match(text):
        return f"`{text}`"
    return md_text(text, limit)


def _with_code(line: str, limit: int = 600) -> str:
    """A headline line: its `names` as code spans (when safe), the rest as inert text."""
    parts = line[:limit].split("`")
    return "".join(md_code(p, 200) if i % 2 else (md_text(p, limit) if p else "") for i, p in enumerate(parts))


def _sentence(sentence: str, limit: int) -> str:
    """An answer sentence: its `backticked` parts as code, the rest as escaped text."""
    parts = str(sentence).split("`")
    if len(parts) % 2 == 0:
        return md_text(sentence, limit)
    return "".join(md_code(p) if k % 2 else md_text(p, limit) for k, p in enumerate(parts))


def _table(header: list[str], rows: list[list[str]], total: int, what: str) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    if total > len(rows):
        lines.append(f"\n… {total - len(rows)} more {what} in report.json / report.html")
    return lines


@dataclass(frozen=True)
class _Limits:
    rows: int
    env_rows: int
    cell: int


def _header(report: dict[str, Any], lim: _Limits) -> list[str]:
    verdict = str(report.get("verdict") or "unknown")
    tol = report.get("tolerance") or {}
    first = headline_divergence(report)  # the op report.json and the terminal call the first divergence
    title = f"## tftrace: {md_text(verdict_label(verdict).upper(), 40)}"
    if isinstance(first, dict) and first.get("node"):
        title += f" — first divergence at {md_code(first['node'], lim.cell)} ({md_text(first.get('op'), 60)})"
    tool = report.get("tool") or {}
    out = [title, "",
           f"**Verdict:** {md_text(verdict_label(verdict), 40)} · tolerance atol {fmt(tol.get('atol'))}, "
           f"rtol {fmt(tol.get('rtol'))} · {len(report.get('nodes') or {})} ops · "
           f"{md_text(tool.get('name') or 'tftrace', 40)} {md_text(tool.get('version') or '', 40)} · "
           f"{md_text(report.get('created_utc') or '', 40)}", ""]
    out += [f"{_with_code(line)}  " for line in headline_texts(report)] + ([""] if headline_texts(report) else [])
    sides = report.get("sides") or {}
    rows = [["label", md_text((sides.get("a") or {}).get("label"), lim.cell), md_text((sides.get("b") or {}).get("label"), lim.cell)]]
    for key, a, b, differs in side_rows(sides):
        rows.append([md_text(key, 40) + (" **≠**" if differs else ""), md_text(a, lim.cell), md_text(b, lim.cell)])
    return out + _table(["", "A", "B"], rows, len(rows), "") + [""]


ISOLATION_CHARS = 700  # a replay's verdict and its evidence: a batch_statistics detail runs to ~450 (cut at 300 before)


def _origins(report: dict[str, Any], lim: _Limits) -> list[str]:
    out = []
    for title, o in first_divergences(report):
        rewrite = f", rewritten at export ({md_text(o['rewrite'], 60)})" if o.get("rewrite") else ""
        out.append(f"- **{title}:** {md_code(o['node'], lim.cell)} ({md_text(o.get('op'), 60)}), max abs "
                   f"{fmt(o.get('max_abs'))}, {relative_text(o)}{md_text(mismatch_note(o), 60)}"
                   f"{md_text(list_note(o), 200)}{rewrite}; "
                   f"{md_text(isolation_text(o.get('isolation'), str(o.get('op') or '')), ISOLATION_CHARS)}")
    if not out:
        out.append("- Every captured op agrees; the plain runs' outputs do not (see Outputs)."
                   if unobserved_divergence(report) else "- No divergence: every compared op agrees.")
    uncaptured = not_captured_text(report)
    if uncaptured:
        out.append(f"- {md_text(uncaptured, 600)}")
    out += [f"- Context: {md_text(line, lim.cell + 200)}" for line in nonfinite_context(report)]
    origins = [o for o in report.get("origins") or [] if isinstance(o, dict)]
    out.append("")
    if origins:
        out.append(f"### Origins ({len(origins)})")
        rows = [[fmt(o.get("rank", k + 1)), md_code(o.get("node"), lim.cell), md_text(o.get("op"), 60),
                 fmt(o.get("max_abs")), fmt(o.get("max_rel")), fmt(o.get("rel_to_peak")),
                 md_text(isolation_label((o.get("isolation") or {}).get("verdict")), 30),
                 md_text(o.get("rewrite") or "—", 40)] for k, o in enumerate(origins[: lim.rows])]
        out += _table(["#", "op", "type", "max abs", "max rel", "rel to peak", "own vs inherited", "rewrite"], rows,
                      len(origins), "origins") + [""]
    return out


def _outputs(report: dict[str, Any], lim: _Limits) -> list[str]:
    outputs = [(k, v) for k, v in (report.get("outputs") or {}).items() if isinstance(v, dict)]
    if not outputs:
        return []
    rows = []
    beside = [observed_beside(o) for _, o in outputs[: lim.rows]]
    for (key, o), observed in zip(outputs[: lim.rows], beside):
        why = f": {md_text(o['not_compared'], 200)}" if o.get("not_compared") else ""
        result = ("identical" if o.get("identical") else "within tolerance" if o.get("within_tolerance")
                  else f"**not compared**{why}" if o.get("identical") is None else "**differs**")
        row = [md_code(key, lim.cell), result, fmt(o.get("max_abs")), fmt(o.get("max_rel")), fmt(o.get("rel_to_peak")),
               fmt(o.get("cosine"), 7)]
        rows.append(row + ([md_text(observed or "", 200)] if any(beside) else []))
    plain = any(o.get("compared_as") == "plain" for _, o in outputs)
    title = "### Outputs (plain runs, as in production)" if plain else "### Outputs"
    head = ["output", "result", "max abs", "max rel", "rel to peak", "cosine"]
    head += ["instrumented (every tensor fetched)"] if any(beside) else []
    unobserved = unobserved_divergence(report)
    note = [f"**Not seen op by op:** {md_text(unobserved, 400)}", ""] if unobserved else []
    noise = [f"- {md_text(line, 300)}" for line in noise_lines(report)]
    return ([title] + _table(head, rows, len(outputs), "outputs") + [""] + (noise + [""] if noise else []) + note
            + _relative_note(report))


def _detections(report: dict[str, Any], lim: _Limits) -> list[str]:
    """A detector's outputs compared as detections: per group its headline, the images where
    something changed, and the changed detections."""
    out = []
    for group in detection_groups(report):
        out += ["### Detections", "", md_text(detection_headline(group), 1200), ""]
        rows = [[md_text(v, 40) for v in row] for row in image_rows(group, only_changed=True)]
        if rows:
            out += _table(image_header(), rows[: lim.rows], len(rows), "images") + [""]
        changes = [c for c in group.get("changes") or [] if isinstance(c, dict)]
        out += [f"- {md_text(change_text(c), lim.cell + 200)}" for c in changes[: lim.rows]]
        out += [""] if changes else []
    return out


def _relative_note(report: dict[str, Any]) -> list[str]:
    """What "rel to peak" means, once, where a column shows it."""
    if not report.get("origins") and not report.get("outputs"):
        return []
    return ["*max rel* is |a−b| / max(|a|, |b|) at the worst element (near-zero elements inflate it); "
            "*rel to peak* is max |a−b| / max |a| over the tensor; *rel L2* is ‖a−b‖ / ‖a‖.", ""]


def _answers(report: dict[str, Any], lim: _Limits) -> list[str]:
    given = answers(report)
    out = []
    sections = (("why", "Why it happens"), ("prevent", "How to prevent it"), ("cost", "What preventing it costs"))
    if nothing_diverged(report):
        sections = sections[:1]  # nothing to prevent, nothing to pay
    for key, title in sections:
        out.append(f"### {title}")
        items = given.get(key) or []
        out += [f"- {_sentence(s, 600)}" for s in items[: lim.rows]] or [f"- {no_answer(key, given['source'])}"]
        out.append("")
    return out


def _rewrites(report: dict[str, Any], lim: _Limits) -> list[str]:
    rewrites = [r for r in report.get("rewrites") or [] if isinstance(r, dict)]
    if not rewrites:
        return ["### Rewrites", "- None: the graph diff found no rewrite between A and B.", ""]
    kinds = Counter(str(r.get("kind")) for r in rewrites)
    out = [f"### Rewrites ({len(rewrites)})", ", ".join(f"{n} × {md_text(k, 40)}" for k, n in kinds.most_common()), ""]
    rows = []
    for r in rewrites[: lim.rows]:
        a, b = [str(x) for x in r.get("a_nodes") or []], [str(x) for x in r.get("b_nodes") or []]
        detail = rewrite_detail(r.get("detail") or {})
        rows.append([md_text(r.get("kind"), 40),
                     (md_code(a[0], lim.cell) + (f" +{len(a) - 1}" if len(a) > 1 else "")) if a else "—",
                     (md_code(b[0], lim.cell) + (f" +{len(b) - 1}" if len(b) > 1 else "")) if b else "—",
                     md_text(detail, lim.cell)])
    return out + _table(["kind", "A", "B", "detail"], rows, len(rewrites), "rewrites") + [""]


def _environment(report: dict[str, Any], lim: _Limits) -> list[str]:
    sides = report.get("sides") or {}
    rows = environment_rows((sides.get("a") or {}).get("environment"), (sides.get("b") or {}).get("environment"))
    differing = [r for r in rows if r.differs]
    same = [r for r in rows if not r.differs and not r.volatile]
    out = [f"### Environment ({len(differing)} of {len(rows)} rows differ)"]
    if differing:
        out += _table(["key", "A", "B"], [[f"**{md_text(r.key, 80)}** ≠", md_text(r.a, lim.cell), md_text(r.b, lim.cell)]
                                          for r in differing[: lim.env_rows]], len(differing), "differing rows")
    else:
        out.append("The two environment fingerprints agree.")
    if same:
        out += ["", "<details><summary>Identical rows</summary>", ""]
        out += _table(["key", "A and B"], [[md_text(r.key, 80), md_text(r.a, lim.cell)] for r in same[: lim.env_rows]],
                      len(same), "identical rows")
        out += ["", "</details>"]
    return out + [""]


def _observer(report: dict[str, Any]) -> list[str]:
    effect = report.get("observer_effect") or {}
    out = ["### Observer effect (plain vs instrumented run)"]
    for key in ("a", "b"):
        side = effect.get(key) if isinstance(effect, dict) else None
        if not isinstance(side, dict) or not side:
            out.append(f"- **{key.upper()}:** not recorded")
            continue
        shifts = [v for v in (num(x) for x in (side.get("outputs_max_abs_diff") or {}).values()) if v is not None]
        if side.get("outputs_identical"):
            moved = "outputs unchanged"
        else:
            moved = f"outputs moved by up to {fmt(max(shifts))}" if shifts else "outputs moved"
            note = observer_note(side)
            moved += f" ({md_text(note, 300)})" if note else ""
        plain = ", ".join(md_text(x, 60) for x in (side.get("only_in_plain") or [])[:12]) or "none"
        inst = ", ".join(md_text(x, 60) for x in (side.get("only_in_instrumented") or [])[:12]) or "none"
        out.append(f"- **{key.upper()}:** {moved}; ran only in the plain graph: {plain}; only when instrumented: {inst}")
    return out + [""]


def _reproduce(report: dict[str, Any], has_svg: bool) -> list[str]:
    """The command that reproduces the report, and under it what decided its numbers (oneDNN as it
    ran, the inputs file the command reads): a reader on another CPU gets other numbers without them."""
    command = reproduce_command(report)
    fence = "`" * max(3, max((len(m) for m in re.findall(r"`+", command)), default=0) + 1)
    out = ["### Reproduce", f"{fence}sh", command.replace("\r", ""), fence]
    out += [f"- {_sentence(fact, 600)}" for fact in reproduce_facts(report)]
    if has_svg:
        out += [""] if out[-1] != fence else []  # a line after a list item would continue it
        out.append("Attach `divergence.png` from the report directory for the picture of the ops around the "
                   "first divergence (an issue takes a PNG, not an SVG); open `report.html` to explore every op.")
    return out


def _diagnosis(report: dict[str, Any], lim: _Limits) -> list[str]:
    """A diagnosis puts its answers and its experiment table first."""
    rows = diagnosis_rows(report)
    if not rows:
        return []
    table = [[md_text(r["name"], 60) + (" *(shown below)*" if r["shown"] else ""), md_text(r["factor"], 60),
              md_text(r["verdict"], 30), r["diff"], md_text(r["first"], lim.cell), md_text(r["latency"], 60),
              md_text(r["cost"], 30), md_text(r["skipped"], lim.cell)] for r in rows[: lim.rows * 2]]
    out = [f"## tftrace diagnose: {len(rows)} experiments, one factor changed in each", ""]
    out += _answers(report, lim)
    out += ["### Experiments"] + _table(
        ["experiment", "factor", "verdict", "max output diff", "first divergence", "latency A → B (ms)", "cost", "note"],
        table, len(rows), "experiments") + ["", "---", ""]
    return out


def _render(report: dict[str, Any], lim: _Limits, has_svg: bool) -> str:
    lines = (_diagnosis(report, lim) + _header(report, lim) + _origins(report, lim) + _outputs(report, lim)
             + _detections(report, lim)
             + ([] if diagnosis_rows(report) else _answers(report, lim))
             + _rewrites(report, lim) + _environment(report, lim) + _observer(report) + _reproduce(report, has_svg))
    return "\n".join(lines).rstrip() + "\n"


def render_markdown(report: dict[str, Any], *, has_svg: bool = False) -> str:
    """The Markdown summary, always under :data:`MD_LIMIT` characters."""
    text = ""
    for lim in (_Limits(25, 40, 160), _Limits(12, 20, 100), _Limits(6, 10, 60), _Limits(3, 5, 40)):
        text = _render(report, lim, has_svg)
        if len(text) <= MD_LIMIT:
            return text
    # Only a pathological report (a command or answers of many kilobytes) gets here.
    return text[: MD_LIMIT - 80].rsplit("\n", 1)[0] + "\n\n… (cut to fit an issue body; see report.html)\n"
