"""Reading capture directories, which are untrusted input (format 1 and 2).

Captures come from elsewhere (a colleague, a CI artifact), so the manifest is checked (by
:mod:`._checks`) before anything is trusted: file paths must stay inside ``tensors/``, shapes
and dtypes must be sane and agree with each ``.npy`` header before anything is allocated or
memory-mapped, and a directory without ``manifest.json`` (an interrupted capture) is refused
outright. A tensor stored once for two names (``alias_of``) must name a real tensor of the same
layout. The other parts compare reads (the op graph, the examples, the runs) are type-checked
too, and a key that is missing where a reader needs it raises the same "damaged capture" error,
so a hand-made manifest never surfaces as a crash deep inside the comparison.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import TftraceError
from ..jsonvalues import loads
from ..opgraph import OpGraph
from ._format import (
    APART,
    MANIFEST,
    RERUN,
    TENSORS,
    damaged,
    open_npy,
    widen,
    widens,
)
from ._packed import digest
from ._packing import VALUES_DIGEST, RowsCheck, RowsDigest
from ._stream import ChunkCache, DecodedValues, InStep, TensorStream, pieces_in_step
from ._unpack import iter_packed, read_packed
from ._values import ArtifactReads
from ._checks import validate_manifest, validate_record
from .inputs import run_batch_size
from .views import ExamplesRecord, ObserverEffect, Timings

__all__ = ["Capture", "MissingKey", "is_capture_dir"]

MAX_MANIFEST_BYTES = 1 << 30  # a real manifest of a 10,000-op model is a few MB
DEFAULT_READ_MEMORY = 2 << 30  # a side's default --max-memory
DECODED_CACHE_BYTES = 16 << 20  # packed tensors decoded lately: the predicted tensors read next need them


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
                 apart_files: dict[str, dict[str, Path]] | None = None, received: bool = True,
                 max_memory: int | None = None) -> None:
        self.path = path
        # what one decode may inflate (--max-memory): checked against the declared sizes before a
        # chunk is decompressed, so a few KB of zstd declaring a GiB is refused, not inflated
        self.max_memory = DEFAULT_READ_MEMORY if max_memory is None else max_memory
        # a capture this run did not write (a directory given on the command line may come from
        # anyone): the digests its manifest claims are checked against its stored bytes before use
        self.received = received
        self.manifest = manifest
        self._files = files
        self._apart_files = apart_files or {}  # per group of APART (plain outputs, loaded values): key -> file
        self._decoded = DecodedValues(DECODED_CACHE_BYTES)
        # where its digest-kept values come from; a compare shares one between its sides
        self.artifact_reads = ArtifactReads([self])
        self._chunk_cache: ChunkCache | None = None  # made on the first stream

    @classmethod
    def open(cls, path: str | Path, received: bool = True, max_memory: int | None = None) -> Capture:
        """Open and validate a capture directory; refuses incomplete or damaged ones.

        ``received``: False only for a capture this very run's child wrote (see :attr:`received`);
        ``max_memory``: the most one decode may inflate (--max-memory; default that of a side)."""
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
        files = validate_manifest(root, manifest)
        apart = {group: {key: validate_record(root, root.resolve() / TENSORS, f"{what} {key}", rec)
                         for key, rec in manifest.get(group, {}).items()} for group, what in APART.items()}
        return cls(root, manifest, files, apart, received, max_memory)

    @property
    def spec(self) -> dict[str, Any]:
        """The run spec of this side ({} for manifests that predate it)."""
        return self.manifest.get("spec") or {}

    @property
    def environment(self) -> dict[str, Any]:
        """The environment fingerprint of the process that captured this side."""
        return self.manifest.get("environment") or {}

    @property
    def artifact(self) -> dict[str, Any]:
        """What this side loaded: its kind, location and how the loader read it ({} for old manifests)."""
        return dict(self.manifest.get("artifact") or {})

    @functools.cached_property
    def op_graph(self) -> OpGraph:
        """The inference op graph this side ran, parsed once per capture."""
        return OpGraph.from_json(self.manifest["graph"])

    @property
    def tensor_layout(self) -> dict[str, str]:
        """How a tensor's rows relate to the examples, where not one row per example (by tensor name)."""
        return dict(self.manifest.get("tensor_layout") or {})

    @property
    def observer(self) -> ObserverEffect:
        """How this side's instrumented run compared with its plain run (every capture that
        ``tftrace capture`` writes records it; see :attr:`recorded_observer` for the others)."""
        return ObserverEffect.from_json(self.manifest["observer_effect"])

    @property
    def recorded_observer(self) -> ObserverEffect | None:
        """:attr:`observer`, or None for a capture that recorded none (an isolation slice)."""
        return self.observer if "observer_effect" in self.manifest else None

    @property
    def timings(self) -> Timings:
        """What this side's capture measured of its own runs."""
        return Timings.from_json(self.manifest["timings"])

    @property
    def batch_size(self) -> int | None:
        """The batch that ran (the rows of one run; :func:`run_batch_size`), None when nothing ran."""
        return run_batch_size(self.manifest) or None

    @property
    def examples(self) -> ExamplesRecord:
        """What this capture recorded of the examples its side ran."""
        return ExamplesRecord.from_json(self.manifest["examples"])

    @property
    def inputs(self) -> dict[str, str]:
        """The signature's inputs: input key -> the tensor this side feeds."""
        return dict(self.manifest["graph"]["inputs"])

    @property
    def runs(self) -> list[tuple[int, int]]:
        """The example ranges of this side's runs, one per ``session.run``: [start, stop)."""
        return [(int(start), int(stop)) for start, stop in self.manifest["runs"]]

    @property
    def outputs(self) -> dict[str, str]:
        """The signature's outputs: output key -> the tensor this side computes it as."""
        return dict(self.manifest["graph"]["outputs"])

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

    def stored_file(self, name: str) -> Path:
        """The file that holds a captured tensor's values as stored (``.npy``, or packed chunks at
        the offsets its record's ``encoding`` lists), for a reader of the bytes themselves."""
        self._require(name)
        return self._files[name]

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
        self._within_budget(owner, _largest_chunk(stored, encoding), "one chunk of it")
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
        return TensorStream(tuple(record["shape"]), dtype, chunks)

    def chunk_spans(self, name: str) -> tuple[tuple[int, int], ...] | None:
        """The rows of each chunk of a packed batch-major tensor, in order (None for any other):
        tensors with the same spans can be read in step (:meth:`in_step`)."""
        owner = self.record(name).get("alias_of") or name
        stored = self.manifest["tensors"][owner]
        encoding = stored.get("encoding")
        if encoding is None or stored.get("values") == "artifact" or not stored["batch_major"]:
            return None
        return tuple((c[0], c[1]) for c in sorted(encoding["chunks"]))

    def in_step(self, names: list[str], steps: list[tuple[int, int]]) -> Iterator[np.ndarray]:
        """Rows ``steps[t]`` of each of ``names`` in turn, for t = 0, 1, ... (flat pieces, widened as
        :meth:`tensor`), each chunk decoded once (:func:`~tracer.captures._stream.pieces_in_step`):
        what compare reads for a run of pairs whose tensors share their :meth:`chunk_spans` on
        each side, in the steps both sides' chunks allow (:func:`~tracer.captures._stream.common_steps`)."""
        members = []
        for name in names:
            record = self.record(name)
            owner = record.get("alias_of") or name
            stored = self.manifest["tensors"][owner]
            self._within_budget(owner, _largest_chunk(stored, stored["encoding"]), "one chunk of it")
            members.append(InStep(owner, self._files[owner], stored, stored["encoding"], record["dtype"]))
        if self._chunk_cache is None:
            self._chunk_cache = ChunkCache(self.manifest["tensors"])
        self._chunk_cache.reading(members[0].owner)
        tensors = self.manifest["tensors"]
        try:
            yield from pieces_in_step(members, steps, self._input_rows, self._chunk_cache,
                                      lambda name: (tensors.get(name) or {}).get("alias_of") or name)
        except ValueError as exc:
            raise damaged(self.path, f"tensors {', '.join(repr(m.owner) for m in members)}: {exc}") from exc

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
        owner = record.get("alias_of") or name
        found = self.manifest["tensors"][owner].get("values_digest")
        if not (isinstance(found, str) and found.startswith(("sha256:", VALUES_DIGEST))):
            return None
        if self.received and not found.startswith(VALUES_DIGEST):
            return None  # the first format-2 release's sha256 kind, from elsewhere: read, not trusted
        return found

    def bear_out(self, name: str, rows_checked: bool = False) -> None:
        """Check the digests a received capture claims for a tensor against what they name, before
        an equal pair of them decides that two tensors are identical (nothing to check in a capture
        this run wrote): a packed tensor's ``values_digest`` against its stored bytes, a digest kept
        instead of the values against the values its artifact holds, where that is here (else the
        recorded digest is all there is). Raises the "damaged capture" error when one is false.
        ``rows_checked``: the values digest is checked elsewhere, as the rows are read
        (:meth:`rows_check`)."""
        if not self.received:
            return
        owner = self.record(name).get("alias_of") or name
        record = self.manifest["tensors"][owner]
        claimed = self.values_digest(name)
        if claimed is not None and not rows_checked:
            self._confirm(owner, claimed, self._rows_digest(owner))
        kept = record.get("digest")
        if kept is not None:
            actual = self.artifact_reads.held_digest(self, owner)
            if actual is None:
                return  # the artifact is not here: the recorded digest is the only evidence
            if actual != kept:
                raise damaged(self.path, f"tensor {owner!r}: its digest {str(kept)[:30]}... is not the digest of the "
                                         f"values its artifact holds ({actual[:30]}...)")

    def rows_check(self, name: str) -> RowsCheck | None:
        """The check of a received packed tensor's ``values_digest``, fed its stored values as a
        reader of them comes by them (:meth:`in_step`'s pieces, which are the stored values where
        its dtype is not widened); None where there is nothing to check so (a capture this run
        wrote, no claim, a widened dtype, a tensor that is not batch-major)."""
        record = self.record(name)
        owner = record.get("alias_of") or name
        stored = self.manifest["tensors"][owner]
        claimed = self.values_digest(name)
        widened = widens(record["dtype"])
        if not self.received or claimed is None or widened or not stored["batch_major"] or stored.get("encoding") is None:
            return None
        digest = RowsDigest(np.dtype(stored["stored_dtype"]), list(stored["shape"]), True)
        return RowsCheck(digest, lambda: self._confirm(owner, claimed, digest.hexdigest()),
                         int(np.prod(stored["shape"][1:], dtype=object)))

    def _confirm(self, owner: str, claimed: str, actual: str) -> None:
        if actual != claimed:
            raise damaged(self.path, f"tensor {owner!r}: its values_digest {claimed[:30]}... is not the digest "
                                     f"of its stored values ({actual[:30]}...)")

    def _rows_digest(self, owner: str) -> str:
        """The values digest of a packed tensor, taken of its stored bytes as the writer takes it
        (:meth:`tracer.captures._packing.PackedWrites.rows_digest`), one decoded chunk at a time."""
        stored = self.manifest["tensors"][owner]
        stored_dtype, shape = np.dtype(stored["stored_dtype"]), list(stored["shape"])
        self._within_budget(owner, _largest_chunk(stored, stored["encoding"]), "one chunk of it")
        digest = RowsDigest(stored_dtype, shape, bool(stored["batch_major"]))
        try:
            for _, _, rows in iter_packed(self._files[owner], stored, stored["encoding"], stored_dtype, self._input_rows):
                digest.add(rows)
        except ValueError as exc:
            raise damaged(self.path, f"tensor {owner!r}: {exc}") from exc
        return digest.hexdigest()

    def _stored(self, name: str) -> np.ndarray:
        """A tensor's stored values: mapped ``.npy``, decoded packed chunks, or read from the artifact."""
        record = self.manifest["tensors"][name]
        encoding = record.get("encoding")
        if record.get("values") != "artifact" and encoding is None:
            return open_npy(self._files[name], tuple(record["shape"]), np.dtype(record["stored_dtype"]))
        held = self._decoded.get(name)  # a replay asks for the same weight once per run: read and checked once
        if held is not None:
            return held
        self._within_budget(name, int(record["size_bytes"]), "it")
        self._make_room(int(record["size_bytes"]), ((encoding or {}).get("predict") or {}).get("inputs", []))
        if record.get("values") == "artifact":
            value = self.artifact_reads.value(self, name)
        else:
            try:
                value = read_packed(self._files[name], record, encoding, np.dtype(record["stored_dtype"]),
                                    self._input_rows)
            except ValueError as exc:
                raise damaged(self.path, f"tensor {name!r}: {exc}") from exc
        self._decoded.put(name, value)
        return value

    def _make_room(self, nbytes: int, inputs: list[str]) -> None:
        """Before decoding ``nbytes``: let go of the tensors decoded lately, oldest first, until
        they and it fit DECODED_CACHE_BYTES; the new tensor's own inputs are kept (it reads them)
        while they fit too. So a read holds its result and small inputs, never a capture."""
        self._decoded.make_room(nbytes, {self.manifest["tensors"][n].get("alias_of") or n
                                         for n in inputs if n in self.manifest["tensors"]})

    def _within_budget(self, name: str, nbytes: int, what: str) -> None:
        """Refuse a decode of ``nbytes`` (declared by the manifest and its chunk index) over
        ``max_memory`` before anything is inflated."""
        if nbytes > self.max_memory:
            raise TftraceError(
                f"tensor {name!r} of the capture at {self.path}: decoding {what} takes {nbytes:,} bytes, more than "
                f"--max-memory {self.max_memory:,}",
                "raise --max-memory if you trust the capture and have the memory (it was made with a larger one, "
                "or it is not what tftrace writes)",
            )

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
        return self._apart("plain_outputs", key)

    def loaded_value(self, variable: str) -> np.ndarray | None:
        """Variable op ``variable``'s value as the model loaded it, read before any run (kept for the
        variables the runs write, whose captured reads hold what the runs left), or None when the
        capture did not keep it (another variable, or made before tftrace kept them)."""
        return self._apart("loaded_values", variable)

    def _apart(self, group: str, key: str) -> np.ndarray | None:
        record = (self.manifest.get(group) or {}).get(key)
        path = (self._apart_files.get(group) or {}).get(key)
        if record is None or path is None:
            return None
        stored = open_npy(path, tuple(record["shape"]), np.dtype(record["stored_dtype"]))
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


def _largest_chunk(record: dict[str, Any], encoding: dict[str, Any]) -> int:
    """The bytes the largest chunk of a packed tensor decodes to, from its validated index."""
    shape = list(record["shape"])
    if not record["batch_major"] or not shape:
        return int(record["size_bytes"])
    row = int(np.prod(shape[1:], dtype=object)) * np.dtype(record["stored_dtype"]).itemsize
    return max((c[1] - c[0] for c in encoding["chunks"]), default=0) * row
