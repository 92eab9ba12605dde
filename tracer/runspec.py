"""A *side*: what to run and exactly how — artifact, device, batch size, inputs, knobs.

TensorFlow reads ``TF_ENABLE_ONEDNN_OPTS``, ``TF_CUDNN_USE_AUTOTUNE``, ``TF_XLA_FLAGS`` and
``CUDA_VISIBLE_DEVICES`` once, when it is imported, so every side runs in a child process whose
environment is built here. Knobs that are process-wide API calls (op determinism, TF32) and
session options (threads, Grappler, a TF Serving session config) travel in the JSON spec and
are applied by the child before it builds its session. Nothing here imports TensorFlow.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from .artifacts.records import ArtifactRef
from .errors import TftraceError

TENSOR_FORMATS = ("packed", "npy")  # a capture's tensor files: see Side.tensor_format

__all__ = ["Knobs", "Side", "InputSpec", "SIDE_PARTS", "side_parts_from_json", "GRAPPLER_KEYS", "child_env", "job_side", "spec_without_permissions", "parse_grappler", "parse_device",
           "XLA_AUTO_JIT_FLAGS"]

GRAPPLER_KEYS = (
    "remapping",
    "layout_optimizer",
    "constant_folding",
    "arithmetic_optimization",
    "auto_mixed_precision",
    "auto_mixed_precision_onednn_bfloat16",
    "disable_meta_optimizer",
)
TRI_STATE = ("on", "off", "default")
XLA_AUTO_JIT_FLAGS = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"
ENV_KNOBS = {"TF_ENABLE_ONEDNN_OPTS": "onednn", "TF_CUDNN_USE_AUTOTUNE": "autotune"}  # variable -> its knob


@dataclass(frozen=True)
class Knobs:
    """Settings that change numbers. ``default`` leaves TensorFlow's own choice (and any value
    already in the caller's environment) alone; the fingerprint records what was in effect."""

    onednn: str = "default"  # TF_ENABLE_ONEDNN_OPTS
    autotune: str = "default"  # TF_CUDNN_USE_AUTOTUNE
    determinism: bool = False  # tf.config.experimental.enable_op_determinism()
    tf32: str = "default"  # tf.config.experimental.enable_tensor_float_32_execution
    xla: str = "default"  # TF_XLA_FLAGS auto-clustering + session global_jit_level
    threads: tuple[int, int] | None = None  # (intra_op, inter_op); 0 = TF's choice
    grappler: tuple[tuple[str, str], ...] = ()  # RewriterConfig field -> on|off
    session_config_text: str | None = None  # a text ConfigProto (TF Serving's session config file)
    session_config_path: str | None = None
    env: tuple[tuple[str, str], ...] = ()  # any other variable

    def __post_init__(self) -> None:
        for name in ("onednn", "autotune", "tf32", "xla"):
            value = getattr(self, name)
            if value not in TRI_STATE:
                raise TftraceError(f"--{name} takes on, off or default, not {value!r}", f"use --{name} on|off")
        for key, value in self.grappler:
            if key not in GRAPPLER_KEYS:
                raise TftraceError(
                    f"unknown Grappler option {key!r}", f"use one of {', '.join(GRAPPLER_KEYS)}"
                )
            if value not in ("on", "off"):
                raise TftraceError(f"Grappler option {key}={value!r}", f"write {key}=on or {key}=off")
        for key, value in self.env:
            knob = ENV_KNOBS.get(key)
            if knob and getattr(self, knob) != "default" and value != ("1" if getattr(self, knob) == "on" else "0"):
                raise TftraceError(
                    f"--env {key}={value} contradicts --{knob} {getattr(self, knob)}", f"give only --{knob}"
                )

    def describe(self) -> dict[str, Any]:
        """Only what differs from the defaults, for reports and labels."""
        out: dict[str, Any] = {}
        for key, default in asdict(Knobs()).items():
            value = getattr(self, key)
            if key == "session_config_text":
                continue
            if value != default and value not in ((), None):
                out[key] = dict(value) if key in ("grappler", "env") else value
        return out


@dataclass(frozen=True)
class InputSpec:
    """Where the examples come from, and how many. Same spec on both sides = same examples."""

    inputs_file: str | None = None  # .npz (keys = signature input keys) or .npy (one-input model)
    seed: int = 0
    examples: int = 8


@dataclass(frozen=True)
class Side:
    artifact: ArtifactRef
    device: str = "cpu"  # cpu | gpu | gpu:N
    batch_size: int | None = None  # None = all examples in one run
    knobs: Knobs = field(default_factory=Knobs)
    inputs: InputSpec = field(default_factory=InputSpec)
    max_memory: int = 2 << 30  # bytes fetched per session.run before chunking the fetch set
    # What one part of a split fetch aims at (0: one fetch up to max_memory). Cut in fed parts, the
    # writers store part k while TensorFlow computes part k + 1 (bench/parts_notes.md measured it).
    part_bytes: int = 512 << 20
    # The capture process's peak, TensorFlow included; None = no bound beyond max_memory's
    # (tracer.captures.process_memory divides it once the plain run has measured TensorFlow's share).
    max_process_memory: int | None = None
    # Timed plain runs of the first batch after one warm-up: the latency a report shows as context.
    # One by default (at a large batch each is a full run); diagnose measures costs with its own 5-10.
    timing_runs: int = 1
    timeout_s: float | None = None
    # A permission of this run (see tracer.safety): passed to the child beside the side's JSON,
    # never in it, so no manifest, report or job file records it and none can grant it.
    allow_unsafe_ops: bool = False
    durable: bool = True  # fsync every tensor file before the manifest: a capture survives a power cut, not only a kill
    keep_weights: bool = False  # store the variables' values too, not only digests of what the checkpoint holds
    # "packed": format 2 (byte-shuffled zstd chunks, predicted outputs, weights by digest); "npy": every
    # tensor a plain .npy any numpy reads (as in capture format 1, docs/contracts.md), ~4x the disk
    tensor_format: str = "packed"
    # The interpreter the child runs in (--python: another TensorFlow release or build); None = this one.
    # Like the permission, this run's choice: never in to_json, so no capture, report or job file can pick
    # a program to run; the child's environment fingerprint records what ran (python_executable, tensorflow).
    python: str | None = None

    def __post_init__(self) -> None:
        parse_device(self.device)
        if self.tensor_format not in TENSOR_FORMATS:
            raise TftraceError(f"unknown tensor format {self.tensor_format!r}", f"use one of {', '.join(TENSOR_FORMATS)}")
        if self.batch_size is not None and self.batch_size < 1:
            raise TftraceError(f"batch size {self.batch_size} is not positive", "use --batch-size 1 or more")
        if self.inputs.examples < 1:
            raise TftraceError(f"--examples {self.inputs.examples} is not positive", "use --examples 1 or more")
        if self.max_process_memory is not None and self.max_process_memory < 1:
            raise TftraceError(f"--max-process-memory {self.max_process_memory} is not positive",
                               "give the bytes the capture's process may hold at its peak, e.g. 8000000000")
        if self.timing_runs < 1:
            raise TftraceError(f"--timing-runs {self.timing_runs} is not positive: the last timed run is the plain run "
                               "the instrumented one is compared with", "use --timing-runs 1 or more")

    def label(self) -> str:
        if self.batch_size:
            batch = f"batch {self.batch_size}"
        elif self.inputs.inputs_file:  # its row count is read with the file, in the child: say where they come from
            batch = f"every example of {os.path.basename(self.inputs.inputs_file)}"
        else:
            batch = f"batch {self.inputs.examples}"
        parts = [self.device, batch]
        if self.python:
            parts.append(f"python {self.python}")
        parts += [f"{k}={v}" for k, v in self.knobs.describe().items() if k != "session_config_path"]
        if self.knobs.session_config_path:
            parts.append(f"session config {os.path.basename(self.knobs.session_config_path)}")
        return ", ".join(parts)

    def with_(self, **changes: Any) -> Side:
        return replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        """What ran (a capture's manifest ``spec``); the permission ``allow_unsafe_ops`` and the
        interpreter ``python`` are not in it (the fingerprint records the interpreter that ran)."""
        knobs = asdict(self.knobs)
        knobs["grappler"] = dict(self.knobs.grappler)
        knobs["env"] = dict(self.knobs.env)
        knobs["threads"] = list(self.knobs.threads) if self.knobs.threads else None
        return {
            "artifact": self.artifact.to_json(),
            "device": self.device,
            "batch_size": self.batch_size,
            "knobs": knobs,
            "inputs": asdict(self.inputs),
            "max_memory": self.max_memory,
            "part_bytes": self.part_bytes,
            "max_process_memory": self.max_process_memory,
            "timing_runs": self.timing_runs,
            "timeout_s": self.timeout_s,
            "durable": self.durable,
            "keep_weights": self.keep_weights,
            "tensor_format": self.tensor_format,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Side:
        return cls(
            artifact=ArtifactRef.from_json(d["artifact"]),
            device=d.get("device", "cpu"),
            batch_size=d.get("batch_size"),
            **side_parts_from_json(d),
            max_memory=int(d.get("max_memory", 2 << 30)),
            part_bytes=int(d.get("part_bytes", 0)),  # an older side fetched at once up to max_memory
            max_process_memory=None if d.get("max_process_memory") is None else int(d["max_process_memory"]),
            timing_runs=int(d.get("timing_runs", 1)),
            timeout_s=d.get("timeout_s"),  # an older manifest's "allow_unsafe_ops" is never read: not a permission
            durable=bool(d.get("durable", True)),
            keep_weights=bool(d.get("keep_weights", False)),
            tensor_format=str(d.get("tensor_format", "packed")),
        )


def side_parts_from_json(d: dict[str, Any]) -> dict[str, Any]:
    """A side's ``knobs`` and ``inputs`` built from its JSON (a manifest's ``spec``) by
    :data:`SIDE_PARTS`: what :meth:`Side.from_json` builds, and what a capture's reader checks part
    by part when it opens the capture, so that a part of the wrong shape is refused there, not where
    a replay rebuilds the side. Raises TypeError or ValueError for a part of another shape."""
    return {part: build(d.get(part, {})) for part, build in SIDE_PARTS.items()}


def _inputs_from_json(d: dict[str, Any]) -> InputSpec:
    return InputSpec(**d)


def knobs_from_json(d: dict[str, Any]) -> Knobs:
    """A manifest's ``spec.knobs`` (its pairs written as objects or lists) as :class:`Knobs`; a
    knob of another shape raises TypeError or ValueError, which a capture's reader refuses."""
    k = dict(d)
    k["grappler"] = tuple(sorted(dict(k.get("grappler") or {}).items()))
    k["env"] = tuple(sorted(dict(k.get("env") or {}).items()))
    k["threads"] = tuple(k["threads"]) if k.get("threads") else None
    return Knobs(**k)


# The parts of a side's JSON built into objects of their own, each by its builder.
SIDE_PARTS: dict[str, Callable[[Any], Any]] = {"knobs": knobs_from_json, "inputs": _inputs_from_json}


def spec_without_permissions(spec: dict[str, Any]) -> dict[str, Any]:
    """A side's JSON (a manifest's ``spec``) without the ``allow_unsafe_ops`` an older tftrace recorded."""
    return {k: v for k, v in spec.items() if k != "allow_unsafe_ops"}


def job_side(job: dict[str, Any]) -> Side:
    """The side of a child's job, with the permission the launcher passed beside it (only ``true`` grants it)."""
    return Side.from_json(job["side"]).with_(allow_unsafe_ops=job.get("allow_unsafe_ops") is True)


def parse_device(device: str) -> tuple[str, int]:
    """``cpu`` -> ("cpu", 0); ``gpu`` -> ("gpu", 0); ``gpu:1`` -> ("gpu", 1)."""
    kind, _, index = device.lower().partition(":")
    if kind not in ("cpu", "gpu") or (index and not index.isdigit()):
        raise TftraceError(f"unknown device {device!r}", "use cpu, gpu or gpu:N")
    return kind, int(index or 0)


def parse_grappler(text: str | None) -> tuple[tuple[str, str], ...]:
    """``remapping=off,layout_optimizer=on`` -> sorted pairs (validated by :class:`Knobs`)."""
    pairs = []
    for item in (text or "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.strip().partition("=")
        if not sep:
            raise TftraceError(f"--grappler item {item!r} has no value", "write KEY=on or KEY=off, comma-separated")
        pairs.append((key.strip(), value.strip().lower()))
    return tuple(sorted(pairs))


PROCESS_LIMIT_MMAP_THRESHOLD = 1 << 20  # see child_env


def child_env(side: Side, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment the child process imports TensorFlow with."""
    env = dict(os.environ if base is None else base)
    knobs = side.knobs
    if knobs.onednn != "default":
        env["TF_ENABLE_ONEDNN_OPTS"] = "1" if knobs.onednn == "on" else "0"
    if knobs.autotune != "default":
        env["TF_CUDNN_USE_AUTOTUNE"] = "1" if knobs.autotune == "on" else "0"
    if knobs.determinism:
        env["TF_DETERMINISTIC_OPS"] = "1"  # the API call is made too; this covers TF < 2.8
    flags = env.get("TF_XLA_FLAGS", "")
    if knobs.xla == "on" and "--tf_xla_auto_jit" not in flags:
        env["TF_XLA_FLAGS"] = f"{flags} {XLA_AUTO_JIT_FLAGS}".strip()
    elif knobs.xla == "off":
        env["TF_XLA_FLAGS"] = " ".join(f for f in flags.split() if not f.startswith(("--tf_xla_auto_jit",
                                                                                    "--tf_xla_cpu_global_jit")))
    kind, _ = parse_device(side.device)
    if kind == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = "-1"  # a CPU side must not have ops placed on a GPU
    else:
        # TensorFlow otherwise reserves nearly all of the GPU's memory in the first process that
        # touches it, and a second capture on the same GPU (compare's sides, isolation, the noise
        # runs, two users) then fails in cudaSetDevice with "out of memory" (seen on the H200,
        # 2026-12-02). Growing on demand changes no kernel and no number; a value the caller set wins.
        env.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
    if side.max_process_memory is not None:
        # glibc keeps a freed block below its mmap threshold (which grows up to 32 MB) in its arenas
        # for reuse, so a capture fetching part after part holds what earlier parts freed. Blocks of
        # 1 MB or more, mapped apart, go back to the kernel when freed: ResNet-50 at batch 8 under
        # --max-process-memory 1700000000 peaked at 1.71 GB in 4 parts without this, 1.36 GB with it.
        env.setdefault("MALLOC_MMAP_THRESHOLD_", str(PROCESS_LIMIT_MMAP_THRESHOLD))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.update(dict(knobs.env))
    return env
