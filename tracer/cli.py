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
from .errors import EXIT_DIVERGED, EXIT_ERROR, EXIT_OK, TftraceError
from .text import printable

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
    from .artifacts.loader import ArtifactRef  # noqa: PLC0415

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
    from .diff.static import diff_artifacts  # noqa: PLC0415

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


def _add_side_options(parser: argparse.ArgumentParser, prefix: str = "", who: str = "") -> None:
    """Every capture knob, once per side (``--a-onednn``) or unprefixed for ``capture``."""
    d = prefix.replace("-", "_")
    add = parser.add_argument
    add(f"--{prefix}device", dest=f"{d}device", default=None, help=f"cpu, gpu or gpu:N{who} (default cpu)")
    add(f"--{prefix}batch-size", dest=f"{d}batch_size", type=int, default=None,
        help=f"examples per run{who} (default: all examples in one run)")
    add(f"--{prefix}onednn", dest=f"{d}onednn", choices=("on", "off", "default"), default=None,
        help=f"TF_ENABLE_ONEDNN_OPTS{who} (default: inherit; TF's default depends on the CPU)")
    add(f"--{prefix}autotune", dest=f"{d}autotune", choices=("on", "off", "default"), default=None,
        help=f"TF_CUDNN_USE_AUTOTUNE{who}")
    add(f"--{prefix}determinism", dest=f"{d}determinism", action="store_true", default=None,
        help=f"tf.config.experimental.enable_op_determinism(){who}")
    add(f"--{prefix}tf32", dest=f"{d}tf32", choices=("on", "off", "default"), default=None,
        help=f"TensorFloat-32 on Ampere+ GPUs{who}")
    add(f"--{prefix}xla", dest=f"{d}xla", choices=("on", "off", "default"), default=None,
        help=f"XLA auto-clustering{who}")
    add(f"--{prefix}threads", dest=f"{d}threads", default=None, help=f"INTRA[,INTER] op threads{who}")
    add(f"--{prefix}grappler", dest=f"{d}grappler", default=None,
        help=f"Grappler options KEY=on|off,...{who} (remapping, layout_optimizer, constant_folding, "
             "arithmetic_optimization, auto_mixed_precision, auto_mixed_precision_onednn_bfloat16, disable_meta_optimizer)")
    add(f"--{prefix}session-config", dest=f"{d}session_config", default=None,
        help=f"a text ConfigProto{who}, as TF Serving's --tensorflow_session_config_file")
    add(f"--{prefix}env", dest=f"{d}env", action="append", default=None, metavar="KEY=VALUE",
        help=f"any other environment variable{who} (repeatable)")
    add(f"--{prefix}timeout", dest=f"{d}timeout", type=float, default=None, help=f"seconds before the child is stopped{who}")


def _add_input_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--inputs", default=None, help="an .npz (keys = signature input keys) or .npy (one-input model)")
    parser.add_argument("--examples", type=int, default=8, help="how many examples to generate (default 8)")
    parser.add_argument("--seed", type=int, default=0, help="seed of generated inputs (default 0)")
    parser.add_argument("--timing-runs", type=int, default=1,
                        help="timed plain runs after the warm-up; their median is the latency the report shows "
                             "(default 1; tftrace diagnose measures costs with its own)")
    parser.add_argument("--max-memory", type=int, default=2 << 30,
                        help="bytes fetched per session.run before the fetch set is split, as measured on the "
                             "inputs; also the most a checkpoint's weights may take (default 2 GiB)")
    parser.add_argument("--force", action="store_true",
                        help="replace what tftrace wrote in an existing output directory (never other files)")
    parser.add_argument("--allow-unsafe-ops", action="store_true",
                        help="run graphs that read/write files or call Python (refused by default: models come from others)")
    parser.add_argument("--keep-weights", action="store_true",
                        help="store the variables' values in the capture too (by default a large variable restored "
                             "from the checkpoint keeps only a digest; differing values are read back from the model)")


def side_from_args(args: argparse.Namespace, path: str, side: str = ""):  # noqa: ANN201
    """Build a Side from the shared options and the per-side overrides."""
    from .runspec import InputSpec, Knobs, Side, parse_grappler  # noqa: PLC0415

    def pick(name: str, default=None):  # noqa: ANN001, ANN202
        specific = getattr(args, f"{side}_{name}", None) if side else None
        value = specific if specific is not None else getattr(args, name, None)
        return default if value is None else value

    threads = None
    if pick("threads"):
        parts = [p for p in str(pick("threads")).split(",") if p]
        try:
            numbers = [int(p) for p in parts]
        except ValueError:
            raise TftraceError(f"--threads {pick('threads')!r} is not INTRA[,INTER]", "e.g. --threads 1 or --threads 4,2") from None
        threads = (numbers[0], numbers[1] if len(numbers) > 1 else 0)
    config_path = pick("session_config")
    config_text = None
    if config_path:
        try:
            with open(config_path, encoding="utf-8") as fh:
                config_text = fh.read()
        except OSError as exc:
            raise TftraceError(f"cannot read session config {config_path}: {exc.strerror}", "check the path") from exc
    env = []
    for item in pick("env", []) or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise TftraceError(f"--env {item!r} is not KEY=VALUE", "e.g. --env TF_GPU_ALLOCATOR=cuda_malloc_async")
        env.append((key, value))
    knobs = Knobs(
        onednn=pick("onednn", "default"), autotune=pick("autotune", "default"),
        determinism=bool(pick("determinism", False)), tf32=pick("tf32", "default"), xla=pick("xla", "default"),
        threads=threads, grappler=parse_grappler(pick("grappler")), session_config_text=config_text,
        session_config_path=config_path, env=tuple(sorted(env)),
    )
    return Side(
        artifact=artifact_ref(args, path, side),
        device=pick("device", "cpu"),
        batch_size=pick("batch_size"),
        knobs=knobs,
        inputs=InputSpec(inputs_file=args.inputs, seed=args.seed, examples=args.examples),
        max_memory=args.max_memory,
        timing_runs=args.timing_runs,
        timeout_s=pick("timeout"),
        allow_unsafe_ops=bool(getattr(args, "allow_unsafe_ops", False)),
        keep_weights=bool(getattr(args, "keep_weights", False)),
    )


def _cmd_capture(args: argparse.Namespace, console: Console) -> int:
    from .captures.launcher import capture  # noqa: PLC0415

    result = capture(side_from_args(args, args.model), args.out, force=args.force, console=Console(stderr=True))
    manifest = result.manifest
    observer = manifest["observer_effect"]
    console.print(
        f"captured {len(result.tensor_names)} tensors ({len(result.uncaptured)} not capturable) of "
        f"{manifest['artifact']['location']} over {manifest['examples']['count']} example(s) "
        f"in {len(manifest['runs'])} run(s) -> {result.path}",
        highlight=False,
    )
    if observer.get("explained_by_state"):
        console.print(f"the model changes its own state on every run ({', '.join(observer['stateful_ops'][:3])}): "
                      "its outputs differ from run to run because of that state, not because of observation", highlight=False)
    elif not observer["outputs_identical"]:
        console.print(f"observer effect: fetching every tensor moved the outputs by {observer['outputs_max_abs_diff']}")
    return EXIT_OK


def _tolerance(args: argparse.Namespace):  # noqa: ANN202
    from .comparison.divergence import Tolerance  # noqa: PLC0415

    overrides = []
    for item in args.tol or []:
        name, sep, values = item.rpartition("=")
        parts = values.split(",")
        try:
            if not sep or len(parts) != 2:
                raise ValueError
            overrides.append((name, float(parts[0]), float(parts[1])))
        except ValueError:
            raise TftraceError(f"--tol {item!r} is not NAME=ATOL,RTOL", "e.g. --tol dense/MatMul=1e-4,1e-3") from None
    return Tolerance(args.atol, args.rtol, tuple(overrides))


def _signature_map(text: str | None) -> dict[str, str]:
    mapping = {}
    for item in _split(text):
        a, sep, b = item.partition("=")
        if not sep:
            raise TftraceError(f"--map item {item!r} is not A_KEY=B_KEY", "e.g. --map y=output")
        mapping[a] = b
    return mapping


def _cmd_compare(args: argparse.Namespace, console: Console) -> int:
    from .comparison.pipeline import compare  # noqa: PLC0415
    from .report.terminal import print_comparison  # noqa: PLC0415

    result = compare(
        side_from_args(args, args.a, "a") if not _is_capture_dir(args.a) else args.a,
        side_from_args(args, args.b, "b") if not _is_capture_dir(args.b) else args.b,
        args.out,
        tolerance=_tolerance(args),
        isolate=args.isolate,
        force=args.force,
        console=Console(stderr=True),
        command=_command_line(),
        signature_map=_signature_map(args.map),
        repeat=args.repeat,
        allow_unsafe_ops=args.allow_unsafe_ops,
        keep_captures=args.keep_captures,
    )
    print_comparison(console, result.report, result.out_dir)
    _print_report_size(console, result)
    _print_notices(result.notices)
    return EXIT_OK if result else EXIT_DIVERGED


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
    console.print(f"Report directory: {out} ({directory_size(out) / 1e6:.1f} MB: {what})", highlight=False,
                  markup=False)


def _cmd_report(args: argparse.Namespace, console: Console) -> int:
    from pathlib import Path  # noqa: PLC0415

    from .comparison.pipeline import load_report  # noqa: PLC0415
    from .report.build import write_reports  # noqa: PLC0415
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
    return EXIT_OK if report.get("verdict") != "diverged" else EXIT_DIVERGED


def _cmd_isolate(args: argparse.Namespace, console: Console) -> int:
    from pathlib import Path  # noqa: PLC0415

    from .comparison.pipeline import load_report  # noqa: PLC0415
    from .comparison.isolate import isolate_remote  # noqa: PLC0415
    from .report.build import merge_isolation, write_reports  # noqa: PLC0415
    from .report.terminal import print_comparison  # noqa: PLC0415
    from .safewrite import lock_directory  # noqa: PLC0415

    report = load_report(args.from_dir)
    with lock_directory(Path(args.from_dir), "report"):  # its work/ and report files: one run at a time
        results = isolate_remote(args.model, args.from_dir, args.side, console=Console(stderr=True),
                                 allow_unsafe_ops=args.allow_unsafe_ops, max_memory=args.max_memory)
        report = merge_isolation(report, results)
        written = write_reports(report, Path(args.from_dir))
    print_comparison(console, report, args.from_dir)
    _print_notices(written.get("notices", []))
    return EXIT_OK if report.get("verdict") != "diverged" else EXIT_DIVERGED


def _print_notices(notices: list[str]) -> None:
    for notice in notices:
        print(f"tftrace: note: {notice}", file=sys.stderr)


def _is_capture_dir(path: str) -> bool:
    import os  # noqa: PLC0415

    return os.path.isfile(os.path.join(path, "manifest.json"))


def _command_line() -> str:
    import shlex  # noqa: PLC0415

    return " ".join(["tftrace"] + [shlex.quote(a) for a in sys.argv[1:]])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tftrace",
        description="Find where two runs of a TensorFlow model start to give different numbers, and why.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    parser.add_argument("--version", action="version", version=f"tftrace {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    diff = sub.add_parser("diff-graph", help="list the rewrites between two artifacts' inference graphs (static)")
    diff.add_argument("a", help="artifact A: checkpoint dir/prefix, SavedModel dir, or .pb/.pbtxt GraphDef")
    diff.add_argument("b", help="artifact B")
    diff.add_argument("--json", action="store_true", help="print the machine-readable diff (DESIGN.md contract)")
    diff.add_argument("--allow-unsafe-ops", action="store_true",
                      help="load a TF2 SavedModel whose loading runs ops with outside effects (TF1 graphs never run here)")
    _add_artifact_options(diff)
    _add_artifact_options(diff, "a-", " of A")
    _add_artifact_options(diff, "b-", " of B")
    diff.set_defaults(func=_cmd_diff_graph)

    cap = sub.add_parser("capture", help="run one side and record every intermediate tensor into a directory")
    cap.add_argument("model", help="the artifact to run")
    cap.add_argument("--out", required=True, help="the capture directory to write")
    _add_artifact_options(cap)
    _add_side_options(cap)
    _add_input_options(cap)
    cap.set_defaults(func=_cmd_capture)

    cmp_ = sub.add_parser("compare", help="find the op where two sides first diverge; write report.json/.html/.md")
    cmp_.add_argument("a", help="side A: an artifact or a capture directory")
    cmp_.add_argument("b", help="side B: an artifact or a capture directory")
    cmp_.add_argument("--out", default="tftrace-report", help="report directory (default ./tftrace-report)")
    cmp_.add_argument("--atol", type=float, default=1e-6, help="absolute tolerance (default 1e-6)")
    cmp_.add_argument("--rtol", type=float, default=1e-5,
                      help="relative tolerance (default 1e-5, ~80 float32 ulps: above summation-order noise)")
    cmp_.add_argument("--tol", action="append", metavar="NAME=ATOL,RTOL", help="per-op/tensor tolerance (repeatable)")
    cmp_.add_argument("--isolate", type=int, default=5, help="replay the top N origins alone (default 5; 0 = off)")
    cmp_.add_argument("--map", default=None, help="pair signature keys that differ: A_KEY=B_KEY[,...]")
    cmp_.add_argument("--keep-captures", action="store_true",
                      help="keep the sides captured here in OUT/captures (by default only what the report and "
                           "tftrace isolate --from need is kept: a report small enough to attach)")
    cmp_.add_argument("--repeat", type=int, default=1,
                      help="run each side K times (fresh processes) to measure its own noise; noise is never an origin")
    _add_artifact_options(cmp_)
    for prefix, who in (("a-", " of A"), ("b-", " of B")):
        _add_artifact_options(cmp_, prefix, who)
        _add_side_options(cmp_, prefix, who)
    _add_side_options(cmp_)
    _add_input_options(cmp_)
    cmp_.set_defaults(func=_cmd_compare)

    iso = sub.add_parser("isolate", help="replay a report's origin ops on this machine (the side whose model is here)")
    iso.add_argument("model", help="this machine's copy of the side's model")
    iso.add_argument("--from", dest="from_dir", required=True,
                     help="the report directory (copied here whole: it carries the A tensors the replays are fed)")
    iso.add_argument("--side", choices=("a", "b"), default=None, help="which side to replay (default: the pending one)")
    iso.add_argument("--allow-unsafe-ops", action="store_true",
                     help="let the replay run ops with outside effects (never taken from the report or its captures)")
    iso.add_argument("--max-memory", type=int, default=None,
                     help="bytes the replay may fetch at once (default 2 GiB; a received report can only lower it)")
    iso.set_defaults(func=_cmd_isolate)

    from .diagnosis.cli import add_diagnose_parser  # noqa: PLC0415 - parsers only, no TensorFlow

    add_diagnose_parser(sub)

    rep = sub.add_parser("report", help="re-render report.html/.md from a report directory's report.json")
    rep.add_argument("dir", help="a directory written by tftrace compare (or its report.json)")
    rep.set_defaults(func=_cmd_report)
    for command in sub.choices.values():  # `tftrace compare ... --debug` works as well as `tftrace --debug compare`
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks of errors")
    return parser


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
