"""Terminal summaries (rich). Only formatting: every number comes from the result objects."""

from __future__ import annotations

from collections import Counter

from rich.console import Console
from rich.table import Table

from ..graphdiff import GraphDiff

__all__ = ["print_graph_diff"]

# Kinds that change numbers go first; exact ones last.
KIND_ORDER = ["const_changed", "batchnorm_folded", "cast_inserted", "fused", "op_changed", "attr_changed",
              "rewired", "node_added", "node_removed", "variable_frozen"]


def print_graph_diff(console: Console, diff: GraphDiff, label_a: str, label_b: str) -> None:
    counts = Counter(r.kind for r in diff.rewrites)
    console.print(f"[bold]A[/] {label_a}\n[bold]B[/] {label_b}", markup=True, highlight=False)
    renamed = diff.renamed()
    console.print(
        f"{diff.matched} ops matched ({len(renamed)} under another name), "
        f"{len(diff.only_in_a)} only in A, {len(diff.only_in_b)} only in B",
        highlight=False,
    )
    if not diff.rewrites:
        console.print("[green]No rewrites in the inference subgraph.[/]")
        return
    summary = ", ".join(f"{counts[k]} {k}" for k in KIND_ORDER if counts[k])
    console.print(f"Rewrites: {summary}", highlight=False)
    table = Table(show_lines=False)
    table.add_column("kind")
    table.add_column("A")
    table.add_column("B")
    table.add_column("detail", overflow="fold")
    ranked = sorted(diff.rewrites, key=lambda r: KIND_ORDER.index(r.kind) if r.kind in KIND_ORDER else 99)
    for rewrite in ranked[:60]:
        table.add_row(
            rewrite.kind,
            "\n".join(rewrite.a_nodes[:4]) + (" …" if len(rewrite.a_nodes) > 4 else ""),
            "\n".join(rewrite.b_nodes[:4]) + (" …" if len(rewrite.b_nodes) > 4 else ""),
            _detail(rewrite.detail),
        )
    console.print(table)
    if len(ranked) > 60:
        console.print(f"… and {len(ranked) - 60} more (use --json for all)")


def _detail(detail: dict) -> str:
    parts = []
    for key, value in detail.items():
        if value is None or value == [] or value == {}:
            continue
        if key == "attrs":
            value = "; ".join(f"{k}: {v['a']!r} → {v['b']!r}" for k, v in value.items())
        elif isinstance(value, float):
            value = f"{value:.3g}"
        parts.append(f"{key}={value}")
    return ", ".join(parts)
