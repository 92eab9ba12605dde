"""What a ``report.json`` says, as numbers and short texts shared by the HTML and Markdown pages.

A report is read back from JSON, possibly written by an older or newer tftrace, so every
reader here tolerates a missing field and the strings ``"inf"``, ``"-inf"``, ``"nan"`` that
stand for non-finite floats: a report that is partly empty must still render, because the
page is what the user opens to find out what went wrong.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

__all__ = [
    "STATUSES",
    "STATUS_LABELS",
    "severity",
    "num",
    "fmt",
    "short_name",
    "scope_of",
    "flatten",
    "EnvRow",
    "environment_rows",
    "side_facts",
    "outputs_not_compared",
    "isolation_text",
    "rewrite_detail",
    "answers",
    "json_safe",
]

# Worst first: the order a scope box uses to pick the colour of its worst op.
STATUSES: tuple[str, ...] = (
    "origin",
    "propagated",
    "unmatched",
    "rewritten",
    "within_tolerance",
    "not_captured",
    "not_compared",
    "identical",
)
STATUS_LABELS: dict[str, str] = {
    "origin": "origin",
    "propagated": "propagated",
    "unmatched": "unmatched",
    "rewritten": "rewritten at export",
    "within_tolerance": "within tolerance",
    "not_captured": "not captured",
    "not_compared": "not compared",
    "identical": "identical",
}


def severity(status: str | None) -> int:
    """Higher is worse; unknown statuses rank just above ``identical`` so they stay visible."""
    if status in STATUSES:
        return len(STATUSES) - STATUSES.index(status)
    return 1


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


def short_name(name: str) -> str:
    """The last path component of an op name (``block2/bn/FusedBatchNormV3`` -> ``FusedBatchNormV3``)."""
    tail = name.rstrip("/").rsplit("/", 1)[-1]
    return tail or name


def scope_of(name: str, node: dict[str, Any]) -> str:
    """The node's name scope: the report's ``scope`` field, else everything before the last ``/``."""
    scope = node.get("scope")
    if isinstance(scope, str):
        return scope.strip("/")
    return name.rsplit("/", 1)[0] if "/" in name else ""


def _scalar_text(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) or (isinstance(value, str) and num(value) is not None):
        return fmt(value, 6)
    if isinstance(value, (list, tuple)):
        return ", ".join(_scalar_text(v) for v in value) if value else "(none)"
    return str(value)


def flatten(value: Any, prefix: str = "") -> dict[str, str]:
    """Nested dicts to dotted keys with printable values, so two environments line up row by row."""
    out: dict[str, str] = {}
    if isinstance(value, dict):
        if not value and prefix:
            out[prefix] = "(none)"
        for key, inner in value.items():
            out.update(flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
    else:
        out[prefix or "value"] = _scalar_text(value)
    return out


@dataclass(frozen=True)
class EnvRow:
    key: str
    a: str
    b: str

    @property
    def volatile(self) -> bool:
        """Keys that differ between any two captures (clock, process id): never a cause."""
        return self.key.rsplit(".", 1)[-1] in VOLATILE_ENV_KEYS

    @property
    def differs(self) -> bool:
        return self.a != self.b and not self.volatile


VOLATILE_ENV_KEYS = frozenset({"time_utc", "pid", "created_utc"})


def environment_rows(env_a: Any, env_b: Any) -> list[EnvRow]:
    """Both sides' environment fingerprints flattened and aligned by key (A's order first)."""
    flat_a, flat_b = flatten(env_a or {}), flatten(env_b or {})
    keys = list(dict.fromkeys([*flat_a, *flat_b]))
    return [EnvRow(k, flat_a.get(k, "—"), flat_b.get(k, "—")) for k in keys]


def side_facts(side: dict[str, Any]) -> list[tuple[str, str]]:
    """The rows that identify a side: what was run, where, at which batch size, with which knobs."""
    artifact = side.get("artifact") or {}
    knobs = side.get("knobs") or {}
    timings = side.get("timings") or {}
    timed = timings.get("plain_latency_ms") or {}
    latency = timed.get("median")
    examples = side.get("examples") or {}
    rows = [
        ("artifact", str(artifact.get("path") or artifact.get("location") or "—")),
        ("kind", str(artifact.get("kind") or "—")),
        ("device", str(side.get("device") or "—")),
        ("batch size", _scalar_text(side.get("batch_size"))),
        ("knobs", ", ".join(f"{k}={_scalar_text(v)}" for k, v in flatten(knobs).items()) if knobs else "defaults"),
    ]
    signature = side.get("signature") if isinstance(side.get("signature"), dict) else {}
    if signature.get("key"):
        lent = f" (borrowed from {signature['borrowed_from']}: this side has none)" if signature.get("borrowed_from") else ""
        rows.append(("signature", f"{signature['key']}{lent}"))
    if examples:
        rows.append(("examples", f"{_scalar_text(examples.get('count'))} from {_scalar_text(examples.get('source'))}"))
    if latency is not None:
        runs = timed.get("runs")
        basis = f"median of {runs} timed runs" if isinstance(runs, int) and runs > 1 else "one timed run"
        rows.append(("plain latency", f"{fmt(latency)} ms ({basis}; tftrace diagnose measures costs)"))
    notes = side.get("notes")
    if notes:
        rows.append(("notes", "; ".join(str(n) for n in notes) if isinstance(notes, list) else str(notes)))
    return rows


def outputs_not_compared(report: dict[str, Any]) -> dict[str, str]:
    """Output key -> why it has no metrics, for every output that could not be compared."""
    return {str(key): str(o.get("not_compared") or "not compared")
            for key, o in (report.get("outputs") or {}).items() if isinstance(o, dict) and o.get("identical") is None}


def isolation_text(isolation: dict[str, Any] | None) -> str:
    """Own error vs inherited, in words: the fact a reader needs to know where to look."""
    if not isolation:
        return "isolation not recorded"
    verdict = isolation.get("verdict")
    if verdict == "own_error":
        head = (f"own error: fed identical inputs, the op alone still differs "
                f"(max abs {fmt(isolation.get('max_abs'))}, max rel {fmt(isolation.get('max_rel'))})")
    elif verdict == "inherited":
        head = "inherited: fed identical inputs, the op alone agrees — the difference comes from upstream"
    elif verdict == "not_run":
        head = "isolation not run"
    else:
        head = f"isolation: {verdict}"
    detail = str(isolation.get("detail") or "").strip()
    head = head[:1].upper() + head[1:]
    return f"{head}. {detail[:1].upper()}{detail[1:]}" if detail else head


def rewrite_detail(detail: Any) -> str:
    """A rewrite's detail on one line; changed attributes as ``name: a → b`` like the terminal's."""
    if not isinstance(detail, dict):
        return _scalar_text(detail)
    parts = []
    for key, value in detail.items():
        if value is None or value == [] or value == {}:
            continue
        if key == "attrs" and isinstance(value, dict) and all(isinstance(v, dict) for v in value.values()):
            parts += [f"{name}: {_scalar_text(v.get('a'))} → {_scalar_text(v.get('b'))}" for name, v in value.items()]
        else:
            parts += [f"{k}: {v}" for k, v in flatten(value, str(key)).items()]
    return "; ".join(parts)


def answers(report: dict[str, Any]) -> dict[str, Any]:
    """The three answers: the report's own when present, else a "why" built from the origins."""
    given = report.get("answers")
    if isinstance(given, dict) and any(given.get(k) for k in ("why", "prevent", "cost")):
        return {k: [str(s) for s in given.get(k) or []] for k in ("why", "prevent", "cost")} | {
            "source": str(given.get("source") or "compare")}
    origins = report.get("origins") or []
    verdict = report.get("verdict")
    if verdict == "identical" or not origins:
        why = ["The two sides compute bit-identical results for every compared op."] if verdict == "identical" else []
        return {"why": why, "prevent": [], "cost": [], "source": "report"}
    counts = Counter(str(o.get("op") or "?") for o in origins)
    types = ", ".join(f"{n} {op}" for op, n in counts.most_common())
    first = report.get("first_divergence_beyond_tolerance") or report.get("first_divergence") or origins[0]
    why = [f"The difference starts at {len(origins)} op(s): {types}.",
           f"The first is `{first.get('node')}` ({first.get('op')}), max rel {fmt(first.get('max_rel'))}."]
    if first.get("rewrite"):
        why.append(f"It sits in an export rewrite ({first['rewrite']}).")
    if first.get("isolation"):
        why.append(isolation_text(first["isolation"]).rstrip(".") + ".")
    return {"why": why, "prevent": [], "cost": [], "source": "report"}


def json_safe(value: Any) -> Any:
    """Non-finite floats to the report's strings, so the page's JSON is strict JSON for ``JSON.parse``."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def diagnosis_rows(report: dict[str, Any]) -> list[dict[str, str]]:
    """One row per experiment of a diagnosis (empty for a plain comparison report)."""
    diagnosis = report.get("diagnosis")
    if not isinstance(diagnosis, dict):
        return []
    rows = []
    for exp in diagnosis.get("experiments") or []:
        if not isinstance(exp, dict):
            continue
        first = exp.get("first_divergence") if isinstance(exp.get("first_divergence"), dict) else {}
        latency = exp.get("latency_ms") if isinstance(exp.get("latency_ms"), dict) else {}
        iso = first.get("isolation") if isinstance(first.get("isolation"), dict) else {}
        own = {"own_error": "own error", "inherited": "inherited"}.get(str(iso.get("verdict")), "")
        where = f"{first.get('node')} ({first.get('op')})" if first.get("node") else ""
        rows.append({
            "name": str(exp.get("name") or ""),
            "factor": str(exp.get("factor") or ""),
            "verdict": "skipped" if exp.get("skipped") else str(exp.get("verdict") or ""),
            "diff": fmt(exp.get("max_abs_output_diff")),
            "first": f"{where}{', ' + own if own and where else ''}",
            "latency": f"{fmt(_latency(latency.get('a')))} → {fmt(_latency(latency.get('b')))}" if latency else "",
            "cost": "" if exp.get("cost_pct") is None else f"{fmt(exp.get('cost_pct'))} %",
            "skipped": str(exp.get("skipped") or ""),
            "shown": "yes" if exp.get("name") == diagnosis.get("shown") else "",
        })
    return rows


def _latency(value: Any) -> Any:
    return value.get("median") if isinstance(value, dict) else value
