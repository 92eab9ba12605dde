"""The registry of rewrite kinds: one :class:`RewriteKind` record per kind the graph diff reports.

A record holds everything the later stages need to know about its kind, so none of them
switches on a kind's name:

* ``detector`` — the pass of :class:`tracer.diff.rewrites._Context` that emits it; the passes
  run in :data:`PASSES` order (export patterns first, so one pattern explains its members once);
* ``pairs`` — how alignment (:mod:`tracer.comparison.align`) pairs A's tensors with B's inside
  the rewrite: which A ops are only *members* (compared, never judged on their own) and which A
  op stands for which B tensor; ``None``: op by op, through the diff's matching;
* ``cause`` — the :data:`tracer.causes.CAUSES` key an origin inside it points at (``None``: the
  rewrite is exact, explains no difference and marks no op as rewritten);
* ``order`` — its rank in listings (kinds that change numbers first, exact ones last);
* ``group`` — for a rewrite that replaces several A ops by one B computation, what to call it
  in isolation's texts ("folded batch norm"); isolation replays such a group whole.

Adding a kind: write its detector (a ``_Context`` method returning :class:`Rewrite` records
of the new kind; a new method goes into :data:`PASSES` too) and add one record to
:data:`KINDS` below. ``tests/test_graphdiff.py::test_rewrite_registry_is_complete`` checks
that every kind the detectors emit has a complete record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..opgraph import OpGraph, tensor_op

if TYPE_CHECKING:
    from .records import GraphDiff, Rewrite

__all__ = ["RewriteKind", "KINDS", "REWRITE_KINDS", "PASSES", "kind_of", "display_rank", "is_exact", "Roles"]

# A ops judged only as members of a rewrite (op -> why), and A ops that stand for a B tensor
# the rewrite implies (op -> (B tensor, how it was paired)).
Roles = tuple[dict[str, str], dict[str, tuple[str, str]]]
PairFn = Callable[["Rewrite", OpGraph, OpGraph, "GraphDiff"], Roles]


@dataclass(frozen=True)
class RewriteKind:
    name: str
    detector: str  # a method of tracer.diff.rewrites._Context, listed in PASSES
    cause: str | None  # tracer.causes.CAUSES key; None: exact (same values)
    order: int  # display rank: kinds that change numbers first
    pairs: PairFn | None = None  # None: op by op through the diff's matching
    group: str | None = None  # several A ops against one B computation: what to call it

    @property
    def exact(self) -> bool:
        """An exact rewrite (same values) explains no difference and marks no op as rewritten."""
        return self.cause is None


# The detector passes in the order they run: export patterns first, because one pattern
# touches many nodes and should be reported once, with its members named; then what differs
# between paired ops; then what no pair explains.
PASSES = ("batchnorm_folds", "cast_regions", "fusions", "per_pair", "unmatched")


def _pair_batchnorm_folded(rewrite: Rewrite, ga: OpGraph, gb: OpGraph, diff: GraphDiff) -> Roles:
    """A's batch-norm output stands for B's conv output (or its one reader, a BiasAdd); A's conv,
    weights and batch-norm parameters are members: a fold legitimately rescales them."""
    bn = rewrite.detail["batch_norm"]
    members = {op: f"folded with {bn} into B's conv: judged through {bn}" for op in rewrite.a_nodes if op != bn}
    stands: dict[str, tuple[str, str]] = {}
    if bn not in diff.pairs:
        conv_b = diff.pairs.get(rewrite.detail["conv"], (None,))[0]
        readers = list(gb.g.successors(conv_b)) if conv_b else []
        if len(readers) == 1:
            stands[bn] = (f"{readers[0]}:0", "fold group")
    else:
        stands[bn] = (f"{diff.pairs[bn][0]}:0", "fold group")
    return members, stands


def _pair_cast_inserted(rewrite: Rewrite, ga: OpGraph, gb: OpGraph, diff: GraphDiff) -> Roles:
    """A's op stands for B's cast back to A's dtype (or B's narrowed op when there is none)."""
    op = rewrite.detail["op"]
    core = rewrite.b_nodes[-1]
    dtype_a = ga.node(op)["outputs"][0]["dtype"]
    back = [
        c for c in rewrite.detail.get("casts", [])
        if tensor_op(gb.data_inputs(c)[0]) == core and gb.node(c)["outputs"][0]["dtype"] == dtype_a
    ]
    return {}, {op: (f"{back[0] if back else core}:0", "cast region")}


def _pair_fused(rewrite: Rewrite, ga: OpGraph, gb: OpGraph, diff: GraphDiff) -> Roles:
    """The last op of A's chain stands for B's fused op; the earlier ones are members."""
    chain = rewrite.detail.get("chain") or rewrite.a_nodes
    fused_b = rewrite.b_nodes[0]
    return ({op: f"fused into B's {gb.op_type(fused_b)} {fused_b}" for op in chain[:-1]},
            {chain[-1]: (f"{fused_b}:0", "fused")})


# In the published order of the kinds (docs/contracts.md, ``REWRITE_KINDS``): per-node kinds, then patterns.
KINDS: dict[str, RewriteKind] = {k.name: k for k in (
    RewriteKind("node_added", "unmatched", "export", 7),
    RewriteKind("node_removed", "unmatched", "export", 8),
    RewriteKind("op_changed", "per_pair", "export", 4),
    RewriteKind("attr_changed", "per_pair", "export", 5),
    RewriteKind("const_changed", "per_pair", "weights", 0),  # a weight's values differ: tracer.causes explains them
    RewriteKind("rewired", "per_pair", "export", 6),
    RewriteKind("variable_frozen", "per_pair", None, 9),
    RewriteKind("batchnorm_folded", "batchnorm_folds", "export", 1, _pair_batchnorm_folded, "folded batch norm"),
    RewriteKind("cast_inserted", "cast_regions", "mixed_precision", 2, _pair_cast_inserted),
    RewriteKind("fused", "fusions", "export", 3, _pair_fused, "fused op"),
)}
REWRITE_KINDS = tuple(KINDS)


def kind_of(name: object) -> RewriteKind | None:
    """The record of a kind; None for a name this version does not know (a report from elsewhere)."""
    return KINDS.get(name) if isinstance(name, str) else None


def display_rank(name: str) -> int:
    """Where a kind goes in a listing; unknown kinds last."""
    kind = kind_of(name)
    return kind.order if kind else len(KINDS)


def is_exact(name: str) -> bool:
    kind = kind_of(name)
    return kind is not None and kind.exact
