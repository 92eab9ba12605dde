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
from rich.table import Table

from ..errors import EXIT_DIVERGED, EXIT_OK, TftraceError
from ..report.numbers import figure

__all__ = ["add_diagnose_parser", "run_diagnose_command", "print_diagnosis"]


def add_diagnose_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``diagnose`` on the subcommand parsers of ``tftrace``."""
    from .experiments import FACTORS, QUICK_FACTORS  # noqa: PLC0415

    parser = subparsers.add_parser(
        "diagnose", help="run the experiment matrix: which factors change the numbers, how to prevent it, the cost",
        description="Run pairs of sides that differ in one factor each, and answer why the numbers differ, how to "
                    "prevent it, and what preventing it costs on this machine.",
    )
    parser.add_argument("model", help="the model: a checkpoint or a SavedModel")
    parser.add_argument("--savedmodel", default=None,
                        help="the SavedModel exported from MODEL (adds checkpoint vs SavedModel)")
    parser.add_argument("--batch-sizes", default="1,8", help="batch sizes; the smallest is the reference (default 1,8)")
    parser.add_argument("--device", default="cpu", help="cpu, gpu or gpu:N for the base side (default cpu)")
    parser.add_argument("--inputs", default=None,
                        help="an .npz (keys = signature input keys) or .npy (one-input model)")
    parser.add_argument("--examples", type=int, default=None,
                        help="examples to generate (default: the largest batch size, at least 2)")
    parser.add_argument("--seed", type=int, default=0, help="seed of generated inputs (default 0)")
    parser.add_argument("--out", default="tftrace-diagnosis", help="output directory (default ./tftrace-diagnosis)")
    parser.add_argument("--quick", action="store_true",
                        help=f"only {', '.join(QUICK_FACTORS)}; five timed runs per side")
    parser.add_argument("--only", default=None, metavar="F1,F2", help=f"only these factors: {', '.join(FACTORS)}")
    parser.add_argument("--serving-batching", default=None, metavar="FILE",
                        help="TF Serving's --batching_parameters_file, emulated with the server's padding")
    parser.add_argument("--serving-session-config", default=None, metavar="FILE",
                        help="TF Serving's --tensorflow_session_config_file (a text ConfigProto)")
    parser.add_argument("--atol", type=float, default=1e-6, help="absolute tolerance of the verdicts (default 1e-6)")
    parser.add_argument("--rtol", type=float, default=1e-5, help="relative tolerance of the verdicts (default 1e-5)")
    parser.add_argument("--timing-runs", type=int, default=None,
                        help="timed plain runs per side after one warm-up (default 5 with --quick, else 10)")
    parser.add_argument("--tag", default=None, help="SavedModel tag set, comma-separated (default: serve)")
    parser.add_argument("--signature", default=None, help="signature key (default: serving_default)")
    parser.add_argument("--outputs", default=None,
                        help="tensors of MODEL to trace when it has no signature: NAME[,NAME...] (a checkpoint "
                             "given with --savedmodel borrows the SavedModel's signature without them)")
    parser.add_argument("--input-names", default=None,
                        help="tensors of MODEL fed when it has no signature: NAME[,NAME...]")
    parser.add_argument("--force", action="store_true", help="replace an existing output directory")
    parser.add_argument("--allow-unsafe-ops", action="store_true",
                        help="run graphs that read/write files or call Python (refused by default)")
    parser.set_defaults(func=run_diagnose_command)
    return parser


def _batch_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise TftraceError(f"--batch-sizes {text!r} is not a list of integers", "e.g. --batch-sizes 1,8") from None
    if not sizes:
        raise TftraceError("--batch-sizes is empty", "e.g. --batch-sizes 1,8")
    return sizes


def run_diagnose_command(args: argparse.Namespace, console: Console) -> int:
    from pathlib import Path  # noqa: PLC0415

    from ..artifacts.loader import ArtifactRef  # noqa: PLC0415
    from .run import DiagnoseOptions, parse_factors, run_diagnosis  # noqa: PLC0415
    from ..comparison.divergence import Tolerance  # noqa: PLC0415
    from ..runspec import parse_device  # noqa: PLC0415

    parse_device(args.device)
    ref = {"tag": args.tag or "serve", "signature": args.signature or "serving_default"}
    names = {key: tuple(p.strip() for p in (getattr(args, key) or "").split(",") if p.strip())
             for key in ("outputs", "input_names")}
    options = DiagnoseOptions(
        model=ArtifactRef(args.model, **ref, **names),
        out_dir=Path(args.out),
        savedmodel=ArtifactRef(args.savedmodel, **ref) if args.savedmodel else None,
        batch_sizes=_batch_sizes(args.batch_sizes),
        device=args.device,
        inputs_file=args.inputs,
        examples=args.examples,
        seed=args.seed,
        quick=args.quick,
        only=parse_factors(args.only),
        serving_batching=args.serving_batching,
        serving_session_config=args.serving_session_config,
        tolerance=Tolerance(args.atol, args.rtol),
        timing_runs=args.timing_runs,
        allow_unsafe_ops=args.allow_unsafe_ops,
        force=args.force,
        command=" ".join(["tftrace"] + [shlex.quote(a) for a in sys.argv[1:]]),
    )
    diagnosis = run_diagnosis(options, Console(stderr=True, highlight=False))
    print_diagnosis(console, diagnosis.doc, diagnosis.out_dir)
    return EXIT_OK if diagnosis else EXIT_DIVERGED


def _latency(lat: dict[str, Any] | None, basis: str) -> str:
    if not lat:
        return "—"
    return figure(lat.get("per_row_median" if basis == "per example" else "median"))


def print_diagnosis(console: Console, doc: dict[str, Any], out_dir: Any) -> None:
    """The experiment table, the skipped ones by reason, then why / prevent / cost."""
    table = Table(title="tftrace diagnose", title_justify="left")
    for column in ("experiment", "verdict", "max |Δ| out", "first divergence", "A ms", "B ms", "B vs A"):
        table.add_column(column, overflow="fold")
    colours = {"identical": "green", "within_tolerance": "yellow", "diverged": "red"}
    skipped: dict[str, list[str]] = {}
    for exp in doc["experiments"]:
        if exp["skipped"]:
            skipped.setdefault(exp["skipped"], []).append(exp["name"])
            continue
        first = exp.get("first_divergence")
        where = f"{first['node']} ({first['op']})" if first else ""
        if first and first.get("isolation"):
            where += f", {first['isolation'].replace('_', ' ')}"
        if exp.get("attribution"):
            where = f"{exp['attribution']}: " + ", ".join(exp.get("state_ops", [])[:2])
        basis = exp.get("latency_basis", "per run")
        lat = exp.get("latency_ms") or {}
        verdict = str(exp["verdict"])
        cost = "—" if exp.get("cost_pct") is None else f"{exp['cost_pct']:+.1f}%"
        cost += " /ex" if basis == "per example" and exp.get("cost_pct") is not None else ""
        table.add_row(exp["name"], f"[{colours.get(verdict, 'white')}]{verdict.replace('_', ' ')}[/]",
                      figure(exp.get("max_abs_output_diff")), where, _latency(lat.get("a"), basis),
                      _latency(lat.get("b"), basis), cost)
    console.print(table)
    for reason, names in skipped.items():
        console.print(f"skipped ({reason}): {', '.join(names)}", highlight=False, markup=False)
    answers = doc["answers"]
    for title, key in (("Why", "why"), ("How to prevent it", "prevent"), ("What it costs", "cost")):
        if answers.get(key):
            console.print(f"\n[bold]{title}[/bold]")
            for line in answers[key]:
                console.print(f" • {line}", highlight=False, markup=False)
    if doc.get("report_experiment"):
        where = f"diagnosis.json, report.html and report.md in {out_dir} (the report shows {doc['report_experiment']})"
    else:
        where = f"diagnosis.json in {out_dir} (no comparison ran, so there is no report.html)"
    console.print(f"\n{where}", highlight=False, markup=False)
