"""Terminal summaries (rich). Only formatting: every number comes from the result objects."""

from __future__ import annotations

import shlex
from collections import Counter

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..diff.kinds import display_rank
from ..artifacts.records import USER_SIGNATURE
from ..causes import why_shown
from ..diff.records import GraphDiff, Rewrite
from ..comparison.statuses import isolation_label, origin_isolation_words, verdict_label
from ..text import printable, printable_tree, wrapped
from .detections_view import (change_text, detection_groups, detection_headline, image_header, image_rows, list_note,
                              observer_note)
from .numbers import figure, per_key
from .headline import command_words, headline_texts, reproduce_command, reproduce_facts
from .summary import (side_text, first_divergences, mismatch_note, noise_lines, nonfinite_context, not_captured_text,
                      moving_average_text, observed_beside, outputs_not_compared, relative_text,
                      tensorflow_builds, changed_weights)

__all__ = ["print_graph_diff", "print_comparison", "say"]


def say(console: Console, text: str, style: str | None = None) -> None:
    """One line of the summary, wrapped by :func:`tracer.text.wrapped` (continuing under its text,
    no trailing spaces, names whole) and printed as it is: no markup, no highlighting, no rewrap."""
    console.print(wrapped(text, console.width), highlight=False, markup=False, soft_wrap=True, style=style)


def print_graph_diff(console: Console, diff: GraphDiff, label_a: str, label_b: str) -> None:
    counts = Counter(r.kind for r in diff.rewrites)
    say(console, f"A {printable(label_a)}")
    say(console, f"B {printable(label_b)}")
    renamed = diff.renamed()
    console.print(
        f"{diff.matched} ops matched ({len(renamed)} under another name), "
        f"{len(diff.only_in_a)} only in A, {len(diff.only_in_b)} only in B",
        highlight=False,
    )
    if not diff.rewrites:
        console.print("[green]No rewrites in the inference subgraph.[/]")
        return
    summary = ", ".join(f"{counts[k]} {k}" for k in sorted(counts, key=display_rank))  # the registry's order
    say(console, f"Rewrites: {summary}")
    ranked = sorted(diff.rewrites, key=lambda r: display_rank(r.kind))
    groups = _grouped(ranked)
    # one row repeats nothing: its names stay whole
    shown_rewrites = [r for _, _, members in groups[:SHOWN_ROWS] for r in members[:3]]
    scope = _common_scope([n for r in shown_rewrites for n in (*r.a_nodes, *r.b_nodes)]) if len(ranked) > 1 else ""
    if scope:
        say(console, f"(op names below are under {printable(scope)})")

    def unscoped(text: str) -> str:
        return text.replace(scope, "") if scope else text

    if console.width >= WIDE_TABLE_COLUMNS:
        table = Table(show_lines=False)
        for column in ("kind", "A", "B", "detail"):
            table.add_column(column, overflow="fold")
        for kind, detail, members in groups[:SHOWN_ROWS]:
            whole = _detail(members[0].detail) if len(members) == 1 else detail  # a row of one says all it has
            table.add_row(_shown(_kind_cell(kind, members)), _shown(unscoped(_names(members, "a_nodes"))),
                          _shown(unscoped(_names(members, "b_nodes"))), _shown(unscoped(whole)))
        console.print(table)
    else:  # a table squeezed into 80 columns cuts the op names, which are what the reader acts on
        for kind, detail, members in groups[:SHOWN_ROWS]:
            said = f": {unscoped(detail)}" if detail else ""
            say(console, printable(f"{_kind_cell(kind, members)}{said}"))  # continues under its text
            for rewrite in members[:3]:
                say(console, printable(f"    {unscoped(_member_line(rewrite))}"))  # broken between names only
            if len(members) > 3:
                console.print(f"    … and {len(members) - 3:,} more", highlight=False)
    shown = sum(len(members) for _, _, members in groups[:SHOWN_ROWS])
    if shown < len(ranked):
        console.print(f"… and {len(ranked) - shown:,} more rewrites (use --json for all)", highlight=False)


SHOWN_ROWS = 60  # rows (groups of alike rewrites) diff-graph prints; --json has every rewrite


def _grouped(ranked: list[Rewrite]) -> list[tuple[str, str, list[Rewrite]]]:
    """Rewrites of one kind that change the same thing, one group each, in the order of their first:
    a mixed-precision export re-types 90 score thresholds 0.05 → 0.0499878 alike, which is one line
    with a count, not 90 rows. The detail is said without the op names the rewrite is made of."""
    groups: dict[tuple[str, str], list[Rewrite]] = {}
    for rewrite in ranked:
        groups.setdefault((rewrite.kind, _detail(_without_names(rewrite))), []).append(rewrite)
    return [(kind, detail, members) for (kind, detail), members in groups.items()]


def _without_names(rewrite: Rewrite) -> dict:
    """The detail without the values that name the rewrite's own ops (a cast's ``op``, its ``casts``):
    the A and B names say them, and they differ from one member of a group to the next."""
    names = {*rewrite.a_nodes, *rewrite.b_nodes}

    def names_ops(value: object) -> bool:
        if isinstance(value, str):
            return value in names
        return isinstance(value, list) and bool(value) and all(isinstance(v, str) and v in names for v in value)

    return {k: v for k, v in rewrite.detail.items() if not names_ops(v)}


def _kind_cell(kind: str, members: list[Rewrite]) -> str:
    return f"{kind} ×{len(members):,}" if len(members) > 1 else kind


def _names(members: list[Rewrite], side: str) -> str:
    """A column's op names: a group's first three members' first op each, then how many more."""
    if len(members) == 1:
        nodes = getattr(members[0], side)
        return "\n".join(nodes[:4]) + (" …" if len(nodes) > 4 else "")
    firsts = [getattr(r, side)[0] for r in members[:3] if getattr(r, side)]
    more = f"\n… and {len(members) - 3:,} more" if len(members) > 3 else ""
    return "\n".join(firsts) + more


def _member_line(rewrite: Rewrite) -> str:
    """One rewrite's ops on a line: ``A op`` where B has it under the same name, ``A op → B ops`` else."""
    a, b = ", ".join(rewrite.a_nodes[:4]), ", ".join(rewrite.b_nodes[:4])
    if a == b:
        return a
    if not a:
        return f"(only in B) {b}"
    return f"{a} (only in A)" if not b else f"{a} → {b}"


def _common_scope(names: list[str]) -> str:
    """The scope every name shares (``StatefulPartitionedCall/`` of an inlined TF2 signature),
    with its slash: printed once above the table, so its columns show what differs, not 30 rows
    of the same truncated prefix."""
    if not names:
        return ""
    parts = [n.split("/")[:-1] for n in names]
    common = parts[0]
    for p in parts[1:]:
        while common and p[: len(common)] != common:
            common = common[:-1]
    return "/".join(common) + "/" if common else ""


def _shown(text: str) -> str:
    """Model text for rich markup: control characters escaped (tracer.text), then markup escaped."""
    return escape(printable(text))


def _detail(detail: dict) -> str:
    parts = []
    for key, value in detail.items():
        if value is None or value == [] or value == {}:
            continue
        if key == "attrs":
            value = "; ".join(f"{k}: {v['a']!r} → {v['b']!r}" for k, v in value.items())
        elif key in ("dtype", "values") and isinstance(value, dict) and {"a", "b"} <= value.keys():
            value = f"{side_text(value['a'])} → {side_text(value['b'])}"
        elif key == "moving_average" and isinstance(value, dict):
            parts.append(moving_average_text(value))
            continue
        elif isinstance(value, float):
            value = figure(value)
        elif isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = ", ".join(value)  # op names as names, not a Python list's repr
        parts.append(f"{key}={value}")
    return ", ".join(parts)


WIDE_TABLE_COLUMNS = 120  # below this the origins table would cut node names ("Statefu…"): one line each instead


def _print_origins(console: Console, origins: list[dict]) -> None:
    """The top origins: a table on a wide terminal, a numbered line each on a narrow one.

    A Keras or TF2 export names every node 'StatefulPartitionedCall/functional_1/…'; squeezed into an
    80-column table the name, which is what the user acts on, was cut to 'Statefu…'."""
    rows = [(str(origin.get("rank")), str(origin["node"]), str(origin["op"]), figure(origin["max_abs"]),
             figure(origin["max_rel"]), figure(origin.get("rel_to_peak")),
             isolation_label((origin.get("isolation") or {}).get("verdict")), str(origin.get("rewrite") or ""))
            for origin in origins]
    if console.width < WIDE_TABLE_COLUMNS:
        say(console, "Top origins")
        for rank, node, op, max_abs, max_rel, rel_peak, isolation, rewrite in rows:
            say(console, f"  {rank}. {node} ({op}): max abs {max_abs}, max rel {max_rel}, rel to peak {rel_peak}; "
                          f"isolation {isolation}" + (f"; rewrite {rewrite}" if rewrite else ""))
        return
    say(console, "Top origins")  # not the table's title, which rich pads with spaces to the table's width
    table = Table()
    for col in ("#", "op", "type", "max abs", "max rel", "rel to peak", "isolation", "rewrite"):
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*map(escape, row))
    console.print(table)


def _print_outputs(console: Console, report: dict) -> None:
    """The outputs compared: a table on a wide terminal, a line each on a narrow one (where the
    table cut a detector's keys to 'detectio…' and dropped its last column)."""
    outputs = report.get("outputs", {})
    plain = any(out.get("compared_as") == "plain" for out in outputs.values())
    beside = {key: observed_beside(out) for key, out in outputs.items()}
    title = "Outputs (plain runs, as in production)" if plain else "Outputs"
    rows = []
    for key, out in outputs.items():
        nonfinite = (out.get("nan_mismatch") or 0) + (out.get("inf_mismatch") or 0)
        compared = out["identical"] is not None
        rows.append((str(key), side_text(out["identical"]) if compared else "not compared",
                     side_text(out["within_tolerance"]) if compared else "—", figure(out["max_abs"]), figure(out["max_rel"]),
                     figure(out.get("rel_to_peak")), str(nonfinite) if nonfinite else "", beside[key] or ""))
    if console.width < WIDE_TABLE_COLUMNS:
        say(console, title)
        for key, identical, within, max_abs, max_rel, rel_peak, nonfinite, observed in rows:
            state = ("not compared" if identical == "not compared" else "identical" if identical == "yes"
                     else "within tolerance" if within == "yes" else "beyond tolerance")
            numbers = ("" if state in ("identical", "not compared")
                       else f", max abs {max_abs}, max rel {max_rel}, rel to peak {rel_peak}")
            say(console, f"  {key}: {state}{numbers}" + (f", NaN/Inf differ in {nonfinite}" if nonfinite else "")
                          + (f"; instrumented: {observed}" if observed else ""))
        return
    say(console, title)
    table = Table()
    for col in ("output", "identical", "within tol.", "max abs", "max rel", "rel to peak", "NaN/Inf differ"):
        table.add_column(col, overflow="fold")
    if any(beside.values()):
        table.add_column("instrumented (every tensor fetched)", overflow="fold")
    for row in rows:
        table.add_row(*map(escape, row[:7]), *([escape(row[7])] if any(beside.values()) else []))
    console.print(table)


def _print_detections(console: Console, report: dict) -> None:
    """A detector's outputs compared as detections: a line per group, the images and the
    detections that changed (report.json has them all)."""
    for group in detection_groups(report):
        say(console, f"Detections: {detection_headline(group)}")
        changed = image_rows(group, only_changed=True)
        header = image_header()
        for row in changed[:10]:
            say(console, "  " + ", ".join(f"{h} {v}" for h, v in zip(header, row) if v not in ("0", "—")
                                           or h in ("image", "matched", "A", "B")))
        for change in [c for c in group.get("changes") or [] if isinstance(c, dict)][:10]:
            say(console, f"  {change_text(change)}")


def _command(console: Console, command: str) -> None:
    """A command indented on lines of its own, broken between its words as a shell continues a
    line (`` \\`` at the end): copied whole into a shell it runs as printed, where a line broken
    by the terminal, or inside a quoted word, would not."""
    parsed = command_words(command)  # a command that does not parse is shown as it was recorded
    words = [shlex.quote(word) for word in parsed] if parsed is not None else [command]
    for i in range(len(words) - 1, 0, -1):  # an option stays on the line of its value
        if words[i - 1].startswith("--") and "=" not in words[i - 1] and not words[i].startswith("-"):
            words[i - 1:i + 1] = [f"{words[i - 1]} {words[i]}"]
    lines, line = [], "  "
    for word in words:
        if line.strip() and len(line) + 1 + len(word) + 2 > console.width:
            lines.append(line + " \\")
            line = "    "
        line += ("" if not line.strip() else " ") + word
    console.print("\n".join([*lines, line]), highlight=False, markup=False, soft_wrap=True)


def _print_reproduce(console: Console, report: dict) -> None:
    """The command that reproduces the report, and what decided its numbers (as report.md says)."""
    command = reproduce_command(report)
    if not command:
        return
    say(console, "Reproduce:")
    _command(console, command)
    for fact in reproduce_facts(report):
        say(console, f"  {fact}")


VERDICT_STYLE = {"identical": "bold green", "within_tolerance": "bold yellow", "within_noise": "bold yellow",
                 "diverged": "bold red"}


def print_comparison(console: Console, report: dict, out_dir: object = None) -> None:
    """The terminal summary of a report dict: verdict, first divergence, origins, outputs."""
    report = printable_tree(report)  # model text: escape sequences in a name are shown, never run
    sides = report["sides"]
    verdict = report["verdict"]
    missing = outputs_not_compared(report)
    caveat = f" (but {len(missing)} of {len(report['outputs'])} outputs not compared)" if missing else ""
    console.print(f"[{VERDICT_STYLE.get(verdict, 'bold')}]{escape(verdict_label(verdict).upper())}[/]{escape(caveat)}")
    for line in headline_texts(report):  # what the verdict rests on, noise first (tracer.report.headline)
        say(console, f"  {line}")
    builds = tensorflow_builds(sides)  # named beside each side when they differ (--python: another release)
    for key in ("a", "b"):
        side = sides[key]
        build = f"; {builds[key]}" if builds else ""
        say(console, f"  {key.upper()}: {side['artifact'].get('location') or side['artifact'].get('path')} "
                      f"[{side['label']}{build}]")
        signature = side.get("signature") if isinstance(side.get("signature"), dict) else {}
        if signature.get("borrowed_from"):
            lent = (f"the tensors named by --outputs/--input-names for {signature['borrowed_from']}"
                    if signature.get("key") == USER_SIGNATURE
                    else f"signature {signature.get('key')!r} borrowed from {signature['borrowed_from']}")
            say(console, f"     no signature of its own: traced with {lent}")
    for title, origin in first_divergences(report):  # the same lines, in the same words, as report.md
        if origin:
            iso = origin.get("isolation") or {}
            verdict_iso = origin_isolation_words(iso, str(origin["op"]), rewrite=str(origin.get("rewrite") or ""),
                                                 weights_differing=max(1, len(changed_weights(report))))
            if iso.get("verdict") == "not_replayed" and iso.get("detail") and not iso.get("load_state"):
                verdict_iso += f" ({iso['detail']})"
            say(console, f"{title}: {origin['node']} ({origin['op']}), max abs {figure(origin['max_abs'])}, "
                          f"{relative_text(origin)}{mismatch_note(origin)}{list_note(origin)} — {verdict_iso}")
    origins = report.get("origins") or []
    if origins:
        _print_origins(console, origins[:8])
    _print_outputs(console, report)
    _print_detections(console, report)
    for key, why in missing.items():
        say(console, f"not compared: {key}: {why}", style="bold yellow")
    for line in noise_lines(report):
        say(console, f"noise: {line}")
    kinds = Counter(r["kind"] for r in report.get("rewrites", []))
    if kinds:
        say(console, "Rewrites: " + ", ".join(f"{n} {k}" for k, n in kinds.most_common()))
    for key in ("a", "b"):
        obs = report.get("observer_effect", {}).get(key) or {}
        if obs and not obs.get("outputs_identical", True):
            state = obs.get("stateful_ops") if obs.get("explained_by_state") else None
            why = (f" (not the observation: the graph changes its own state on every run, "
                   f"{', '.join(map(str, state[:3]))})" if state else "")
            note = observer_note(obs)
            matched = f"; {note}" if note else ""
            say(console, f"Observer effect on {key.upper()}: outputs moved by {per_key(obs.get('outputs_max_abs_diff'))}"
                         f"{matched}{why}")
    uncaptured = not_captured_text(report)
    if uncaptured:
        say(console, uncaptured)
    for line in nonfinite_context(report):
        say(console, f"Context: {line}")
    for origin in origins[:1]:
        command = (origin.get("isolation") or {}).get("command")
        if command:
            console.print(f"Isolate on the other machine: {command}", highlight=False, markup=False,
                          soft_wrap=True)  # never wrapped: it is copied into a shell
    for line in why_shown(report, (report.get("answers") or {}).get("why") or [])[:4]:  # the op named once
        say(console, f"why: {line}")
    _print_reproduce(console, report)
    if out_dir is not None:
        html = f"{out_dir}/report.html"
        say(console, f"Report: {html}" if __import__("os").path.exists(html) else f"Report: {out_dir}/report.json")
