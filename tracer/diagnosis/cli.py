"""``tftrace diagnose``: its arguments, and the terminal view of the answers.

Registered by :mod:`tracer.cli` through :func:`add_diagnose_parser`; exit codes as everywhere:
0 = no experiment diverged beyond tolerance, 1 = some did, 2 = the input is wrong or a run
failed (raised as :class:`TftraceError` and printed by ``tracer.cli.main``).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from ..comparison.statuses import isolation_label, verdict_label
from ..console import terminal
from ..errors import EXIT_DIVERGED, EXIT_OK
from ..report.numbers import cost_cell, figure
from ..text import listed, unbroken

__all__ = ["add_diagnose_parser", "diagnose_options", "run_diagnose_command", "print_diagnosis"]


def add_diagnose_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``diagnose`` on the subcommand parsers of ``tftrace``."""
    from ..options import add_options  # noqa: PLC0415
    from .experiments import FACTORS, QUICK_FACTORS  # noqa: PLC0415

    parser = subparsers.add_parser(
        "diagnose", help="run the experiment matrix: which factors change the numbers, how to prevent it, the cost",
        description="Run pairs of sides that differ in one factor each, and answer why the numbers differ, how to "
                    "prevent it, and what preventing it costs on this machine.",
    )
    parser.add_argument("model", help="the model: a checkpoint or a SavedModel")
    add_options(parser, "diagnose", factors=", ".join(FACTORS), quick_factors=", ".join(QUICK_FACTORS))
    parser.set_defaults(func=run_diagnose_command)
    return parser


def diagnose_options(model: Any, out_dir: str, values: dict[str, Any], command: str = "") -> Any:
    """The :class:`tracer.diagnosis.options.DiagnoseOptions` of ``tftrace diagnose`` and ``tracer.diagnose``,
    from option values named as :mod:`tracer.options` declares them (API keywords)."""
    from pathlib import Path  # noqa: PLC0415

    from ..comparison.divergence import Tolerance  # noqa: PLC0415
    from ..options import artifact_ref, converted  # noqa: PLC0415
    from ..runspec import parse_device  # noqa: PLC0415
    from .options import DiagnoseOptions, parse_factors  # noqa: PLC0415

    c = converted("diagnose", values)
    parse_device(c["device"])
    ref = artifact_ref(model, values)
    only = c["only"]
    return DiagnoseOptions(
        model=ref, out_dir=Path(out_dir),
        savedmodel=artifact_ref(c["savedmodel"], {k: v for k, v in values.items() if k in ("tag", "signature")})
        if c["savedmodel"] else None,
        batch_sizes=c["batch_sizes"], device=c["device"], inputs_file=c["inputs_file"], examples=c["examples"],
        seed=c["seed"], quick=bool(c["quick"]),
        only=parse_factors(only if isinstance(only, str) or only is None else ",".join(only)),
        serving_batching=c["serving_batching"], serving_session_config=c["serving_session_config"],
        other_python=c["other_python"],
        tolerance=Tolerance(c["atol"], c["rtol"]), timing_runs=c["timing_runs"],
        allow_unsafe_ops=bool(c["allow_unsafe_ops"]), force=bool(c["force"]), command=command,
    )


def run_diagnose_command(args: argparse.Namespace, console: Console) -> int:
    from ..options import values_from_args  # noqa: PLC0415
    from .run import run_diagnosis  # noqa: PLC0415

    command = " ".join(["tftrace"] + [shlex.quote(a) for a in sys.argv[1:]])
    options = diagnose_options(args.model, args.out, values_from_args(args, "diagnose"), command)
    diagnosis = run_diagnosis(options, terminal(stderr=True, highlight=False))
    print_diagnosis(console, diagnosis.doc, diagnosis.out_dir)
    return EXIT_OK if diagnosis else EXIT_DIVERGED


PER_EXAMPLE = " /ex"  # a latency cell per example (the sides ran other batch sizes), as cost_cell marks its figure


def _latency(lat: dict[str, Any] | None, basis: str) -> str:
    if not lat:
        return "—"
    if basis == "per example":
        return figure(lat.get("per_row_median")) + PER_EXAMPLE
    return figure(lat.get("median"))


def _ms(side: str, cell: str) -> str:
    """"A 1.85 ms", "A 0.239 ms per example": a latency cell with its unit, for the one-line form."""
    if cell.endswith(PER_EXAMPLE):
        return f"{side} {cell[:-len(PER_EXAMPLE)]} ms per example"
    return f"{side} {cell} ms" if cell != "—" else f"{side} —"


# an experiment's verdict cell, by the registry's keys (tests/test_vocabulary.py holds it to them)
VERDICT_COLOURS = {"identical": "green", "within_tolerance": "yellow", "within_noise": "yellow", "diverged": "red"}


COLUMNS = ("experiment", "verdict", "max |Δ| out", "first divergence", "A ms", "B ms", "B vs A")


def _print_experiments(console: Console, rows: list[tuple[str, str, str, str, str, str, str]]) -> None:
    """The experiments as a table where it fits the console whole; else one wrapped line each
    (a piped diagnose is 80 columns wide, where the table cut experiment and op names mid-word)."""
    from ..report.terminal import say  # noqa: PLC0415 - the parsers import this module without rich's tables

    table = Table()  # its title said apart: rich pads a table's title with spaces to the table's width
    for column in COLUMNS:
        table.add_column(column, overflow="fold")
    for name, verdict, moved, where, a_ms, b_ms, cost in rows:
        table.add_row(name, f"[{VERDICT_COLOURS.get(verdict, 'white')}]{verdict_label(verdict)}[/]", moved, where,
                      a_ms, b_ms, cost)
    if Measurement.get(console, console.options.update_width(10**6), table).maximum <= console.width:
        console.print(table)
        return
    for name, verdict, moved, where, a_ms, b_ms, cost in rows:
        first = f", first divergence {where}" if where else ""
        say(console, f"{name}: {verdict_label(verdict)}, max |Δ| out {moved}{first}; "
                     + ", ".join(unbroken(cell) for cell in (_ms("A", a_ms), _ms("B", b_ms), f"B vs A {cost}")))


def print_diagnosis(console: Console, doc: dict[str, Any], out_dir: Any) -> None:
    """The experiment table, the skipped ones by reason, then why / prevent / cost (each line
    wrapped under its text by :func:`tracer.report.terminal.say`)."""
    from ..report.terminal import say  # noqa: PLC0415 - the parsers import this module without rich's tables

    rows: list[tuple[str, str, str, str, str, str, str]] = []
    skipped: dict[str, list[str]] = {}
    for exp in doc["experiments"]:
        if exp["skipped"]:
            skipped.setdefault(exp["skipped"], []).append(exp["name"])
            continue
        first = exp.get("first_divergence")
        where = f"{first['node']} ({first['op']})" if first else ""
        if first and first.get("isolation"):
            where += f", {isolation_label(first['isolation'])}"
        if exp.get("attribution"):
            where = f"{exp['attribution']}: " + listed(exp.get("state_ops", []), 2)
        basis = exp.get("latency_basis", "per run")
        lat = exp.get("latency_ms") or {}
        rows.append((str(exp["name"]), str(exp["verdict"]), figure(exp.get("max_abs_output_diff")), where,
                     _latency(lat.get("a"), basis), _latency(lat.get("b"), basis), cost_cell(exp)))
    say(console, "tftrace diagnose")
    _print_experiments(console, rows)
    for reason, names in skipped.items():
        say(console, f"skipped ({reason}): {', '.join(names)}")
    answers = doc["answers"]
    for title, key in (("Why", "why"), ("How to prevent it", "prevent"), ("What it costs", "cost")):
        if answers.get(key):
            console.print(f"\n[bold]{title}[/bold]")
            for line in answers[key]:
                say(console, f" • {line}")
    if doc.get("report_experiment"):
        where = f"diagnosis.json, report.html and report.md in {out_dir} (the report shows {doc['report_experiment']})"
    else:
        where = f"diagnosis.json in {out_dir} (no comparison ran, so there is no report.html)"
    console.print()
    say(console, where)
