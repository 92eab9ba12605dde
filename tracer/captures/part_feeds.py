"""The parts of a split fetch, each fed what the parts before it fetched.

A fetch split in parts (under ``--max-memory`` or ``--max-process-memory``) is one
``session.run`` per part. Left to itself, each part computes its inputs again from the
examples, and what it computes again is not what was stored: on the H200 (2026-12-04) Grappler
fused the ops a part did not fetch, so a later part ran from other values than the ones stored
for them, and a whole and a split capture of the same model differed inside from
``block1/relu`` on. A stateful op upstream (a counter, a random op) also ran once per part.

So each part is fed, for every tensor it reads from an earlier part of the same run, the value
that part fetched. It then runs its own ops only, from exactly the values stored for their
inputs, and the capture holds one run of the model whatever the number of parts. The values fed
are held in memory until the last part that reads them, and count against the fetch's bound:
the parts are cut so that each one's tensors and the values held while it runs stay under it.

A tensor a part may not be fed (:func:`takes_feed`: a loop's, a ``Switch``'s or ``Merge``'s
output, one inside a cond branch, a TensorArray's flow, the output of an op acting on a
resource) is computed again by the part that reads it. Those are *re-checked*: the part fetches
them too, and the digest of what it computed is compared with the digest of what was stored
(:func:`tracer.captures._packed.content_digest`); a difference is recorded in the manifest,
because the part's values then rest on inputs other than the stored ones.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..opgraph import NOT_FETCHABLE_DTYPES, OpGraph, tensor_op
from ..optypes import FRAME_OPS, MERGE_OPS, SWITCH_OPS
from ._packed import content_digest
from .fetch_plan import FetchPlan, chunked

__all__ = ["Part", "PartPlans", "plan_parts", "takes_feed", "BetweenParts"]

_SHRINK_ROUNDS = 8  # cutting the parts again for the values held: ResNet-50 at batch 8 under 512 MiB takes two


@dataclass
class Part:
    """One ``session.run`` of a split fetch."""

    names: list[str]  # the tensors it fetches and stores
    feeds: list[str] = field(default_factory=list)  # tensors of earlier parts it is fed
    rechecks: list[str] = field(default_factory=list)  # tensors of earlier parts it computes again
    release: list[str] = field(default_factory=list)  # held values no later part reads: dropped after it
    unfed: bool = False  # no room to hold values for it: it computes its inputs again from the examples


def plan_parts(opgraph: OpGraph, names: list[str], sizes: dict[str, int], limit: int,
               feedable: Callable[[str], bool], constant: Collection[str] = frozenset(),
               target: int | None = None) -> list[Part]:
    """``names`` cut into parts of about ``target`` bytes (default: ``limit``), each part with the
    values held for later parts kept under ``limit`` bytes; a single part when everything fits
    the target. Where no cut keeps a part and the values it is fed under the limit, the parts are
    not fed: each computes its inputs again (re-checking them would take memory there is not). A
    ``constant`` op (its value does not depend on the inputs) is neither fed nor re-checked: a part
    runs it again."""
    target = limit if target is None else min(target, limit)
    chunks = chunked(names, sizes, target)
    if len(chunks) == 1:
        return [Part(chunks[0])]
    largest = max(sizes[n] for n in names)
    bound = target
    for _ in range(_SHRINK_ROUNDS):
        parts = _wire(opgraph, chunks, feedable, constant)
        over = max(_peak(part, held, sizes) for part, held in zip(parts, _held_before(parts))) - limit
        if over <= 0:
            return parts
        bound -= max(over, largest)  # at least a tensor's worth: by the overshoot alone, a cut moves by bytes a round
        if bound < largest:
            break
        chunks = chunked(names, sizes, bound)
    unfed = [Part(chunk, unfed=True) for chunk in chunked(names, sizes, limit)]
    unfed[0].unfed = False  # the first part computes from the examples alone in any case
    return unfed


class PartPlans:
    """:func:`plan_parts` once per fetch set: a capture's later runs fetch the same tensors, and
    cutting a Model Garden RetinaNet's 13,058 tensors into parts took 0.4 s, once per run before."""

    def __init__(self, opgraph: OpGraph, plan: FetchPlan, feedable: Callable[[str], bool]) -> None:
        self.opgraph, self.plan, self.feedable = opgraph, plan, feedable
        self.planned: dict[tuple, list[Part]] = {}

    def __call__(self, names: list[str]) -> list[Part]:
        sizes, limit, target = self.plan.sizes, self.plan.max_memory, self.plan.part_limit()
        key = (tuple(names), tuple(sizes[n] for n in names), limit, target)  # a size measured larger cuts anew
        if key not in self.planned:
            self.planned[key] = plan_parts(self.opgraph, names, sizes, limit, self.feedable, self.plan.constant, target)
        return [replace(part) for part in self.planned[key]]  # copies: the caller puts predicates in front


def takes_feed(runtime: Any, plan: FetchPlan, name: str) -> bool:
    """Whether a later part may be fed this tensor's value instead of computing it again.

    Not a conditional tensor (fed, its branch would run whatever its predicate says), nor a
    Switch, Merge or loop Enter output, nor one TensorFlow refuses as a feed. Nor the output of an
    op that acts on a resource or a variant (a TensorArray write, a stack push; a pure read of a
    variable aside), nor a TensorArray's flow: fed, the op would not run, and the part, which
    creates the TensorArray anew, would read it empty (a TF1 ``map_fn``'s gather failed so, its
    loop's flow fed: "Could not read from TensorArray index 0")."""
    graph = runtime.opgraph
    op = tensor_op(name)
    if name in plan.branches or graph.op_type(op) in _NEVER_FED or name in graph.tensor_array_flows():
        return False
    if graph.op_type(op) not in _PURE_READS and any(
            tensor_op(i) in graph and graph.output_info(i)["dtype"] in NOT_FETCHABLE_DTYPES
            for i in graph.data_inputs(op)):
        return False
    return bool(runtime.graph.is_feedable(runtime.graph.get_tensor_by_name(name)))


_NEVER_FED = SWITCH_OPS | MERGE_OPS | FRAME_OPS
_PURE_READS = frozenset({"ReadVariableOp"})


class BetweenParts:
    """What a run's later parts need of its earlier ones (:mod:`tracer.captures.part_feeds`): the
    values they are fed, held until the last of them has run; the digests of the values they
    compute again and re-check; and what those re-checks found."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph
        self.held: dict[str, np.ndarray] = {}
        self.digests: dict[str, str] = {}
        self.fed: set[str] = set()
        self.rechecked: set[str] = set()
        self.differed: list[dict[str, Any]] = []
        self.unfed = 0  # parts that computed their inputs again, for want of room to hold them

    def new_run(self) -> None:
        self.held.clear()
        self.digests.clear()

    def rechecks(self, step: Any) -> list[str]:
        return [n for n in step.rechecks if n in self.digests]

    def feed(self, step: Any, feed: dict) -> dict:
        self.unfed += bool(step.unfed)
        values = {self.graph.get_tensor_by_name(n): self.held[n] for n in step.feeds if n in self.held}
        self.fed.update(n for n in step.feeds if n in self.held)
        return {**feed, **values} if values else feed

    def keep(self, step: Any, name: str, value: np.ndarray) -> None:
        if name in step.hold:
            self.held[name] = value
        if name in step.digest:
            self.digests[name] = content_digest(value)

    def check(self, name: str, value: np.ndarray, run_index: int, part: int) -> None:
        """A tensor an earlier part stored, computed again by this one: the same bytes, or recorded."""
        self.rechecked.add(name)
        if content_digest(value) != self.digests[name]:
            self.differed.append({"tensor": name, "run": run_index, "part": part})

    def release(self, step: Any) -> None:
        for name in step.release:
            self.held.pop(name, None)

    def record(self) -> dict[str, Any]:
        return {"fed": len(self.fed), "rechecked": len(self.rechecked), "differed": self.differed,
                "unfed_parts": self.unfed}


def _wire(opgraph: OpGraph, chunks: list[list[str]], feedable: Callable[[str], bool],
          constant: Collection[str]) -> list[Part]:
    """Each chunk's feeds and re-checks, found by walking up from its ops: an input fetched by an
    earlier part is fed when TensorFlow takes it as a feed, else its op runs again (re-checked)
    and the walk goes on above it; an input no part fetches (a constant in a later run, an
    output nothing else reads) has its op run again, and the walk goes on above it too."""
    part_of = {name: i for i, chunk in enumerate(chunks) for name in chunk}
    settled = set(constant) | opgraph.fed_ops()  # the examples are fed to every part anyway
    parts = [Part(list(chunk)) for chunk in chunks]
    for i, part in enumerate(parts):
        own = {tensor_op(n) for n in part.names}
        feeds: set[str] = set()
        rechecks: set[str] = set()
        seen = set(own)
        stack = list(own)
        while stack:
            op = stack.pop()
            for tensor in opgraph.data_inputs(op):
                producer = tensor_op(tensor)
                if producer in own or producer not in opgraph or producer in settled:
                    continue
                earlier = part_of.get(tensor, i) < i
                if earlier and feedable(tensor):
                    feeds.add(tensor)
                    continue
                if earlier:
                    rechecks.add(tensor)
                if producer not in seen:
                    seen.add(producer)
                    stack.append(producer)
            for control in opgraph.node(op)["control_inputs"]:  # an op that must run first runs again
                if control in opgraph and control not in seen:
                    seen.add(control)
                    stack.append(control)
        part.feeds, part.rechecks = sorted(feeds), sorted(rechecks)
    last_read = {name: i for i, part in enumerate(parts) for name in part.feeds}
    for name, i in last_read.items():
        parts[i].release.append(name)
    return parts


def _held_before(parts: list[Part]) -> list[set[str]]:
    """The values held while each part runs: fetched by an earlier part, fed to this or a later one."""
    fed_later = [set() for _ in parts]
    for i in range(len(parts) - 2, -1, -1):
        fed_later[i] = fed_later[i + 1] | set(parts[i + 1].feeds)
    fetched_before: set[str] = set()
    held = []
    for i, part in enumerate(parts):
        held.append({n for n in fetched_before if n in fed_later[i] or n in part.feeds})
        fetched_before |= set(part.names)
    return held


def _peak(part: Part, held: set[str], sizes: dict[str, int]) -> int:
    """Bytes in memory while a part runs: its own tensors, its re-checks, and the values held."""
    return sum(sizes.get(n, 0) for n in part.names) + sum(sizes.get(n, 0) for n in part.rechecks) + \
        sum(sizes.get(n, 0) for n in held)
