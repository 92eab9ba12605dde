"""Each factor measured net of run-to-run noise (issue 23.3).

When one side alone does not repeat itself, a pair of sides that differ in one factor differs
by that factor *and* by the noise, and one lucky (or unlucky) pair decides the answer: on the
H200 a faithful SavedModel was blamed on "export-time rewrites" because two processes
autotuned different convolution algorithms, and the batch answer named the first pointwise
conv (whose result changes from run to run) instead of the dense MatMul, where batch size
itself first changes the numbers. So:

* **Is the base side noisy?** Measured, not assumed: a repeat experiment moved (the same side
  run twice, in one process or in two, gave other outputs — not because the graph writes its
  own state), or the base side is a GPU side without op determinism (each process autotunes
  its own kernels, which the next pair of runs may not repeat). :func:`noise_finding`.
* **Each factor's pair again, with the noise removed**: both sides with op determinism on
  (:func:`plan_noise_free`); where TensorFlow refuses op determinism for the model on a GPU,
  cuDNN autotuning off instead (:func:`autotune_off`); on a CPU there is nothing else to turn
  off, and the refusal is recorded as the reason the noise could not be removed.
* **The answers rest on that pair** (:func:`effective`): an experiment whose noise-free twin ran
  is judged by the twin's verdict, difference and first divergence, with the default runs'
  figures kept beside them (``raw``). The noise itself is one cause with its own magnitude.

Nothing here runs anything: :mod:`tracer.diagnosis.run` captures and evaluates the twins.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from ..errors import TftraceError
from .plan import Planned, Run, with_knobs

__all__ = ["NOISE_FACTORS", "noise_finding", "plan_noise_free", "autotune_off", "effective", "run_noise_free",
           "DETERMINISM_HOW", "AUTOTUNE_HOW"]

# Factors that are the noise, or its remedy: they are not re-run without it.
NOISE_FACTORS = frozenset({"repeat", "observation", "determinism", "autotune", "atomics"})
DETERMINISM_HOW = "op determinism on both sides"
AUTOTUNE_HOW = "cuDNN autotuning off on both sides (TensorFlow refused op determinism for this model)"
TWIN_SUFFIX = "_noise_removed"
# The measured fields of an experiment that its noise-free twin replaces in the answers.
MEASURED = ("verdict", "max_abs_output_diff", "outputs", "first_divergence", "rewrite_count", "discrete_changes",
            "executed_ops_differ", "converted_ops", "plain_outputs")
# A twin's attribution replaces its original's: on the H200 (2026-12-04) a training checkpoint's
# batch 1 vs 8 started at a nondeterministic conv in the default runs (no attribution) and at
# the training-mode batch norm with the noise removed, and the answer, resting on the twin's
# figures, named "shape-dependent kernel choice" from the original's want of one.
ATTRIBUTION = ("attribution", "training_graph", "state_ops")


def _effect(exp: dict[str, Any]) -> float:
    value = exp.get("max_abs_output_diff")
    return float("inf") if value is None or isinstance(value, str) else float(value)


def noise_finding(base_device: str, base_determinism: bool, results: list[dict[str, Any]]) -> dict[str, Any] | None:
    """How the base side was seen to be noisy, or None when it repeated itself bit for bit and
    is no GPU side without op determinism. A repeat that moved because the graph writes its own
    state is the model's state, not noise (a fresh load restores it): it does not count."""
    moved = [r for r in results if r.get("factor") == "repeat" and r.get("verdict") not in (None, "identical")
             and r.get("attribution") != "state" and not r.get("noise_removed_of")]
    gpu = base_device.startswith("gpu") and not base_determinism
    if not moved and not gpu:
        return None
    worst = max(moved, key=_effect) if moved else None
    finding: dict[str, Any] = {
        "measured_by": [r["name"] for r in moved],
        "max_abs": worst["max_abs_output_diff"] if worst else None,
        "first_divergence": (worst or {}).get("first_divergence"),
        "random_ops": sorted({op for r in moved if r.get("attribution") == "random" for op in r.get("state_ops") or []}),
        "gpu_without_determinism": gpu,
        "twins": [], "refused": {},
    }
    if worst:
        where = "in one process" if worst["name"] == "repeat_same_process" else "in two fresh processes"
        finding["where"] = where
        finding["reason"] = (f"the same side run twice ({where}) changed intermediate tensors, no output"
                             if worst.get("max_abs_output_diff") == 0 else
                             f"the same side run twice ({where}) changed its outputs by up to {_figure(worst)}")
    else:
        finding["reason"] = ("a GPU side without op determinism: each process autotunes its own kernels, so one pair "
                             "of runs says nothing about the next (its repeats did not move this time)")
    return finding


def _figure(exp: dict[str, Any]) -> str:
    value = exp.get("max_abs_output_diff")
    return "an unmeasurable amount" if value is None or isinstance(value, str) else f"{float(value):.2g}"


def _denoised(run: Run, knob: dict[str, Any], words: str) -> Run:
    return Run(with_knobs(run.side, **knob), f"{run.describe}, {words}", run.instance)


def plan_noise_free(planned: list[Planned]) -> list[Planned]:
    """Every factor's pair once more with op determinism on both sides (the noise's own factors
    and pairs already deterministic excepted)."""
    twins = []
    for p in planned:
        if p.kind != "compare" or p.factor not in _factors() or p.factor in NOISE_FACTORS or p.a is None \
                or p.b is None or p.noise_removed_of or (p.a.side.knobs.determinism and p.b.side.knobs.determinism):
            continue
        twins.append(replace(p, name=p.name + TWIN_SUFFIX, noise_removed_of=p.name,
                             a=_denoised(p.a, {"determinism": True}, "op determinism on"),
                             b=_denoised(p.b, {"determinism": True}, "op determinism on"),
                             notes=p.notes + (f"the pair of {p.name} with the run-to-run noise removed: "
                                              f"{DETERMINISM_HOW}",)))
    return twins


def autotune_off(twin: Planned, original: Planned) -> Planned | None:
    """The twin with cuDNN autotuning off instead of op determinism (GPU pairs only: on a CPU
    autotuning does not exist, so there is nothing to turn off)."""
    assert original.a is not None and original.b is not None
    if not all(r.side.device.startswith("gpu") for r in (original.a, original.b)):
        return None
    return replace(twin, a=_denoised(original.a, {"autotune": "off"}, "cuDNN autotune off"),
                   b=_denoised(original.b, {"autotune": "off"}, "cuDNN autotune off"),
                   notes=original.notes + (f"the pair of {original.name} with the run-to-run noise reduced: "
                                           f"{AUTOTUNE_HOW}",))


def _factors() -> Any:
    from .experiments import FACTORS  # noqa: PLC0415 - experiments imports plan, as this module does

    return FACTORS


def run_noise_free(twins: list[Planned], planned: list[Planned], finding: dict[str, Any], capture: Callable[[Run], Any],
                   evaluate_all: Callable[[list[Planned]], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Capture and evaluate every factor's noise-free twin (``twins``, from :func:`plan_noise_free`
    of ``planned``); returns the twins' results.

    A twin whose side TensorFlow refuses to run with op determinism is tried with autotuning
    off on a GPU; where neither can run, the reason is recorded in ``finding["refused"]`` (its
    experiment is then judged from the default runs, and the answers say the noise could not
    be removed). Each refused run is tried once."""
    originals = {p.name: p for p in planned}
    failed: dict[str, str] = {}

    def runnable(twin: Planned) -> str | None:
        for run in (twin.a, twin.b):
            assert run is not None
            if run.key() in failed:
                return failed[run.key()]
            try:
                capture(run)
            except TftraceError as exc:
                failed[run.key()] = exc.problem  # the fix it carries is for a capture's own --determinism
                return failed[run.key()]
        return None

    ready = []
    for twin in twins:
        reason = runnable(twin)
        original = originals[twin.noise_removed_of or ""]
        if reason is not None:
            fallback = autotune_off(twin, original)
            if fallback is not None and runnable(fallback) is None:
                twin, reason = fallback, None
        if reason is not None:
            finding["refused"][original.name] = reason
            continue
        ready.append(twin)
    finding["twins"] = [t.name for t in ready]
    return evaluate_all(ready) if ready else []


def link(results: list[dict[str, Any]], twins: list[dict[str, Any]], finding: dict[str, Any]) -> None:
    """Each original experiment's ``noise_removed`` record: its twin's name, how the noise was
    removed and what the twin measured, or why it could not be."""
    by_original = {t["noise_removed_of"]: t for t in twins}
    for r in results:
        twin = by_original.get(r["name"])
        if twin is not None:
            how = AUTOTUNE_HOW if any("cuDNN autotuning off" in n for n in twin.get("notes", [])) else DETERMINISM_HOW
            r["noise_removed"] = {"experiment": twin["name"], "how": how, "verdict": twin["verdict"],
                                  "max_abs_output_diff": twin["max_abs_output_diff"]}
        elif r["name"] in finding["refused"]:
            r["noise_removed"] = {"experiment": None, "refused": finding["refused"][r["name"]]}


def effective(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The experiments the answers rest on: each one whose noise-free twin ran, judged by the
    twin (its default runs' figures kept under ``raw``); the twins themselves are not listed
    again; every other experiment as it is."""
    by_name = {r["name"]: r for r in results}
    out = []
    for r in results:
        if r.get("noise_removed_of"):
            continue
        twin = by_name.get(str((r.get("noise_removed") or {}).get("experiment")))
        if twin is None or twin.get("verdict") is None:
            out.append(r)
            continue
        view = dict(r)
        view.update({k: twin[k] for k in MEASURED if k in twin})
        if twin.get("attribution"):  # what the graph does by design, as the pair the answer rests on shows it
            view.update({k: twin[k] for k in ATTRIBUTION if k in twin})
        view["raw"] = {k: r.get(k) for k in ("verdict", "max_abs_output_diff", "first_divergence")}
        view["noise_removed_how"] = r["noise_removed"]["how"]
        out.append(view)
    return out
