"""``tftrace diagnose``: run the experiment matrix and answer why, how to prevent it, what it costs.

Order of work, chosen so that latencies are honest and nothing runs twice:

1. check every input that can be checked without TensorFlow (``--only``, the batching file, the
   session config file, batch sizes against the number of examples);
2. capture the base side (the model at the reference batch size, default settings): its
   fingerprint decides the rest of the plan (is oneDNN on here, does a GPU exist, is the
   signature batch-major);
3. capture every other side the plan needs, **one at a time** — each capture times its plain
   runs, and a second process on the same cores would slow them down;
4. compare, replay and isolate, two at a time (nothing is timed any more);
5. turn the results into the answers (:mod:`tracer.diagnosis.answers`), write ``diagnosis.json``
   (:mod:`tracer.diagnosis.document`)
   and the report of the most informative experiment with the answers on top.

Experiments, and which side is the remedy, are declared in :mod:`tracer.diagnosis.experiments`
(one record per factor); fetch-alone replays (same-process repeats, plain outputs, unobserved
differences) are in :mod:`tracer.diagnosis.replays`; each experiment's own comparison is in
``DIR/experiments/<name>/``.
"""

from __future__ import annotations

import io
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from .answers import build_answers
from .document import diagnosis_document, where_the_time_went, write_report
from .options import DiagnoseOptions, Diagnosis, parse_factors
from .. import children
from ..artifacts.kinds import local_checkpoint_prefix, refuse_graphless_local, refuse_missing_local
from ..artifacts.remote import refuse_unreadable_remote
from ..captures.reader import Capture
from ..comparison.statuses import verdict_label
from ..errors import TftraceError
from .experiments import FACTORS, env_autotune_on, plan_experiments
from .gpus import gpu_unavailable_reason
from .captures import PREPARE_HEADROOM, Captures, captures_ahead, held_whole
from .costs import TIMED_RUNS, time_costs
from .noise import effective, link, noise_finding, plan_noise_free, run_noise_free
from .outcomes import evaluate, latency
from .plan import PlanContext, Planned, Run, at_batch
from .recipe import Recipe, plan_recipe, recipe_facts
from ..jsonvalues import jsonable
from ..safewrite import claim, output_directory, write_file
from ..runspec import InputSpec, Side
from .serving import BatchingParameters, pad_requests, padding_groups, read_batching_parameters

__all__ = ["DiagnoseOptions", "Diagnosis", "run_diagnosis", "parse_factors"]

PARALLEL = 2  # comparisons and replays at once; captures always run alone
SERVING_REQUESTS = 2  # request rows emulated per allowed batch size


class _Progress:
    """One line per step on the (stderr) console: which capture or experiment runs now, counted
    within its stage ("[experiments 3/9]"). A stage's size is known when it starts, so no count
    grows under the reader; a stage whose size is not (the captures the runs with the noise removed
    need, found as they go) counts without a total."""

    def __init__(self, console: Console) -> None:
        self.console, self.started = console, time.monotonic()
        self.stage = ""
        self.counts: dict[str, list[int | None]] = {}  # stage -> [done, total]
        # two experiments run at once: a step's count and its line are one act, or "2/5" can be
        # printed before "1/5"
        self._lock = threading.Lock()

    def begin(self, stage: str, total: int | None) -> None:
        """A stage of ``total`` steps starts (None: as many as it turns out to need)."""
        self.stage = stage
        self.counts[stage] = [0, total]

    def step(self, text: str, stage: str = "") -> None:
        """One step of the current stage, or of ``stage`` (begun with no total if it is new): a capture
        the runs with the noise removed need is found while their experiments run."""
        with self._lock:
            stage = stage or self.stage
            count = self.counts.setdefault(stage, [0, None])
            count[0] = done = (count[0] or 0) + 1
            total = count[1]
            shown = "" if total == 1 else f" {done}/{total}" if total else f" {done}"
            elapsed = time.monotonic() - self.started
            self.console.print(f"[{stage}{shown}] {text}  ({elapsed:.0f} s)", highlight=False, markup=False)

    def start(self, text: str) -> None:
        """An experiment starts (two run at once, so their results come back in any order)."""
        self.console.print(f"  -> {text}", highlight=False, markup=False)


def run_diagnosis(options: DiagnoseOptions, console: Console | None = None) -> Diagnosis:
    """The five steps of the module docstring; raises TftraceError for the user's mistakes.

    ``--out`` is locked for the run and ``--force`` replaces only what tftrace recorded
    writing there (:mod:`tracer.safewrite`)."""
    out = options.out_dir.absolute()
    started = time.monotonic()
    batching = _check_inputs(options)  # a mistake in the options is reported before --out is touched
    _refuse_nothing_to_run(plan_experiments(_context_from_options(options, batching)))  # before minutes of capture
    session_config = _read_session_config(options.serving_session_config)
    with output_directory(out, options.force, "diagnosis"):
        claim(out, ["captures", "experiments", "timing"])
        return _run_diagnosis(options, out, console, started, batching, session_config)


def _run_diagnosis(options: DiagnoseOptions, out: Path, console: Console | None, started: float,
                   batching: BatchingParameters | None, session_config: tuple[str, str] | None) -> Diagnosis:
    console = console or Console(stderr=True)
    quiet = Console(file=io.StringIO())  # the children's own progress bars would fight ours
    factors = _selected_factors(options)
    base_side = _base_side(options)
    with Captures(out / "captures", quiet) as captures:
        return _diagnose(captures, base_side, options, out, console, quiet, started, factors, batching, session_config)


def _diagnose(captures: Captures, base_side: Side, options: DiagnoseOptions, out: Path, console: Console,
              quiet: Console, started: float, factors: tuple[str, ...], batching: BatchingParameters | None,
              session_config: tuple[str, str] | None) -> Diagnosis:
    progress = _Progress(console)
    progress.begin("base side", 1)
    progress.step(f"capturing {base_side.artifact.path} [{base_side.label()}]")
    ledger_from = len(children.recorded())
    with children.tagged("base side"):
        base = captures.get(at_batch(base_side))
    captures.load_ahead(captures_ahead(base_side, per_child=PREPARE_HEADROOM + held_whole(base)))
    _check_example_count(base, options)
    ctx = _plan_context(options, base, batching, session_config, out)
    planned = plan_experiments(ctx)
    _refuse_nothing_to_run(planned)
    planned += _not_selected(factors, ctx.gpu, "not selected by --only" if options.only else "not part of --quick")
    runs = _runs_to_capture(planned, captures)
    captures.expect([run for run, _ in runs])
    progress.begin("captures", len(runs))
    t_captures = time.monotonic()
    for run, names in runs:
        progress.step(f"capturing {run.describe} [{run.side.label()}] for {', '.join(names)}")
        with children.tagged("captures"):
            captures.get(run)
    t_experiments = time.monotonic()
    walls: dict[str, float] = {}  # experiment -> its wall seconds (two run at once)
    results = _evaluate_all(planned, captures, options, out, quiet, progress, walls)
    finding = noise_finding(base_side.device, base_side.knobs.determinism, results)
    if finding is not None:  # every factor again with the noise removed: the answers rest on those pairs
        twins = plan_noise_free(planned)
        captures.expect([run for twin in twins for run in (twin.a, twin.b) if run is not None])
        with children.tagged("captures with the noise removed"):  # each experiment's own are tagged with it
            twin_results = run_noise_free(twins, planned, finding, _announced(captures, progress, "with the noise removed"),
                                          lambda ps: _evaluate_all(ps, captures, options, out, quiet, progress, walls,
                                                                   stage="experiments with the noise removed"))
        link(results, twin_results, finding)
        results += twin_results
    refused = next(iter((finding or {}).get("refused", {}).values()), None)
    recipe = plan_recipe(planned, effective(results), ctx, refused if refused and "determinis" in refused else None)
    recipe_result = None
    t_recipe = time.monotonic()
    if recipe is not None:
        with children.tagged("recipe"):
            recipe_result = _run_recipe(recipe, captures, options, out, quiet, progress)
        results.append(recipe_result)
    t_costs = time.monotonic()
    progress.begin("costs", 1)
    progress.step("timing each cost: both sides interleaved, judged by one rule (tracer.diagnosis.timing)")
    with children.tagged("costs"):
        time_costs(effective(results), results, planned, captures.get, out / "timing",
                   TIMED_RUNS * 2 // 3 if options.quick else TIMED_RUNS,
                   (recipe_result, recipe.reference, recipe.planned.a) if recipe and recipe_result else None)
    answers = build_answers(results, options.tolerance.to_json(), finding)
    doc = diagnosis_document(options, base, results, answers, finding, {
        "total_s": round(time.monotonic() - started, 2), "base_s": round(t_captures - started, 2),
        "captures_s": round(t_experiments - t_captures, 2), "experiments_s": round(time.monotonic() - t_experiments, 2),
        "recipe_s": round(t_costs - t_recipe, 2), "costs_s": round(time.monotonic() - t_costs, 2),
        **where_the_time_went(walls, children.recorded()[ledger_from:]),
    })
    shown = write_report(doc, results, out)
    doc["report_experiment"] = shown
    doc["timings"]["total_s"] = round(time.monotonic() - started, 2)
    write_file(out / "diagnosis.json", json.dumps(jsonable(doc), indent=1, allow_nan=False))
    return Diagnosis(doc, out, shown)


# ---- inputs ----------------------------------------------------------------------------------


def _check_inputs(options: DiagnoseOptions) -> BatchingParameters | None:
    sizes = options.batch_sizes
    if not sizes or any(n < 1 for n in sizes):
        raise TftraceError(f"--batch-sizes {','.join(map(str, sizes))} must be positive integers",
                           "e.g. --batch-sizes 1,8")
    if options.examples is not None and options.examples < max(sizes) and not options.inputs_file:
        raise TftraceError(
            f"--examples {options.examples} is smaller than batch size {max(sizes)}: that batch would run "
            f"{options.examples} row(s)", f"use --examples {max(sizes)} or more, or smaller --batch-sizes")
    if options.timing_runs is not None and options.timing_runs < 5:
        raise TftraceError(f"{options.timing_runs} timed runs cannot give a median with a spread", "use 5 or more")
    params = None if options.serving_batching is None else read_batching_parameters(options.serving_batching)
    if params is not None and not params.emulated_sizes():
        raise TftraceError(f"the batching parameters file {options.serving_batching} allows no batch above 1",
                           "there is nothing to emulate: allow a batch size above 1")
    for ref in (options.model, options.savedmodel):  # before "capturing" is printed or a child starts
        if ref is not None:
            refuse_missing_local(ref.path)
            refuse_graphless_local(ref.path)
            refuse_unreadable_remote(ref.path)  # a gs:// one, read in a short child of its own
    return params


def _selected_factors(options: DiagnoseOptions) -> tuple[str, ...]:
    return options.only or tuple(k for k, f in FACTORS.items() if f.quick or not options.quick)


def _context_from_options(options: DiagnoseOptions, batching: BatchingParameters | None) -> PlanContext:
    """The plan's context as the options alone give it, with everything the base capture would
    tell taken at its most permissive (a batch-major signature, a GPU visible, every padded size
    prepared): an experiment skipped even here is skipped by the options, so a selection that
    leaves nothing to run is refused before the base side's capture, which takes minutes on a
    large model. What only the capture can tell (no GPU, fixed shapes) is refused after it."""
    path = options.model.path
    kind = "checkpoint" if "://" not in path and local_checkpoint_prefix(path) else "saved_model"
    config = options.serving_session_config
    return PlanContext(
        base=_base_side(options), model_kind=kind, savedmodel=options.savedmodel,
        batch_sizes=tuple(sorted(set(options.batch_sizes))), factors=_selected_factors(options), quick=options.quick,
        batch_major=True, onednn_on=None, xla_on=False, gpu=None,
        # the padded inputs are written after the base capture; these stand for them, and are never read
        serving_inputs={n: (f"serving_inputs_x{n}.npz", SERVING_REQUESTS * n) for n in batching.emulated_sizes()}
        if batching else {},
        serving_batching=options.serving_batching, session_config=(config, "") if config else None,
        other_python=options.other_python,
    )


def _read_session_config(path: str | None) -> tuple[str, str] | None:
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            return path, fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise TftraceError(f"cannot read the session config {path}: {exc}", "pass a text ConfigProto file") from exc


def _base_side(options: DiagnoseOptions) -> Side:
    sizes = tuple(sorted(set(options.batch_sizes)))
    examples = options.examples or max(2, max(sizes))
    model = options.model
    if options.savedmodel is not None and model.signature_from is None and model.borrowed is None:
        model = replace(model, signature_from=options.savedmodel.lender())  # a checkpoint has no signature of its own
    return Side(
        artifact=model, device=options.device, batch_size=sizes[0],
        inputs=InputSpec(inputs_file=options.inputs_file, seed=options.seed, examples=examples),
        timing_runs=options.timing_runs or (5 if options.quick else 10),
        allow_unsafe_ops=options.allow_unsafe_ops,
    )


def _check_example_count(base: Capture, options: DiagnoseOptions) -> None:
    count = base.examples.count
    if options.inputs_file and base.examples.batch_major and count < max(options.batch_sizes):
        raise TftraceError(f"{options.inputs_file} holds {count} example(s), fewer than batch size "
                           f"{max(options.batch_sizes)}", "give more examples, or smaller --batch-sizes")


def _plan_context(options: DiagnoseOptions, base: Capture, batching: BatchingParameters | None,
                  session_config: tuple[str, str] | None, out: Path) -> PlanContext:
    """The options' context with what the base capture tells put in place of the permissive
    guesses, so the early refusal and the real plan are built from one set of option fields."""
    env = base.environment
    planned = _context_from_options(options, batching)
    ctx = replace(
        planned,
        model_kind=base.artifact["kind"], batch_major=base.examples.batch_major,
        onednn_on=env["onednn"].get("enabled"),
        xla_on="--tf_xla_auto_jit" in env.get("tf_env", {}).get("TF_XLA_FLAGS", ""),
        autotune_on=env_autotune_on(env.get("tf_env") or {}), tf32_on=env.get("tf32_enabled"),
        gpu=gpu_unavailable_reason(env, ask_tensorflow=any(FACTORS[f].gpu for f in planned.factors)),
        session_config=session_config, serving_inputs={},
    )
    if batching is not None and ctx.batch_major and "serving_batching" in ctx.factors:
        ctx.serving_inputs = _serving_inputs(base, batching, out)
    return ctx


def _serving_inputs(base: Capture, params: BatchingParameters, out: Path) -> dict[int, tuple[str, int]]:
    """Padded input files: each request row followed by copies of itself (TF Serving's padding)."""
    inputs = base.inputs
    requests = min(SERVING_REQUESTS, base.examples.count)
    shared = base.examples.shared  # a scalar threshold: every request's own, not a row of it
    arrays = {key: np.asarray(base.tensor(t))[:requests] for key, t in inputs.items() if key not in shared}
    whole = {key: np.asarray(base.tensor(t)) for key, t in inputs.items() if key in shared}
    files: dict[int, tuple[str, int]] = {}
    for copies, sizes in padding_groups(params.emulated_sizes()):
        path = out / f"serving_inputs_x{copies}.npz"
        buffer = io.BytesIO()
        np.savez(buffer, **pad_requests(arrays, copies), **whole)
        write_file(path, buffer.getvalue())
        for size in sizes:
            files[size] = (str(path), requests * copies)
    return files


def _refuse_nothing_to_run(planned: list[Planned]) -> None:
    """A matrix whose every experiment is skipped (``--only batch`` with one batch size, GPU
    factors on a CPU-only build) tests nothing: a report of no experiments would read like a clean
    bill ("none changes the outputs"), so it is the user's mistake, said with each reason."""
    if any(p.kind != "skipped" for p in planned):
        return
    reasons = "; ".join(f"{p.name}: {p.skipped}" for p in planned) or "no factor selected"
    raise TftraceError(f"nothing to diagnose: every experiment selected is skipped here ({reasons})",
                       "select factors that can run here with --only (tftrace diagnose --help lists them), or give what "
                       "the reasons ask for")


def _not_selected(factors: tuple[str, ...], gpu_reason: str | None, why: str) -> list[Planned]:
    """The rest of the matrix, listed as skipped so the table shows what was not tested."""
    out = []
    for factor in FACTORS:
        if factor in factors:
            continue
        reason = gpu_reason if FACTORS[factor].gpu and gpu_reason and gpu_reason.startswith("no GPU") else why
        out.append(Planned(factor, factor, "skipped", skipped=reason))
    return out


def _runs_to_capture(planned: list[Planned], captures: Captures) -> list[tuple[Run, list[str]]]:
    """Distinct runs still to capture -> the experiments that need them; session configs first,
    so a config TensorFlow refuses stops the diagnosis before minutes are spent."""
    needed: dict[str, tuple[Run, list[str]]] = {}
    for p in planned:
        for run in (p.a, p.b):
            if run is None or p.kind == "skipped" or captures.has(run):
                continue
            needed.setdefault(run.key(), (run, []))[1].append(p.name)
    return sorted(needed.values(), key=lambda item: item[0].side.knobs.session_config_text is None)


# ---- experiments -----------------------------------------------------------------------------


def _evaluate_all(planned: list[Planned], captures: Captures, options: DiagnoseOptions, out: Path,
                  quiet: Console, progress: _Progress, walls: dict[str, float], *,
                  stage: str = "experiments") -> list[dict[str, Any]]:
    """Evaluate the experiments, two at a time, as one stage of the progress lines; each one's
    wall seconds go into ``walls`` and its children into the ledger under its name."""
    progress.begin(stage, sum(p.kind != "skipped" for p in planned))
    def one(p: Planned) -> dict[str, Any]:
        began = time.monotonic()
        with children.tagged(p.name):
            result = evaluate_one(p)
        walls[p.name] = round(time.monotonic() - began, 2)
        return result

    def evaluate_one(p: Planned) -> dict[str, Any]:
        progress.start(_experiment_words({"name": p.name, "factor": p.factor, "noise_removed_of": p.noise_removed_of,
                                          "a": {"describe": p.a.describe} if p.a else None,
                                          "b": {"describe": p.b.describe} if p.b else None}))
        cap_a = captures.get(p.a) if p.a else None
        cap_b = captures.get(p.b) if p.b else None
        result = evaluate(p, cap_a, cap_b, out / "experiments" / p.name, options.tolerance, quiet, options.command,
                          quick=options.quick)
        progress.step(_summary_line(result))
        return result

    # Longest first (comparisons likely to isolate origins, then replays in a child), so the two
    # workers finish together.
    runnable = sorted((p for p in planned if p.kind != "skipped"),
                      key=lambda p: (FACTORS[p.factor].cheap, p.kind == "compare"))
    pool = ThreadPoolExecutor(max_workers=PARALLEL)
    try:
        done = dict(zip((p.name for p in runnable), pool.map(one, runnable)))
    finally:  # on an error or Ctrl-C, start nothing more (running children finish their job)
        pool.shutdown(wait=True, cancel_futures=True)
    return [done[p.name] if p.name in done else evaluate(p, None, None, out, options.tolerance, quiet, "")
            for p in planned]


def _announced(captures: Captures, progress: _Progress, why: str) -> Any:
    """``captures.get`` that says on the console which run it captures, when it captures one."""
    def get(run: Run) -> Capture:
        if not captures.has(run):
            progress.step(f"capturing {run.describe} [{run.side.label()}]", stage=f"captures {why}")
        return captures.get(run)
    return get


def _run_recipe(recipe: Recipe, captures: Captures, options: DiagnoseOptions, out: Path, quiet: Console,
                progress: _Progress) -> dict[str, Any]:
    """One more pair: every measured remedy together (tracer.recipe), and its combined cost."""
    p = recipe.planned
    captures.expect([p.a, p.b, recipe.reference])
    progress.begin("the verified recipe", 4)  # three captures and the comparison
    for run in (p.a, p.b, recipe.reference):
        progress.step(f"capturing {run.describe} [{run.side.label()}] for the verified recipe")
        captures.get(run)
    result = evaluate(p, captures.get(p.a), captures.get(p.b), out / "experiments" / p.name, options.tolerance, quiet,
                      options.command, quick=options.quick)
    result.update(recipe_facts(recipe, result, latency(captures.get(recipe.reference))))
    progress.step(_summary_line(result))
    return result


def _summary_line(result: dict[str, Any]) -> str:
    """An experiment's result in words: "Batch size: batch 1 vs batch 8: diverged, max |Δ| 0.0037,
    first at dense/MatMul (MatMul)" (its id, ``batch_1_vs_8``, is the directory under experiments/)."""
    first = result.get("first_divergence")
    where = f", first at {first['node']} ({first['op']})" if first else ""
    diff = result.get("max_abs_output_diff")
    size = f", max |Δ| {diff:.3g}" if isinstance(diff, float) else ""
    return f"{_experiment_words(result)}: {verdict_label(result['verdict'])}{size}{where}"


def _experiment_words(result: dict[str, Any]) -> str:
    factor = FACTORS.get(str(result.get("factor")))
    title = factor.title if factor else str(result.get("title") or result["name"])
    sides = [s.get("describe") for s in (result.get("a"), result.get("b")) if isinstance(s, dict)]
    pair = f": {sides[0]} vs {sides[1]}" if len(sides) == 2 and all(sides) else ""
    removed = " (noise removed)" if result.get("noise_removed_of") else ""
    return f"{title}{removed}{pair}"
