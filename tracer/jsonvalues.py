"""Non-finite numbers are data: how tftrace writes them into strict JSON and reads them back.

A model can put NaN and ±inf anywhere tftrace records numbers: a ``Const`` holding ``-inf``
(padded non-max suppression uses one as a sentinel score), a float attr (``DebugNumericSummary``'s
``lower_bound: -inf``), an output difference. Python's ``json`` would write them as the tokens
``NaN``/``Infinity``, which are not JSON (other tools reject them), so every JSON file tftrace
writes — ``manifest.json``, ``report.json``, ``diagnosis.json``, isolation jobs and indexes — is
strict, and a non-finite float is written as one of exactly three strings where a number is
expected:

    ``"inf"``, ``"-inf"``, ``"nan"``

Readers parse strictly (the ``NaN``/``Infinity`` tokens are refused as damage) and accept
exactly those three strings where they expect a number (:func:`is_number`, :func:`number`).
TF-free; the op graph encodes its attrs with :func:`jsonable` when it is built, so a graph read
from a manifest equals the one built from the model.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

__all__ = ["NONFINITE", "jsonable", "dumps", "loads", "is_number", "number"]

NONFINITE: dict[str, float] = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def jsonable(value: Any, *, numpy: bool = True) -> Any:
    """Recursively replace non-finite floats by their strings and numpy scalars by Python ones.

    With ``numpy=False`` numpy scalars (other than ``float64``, a ``float``) are left as they
    are, so ``json.dumps`` still refuses them: for writers whose callers must hand plain JSON.
    """
    if isinstance(value, dict):
        return {str(k): jsonable(v, numpy=numpy) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v, numpy=numpy) for v in value]
    if isinstance(value, float) or (numpy and isinstance(value, np.floating)):
        value = float(value)
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value
    if numpy and isinstance(value, np.integer):
        return int(value)
    if numpy and isinstance(value, np.bool_):
        return bool(value)
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """Strict JSON text of ``value`` with non-finite floats encoded (TypeError for non-JSON types)."""
    return json.dumps(jsonable(value), allow_nan=False, **kwargs)


def _refuse_constant(token: str) -> Any:
    raise ValueError(f"{token} is not JSON (tftrace writes non-finite numbers as \"inf\", \"-inf\", \"nan\")")


def loads(text: str | bytes, **kwargs: Any) -> Any:
    """Parse strict JSON: the ``NaN``/``Infinity``/``-Infinity`` tokens raise ValueError."""
    return json.loads(text, parse_constant=_refuse_constant, **kwargs)


def is_number(value: Any) -> bool:
    """A number as tftrace writes one: an int or float (not a bool), a non-finite string, or None."""
    return value is None or type(value) in (int, float) or (type(value) is str and value in NONFINITE)


def number(value: Any) -> float | int | None:
    """The number a JSON value stands for (``"-inf"`` -> ``-math.inf``); ValueError for anything else."""
    if not is_number(value):
        raise ValueError(f"{value!r} is not a number")
    return NONFINITE[value] if isinstance(value, str) else value
