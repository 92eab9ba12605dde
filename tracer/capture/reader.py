"""Reading capture directories, which are untrusted input.

Captures come from elsewhere (a colleague, a CI artifact), so the manifest is checked before
anything is trusted: file paths must stay inside ``tensors/``, shapes and dtypes must be sane
and agree with each ``.npy`` header before anything is allocated or memory-mapped, and a
directory without ``manifest.json`` (an interrupted capture) is refused outright.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import numpy as np

from ..errors import TftraceError
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

__all__ = ["Capture"]


class Capture:
    """A finished capture directory, validated on open; tensors are memory-mapped on request.

    Create it with :meth:`open`, which does the validation; the constructor trusts its input.
    """

    def __init__(self, path: Path, manifest: dict[str, Any], files: dict[str, Path]) -> None:
        self.path = path
        self.manifest = manifest
        self._files = files

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
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"), parse_constant=_reject_constant)
        except (ValueError, RecursionError) as exc:
            raise damaged(root, f"{MANIFEST} is not valid JSON ({exc})") from exc
        files = _validate_manifest(root, manifest)
        return cls(root, manifest, files)

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
        """Captured tensor names in write order (the worker writes in topological order)."""
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

    def tensor(self, name: str) -> np.ndarray:
        """The tensor's values, memory-mapped read-only where possible.

        bfloat16 and the other ml_dtypes types come back widened (bfloat16 -> float32 exactly),
        so callers only ever see plain numpy dtypes; strings come back as a bytes (``S``) array.
        """
        record = self.record(name)
        stored = open_npy(self._files[name], tuple(record["shape"]), np.dtype(record["stored_dtype"]))
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


def _reject_constant(token: str) -> Any:
    raise ValueError(f"{token} is not JSON")


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
    for key in ("tensors", "uncaptured", "spec", "environment"):
        if not isinstance(manifest.get(key, {}), dict):
            raise damaged(root, f'"{key}" is not a JSON object')
    for key in ("tensors", "uncaptured"):
        manifest.setdefault(key, {})
    if not all(isinstance(r, str) for r in manifest["uncaptured"].values()):
        raise damaged(root, "an uncaptured reason is not a string")
    tensors_dir = root.resolve() / TENSORS
    return {name: _validate_record(root, tensors_dir, name, rec) for name, rec in manifest["tensors"].items()}


def _validate_record(root: Path, tensors_dir: Path, name: str, rec: Any) -> Path:
    def bad(detail: str) -> TftraceError:
        return damaged(root, f"tensor {name!r}: {detail}")

    if not isinstance(rec, dict):
        raise bad("its record is not a JSON object")
    file = rec.get("file")
    if not isinstance(file, str):
        raise bad("its record has no file path")
    posix = PurePosixPath(file)
    if posix.is_absolute() or PureWindowsPath(file).is_absolute() or PureWindowsPath(file).drive:
        raise bad(f"file path {file!r} is absolute")
    if ".." in posix.parts or "\\" in file:
        raise bad(f"file path {file!r} contains '..' or a backslash")
    if len(posix.parts) != 2 or posix.parts[0] != TENSORS or not posix.name.endswith(".npy"):
        raise bad(f"file path {file!r} is not {TENSORS}/<name>.npy")
    dtype_name, stored = rec.get("dtype"), rec.get("stored_dtype")
    if dtype_name not in NATIVE and dtype_name not in EXTENDED and dtype_name != STRING:
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
    try:
        resolved = (root / file).resolve(strict=True)
    except OSError as exc:
        raise bad(f"file {file} is missing ({exc.strerror})") from exc
    if resolved.parent != tensors_dir or not resolved.is_file():
        raise bad(f"file {file} resolves to {resolved}, outside {TENSORS}/")
    if resolved.stat().st_size < declared:
        raise bad(f"file {file} is smaller than the {declared} bytes its record declares")
    return resolved
