"""What the static diff finds: the pairing of two op graphs and the rewrites between them.

Kept apart from the detectors (:mod:`tracer.diff.rewrites`) so that the registry of rewrite
kinds (:mod:`tracer.diff.kinds`), which the detectors read, can name these types too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Rewrite", "GraphDiff"]


@dataclass
class Rewrite:
    kind: str
    a_nodes: list[str]
    b_nodes: list[str]
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "a_nodes": self.a_nodes, "b_nodes": self.b_nodes, "detail": self.detail}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Rewrite:
        return cls(d["kind"], list(d["a_nodes"]), list(d["b_nodes"]), dict(d.get("detail", {})))


@dataclass
class GraphDiff:
    pairs: dict[str, tuple[str, str]]  # a op -> (b op, how it was matched)
    only_in_a: list[str]
    only_in_b: list[str]
    rewrites: list[Rewrite]

    @property
    def matched(self) -> int:
        return len(self.pairs)

    def renamed(self) -> dict[str, str]:
        return {a: b for a, (b, _) in self.pairs.items() if a != b}

    def rewrites_of(self, a_node: str) -> list[Rewrite]:
        return [r for r in self.rewrites if a_node in r.a_nodes]

    def to_json(self) -> dict[str, Any]:
        return {
            "matched": self.matched,
            "only_in_a": self.only_in_a,
            "only_in_b": self.only_in_b,
            "rewrites": [r.to_json() for r in self.rewrites],
            "renamed": self.renamed(),
        }
