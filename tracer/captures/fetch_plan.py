"""What the instrumented runs of a capture fetch, decided before anything is written.

Every tensor of the op graph is either planned (in topological order, with its estimated size
per run) or left uncaptured with a reason; ops whose value does not depend on the feed are
fetched once. ``chunked`` splits the plan so one run's fetch stays under ``--max-memory``, and
into parts of about ``--part-bytes`` (:meth:`FetchPlan.part_limit`), which the writers store
while TensorFlow computes the next.

Tensors downstream of a ``Switch`` output (the branches of a TF1 ``tf.cond``, or of a TF2
``If``/``StatelessIf`` inlined and lowered to Switch/Merge) run only when the predicate sends
data that way; TensorFlow refuses the *whole* ``session.run`` when one fetched tensor is dead
("Retval[0] does not have value"). So the plan knows each tensor's *branch* (the Switch ports it
runs under) and :class:`BranchSchedule` fetches the predicates first, then only the branches
they chose: a branch that did not run is never fetched. No TensorFlow here: the plan is made
from the op graph alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import TftraceError
from ..opgraph import WHILE_FRAME_REASON, OpGraph, relevant_slots, tensor_op, tensor_slot
from ..optypes import FRAME_OPS, LOOP_COND_OP, MERGE_OPS, PLACEHOLDER_OPS, SWITCH_OPS, VALUE_SIZED_OPS, WEIGHT_SOURCES

__all__ = ["FetchPlan", "fetch_plan", "chunked", "refit_sizes", "check_fetched", "branch_of", "BranchSchedule", "DEAD_BRANCH_REASON",
           "sizes_scale_with_rows", "scaled_sizes", "too_big"]

DEAD_BRANCH_REASON = "in a cond branch that did not run on these inputs (dead: TensorFlow has no value for it)"
Branch = frozenset  # of (Switch op, output port): a tensor runs only when all of them carry data


@dataclass
class FetchPlan:
    """What the instrumented runs fetch, decided before the capture directory is opened."""

    names: list[str]  # capturable tensors, topological order
    sizes: dict[str, int]  # estimated bytes per run of the first batch
    constant: set[str]  # ops whose value does not depend on the feed: fetched in run 0 only
    uncaptured: dict[str, str] = field(default_factory=dict)  # name -> reason
    max_memory: int = 0  # bytes one fetch may bring back: --max-memory, or less under --max-process-memory
    branches: dict[str, Branch] = field(default_factory=dict)  # conditional tensors only (unconditional: absent)
    switches: dict[str, tuple[Branch, str]] = field(default_factory=dict)  # cond Switch -> (its branch, predicate)
    bound: str = ""  # the limit's words in an error, when --max-process-memory set max_memory (ProcessFit.words)
    fix: str = "raise --max-memory"
    part_bytes: int = 0  # --part-bytes: what one part of a split fetch aims at (0: one fetch up to max_memory)

    def limit_words(self) -> str:
        return self.bound or f"--max-memory {self.max_memory:,}"

    def cut_words(self) -> str:
        """Why a fetch was cut: the bound, or the part size where that cut it under the bound."""
        limit = self.part_limit()
        return self.limit_words() if limit >= self.max_memory else f"parts of --part-bytes {limit:,} (under {self.limit_words()})"

    def part_limit(self) -> int:
        """The bytes one fetch is cut at: ``--part-bytes``, never below the largest planned
        tensor (a part holds at least one whole tensor) nor above ``max_memory`` (the bound)."""
        if not self.part_bytes:
            return self.max_memory
        largest = max((self.sizes[n] for n in self.names), default=0)
        return min(self.max_memory, max(self.part_bytes, largest))


def fetch_plan(opgraph: OpGraph, ranges: list[tuple[int, int]], max_memory: int, part_bytes: int = 0) -> FetchPlan:
    in_loops = opgraph.while_frame_ops()  # constants in a loop body too: fetching one fails at run time
    names: list[str] = []
    uncaptured: dict[str, str] = {}
    for name, info in opgraph.tensors():
        if tensor_op(name) in in_loops and info["capturable"]:
            info["capturable"], info["reason"] = False, WHILE_FRAME_REASON  # the manifest's graph says so too
        if not info["capturable"]:
            uncaptured[name] = info["reason"]
        elif tensor_slot(name) not in relevant_slots(opgraph, tensor_op(name)):
            # e.g. FusedBatchNorm's reserve-space outputs in inference: undefined, and Grappler
            # may rewrite the op so they no longer exist.
            uncaptured[name] = "an output nothing in the model reads"
        else:
            names.append(name)
    rows0 = ranges[0][1] - ranges[0][0]
    sizes = {n: _estimate_bytes(opgraph.output_info(n), rows0) for n in names}
    chunked(names, sizes, max_memory)  # a tensor alone above the limit is refused now, before any writing
    every = branch_of(opgraph)
    branches = {n: b for n, b in every.items() if b and n in sizes}
    used = {switch for b in branches.values() for switch, _ in b}
    switches = {s: (every[opgraph.data_inputs(s)[0]], opgraph.data_inputs(s)[1]) for s in sorted(used)}
    return FetchPlan(names, sizes, _constant_ops(opgraph), uncaptured, max_memory, branches, switches,
                     part_bytes=part_bytes)


def branch_of(opgraph: OpGraph) -> dict[str, Branch]:
    """Tensor -> the Switch output ports it runs under (empty: it runs whenever the graph does).

    TensorFlow's executor marks a Switch's untaken output *dead*; an op with a dead input (data
    or control) is dead, except a Merge, which is dead only when all its inputs are. So a
    tensor's branch is the union of its inputs' branches plus the Switch port it comes from,
    and a Merge's is the intersection of its inputs'. Two tensors with the same branch are dead
    on the same inputs. A while loop's Switch (predicate from a ``LoopCond``) is not a branch:
    its Exit runs whenever the loop does. NextIteration back edges are skipped.
    """
    out: dict[str, Branch] = {}
    op_branch: dict[str, Branch] = {}
    for op in opgraph.topo_order():
        node = opgraph.node(op)
        inputs = [out[t] for t in node["inputs"] if t in out]
        controls = [op_branch[c] for c in node["control_inputs"] if c in op_branch]
        if node["op"] in MERGE_OPS:
            mine = frozenset.intersection(*inputs) if inputs else frozenset()
        else:
            mine = frozenset().union(*inputs, *controls)
        op_branch[op] = mine
        loop_switch = node["op"] in SWITCH_OPS and len(node["inputs"]) > 1 and tensor_op(node["inputs"][1]) in opgraph \
            and opgraph.op_type(tensor_op(node["inputs"][1])) == LOOP_COND_OP
        for slot in range(len(node["outputs"])):
            port = {(op, slot)} if node["op"] in SWITCH_OPS and not loop_switch else set()
            out[f"{op}:{slot}"] = mine | port
    return out


class BranchSchedule:
    """Which of one run's tensors to fetch next, decided from the cond predicates fetched so far.

    Dead branches are known *before* fetching: the unconditional tensors are fetched with the
    predicates of the outermost conds; a branch whose every Switch port agrees with its
    predicate is then fetched with the next level's predicates, one whose port disagrees is
    dead and never fetched. Nested conds cost one run per level, not one per branch. A branch
    whose predicate cannot be fetched is left to :meth:`leftover` (fetched alone).
    """

    def __init__(self, names: list[str], plan: FetchPlan) -> None:
        self.plan = plan
        self.pending: dict[Branch, list[str]] = {}
        self.first: list[str] | None = []
        for name in names:
            branch = plan.branches.get(name, frozenset())
            (self.pending.setdefault(branch, []) if branch else self.first).append(name)
        self.preds: dict[str, bool | None] = {}  # Switch -> which port carries data (None: unknown)
        self.asked: set[str] = set()

    def next(self) -> tuple[list[str], list[str], dict[str, list[str]]] | None:
        """``(names to fetch, dead names, predicate tensor -> its Switches)``, or None when done."""
        ready, dead = self.first or [], []
        self.first = None
        for branch in list(self.pending):
            live = self.live(branch)
            if live is not None:
                (ready if live else dead).extend(self.pending.pop(branch))
        wanted = {switch for branch in self.pending for switch, _ in branch}
        preds: dict[str, list[str]] = {}  # one predicate feeds every Switch of a lowered If
        for switch, (own, pred) in self.plan.switches.items():
            if switch in wanted and switch not in self.asked and self.live(own):
                preds.setdefault(pred, []).append(switch)
                self.asked.add(switch)
        if not ready and not dead and not preds:
            return None
        return ready, dead, preds

    def live(self, branch: Branch) -> bool | None:
        """True when every port of ``branch`` carries data, False when one does not, None: unknown."""
        known = True
        for switch, port in branch:
            taken = self.preds.get(switch)
            if taken is None:
                known = False
            elif taken != bool(port):
                return False
        return True if known else None

    def record(self, switch: str, value: Any) -> None:
        """A fetched predicate: its Switch sends data to port 1 when it is true."""
        self.preds[switch] = bool(np.asarray(value).reshape(-1)[0]) if np.size(value) == 1 else None

    def leftover(self) -> list[tuple[Branch, list[str]]]:
        """Branches whose predicates could not be fetched: to be fetched one branch at a time."""
        left = list(self.pending.items())
        self.pending = {}
        return left


def _constant_ops(opgraph: OpGraph) -> set[str]:
    """Ops whose outputs do not depend on what is fed: fetched once, not per batch."""
    fed = opgraph.fed_ops()
    constant: set[str] = set()
    for op in opgraph.topo_order():
        node = opgraph.node(op)
        inputs = [tensor_op(t) for t in node["inputs"]]
        if op in fed or node["op"] in PLACEHOLDER_OPS:
            continue
        if all(src in constant for src in inputs) and (inputs or node["op"] in WEIGHT_SOURCES):
            constant.add(op)
    return constant


def _estimate_bytes(info: dict[str, Any], rows: int) -> int:
    shape = info["shape"]
    if shape is None:
        return 4 * max(rows, 1)
    count = 1
    for i, dim in enumerate(shape):
        count *= (rows if i == 0 else 1) if dim is None else dim
    try:
        itemsize = np.dtype(info["dtype"]).itemsize
    except TypeError:
        itemsize = 8
    return count * itemsize


def refit_sizes(plan: FetchPlan, measured: dict[str, int]) -> None:
    """Replace the static estimates by the sizes a traced plain run measured on these inputs.

    A shape known only at run time (``tf.fill`` sized from an input value, a dynamic
    ``Reshape``) has no static size: the estimate counts its unknown dimensions as 1. The
    plain run's step statistics hold every executed tensor's real shape, so the fetch is
    chunked by what will come back, and a tensor that alone exceeds ``--max-memory`` is refused
    here, before the capture directory is opened. Tensors the plain run did not execute keep
    their estimate and are checked as they come back (:func:`check_fetched`).
    """
    for name, size in measured.items():
        if name in plan.sizes:
            plan.sizes[name] = size
    for name in plan.names:
        if plan.sizes[name] > plan.max_memory:
            raise too_big(name, plan.sizes[name], plan, "on these inputs (its shape is set at run time)")


def sizes_scale_with_rows(opgraph: OpGraph, plan: FetchPlan) -> bool:
    """True when one example's traced run tells every planned tensor's size at any batch.

    That holds when each planned tensor's static shape is either fully known or known but for
    its first axis (the batch axis, checked by :func:`scaled_sizes` on the trace), no op sizes
    its output from the values it reads (:data:`VALUE_SIZED_OPS`), and nothing is conditional
    or inside a loop (a branch's or an iteration's tensors are not one per row). Then the plain
    runs warm up on one example instead of the whole first batch (see ``worker._plain_runs``).
    """
    if plan.branches or plan.switches:
        return False
    for op in opgraph.topo_order():
        kind = opgraph.op_type(op)
        if kind in VALUE_SIZED_OPS or kind in FRAME_OPS or kind in SWITCH_OPS or kind in MERGE_OPS:
            return False
    for name in plan.names:
        shape = opgraph.output_info(name)["shape"]
        if shape is None or any(dim is None for dim in shape[1:]):
            return False
    return True


def scaled_sizes(opgraph: OpGraph, plan: FetchPlan, one_row: dict[str, int], rows: int) -> dict[str, int] | None:
    """Every planned tensor's bytes at ``rows`` rows, from a traced run of one row; None when
    the trace contradicts the static shapes (a first axis that is not one row long there).

    A tensor whose static first axis is open was measured with one row: it must hold exactly
    one row's worth of its static trailing shape, and holds ``rows`` times that in the batch.
    A fully known shape is the same at any batch.
    """
    out: dict[str, int] = {}
    for name in plan.names:
        if name not in one_row:
            continue  # not executed by the plain run: keeps its estimate, checked as fetched
        shape = opgraph.output_info(name)["shape"]
        if shape is not None and shape and shape[0] is None:
            per_row = _estimate_bytes(opgraph.output_info(name), 1)
            if one_row[name] != per_row:
                return None
            out[name] = per_row * rows
        elif one_row[name] == plan.sizes.get(name):
            out[name] = one_row[name]
        else:
            return None
    return out


def check_fetched(plan: FetchPlan, name: str, nbytes: int) -> None:
    """A fetched tensor, before it is written: over ``--max-memory`` stops the capture (exit 2);
    under it, its real size is what later runs chunk by."""
    if nbytes > plan.max_memory:
        raise too_big(name, nbytes, plan, "as fetched (its shape is set at run time)",
                      "; nothing of it was written, and the capture is left incomplete")
    if nbytes > plan.sizes.get(name, 0):
        plan.sizes[name] = nbytes


def too_big(name: str, size: int, plan: FetchPlan, how: str, after: str = "") -> TftraceError:
    return TftraceError(f"tensor {name} is {size:,} bytes per run {how}, more than {plan.limit_words()}{after}",
                        f"{plan.fix}, or lower --batch-size or the input values that size it")


def chunked(names: list[str], sizes: dict[str, int], limit: int) -> list[list[str]]:
    chunks: list[list[str]] = [[]]
    used = 0
    for name in names:
        size = sizes[name]
        if size > limit:
            raise TftraceError(
                f"tensor {name} alone needs about {size:,} bytes per run, more than --max-memory {limit:,}",
                "raise --max-memory, or lower --batch-size",
            )
        if used + size > limit and chunks[-1]:
            chunks.append([])
            used = 0
        chunks[-1].append(name)
        used += size
    return chunks
