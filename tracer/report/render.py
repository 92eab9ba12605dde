"""``report.json`` -> ``report.html``, ``report.md``, ``divergence.svg`` (+ ``.png``): the entry point.

Everything comes from the report dict, so a report re-renders anywhere (``tftrace report DIR``)
without TensorFlow or the captures. Graphviz is the one outside program, and a missing or slow
``dot`` must never cost the user their report: each run gets what is left of one time budget,
and whatever could not be drawn is replaced by a visible notice that says how to get it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from .dot import OpIndex, label_text, neighbourhood, ops_dot, overview_dot, scope_groups
from .html import PageView, build_html
from .markdown import render_markdown
from ..comparison.statuses import verdict_label
from ..safewrite import write_file
from ..text import printable_tree
from .numbers import fmt
from .summary import headline_divergence, json_safe, severity

__all__ = ["render_report", "RenderResult", "INSTALL_GRAPHVIZ"]

INSTALL_GRAPHVIZ = ("install Graphviz (`apt-get install graphviz` / `brew install graphviz`) "
                    "and re-render with `tftrace report DIR`")
SCOPE_VIEW_MAX_OPS = 250        # a scope bigger than this opens as a list only
SCOPE_VIEWS_TOTAL_OPS = 2500    # all per-scope graphs together (bounds HTML size and dot time)
SCOPE_BATCH_OPS = 600           # per dot process, so one timeout loses only one batch
NEIGHBOURHOOD_CAP = 60
VIEW_NAMES = {"near": "graph around the first divergence", "full": "full op graph", "overview": "scope overview"}


class RenderResult(TypedDict, total=False):
    html: Path
    md: Path
    svg: Path
    png: Path
    notices: list[str]
    seconds: float


@dataclass
class _Plan:
    """A view to draw: its DOT source, and for the page which ops it shows."""

    view: PageView
    dot: str
    raw: str | None = None  # dot's own SVG (a standalone file)
    svg: str | None = None  # the same, fit to sit inside the page


class _DotFailed(Exception):
    pass


@dataclass
class _Dot:
    """Runs ``dot`` with what is left of the budget. ``graphviz``'s own ``pipe`` has no timeout."""

    command: str
    budget_s: float
    started: float
    binary: str | None = None
    failures: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # not drawn for lack of time

    def __post_init__(self) -> None:
        self.binary = shutil.which(self.command)

    def run(self, source: str, fmt_: str, what: str) -> bytes:
        if self.binary is None:
            raise _DotFailed("no dot")
        left = self.started + self.budget_s - time.monotonic()
        if left <= 0.2 or self.skipped:
            self.skipped.append(what)
            raise _DotFailed(what)
        # Own process group: on timeout the whole group dies, so no child keeps the pipes open.
        proc = subprocess.Popen([self.binary, f"-T{fmt_}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        try:
            out, err = proc.communicate(source.encode("utf-8"), timeout=left)
        except subprocess.TimeoutExpired as exc:
            if hasattr(os, "killpg"):
                os.killpg(proc.pid, signal.SIGKILL)
            else:  # pragma: no cover - Windows has no process groups to kill
                proc.kill()
            proc.communicate()
            self.skipped.append(what)
            raise _DotFailed(what) from exc
        if proc.returncode != 0 or not out:
            lines = err.decode("utf-8", "replace").strip().splitlines()
            self.failures.append(f"Graphviz could not draw the {what} "
                                 f"({lines[-1][:200] if lines else f'exit status {proc.returncode}'}).")
            raise _DotFailed(what)
        return out

    @property
    def notices(self) -> list[str]:
        """What is missing from the page and how to get it, in one sentence per cause."""
        out = []
        if self.binary is None:
            out.append(f"Graphviz `{self.command}` was not found on PATH, so the graph pictures are missing "
                       f"(the table, details and text are complete). To get them, {INSTALL_GRAPHVIZ}.")
        if self.skipped:
            out.append(f"Graphviz ran out of the {self.budget_s:g} s render time budget before drawing: "
                       f"{', '.join(dict.fromkeys(self.skipped))}. The rest of the report is complete; re-render "
                       "with a larger `--render-timeout` to get them.")
        return out + self.failures


_PROLOG = re.compile(r"\A.*?(?=<svg)", re.S)
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_TITLE = re.compile(r"<title>[^<]*</title>\n?")
_NAMESPACES = re.compile(r'\s(?:xmlns|xmlns:xlink)="[^"]*"')
_SIZE = re.compile(r'<svg width="([\d.]+)pt" height="([\d.]+)pt"')
_FONT = re.compile(r' font-family="[^"]*"')
_PAGE_ID = re.compile(r'<g id="page\d+,\d+_([^"]+)" class="graph"')
_BOX_PATH = re.compile(r'(<g id="[^"]+" class="(?:node|cluster)[^"]*">\n)<path ([^>]*?) d="([^"]+)"/>')
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _rounded_box_as_rect(match: re.Match[str]) -> str:
    """dot draws a rounded box as a 16-point Bézier path (~300 bytes); a ``<rect rx>`` says the
    same in ~90, which keeps a page with thousands of drawn ops well under its size budget."""
    values = [float(v) for v in _NUMBER.findall(match.group(3))]
    xs, ys = values[0::2], values[1::2]
    if not xs or len(xs) != len(ys):
        return match.group(0)
    x, y = min(xs), min(ys)
    return (f'{match.group(1)}<rect {match.group(2)} x="{x:g}" y="{y:g}" width="{max(xs) - x:g}" '
            f'height="{max(ys) - y:g}" rx="4"/>')


def inline_svg(svg: str) -> str:
    """dot's SVG made fit to sit inside the page: no prolog, DOCTYPE, comments, titles (node titles
    are only ``n12``; the page shows names itself), namespace URLs (the HTML parser supplies the
    SVG namespace) or per-text font lists (the page's CSS sets the font), rounded boxes as
    ``<rect>``, and sized by CSS instead of points."""
    svg = _PROLOG.sub("", svg, count=1)
    svg = _COMMENT.sub("", svg)
    svg = _TITLE.sub("", svg)
    svg = _NAMESPACES.sub("", svg)
    svg = _FONT.sub("", svg)
    svg = _PAGE_ID.sub(r'<g id="\1" class="graph"', svg, count=1)  # dot names later graphs of a batch "page0,1_<id>"
    svg = _BOX_PATH.sub(_rounded_box_as_rect, svg)
    return _SIZE.sub(r'<svg data-width="\1" data-height="\2"', svg, count=1)


def _split_svgs(text: str) -> list[str]:
    return [chunk + "</svg>" for chunk in text.split("</svg>") if "<svg" in chunk]


def _caption(report: dict[str, Any], index: OpIndex) -> str:
    first = headline_divergence(report)  # the op report.json, report.md and the terminal name first
    verdict = verdict_label(report.get("verdict"))
    if isinstance(first, dict) and first.get("node"):
        return (f"<B>{label_text(verdict.upper(), 30)}</B>: first divergence at "
                f"<B>{label_text(str(first['node']), 80)}</B> ({label_text(str(first.get('op')), 40)}), "
                f"max abs {label_text(fmt(first.get('max_abs')))}, max rel {label_text(fmt(first.get('max_rel')))}")
    return f"<B>{label_text(verdict.upper(), 30)}</B>: {len(index.names)} ops compared, no divergence"


def _plan(report: dict[str, Any], index: OpIndex, full_graph_limit: int) -> tuple[list[_Plan], list[dict[str, Any]], int]:
    """The views worth drawing, the most useful first (the budget may run out part way)."""
    plans: list[_Plan] = []
    seeds = index.seeds(report)
    caption = _caption(report, index)
    n = len(index.names)
    if seeds and n > min(full_graph_limit, NEIGHBOURHOOD_CAP):
        # first, even where the whole graph is drawn too: the page opens on it, fitted, so what
        # the reader came for fills the canvas at a size that reads (130 ops fitted do not)
        members = neighbourhood(index, seeds, hops=2, cap=NEIGHBOURHOOD_CAP)
        plans.append(_Plan(PageView("near", "Around the first divergence", "ops", members, seeds),
                           ops_dot(index, members, "near", focus=seeds, caption=caption)))
    if 0 < n <= full_graph_limit:
        plans.append(_Plan(PageView("full", f"All {n} ops", "ops", list(range(n)), seeds),
                           ops_dot(index, range(n), "full", focus=seeds, caption=caption, clusters=False)))
    groups, depth = scope_groups(index)
    scopes: list[dict[str, Any]] = []
    if 1 < len(groups) <= 300 and any(not g.is_op for g in groups):
        scoped = [g for g in groups if not g.is_op]
        plans.append(_Plan(PageView("overview", f"Scopes (depth {depth})", "scopes", [], seeds),
                           overview_dot(index, groups, "overview")))
        for k, g in enumerate(groups):
            if not g.is_op:
                scopes.append({"key": g.key, "box": f"overview_s{k}", "members": g.members, "worst": g.worst,
                               "counts": dict(g.counts), "max_rel": g.max_rel, "view": None})
        if n > full_graph_limit:
            budget = SCOPE_VIEWS_TOTAL_OPS
            order = sorted(range(len(scoped)), key=lambda k: (-severity(scoped[k].worst), k))
            for k in order:
                size = len(scoped[k].members)
                if 2 <= size <= SCOPE_VIEW_MAX_OPS and size <= budget:
                    budget -= size
                    view_id = f"scope{k}"
                    scopes[k]["view"] = view_id
                    worst = min(scoped[k].members, key=lambda i: (-severity(index.status(i)), i))
                    plans.append(_Plan(PageView(view_id, scoped[k].key, "ops", scoped[k].members, [worst]),
                                       ops_dot(index, scoped[k].members, view_id)))
    return plans, scopes, depth


def _attachment(plans: list[_Plan]) -> _Plan | None:
    """The picture to attach to an issue (``divergence.svg``/``.png``): the ops around the first
    divergence, top down (the sample detector's whole 130 ops made a 3916x2613 PNG that no issue
    shows legibly); the whole graph, or the scopes, only when nothing diverged, the graph is small
    enough to be its own neighbourhood, or no neighbourhood could be drawn."""
    drawn = {p.view.id: p for p in plans if p.svg}
    return drawn.get("near") or drawn.get("full") or drawn.get("overview")


def _draw(plans: list[_Plan], runner: _Dot) -> None:
    """Main views one by one; the per-scope views batched (several graphs per dot process)."""
    if runner.binary is None:
        return
    for plan in (p for p in plans if not p.view.id.startswith("scope")):
        try:
            plan.raw = runner.run(plan.dot, "svg", VIEW_NAMES.get(plan.view.id, plan.view.id)).decode("utf-8")
            plan.svg = inline_svg(plan.raw)
        except _DotFailed:
            continue
    batch: list[_Plan] = []
    for plan in [*(p for p in plans if p.view.id.startswith("scope")), None]:
        if plan is not None:
            batch.append(plan)
        if batch and (plan is None or sum(len(p.view.members) for p in batch) >= SCOPE_BATCH_OPS):
            try:
                text = runner.run("\n".join(p.dot for p in batch), "svg", "per-scope graphs").decode("utf-8")
            except _DotFailed:
                batch = []
                continue
            for p, svg in zip(batch, _split_svgs(text), strict=False):
                p.raw, p.svg = svg, inline_svg(svg)
            batch = []


def _write(path: Path, data: str | bytes) -> Path:
    """Write beside the target and rename, so a reader never sees half a file (never through a link)."""
    return write_file(path, data)


def render_report(report: dict[str, Any], out_dir: str | Path, *, render_timeout_s: float = 60.0,
                  full_graph_limit: int = 400, dot_command: str = "dot") -> RenderResult:
    """Write ``report.html``, ``report.md`` and ``divergence.svg``/``.png`` into ``out_dir``.

    Never fails because Graphviz is missing or slow: the pictures are then left out and
    ``result["notices"]`` (also shown at the top of the page) says what is missing and why.
    ``render_timeout_s`` bounds all ``dot`` runs together.
    """
    started = time.monotonic()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report = printable_tree(json_safe(report))  # model text: no control characters reach the page or report.md
    index = OpIndex.from_report(report)
    runner = _Dot(dot_command, render_timeout_s, started)
    plans, scopes, depth = _plan(report, index, full_graph_limit)
    _draw(plans, runner)
    result: RenderResult = {}
    primary = _attachment(plans)
    stale = [out / "divergence.svg", out / "divergence.png"]
    if primary is not None and primary.raw is not None:
        result["svg"] = _write(out / "divergence.svg", primary.raw)
        stale.remove(out / "divergence.svg")
        try:
            result["png"] = _write(out / "divergence.png", runner.run(primary.dot, "png", "divergence.png"))
            stale.remove(out / "divergence.png")
        except _DotFailed:
            pass  # the notice is recorded; the SVG is the attachment that matters
    if primary is None and runner.skipped:
        runner.skipped.append("divergence.svg/.png")
    for path in stale:  # a picture from an earlier render would contradict this report
        path.unlink(missing_ok=True)
    views = [p.view for p in plans if p.svg is not None]
    svgs = {p.view.id: p.svg for p in plans if p.svg is not None}
    notices = list(runner.notices)
    result["html"] = _write(out / "report.html", build_html(report, index, views, svgs, scopes, depth, notices))
    result["md"] = _write(out / "report.md", render_markdown(report, has_svg="svg" in result))
    result["notices"] = notices
    result["seconds"] = round(time.monotonic() - started, 3)
    return result
