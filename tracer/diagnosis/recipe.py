"""The verified recipe: every remedy ``tftrace diagnose`` measured, applied together and run.

Diagnose answers "how to prevent it" one factor at a time, but a user applies the remedies
together, and remedies interact (op determinism does not make batch sizes agree; a fixed
batch shape does not make autotuning repeatable). The recipe is that combination, *run*: the
model and its SavedModel (or a second process of the model) at one fixed batch shape, with
every measured remedy's setting on both sides. Its verdict says whether the combination makes
the two bit-identical or names what still differs; its latency next to the base side's at the
same batch size is what the combination costs on this machine. Nothing here runs anything:
:mod:`tracer.diagnosis.run` captures and evaluates the pair like any other experiment. What each
factor's remedy is (a setting on side B, one fixed shape, op determinism) is its record's
``remedy`` in :mod:`tracer.diagnosis.experiments`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from ..runspec import Side
from .experiments import FACTORS
from .plan import PlanContext, Planned, Run, at_batch

__all__ = ["Recipe", "plan_recipe", "recipe_facts", "recipe_text"]


@dataclass(frozen=True)
class Recipe:
    planned: Planned  # the pair, as an experiment named "recipe"
    reference: Run  # the base side at the recipe's batch size without any remedy: the cost baseline
    applied: tuple[str, ...]  # each setting, in words
    not_removable: tuple[str, ...]  # diverged factors that no setting removes (a rewrite, CPU vs GPU)


def plan_recipe(planned: list[Planned], results: list[dict[str, Any]], ctx: PlanContext,
                no_determinism: str | None = None) -> Recipe | None:
    """The pair of runs with every measured remedy on both sides, or None when nothing diverged.

    ``no_determinism``: why TensorFlow refused op determinism for this model (a random op
    without a seed), if it did; the recipe then leaves it out and says so, rather than fail."""
    diverged = {r["name"]: r for r in results if r.get("verdict") == "diverged" and not r.get("attribution")}
    if not diverged:
        return None
    side, applied, left, fixed_shape = ctx.base, [], [], False
    for p in planned:
        result = diverged.get(p.name)
        if result is None or p.a is None or p.b is None:
            continue
        factor = FACTORS[p.factor]
        if factor.remedy == "setting":  # side B holds it; named even when the base side already had B's value
            side = _adopt(side, p.a.side, p.b.side)
            for words in _setting_words(p.a.side, p.b.side):
                if words not in applied:
                    applied.append(words)
        elif factor.remedy == "shape":  # removed by one fixed batch shape on both sides
            fixed_shape = True
        elif factor.remedy == "determinism" and no_determinism:  # refused for this model: nothing to set
            left.append(p.name)
        elif factor.remedy == "determinism":  # removed, where a kernel allows, by op determinism
            if not side.knobs.determinism:
                side = side.with_(knobs=replace(side.knobs, determinism=True))
            if "op determinism on" not in applied:
                applied.append("op determinism on")
        elif factor.same_graph_is_nondeterminism and result.get("rewrite_count") == 0:
            continue  # the same graph: what differs is run-to-run, handled with the repeat factor
        else:
            left.append(p.name)
    batch = max(ctx.batch_sizes) if fixed_shape else side.batch_size
    if fixed_shape:
        applied.append(f"one fixed batch shape (batch {batch} on both sides)")
    side = side.with_(batch_size=batch)
    a = Run(side, f"recipe: {ctx.model_kind}, batch {batch}")
    b = (Run(side.with_(artifact=ctx.savedmodel), f"recipe: SavedModel, batch {batch}") if ctx.savedmodel
         else Run(side, f"recipe: {ctx.model_kind}, batch {batch}, a second process", instance=1))
    reference = at_batch(ctx.base, batch)
    notes = (f"every measured remedy on both sides: {', '.join(applied) or 'none needed a setting'}",)
    return Recipe(Planned("recipe", "recipe", "compare", a, b, notes=notes), reference, tuple(applied), tuple(left))


def _adopt(side: Side, a: Side, b: Side) -> Side:
    """``side`` with every knob on which B (the remedy) differs from A set to B's value."""
    knobs = side.knobs
    for f in fields(knobs):
        va, vb = getattr(a.knobs, f.name), getattr(b.knobs, f.name)
        if va == vb:
            continue
        if f.name == "grappler":  # a tuple of (option, value): take only the options B changed
            changed = dict(vb).items() - dict(va).items()
            vb = tuple(sorted((dict(knobs.grappler) | dict(changed)).items()))
        knobs = replace(knobs, **{f.name: vb})
    return side.with_(knobs=knobs)


def _setting_words(a: Side, b: Side) -> list[str]:
    """The settings :func:`_adopt` takes from B, in words: only what differs from A. (B's own
    description may name more: the mixed-precision pair's B is "no mixed precision, oneDNN on"
    because both of its sides run oneDNN, and the recipe once claimed "oneDNN on" it never set.)"""
    words = []
    for f in fields(b.knobs):
        va, vb = getattr(a.knobs, f.name), getattr(b.knobs, f.name)
        if va == vb:
            continue
        if f.name == "grappler":
            words += [f"Grappler {key} {value}" for key, value in sorted(dict(vb).items() - dict(va).items())]
            words += [f"Grappler {key} at its default (not {value})" for key, value in sorted(dict(va).items())
                      if key not in dict(vb)]  # the remedy is to leave A's option alone
        elif f.name == "determinism":
            words.append("op determinism on" if vb else "op determinism off")
        elif f.name == "threads":
            words.append(f"intra-op threads {vb[0] if vb else 'default'}")
        else:
            words.append(f"{_KNOB_WORDS.get(f.name, f.name)} {vb}")
    return words


_KNOB_WORDS = {"onednn": "oneDNN", "autotune": "cuDNN autotune", "tf32": "TF32", "xla": "XLA"}


def recipe_facts(recipe: Recipe, result: dict[str, Any], reference_latency: dict[str, Any] | None) -> dict[str, Any]:
    """What the recipe's experiment adds to its result: what was applied, what no setting removes,
    and the combined cost against the base side at the same batch size."""
    facts: dict[str, Any] = {"applied": list(recipe.applied), "not_removable": list(recipe.not_removable),
                             "reference_latency_ms": reference_latency, "combined_cost_pct": None}
    recipe_latency = (result.get("latency_ms") or {}).get("a")
    if reference_latency and recipe_latency and reference_latency.get("median"):
        ref, now = reference_latency["median"], recipe_latency["median"]
        facts["combined_cost_pct"] = round((now - ref) / ref * 100.0, 2)
    return facts


def recipe_text(result: dict[str, Any]) -> str:
    """The one line that ends "how to prevent it": the combination, what it achieved, its cost."""
    applied = ", ".join(result.get("applied") or []) or "no setting (every difference was of another kind)"
    a = (result.get("a") or {}).get("describe", "A")
    b = (result.get("b") or {}).get("describe", "B")
    verdict = result.get("verdict")
    if verdict == "identical":
        outcome = "bit-identical"
    else:
        diff = result.get("max_abs_output_diff")
        first = result.get("first_divergence") or {}
        where = f", starting at `{first['node']}` ({first['op']})" if first.get("node") else ""
        size = f"{diff:.3g}" if isinstance(diff, float) else "an unmeasurable amount"
        outcome = f"{'within tolerance' if verdict == 'within_tolerance' else 'still different'}: up to {size}{where}"
    text = f"Verified recipe (measured): {applied}, applied together — {a} vs {b}: {outcome}."
    left = result.get("not_removable") or []
    if left:
        text += f" No setting removes what {', '.join(f'`{n}`' for n in left)} measured."
    pct, ref = result.get("combined_cost_pct"), result.get("reference_latency_ms") or {}
    lat = (result.get("latency_ms") or {}).get("a") or {}
    timing = result.get("combined_timing") or {}
    if "ratio" in timing:  # interleaved against the plain base side, judged by tracer.diagnosis.timing
        text += (f" Against the plain base side at the same batch size, the combination {timing['words']} "
                 f"(medians {timing['median_a_ms']:.3g} ms without → {timing['median_b_ms']:.3g} ms with).")
    elif pct is not None:
        text += (f" Not timed against the plain base side ({timing.get('error', 'no interleaved timings')}); the "
                 f"captures' medians, which claim no cost: {pct:+.1f}% on this machine ({ref.get('median'):.3g} ms without → "
                 f"{lat.get('median'):.3g} ms with, medians of {lat.get('runs', '?')} runs).")
    return text
