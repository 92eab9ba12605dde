"""What isolating one origin needs besides its replays: one typed record per origin.

:func:`tracer.comparison.isolate.isolate_origins` plans the records and hands them to the judge in
memory. They are also written to ``work/isolation_index.json``, which is the contract with a later
``tftrace isolate`` / ``tftrace report`` run, perhaps on another machine from a received report
directory: read back, every field is checked for its type, and a field that a report made by an
older release lacks takes the value that release's judge assumed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from .detections import ROLES
from ..errors import TftraceError
from ..jsonvalues import is_number, number

__all__ = ["PlannedOrigin", "IsolationPlan"]

RECEIVED_FIX = "copy the whole report directory written by tftrace compare (its work/ folder as written)"


@dataclass(frozen=True)
class PlannedOrigin:
    """One origin to replay, and what judging its replays needs to know about it."""

    id: int
    node: str  # A's op
    a_tensor: str
    b_tensor: str
    b_op: str
    a_op: str | None = None  # None: a report made before it was recorded
    inputs_identical: bool = False  # the origin's inputs were bitwise A's: B's capture is B's op on A's inputs
    reads_variable: bool = False
    writes: tuple[str, ...] = ()  # the ops that write the variable it reads (model state)
    weight: str | None = None  # the variable or constant it is or reads, on both sides; None: it computes
    executed: Mapping[str, list[str] | None] = field(default_factory=dict)  # each side's executed kernels
    same_settings: bool = False
    same_settings_but_build: bool | None = None  # None: not recorded, same_settings stands for it
    per_process: tuple[str, ...] = ()  # sides whose kernels may change from one process to the next
    # sides whose whole runs, run further because a replay moved (judging._repeats_that_missed), repeated it bit for bit
    repeated: tuple[str, ...] = ()
    repeat_noise: float | None = None  # what --repeat measured on its tensor; None: no repeat ran
    same_op_same_settings: bool = False
    loop: str | None = None  # the while loop above it, replayed whole
    rewritten: tuple[Mapping[str, str], ...] = ()  # B's rewritten ops the replay runs
    group: Mapping[str, Any] | None = None  # the rewrite group it stands for (replayed from the group's inputs)
    # the sides on which the op normalises each row with its whole batch's statistics (a batch norm in training
    # mode, or computed in its replay from a reduction over the batch axis, tf.nn.moments': tracer.training.
    # normalises_by_batch): fed identical rows, it still depends on the rows beside them
    batch_statistics: tuple[str, ...] = ()
    batch_ops: tuple[str, ...] = ()  # the ops of its replay that do (A's where A's does, else B's); () not recorded
    batched_alike: bool | None = None  # the sides grouped the examples into the same runs; None: not recorded
    # it holds a detector's lists of detections, born at it with the other roles' lists, which its replays
    # fetch with it so that they are matched as detections: {output, box_format, iou_threshold, roles: {role:
    # {id, a_tensor, b_tensor}}} (tracer.comparison.list_runs.ListRoles); None: replayed and compared index by index
    detections: Mapping[str, Any] | None = None

    @property
    def alike_but_build(self) -> bool:
        """Whether the sides ran with the same settings, their TensorFlow build aside."""
        return self.same_settings if self.same_settings_but_build is None else self.same_settings_but_build

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["writes"], doc["per_process"], doc["repeated"] = list(self.writes), list(self.per_process), list(self.repeated)
        doc["batch_statistics"], doc["batch_ops"] = list(self.batch_statistics), list(self.batch_ops)
        doc["executed"], doc["rewritten"] = dict(self.executed), [dict(r) for r in self.rewritten]
        for optional in ("group", "detections"):
            if doc[optional] is None:
                del doc[optional]
        return doc

    @classmethod
    def from_json(cls, doc: Any, where: str) -> PlannedOrigin:
        """One entry of a received index; ``where`` names it in an error."""
        if not isinstance(doc, dict):
            raise TftraceError(f"{where} is not an object", RECEIVED_FIX)
        fields: dict[str, Any] = {}
        for name, kind, required in _FIELDS:
            if name not in doc or (doc[name] is None and not required):
                if required:
                    raise TftraceError(f"{where} has no {name!r}", RECEIVED_FIX)
                continue
            value = doc[name]
            if not _is(value, kind):
                raise TftraceError(f"{where}'s {name!r} is not {_KIND_WORDS[kind]}: {str(value)[:80]!r}",
                                   RECEIVED_FIX)
            fields[name] = (tuple(value) if kind in ("strings", "objects") else number(value) if kind == "number"
                            else value)
        return cls(**fields)


@dataclass(frozen=True)
class IsolationPlan:
    """The whole index: where the captures were, where the replays' A tensors are, the origins."""

    capture_a: str
    capture_b: str | None
    feeds: str | None
    origins: tuple[PlannedOrigin, ...]

    def to_json(self) -> dict[str, Any]:
        return {"capture_a": self.capture_a, "capture_b": self.capture_b, "feeds": self.feeds,
                "ops": [o.to_json() for o in self.origins]}

    @classmethod
    def from_json(cls, doc: Any, where: str) -> IsolationPlan:
        if not isinstance(doc, dict) or not isinstance(doc.get("ops"), list):
            raise TftraceError(f"{where} is not an isolation index (no list of ops)", RECEIVED_FIX)
        text = {key: doc.get(key) if isinstance(doc.get(key), str) else None
                for key in ("capture_a", "capture_b", "feeds")}
        origins = tuple(PlannedOrigin.from_json(op, f"{where}, op {i}") for i, op in enumerate(doc["ops"]))
        return cls(text["capture_a"] or "", text["capture_b"], text["feeds"], origins)


# (field, kind, required): the checks an entry read from a file passes
_FIELDS: tuple[tuple[str, str, bool], ...] = (
    ("id", "int", True), ("node", "str", True), ("a_tensor", "str", True), ("b_tensor", "str", True),
    ("b_op", "str", True), ("a_op", "str", False), ("inputs_identical", "bool", False),
    ("reads_variable", "bool", False), ("writes", "strings", False), ("weight", "str", False),
    ("executed", "executed", False), ("same_settings", "bool", False), ("same_settings_but_build", "bool", False),
    ("per_process", "strings", False), ("repeated", "strings", False), ("repeat_noise", "number", False), ("same_op_same_settings", "bool", False),
    ("loop", "str", False), ("rewritten", "objects", False), ("group", "group", False),
    ("batch_statistics", "strings", False), ("batch_ops", "strings", False), ("batched_alike", "bool", False),
    ("detections", "detections", False),
)
_KIND_WORDS = {"int": "an integer", "str": "a string", "bool": "true or false", "strings": "a list of strings",
               "number": "a number", "objects": "a list of objects", "executed": "a map of side to kernel names",
               "group": "a rewrite group (kind, a_members, a_inputs)",
               "detections": "lists of detections (output, box_format, iou_threshold, roles)"}


def _is(value: Any, kind: str) -> bool:
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":  # a non-finite one is written as its string (tracer.jsonvalues)
        return is_number(value)
    if kind == "str":
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "strings":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind == "objects":
        return isinstance(value, list) and all(isinstance(v, dict) for v in value)
    if kind == "executed":
        return isinstance(value, dict) and all(
            k in ("a", "b") and (v is None or (isinstance(v, list) and all(isinstance(x, str) for x in v)))
            for k, v in value.items())
    if kind == "detections":
        if not isinstance(value, dict) or not isinstance(value.get("roles"), dict):
            return False
        roles = value["roles"]
        return (isinstance(value.get("output"), str) and isinstance(value.get("box_format"), str)
                and is_number(value.get("iou_threshold")) and {"boxes", "scores"} <= set(roles) <= set(ROLES)
                and all(isinstance(r, dict) and _is(r.get("id"), "int") and isinstance(r.get("a_tensor"), str)
                        and isinstance(r.get("b_tensor"), str) for r in roles.values()))
    return (isinstance(value, dict) and isinstance(value.get("kind"), str)  # group
            and _is(value.get("a_members"), "strings") and bool(value["a_members"])
            and _is(value.get("a_inputs", []), "strings"))
