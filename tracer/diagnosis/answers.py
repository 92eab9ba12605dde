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
from ..comparison.statuses import isolation_clause
from ..diff.kinds import kind_of
from ..optypes import loop_result
from ..text import count, listed
from ..report.numbers import figure
from .experiments import FACTORS
from .noise import NOISE_FACTORS, effective, noise_finding
from .recipe import recipe_text

__all__ = ["build_answers", "FACTOR_TITLES"]

FACTOR_TITLES = {key: factor.title for key, factor in FACTORS.items()}  # a view of the registry, for callers
SHAPE_SETTING = "batch"  # a "shape" remedy holds when both sides ran at one batch size, whatever it is
DEFAULT_COST = {  # the cost sentence of a factor without its own ``cost_text``: B is a remedy, or just the varied run
    True: "{title}: {both}. Choosing {b} {pct} on this machine{noise}.",
    False: "{title}: no setting to pay for; {both}; {signed}{noise}.",
}


def _title(factor: str) -> str:
    return FACTORS[factor].title


def _effect(exp: dict[str, Any]) -> float:
    value = exp.get("max_abs_output_diff")
    return float("inf") if value is None or isinstance(value, str) else float(value)


def _fmt(value: Any) -> str:
    return figure(value, absent="an unmeasurable amount (NaN/Inf or changed shapes)")


def _inside_only(value: Any) -> bool:
    """A pair judged op by op can diverge with every output bit-identical: its intermediates
    differ and heal (on the H200, a GPU side's fresh process moved 28 tensors, no output)."""
    return value == 0


def _differ(value: Any) -> str:
    """``differ by up to 0.0042``, or ``differ only inside (no output moved)`` where the outputs did not."""
    return "differ only inside (no output moved)" if _inside_only(value) else f"differ by up to {_fmt(value)}"


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
    rewrite = first.get("rewrite")
    if isinstance(rewrite, str) and rewrite:  # the graph diff's rewrite at the origin: the export's own change
        kind = kind_of(rewrite)
        text += f" — the export's {(kind.group if kind and kind.group else rewrite.replace('_', ' '))} ({rewrite})"
    clause = isolation_clause(verdict, loop_result(str(first.get("op") or "")))  # a loop result's replay ran the loop
    return text + (f", {clause}" if clause else "")


def _discrete_text(exp: dict[str, Any]) -> str:
    """`detection_classes`: 2 values changed, ... — what no tolerance can cover; a detector's
    detections that appeared, disappeared or changed class, counted as detections."""
    changes = exp.get("discrete_changes") or {}
    parts = [f"`{key}` ({c.get('dtype')}): {count(c.get('changed') or 0, 'value')} changed" for key, c in changes.items()]
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


def _explained_by_the_graphs(exp: dict[str, Any]) -> bool:
    """The graph diff found a rewrite, or the two sides executed other kernels."""
    return bool(exp.get("rewrite_count")) or bool(exp.get("executed_ops_differ"))


def _noise_words(noise: dict[str, Any]) -> str:
    """``one side alone differs by up to 0.00037 between two runs (two fresh processes)``."""
    if noise.get("max_abs") is None:
        return str(noise.get("reason"))
    if _inside_only(noise["max_abs"]):
        return f"one side alone differs inside between two runs ({noise.get('where')}), though no output moved"
    return f"one side alone differs by up to {_fmt(noise['max_abs'])} between two runs ({noise.get('where')})"


def _removed_words(exp: dict[str, Any]) -> str:
    raw = exp.get("raw") or {}
    return (f" (measured with the noise removed: {exp.get('noise_removed_how')}; the default runs "
            f"{_differ(raw.get('max_abs_output_diff'))})")


def _not_the_factor(factor: str, exp: dict[str, Any], noise: dict[str, Any] | None) -> str | None:
    """For a factor that the same graph cannot cause (the export): why it is not blamed, or
    None when it is. It is blamed only when a difference survives with the noise removed and
    the graph diff or the executed kernels explain it."""
    if not FACTORS[factor].same_graph_is_nondeterminism or _explained_by_the_graphs(exp):
        return None
    title, size = _title(factor), _fmt(exp.get("max_abs_output_diff"))
    if exp.get("raw"):  # the noise-free pair still differs, and nothing in the graphs says why
        return (f"{title}: with the noise removed ({exp.get('noise_removed_how')}) the outputs still differ by up to "
                f"{size}{_where(exp)}, but the two graphs are the same (graph diff: no rewrite) and both sides "
                f"executed the same kernels: nothing in the export explains it, so it is not blamed.")
    if noise is None:
        return None
    refused = (noise.get("refused") or {}).get(exp.get("name"))
    refused = f" (the noise could not be removed: {refused})" if refused else ""
    return (f"{title}: the outputs differ by up to {size}, but the two graphs are the same (graph diff: no "
            f"rewrite, the same kernels executed) and {_noise_words(noise)}: this is run-to-run nondeterminism, "
            f"not the export (see {_title('repeat')}){refused}.")


def _why(factor: str, exps: list[dict[str, Any]], noise: dict[str, Any] | None = None) -> str:
    # what the graph does by design (its state, its random draws) explains its repeats, the largest or not
    worst = max([e for e in exps if e.get("attribution")] or exps, key=_effect)
    largest = _fmt(max(exps, key=_effect)["max_abs_output_diff"])
    discrete = _discrete_text(worst)
    discrete = f" Discrete outputs changed ({discrete}): no tolerance covers a changed class or count." if discrete else ""
    not_it = _not_the_factor(factor, worst, noise)
    if not_it is not None:
        return not_it + discrete
    a, b = (worst.get("a") or {}).get("describe", "A"), (worst.get("b") or {}).get("describe", "B")
    if worst.get("attribution") == "state":
        ops = listed(worst.get("state_ops", []), 3, "`")
        return (f"State: the graph changes its variables when it runs ({ops}), so the second run starts from "
                f"another state and answers differently (by up to {_fmt(worst['max_abs_output_diff'])}). This is the "
                "model's state, not kernel nondeterminism.")
    if worst.get("attribution") == "training_graph":
        size = worst["max_abs_output_diff"]
        changes = "changes no output, only intermediate tensors" if _inside_only(size) else \
            f"changes the outputs by up to {_fmt(size)}"
        first = worst.get("first_divergence") or {}
        return (f"{_title(factor)}: {a} vs {b} {changes}; it starts at `{first.get('node')}` ({first.get('op')}). "
                f"Cause: {CAUSES['training_graph'].title}: {worst.get('training_graph')}")
    if worst.get("attribution") == "random":
        ops = listed(worst.get("state_ops", []), 3, "`")
        return (f"Random ops: the graph draws random numbers ({ops}), so repeated runs differ by design "
                f"(by up to {largest}).{_noise_apart(factor, noise)}")
    cause = CAUSES.get(FACTORS[factor].cause or "")
    because = f" Cause: {cause.title}." if cause else ""
    others = f" ({len(exps)} experiments of this factor diverged; the largest is shown)" if len(exps) > 1 else ""
    removed = _removed_words(worst) if worst.get("raw") else ""
    size = worst["max_abs_output_diff"]
    changes = "changes no output, only intermediate tensors" if _inside_only(size) else \
        f"changes the outputs by up to {_fmt(size)}"
    return (f"{_title(factor)}: {a} vs {b} {changes}{_where(worst)}{removed}.{because}{others}{discrete}"
            f"{_noise_apart(factor, noise)}{_not_alone(factor, worst, noise)}")


def _not_alone(factor: str, exp: dict[str, Any], noise: dict[str, Any] | None) -> str:
    """A factor measured only with the noise in it: its difference is not its own alone."""
    if noise is None or exp.get("raw") or factor in NOISE_FACTORS:
        return ""
    refused = (noise.get("refused") or {}).get(exp.get("name"))
    why = f"the noise could not be removed ({refused})" if refused else "it was not measured with the noise removed"
    return (f" This is not this factor's difference alone: {_noise_words(noise)}, and {why}; "
            f"compare the two sizes before acting on it.")


def _noise_apart(factor: str, noise: dict[str, Any] | None) -> str:
    """The repeat factor's line, when the base side is noisy: how every other factor was kept apart from it."""
    if factor != "repeat" or noise is None:
        return ""
    twins, refused = noise.get("twins") or [], noise.get("refused") or {}
    text = ""
    if twins:
        text += (f" It is one cause of its own: every other factor's pair was also run with it removed "
                 f"({count(len(twins), 'pair')}; op determinism on both sides) and is judged by those runs.")
    if refused:
        reason = next(iter(refused.values()))
        text += f" It could not be removed for {', '.join(sorted(refused))}: {reason}"
        text = text.rstrip(".") + "."
    return text


def _noise_line(noise: dict[str, Any]) -> str:
    """The noise as a cause of its own, when no repeat experiment diverged (it moved within the
    tolerance, or a GPU side without op determinism did not move this time)."""
    first = noise.get("first_divergence") or {}
    where = f"; it starts at `{first['node']}` ({first['op']})" if first.get("node") else ""
    return f"{_title('repeat')}: {_noise_words(noise)}{where}.{_noise_apart('repeat', noise)}"


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


def _prevent(factor: str, exps: list[dict[str, Any]], diverged: dict[str, list[dict[str, Any]]],
             noise: dict[str, Any] | None = None) -> str:
    worst = max(exps, key=_effect)
    if worst.get("attribution") in ("state", "random"):
        return ("State: compare runs that start from the same state (reload the model, or reset its variables) — "
                "repeats of a stateful graph are not a determinism test.")
    if worst.get("attribution") == "training_graph":
        return f"{_title(factor)}: {CAUSES['training_graph'].remedy}."
    if _not_the_factor(factor, worst, noise) is not None:
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


def _cost(factor: str, exps: list[dict[str, Any]], noise: dict[str, Any] | None = None) -> str | None:
    """The cost sentence, by the one rule of :mod:`tracer.diagnosis.timing`: a cost is claimed
    only when the interleaved timings make it significant; otherwise "within timing noise"."""
    measured = [e for e in exps if e.get("latency_ms") and not e.get("attribution")]
    if not measured or FACTORS[factor].costless:  # nothing to set, so nothing to pay
        return None
    worst = max(measured, key=_effect)
    if _not_the_factor(factor, worst, noise) is not None:  # not blamed: nothing to pay for either
        return None
    lat, basis = worst["latency_ms"], worst.get("latency_basis", "per run")
    a, b = worst["a"]["describe"], worst["b"]["describe"]
    timing = worst.get("timing") or {}
    if "ratio" in timing:
        pairs = int(timing.get("pair_count") or 1)
        over = f" in each of {pairs} pairs of fresh processes" if pairs > 1 else ""
        both = (f"{a}: {timing['median_a_ms']:.3g} ms; {b}: {timing['median_b_ms']:.3g} ms (medians of "
                f"{timing['runs']} interleaved runs of each{over}, per run)")
        pct = timing["words"]
    else:
        both = f"{a}: {_latency_text(lat['a'], basis)}; {b}: {_latency_text(lat['b'], basis)}"
        pct = (f"was not timed interleaved with the other side ({timing.get('error', 'no interleaved timings')}), "
               "and two captures' medians are no evidence of a cost: none is claimed")
    template = FACTORS[factor].cost_text or DEFAULT_COST[bool(worst.get("remedy"))]
    return template.format(title=_title(factor), both=both, pct=pct, signed=f"B {pct}", a=a, b=b,
                           a_rows=lat["a"].get("batch_rows"), b_rows=lat["b"].get("batch_rows"), noise="")


def _noise_pct(ran: list[dict[str, Any]]) -> float | None:
    """How much two captures of one side differ in median latency (the fresh-process repeat):
    kept in diagnosis.json for what it shows, no longer a floor for costs (each cost has its own
    interval)."""
    repeats = [abs(e["cost_pct"]) for e in ran if e["name"] == "repeat_fresh_process" and e.get("cost_pct") is not None]
    return repeats[0] if repeats else None


ASKED = ("export", "batch")  # the user's own questions: checkpoint vs SavedModel, batch 1 vs N


def _within_tolerance(experiments: list[dict[str, Any]], diverged: dict[str, list[dict[str, Any]]]) -> list[str]:
    """A line for each factor the user asks about whose experiments differ only within tolerance
    (small, but not nothing, and where it starts is what they came for), or whose default runs
    diverged but not with the noise removed (the difference was the noise)."""
    lines = []
    for factor in ASKED:
        if factor in diverged:
            continue
        cleared = [e for e in experiments if e.get("factor") == factor and (e.get("raw") or {}).get("verdict")
                   == "diverged"]
        near = [e for e in experiments if e.get("factor") == factor and e.get("verdict") == "within_tolerance"]
        if cleared:
            worst = max(cleared, key=lambda e: _effect(e["raw"]))
            now = ("bit-identical" if worst["verdict"] == "identical" else
                   f"within tolerance (up to {_fmt(worst['max_abs_output_diff'])}{_where(worst)})")
            lines.append(f"{_title(factor)}: {now} with the noise removed ({worst.get('noise_removed_how')}); the "
                         f"default runs {_differ(worst['raw'].get('max_abs_output_diff'))}, which is the "
                         f"run-to-run noise, not this factor (see {_title('repeat')}).")
        elif near:
            worst = max(near, key=_effect)
            lines.append(f"{_title(factor)}: within tolerance, the outputs differ by up to "
                         f"{_fmt(worst['max_abs_output_diff'])}{_where(worst)}{_removed_words(worst) if worst.get('raw') else ''}.")
    return lines


def build_answers(experiments: list[dict[str, Any]], tolerance: dict[str, Any],
                  noise: dict[str, Any] | None = None) -> dict[str, Any]:
    """``{"why", "prevent", "cost", "source": "diagnosis", "factors"}`` from the experiment results.

    ``noise`` is :func:`tracer.diagnosis.noise.noise_finding`'s record (found from the repeat
    experiments when not given). Each experiment that was also run with the noise removed is
    judged by that run (:func:`tracer.diagnosis.noise.effective`)."""
    recipe = next((e for e in experiments if e.get("factor") == "recipe"), None)
    experiments = [e for e in experiments if e.get("factor") != "recipe"]
    if noise is None:
        noise = noise_finding("cpu", False, experiments)
    views = effective(experiments)
    diverged: dict[str, list[dict[str, Any]]] = {}
    for exp in views:
        if exp.get("verdict") == "diverged":
            diverged.setdefault(exp["factor"], []).append(exp)
    order = sorted(diverged, key=lambda f: -max(_effect(e) for e in diverged[f]))
    ran = [e for e in views if not e.get("skipped")]
    noise_pct = _noise_pct(ran)
    within = _within_tolerance(views, diverged)
    noise_lines = [_noise_line(noise)] if noise is not None and "repeat" not in diverged else []
    if not order:
        return {
            "why": [f"None of the {len(ran)} experiments that ran changes the outputs beyond the tolerance "
                    f"(atol {tolerance.get('atol')}, rtol {tolerance.get('rtol')}): on this machine the factors tested "
                    f"({', '.join(sorted({_title(e['factor']) for e in ran}))}) do not explain a difference."]
                   + within + noise_lines,
            "prevent": [], "cost": [], "source": "diagnosis", "factors": [], "noise": noise,
        }
    return {
        "why": [_why(f, diverged[f], noise) for f in order] + within + noise_lines,
        "prevent": [_prevent(f, diverged[f], diverged, noise) for f in order]
        + ([recipe_text(recipe)] if recipe else []),
        "cost": [c for c in (_cost(f, diverged[f], noise) for f in order) if c],
        "source": "diagnosis",
        "timing_noise_pct": noise_pct,
        "factors": order,
        "factor_descriptions": {f: FACTORS[f].description for f in order},
        "noise": noise,
    }
