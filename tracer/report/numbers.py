"""Numbers as people read them: the one formatter of the terminal, Markdown, HTML and diagnose texts.

A report is read back from JSON, where a non-finite float is one of the strings ``"inf"``,
``"-inf"``, ``"nan"`` (:mod:`tracer.jsonvalues`): :func:`num` reads a figure back, :func:`fmt`
shows it on the pages (``∞``, ``NaN``, whole numbers whole), :func:`figure` shows a measured
value in a line of text (``%.3g``; what was not measured as ``absent``).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["num", "fmt", "figure", "per_key", "percent", "cost_cell"]


def num(value: Any) -> float | None:
    """A report float: numbers pass, ``"inf"``/``"-inf"``/``"nan"`` become floats, anything else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value.strip().lower() in ("inf", "-inf", "+inf", "nan", "infinity", "-infinity"):
        return float(value.strip().lower().replace("infinity", "inf"))
    return None


def fmt(value: Any, digits: int = 3) -> str:
    """A compact human number: 3 significant digits, ``∞``/``NaN`` spelled out, ``—`` for absent."""
    x = num(value)
    if x is None:
        return "—" if value is None else str(value)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    if x == 0:
        return "0"
    if x.is_integer() and abs(x) < 1e6:
        return str(int(x))
    return f"{x:.{digits}g}"


def figure(value: Any, digits: int = 3, absent: str = "—") -> str:
    """A value in a sentence or a table cell: a number to ``digits`` significant digits, a string
    (``"inf"``, a reason) as it is, ``absent`` where nothing was measured (None)."""
    if value is None:
        return absent
    if isinstance(value, (int, float)):
        return f"{value:.{digits}g}"
    return str(value)


def per_key(values: Any) -> str:
    """``{"boxes": 1.19e-07, "scores": 0.0}`` as ``boxes 1.19e-07, scores 0``: a mapping of outputs
    to figures in a sentence, never a Python dict's repr."""
    if not isinstance(values, dict):
        return figure(values)
    return ", ".join(f"{key} {fmt(value)}" for key, value in values.items()) or "nothing"


def percent(value: Any) -> str:
    """A change in per cent as every text of diagnose states it: signed, one decimal (``+77.0%``)."""
    x = num(value)
    return "—" if x is None else f"{x:+.1f}%"


def cost_cell(experiment: dict[str, Any]) -> str:
    """An experiment's cost, B vs A, as the rule of :mod:`tracer.diagnosis.timing` judged it and as
    its answers state it: a cost only where it is significant (``+77.0% [+70, +85]``), ``noise``
    where the interleaved timings cannot tell the sides apart, ``untimed`` where no cost is claimed
    (two captures' medians are no evidence of one). The recipe's cost is its combination against
    the plain base side (``combined_timing``), the figure its sentence gives, never the capture
    medians of its own pair (which once read 13.2% beside a stated +77.0%)."""
    timing = experiment.get("timing") or experiment.get("combined_timing") or {}
    per_example = " /ex" if experiment.get("latency_basis") == "per example" else ""
    if isinstance(timing, dict) and "ratio" in timing and timing.get("interval_pct"):
        low, high = (num(v) or 0.0 for v in timing["interval_pct"])
        if timing.get("significant"):
            return f"{percent(timing.get('cost_pct'))}{per_example} [{low:+.0f}, {high:+.0f}]"
        return f"noise [{low:+.0f}, {high:+.0f}]{per_example}"
    if experiment.get("name") == "repeat_fresh_process" and num(experiment.get("cost_pct")) is not None:
        return f"±{abs(num(experiment['cost_pct']) or 0.0):.1f}% (timing noise)"  # one configuration twice
    return "—" if experiment.get("cost_pct") is None else "untimed"
