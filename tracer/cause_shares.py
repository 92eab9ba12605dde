"""How much of the difference each cause a comparison names accounts for, and the causes ranked by it.

Why: a list of causes in catalogue order reads as a ranking it is not (autotuning and atomics once
led a "why" whose real cause, a folded batch norm 5.2e-4 beyond tolerance, came third). Each cause
:func:`tracer.causes.explain_comparison` finds is given the magnitude it was measured to account
for — the run-to-run noise for nondeterminism, the origin's difference replayed on identical inputs
for an export rewrite or a weight, the first divergence's difference for a setting that differs —
and the causes are ranked by it, biggest first (the observer effect last: see :func:`ranked`). The cause of the first divergence beyond tolerance
carries at least that divergence's size, so it is never listed below a cause of a smaller effect;
where nothing went beyond tolerance the bitwise first divergence stands in, and is called that
(a "beyond tolerance" next to a report whose ``first_divergence_beyond_tolerance`` is null said
more than was measured). A cause nothing measured is listed last, and says so.
"""

from __future__ import annotations

import math
from typing import Any

from .comparison.statuses import BORN_HERE
from .diff.kinds import kind_of
from .training import Carriers, coupled_in_report, reaches_an_output, unshared_norms

__all__ = ["Share", "shares", "ranked", "share_words", "beyond_noise", "noise_spread", "outputs_noise",
           "rewrite_causes"]

NOISE_CAUSES = ("autotune", "atomics", "nondeterminism")
WEIGHT_CAUSES = ("moving_averages", "weights")  # the more specific first: it names the first divergence

Share = dict[str, Any]  # {"cause", "max_abs" (None: not measured), "measured": words}


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        else None


def _replayed(origin: dict[str, Any]) -> tuple[float | None, str]:
    """An origin's own difference: its replay on identical inputs where it was isolated as born there
    (its own error, its weights, its batch statistics; noise removed: both sides fed A's inputs),
    else its difference in the runs."""
    iso = origin.get("isolation") or {}
    if iso.get("verdict") in BORN_HERE and _num(iso.get("max_abs")) is not None:
        return _num(iso["max_abs"]), f"at `{origin.get('node')}`, replayed alone on identical inputs"
    return _num(origin.get("max_abs")), f"at `{origin.get('node')}`"


def _noise(report: dict[str, Any], first: dict[str, Any] | None) -> tuple[float | None, str]:
    noise = report.get("noise") if isinstance(report.get("noise"), dict) else {}
    # measured at the outputs, zeros included: noise that moved only intermediates accounts for none of a
    # difference at the outputs (on the H200 it once ranked 5.2e-4 inside above a folded batch norm's 0.009)
    sizes = [v for key in ("a", "b") for v in ((noise.get(key) or {}).get("outputs_max_abs") or {}).values()
             if _num(v) is not None]
    inside = [v for v in (_num((noise.get(key) or {}).get("max_abs")) for key in ("a", "b")) if v]
    if sizes and (max(sizes) or inside):
        within = f" (inside the model up to {max(inside):.3g})" if inside and not max(sizes) else ""
        return max(sizes), f"between two runs of one side, at the outputs{within}"
    if inside:
        return max(inside), "between two runs of one side, inside the model"
    iso = (first or {}).get("isolation") or {}
    if _num(iso.get("noise_max_abs")):
        return _num(iso["noise_max_abs"]), f"between a replay of `{first.get('node')}` and its own capture"
    return None, ""


def outputs_noise(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Output key -> what the repeated runs measured on it (its ``noise``: each side's spread, A vs B
    over every pair of runs), for the outputs where the noise was measured."""
    outputs = report.get("outputs") or {}
    return {str(k): o["noise"] for k, o in outputs.items() if isinstance(o, dict) and isinstance(o.get("noise"), dict)}


def noise_spread(noise: dict[str, Any]) -> float:
    """The most an output moved between two runs of one side."""
    return max((v for v in (noise.get("spread") or {}).values() if _num(v) is not None), default=0.0)


def beyond_noise(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The outputs on which A and B differ by more than either side moves by itself in every pair
    of runs (the closest pair farther apart than the widest spread): a difference no run-to-run
    noise accounts for at the outputs."""
    return {k: n for k, n in outputs_noise(report).items() if (_num(n.get("cross_closest")) or 0) > noise_spread(n)}


def _noise_misses_the_outputs(report: dict[str, Any]) -> bool:
    """Every output A and B differ on lies beyond the noise, which at the outputs is smaller: the
    noise measured inside the model (a first divergence that changes from run to run) does not
    reach them, so it cannot be what they differ by."""
    measured = outputs_noise(report)
    differing = {k: n for k, n in measured.items() if n.get("cross_identical") is False}
    return bool(differing) and set(differing) <= set(beyond_noise(report))


def _first_divergence(report: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The first divergence a cause's share is held to, and its words: the first beyond tolerance,
    else (nothing was beyond it) the bitwise first, said as such."""
    beyond = report.get("first_divergence_beyond_tolerance")
    if isinstance(beyond, dict) and beyond.get("node"):
        return beyond, "the first divergence beyond tolerance"
    first = report.get("first_divergence")
    if isinstance(first, dict) and first.get("node"):
        return first, "the first divergence (bitwise; nothing differs beyond tolerance)"
    return None, ""


def _first_cause(report: dict[str, Any], found: dict[str, str], first: dict[str, Any] | None,
                 carriers: Carriers | None = None) -> str | None:
    """The cause key of the first divergence (beyond tolerance where one is), among those found."""
    if not first:
        return None
    iso = (first.get("isolation") or {}).get("verdict")
    cause = getattr(kind_of(first.get("rewrite")), "cause", None)
    name = str(first.get("node"))
    coupled = any(coupled_in_report(report, name, side) for side in ("a", "b"))
    if coupled and iso == "batch_statistics" and not reaches_an_output(report, name, carriers):
        return None  # statistics over the batch whose difference reaches no output (training.unused_statistics)
    candidates = ["training_graph"] if coupled else []
    if cause == "weights" or iso == "weights_differ":
        candidates += list(WEIGHT_CAUSES)
    elif cause:
        candidates.append(cause)
    if iso in ("nondeterministic", "not_reproduced") or report.get("verdict") == "within_noise":
        candidates += list(NOISE_CAUSES)
    candidates += {"state": ["state"], "run_time_rewrite": ["grappler"]}.get(str(iso), [])
    candidates.append("batch")
    return next((c for c in candidates if c in found), None)


def shares(report: dict[str, Any], found: dict[str, str], carriers: Carriers | None = None) -> dict[str, Share]:
    """Each found cause -> what it was measured to account for. ``carriers``:
    :func:`tracer.training.output_carriers` of the report, where the caller has it."""
    origins = [o for o in report.get("origins") or [] if isinstance(o, dict)]
    first, first_words = _first_divergence(report)
    out: dict[str, Share] = {}
    for key in found:
        size: float | None = None
        words = ""
        if key in NOISE_CAUSES:
            size, words = _noise(report, first)
        elif key in WEIGHT_CAUSES:
            mine = [_replayed(o) for o in origins if o.get("rewrite") == "const_changed"
                    or (o.get("isolation") or {}).get("verdict") == "weights_differ"]
            size, words = max(mine, key=lambda t: t[0] or 0.0, default=(None, ""))
            if size is None:  # the weights' own change, as the graph diff read it
                changes = [_num((r.get("detail") or {}).get("max_abs_change")) for r in report.get("rewrites") or []
                           if isinstance(r, dict) and r.get("kind") == "const_changed"]
                size = max((v for v in changes if v is not None), default=None)
                words = "between the weights themselves" if size is not None else ""
        elif key == "training_graph":  # its batch norms replayed on identical rows (batch_statistics)
            nodes = report.get("nodes") or {}
            mine = [_replayed({**nodes[n], "node": n, "max_abs": None}) for n in unshared_norms(report)]
            size, words = max(mine, key=lambda t: t[0] or 0.0, default=(None, ""))
        else:
            mine = [_replayed(o) for o in origins if getattr(kind_of(o.get("rewrite")), "cause", None) == key]
            if mine:
                size, words = max(mine, key=lambda t: t[0] or 0.0)
            elif key == "observation":
                shifts = [_num(v) for side in (report.get("observer_effect") or {}).values() if isinstance(side, dict)
                          for v in (side.get("outputs_max_abs_diff") or {}).values()]
                size = max((v for v in shifts if v is not None), default=None)
                words = "the outputs' shift when every tensor is fetched"
            elif key in rewrite_causes(report):  # rewritten, and no origin sits in a rewrite (tracer.causes)
                size, words = _unlocated_share(report, found, key)
        out[key] = {"cause": key, "max_abs": size, "measured": words}
    key = _first_cause(report, found, first, carriers)
    if key in NOISE_CAUSES and _noise_misses_the_outputs(report):
        key = None  # its size inside the model is no measure of the outputs' difference, which lies beyond it
    if key is not None and first:
        size = _num(first.get("max_abs"))
        if size is not None and (out[key]["max_abs"] is None or out[key]["max_abs"] < size):
            out[key] = {"cause": key, "max_abs": size,
                        "measured": f"{first_words}, `{first.get('node')}`"}
        out[key]["first_divergence"] = True
    return out


def rewrite_causes(report: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Cause key -> the report's rewrites of a kind that points at it (cast_inserted: mixed precision,
    a fold: the export), exact kinds and changed weights left out (they are said elsewhere)."""
    found: dict[str, list[dict[str, Any]]] = {}
    for rewrite in report.get("rewrites") or []:
        cause = getattr(kind_of(rewrite.get("kind")), "cause", None) if isinstance(rewrite, dict) else None
        if cause and cause != "weights":
            found.setdefault(cause, []).append(rewrite)
    return found


def _unlocated_share(report: dict[str, Any], found: dict[str, str], key: str) -> tuple[float | None, str]:
    """What a rewrite that no origin sits in accounts for, where it is the one thing found besides
    the noise and the observer effect: the outputs' difference beyond their run-to-run noise (the
    closest A vs B over every pair of runs). Else, or with no such difference, not measured."""
    others = [k for k in found if k not in NOISE_CAUSES and k not in ("observation", key)]
    beyond = beyond_noise(report)
    if others or not beyond:
        return None, ""
    worst = max(beyond, key=lambda k: _num(beyond[k].get("cross_closest")) or 0.0)
    return (_num(beyond[worst].get("cross_closest")),
            f"between the plain outputs (`{worst}`), beyond their run-to-run noise in every pair of runs")


def ranked(found: dict[str, str], measured: dict[str, Share]) -> list[str]:
    """The found causes, biggest measured share first; the unmeasured after them, in the order
    found; the observer effect last whatever its size. Its share is how far fetching every tensor
    moved a side's outputs: a caveat on where the instrumented runs place the difference, never a
    cause of the plain runs' difference, which fetch nothing (on the H200 a 1e-3 shift once led
    the "why" of two sides whose plain outputs differed by 2e-4 for another reason)."""
    order = list(found)
    return sorted(order, key=lambda k: (k == "observation", measured[k]["max_abs"] is None,
                                        -(measured[k]["max_abs"] or 0.0), not measured[k].get("first_divergence"),
                                        order.index(k)))


def share_words(share: Share) -> str:
    """"up to 5.2e-04 at `x`, replayed alone on identical inputs" or "not measured"."""
    if share.get("max_abs") is None:
        return "its share not measured"
    words = f"up to {share['max_abs']:.3g}"
    return f"{words} {share['measured']}".rstrip() if share.get("measured") else words
