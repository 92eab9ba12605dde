"""Checking a received capture's manifest before anything in it is trusted.

Captures come from elsewhere, so :class:`tracer.captures.reader.Capture` runs these checks when
it opens one: every tensor record (file inside ``tensors/``, dtype, shape, its ``.npy`` header or
packed chunk index, an alias naming a real tensor of the same layout, a prediction's inputs),
the examples and runs, and the op graph (no cycle outside a loop's back edges). Each failure is
one "damaged capture" TftraceError naming the field.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import networkx as nx
import numpy as np

from ..errors import TftraceError
from ..jsonvalues import is_number
from ..optypes import LOOP_BACK_EDGE_OPS
from ..runspec import SIDE_PARTS
from ._format import (
    APART,
    EXTENDED,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    MAX_TENSOR_BYTES,
    NATIVE,
    STORED_DTYPE,
    STRING,
    TENSORS,
    damaged,
    storage_matches,
)
from ._packed import PACKED_SUFFIX
from ._unpack import validate_chunks, validate_prediction

__all__ = ["validate_manifest", "validate_record"]

LAYOUTS = frozenset({"rows", "const", "whole", "varies"})


def validate_manifest(root: Path, manifest: Any) -> dict[str, Path]:
    """Check everything a reader relies on; returns tensor name -> resolved file path."""
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise damaged(root, f"{MANIFEST} is not a tftrace capture manifest (no \"format\": \"{FORMAT}\")")
    version = manifest.get("format_version")
    if type(version) is not int or version < 1:
        raise damaged(root, f"format_version {version!r} is not a positive integer")
    if version > FORMAT_VERSION:
        raise TftraceError(
            f"the capture at {root} was written by a newer tftrace (format version {version}; "
            f"this one reads up to {FORMAT_VERSION})",
            "upgrade tftrace: pip install -U tftrace",
        )
    for key in ("tensors", "uncaptured", "spec", "environment", *APART):
        if not isinstance(manifest.get(key, {}), dict):
            raise damaged(root, f'"{key}" is not a JSON object')
    for key in ("tensors", "uncaptured", *APART):
        manifest.setdefault(key, {})
    for group, what in APART.items():
        if any("alias_of" in rec for rec in manifest[group].values() if isinstance(rec, dict)):
            raise damaged(root, f"a {what} claims alias_of: {what}s are stored as files of their own")
    if not all(isinstance(r, str) for r in manifest["uncaptured"].values()):
        raise damaged(root, "an uncaptured reason is not a string")
    _validate_parts(root, manifest)
    tensors_dir = root.resolve() / TENSORS
    listed = listed_files(root, tensors_dir)
    files = {name: validate_record(root, tensors_dir, name, rec, version, listed)
             for name, rec in manifest["tensors"].items()}
    levels: dict[str, int] = {}
    for name, rec in manifest["tensors"].items():
        if "alias_of" in rec:
            _validate_alias(root, manifest["tensors"], name, rec)
        levels[name] = validate_prediction(root, manifest["tensors"], levels, name, rec)
    return files


ALIAS_LAYOUT = ("dtype", "stored_dtype", "shape", "batch_major")  # what an alias and its tensor share


def _validate_alias(root: Path, tensors: dict[str, Any], name: str, rec: dict[str, Any]) -> None:
    """``alias_of`` says a tensor holds the very bytes of another captured tensor, stored once
    (its file is a hard link to the other's, or a copy where links are not kept). The claim
    must name another captured tensor that is no alias itself and has the same dtype, stored
    dtype, shape and layout; each file has passed every check of its own already, so an alias
    never lets a path reach further than a plain record could."""
    target = rec["alias_of"]
    other = tensors.get(target) if isinstance(target, str) else None
    if not isinstance(other, dict) or target == name:
        raise damaged(root, f"tensor {name!r}: alias_of {target!r} does not name another captured tensor")
    if "alias_of" in other:
        raise damaged(root, f"tensor {name!r}: alias_of {target!r} names an alias itself, not the tensor stored")
    differing = [key for key in ALIAS_LAYOUT if rec.get(key) != other.get(key)]
    if differing:
        raise damaged(root, f"tensor {name!r}: alias_of {target!r} names a tensor of another {differing[0]} "
                            f"({rec.get(differing[0])!r} here, {other.get(differing[0])!r} there)")


def listed_files(root: Path, tensors_dir: Path) -> dict[str, int] | None:
    """The plain files (no links) directly in the capture's ``tensors/`` -> their sizes, from one
    listing; None where ``tensors/`` is itself a link, or cannot be listed (each record's file is
    then resolved on its own, as a link in it is). On the 35,000-tensor RetinaNet stand-in,
    resolving every file took 1.5 s of each 4.4 s opening."""
    here = root / TENSORS
    try:
        if here.is_symlink() or here.resolve() != tensors_dir:
            return None
        with os.scandir(here) as entries:
            return {e.name: e.stat(follow_symlinks=False).st_size for e in entries if e.is_file(follow_symlinks=False)}
    except OSError:
        return None


def validate_record(root: Path, tensors_dir: Path, name: str, rec: Any, version: int = 1,
                    listed: dict[str, int] | None = None) -> Path | None:
    """One tensor record's checks (see the module); returns its file's resolved path (None: its
    values are in the artifact). ``listed``: :func:`listed_files`, where a plain file's size is read."""
    def bad(detail: str) -> TftraceError:
        return damaged(root, f"tensor {name!r}: {detail}")

    if not isinstance(rec, dict):
        raise bad("its record is not a JSON object")
    in_artifact = version >= 2 and rec.get("values") == "artifact"
    encoding = rec.get("encoding") if version >= 2 else None
    if in_artifact:
        if "file" in rec or "encoding" in rec:
            raise bad("its values are said to be in the artifact, yet it names a file")
        found = rec.get("digest")
        if not (isinstance(found, str) and found.startswith("sha256:") and len(found) == 71
                and isinstance(rec.get("checkpoint_key"), str)):
            raise bad("its values are in the artifact but its digest or checkpoint key is missing")
    suffix = PACKED_SUFFIX if encoding is not None or (version >= 2 and "alias_of" in rec
                                                        and str(rec.get("file", "")).endswith(PACKED_SUFFIX)) else ".npy"
    file = "tensors/_.npy" if in_artifact else rec.get("file")
    if not isinstance(file, str):
        raise bad("its record has no file path")
    posix = PurePosixPath(file)
    if posix.is_absolute() or PureWindowsPath(file).is_absolute() or PureWindowsPath(file).drive:
        raise bad(f"file path {file!r} is absolute")
    if ".." in posix.parts or "\\" in file:
        raise bad(f"file path {file!r} contains '..' or a backslash")
    if len(posix.parts) != 2 or posix.parts[0] != TENSORS or not posix.name.endswith(suffix):
        raise bad(f"file path {file!r} is not {TENSORS}/<name>{suffix}")
    dtype_name, stored = rec.get("dtype"), rec.get("stored_dtype")
    if not isinstance(dtype_name, str) or (dtype_name not in NATIVE and dtype_name not in EXTENDED and dtype_name != STRING):
        raise bad(f"unknown dtype {dtype_name!r}")
    match = STORED_DTYPE.fullmatch(stored) if isinstance(stored, str) else None
    if match is None or not storage_matches(dtype_name, match[1], int(match[2])):
        raise bad(f"stored dtype {stored!r} does not hold {dtype_name}")
    shape = rec.get("shape")
    if not isinstance(shape, list) or len(shape) > 32 or not all(type(d) is int and d >= 0 for d in shape):
        raise bad(f"shape {shape!r} is not a list of at most 32 non-negative integers")
    declared = int(np.prod(shape, dtype=object)) * int(match[2])
    if declared > MAX_TENSOR_BYTES:
        raise bad(f"shape {shape} declares {declared} bytes, more than the {MAX_TENSOR_BYTES}-byte limit")
    if rec.get("size_bytes") != declared:
        raise bad(f"size_bytes {rec.get('size_bytes')!r} does not match shape {shape} × itemsize = {declared}")
    stats = rec.get("stats")
    if stats is not None and not (isinstance(stats, dict) and all(_is_number(v) for v in stats.values())):
        raise bad("its stats are not an object of numbers")
    if in_artifact:
        return None
    if listed is not None and posix.name in listed:  # a plain file in tensors/ itself
        resolved, size = tensors_dir / posix.name, listed[posix.name]
    else:
        try:
            resolved = (root / file).resolve(strict=True)
        except OSError as exc:
            raise bad(f"file {file} is missing ({exc.strerror})") from exc
        if resolved.parent != tensors_dir or not resolved.is_file():
            raise bad(f"file {file} resolves to {resolved}, outside {TENSORS}/")
        size = resolved.stat().st_size
    if encoding is not None:
        validate_chunks(bad, encoding, shape, rec.get("batch_major"), int(match[2]), size)
    elif suffix == ".npy" and size < declared:
        raise bad(f"file {file} is smaller than the {declared} bytes its record declares")
    return resolved


# --------------------------------------------------------------------------- the other parts


# The JSON types of the manifest's other parts, where present: a dict describes an object's keys
# (recursively), a type or tuple of types is checked with isinstance. Keys not listed are free.
PARTS: dict[str, Any] = {
    "spec": {"artifact": {"path": str, "tag": str, "signature": str, "outputs": list, "input_names": list},
             "device": str, "knobs": {"env": (dict, list), "grappler": (dict, list), "threads": (list, type(None))},
             "inputs": dict, "allow_unsafe_ops": bool, "max_process_memory": (int, type(None))},
    "artifact": {"kind": str, "location": str, "inlined_by_loader": bool, "gpu_alternatives": list},
    "signature": {"inputs": dict, "outputs": dict},
    "graph": {"inputs": dict, "outputs": dict, "nodes": list},
    "examples": {"count": int, "batch_major": bool, "source": str},
    "tensor_layout": dict,
    "observer_effect": {"outputs_identical": bool, "outputs_max_abs_diff": dict,
                        "executed_ops": {"plain": dict, "instrumented": dict},
                        "only_in_plain": list, "only_in_instrumented": list, "stateful_ops": list,
                        "executed_nodes_plain": dict, "executed_nodes_instrumented": dict},
    "timings": {"plain_latency_ms": dict},
    "memory": dict,
    "environment": {"onednn": dict},
    "notes": list,
    "runs": list,
}


JSON_NAMES = {dict: "a JSON object", list: "a list", str: "a string", int: "an integer", float: "a number",
              bool: "true or false", type(None): "null"}


def _shape_error(value: Any, spec: Any, where: str) -> str | None:
    """Where ``value`` first disagrees with ``spec`` (see PARTS), as a sentence; or None."""
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            return f'"{where}" is not a JSON object'
        for key, inner in spec.items():
            if key in value:
                found = _shape_error(value[key], inner, f"{where}.{key}")
                if found:
                    return found
        return None
    wanted = spec if isinstance(spec, tuple) else (spec,)
    fits = isinstance(value, wanted) and not (isinstance(value, bool) and bool not in wanted)  # true is no integer
    return None if fits else f'"{where}" is not {" or ".join(JSON_NAMES[t] for t in wanted)}'


def _validate_parts(root: Path, manifest: dict[str, Any]) -> None:
    """Type-check what compare and the report read besides the tensors, where present.

    Present-but-wrong is refused here; absent is refused where it is needed (``_Record``), so
    minimal manifests (tests, tools that only store tensors) still open.
    """
    for key, spec in PARTS.items():
        found = _shape_error(manifest[key], spec, key) if key in manifest else None
        if found:
            raise damaged(root, found)
    spec = manifest.get("spec")
    if isinstance(spec, dict):  # isolation and the noise runs rebuild the side from it: its parts must build
        for part, build in SIDE_PARTS.items():  # as Side.from_json builds them
            try:
                build(spec.get(part, {}))
            except (TftraceError, TypeError, ValueError) as exc:  # a knob of the wrong shape: a fuzzer's find
                raise damaged(root, f'"spec.{part}" does not describe a side ({type(exc).__name__}: '
                                    f'{getattr(exc, "problem", exc)})') from None
    if not _is_list_of(manifest.get("notes", []), str):
        raise damaged(root, '"notes" is not a list of strings')
    for key in ("batch_size", "fetch_chunks"):
        if manifest.get(key) is not None and not _is_count(manifest[key]):
            raise damaged(root, f'"{key}" {manifest[key]!r} is not a non-negative integer')
    layout = manifest.get("tensor_layout", {})
    if not all(isinstance(k, str) and isinstance(v, str) and v in LAYOUTS for k, v in layout.items()):
        raise damaged(root, f'"tensor_layout" maps a tensor to something other than {sorted(LAYOUTS)}')
    count = None
    if "examples" in manifest:
        examples = manifest["examples"]
        count = examples.get("count")
        if not _is_count(count) or not isinstance(examples.get("batch_major"), bool):
            raise damaged(root, '"examples" needs an integer "count" >= 0 and a boolean "batch_major"')
        if "file_sha256" in examples and not _is_sha256(examples["file_sha256"]):
            raise damaged(root, '"examples.file_sha256" is not 64 lowercase hexadecimal digits')
        # "graph" and its "inputs", where present, are JSON objects (PARTS, above); the rest of the graph is
        # checked last (_validate_graph, which refuses one without "inputs"), so a manifest with several
        # faults is still refused for the same one
        shared, graph = examples.get("shared", []), manifest.get("graph", {})
        if not _is_list_of(shared, str) or ("inputs" in graph and not set(shared) <= set(graph["inputs"])):
            raise damaged(root, '"examples.shared" is not a list of the signature\'s input keys')
    if "runs" in manifest:
        ok = all(
            isinstance(r, list) and len(r) == 2 and _is_count(r[0]) and _is_count(r[1]) and r[0] <= r[1]
            and (count is None or r[1] <= count)
            for r in manifest["runs"]
        )
        if not ok:
            raise damaged(root, '"runs" is not a list of [start, stop] example ranges within "examples.count"')
    if "graph" in manifest:
        _validate_graph(root, manifest["graph"])


def _validate_graph(root: Path, graph: dict[str, Any]) -> None:
    """The op graph: well-typed nodes with unique names, signature tensors that exist, no cycle."""

    def bad(detail: str) -> TftraceError:
        return damaged(root, f"the op graph: {detail}")

    nodes = graph.get("nodes")
    if not isinstance(nodes, list) or not all(isinstance(n, dict) for n in nodes):
        raise bad('"nodes" is not a list of JSON objects')
    outputs_of: dict[str, int] = {}
    for node in nodes:
        name = node.get("name")
        if not isinstance(name, str) or name in outputs_of:
            raise bad(f"node name {name!r} is not a string or not unique")
        if not isinstance(node.get("op"), str):
            raise bad(f"node {name!r} has no op type")
        if not (_is_list_of(node.get("inputs"), str) and _is_list_of(node.get("control_inputs"), str)):
            raise bad(f"node {name!r}: inputs/control_inputs are not lists of strings")
        if not (isinstance(node.get("device"), str) and isinstance(node.get("scope"), str)
                and isinstance(node.get("attrs"), dict)):
            raise bad(f"node {name!r}: device, scope or attrs is missing or of the wrong type")
        outs = node.get("outputs")
        if not isinstance(outs, list) or not all(_is_output(o) for o in outs):
            raise bad(f"node {name!r}: outputs are not [{{dtype, shape, capturable, reason}}]")
        outputs_of[name] = len(outs)
    for role in ("inputs", "outputs"):
        mapping = graph.get(role)
        if not isinstance(mapping, dict):
            raise bad(f'"{role}" is not a JSON object')
        for key, tensor in mapping.items():
            op, _, slot = tensor.rpartition(":") if isinstance(tensor, str) else ("", "", "")
            if op not in outputs_of or not slot.isdigit() or int(slot) >= outputs_of[op]:
                raise bad(f"signature {role[:-1]} {key!r} names {tensor!r}, which is not a tensor of the graph")
    _refuse_cycles(nodes, bad)


def _refuse_cycles(nodes: list[dict[str, Any]], bad: Any) -> None:
    """A cycle over data and control edges between the listed nodes, without the loop back
    edges (as :meth:`tracer.opgraph.OpGraph.topo_order`, which a cycle would break), is refused."""
    forward = {n["name"] for n in nodes if n["op"] not in LOOP_BACK_EDGE_OPS}  # sources of forward edges
    g = nx.DiGraph()
    g.add_nodes_from(n["name"] for n in nodes)
    g.add_edges_from((src, n["name"]) for n in nodes
                     for src in {_op(t) for t in [*n["inputs"], *n["control_inputs"]]} & forward)
    if nx.is_directed_acyclic_graph(g):  # linear; find_cycle on an acyclic graph walks the edges below
        return  # every source again (115 s for a 35,000-op detector's manifest, this 0.1 s)
    cycle = nx.find_cycle(g)
    raise bad(f"it has a cycle (through {', '.join(map(repr, sorted({src for src, _ in cycle})[:3]))})")


def _op(tensor: str) -> str:
    return tensor.lstrip("^").rsplit(":", 1)[0] if ":" in tensor else tensor.lstrip("^")


def _is_output(out: Any) -> bool:
    if not isinstance(out, dict) or not isinstance(out.get("dtype"), str):
        return False
    shape = out.get("shape")
    shape_ok = shape is None or (isinstance(shape, list) and all(d is None or type(d) is int for d in shape))
    return shape_ok and isinstance(out.get("capturable"), bool) and isinstance(out.get("reason", ""), str)


def _is_number(value: Any) -> bool:
    return is_number(value)  # "inf", "-inf", "nan" included: tracer.jsonvalues


def _is_count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _is_sha256(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def _is_list_of(value: Any, kind: type) -> bool:
    return isinstance(value, list) and all(isinstance(v, kind) for v in value)
