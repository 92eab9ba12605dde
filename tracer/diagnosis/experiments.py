"""The experiment matrix of ``tftrace diagnose``: one :class:`~.plan.Factor` record per factor.

Every experiment names side **A** (the reference) and side **B**. Where the factor has a
setting that removes the difference, B is that setting — the *remedy* — so an experiment's
``cost_pct = (latency_B - latency_A) / latency_A · 100`` is what the remedy costs on this
machine (positive: slower). Where there is nothing to set (repeats, observation, checkpoint vs
SavedModel, batch size, TF Serving's padding), B is the varied run and the percentage is simply
how B's latency compares with A's.

Sides are :class:`Run` values, and two experiments that need the same run (the base side at the
reference batch size, oneDNN on for both the oneDNN and the bfloat16 experiments) name equal
runs, so the orchestrator captures each run once. Nothing here runs anything.

**Adding an experiment** is one edit, here: write the function that builds its pairs of sides
from the :class:`PlanContext` (side B the remedy; skipped experiments with the reason when the
context cannot run it), and add one ``Factor(...)`` to :data:`FACTORS` with its title,
description, cause (a key of :data:`tracer.causes.CAUSES`), what kind of remedy B is, its
``setting`` reader and, where the defaults do not fit, its cost sentence. ``--only``, the
skipped rows, the answers (why / prevent / cost), the verified recipe and the scheduling all
read the record; ``tests/test_diagnose.py::test_a_factor_declared_only_in_the_registry_*``
checks that a new record is enough.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..runspec import InputSpec, Side
from .plan import Factor, PlanContext, Planned, Run, at_batch, with_grappler, with_knobs

if TYPE_CHECKING:  # a type only: the capture reader (numpy, networkx) is not needed to build the parser
    from ..captures.reader import Capture

__all__ = ["FACTORS", "QUICK_FACTORS", "GPU_FACTORS", "FACTOR_TITLES", "Factor", "Run", "Planned", "PlanContext",
           "plan_experiments", "with_grappler", "env_autotune_on"]

GPU_REPEATS = 5  # atomics: enough runs to see a nondeterministic sum at least once, in practice


def plan_experiments(ctx: PlanContext) -> list[Planned]:
    """Every experiment of the selected factors, in FACTORS order; unrunnable ones as skipped."""
    planned: list[Planned] = []
    for key in ctx.factors:
        factor = FACTORS[key]
        if factor.gpu and ctx.gpu is not None:
            planned.append(Planned(key, key, "skipped", skipped=ctx.gpu))
            continue
        planned += [replace(p, per_row=True) if factor.per_example_cost and p.kind != "skipped" else p
                    for p in factor.plan(ctx)]
    return planned


# ---- what a capture says a factor was (the ``setting`` readers) ------------------------------


def _knobs_of(capture: Capture) -> dict[str, Any]:
    return capture.spec.get("knobs") or {}


def _grappler_option(option: str, default: str) -> Any:
    return lambda m: (_knobs_of(m).get("grappler") or {}).get(option, default)


def _tf_env(capture: Capture) -> dict[str, str]:
    return capture.environment.get("tf_env") or {}


def _onednn_setting(m: Capture) -> str | None:
    enabled = (m.environment.get("onednn") or {}).get("enabled")  # from the fingerprint: as it really ran
    return None if enabled is None else ("on" if enabled else "off")


def _xla_setting(m: Capture) -> str:
    xla = _knobs_of(m).get("xla")
    return "on" if xla == "on" or (xla != "off" and "--tf_xla_auto_jit" in _tf_env(m).get("TF_XLA_FLAGS", "")) else "off"


def env_autotune_on(tf_env: dict[str, str]) -> bool:
    """Whether TensorFlow autotunes cuDNN under these variables: on unless TF_CUDNN_USE_AUTOTUNE
    says 0 or false (TensorFlow reads it as a boolean, default true)."""
    return tf_env.get("TF_CUDNN_USE_AUTOTUNE", "1").strip().lower() not in ("0", "false")


def _autotune_setting(m: Capture) -> str:
    autotune = _knobs_of(m).get("autotune", "default")
    return autotune if autotune != "default" else ("on" if env_autotune_on(_tf_env(m)) else "off")


def _tf32_setting(m: Capture) -> str:
    tf32 = _knobs_of(m).get("tf32", "default")
    enabled = m.environment.get("tf32_enabled")  # the fingerprint: as it really ran (GPU captures only)
    return tf32 if tf32 != "default" or enabled is None else ("on" if enabled else "off")


# ---- how each factor's pairs of sides are built ----------------------------------------------


def _base(ctx: PlanContext) -> Run:
    return at_batch(ctx.base)


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
    return [Planned(f"batch_{ref}_vs_{n}", "batch", "compare", _base(ctx), at_batch(ctx.base, n),
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
    on = Run(with_knobs(ctx.base, onednn="on"), "oneDNN on (TF_ENABLE_ONEDNN_OPTS=1)")
    off = Run(with_knobs(ctx.base, onednn="off"), "oneDNN off (TF_ENABLE_ONEDNN_OPTS=0)")
    if ctx.onednn_on is True:
        on = replace(base, describe="oneDNN on (as the base run had it)")
    elif ctx.onednn_on is False:
        off = replace(base, describe="oneDNN off (as the base run had it)")
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
    on = Run(with_knobs(ctx.base, xla="on"), "XLA auto-clustering on")
    off = replace(_base(ctx), describe="XLA off (as the base run had it)") if not ctx.xla_on \
        else Run(with_knobs(ctx.base, xla="off"), "XLA off")
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
    one = Run(with_knobs(ctx.base, threads=(1, 0)), "intra-op threads 1")
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
    served = Run(with_knobs(side, session_config_text=text, session_config_path=path), f"session config {path}")
    return [Planned("serving_session_config", "serving_session_config", "compare", Run(side, "the default session"),
                    served, remedy=f"run the tests with the same session config ({path})")]


def _gpu_side(ctx: PlanContext) -> Side:
    return ctx.base if ctx.base.device.startswith("gpu") else ctx.base.with_(device="gpu")


def _gpu_pair(key: str, a: Run, b: Run, remedy: str) -> list[Planned]:
    return [Planned(key, key, "compare", a, b, remedy=remedy)]


def _device(ctx: PlanContext) -> list[Planned]:
    cpu = ctx.base.with_(device="cpu")
    return [Planned("cpu_vs_gpu", "device", "compare", Run(cpu, "CPU"), replace(at_batch(_gpu_side(ctx)), describe="GPU"))]


def _as_default_or(gpu: Side, default_is: bool | None, value: str, words: str, **knob: str) -> Run:
    """The GPU side with ``knob`` set, or the GPU side as it is where ``knob``'s value is already
    its default there: one capture then serves both experiments, where a second would only be a
    second process of the same side."""
    if default_is is (value == "on"):
        return Run(gpu, f"{words} (the default here)")
    return Run(with_knobs(gpu, **knob), words)


def _autotune(ctx: PlanContext) -> list[Planned]:
    gpu = _gpu_side(ctx)
    return _gpu_pair("autotune", _as_default_or(gpu, ctx.autotune_on, "on", "cuDNN autotune on", autotune="on"),
                     _as_default_or(gpu, ctx.autotune_on, "off", "cuDNN autotune off", autotune="off"),
                     "`tf.config.experimental.enable_op_determinism()`; `TF_CUDNN_USE_AUTOTUNE=0` alone only "
                     "narrows the gap")


def _determinism(ctx: PlanContext) -> list[Planned]:
    gpu = _gpu_side(ctx)
    return _gpu_pair("determinism", at_batch(gpu), Run(with_knobs(gpu, determinism=True), "op determinism on"),
                     "`tf.config.experimental.enable_op_determinism()` before the model runs")


def _tf32(ctx: PlanContext) -> list[Planned]:
    gpu = _gpu_side(ctx)
    return _gpu_pair("tf32", _as_default_or(gpu, ctx.tf32_on, "on", "TF32 on", tf32="on"),
                     _as_default_or(gpu, ctx.tf32_on, "off", "TF32 off", tf32="off"),
                     "`tf.config.experimental.enable_tensor_float_32_execution(False)`")


def _layout_optimizer(ctx: PlanContext) -> list[Planned]:
    gpu = _gpu_side(ctx)
    return _gpu_pair("layout_optimizer", at_batch(gpu),
                     Run(with_grappler(gpu, layout_optimizer="off"), "layout optimizer off"),
                     "`rewrite_options { layout_optimizer: OFF }` in the session config")


def _tf_version(ctx: PlanContext) -> list[Planned]:
    """This TensorFlow against another environment's (``--other-python``), the same side otherwise:
    what upgrading (or downgrading) the release changes, op by op, and what it costs in latency."""
    if ctx.other_python is None:
        return [Planned("tf_version", "tf_version", "skipped",
                        skipped="give another environment's Python with --other-python PATH (make other-tf prepares one)")]
    other = ctx.base.with_(python=ctx.other_python)
    return [Planned("tf_version", "tf_version", "compare", replace(_base(ctx), describe="this TensorFlow"),
                    Run(other, f"the TensorFlow of {ctx.other_python}"))]


def _atomics(ctx: PlanContext) -> list[Planned]:
    on_gpu = at_batch(_gpu_side(ctx))
    return [Planned("gpu_repeat", "atomics", "repeat_process", on_gpu, on_gpu, repeats=GPU_REPEATS,
                    notes=(f"each output fetched alone {GPU_REPEATS} times in one process at a fixed shape",))]


# ---- the registry: one record per factor, in the order of the matrix -------------------------

FACTORS: dict[str, Factor] = {f.key: f for f in (
    Factor("repeat", "Run-to-run nondeterminism", "the same side run twice: in one process, and in a fresh process",
           _repeat, remedy="determinism", costless=True, quick=True, cheap=True,
           prevent="find what differs between the runs: with state-changing ops, reset the state (reload the model) "
                   "before each comparison; otherwise make the kernels deterministic "
                   "(`tf.config.experimental.enable_op_determinism()`) and fix the thread counts"),
    Factor("batch", "Batch size", "batch 1 vs each other batch size, rows aligned", _batch, cause="batch",
           remedy="shape", per_example_cost=True, quick=True, setting=lambda m: m.batch_size,
           cost_text="{title}: {both}. Per example, batch {b_rows} {pct} compared with batch {a_rows}: the throughput "
                     "at stake when every request must run at one fixed shape."),
    Factor("export", "Checkpoint vs SavedModel export", "checkpoint vs SavedModel, at each batch size", _export,
           cause="export", quick=True, cheap=True, setting=lambda m: m.artifact.get("kind"),
           same_graph_is_nondeterminism=True),
    Factor("observation", "Observation", "the instrumented run (every tensor fetched) vs the plain run", _observation,
           cause="observation", costless=True, cheap=True,
           prevent="capture both sides the same way and judge the final outputs of the plain runs; "
                   "the instrumented values show where a difference starts, not its exact size"),
    Factor("onednn", "oneDNN", "oneDNN custom ops on vs off (TF_ENABLE_ONEDNN_OPTS)", _onednn, cause="onednn",
           remedy="setting", quick=True, setting=_onednn_setting),
    Factor("remapping", "Grappler remapping", "Grappler's remapper (fusions) on vs off", _remapping, cause="grappler",
           remedy="setting", setting=_grappler_option("remapping", "on")),
    Factor("xla", "XLA", "XLA auto-clustering on vs off", _xla, cause="xla", remedy="setting", setting=_xla_setting),
    Factor("mixed_precision", "bfloat16 mixed precision",
           "bfloat16 auto-mixed-precision on vs off (TF Serving's --mixed_precision=bfloat16)", _mixed_precision,
           cause="mixed_precision", remedy="setting",
           setting=_grappler_option("auto_mixed_precision_onednn_bfloat16", "off")),
    Factor("threads", "Intra-op threads", "the default intra-op thread count vs 1", _threads, remedy="setting",
           setting=lambda m: str((_knobs_of(m).get("threads") or ["default"])[0])),
    Factor("serving_batching", "TF Serving batching",
           "a request padded into each allowed batch size, as TF Serving pads, vs alone", _serving_batching,
           cause="serving_batching", remedy="shape",
           cost_text="{title}: {both}. Padding a request {pct} in latency; turning batching off instead costs the "
                     "server the throughput of merged requests."),
    Factor("serving_session_config", "TF Serving session config",
           "the session config TF Serving would use vs the default session", _session_config, cause="grappler"),
    Factor("tf_version", "TensorFlow version", "this TensorFlow vs another environment's (--other-python)",
           _tf_version, cause="build", setting=lambda m: m.environment.get("tensorflow"),
           prevent="test and serve with the same TensorFlow release and build; across releases, compare with a "
                   "tolerance"),
    Factor("device", "CPU vs GPU", "CPU vs GPU", _device, cause="build", gpu=True,
           setting=lambda m: m.spec.get("device", "cpu"),
           prevent="compare CPU and GPU results with a tolerance; they run different kernels"),
    Factor("autotune", "cuDNN autotuning", "cuDNN autotuning on vs off (TF_CUDNN_USE_AUTOTUNE)", _autotune,
           cause="autotune", remedy="setting", gpu=True, setting=_autotune_setting,
           prevent_note=" Turning autotuning off alone only narrows the gap: the heuristic choice is still per shape."),
    Factor("determinism", "Op determinism", "op determinism off vs on", _determinism, cause="autotune",
           remedy="setting", gpu=True, setting=lambda m: bool(_knobs_of(m).get("determinism"))),
    Factor("tf32", "TensorFloat-32", "TensorFloat-32 on vs off", _tf32, cause="tf32", remedy="setting", gpu=True,
           setting=_tf32_setting),
    Factor("layout_optimizer", "Grappler layout optimizer", "Grappler's layout optimizer on vs off", _layout_optimizer,
           cause="grappler", remedy="setting", gpu=True, setting=_grappler_option("layout_optimizer", "on")),
    Factor("atomics", "GPU atomics", "the same GPU run repeated at a fixed shape", _atomics, cause="atomics",
           remedy="determinism", gpu=True),
)}

# Views of the registry, for callers that want one attribute of every factor.
QUICK_FACTORS = tuple(k for k, f in FACTORS.items() if f.quick)
GPU_FACTORS = tuple(k for k, f in FACTORS.items() if f.gpu)
FACTOR_TITLES = {k: f.title for k, f in FACTORS.items()}
