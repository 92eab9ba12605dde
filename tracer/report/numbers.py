"""Numbers as people read them: the one formatter of the terminal, Markdown, HTML and diagnose texts.

A report is read back from JSON, where a non-finite float is one of the strings ``"inf"``,
``"-inf"``, ``"nan"`` (:mod:`tracer.jsonvalues`): :func:`num` reads a figure back, :func:`fmt`
shows it on the pages (``∞``, ``NaN``, whole numbers whole), :func:`figure` shows a measured
value in a line of text (``%.3g``; what was not measured as ``absent``).
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["num", "fmt", "figure", "per_key"]


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
