"""Reading capture directories, which are untrusted input (format 1 and 2).

Captures come from elsewhere (a colleague, a CI artifact), so the manifest is checked before
anything is trusted: file paths must stay inside ``tensors/``, shapes and dtypes must be sane
and agree with each ``.npy`` header before anything is allocated or memory-mapped, and a
directory without ``manifest.json`` (an interrupted capture) is refused outright. A tensor
stored once for two names (``alias_of``) must name a real tensor of the same layout. The other
parts compare reads (the op graph, the examples, the runs) are type-checked too, and a key
that is missing where a reader needs it raises the same "damaged capture" error, so a
hand-made manifest never surfaces as a crash deep inside the comparison.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import networkx as nx
import numpy as np

from ..errors import TftraceError
from ..jsonvalues import is_number, loads
from ..optypes import LOOP_BACK_EDGE_OPS
from ._format import (
    EXTENDED,
    FORMAT,
    FORMAT_VERSION,
    MANIFEST,
    MAX_TENSOR_BYTES,
    NATIVE,
    RERUN,
    STORED_DTYPE,
    STRING,
    TENSORS,
    damaged,
    open_npy,
    storage_matches,
    widen,
)
from ._packed import PACKED_SUFFIX, digest
from ._stream import ChunkCache, TensorStream
from ._unpack import iter_packed, read_packed, validate_chunks, validate_prediction
from ._values import artifact_values

__all__ = ["Capture", "MissingKey", "is_capture_dir"]

MAX_MANIFEST_BYTES = 1 << 30  # a real manifest of a 10,000-op model is a few MB
DECODED_CACHE_BYTES = 16 << 20  # packed tensors decoded lately: the predicted tensors read next need them
LAYOUTS = frozenset({"rows", "const", "whole", "varies"})


def is_capture_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a complete capture directory: it holds ``manifest.json``, which the
    store writes last (one without it is an interrupted capture, refused by :meth:`Capture.open`).
    The one test of it: the CLI, the API and the pipeline tell captures from artifacts by it."""
    return os.path.isfile(os.path.join(path, MANIFEST))


class MissingKey(TftraceError, KeyError):
    """A key a reader needs is missing from a manifest: a TftraceError for the CLI, and still a
    KeyError for code that probes with ``try: d[k] except KeyError``."""

    __str__ = TftraceError.__str__


class _Record(dict):
    """A JSON object of a manifest whose missing keys raise :class:`MissingKey`."""

    __slots__ = ("_root",)

    def __missing__(self, key: Any) -> Any:
        root = getattr(self, "_root", "?")
        problem = damaged(Path(str(root)), f"{MANIFEST} has no {key!r} where tftrace needs it")
        raise MissingKey(problem.problem, problem.fix)


class Capture:
    """A finished capture directory, validated on open; tensors are memory-mapped on request.

    Create it with :meth:`open`, which does the validation; the constructor trusts its input.
    """

    def __init__(self, path: Path, manifest: dict[str, Any], files: dict[str, Path | None],
                 plain_files: dict[str, Path] | None = None) -> None:
        self.path = path
        self.manifest = manifest
        self._files = files
        self._plain_files = plain_files or {}
        self._decoded: OrderedDict[str, np.ndarray] = OrderedDict()  # LRU, at most DECODED_CACHE_BYTES
        self._from_artifact: dict[str, np.ndarray] = {}
        self._chunk_cache: ChunkCache | None = None  # made on the first stream

    @classmethod
    def open(cls, path: str | Path) -> Capture:
        """Open and validate a capture directory; refuses incomplete or damaged ones."""
        root = Path(path)
        if not root.exists():
            raise TftraceError(f"no capture at {root}: the path does not exist", "check the path")
        if not root.is_dir():
            raise TftraceError(f"{root} is a file, not a capture directory", "pass the capture's directory")
        manifest_path = root / MANIFEST
        if not manifest_path.is_file():
            raise TftraceError(
                f"incomplete capture at {root}: {MANIFEST} is missing — the capture was interrupted, "
                "crashed or is still running",
                RERUN,
            )
        size = manifest_path.stat().st_size
        if size > MAX_MANIFEST_BYTES:
            raise damaged(root, f"{MANIFEST} is {size:,} bytes, more than the {MAX_MANIFEST_BYTES:,}-byte limit")

        def record(obj: dict[str, Any]) -> _Record:
            wrapped = _Record(obj)
            wrapped._root = root
            return wrapped

        try:
            text = manifest_path.read_text(encoding="utf-8")
            manifest = loads(text, object_hook=record)  # strict: NaN/Infinity tokens are damage
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            raise damaged(root, f"{MANIFEST} is not valid JSON ({str(exc)[:200]})") from exc
        files = _validate_manifest(root, manifest)
        plain = {key: _validate_record(root, root.resolve() / TENSORS, f"plain output {key}", rec)
                 for key, rec in manifest.get("plain_outputs", {}).items()}
        return cls(root, manifest, files, plain)

    @property
    def spec(self) -> dict[str, Any]:
        """The run spec of this side ({} for manifests that predate it)."""
        return self.manifest.get("spec", {})

    @property
    def environment(self) -> dict[str, Any]:
        """The environment fingerprint of the process that captured this side."""
        return self.manifest.get("environment", {})

    @property
    def tensor_names(self) -> list[str]:
        """Captured tensor names in write order (topological, except that a cond branch comes after the
        predicate that decides it: see fetch_plan.BranchSchedule)."""
        return list(self.manifest["tensors"])

    @property
    def uncaptured(self) -> dict[str, str]:
        return dict(self.manifest["uncaptured"])

    def has(self, name: str) -> bool:
        return name in self.manifest["tensors"]

    def record(self, name: str) -> dict[str, Any]:
        """The manifest record of a captured tensor (file, dtype, shape, stats...)."""
        self._require(name)
        return self.manifest["tensors"][name]

    def alias_of(self, name: str) -> str | None:
        """The captured tensor whose very bytes this one holds (stored once), or None.

        A consumer may reuse what it computed for that tensor; reading this one works as for
        any tensor (its file is a hard link to the other's, or a copy of it).
        """
        return self.record(name).get("alias_of")

    def tensor(self, name: str) -> np.ndarray:
        """The tensor's values, memory-mapped read-only where possible.

        bfloat16 and the other ml_dtypes types come back widened (bfloat16 -> float32 exactly),
        so callers only ever see plain numpy dtypes; strings come back as a bytes (``S``) array.
        """
        record = self.record(name)
        owner = record.get("alias_of") or name  # an alias holds its tensor's very values
        return widen(self._stored(owner), record["dtype"])

    def stream(self, name: str) -> TensorStream | None:
        """A packed tensor's values chunk by chunk, for a reader that reads it once (compare):
        holds one decoded chunk at a time, never the tensor (None for tensors not packed)."""
        record = self.record(name)
        owner = record.get("alias_of") or name
        stored = self.manifest["tensors"][owner]
        encoding = stored.get("encoding")
        if encoding is None or stored.get("values") == "artifact":
            return None
        if self._chunk_cache is None:
            self._chunk_cache = ChunkCache(self.manifest["tensors"])
        cache, dtype_name = self._chunk_cache, record["dtype"]

        def chunks() -> Iterator[np.ndarray]:
            cache.reading(owner)
            stored_dtype = np.dtype(stored["stored_dtype"])
            try:
                for r0, r1, rows in iter_packed(self._files[owner], stored, encoding, stored_dtype, self._input_rows):
                    cache.put(owner, r0, r1, rows)
                    yield widen(rows, dtype_name).reshape(-1)
                    del rows  # not held while the next chunk is decoded
            except ValueError as exc:
                raise damaged(self.path, f"tensor {owner!r}: {exc}") from exc

        dtype = widen(np.zeros(0, np.dtype(stored["stored_dtype"])), dtype_name).dtype
        return TensorStream(tuple(record["shape"]), dtype, chunks, lambda: self.tensor(name))

    def forget(self) -> None:
        """Let go of every decoded value held for later reads (before a pass that streams them)."""
        self._decoded.clear()
        if self._chunk_cache is not None:
            self._chunk_cache.clear()

    def digest(self, name: str, compute: bool = False) -> str | None:
        """The sha256 of a tensor kept only by digest (its values left in the artifact); for a
        stored tensor None, or with ``compute`` the same digest of its stored values."""
        record = self.record(name)
        owner = record.get("alias_of") or name
        found = self.manifest["tensors"][owner].get("digest")
        return digest(self._stored(owner)) if found is None and compute else found

    def values_digest(self, name: str) -> str | None:
        """The digest format 2 takes of a packed tensor's values as it writes them (None for
        others): two tensors with equal ones are bitwise identical, so compare reads neither."""
        record = self.record(name)
        found = self.manifest["tensors"][record.get("alias_of") or name].get("values_digest")
        return found if isinstance(found, str) and found.startswith("sha256:") else None

    def _stored(self, name: str) -> np.ndarray:
        """A tensor's stored values: mapped ``.npy``, decoded packed chunks, or read from the artifact."""
        record = self.manifest["tensors"][name]
        if record.get("values") == "artifact":
            if name not in self._from_artifact:
                self._from_artifact.update(artifact_values(self, name))
            return self._from_artifact[name]
        stored_dtype = np.dtype(record["stored_dtype"])
        encoding = record.get("encoding")
        if encoding is None:
            return open_npy(self._files[name], tuple(record["shape"]), stored_dtype)
        if name in self._decoded:
            self._decoded.move_to_end(name)
            return self._decoded[name]
        self._make_room(int(record["size_bytes"]), (encoding.get("predict") or {}).get("inputs", []))
        try:
            value = read_packed(self._files[name], record, encoding, stored_dtype, self._input_rows)
        except ValueError as exc:
            raise damaged(self.path, f"tensor {name!r}: {exc}") from exc
        self._decoded[name] = value
        return value

    def _make_room(self, nbytes: int, inputs: list[str]) -> None:
        """Before decoding ``nbytes``: let go of the tensors decoded lately, oldest first, until
        they and it fit DECODED_CACHE_BYTES; the new tensor's own inputs are kept (it reads them)
        while they fit too. So a read holds its result and small inputs, never a capture."""
        keep = {self.manifest["tensors"][n].get("alias_of") or n for n in inputs if n in self.manifest["tensors"]}
        if sum(self._decoded[n].nbytes for n in keep if n in self._decoded) > DECODED_CACHE_BYTES:
            keep = set()  # large inputs are read again chunk by chunk: a read holds one large tensor, its own
        for name in list(self._decoded):
            if sum(v.nbytes for v in self._decoded.values()) + nbytes <= DECODED_CACHE_BYTES:
                return
            if name not in keep:
                del self._decoded[name]

    def _input_rows(self, name: str, r0: int | None, r1: int | None) -> np.ndarray:
        """Rows ``[r0, r1)`` of a prediction's input (all of a non-batch-major one): from a tensor
        decoded lately, else decoding only the chunks that hold them (never a whole input)."""
        record = self.manifest["tensors"][name]
        owner = record.get("alias_of") or name
        if r0 is None or not record["batch_major"] or owner in self._decoded:
            value = self._stored(owner)
            return value[r0:r1] if r0 is not None and record["batch_major"] else value
        record = self.manifest["tensors"][owner]
        encoding = record.get("encoding")
        if encoding is None:
            return open_npy(self._files[owner], tuple(record["shape"]), np.dtype(record["stored_dtype"]))[r0:r1]
        cached = self._chunk_cache.get(owner, r0, r1) if self._chunk_cache is not None else None
        if cached is not None:
            return cached
        value = read_packed(self._files[owner], record, encoding, np.dtype(record["stored_dtype"]), self._input_rows,
                            rows=(r0, r1))
        if self._chunk_cache is not None:
            self._chunk_cache.put(owner, r0, r1, value)
        return value

    def plain_output(self, key: str) -> np.ndarray | None:
        """Signature output ``key`` as the plain run computed it (only the signature outputs
        fetched, as in production), or None when the capture did not store it (made before
        tftrace kept them, or not storable). Widened as :meth:`tensor`."""
        record = (self.manifest.get("plain_outputs") or {}).get(key)
        if record is None:
            return None
        stored = open_npy(self._plain_files[key], tuple(record["shape"]), np.dtype(record["stored_dtype"]))
        return widen(stored, record["dtype"])

    def _require(self, name: str) -> None:
        if name in self.manifest["tensors"]:
            return
        reason = self.manifest["uncaptured"].get(name)
        if reason is not None:
            raise TftraceError(f"tensor {name!r} was not captured in {self.path}: {reason}", "compare another tensor")
        raise TftraceError(f"no tensor {name!r} in the capture at {self.path}", "list names with Capture.tensor_names")

    def __repr__(self) -> str:
        return f"Capture({str(self.path)!r}, {len(self.manifest['tensors'])} tensors)"


def _validate_manifest(root: Path, manifest: Any) -> dict[str, Path]:
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
    for key in ("tensors", "uncaptured", "spec", "environment", "plain_outputs"):
        if not isinstance(manifest.get(key, {}), dict):
            raise damaged(root, f'"{key}" is not a JSON object')
    for key in ("tensors", "uncaptured", "plain_outputs"):
        manifest.setdefault(key, {})
    if any("alias_of" in rec for rec in manifest["plain_outputs"].values() if isinstance(rec, dict)):
        raise damaged(root, "a plain output claims alias_of: plain outputs are stored as files of their own")
    if not all(isinstance(r, str) for r in manifest["uncaptured"].values()):
        raise damaged(root, "an uncaptured reason is not a string")
    _validate_parts(root, manifest)
    tensors_dir = root.resolve() / TENSORS
    files = {name: _validate_record(root, tensors_dir, name, rec, version) for name, rec in manifest["tensors"].items()}
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


def _validate_record(root: Path, tensors_dir: Path, name: str, rec: Any, version: int = 1) -> Path | None:
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
    try:
        resolved = (root / file).resolve(strict=True)
    except OSError as exc:
        raise bad(f"file {file} is missing ({exc.strerror})") from exc
    if resolved.parent != tensors_dir or not resolved.is_file():
        raise bad(f"file {file} resolves to {resolved}, outside {TENSORS}/")
    if encoding is not None:
        validate_chunks(bad, encoding, shape, rec.get("batch_major"), int(match[2]), resolved.stat().st_size)
    elif suffix == ".npy" and resolved.stat().st_size < declared:
        raise bad(f"file {file} is smaller than the {declared} bytes its record declares")
    return resolved


# --------------------------------------------------------------------------- the other parts


# The JSON types of the manifest's other parts, where present: a dict describes an object's keys
# (recursively), a type or tuple of types is checked with isinstance. Keys not listed are free.
PARTS: dict[str, Any] = {
    "spec": {"artifact": {"path": str, "tag": str, "signature": str, "outputs": list, "input_names": list},
             "device": str, "knobs": {"env": (dict, list), "grappler": (dict, list), "threads": (list, type(None))},
             "inputs": dict, "allow_unsafe_ops": bool},
    "artifact": {"kind": str, "location": str, "inlined_by_loader": bool},
    "signature": {"inputs": dict, "outputs": dict},
    "graph": {"inputs": dict, "outputs": dict, "nodes": list},
    "examples": {"count": int, "batch_major": bool, "source": str},
    "tensor_layout": dict,
    "observer_effect": {"outputs_identical": bool, "outputs_max_abs_diff": dict, "executed_ops": dict,
                        "only_in_plain": list, "only_in_instrumented": list, "stateful_ops": list,
                        "executed_nodes_plain": dict, "executed_nodes_instrumented": dict},
    "timings": {"plain_latency_ms": dict},
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
    try:
        cycle = nx.find_cycle(g)
    except nx.NetworkXNoCycle:
        return
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


def _is_list_of(value: Any, kind: type) -> bool:
    return isinstance(value, list) and all(isinstance(v, kind) for v in value)
