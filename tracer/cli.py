"""Command line: parse arguments, call the public API, map outcomes to exit codes.

0 = no divergence beyond tolerance, 1 = divergence found, 2 = the input is wrong or the run
failed (one line naming the fix; the traceback only with --debug).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import traceback
from collections.abc import Sequence
from typing import Any

from rich.console import Console

from . import __version__
from .artifacts.lowered_folder import shared_lowering
from .console import terminal
from .comparison.statuses import verdict_exit_code
from .errors import EXIT_ERROR, EXIT_OK, TftraceError
from .text import count, printable

__all__ = ["main", "build_parser"]


def artifact_ref(args: argparse.Namespace, path: str, side: str = ""):  # noqa: ANN201 - avoids importing at parse time
    """An ArtifactRef from the shared options, overridden by the per-side ones (``--a-tag``)."""
    from .options import artifact_ref as ref, values_from_args  # noqa: PLC0415

    return ref(path, values_from_args(args, args.command, side))


def _cmd_diff_graph(args: argparse.Namespace, console: Console) -> int:
    from .report.terminal import print_graph_diff  # noqa: PLC0415
    from .comparison.static import diff_artifacts  # noqa: PLC0415

    _refuse_missing_paths(a=args.a, b=args.b)
    result = diff_artifacts(artifact_ref(args, args.a, "a"), artifact_ref(args, args.b, "b"),
                            allow_unsafe_ops=args.allow_unsafe_ops)
    if args.json:
        print(json.dumps(result.diff.to_json(), indent=2))
    else:
        print_graph_diff(console, result.diff, result.a.describe(), result.b.describe())
        for side, art in (("A", result.a), ("B", result.b)):
            for note in art.notes:
                console.print(printable(f"note ({side}): {note}"), highlight=False, markup=False)
    return EXIT_OK


def side_from_args(args: argparse.Namespace, path: str, side: str = ""):  # noqa: ANN201
    """A Side from the shared options and the per-side overrides (``--a-batch-size``)."""
    from .options import build_side, values_from_args  # noqa: PLC0415

    return build_side(path, values_from_args(args, args.command, side))


def _cmd_capture(args: argparse.Namespace, console: Console) -> int:
    from .captures.launcher import capture  # noqa: PLC0415

    if (args.model is None) == (args.model_dir is None):
        raise TftraceError("tftrace capture takes one model: MODEL or --dir MODEL",
                           "e.g. tftrace capture savedmodel/ --out cap")
    args.model = args.model or args.model_dir
    _refuse_missing_paths(model=args.model)
    _refuse_unreadable_remote(args, model=args.model)
    result = capture(side_from_args(args, args.model), args.out, force=args.force, console=terminal(stderr=True))
    observer = result.observer
    console.print(
        f"captured {len(result.tensor_names)} tensors ({len(result.uncaptured)} not capturable) of "
        f"{result.artifact.get('location')} over {count(result.examples.count, 'example')} "
        f"in {count(len(result.runs), 'run')} -> {result.path}",
        highlight=False,
    )
    if observer.explained_by_state:
        console.print(f"the model changes its own state on every run ({', '.join(observer.stateful_ops[:3])}): "
                      "its outputs differ from run to run because of that state, not because of observation", highlight=False)
    elif not observer.outputs_identical:
        _print_observer_effect(result, console)
    return EXIT_OK


def _print_observer_effect(result: Any, console: Console) -> None:
    """What fetching every tensor moved, as a compare's report says it: a detector's outputs (recognised
    by their keys) between the detections the plain and instrumented runs matched, the capture
    manifest's index-by-index figure beside; NMS listing near-tied detections in another order reads,
    index by index, as a box moved by its size."""
    from .comparison.detections import recognise  # noqa: PLC0415
    from .comparison.list_runs import observed_detections  # noqa: PLC0415
    from .report.build import observer_effect_entry  # noqa: PLC0415
    from .report.detections_view import observer_note  # noqa: PLC0415
    from .report.numbers import per_key  # noqa: PLC0415

    entry = observer_effect_entry(result.manifest.get("observer_effect") or {},
                                  observed_detections(result, recognise(list(result.outputs))), {})
    note = observer_note(entry)
    console.print(f"observer effect: fetching every tensor moved the outputs by "
                  f"{per_key(dict(entry.get('outputs_max_abs_diff') or {}))}{f'; {note}' if note else ''}",
                  highlight=False, markup=False)


def _cmd_compare(args: argparse.Namespace, console: Console) -> int:
    from .captures.progress_view import working  # noqa: PLC0415
    from .comparison.pipeline import comparing  # noqa: PLC0415
    from .options import compare_settings, values_from_args  # noqa: PLC0415
    from .report.build import report_comparison  # noqa: PLC0415
    from .report.terminal import print_comparison  # noqa: PLC0415

    _refuse_missing_paths(a=args.a, b=args.b)
    _refuse_unreadable_remote(args, a=args.a, b=args.b)
    progress = terminal(stderr=True)
    with comparing(
        side_from_args(args, args.a, "a") if not _is_capture_dir(args.a) else args.a,
        side_from_args(args, args.b, "b") if not _is_capture_dir(args.b) else args.b,
        args.out,
        force=args.force,
        console=progress,
        command=_command_line(),
        read_memory=args.max_memory,  # also bounds decoding a capture directory given as a side
        **compare_settings(values_from_args(args, "compare")),
    ) as result, working(progress, "compare", "writing report.json, report.md and report.html"):
        report_comparison(result)
    print_comparison(console, result.report, result.out_dir)
    _print_report_size(console, result)
    _print_notices(result.notices)
    return verdict_exit_code(result.verdict)


def _refuse_missing_paths(**paths: str) -> None:
    """Every side's path checked before any model loads or child starts (``a``/``b`` name the side):
    it exists, and a checkpoint there has a graph to run."""
    from .artifacts.kinds import refuse_graphless_local, refuse_missing_local  # noqa: PLC0415 - TF-free locally

    for side, path in paths.items():
        refuse_missing_local(path, side if side in ("a", "b") else "")
        refuse_graphless_local(path)


def _refuse_unreadable_remote(args: argparse.Namespace, **paths: str) -> None:
    """A side on another filesystem (``gs://``) read before anything is captured, in a short child
    of the interpreter the side runs in: a checkpoint without its graph, or a URL this machine
    cannot read, refused as a local path would be (capture directories are read here anyway)."""
    from .artifacts.remote import is_remote, refuse_unreadable_remote  # noqa: PLC0415
    from .options import values_from_args  # noqa: PLC0415

    for side, path in paths.items():
        if is_remote(path):
            side = side if side in ("a", "b") else ""
            refuse_unreadable_remote(path, side, values_from_args(args, args.command, side).get("python"))


def _print_report_size(console: Console, result: Any) -> None:
    """The size of what --out holds, and whether the sides captured for it are in it."""
    from .comparison.pipeline import directory_size  # noqa: PLC0415

    out = result.out_dir
    if (out / "captures").is_dir():
        what = "the sides captured here kept in captures/"
    elif all(result.kept_captures.values()):
        what = "what the report and tftrace isolate --from need"
    else:
        what = "what the report and tftrace isolate --from need; --keep-captures keeps the captures too"
    from .report.terminal import say  # noqa: PLC0415

    say(console, f"Report directory: {out} ({directory_size(out) / 1e6:.1f} MB: {what})")


def _cmd_report(args: argparse.Namespace, console: Console) -> int:
    from pathlib import Path  # noqa: PLC0415

    from .report.build import write_reports  # noqa: PLC0415
    from .report.contract import load_report  # noqa: PLC0415
    from .report.terminal import print_comparison  # noqa: PLC0415
    from .safewrite import lock_directory  # noqa: PLC0415

    out = Path(args.dir) if Path(args.dir).is_dir() else Path(args.dir).parent
    if not out.is_dir():
        load_report(args.dir)  # says what is wrong with the path
    with lock_directory(out, "report"):  # a run writing there finishes first; planted links are refused
        report = load_report(args.dir)
        written = write_reports(report, out)
    print_comparison(console, report, out)
    _print_notices(written.get("notices", []))
    return verdict_exit_code(report.get("verdict"))


def _cmd_isolate(args: argparse.Namespace, console: Console) -> int:
    from pathlib import Path  # noqa: PLC0415

    from .comparison.isolate import isolate_remote  # noqa: PLC0415
    from .report.build import merge_isolation, write_reports  # noqa: PLC0415
    from .report.contract import load_report  # noqa: PLC0415
    from .report.terminal import print_comparison  # noqa: PLC0415
    from .safewrite import lock_directory  # noqa: PLC0415

    report = load_report(args.from_dir)
    with lock_directory(Path(args.from_dir), "report"):  # its work/ and report files: one run at a time
        results = isolate_remote(args.model, args.from_dir, args.side, console=terminal(stderr=True),
                                 allow_unsafe_ops=args.allow_unsafe_ops, max_memory=args.max_memory,
                                 python=args.python)
        report = merge_isolation(report, results)
        written = write_reports(report, Path(args.from_dir))
    print_comparison(console, report, args.from_dir)
    _print_notices(written.get("notices", []))
    return verdict_exit_code(report.get("verdict"))


def _print_notices(notices: list[str]) -> None:
    for notice in notices:
        print(f"tftrace: note: {notice}", file=sys.stderr)


def _is_capture_dir(path: str) -> bool:
    from .captures.reader import is_capture_dir  # noqa: PLC0415

    return is_capture_dir(path)


def _command_line() -> str:
    import shlex  # noqa: PLC0415

    return " ".join(["tftrace"] + [shlex.quote(a) for a in sys.argv[1:]])


def build_parser() -> argparse.ArgumentParser:
    """tftrace's parser: the positional arguments here, every option from :mod:`tracer.options`."""
    from .options import add_options  # noqa: PLC0415

    parser = argparse.ArgumentParser(
        prog="tftrace",
        description="Find where two runs of a TensorFlow model start to give different numbers, and why.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    parser.add_argument("--version", action="version", version=f"tftrace {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    diff = sub.add_parser("diff-graph", help="list the rewrites between two artifacts' inference graphs (static)",
                          usage="%(prog)s A B [options]", description=DIFF_GRAPH_DESCRIPTION,
                          epilog=DIFF_GRAPH_EPILOG, formatter_class=HelpFormatter)
    diff.add_argument("a", help="artifact A: checkpoint dir/prefix, SavedModel dir, or .pb/.pbtxt GraphDef")
    diff.add_argument("b", help="artifact B")
    add_options(diff, "diff-graph")
    diff.set_defaults(func=_cmd_diff_graph)

    cap = sub.add_parser("capture", help="run one side and record every intermediate tensor into a directory",
                         usage="%(prog)s MODEL --out DIR [options]", description=CAPTURE_DESCRIPTION,
                         epilog=CAPTURE_EPILOG, formatter_class=HelpFormatter)
    cap.add_argument("model", nargs="?", help="the artifact to run (or --dir, as saved_model_cli names it)")
    cap.add_argument("--dir", dest="model_dir", metavar="MODEL", help=argparse.SUPPRESS)
    add_options(cap, "capture")
    cap.set_defaults(func=_cmd_capture)

    cmp_ = sub.add_parser("compare", help="find the op where two sides first diverge; write report.json/.html/.md",
                          usage="%(prog)s A B [options]", description=COMPARE_DESCRIPTION, epilog=COMPARE_EPILOG,
                          formatter_class=HelpFormatter)
    cmp_.add_argument("a", help="side A: an artifact or a capture directory")
    cmp_.add_argument("b", help="side B: an artifact or a capture directory")
    add_options(cmp_, "compare")
    cmp_.set_defaults(func=_cmd_compare)

    iso = sub.add_parser("isolate", help="replay a report's origin ops on this machine (the side whose model is here)")
    iso.add_argument("model", help="this machine's copy of the side's model")
    iso.add_argument("--from", dest="from_dir", required=True,
                     help="the report directory (copied here whole: it carries the A tensors the replays are fed)")
    iso.add_argument("--side", choices=("a", "b"), default=None, help="which side to replay (default: the pending one)")
    add_options(iso, "isolate")
    iso.set_defaults(func=_cmd_isolate)

    from .diagnosis.cli import add_diagnose_parser  # noqa: PLC0415 - parsers only, no TensorFlow

    add_diagnose_parser(sub)

    rep = sub.add_parser("report", help="re-render report.html/.md from a report directory's report.json")
    rep.add_argument("dir", help="a directory written by tftrace compare (or its report.json)")
    rep.set_defaults(func=_cmd_report)
    for command in sub.choices.values():  # `tftrace compare ... --debug` works as well as `tftrace --debug compare`
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks of errors")
    return parser


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, except that a paragraph of indented lines (examples, exit codes) or
    one under a ``title:`` line keeps its lines; prose paragraphs are wrapped to the terminal."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap  # noqa: PLC0415

        paragraphs = []
        for paragraph in text.split("\n\n"):
            lines = paragraph.splitlines()
            if any(line.startswith(" ") for line in lines) or (lines and lines[0].endswith(":")):
                paragraphs.append("\n".join(indent + line for line in lines))
            else:
                paragraphs.append(textwrap.fill(" ".join(paragraph.split()), width, initial_indent=indent,
                                                subsequent_indent=indent))
        return "\n\n".join(paragraphs)


EXIT_CODES = """exit codes:
  0  no difference beyond tolerance (or each within the noise --repeat measured)
  1  the sides diverge beyond tolerance
  2  bad input or a failed run: one line on stderr says what and how to fix it
     (--debug adds the traceback)"""
COMPARE_DESCRIPTION = """\
Run side A and side B (each an artifact or a capture directory) on the same examples, each in its
own process, capturing every intermediate tensor; find the op where their numbers first diverge
beyond tolerance, replay it alone on identical inputs to tell whether its own kernel differs, and
write report.json, report.html and report.md into --out. The verdict and the exit code are those
of the signature outputs of the plain runs, as production computes them."""
COMPARE_EPILOG = f"""\
examples:
  tftrace compare ckpt/ savedmodel/        # a TF1 checkpoint and its export
  tftrace compare model/ model/ --a-batch-size 1 --b-batch-size 8
  tftrace compare model/ model/ --a-onednn off --b-onednn on --out onednn
  tftrace compare cap_gpu/ savedmodel/     # cap_gpu/ captured on a GPU server

{EXIT_CODES}"""
DIFF_GRAPH_DESCRIPTION = """\
Match the two inference graphs op by op without running them and list every rewrite (batch norm
folded, casts inserted, ops fused, variables frozen, constants and attributes changed ...)."""
DIFF_GRAPH_EPILOG = """\
examples:
  tftrace diff-graph ckpt/ savedmodel/
  tftrace diff-graph model/ model_fp16/ --json > diff.json

exit codes:
  0  the graphs were compared (rewrites or none)
  2  bad input: one line on stderr says what and how to fix it
     (--debug adds the traceback)"""
CAPTURE_DESCRIPTION = """\
Run one side in a child process and record every intermediate tensor, the plain run's outputs and
the manifest (run settings, environment, op graph) into --out; tftrace compare takes the directory
as a side, on this machine or another."""
CAPTURE_EPILOG = """\
examples:
  tftrace capture savedmodel/ --out cap_gpu --device gpu
  tftrace capture --dir sm/ --tag_set serve --signature_def predict --out cap

exit codes:
  0  captured
  2  bad input or a failed run: one line on stderr says what and how to fix it
     (--debug adds the traceback)"""


def _error(line: str) -> None:
    """Errors go to stderr as one unwrapped line, so scripts and CI logs can grep them."""
    print(printable(line).replace("\n", " "), file=sys.stderr)  # an internal error's text may hold model text


def _stop_like_ctrl_c(signum: int, frame: object) -> None:
    """SIGTERM (``kill``, a CI job cancelled, systemd) ends tftrace the way Ctrl-C does: the
    child process group is stopped, nothing incomplete is marked complete, exit 2. Python's
    default would end the parent at once and leave the child running on as an orphan."""
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if threading.current_thread() is threading.main_thread():  # signal handlers live in the main thread
        signal.signal(signal.SIGTERM, _stop_like_ctrl_c)
    console = terminal(stderr=False, highlight=False)
    try:
        with shared_lowering():  # the processes of one command lower a graph once between them
            return int(args.func(args, console))
    except TftraceError as exc:
        if args.debug:
            traceback.print_exc()
            if exc.debug_detail:  # a failed child's own stack and logs, after this process's
                print(f"--- the child process's stderr (last lines) ---\n{exc.debug_detail}", file=sys.stderr)
        _error(f"tftrace: error: {exc}")
        return EXIT_ERROR
    except KeyboardInterrupt:
        _error("tftrace: interrupted; nothing incomplete was left looking complete")
        return EXIT_ERROR
    except Exception as exc:  # a bug in tftrace, not the user's fault
        if args.debug:
            traceback.print_exc()
        _error(
            f"tftrace: internal error: {type(exc).__name__}: {exc}. This is a bug in tftrace; "
            "re-run with --debug and report the traceback."
        )
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
