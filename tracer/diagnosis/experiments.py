"""The experiment matrix of ``tftrace diagnose``: pairs of sides that differ in one factor.

Every experiment names side **A** (the reference) and side **B**. Where the factor has a
setting that removes the difference, B is that setting — the *remedy* — so an experiment's
``cost_pct = (latency_B - latency_A) / latency_A · 100`` is what the remedy costs on this
machine (positive: slower). Where there is nothing to set (repeats, observation, checkpoint vs
SavedModel, batch size, TF Serving's padding), B is the varied run and the percentage is simply
how B's latency compares with A's.

Sides are :class:`Run` values, and two experiments that need the same run (the base side at the
reference batch size, oneDNN on for both the oneDNN and the bfloat16 experiments) name equal
runs, so the orchestrator captures each run once. Nothing here runs anything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from ..artifacts.loader import ArtifactRef
from ..runspec import InputSpec, Side

__all__ = ["FACTORS", "QUICK_FACTORS", "GPU_FACTORS", "Run", "Planned", "PlanContext", "plan_experiments",
           "with_grappler"]

FACTORS: dict[str, str] = {
    "repeat": "the same side run twice: in one process, and in a fresh process",
    "batch": "batch 1 vs each other batch size, rows aligned",
    "export": "checkpoint vs SavedModel, at each batch size",
    "observation": "the instrumented run (every tensor fetched) vs the plain run",
    "onednn": "oneDNN custom ops on vs off (TF_ENABLE_ONEDNN_OPTS)",
    "remapping": "Grappler's remapper (fusions) on vs off",
    "xla": "XLA auto-clustering on vs off",
    "mixed_precision": "bfloat16 auto-mixed-precision on vs off (TF Serving's --mixed_precision=bfloat16)",
    "threads": "the default intra-op thread count vs 1",
    "serving_batching": "a request padded into each allowed batch size, as TF Serving pads, vs alone",
    "serving_session_config": "the session config TF Serving would use vs the default session",
    "device": "CPU vs GPU",
    "autotune": "cuDNN autotuning on vs off (TF_CUDNN_USE_AUTOTUNE)",
    "determinism": "op determinism off vs on",
    "tf32": "TensorFloat-32 on vs off",
    "layout_optimizer": "Grappler's layout optimizer on vs off",
    "atomics": "the same GPU run repeated at a fixed shape",
}
QUICK_FACTORS = ("repeat", "batch", "export", "onednn")
GPU_FACTORS = ("device", "autotune", "determinism", "tf32", "layout_optimizer", "atomics")
GPU_REPEATS = 5  # atomics: enough runs to see a nondeterministic sum at least once, in practice


@dataclass(frozen=True)
class Run:
    """One side to capture; ``instance`` tells apart deliberate re-runs of an identical side."""

    side: Side
    describe: str  # what this side is, in the words of the experiment ("oneDNN on")
    instance: int = 0

    def key(self) -> str:
        return json.dumps(self.side.to_json(), sort_keys=True) + f"#{self.instance}"


@dataclass(frozen=True)
class Planned:
    name: str
    factor: str
    kind: str  # compare | repeat_process | observation | skipped
    a: Run | None = None
    b: Run | None = None
    skipped: str | None = None
    remedy: str | None = None  # the exact setting side B stands for, when B is a remedy
    notes: tuple[str, ...] = ()
    repeats: int = 2  # repeat_process: runs in the one process
    per_row: bool = False  # latency compared per example (the sides run different batch sizes)


@dataclass
class PlanContext:
    """What the plan depends on, known once the base side has been captured."""

    base: Side  # the model at the reference batch size, default knobs
    model_kind: str  # the base capture's artifact kind
    savedmodel: ArtifactRef | None
    batch_sizes: tuple[int, ...]  # sorted; the first is the reference
    factors: tuple[str, ...]  # selected, in FACTORS order
    quick: bool
    batch_major: bool  # False: the signature fixes the batch dimension
    onednn_on: bool | None  # oneDNN state of the base side (the capture's fingerprint)
    xla_on: bool  # the base environment already auto-clusters
    gpu: str | None  # None = a GPU is visible; else why the GPU experiments are skipped
    serving_inputs: dict[int, tuple[str, int]] = field(default_factory=dict)  # size -> (padded .npz, rows)
    serving_batching: str | None = None  # the file, or None
    session_config: tuple[str, str] | None = None  # (path, text)


def with_grappler(side: Side, **options: str) -> Side:
    merged = dict(side.knobs.grappler) | options
    return side.with_(knobs=replace(side.knobs, grappler=tuple(sorted(merged.items()))))


def _knobs(side: Side, **changes: Any) -> Side:
    return side.with_(knobs=replace(side.knobs, **changes))


def plan_experiments(ctx: PlanContext) -> list[Planned]:
    """Every experiment of the selected factors, in FACTORS order; unrunnable ones as skipped."""
    builders = {"repeat": _repeat, "batch": _batch, "export": _export, "observation": _observation,
                "onednn": _onednn, "remapping": _remapping, "xla": _xla, "mixed_precision": _mixed_precision,
                "threads": _threads, "serving_batching": _serving_batching,
                "serving_session_config": _session_config}
    planned: list[Planned] = []
    for factor in ctx.factors:
        if factor in GPU_FACTORS:
            planned += _gpu(ctx, factor)
        else:
            planned += builders[factor](ctx)
    return planned


def _base(ctx: PlanContext) -> Run:
    return Run(ctx.base, f"{ctx.base.device}, batch {ctx.base.batch_size}")


def _repeat(ctx: PlanContext) -> list[Planned]:
    base = _base(ctx)
    again = replace(base, describe=base.describe + ", a second process", instance=1)
    return [
        Planned("repeat_same_process", "repeat", "repeat_process", base, base,
                notes=("each signature output fetched alone, then again, in one process and session",)),
        Planned("repeat_fresh_process", "repeat", "compare", base, again,
                notes=("two captures of the same side, each in its own process",)),
    ]


def _batch(ctx: PlanContext) -> list[Planned]:
    ref, *others = ctx.batch_sizes
    if not others:
        return [Planned("batch", "batch", "skipped", skipped="only one batch size given: pass --batch-sizes 1,8")]
    if not ctx.batch_major:
        return [Planned(f"batch_{ref}_vs_{n}", "batch", "skipped",
                        skipped="the signature fixes its input shapes, so the batch size cannot change")
                for n in others]
    base = _base(ctx)
    return [Planned(f"batch_{ref}_vs_{n}", "batch", "compare", base,
                    Run(ctx.base.with_(batch_size=n), f"{ctx.base.device}, batch {n}"), per_row=True,
                    remedy=f"one fixed batch shape everywhere (TF Serving `allowed_batch_sizes: [{n}]`, "
                           f"tests at batch {n})")
            for n in others]


def _export(ctx: PlanContext) -> list[Planned]:
    sizes = ctx.batch_sizes[:1] if ctx.quick else ctx.batch_sizes
    name = "ckpt_vs_savedmodel" if ctx.model_kind == "checkpoint" else "model_vs_savedmodel"
    if ctx.savedmodel is None:
        reason = ("give the exported SavedModel with --savedmodel" if ctx.model_kind == "checkpoint"
                  else "give the checkpoint as MODEL and the SavedModel with --savedmodel")
        return [Planned(name, "export", "skipped", skipped=reason)]
    out = []
    for n in sizes:
        if n != ctx.batch_sizes[0] and not ctx.batch_major:
            continue
        side = ctx.base.with_(batch_size=n)
        out.append(Planned(f"{name}_batch_{n}", "export", "compare",
                           Run(side, f"{ctx.model_kind}, batch {n}"),
                           Run(side.with_(artifact=ctx.savedmodel), f"SavedModel, batch {n}")))
    return out


def _observation(ctx: PlanContext) -> list[Planned]:
    base = _base(ctx)
    return [Planned("observation", "observation", "observation", base, base,
                    notes=("A: the plain run (outputs only); B: the instrumented run (every tensor fetched)",))]


def _onednn_pair(ctx: PlanContext) -> tuple[Run, Run]:
    """(oneDNN on, oneDNN off); the base side stands for whichever it already is."""
    base = _base(ctx)
    on = Run(_knobs(ctx.base, onednn="on"), "oneDNN on (TF_ENABLE_ONEDNN_OPTS=1)")
    off = Run(_knobs(ctx.base, onednn="off"), "oneDNN off (TF_ENABLE_ONEDNN_OPTS=0)")
    if ctx.onednn_on is True:
        on = replace(base, describe="oneDNN on (this machine's setting)")
    elif ctx.onednn_on is False:
        off = replace(base, describe="oneDNN off (this machine's setting)")
    return on, off


def _onednn(ctx: PlanContext) -> list[Planned]:
    on, off = _onednn_pair(ctx)
    return [Planned("onednn", "onednn", "compare", on, off,
                    remedy="`TF_ENABLE_ONEDNN_OPTS=0` set explicitly on every machine (or `=1` everywhere)")]


def _remapping(ctx: PlanContext) -> list[Planned]:
    off = Run(with_grappler(ctx.base, remapping="off"), "Grappler remapping off")
    on = replace(_base(ctx), describe="Grappler remapping on (default)")
    return [Planned("remapping", "remapping", "compare", on, off,
                    remedy="`rewrite_options { remapping: OFF }` in the session config of every side")]


def _xla(ctx: PlanContext) -> list[Planned]:
    on = Run(_knobs(ctx.base, xla="on"), "XLA auto-clustering on")
    off = replace(_base(ctx), describe="XLA off (this machine's setting)") if not ctx.xla_on \
        else Run(_knobs(ctx.base, xla="off"), "XLA off")
    return [Planned("xla", "xla", "compare", on, off,
                    remedy="no `--tf_xla_auto_jit`/`jit_compile` on any side (or the same jit setting everywhere)")]


def _mixed_precision(ctx: PlanContext) -> list[Planned]:
    on, _ = _onednn_pair(ctx)
    notes = ()
    if ctx.onednn_on is not True:
        notes = ("TensorFlow runs the auto_mixed_precision_onednn_bfloat16 rewrite only when oneDNN is on (with "
                 "TF_ENABLE_ONEDNN_OPTS=0 it leaves the graph alone), so both sides run with oneDNN on",)
    amp = Run(with_grappler(on.side, auto_mixed_precision_onednn_bfloat16="on"),
              "bfloat16 auto-mixed-precision on, oneDNN on")
    plain = replace(on, describe="no mixed precision, oneDNN on")
    return [Planned("mixed_precision", "mixed_precision", "compare", amp, plain,
                    notes=notes, remedy="no `--mixed_precision=bfloat16` in TF Serving and "
                                        "`auto_mixed_precision_onednn_bfloat16: OFF` in every session config")]


def _threads(ctx: PlanContext) -> list[Planned]:
    one = Run(_knobs(ctx.base, threads=(1, 0)), "intra-op threads 1")
    return [Planned("threads", "threads", "compare", replace(_base(ctx), describe="default intra-op threads"), one,
                    remedy="`intra_op_parallelism_threads: 1` in the session config")]


def _serving_artifact(ctx: PlanContext) -> Side:
    return ctx.base.with_(artifact=ctx.savedmodel) if ctx.savedmodel else ctx.base


def _serving_batching(ctx: PlanContext) -> list[Planned]:
    if ctx.serving_batching is None:
        return [Planned("serving_batching", "serving_batching", "skipped",
                        skipped="give TF Serving's batching parameters file with --serving-batching FILE")]
    if not ctx.batch_major:
        return [Planned("serving_batching", "serving_batching", "skipped",
                        skipped="the signature fixes its input shapes, so requests cannot be batched")]
    out = []
    side = _serving_artifact(ctx)
    for size, (path, rows) in sorted(ctx.serving_inputs.items()):
        inputs = InputSpec(inputs_file=path, seed=0, examples=rows)
        alone = Run(side.with_(batch_size=1, inputs=inputs), "each request alone (batch 1)")
        padded = Run(side.with_(batch_size=size, inputs=inputs),
                     f"each request padded to batch {size} with copies of its row")
        out.append(Planned(f"serving_batching_{size}", "serving_batching", "compare", alone, padded,
                           notes=(f"every request row is repeated as TF Serving pads it; batch {size} runs the "
                                  "request and its padding together",),
                           remedy=f"TF Serving `allowed_batch_sizes: [{size}]` and tests run at batch {size}, "
                                  "or batching off"))
    return out


def _session_config(ctx: PlanContext) -> list[Planned]:
    if ctx.session_config is None:
        return [Planned("serving_session_config", "serving_session_config", "skipped",
                        skipped="give TF Serving's session config with --serving-session-config FILE")]
    path, text = ctx.session_config
    side = _serving_artifact(ctx)
    served = Run(_knobs(side, session_config_text=text, session_config_path=path), f"session config {path}")
    return [Planned("serving_session_config", "serving_session_config", "compare", Run(side, "the default session"),
                    served, remedy=f"run the tests with the same session config ({path})")]


def _gpu(ctx: PlanContext, factor: str) -> list[Planned]:
    if ctx.gpu is not None:
        return [Planned(factor, factor, "skipped", skipped=ctx.gpu)]
    gpu = ctx.base if ctx.base.device.startswith("gpu") else ctx.base.with_(device="gpu")
    on_gpu = Run(gpu, f"{gpu.device}, batch {gpu.batch_size}")
    if factor == "device":
        cpu = ctx.base.with_(device="cpu")
        return [Planned("cpu_vs_gpu", factor, "compare", Run(cpu, "CPU"), replace(on_gpu, describe="GPU"))]
    if factor == "atomics":
        return [Planned("gpu_repeat", factor, "repeat_process", on_gpu, on_gpu, repeats=GPU_REPEATS,
                        notes=(f"each output fetched alone {GPU_REPEATS} times in one process at a fixed shape",))]
    pairs = {
        "autotune": (Run(_knobs(gpu, autotune="on"), "cuDNN autotune on"),
                     Run(_knobs(gpu, autotune="off"), "cuDNN autotune off"),
                     "`tf.config.experimental.enable_op_determinism()`; `TF_CUDNN_USE_AUTOTUNE=0` alone only "
                     "narrows the gap"),
        "determinism": (on_gpu, Run(_knobs(gpu, determinism=True), "op determinism on"),
                        "`tf.config.experimental.enable_op_determinism()` before the model runs"),
        "tf32": (Run(_knobs(gpu, tf32="on"), "TF32 on"), Run(_knobs(gpu, tf32="off"), "TF32 off"),
                 "`tf.config.experimental.enable_tensor_float_32_execution(False)`"),
        "layout_optimizer": (on_gpu, Run(with_grappler(gpu, layout_optimizer="off"), "layout optimizer off"),
                             "`rewrite_options { layout_optimizer: OFF }` in the session config"),
    }
    a, b, remedy = pairs[factor]
    return [Planned(factor, factor, "compare", a, b, remedy=remedy)]
