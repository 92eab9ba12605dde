"""What ``tftrace diagnose`` is asked (:class:`DiagnoseOptions`, ``--only``'s factors) and what it
hands back (:class:`Diagnosis`): the terms between the command line, the Python API and
:mod:`tracer.diagnosis.run`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..artifacts.loader import ArtifactRef
from ..comparison.divergence import Tolerance
from ..errors import TftraceError
from .experiments import FACTORS

__all__ = ["DiagnoseOptions", "Diagnosis", "parse_factors"]


@dataclass(frozen=True)
class DiagnoseOptions:
    model: ArtifactRef
    out_dir: Path
    savedmodel: ArtifactRef | None = None
    batch_sizes: tuple[int, ...] = (1, 8)
    device: str = "cpu"
    inputs_file: str | None = None
    examples: int | None = None  # default: the largest batch size (at least 2)
    seed: int = 0
    quick: bool = False
    only: tuple[str, ...] = ()
    serving_batching: str | None = None
    serving_session_config: str | None = None
    other_python: str | None = None  # --other-python: the factor tf_version runs side B there
    tolerance: Tolerance = field(default_factory=Tolerance)
    timing_runs: int | None = None  # default 5 with --quick, 10 without
    allow_unsafe_ops: bool = False  # see tracer.safety: refused by default, on every side
    force: bool = False
    command: str = ""


@dataclass
class Diagnosis:
    """What ``diagnose`` found; ``bool(diagnosis)`` is True when no experiment diverged."""

    doc: dict[str, Any]  # diagnosis.json
    out_dir: Path
    report_experiment: str | None = None  # the experiment whose report is DIR/report.html

    @property
    def experiments(self) -> list[dict[str, Any]]:
        return self.doc["experiments"]

    @property
    def answers(self) -> dict[str, Any]:
        return self.doc["answers"]

    @property
    def diverged(self) -> list[str]:
        return [e["name"] for e in self.experiments if e["verdict"] == "diverged"]

    def __bool__(self) -> bool:
        return not self.diverged


def parse_factors(text: str | None) -> tuple[str, ...]:
    """``--only batch,onednn`` -> the factors in matrix order; unknown names are refused."""
    names = tuple(dict.fromkeys(p.strip() for p in (text or "").split(",") if p.strip()))
    unknown = [n for n in names if n not in FACTORS]
    if unknown:
        raise TftraceError(f"--only: unknown {'factor' if len(unknown) == 1 else 'factors'} {', '.join(unknown)}",
                           f"choose from {', '.join(FACTORS)}")
    return tuple(f for f in FACTORS if f in names)
