"""Digests of what the functions of a graph's library compute (a TF2 loop's body and cond, a
called function): what the op graph records beside a function's name, so that the diff compares
function bodies by content. Two exports name one loop body differently and may change a constant
inside it under the same name: the name says neither.
"""

from __future__ import annotations

import hashlib
from typing import Any

__all__ = ["FunctionDigests"]


class FunctionDigests:
    """Digests of what the functions of a graph's library compute: a definition without its own
    name, each function it calls replaced by that one's digest. Two exports name one loop body
    differently (``map_while_body_243``, ``map_while_body_2087``) and may change a constant inside
    it under the same name: the name says neither. Read from the serialized library, once (asking
    the graph for a function object would register it with the eager context, where a second
    model's same-named function of other content is refused)."""

    def __init__(self, graph: Any) -> None:
        self._graph = graph
        self._library: dict[str, Any] | None = None
        self._done: dict[str, str | None] = {}

    def of(self, name: str, _calling: frozenset[str] = frozenset()) -> str | None:
        """The digest of function ``name``; None when the library lacks it (or it calls itself)."""
        if name in self._done:
            return self._done[name]
        if self._library is None:
            self._library = {f.signature.name: f for f in self._graph.as_graph_def().library.function}
        definition = self._library.get(name)
        if definition is None or name in _calling:
            return None
        fdef = type(definition)()
        fdef.CopyFrom(definition)
        fdef.signature.name = ""
        _drop_bookkeeping_attrs(fdef.attr)  # how it was traced (_construction_context, _input_shapes...)
        fdef.ClearField("arg_attr")
        _number_arguments(fdef)  # TF names them after the loop and the function ("while_2_loop_counter")
        for node in fdef.node_def:
            _drop_bookkeeping_attrs(node.attr)  # _output_shapes, _class...: not what it computes
            node.ClearField("experimental_debug_info")
            for value in node.attr.values():
                for ref in [value.func] if value.HasField("func") else list(value.list.func):
                    ref.name = self.of(ref.name, _calling | {name}) or ref.name
        self._done[name] = hashlib.sha256(fdef.SerializeToString(deterministic=True)).hexdigest()[:16]
        return self._done[name]


def _number_arguments(fdef: Any) -> None:
    """Name a function's arguments and results by position (``arg0``, ``out0``), wherever its
    body refers to them: their names say where TF traced it, not what it computes."""
    args = {a.name: f"arg{i}" for i, a in enumerate(fdef.signature.input_arg)}
    outs = {a.name: f"out{i}" for i, a in enumerate(fdef.signature.output_arg)}

    def renamed(ref: str) -> str:
        control = ref.startswith("^")
        head, sep, rest = ref.lstrip("^").partition(":")
        return ("^" if control else "") + args.get(head, head) + sep + rest

    for arg in fdef.signature.input_arg:
        arg.name = args[arg.name]
    for arg in fdef.signature.output_arg:
        arg.name = outs[arg.name]
    for node in fdef.node_def:
        node.input[:] = [renamed(i) for i in node.input]
    results = {outs.get(k, k): renamed(v) for k, v in fdef.ret.items()}
    fdef.ClearField("ret")
    for key, value in results.items():
        fdef.ret[key] = value


def _drop_bookkeeping_attrs(attrs: Any) -> None:
    for key in [k for k in attrs if k.startswith("_")]:
        del attrs[key]
