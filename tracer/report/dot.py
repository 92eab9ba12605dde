"""The report's op graph as Graphviz DOT: colours by status, name scopes collapsed for large graphs.

Every node of every view is named by its position in the report's ``nodes`` (``n12``), never
by its op name: op names come from the model and may hold anything (quotes, ``<script>``,
backslashes, newlines, 2,000 characters). They reach Graphviz only inside HTML-like labels
that this module escapes itself, so ``dot`` writes them to the SVG as entities, and the page's
JavaScript finds a node through the index in its SVG id (``<view>_n12``), not a raw name in a
selector.

A 5,000-op graph cannot be drawn op by op and stay readable (or fast), so there are views:
the *overview* (one box per name scope at a depth chosen to give a bounded number of boxes,
coloured by the worst status inside), the *neighbourhood* of the first divergences (a few hops
around each, capped), per-scope op graphs, and the *full* graph only below a size limit.
"""

from __future__ import annotations

import html
import math
import re
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import graphviz
import networkx as nx

from ..comparison.statuses import STATUS_LABELS, STATUSES
from ..optypes import PLACEHOLDER_OPS
from .numbers import fmt, num
from .summary import scope_of, severity, short_name

__all__ = [
    "Style",
    "STYLES",
    "PROPAGATED_SHADES",
    "REWRITE_BORDER",
    "node_style",
    "legend",
    "OpIndex",
    "ScopeGroup",
    "scope_groups",
    "neighbourhood",
    "ops_dot",
    "overview_dot",
    "label_text",
]

FONT = "Helvetica,Arial,sans-serif"
# An edge on the inputs' path pulls its ends into line this much harder than a weight's edge: the
# sample detector's 130 ops drew as a diagonal staircase (3916x2613 px), each block pushed aside by
# its weights; weighted, the path runs straight down the page.
SPINE_WEIGHT = "8"


@dataclass(frozen=True)
class Style:
    fill: str
    border: str
    font: str = "#1f2328"
    penwidth: float = 1.0
    dashed: bool = False
    dotted: bool = False


# Calm colours for what agrees, one strong colour for where it starts; not red/green alone
# (blue for "close enough", orange-to-red for error size) so the picture survives colour blindness.
STYLES: dict[str, Style] = {
    "identical": Style("#e3f1e4", "#7bb07f"),
    "within_tolerance": Style("#dbeafe", "#5b8fd6"),
    "origin": Style("#c8102e", "#3b0008", "#ffffff", 4.0),
    "propagated": Style("#fdae6b", "#c4661f"),  # fill replaced by the shade of its error
    "rewritten": Style("#efe3fa", "#7b3fa0", penwidth=2.5, dashed=True),
    "unmatched": Style("#ffffff", "#57606a", dashed=True, penwidth=1.4),
    "not_captured": Style("#f2f2f2", "#9a9a9a", "#57606a", dotted=True, penwidth=1.4),
    "not_compared": Style("#f7f7f7", "#c4c4c4", "#6e7781"),
}
# Propagated ops shaded by log10(max_rel): (upper bound of the decade band, fill, font colour).
PROPAGATED_SHADES: tuple[tuple[float, str, str], ...] = (
    (-8.0, "#feedde", "#1f2328"),
    (-6.0, "#fdd0a2", "#1f2328"),
    (-4.0, "#fdae6b", "#1f2328"),
    (-2.0, "#fd8d3c", "#1f2328"),
    (math.inf, "#e6550d", "#ffffff"),
)
# Any op that an export rewrite touched gets this border, whatever its status.
REWRITE_BORDER = "#7b3fa0"


def propagated_shade(max_rel: Any) -> tuple[str, str]:
    """(fill, font colour) for a propagated op: darker for larger relative error."""
    x = num(max_rel)
    if x is None or math.isnan(x):
        return PROPAGATED_SHADES[2][1], PROPAGATED_SHADES[2][2]
    level = math.log10(x) if x > 0 else -math.inf
    for bound, fill, font in PROPAGATED_SHADES:
        if level < bound:
            return fill, font
    return PROPAGATED_SHADES[-1][1], PROPAGATED_SHADES[-1][2]


def node_style(status: str, max_rel: Any = None, rewrite: Any = None) -> dict[str, str]:
    """DOT attributes (fill, border, font, pen, line style, class) for an op of this status."""
    style = STYLES.get(status, STYLES["not_compared"])
    fill, font = (propagated_shade(max_rel) if status == "propagated" else (style.fill, style.font))
    border, pen = style.border, style.penwidth
    lines = ["filled", "rounded"]
    if style.dashed or (rewrite and status != "origin"):
        lines.append("dashed")
    elif style.dotted:
        lines.append("dotted")
    if rewrite and status != "origin":
        border, pen = REWRITE_BORDER, max(pen, 2.5)
    safe_status = status if status in STYLES else "not_compared"
    classes = f"st-{safe_status}" + (" rewritten" if rewrite else "")
    return {"fillcolor": fill, "color": border, "fontcolor": font, "penwidth": f"{pen:g}",
            "style": ",".join(lines), "class": classes}


def legend() -> list[dict[str, str]]:
    """The legend's swatches, in the page's order (worst first), from the same styles as the graph."""
    entries = []
    for status in STATUSES:
        s = STYLES[status]
        border = "dashed" if s.dashed else ("dotted" if s.dotted else "solid")
        entries.append({"status": status, "label": STATUS_LABELS[status], "fill": s.fill, "border": s.border,
                        "font": s.font, "width": f"{min(s.penwidth, 3):g}px", "line": border})
    return entries


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\ud800-\udfff]")


def label_text(text: str, limit: int = 28) -> str:
    """Model text made safe for a Graphviz HTML label: visible control characters, bounded, escaped."""
    text = text.replace("\n", "⏎").replace("\r", "⏎").replace("\t", " ")
    text = _CONTROL.sub("\ufffd", text)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return html.escape(text, quote=True)


@dataclass
class OpIndex:
    """The report's ops by position, with the data-edge graph between positions."""

    names: list[str]
    nodes: list[dict[str, Any]]
    graph: nx.DiGraph
    position: dict[str, int]

    @classmethod
    def from_report(cls, report: dict[str, Any]) -> OpIndex:
        raw = report.get("nodes") or {}
        names = list(raw)
        nodes = [raw[n] if isinstance(raw[n], dict) else {} for n in names]
        position = {n: i for i, n in enumerate(names)}
        graph = nx.DiGraph()
        graph.add_nodes_from(range(len(names)))
        for edge in report.get("edges") or []:
            if isinstance(edge, (list, tuple)) and len(edge) >= 2 and edge[0] in position and edge[1] in position:
                graph.add_edge(position[edge[0]], position[edge[1]])
        return cls(names, nodes, graph, position)

    def status(self, i: int) -> str:
        return str(self.nodes[i].get("status") or "not_compared")

    def scope(self, i: int) -> str:
        return scope_of(self.names[i], self.nodes[i])

    def on_input_path(self) -> set[int]:
        """The ops the fed inputs reach (every op when nothing is fed): the path the examples take."""
        fed = [i for i in range(len(self.names)) if str(self.nodes[i].get("op") or "") in PLACEHOLDER_OPS]
        return set(fed).union(*(nx.descendants(self.graph, i) for i in fed)) if fed else set(range(len(self.names)))

    def flow_order(self) -> list[int]:
        """Positions in the order the examples meet the ops (:meth:`tracer.opgraph.OpGraph.flow_order`
        from the report alone): the report's order is topological, which puts every weight, by
        name, before the first op the inputs reach, so a table in that order opens on a screen of
        identical variables; here a weight, its read and arithmetic on weights alone sit just
        before the first op on the inputs' path that reads them."""
        n = len(self.names)
        on_path = self.on_input_path()
        rank: dict[int, tuple[int, int, int]] = {}
        for i in reversed(range(n)):  # readers first: the report's order is topological
            if i in on_path:
                rank[i] = (i, 1, i)
                continue
            readers = [rank[j][0] for j in self.graph.successors(i) if j in rank]
            rank[i] = (min(readers, default=i), 0, i)
        return sorted(range(n), key=rank.__getitem__)

    def seeds(self, report: dict[str, Any], limit: int = 3) -> list[int]:
        """The first divergences to centre the neighbourhood on: first bitwise, first beyond tolerance,
        then the ranked origins, without repeats."""
        found: list[int] = []
        candidates = [report.get("first_divergence"), report.get("first_divergence_beyond_tolerance"),
                      *(report.get("origins") or [])]
        for origin in candidates:
            name = origin.get("node") if isinstance(origin, dict) else None
            if name in self.position and self.position[name] not in found:
                found.append(self.position[name])
            if len(found) >= limit:
                break
        return found


def neighbourhood(index: OpIndex, seeds: Iterable[int], hops: int = 2, cap: int = 60) -> list[int]:
    """Ops within ``hops`` data edges of each seed (either direction), at most ``cap`` per seed.

    Nearer ops first; among equally near ones the worse status and then the earlier op win,
    so the cap drops identical side branches before it drops the path of the error. (Hand-written:
    ``nx.bfs_layers`` cannot rank and cap each layer.)
    """
    chosen: dict[int, None] = {}
    for seed in seeds:
        taken = {seed}
        frontier = deque([seed])
        for _ in range(hops):
            layer: set[int] = set()
            for i in frontier:
                layer.update(index.graph.predecessors(i))
                layer.update(index.graph.successors(i))
            layer -= taken
            ranked = sorted(layer, key=lambda j: (-severity(index.status(j)), j))
            room = cap - len(taken)
            ranked = ranked[:max(room, 0)]
            taken.update(ranked)
            frontier = deque(ranked)
        chosen.update(dict.fromkeys(sorted(taken)))
    return sorted(chosen)


@dataclass
class ScopeGroup:
    """One box of the overview: a name scope (or an unscoped op) and the ops inside it."""

    key: str
    members: list[int]
    is_op: bool
    counts: Counter[str] = field(default_factory=Counter)
    worst: str = "identical"
    max_rel: float | None = None


def _group_key(scope: str, depth: int) -> str:
    return "/".join(scope.split("/")[:depth]) if scope else ""


def scope_groups(index: OpIndex, min_groups: int = 10, max_groups: int = 120) -> tuple[list[ScopeGroup], int]:
    """Collapse ops into name-scope boxes at one scope depth: the shallowest that gives at least
    ``min_groups`` boxes, without going over ``max_groups`` (one depth for all, so the boxes read
    like a table of contents). Returns (groups, depth)."""
    scopes = [index.scope(i) for i in range(len(index.names))]
    deepest = max((s.count("/") + 1 for s in scopes if s), default=0)
    unscoped = sum(1 for s in scopes if not s)
    depth = 1
    for d in range(1, deepest + 1):
        count = len({_group_key(s, d) for s in scopes if s}) + unscoped
        if count > max_groups:
            break
        depth = d
        if count >= min_groups:
            break
    groups: dict[str, ScopeGroup] = {}
    for i, scope in enumerate(scopes):
        key = _group_key(scope, depth) if scope else f"\x00op{i}"
        group = groups.setdefault(key, ScopeGroup(key if scope else index.names[i], [], not scope))
        group.members.append(i)
    for group in groups.values():
        group.counts = Counter(index.status(i) for i in group.members)
        group.worst = max(group.counts, key=severity)
        rels = [num(index.nodes[i].get("max_rel")) for i in group.members]
        finite = [r for r in rels if r is not None and not math.isnan(r)]
        group.max_rel = max(finite) if finite else None
    return list(groups.values()), depth


def _new_graph(view_id: str, caption: str | None, rankdir: str = "TB") -> graphviz.Digraph:
    g = graphviz.Digraph(name=view_id)
    g.attr("graph", id=view_id, rankdir=rankdir, bgcolor="transparent", fontname=FONT, fontsize="11",
           nodesep="0.22", ranksep="0.32", pad="0.2", newrank="true")
    if caption:
        g.attr("graph", label=f"<{caption}>", labelloc="t", labeljust="l", fontsize="13")
    g.attr("node", shape="box", fontname=FONT, fontsize="10", margin="0.10,0.04", height="0.3")
    g.attr("edge", color="#8c959f", arrowsize="0.6", penwidth="1")
    return g


def _op_label(index: OpIndex, i: int, font: str) -> str:
    node = index.nodes[i]
    short, op = short_name(index.names[i]), str(node.get("op") or "?")
    lines = [f"<B>{label_text(short)}</B>"]
    if op != short:  # "FusedBatchNormV3" twice says nothing more
        lines.append(f'<FONT POINT-SIZE="8" COLOR="{font}">{label_text(op, 24)}</FONT>')
    if index.status(i) in ("origin", "propagated", "within_tolerance") and node.get("max_rel") is not None:
        lines.append(f'<FONT POINT-SIZE="8" COLOR="{font}">rel {label_text(fmt(node.get("max_rel")))}</FONT>')
    return "<" + "<BR/>".join(lines) + ">"


def _add_op(g: graphviz.Digraph, index: OpIndex, view_id: str, i: int, emphasis: bool) -> None:
    node = index.nodes[i]
    attrs = node_style(index.status(i), node.get("max_rel"), node.get("rewrite"))
    attrs["class"] += " focus" if emphasis else ""
    label = _op_label(index, i, attrs["fontcolor"])
    g.node(f"n{i}", label=label, id=f"{view_id}_n{i}", _attributes={"class": attrs.pop("class")}, **attrs)


@dataclass
class _ScopeTree:
    ops: list[int] = field(default_factory=list)
    children: dict[str, _ScopeTree] = field(default_factory=dict)

    def size(self) -> int:
        return len(self.ops) + sum(c.size() for c in self.children.values())


def _emit_tree(g: graphviz.Digraph, tree: _ScopeTree, index: OpIndex, view_id: str, focus: set[int],
               counter: list[int]) -> None:
    for i in tree.ops:
        _add_op(g, index, view_id, i, i in focus)
    for name, child in tree.children.items():
        path = name
        # A chain of single-child scopes is one cluster labelled "a/b/c"; one-op scopes get no box.
        while not child.ops and len(child.children) == 1:
            inner, child = next(iter(child.children.items()))
            path = f"{path}/{inner}"
        if child.size() < 2:
            _emit_tree(g, child, index, view_id, focus, counter)
            continue
        counter[0] += 1
        with g.subgraph(name=f"cluster_{counter[0]}") as sub:
            sub.attr(label=f"<{label_text(path, 40)}>", id=f"{view_id}_c{counter[0]}", style="rounded",
                     color="#d0d7de", fontcolor="#57606a", fontsize="10", labeljust="l")
            _emit_tree(sub, child, index, view_id, focus, counter)


def ops_dot(index: OpIndex, members: Iterable[int], view_id: str, *, focus: Iterable[int] = (),
            caption: str | None = None, clusters: bool = True) -> str:
    """Op-level DOT for ``members`` (positions), nested in name-scope clusters (unless ``clusters``
    is False: a whole graph's clusters push each scope aside into a staircase), with the data edges
    between them. Edges leaving a differing op are drawn warm, so the error's path stands out."""
    members = list(members)
    member_set, focus_set = set(members), set(focus)
    g = _new_graph(view_id, caption)
    tree = _ScopeTree()
    for i in members:
        place = tree
        if clusters:
            for part in filter(None, index.scope(i).split("/")):
                place = place.children.setdefault(part, _ScopeTree())
        place.ops.append(i)
    _emit_tree(g, tree, index, view_id, focus_set, [0])
    spine = index.on_input_path()
    for k, (u, v) in enumerate(sorted(index.graph.subgraph(member_set).edges())):
        hot = index.status(u) in ("origin", "propagated")
        attrs = {"color": "#d9622b", "penwidth": "1.6"} if hot else {}
        if u in spine and v in spine:  # dot keeps the examples' path straight, weights hang beside it
            attrs["weight"] = SPINE_WEIGHT
        g.edge(f"n{u}", f"n{v}", id=f"{view_id}_e{k}", **attrs)
    return g.source


def _scope_label(group: ScopeGroup, style: dict[str, str]) -> str:
    total = len(group.members)
    parts = [f"{group.counts[s]} {STATUS_LABELS[s]}" for s in STATUSES if group.counts.get(s) and s != "identical"]
    lines = [f"<B>{label_text(group.key, 36)}</B>",
             f'<FONT POINT-SIZE="8" COLOR="{style["fontcolor"]}">{total} op{"s" if total != 1 else ""}</FONT>']
    if parts:
        lines.append(f'<FONT POINT-SIZE="8" COLOR="{style["fontcolor"]}">{label_text(", ".join(parts[:3]), 48)}</FONT>')
    if group.max_rel:
        lines.append(f'<FONT POINT-SIZE="8" COLOR="{style["fontcolor"]}">max rel {label_text(fmt(group.max_rel))}</FONT>')
    return "<" + "<BR/>".join(lines) + ">"


def overview_dot(index: OpIndex, groups: list[ScopeGroup], view_id: str) -> str:
    """One box per scope group (``<view>_s<k>``; unscoped ops stay op nodes), edges aggregated."""
    g = _new_graph(view_id, None)
    owner: dict[int, str] = {}
    for k, group in enumerate(groups):
        if group.is_op:
            i = group.members[0]
            _add_op(g, index, view_id, i, False)
            owner[i] = f"n{i}"
            continue
        style = node_style(group.worst, group.max_rel)
        rewritten = any(index.nodes[i].get("rewrite") for i in group.members)
        if rewritten and group.worst != "origin":
            style.update(color=REWRITE_BORDER, penwidth="2.5", style=style["style"] + ",dashed")
        g.node(f"s{k}", label=_scope_label(group, style), id=f"{view_id}_s{k}", shape="box3d",
               _attributes={"class": f"scope {style.pop('class')}"}, **style)
        owner.update(dict.fromkeys(group.members, f"s{k}"))
    links: Counter[tuple[str, str]] = Counter()
    for u, v in index.graph.edges():
        if owner[u] != owner[v]:
            links[owner[u], owner[v]] += 1
    for k, ((a, b), count) in enumerate(sorted(links.items())):
        g.edge(a, b, id=f"{view_id}_e{k}", penwidth=f"{1 + min(math.log10(count), 2):.2g}")
    return g.source
