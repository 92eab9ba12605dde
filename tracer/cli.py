"""Command line: parse arguments, call the public API, map outcomes to exit codes.

0 = no divergence beyond tolerance, 1 = divergence found, 2 = the input is wrong or the run
failed (one line naming the fix; the traceback only with --debug).
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from collections.abc import Sequence

from rich.console import Console

from .errors import EXIT_ERROR, EXIT_OK, TftraceError

__all__ = ["main", "build_parser"]


def _split(text: str | None) -> tuple[str, ...]:
    return tuple(p.strip() for p in (text or "").split(",") if p.strip())


def _add_artifact_options(parser: argparse.ArgumentParser, prefix: str = "", who: str = "") -> None:
    dest = prefix.replace("-", "_")
    parser.add_argument(f"--{prefix}tag", dest=f"{dest}tag", default=None,
                        help=f"SavedModel tag set{who}, comma-separated (default: serve)")
    parser.add_argument(f"--{prefix}signature", dest=f"{dest}signature", default=None,
                        help=f"signature key{who} (default: serving_default)")
    parser.add_argument(f"--{prefix}outputs", dest=f"{dest}outputs", default=None,
                        help=f"tensors to trace{who} when the graph has no signature: NAME[,NAME...]")
    parser.add_argument(f"--{prefix}input-names", dest=f"{dest}input_names", default=None,
                        help=f"tensors fed{who} when the graph has no signature: NAME[,NAME...]")


def artifact_ref(args: argparse.Namespace, path: str, side: str = ""):  # noqa: ANN201 - avoids importing at parse time
    """An ArtifactRef from shared options, overridden by the per-side ones (``--a-tag``)."""
    from .artifacts import ArtifactRef  # noqa: PLC0415

    def pick(name: str) -> str | None:
        specific = getattr(args, f"{side}_{name}", None) if side else None
        return specific if specific is not None else getattr(args, name, None)

    return ArtifactRef(
        path=path,
        tag=pick("tag") or "serve",
        signature=pick("signature") or "serving_default",
        outputs=_split(pick("outputs")),
        input_names=_split(pick("input_names")),
    )


def _cmd_diff_graph(args: argparse.Namespace, console: Console) -> int:
    from .report.terminal import print_graph_diff  # noqa: PLC0415
    from .static_diff import diff_artifacts  # noqa: PLC0415

    result = diff_artifacts(artifact_ref(args, args.a, "a"), artifact_ref(args, args.b, "b"))
    if args.json:
        print(json.dumps(result.diff.to_json(), indent=2))
    else:
        print_graph_diff(console, result.diff, result.a.describe(), result.b.describe())
        for side, art in (("A", result.a), ("B", result.b)):
            for note in art.notes:
                console.print(f"note ({side}): {note}", highlight=False)
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tftrace",
        description="Find where two runs of a TensorFlow model start to give different numbers, and why.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    diff = sub.add_parser("diff-graph", help="list the rewrites between two artifacts' inference graphs (static)")
    diff.add_argument("a", help="artifact A: checkpoint dir/prefix, SavedModel dir, or .pb/.pbtxt GraphDef")
    diff.add_argument("b", help="artifact B")
    diff.add_argument("--json", action="store_true", help="print the machine-readable diff (DESIGN.md contract)")
    _add_artifact_options(diff)
    _add_artifact_options(diff, "a-", " of A")
    _add_artifact_options(diff, "b-", " of B")
    diff.set_defaults(func=_cmd_diff_graph)
    return parser


def _error(line: str) -> None:
    """Errors go to stderr as one unwrapped line, so scripts and CI logs can grep them."""
    print(line.replace("\n", " "), file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    console = Console(stderr=False, highlight=False)
    try:
        return int(args.func(args, console))
    except TftraceError as exc:
        if args.debug:
            traceback.print_exc()
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
