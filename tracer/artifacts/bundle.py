"""A TensorFlow checkpoint's tensors read without TensorFlow (the V2 "tensor bundle" format).

Why: a capture keeps a large restored weight only by digest, and a compare that needs the values
(or checks a received capture's digest) read them back in a TensorFlow child process, most of
whose seconds were TensorFlow's import (5 of a ResNet-50 compare's 17). The format is simple
enough to read directly:

- ``PREFIX.index`` is a sorted string table (TensorFlow's copy of LevelDB's table format: data
  blocks of prefix-compressed keys, each stored plain or snappy-compressed, an index block, a
  48-byte footer ending in a magic number).
  Its ``""`` key holds a ``BundleHeaderProto``, every other key a tensor's ``BundleEntryProto``
  (dtype, shape, shard, offset, size, crc32c).
- ``PREFIX.data-SSSSS-of-NNNNN`` hold the tensors' raw little-endian bytes at those offsets.

What this module does not read is refused with :class:`NotReadableHere` saying why (a partitioned
variable's slices, strings, a dtype numpy lacks, a V1 checkpoint with no ``.index``); the caller
then reads it the old way, in TensorFlow. Every length and offset comes from a file that may be
hostile: each is checked against what holds it (a snappy block's declared length too, before
anything is allocated for it), and a tensor's bytes are checked against the crc32c its entry
records, as TensorFlow's reader does.
"""

from __future__ import annotations

import functools
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import snappy

__all__ = ["NotReadableHere", "BundleEntry", "Bundle", "crc32c", "masked", "table_entries"]

TABLE_MAGIC = 0xDB4775248B80FB57
FOOTER_BYTES = 48
BLOCK_TRAILER_BYTES = 5  # one byte of compression type, four of masked crc32c
NO_COMPRESSION = 0
SNAPPY_COMPRESSION = 1  # tensorflow/core/lib/io/format.h kSnappyCompression: decompressed here (snappy.py)
PIECE_BYTES = 1 << 20  # a tensor's bytes are read and checksummed this many at a time
MAX_INDEX_BYTES = 256 << 20  # a ResNet's index is 20 KB; a larger one is left to TensorFlow, not read into memory

# TensorFlow's DataType enum -> numpy, for the types whose bytes are numpy's (no strings,
# resources, variants, quantized or ml_dtypes types: those are read by TensorFlow)
DTYPES: dict[int, np.dtype] = {
    1: np.dtype("<f4"), 2: np.dtype("<f8"), 3: np.dtype("<i4"), 4: np.dtype("u1"), 5: np.dtype("<i2"),
    6: np.dtype("i1"), 8: np.dtype("<c8"), 9: np.dtype("<i8"), 10: np.dtype("?"), 17: np.dtype("<u2"),
    18: np.dtype("<c16"), 19: np.dtype("<f2"), 22: np.dtype("<u4"), 23: np.dtype("<u8"),
}


class NotReadableHere(Exception):
    """This reader cannot read it (the reason is the message); TensorFlow's may."""


@dataclass(frozen=True)
class BundleEntry:
    """Where one tensor's bytes are, as its ``BundleEntryProto`` says."""

    dtype: int
    shape: tuple[int, ...]
    shard: int
    offset: int
    size: int
    crc32c: int | None
    sliced: bool


class Bundle:
    """The index of the checkpoint at ``prefix`` (read when made) and its tensors on demand."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        index = prefix + ".index"
        if not os.path.isfile(index):
            raise NotReadableHere(f"{index} does not exist (not a V2 checkpoint here)")
        if os.path.getsize(index) > MAX_INDEX_BYTES:
            raise NotReadableHere(f"{index} is larger than {MAX_INDEX_BYTES:,} bytes")
        with open(index, "rb") as f:
            table = f.read()
        entries = dict(table_entries(table, index))
        header = entries.pop(b"", None)
        if header is None:
            raise NotReadableHere(f"{index} has no bundle header")
        fields = _fields(header, index)
        self.num_shards = _int(fields.get(1, [1])[-1])  # a field given twice: the last wins, as in protobuf
        if _int(fields.get(2, [0])[-1]) != 0:
            raise NotReadableHere(f"{index} was written big-endian")
        if self.num_shards < 1:
            raise NotReadableHere(f"{index} declares {self.num_shards} data shards")
        self.entries = {key.decode("utf-8", errors="surrogateescape"): _entry(value, index)
                        for key, value in entries.items()}

    def read(self, key: str) -> np.ndarray:
        """The tensor ``key`` as TensorFlow's checkpoint reader returns it (a fresh array)."""
        entry, dtype, _ = self._locate(key)
        out = np.empty(entry.shape, dtype)
        flat = out.reshape(-1).view(np.uint8)
        at = 0
        for piece in self.pieces(key):
            flat[at : at + piece.size] = piece
            at += piece.size
        return out

    def describe(self, key: str) -> tuple[np.dtype, tuple[int, ...]]:
        """The dtype and shape :meth:`read` gives tensor ``key`` (NotReadableHere when it cannot)."""
        entry, dtype, _ = self._locate(key)
        return dtype, entry.shape

    def pieces(self, key: str, piece_bytes: int = PIECE_BYTES) -> Iterator[np.ndarray]:
        """The bytes of tensor ``key`` (C order) as consecutive uint8 arrays of at most
        ``piece_bytes``, each valid until the next is asked for (one buffer, read into again: a
        digest of a large tensor holds a megabyte of it, and no large block is allocated and
        freed per piece, which would leave the allocator holding pages). The checksum is checked
        before the last piece is handed out."""
        entry, _, path = self._locate(key)
        buffer = np.empty(min(piece_bytes, entry.size), np.uint8)
        crc, at = 0, 0
        try:
            with open(path, "rb") as f:
                f.seek(entry.offset)
                while at < entry.size or at == entry.size == 0:
                    piece = buffer[: min(piece_bytes, entry.size - at)]
                    got = f.readinto(memoryview(piece)) if piece.size else 0
                    if got != piece.size:
                        raise NotReadableHere(f"{path} ends before {key!r}'s {entry.size} bytes at offset {entry.offset}")
                    crc, at = crc32c(piece, crc), at + piece.size
                    if at == entry.size and entry.crc32c is not None and masked(crc) != entry.crc32c:
                        raise NotReadableHere(f"{key!r}: its bytes in {path} do not match the checksum its entry records")
                    yield piece
                    if at == entry.size:
                        return
        except OSError as exc:
            raise NotReadableHere(f"{path}: {exc.strerror or exc}") from exc

    def _locate(self, key: str) -> tuple[BundleEntry, np.dtype, str]:
        """The entry of ``key``, its numpy dtype and its data file, once its entry is checked."""
        entry = self.entries.get(key)
        if entry is None:
            raise NotReadableHere(f"{self.prefix} holds no tensor {key!r}")
        if entry.sliced:
            raise NotReadableHere(f"{key!r} is saved as slices of a partitioned variable")
        dtype = DTYPES.get(entry.dtype)
        if dtype is None:
            raise NotReadableHere(f"{key!r} has TensorFlow dtype {entry.dtype}, which this reader leaves to TensorFlow")
        count = int(np.prod(entry.shape, dtype=object))
        if count * dtype.itemsize != entry.size or entry.offset < 0:
            raise NotReadableHere(f"{key!r}: its entry says {entry.size} bytes at offset {entry.offset} for shape "
                                  f"{list(entry.shape)}")
        if not 0 <= entry.shard < self.num_shards:
            raise NotReadableHere(f"{key!r}: its entry names data shard {entry.shard} of {self.num_shards}")
        path = f"{self.prefix}.data-{entry.shard:05d}-of-{self.num_shards:05d}"
        try:
            held = os.path.getsize(path)
        except OSError as exc:
            raise NotReadableHere(f"{path}: {exc.strerror or exc}") from exc
        if entry.offset + entry.size > held:  # checked before anything is allocated for it
            raise NotReadableHere(f"{path} ends before {key!r}'s {entry.size} bytes at offset {entry.offset}")
        return entry, dtype, path


# --------------------------------------------------------------------------- the table format


def _varint(buf: bytes, pos: int, end: int, where: str) -> tuple[int, int]:
    try:
        return snappy.read_varint(buf, pos, end)
    except ValueError as exc:
        raise NotReadableHere(f"{where}: {exc}") from None


def _block(table: bytes, offset: int, size: int, where: str) -> bytes:
    """A block's contents, its trailer checked (the crc32c of the stored bytes and the type) and,
    where its type says snappy (TensorFlow's table format allows it; TensorFlow 1.1 wrote them),
    decompressed."""
    if offset < 0 or size < 1 or offset + size + BLOCK_TRAILER_BYTES > len(table):
        raise NotReadableHere(f"{where}: a block lies outside the file")
    kind = table[offset + size]
    if kind not in (NO_COMPRESSION, SNAPPY_COMPRESSION):
        raise NotReadableHere(f"{where}: a block of type {kind}, which TensorFlow's table format does not have")
    stored = struct.unpack_from("<I", table, offset + size + 1)[0]
    if masked(crc32c(table[offset : offset + size + 1])) != stored:
        raise NotReadableHere(f"{where}: a block's checksum does not match")
    if kind == NO_COMPRESSION:
        return table[offset : offset + size]
    try:
        return snappy.decompress(table[offset : offset + size], MAX_INDEX_BYTES)
    except ValueError as exc:
        raise NotReadableHere(f"{where}: a snappy-compressed block is malformed ({exc})") from exc


def _block_entries(block: bytes, where: str) -> list[tuple[bytes, bytes]]:
    """A block's ``(key, value)`` pairs: each key shares a prefix with the one before it."""
    if len(block) < 4:
        raise NotReadableHere(f"{where}: a block is too short for its restart array")
    restarts = struct.unpack_from("<I", block, len(block) - 4)[0]
    limit = len(block) - 4 - 4 * restarts
    if restarts > len(block) // 4 or limit < 0:
        raise NotReadableHere(f"{where}: a block's restart array is malformed")
    out, key, pos = [], b"", 0
    while pos < limit:
        shared, pos = _varint(block, pos, limit, where)
        fresh, pos = _varint(block, pos, limit, where)
        length, pos = _varint(block, pos, limit, where)
        if shared > len(key) or pos + fresh + length > limit:
            raise NotReadableHere(f"{where}: a block entry is malformed")
        key = key[:shared] + block[pos : pos + fresh]
        pos += fresh
        out.append((key, block[pos : pos + length]))
        pos += length
    return out


def table_entries(table: bytes, where: str) -> list[tuple[bytes, bytes]]:
    """Every ``(key, value)`` of a table file, in key order."""
    if len(table) < FOOTER_BYTES or struct.unpack_from("<Q", table, len(table) - 8)[0] != TABLE_MAGIC:
        raise NotReadableHere(f"{where} is not a checkpoint index (no table footer)")
    footer_end = len(table) - 8
    pos = len(table) - FOOTER_BYTES
    _, pos = _varint(table, pos, footer_end, where)  # the metaindex block: empty in a bundle
    _, pos = _varint(table, pos, footer_end, where)
    index_offset, pos = _varint(table, pos, footer_end, where)
    index_size, pos = _varint(table, pos, footer_end, where)
    out = []
    for _, handle in _block_entries(_block(table, index_offset, index_size, where), where):
        offset, at = _varint(handle, 0, len(handle), where)
        size, _ = _varint(handle, at, len(handle), where)
        out.extend(_block_entries(_block(table, offset, size, where), where))
    return out


# --------------------------------------------------------------------------- the protos, by field number


def _fields(message: bytes, where: str) -> dict[int, list[int | bytes]]:
    """A protobuf message's fields: number -> values (varints and fixed as ints, the rest as bytes)."""
    out: dict[int, list[int | bytes]] = {}
    pos, end = 0, len(message)
    while pos < end:
        tag, pos = _varint(message, pos, end, where)
        number, wire = tag >> 3, tag & 7
        value: int | bytes
        if wire == 0:
            value, pos = _varint(message, pos, end, where)
        elif wire == 1 or wire == 5:
            width = 8 if wire == 1 else 4
            if pos + width > end:
                raise NotReadableHere(f"{where}: a truncated field")
            value = int.from_bytes(message[pos : pos + width], "little")
            pos += width
        elif wire == 2:
            length, pos = _varint(message, pos, end, where)
            if pos + length > end:
                raise NotReadableHere(f"{where}: a truncated field")
            value, pos = message[pos : pos + length], pos + length
        else:
            raise NotReadableHere(f"{where}: a field of wire type {wire}")
        out.setdefault(number, []).append(value)
    return out


def _int(value: int | bytes) -> int:
    if not isinstance(value, int):
        raise NotReadableHere("a field holds bytes where a number belongs")
    return value - (1 << 64) if value >= 1 << 63 else value


def _entry(value: bytes, where: str) -> BundleEntry:
    """A ``BundleEntryProto``: dtype 1, shape 2, shard_id 3, offset 4, size 5, crc32c 6, slices 7."""
    fields = _fields(value, where)
    shape: list[int] = []
    for raw in fields.get(2, []):
        if not isinstance(raw, bytes):
            raise NotReadableHere(f"{where}: a shape is not a message")
        dims = _fields(raw, where)
        if dims.get(3) and _int(dims[3][-1]):
            raise NotReadableHere(f"{where}: a tensor of unknown rank")
        for dim in dims.get(2, []):
            if not isinstance(dim, bytes):
                raise NotReadableHere(f"{where}: a dimension is not a message")
            size = _int(_fields(dim, where).get(1, [0])[-1])
            if size < 0:
                raise NotReadableHere(f"{where}: a dimension of size {size}")
            shape.append(size)
    crc = fields.get(6)
    return BundleEntry(
        dtype=_int(fields.get(1, [0])[-1]), shape=tuple(shape), shard=_int(fields.get(3, [0])[-1]),
        offset=_int(fields.get(4, [0])[-1]), size=_int(fields.get(5, [0])[-1]),
        crc32c=None if crc is None else _int(crc[-1]), sliced=bool(fields.get(7)),
    )


# --------------------------------------------------------------------------- crc32c (Castagnoli)


def _tables() -> np.ndarray:
    """Slicing-by-8 tables of the reflected Castagnoli polynomial."""
    table = np.zeros((8, 256), np.uint32)
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table[0, n] = c
    for k in range(1, 8):
        for n in range(256):
            prev = int(table[k - 1, n])
            table[k, n] = (prev >> 8) ^ int(table[0, prev & 0xFF])
    return table


_TABLES = _tables()


def _crc_loop(data, t, crc):  # noqa: ANN001, ANN202 - numba types
    n = data.size
    i = 0
    while i + 8 <= n:
        lo = crc ^ (np.uint32(data[i]) | (np.uint32(data[i + 1]) << 8) | (np.uint32(data[i + 2]) << 16)
                    | (np.uint32(data[i + 3]) << 24))
        crc = (t[7, lo & 0xFF] ^ t[6, (lo >> 8) & 0xFF] ^ t[5, (lo >> 16) & 0xFF] ^ t[4, lo >> 24]
               ^ t[3, data[i + 4]] ^ t[2, data[i + 5]] ^ t[1, data[i + 6]] ^ t[0, data[i + 7]])
        i += 8
    while i < n:
        crc = (crc >> 8) ^ t[0, (crc ^ data[i]) & 0xFF]
        i += 1
    return crc


def crc32c(data: bytes | np.ndarray, value: int = 0) -> int:
    """The CRC-32C of ``data`` (what TensorFlow's checkpoints record, masked), continuing the
    CRC-32C ``value`` of the bytes before it: ``crc32c(b, crc32c(a)) == crc32c(a + b)``."""
    return int(_crc()(np.frombuffer(data, np.uint8), _TABLES, np.uint32(value ^ 0xFFFFFFFF))) ^ 0xFFFFFFFF


@functools.cache
def _crc() -> Any:
    """:func:`_crc_loop` compiled, on first use: a reader that never reads a checkpoint (a report's
    re-render) never imports numba."""
    from ..jit import compiled  # noqa: PLC0415

    return compiled(_crc_loop)


def masked(crc: int) -> int:
    """LevelDB's masked form of a crc (stored so that a crc of data holding crcs is not degenerate)."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
