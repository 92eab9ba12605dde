"""The three answers of ``tftrace diagnose`` — why, how to prevent it, what it costs — from the
measured experiments and the cause catalogue (:mod:`tracer.causes`).

Only factors whose experiment *diverged* (beyond tolerance) are named: a factor that moved the
numbers by less than the tolerance, or not at all, is in the experiment table, not in the
answers. Statements are measurements of this model on this machine: the size of the change,
the op it starts at, the latencies. "Still leaves a difference" is measured too: another
factor still diverged in an experiment whose two sides both ran with this remedy's setting.
"""

from __future__ import annotations

from typing import Any

from ..causes import CAUSES
from ..optypes import loop_result
from ..report.numbers import figure
from .experiments import FACTORS
from .recipe import recipe_text

__all__ = ["build_answers", "FACTOR_TITLES"]

FACTOR_TITLES = {key: factor.title for key, factor in FACTORS.items()}  # a view of the registry, for callers
SHAPE_SETTING = "batch"  # a "shape" remedy holds when both sides ran at one batch size, whatever it is
DEFAULT_COST = {  # the cost sentence of a factor without its own ``cost_text``: B is a remedy, or just the varied run
    True: "{title}: {both}. Choosing {b} {pct} on this machine{noise}.",
    False: "{title}: no setting to pay for; {both} ({signed}){noise}.",
}


def _title(factor: str) -> str:
    return FACTORS[factor].title


def _effect(exp: dict[str, Any]) -> float:
    value = exp.get("max_abs_output_diff")
    return float("inf") if value is None or isinstance(value, str) else float(value)


def _fmt(value: Any) -> str:
    return figure(value, absent="an unmeasurable amount (NaN/Inf or changed shapes)")


def _where(exp: dict[str, Any]) -> str:
    first = exp.get("first_divergence")
    if not first:
        return ""
    text = f"; it starts at `{first['node']}` ({first['op']})"
    if first.get("observed") == "fetch-alone replays":
        converted = exp.get("converted_ops") or []
        text = (f"; observed op by op (each tensor fetched alone, so the rewrite can act above it), the first "
                f"tensor that differs is `{first['node']}` ({first['op']})")
        if converted:
            text += f", inside the converted region that begins at `{converted[0]}`"
        return text
    verdict = first.get("isolation")
    loop = loop_result(str(first.get("op") or ""))  # its replay ran the whole loop
    if verdict == "own_error":
        return text + (f", where the while loop {loop} differs given identical inputs" if loop else
                       ", whose own kernel differs given identical inputs")
    return text + ISOLATION_WORDS.get(str(verdict), "")


# What each isolation verdict (but own_error, said with its loop above) adds to where an experiment's difference starts.
ISOLATION_WORDS = {
    "weights_differ": ", a weight the two sides hold with different values (no kernel is involved)",
    "inherited": ", which only inherits a difference too small to judge above it",
    "nondeterministic": ", whose result changes from run to run on identical inputs",
    "run_time_rewrite": ", which the two runs executed as different kernels (a rewrite at run time)",
    "state": ", which reads the model's own state (a variable the graph writes on every run)",
    "not_replayed": ", which could not be replayed alone",
}


def _discrete_text(exp: dict[str, Any]) -> str:
    """`detection_classes`: 2 values changed, ... — what no tolerance can cover; a detector's
    detections that appeared, disappeared or changed class, counted as detections."""
    changes = exp.get("discrete_changes") or {}
    parts = [f"`{key}` ({c.get('dtype')}): {c.get('changed')} value(s) changed" for key, c in changes.items()]
    for group in _changed_detections(exp):
        t = group["total"]
        parts.append(f"detections (`{group['keys'].get('boxes')}`…): {t.get('changed_class', 0)} changed class, "
                     f"{t.get('appeared', 0)} appeared, {t.get('disappeared', 0)} disappeared of {t.get('a', 0)}")
    return "; ".join(parts)


def _changed_detections(exp: dict[str, Any]) -> list[dict[str, Any]]:
    """The experiment's groups of detections where one appeared, disappeared or changed class."""
    return [g for g in exp.get("detections") or [] if isinstance(g, dict) and g.get("compared")
            and isinstance(g.get("total"), dict)
            and any(g["total"].get(k) for k in ("appeared", "disappeared", "changed_class"))]


def _tolerance_text(exp: dict[str, Any]) -> str:
    """" Or accept it: tolerances of 0.0035 on `scores`, …": one figure per output, in that output's
    units, each what was measured on it. Class and count outputs get none (they must be equal), and a
    detector's boxes and scores are given as their matched detections differ, not row by row."""
    groups = [g for g in exp.get("detections") or [] if isinstance(g, dict)]
    owned = {k for g in groups if g.get("compared") for k in [*g["keys"].values(), *(g.get("per_detection_max_abs") or {})]}
    discrete = {k for g in groups for k in g.get("discrete") or []} | set(exp.get("discrete_changes") or {})
    parts = [f"{figure(v)} on `{k}`" for k, v in (exp.get("outputs") or {}).items()
             if k not in owned and k not in discrete and isinstance(v, (int, float)) and v > 0]
    for g in groups:
        total = g.get("total") if g.get("compared") and isinstance(g.get("total"), dict) else {}
        for what, value, key in (("scores", total.get("max_score_diff"), g["keys"].get("scores")),
                                 ("box coordinates", total.get("max_box_diff"), g["keys"].get("boxes"))):
            if isinstance(value, (int, float)) and value > 0:
                parts.append(f"{figure(value)} on the matched detections' {what} (`{key}`)")
        for key, value in (g.get("per_detection_max_abs") or {}).items():
            if g.get("compared") and isinstance(value, (int, float)) and value > 0:
                parts.append(f"{figure(value)} on `{key}` of matched detections")
    if not parts:
        return ""
    exact = sorted(k for k in discrete if k in (exp.get("outputs") or {}))
    none = f"; no tolerance for {', '.join(f'`{k}`' for k in exact)}: they must be equal" if exact else ""
    many = len(parts) > 1
    return (f" Or accept it: {'tolerances' if many else 'a tolerance'} of {', '.join(parts)} "
            f"cover{'' if many else 's'} what was measured, each in its output's units{none}.")


def _nondeterminism_explains(factor: str, exp: dict[str, Any], diverged: dict[str, list[dict[str, Any]]]) -> float | None:
    """For the export factor: the fresh-process repeat's effect, when the static diff found no
    rewrite and one side alone already differs from run to run — then the export is not the cause."""
    if not FACTORS[factor].same_graph_is_nondeterminism or exp.get("rewrite_count") != 0:
        return None
    repeats = [e for e in diverged.get("repeat", []) if e.get("name") == "repeat_fresh_process"
               and not e.get("attribution")]
    return max((_effect(e) for e in repeats), default=None)


def _why(factor: str, exps: list[dict[str, Any]], diverged: dict[str, list[dict[str, Any]]] | None = None) -> str:
    worst = max(exps, key=_effect)
    discrete = _discrete_text(worst)
    discrete = f" Discrete outputs changed ({discrete}): no tolerance covers a changed class or count." if discrete else ""
    repeat_effect = _nondeterminism_explains(factor, worst, diverged or {})
    if repeat_effect is not None:
        return (f"{_title(factor)}: the outputs differ by up to {_fmt(worst['max_abs_output_diff'])}, but the "
                f"two graphs are the same (graph diff: no rewrite) and a fresh-process repeat of one side alone "
                f"differs by up to {_fmt(repeat_effect)}: this is run-to-run nondeterminism, not the export "
                f"(see {_title('repeat')}).{discrete}")
    a, b = (worst.get("a") or {}).get("describe", "A"), (worst.get("b") or {}).get("describe", "B")
    if worst.get("attribution") == "state":
        ops = ", ".join(f"`{n}`" for n in worst.get("state_ops", [])[:3])
        return (f"State: the graph changes its variables when it runs ({ops}), so the second run starts from "
                f"another state and answers differently (by up to {_fmt(worst['max_abs_output_diff'])}). This is the "
                "model's state, not kernel nondeterminism.")
    if worst.get("attribution") == "random":
        ops = ", ".join(f"`{n}`" for n in worst.get("state_ops", [])[:3])
        return (f"Random ops: the graph draws random numbers ({ops}), so repeated runs differ by design "
                f"(by up to {_fmt(worst['max_abs_output_diff'])}).")
    cause = CAUSES.get(FACTORS[factor].cause or "")
    because = f" Cause: {cause.title}." if cause else ""
    others = f" ({len(exps)} experiments of this factor diverged; the largest is shown)" if len(exps) > 1 else ""
    return (f"{_title(factor)}: {a} vs {b} changes the outputs by up to "
            f"{_fmt(worst['max_abs_output_diff'])}{_where(worst)}.{because}{others}{discrete}")


def _settings_agree(exp: dict[str, Any], factor: str, value: Any | None) -> bool:
    settings = exp.get("settings") or {}
    a, b = (settings.get("a") or {}).get(factor), (settings.get("b") or {}).get(factor)
    return a is not None and a == b and (value is None or a == value)


def _still_leaves(factor: str, exp: dict[str, Any], diverged: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Other diverged factors measured with this factor's remedy in effect on both sides."""
    remedy = FACTORS[factor].remedy
    if remedy == "setting":
        setting, value, same_cause = factor, ((exp.get("settings") or {}).get("b") or {}).get(factor), {factor}
    elif remedy == "shape":  # any one fixed shape will do
        setting, value, same_cause = SHAPE_SETTING, None, {k for k, f in FACTORS.items() if f.remedy == "shape"}
    else:
        return []
    return [_title(other) for other, exps in diverged.items()
            if other not in same_cause and any(_settings_agree(e, setting, value) for e in exps)]


def _prevent(factor: str, exps: list[dict[str, Any]], diverged: dict[str, list[dict[str, Any]]]) -> str:
    worst = max(exps, key=_effect)
    if worst.get("attribution") in ("state", "random"):
        return ("State: compare runs that start from the same state (reload the model, or reset its variables) — "
                "repeats of a stateful graph are not a determinism test.")
    if _nondeterminism_explains(factor, worst, diverged) is not None:
        return (f"{_title(factor)}: nothing to change in the export (no rewrite); make the runs deterministic "
                f"as for {_title('repeat')}.")
    remedy = worst.get("remedy") or FACTORS[factor].prevent
    if remedy is None:
        cause = CAUSES.get(FACTORS[factor].cause or "")
        remedy = cause.remedy if cause else "keep this factor the same on both sides"
    text = f"{_title(factor)}: {remedy}."
    left = _still_leaves(factor, worst, diverged)
    if left:
        text += f" This still leaves a difference from {', '.join(left)} (measured with this setting on both sides)."
    text += FACTORS[factor].prevent_note
    effect = _effect(worst)
    if worst.get("discrete_changes") or _changed_detections(worst):
        text += f" A tolerance is no remedy here: discrete outputs changed ({_discrete_text(worst)})."
    elif effect != float("inf"):
        text += _tolerance_text(worst)
    return text


def _latency_text(lat: dict[str, Any], basis: str) -> str:
    """``3.9 ms (3.6–6.7 ms over 5 runs)``; per example: the run, then its share per example."""
    spread = f" ({lat['min']:.3g}–{lat['max']:.3g} ms over {lat['runs']} runs)" if "min" in lat else ""
    text = f"{lat['median']:.3g} ms{spread}"
    rows = int(lat.get("batch_rows") or 1)
    if basis == "per example" and rows > 1:
        text += f" per run of {rows} = {lat['per_row_median']:.3g} ms per example"
    return text


def _overlap(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if not all(k in a and k in b for k in ("min", "max")):
        return False
    return a["min"] <= b["max"] and b["min"] <= a["max"]


def _pct(pct: float) -> str:
    return f"costs {pct:+.1f}%" if pct >= 0 else f"is {-pct:.1f}% faster"


def _cost(factor: str, exps: list[dict[str, Any]], noise_pct: float | None) -> str | None:
    measured = [e for e in exps if e.get("cost_pct") is not None and e.get("latency_ms") and not e.get("attribution")]
    if not measured or FACTORS[factor].costless:  # nothing to set, so nothing to pay
        return None
    worst = max(measured, key=_effect)
    lat, basis, pct = worst["latency_ms"], worst.get("latency_basis", "per run"), worst["cost_pct"]
    a, b = worst["a"]["describe"], worst["b"]["describe"]
    both = f"{a}: {_latency_text(lat['a'], basis)}; {b}: {_latency_text(lat['b'], basis)}"
    if noise_pct is not None:
        quiet = abs(pct) <= noise_pct
        noise = f" — within the timing noise (±{noise_pct:.1f}% between two identical runs)" if quiet else ""
    else:
        noise = " — within the timing noise (the two ranges overlap)" if basis == "per run" and \
            _overlap(lat["a"], lat["b"]) else ""
    template = FACTORS[factor].cost_text or DEFAULT_COST[bool(worst.get("remedy"))]
    return template.format(title=_title(factor), both=both, pct=_pct(pct), signed=f"{pct:+.1f}%", a=a, b=b,
                           a_rows=lat["a"].get("batch_rows"), b_rows=lat["b"].get("batch_rows"), noise=noise)


def _noise_pct(ran: list[dict[str, Any]]) -> float | None:
    """How much two captures of one side differ in median latency: the floor below which a
    measured cost means nothing (the fresh-process repeat measures exactly that)."""
    repeats = [abs(e["cost_pct"]) for e in ran if e["name"] == "repeat_fresh_process" and e.get("cost_pct") is not None]
    return repeats[0] if repeats else None


def _noise_line(noise_pct: float | None) -> list[str]:
    if noise_pct is None:
        return []
    return [f"Timing noise: two captures of the same side differ by {noise_pct:.1f}% in median latency on this "
            "machine now (repeat in a fresh process); smaller costs are not significant."]


ASKED = ("export", "batch")  # the user's own questions: checkpoint vs SavedModel, batch 1 vs N


def _within_tolerance(experiments: list[dict[str, Any]], diverged: dict[str, list[dict[str, Any]]]) -> list[str]:
    """A line for each factor the user asks about whose experiments differ only within tolerance:
    small, but not nothing, and where it starts is what they came for."""
    lines = []
    for factor in ASKED:
        near = [e for e in experiments if e.get("factor") == factor and e.get("verdict") == "within_tolerance"]
        if factor in diverged or not near:
            continue
        worst = max(near, key=_effect)
        lines.append(f"{_title(factor)}: within tolerance, the outputs differ by up to "
                     f"{_fmt(worst['max_abs_output_diff'])}{_where(worst)}.")
    return lines


def build_answers(experiments: list[dict[str, Any]], tolerance: dict[str, Any]) -> dict[str, Any]:
    """``{"why", "prevent", "cost", "source": "diagnosis", "factors"}`` from the experiment results."""
    diverged: dict[str, list[dict[str, Any]]] = {}
    recipe = next((e for e in experiments if e.get("factor") == "recipe"), None)
    experiments = [e for e in experiments if e.get("factor") != "recipe"]
    for exp in experiments:
        if exp.get("verdict") == "diverged":
            diverged.setdefault(exp["factor"], []).append(exp)
    order = sorted(diverged, key=lambda f: -max(_effect(e) for e in diverged[f]))
    ran = [e for e in experiments if not e.get("skipped")]
    noise_pct = _noise_pct(ran)
    within = _within_tolerance(experiments, diverged)
    if not order:
        return {
            "why": [f"None of the {len(ran)} experiments that ran changes the outputs beyond the tolerance "
                    f"(atol {tolerance.get('atol')}, rtol {tolerance.get('rtol')}): on this machine the factors tested "
                    f"({', '.join(sorted({_title(e['factor']) for e in ran}))}) do not explain a difference."] + within,
            "prevent": [], "cost": [], "source": "diagnosis", "factors": [],
        }
    return {
        "why": [_why(f, diverged[f], diverged) for f in order] + within,
        "prevent": [_prevent(f, diverged[f], diverged) for f in order] + ([recipe_text(recipe)] if recipe else []),
        "cost": [c for c in (_cost(f, diverged[f], noise_pct) for f in order) if c] + _noise_line(noise_pct),
        "source": "diagnosis",
        "timing_noise_pct": noise_pct,
        "factors": order,
        "factor_descriptions": {f: FACTORS[f].description for f in order},
    }
