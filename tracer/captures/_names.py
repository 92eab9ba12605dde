"""File names of stored tensors: readable, portable, and never two tensors in one file.

Op names come from models written by others (``../../etc/passwd`` is a valid op name), so a
tensor's file name is derived from its name here and nowhere else. Never imports TensorFlow.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["safe_filename"]

_MAX_NAME = 120
_UNSAFE_RUN = re.compile(r"[^A-Za-z0-9._-]+")
_HASH_SUFFIX = re.compile(r"-[0-9a-f]{12,}$")
_WINDOWS_RESERVED = frozenset(
    ["con", "prn", "aux", "nul"] + [f"com{i}" for i in range(10)] + [f"lpt{i}" for i in range(10)]
)


def safe_filename(tensor_name: str, digest_chars: int = 12) -> str:
    """Return the ``.npy`` file name for a tensor: a readable, portable, unique name.

    Names that are already plain (lower-case ``[a-z0-9._-]``, no leading dot or dash, no ``..``)
    are kept. Anything else is sanitised and suffixed with ``-`` and a hash of the *full*
    original name, so two names that sanitise alike still differ; plain names never end in such
    a suffix (names that look like one are hashed too), so the mapping is injective, even on
    case-insensitive file systems (macOS, Windows), where ``Conv`` and ``conv`` would collide.
    """
    stem = _UNSAFE_RUN.sub("_", tensor_name)
    stem = re.sub(r"\.{2,}", "_", stem)
    stem = re.sub(r"^[.-]|\.$", "_", stem)
    plain = (
        stem == tensor_name
        and stem != ""
        and stem == stem.lower()
        and len(stem) <= _MAX_NAME
        and not _HASH_SUFFIX.search(stem)
        and stem.split(".")[0] not in _WINDOWS_RESERVED
    )
    if plain:
        return stem + ".npy"
    digest = hashlib.sha256(tensor_name.encode("utf-8", "surrogatepass")).hexdigest()[:digest_chars]
    return f"{stem[: _MAX_NAME - len(digest) - 1] or '_'}-{digest}.npy"
