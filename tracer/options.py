"""Every option of tftrace's commands, declared once.

One :class:`Option` per option says its flag, help, type, default, the commands and help group
it belongs to, whether ``compare`` (or ``diff-graph``) also takes it per side (``--a-NAME`` /
``--b-NAME``), its keyword in the Python API, and where its value lands in a
:class:`~tracer.runspec.Side` (which is also its field in a capture's manifest: the manifest's
``spec`` is ``Side.to_json()``). From this table come the argparse groups of every command
(:func:`add_options`), the API's keywords and their check (:func:`check_keywords`: an unknown
one is a :class:`TftraceError` naming the known ones), and the one conversion of option values
into a Side (:func:`build_side`), used by the CLI and the API alike.

A permission (``--allow-unsafe-ops``) is passed to each run and never recorded: its
``recorded`` is False, so it has no manifest field, and a Side read back from a file never
carries it (see :meth:`tracer.runspec.Side.from_json`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import TftraceError

if TYPE_CHECKING:
    from .artifacts.loader import ArtifactRef
    from .runspec import Side

__all__ = ["Option", "OPTIONS", "GROUPS", "add_options", "side_values", "values_from_args", "build_side",
           "artifact_ref", "check_keywords", "api_keywords", "options_for", "converted", "compare_settings"]

SIDE_NAMES = {"a": " of A", "b": " of B"}


@dataclass(frozen=True)
class Option:
    """One option; see the module docstring. ``help`` may hold ``{who}`` (" of A" for ``--a-NAME``)."""

    name: str  # the flag without its dashes: "batch-size"
    help: str
    group: str  # a key of GROUPS
    commands: tuple[str, ...]
    type: Callable[[str], Any] | None = None  # argparse's type (the CLI's text -> value)
    default: Any = None
    choices: tuple[str, ...] | None = None
    flag: bool = False  # store_true
    repeat: bool = False  # append: the flag may be given again
    metavar: str | None = None
    per_side: tuple[str, ...] = ()  # commands that also take --a-NAME / --b-NAME
    keyword: str | None = ""  # the API keyword; "" = the dest; None = the CLI only
    side: str | None = None  # where the value lands in a Side ("knobs.onednn"); None = not a side's
    convert: Callable[[Any], Any] | None = None  # CLI text or API value -> what the Side holds
    recorded: bool = True  # False: a permission, passed to the child, never written to a manifest
    required: bool = False
    overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # per command: help, default
    aliases: tuple[str, ...] = ()  # other spellings of the shared flag (saved_model_cli's: "tag_set")

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    @property
    def api_keyword(self) -> str | None:
        return self.dest if self.keyword == "" else self.keyword

    @property
    def manifest_field(self) -> str | None:
        """Where a capture's manifest.json holds this value (dotted); None = never recorded."""
        return f"spec.{self.side}" if self.side and self.recorded else None

    def setting(self, command: str, key: str) -> Any:
        return self.overrides.get(command, {}).get(key, getattr(self, key))


# ---- converters: the CLI's text or the API's Python value -> what a Side holds ------------------


def names(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """``a,b`` (or a list) -> ("a", "b")."""
    parts = value.split(",") if isinstance(value, str) else list(value or ())
    return tuple(p.strip() for p in parts if p.strip())


def threads(value: str | int | Iterable[int]) -> tuple[int, int]:
    """``4,2`` / 4 / (4, 2) -> (intra, inter); 0 = TensorFlow's choice."""
    text = ",".join(map(str, value)) if not isinstance(value, (str, int)) else str(value)
    try:
        numbers = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        numbers = []
    if not 1 <= len(numbers) <= 2:
        raise TftraceError(f"--threads {text!r} is not INTRA[,INTER]", "e.g. --threads 1 or --threads 4,2")
    return numbers[0], numbers[1] if len(numbers) > 1 else 0


def grappler(value: str | Mapping[str, str] | Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """``remapping=off,...`` or {"remapping": "off"} -> sorted pairs (checked by Knobs)."""
    from .runspec import parse_grappler  # noqa: PLC0415

    if isinstance(value, str):
        return parse_grappler(value)
    return tuple(sorted(dict(value).items()))


def env(value: Iterable[str] | Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """[``KEY=VALUE``, ...] or {KEY: VALUE} -> sorted pairs."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), str(v)) for k, v in value.items()))
    pairs = []
    for item in [value] if isinstance(value, str) else value:
        if isinstance(item, tuple):
            pairs.append(item)
            continue
        key, sep, val = str(item).partition("=")
        if not sep or not key:
            raise TftraceError(f"--env {item!r} is not KEY=VALUE", "e.g. --env TF_GPU_ALLOCATOR=cuda_malloc_async")
        pairs.append((key, val))
    return tuple(sorted(pairs))


def signature_map(value: str | Mapping[str, str]) -> dict[str, str]:
    """``y=output,...`` or {"y": "output"} -> {A key: B key}."""
    if isinstance(value, Mapping):
        return dict(value)
    mapping = {}
    for item in names(value):
        a, sep, b = item.partition("=")
        if not sep:
            raise TftraceError(f"--map item {item!r} is not A_KEY=B_KEY", "e.g. --map y=output")
        mapping[a] = b
    return mapping


def tolerances(value: Iterable[str] | Mapping[str, tuple[float, float]]) -> tuple[tuple[str, float, float], ...]:
    """[``NAME=ATOL,RTOL``, ...] or {NAME: (atol, rtol)} -> (name, atol, rtol) overrides."""
    if isinstance(value, Mapping):
        return tuple((name, float(a), float(r)) for name, (a, r) in value.items())
    overrides = []
    for item in [value] if isinstance(value, str) else value:
        name, sep, numbers = item.rpartition("=")
        parts = numbers.split(",")
        try:
            if not sep or len(parts) != 2:
                raise ValueError
            overrides.append((name, float(parts[0]), float(parts[1])))
        except ValueError:
            raise TftraceError(f"--tol {item!r} is not NAME=ATOL,RTOL", "e.g. --tol dense/MatMul=1e-4,1e-3") from None
    return tuple(overrides)


def detection_spec(value: str | Mapping[str, Any]) -> dict[str, Any] | None:
    """``boxes=KEY,scores=KEY,...`` or {"boxes": KEY, ...} -> the checked spec (see tracer.comparison.detections)."""
    from .comparison.detections import parse_spec  # noqa: PLC0415

    return parse_spec(value)


def batch_sizes(value: str | Iterable[int]) -> tuple[int, ...]:
    """``1,8`` or (1, 8) -> (1, 8); positive integers (checked with the other inputs by diagnose)."""
    text = value if isinstance(value, str) else ",".join(map(str, value))
    try:
        sizes = tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise TftraceError(f"--batch-sizes {text!r} is not a list of integers", "e.g. --batch-sizes 1,8") from None
    if not sizes:
        raise TftraceError("--batch-sizes is empty", "e.g. --batch-sizes 1,8")
    return sizes


# ---- the table -----------------------------------------------------------------------------------

GROUPS = {
    "artifact": "artifact: which graph of the model runs",
    "side": "run settings: device, batch and the knobs that change numbers",
    "inputs": "inputs: the examples fed to the model",
    "limits": "capture: memory, timing and time limits",
    "compare": "comparison: tolerances, isolation, report",
    "diagnose": "experiment matrix",
    "output": "output",
    "permissions": "permissions (given to this run only, never recorded in a capture or report)",
    "per_side": "side A or B only",
}
PER_SIDE_MARK = " [A/B]"  # ends the help of an option that also takes --a-NAME / --b-NAME
PER_SIDE_HELP = ("Every option marked [A/B] also takes the form --a-NAME or --b-NAME, which sets it for side A or "
                 "B only, in place of --NAME (e.g. --a-batch-size 1 --b-batch-size 8).")
SIDE_COMMANDS = ("capture", "compare")
ARTIFACT_COMMANDS = ("diff-graph", "capture", "compare", "diagnose")
TRI = ("on", "off", "default")

OPTIONS: tuple[Option, ...] = (
    # -- artifact: which graph (compare and diff-graph also per side)
    Option("tag", "SavedModel tag set{who}, comma-separated (default: serve)", "artifact", ARTIFACT_COMMANDS,
           per_side=("compare", "diff-graph"), side="artifact.tag", aliases=("tag_set",)),
    Option("signature", "signature key{who} (default: serving_default)", "artifact", ARTIFACT_COMMANDS,
           per_side=("compare", "diff-graph"), side="artifact.signature", aliases=("signature_def",)),
    Option("outputs", "tensors to trace{who} when the graph has no signature: NAME[,NAME...]", "artifact",
           ARTIFACT_COMMANDS, per_side=("compare", "diff-graph"), side="artifact.outputs", convert=names,
           overrides={"diagnose": {"help": "tensors of MODEL to trace when it has no signature: NAME[,NAME...] (a "
                                           "checkpoint given with --savedmodel borrows the SavedModel's signature "
                                           "without them)"}}),
    Option("input-names", "tensors fed{who} when the graph has no signature: NAME[,NAME...]", "artifact",
           ARTIFACT_COMMANDS, per_side=("compare", "diff-graph"), side="artifact.input_names", convert=names),
    Option("savedmodel", "the SavedModel exported from MODEL (adds checkpoint vs SavedModel)", "artifact",
           ("diagnose",)),
    # -- how a side runs
    Option("device", "cpu, gpu or gpu:N{who} (default cpu)", "side", (*SIDE_COMMANDS, "diagnose"),
           per_side=("compare",), side="device",
           overrides={"diagnose": {"help": "cpu, gpu or gpu:N for the base side (default cpu)", "default": "cpu"}}),
    Option("batch-size", "examples per run{who} (default: all examples in one run)", "side", SIDE_COMMANDS,
           type=int, per_side=("compare",), side="batch_size"),
    Option("onednn", "TF_ENABLE_ONEDNN_OPTS{who} (default: inherit; TF's default depends on the CPU)", "side",
           SIDE_COMMANDS, choices=TRI, per_side=("compare",), side="knobs.onednn"),
    Option("autotune", "TF_CUDNN_USE_AUTOTUNE{who}", "side", SIDE_COMMANDS, choices=TRI, per_side=("compare",),
           side="knobs.autotune"),
    Option("determinism", "tf.config.experimental.enable_op_determinism(){who}", "side", SIDE_COMMANDS, flag=True,
           per_side=("compare",), side="knobs.determinism", convert=bool),
    Option("tf32", "TensorFloat-32 on Ampere+ GPUs{who}", "side", SIDE_COMMANDS, choices=TRI, per_side=("compare",),
           side="knobs.tf32"),
    Option("xla", "XLA auto-clustering{who}", "side", SIDE_COMMANDS, choices=TRI, per_side=("compare",),
           side="knobs.xla"),
    Option("threads", "INTRA[,INTER] op threads{who}", "side", SIDE_COMMANDS, per_side=("compare",),
           side="knobs.threads", convert=threads),
    Option("grappler", "Grappler options KEY=on|off,...{who} (remapping, layout_optimizer, constant_folding, "
           "arithmetic_optimization, auto_mixed_precision, auto_mixed_precision_onednn_bfloat16, "
           "disable_meta_optimizer)", "side", SIDE_COMMANDS, per_side=("compare",), side="knobs.grappler",
           convert=grappler),
    Option("session-config", "a text ConfigProto file{who}, as TF Serving's --tensorflow_session_config_file",
           "side", SIDE_COMMANDS, per_side=("compare",), side="knobs.session_config_path", metavar="FILE"),
    Option("env", "any other environment variable{who} (repeatable)", "side", SIDE_COMMANDS, repeat=True,
           metavar="KEY=VALUE", per_side=("compare",), side="knobs.env", convert=env),
    Option("python", "the Python interpreter that runs the side{who}: another environment's TensorFlow (a release, "
           "a build; it needs tensorflow, numpy, networkx, xxhash, zstandard: `make other-tf TF=2.12.1` prepares "
           "one); never taken from a capture or report", "side", (*SIDE_COMMANDS, "isolate"), per_side=("compare",),
           metavar="PATH", side="python", recorded=False,
           overrides={"isolate": {"help": "the Python interpreter that replays the side (another environment's "
                                          "TensorFlow, as the side was captured with); never taken from the report"}}),
    Option("timeout", "seconds before the child is stopped{who}", "limits", SIDE_COMMANDS, type=float,
           per_side=("compare",), keyword="timeout_s", side="timeout_s"),
    # -- inputs (the same examples on both sides)
    Option("inputs", "an .npz (keys = signature input keys), an .npy (one-input model) or TF Serving's "
           "assets.extra/tf_serving_warmup_requests", "inputs",
           (*SIDE_COMMANDS, "diagnose"), keyword="inputs_file", side="inputs.inputs_file"),
    Option("examples", "how many examples to generate (default 8)", "inputs", (*SIDE_COMMANDS, "diagnose"), type=int,
           default=8, side="inputs.examples",
           overrides={"diagnose": {"default": None,
                                   "help": "examples to generate (default: the largest batch size, at least 2)"}}),
    Option("seed", "seed of generated inputs (default 0)", "inputs", (*SIDE_COMMANDS, "diagnose"), type=int,
           default=0, side="inputs.seed"),
    # -- capture limits
    Option("timing-runs", "timed plain runs after the warm-up; their median is the latency the report shows "
           "(default 1; tftrace diagnose measures costs with its own)", "limits", (*SIDE_COMMANDS, "diagnose"),
           type=int, default=1, side="timing_runs",
           overrides={"diagnose": {"default": None, "help": "timed plain runs per side after one warm-up (default 5 "
                                                            "with --quick, else 10)"}}),
    Option("max-memory", "bytes fetched per session.run before the fetch set is split, as measured on the inputs; "
           "also the most a checkpoint's weights may take (default 2 GiB)", "limits", (*SIDE_COMMANDS, "isolate"),
           type=int, default=2 << 30, side="max_memory",
           overrides={"isolate": {"default": None, "help": "bytes the replay may fetch at once (default 2 GiB; a "
                                                           "received report can only lower it)"}}),
    Option("part-bytes", "bytes one part of a run's fetch aims at: a larger fetch is cut into parts, each later "
           "part fed what the earlier ones fetched, so the capture's writers store one part while TensorFlow computes "
           "the next (default 512 MiB; never below the largest tensor nor above --max-memory; 0: one fetch up to "
           "--max-memory)", "limits", SIDE_COMMANDS, type=int, default=512 << 20, side="part_bytes"),
    Option("max-process-memory", "bytes the capture's process may hold at its peak, TensorFlow's own memory "
           "included: the plain run measures what TensorFlow and the model hold, and the fetch is split under what "
           "is left (default: no bound beyond --max-memory)", "limits", SIDE_COMMANDS, type=int, default=None,
           side="max_process_memory"),
    Option("keep-weights", "store the variables' values in the capture too (by default a large variable restored "
           "from the checkpoint keeps only a digest; differing values are read back from the model)", "limits",
           SIDE_COMMANDS, flag=True, side="keep_weights", convert=bool),
    Option("tensor-format", "how tensor files are written: packed (default; byte-shuffled zstd chunks, elementwise "
           "outputs as residuals of their prediction, restored weights by digest) or npy (every tensor a plain .npy "
           "that numpy.load reads, weights included: ~4x the disk)", "output", SIDE_COMMANDS, choices=("packed", "npy"),
           side="tensor_format"),
    # -- comparison
    Option("atol", "absolute tolerance (default 1e-6)", "compare", ("compare", "diagnose"), type=float, default=1e-6,
           overrides={"diagnose": {"help": "absolute tolerance of the verdicts (default 1e-6)"}}),
    Option("rtol", "relative tolerance (default 1e-5, ~80 float32 ulps: above summation-order noise)", "compare",
           ("compare", "diagnose"), type=float, default=1e-5,
           overrides={"diagnose": {"help": "relative tolerance of the verdicts (default 1e-5)"}}),
    Option("tol", "per-op/tensor tolerance (repeatable)", "compare", ("compare",), repeat=True,
           metavar="NAME=ATOL,RTOL", convert=tolerances),
    Option("isolate", "replay the top N origins alone (default 5; 0 = off)", "compare", ("compare",), type=int,
           default=5),
    Option("map", "pair signature keys that differ: A_KEY=B_KEY[,...]", "compare", ("compare",),
           keyword="signature_map", convert=signature_map),
    Option("repeat", "run each side K times (fresh processes) to measure its own noise; noise is never an origin "
           "(default: twice where a side can change from run to run: a GPU side without --determinism, or a side "
           "whose replay moved; once elsewhere; 1 = never measure it)", "compare", ("compare",), type=int, default=None),
    Option("intermediates-decide", "let the intermediate ops decide too: an op beyond tolerance anywhere makes the "
           "verdict diverged even when every output agrees (by default the outputs decide)", "compare", ("compare",),
           flag=True),
    Option("detections", "outputs that are a detector's detections, matched between the sides by class and IoU per "
           "image instead of index by index: boxes=KEY,scores=KEY[,classes=KEY][,count=KEY][,format=yxyx|xyxy|xywh|"
           "center_xywh|...][,iou=0.5] (A's signature keys; by default the Object Detection API's detection_* and "
           "KerasCV's boxes/confidence/classes are recognised by name)", "compare", ("compare",),
           metavar="ROLE=KEY,...", convert=detection_spec),
    Option("keep-captures", "keep the sides captured here in OUT/captures (by default only what the report and "
           "tftrace isolate --from need is kept: a report small enough to attach)", "compare", ("compare",),
           flag=True),
    # -- diagnose's experiment matrix
    Option("batch-sizes", "batch sizes; the smallest is the reference (default 1,8)", "diagnose", ("diagnose",),
           default="1,8", convert=batch_sizes),
    Option("quick", "only {quick_factors}; five timed runs per side", "diagnose", ("diagnose",), flag=True),
    Option("only", "only these factors: {factors}", "diagnose", ("diagnose",), metavar="F1,F2"),
    Option("serving-batching", "TF Serving's --batching_parameters_file, emulated with the server's padding",
           "diagnose", ("diagnose",), metavar="FILE"),
    Option("serving-session-config", "TF Serving's --tensorflow_session_config_file (a text ConfigProto)",
           "diagnose", ("diagnose",), metavar="FILE"),
    Option("other-python", "another environment's Python (another TensorFlow release or build): adds the factor "
           "tf_version, this TensorFlow vs that one", "diagnose", ("diagnose",), metavar="PATH"),
    # -- output
    Option("out", "report directory (default ./tftrace-report)", "output", ("capture", "compare", "diagnose"),
           default="tftrace-report", keyword=None,
           overrides={"capture": {"help": "the capture directory to write", "default": None, "required": True},
                      "diagnose": {"help": "output directory (default ./tftrace-diagnosis)",
                                   "default": "tftrace-diagnosis"}}),
    Option("force", "replace what tftrace wrote in an existing output directory (never other files)", "output",
           ("capture", "compare", "diagnose"), flag=True),
    Option("json", "print the machine-readable diff (its fields: docs/contracts.md)", "output", ("diff-graph",),
           flag=True, keyword=None),
    # -- permissions: passed, never recorded
    Option("allow-unsafe-ops", "run graphs whose ops read or write files or call Python, and load TF2 SavedModels "
           "whose loading does (refused by default: models come from others; never taken from a capture, report "
           "or manifest)", "permissions", ("diff-graph", "capture", "compare", "isolate", "diagnose"), flag=True,
           side="allow_unsafe_ops", convert=bool, recorded=False),
)


def options_for(command: str, group: str | None = None) -> list[Option]:
    return [o for o in OPTIONS if command in o.commands and (group is None or o.group == group)]


def add_options(parser: argparse.ArgumentParser, command: str, **fill: str) -> None:
    """Add ``command``'s options to ``parser``, group by group, then its ``--a-``/``--b-`` overrides.
    ``fill`` completes help texts (``{factors}`` -> diagnose's factor names).

    The overrides are parsed but not listed one by one (they doubled ``compare --help``): the
    options that take them are marked [A/B], and one paragraph says what the mark means."""
    for group, title in GROUPS.items():
        members = options_for(command, group)
        if members:
            section = parser.add_argument_group(title)
            for option in members:
                _add(section, option, command, fill)
    members = [o for o in OPTIONS if command in o.per_side]
    if members:
        section = parser.add_argument_group(GROUPS["per_side"], PER_SIDE_HELP)
        for side, who in SIDE_NAMES.items():
            for option in members:
                _add(section, option, command, {**fill, "who": who}, side)


def _add(section: Any, option: Option, command: str, fill: Mapping[str, str], side: str = "") -> None:
    text = option.setting(command, "help")
    for key, value in {"who": "", **fill}.items():
        text = text.replace("{" + key + "}", value)
    if not side and command in option.per_side:
        text += PER_SIDE_MARK
    kwargs: dict[str, Any] = {"dest": f"{side}_{option.dest}" if side else option.dest,
                              "help": argparse.SUPPRESS if side else text}
    if option.flag:
        kwargs.update(action="store_true", default=None if side else False)
    else:
        kwargs.update(type=option.type, default=None if side else option.setting(command, "default"),
                      choices=option.choices, metavar=option.metavar)
        if option.repeat:
            kwargs["action"] = "append"
        if option.setting(command, "required"):
            kwargs["required"] = True
    flags = [f"--{side}-{option.name}"] if side else [f"--{option.name}", *(f"--{a}" for a in option.aliases)]
    section.add_argument(*flags, **kwargs)


# ---- values -> a Side ----------------------------------------------------------------------------


def values_from_args(args: argparse.Namespace, command: str, side: str = "") -> dict[str, Any]:
    """The API-keyword values the command line gave for ``side`` ("a", "b" or "" for a lone side):
    a per-side ``--a-NAME`` overrides ``--NAME``; options not given are left out."""
    values = {}
    for option in options_for(command):
        value = getattr(args, f"{side}_{option.dest}", None) if side and command in option.per_side else None
        if value is None:
            value = getattr(args, option.dest, None)
        if value is not None and option.api_keyword:
            values[option.api_keyword] = value
    return values


def side_values(shared: Mapping[str, Any], specific: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The options of one side: ``specific`` (``a_options``) overrides ``shared``; None is not given."""
    return {k: v for k, v in {**shared, **(specific or {})}.items() if v is not None}


def _converted(option: Option, value: Any) -> Any:
    return option.convert(value) if option.convert else value


def artifact_ref(path: str | ArtifactRef, values: Mapping[str, Any]) -> ArtifactRef:
    """An ArtifactRef from the artifact options in ``values`` (API keywords); a ref is kept as given."""
    from .artifacts.records import ArtifactRef  # noqa: PLC0415

    if isinstance(path, ArtifactRef):
        return path
    fields = {o.side.split(".", 1)[1]: _converted(o, values[o.api_keyword])
              for o in OPTIONS if o.side and o.side.startswith("artifact.") and values.get(o.api_keyword)}
    return ArtifactRef(str(path), **fields)


def build_side(path: str, values: Mapping[str, Any]) -> Side:
    """The one conversion of option values (API keywords: CLI text or Python values) into a Side."""
    from .runspec import InputSpec, Knobs, Side  # noqa: PLC0415

    parts: dict[str, dict[str, Any]] = {"knobs": {}, "inputs": {}, "top": {}}
    for option in OPTIONS:
        if not option.side or option.side.startswith("artifact.") or values.get(option.api_keyword) is None:
            continue
        where, _, name = option.side.rpartition(".")
        parts[where or "top"][name] = _converted(option, values[option.api_keyword])
    config_path = parts["knobs"].get("session_config_path")
    if config_path:
        try:
            with open(config_path, encoding="utf-8") as fh:
                parts["knobs"]["session_config_text"] = fh.read()
        except OSError as exc:
            raise TftraceError(f"cannot read session config {config_path}: {exc.strerror}", "check the path") from exc
    return Side(artifact_ref(path, values), knobs=Knobs(**parts["knobs"]), inputs=InputSpec(**parts["inputs"]),
                **parts["top"])


# ---- the API's keywords --------------------------------------------------------------------------


def api_keywords(command: str, *, per_side: bool = False) -> list[str]:
    """The keywords ``tracer.<command>(**options)`` takes (``per_side``: those of ``a_options``: every
    option that lands in a Side, so the API may set per side what the CLI sets for both)."""
    return [o.api_keyword for o in options_for(command) if o.api_keyword and (not per_side or o.side)]


def check_keywords(command: str, given: Iterable[str], *, per_side: bool = False, where: str = "") -> None:
    """Refuse keywords ``tracer.<command>`` does not take, naming the ones it does."""
    known = api_keywords(command, per_side=per_side)
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise TftraceError(
            f"tracer.{command}(){where} got unknown {'option' if len(unknown) == 1 else 'options'} {', '.join(map(repr, unknown))}",
            f"use one of: {', '.join(known)}",
        )


def converted(command: str, values: Mapping[str, Any], *, group: str | None = None) -> dict[str, Any]:
    """``values`` (API keywords) of ``command``'s options, converted, defaults filled in."""
    out = {}
    for option in options_for(command, group):
        key = option.api_keyword
        if key is None:
            continue
        value = values.get(key)
        if value is None:
            value = option.setting(command, "default")
        out[key] = _converted(option, value) if value is not None else None
    return out


def compare_settings(values: Mapping[str, Any]) -> dict[str, Any]:
    """``tracer.comparison.pipeline.compare``'s keywords from the comparison options."""
    from .comparison.divergence import Tolerance  # noqa: PLC0415

    c = converted("compare", values, group="compare")
    return {"tolerance": Tolerance(c["atol"], c["rtol"], c["tol"] or ()), "isolate": c["isolate"],
            "signature_map": c["signature_map"] or {}, "repeat": c["repeat"], "keep_captures": bool(c["keep_captures"]),
            "detections": c["detections"],
            "intermediates_decide": bool(c["intermediates_decide"]),
            "allow_unsafe_ops": bool(values.get("allow_unsafe_ops"))}
