"""A checkpoint's ``.index`` rewritten byte by byte with every block snappy-compressed (block type 1).

TensorFlow's table format allows it (``tensorflow/core/lib/io/format.cc``: a block's trailer is
its type, 0 plain or 1 snappy, and the masked crc32c of the stored bytes and the type), TensorFlow
1.1 wrote such tables, and every release since reads them; no Python API writes one today. The
snappy stream is made by the small compressor below (literals and copies with 1- and 2-byte
offsets, overlapping ones included, as google/snappy's ``format_description.txt`` defines them);
TensorFlow's own reader reading the result back is the proof that it is byte-exact.
"""

from __future__ import annotations

import struct

from tracer.artifacts.bundle import crc32c, masked
from tracer.artifacts.snappy import read_varint

TABLE_MAGIC = 0xDB4775248B80FB57
FOOTER = 48


def varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _literal(out: bytearray, chunk: bytes) -> None:
    if not chunk:
        return
    n = len(chunk) - 1
    if n < 60:
        out.append(n << 2)
    else:
        width = (n.bit_length() + 7) // 8
        out.append((59 + width) << 2)
        out += n.to_bytes(width, "little")
    out += chunk


def snappy_compress(data: bytes) -> bytes:
    """A raw snappy block: greedy matches of 4 bytes or more, earlier in the last 64 KiB."""
    out = bytearray(varint(len(data)))
    seen: dict[bytes, int] = {}
    pos = lit = 0
    while pos + 4 <= len(data):
        candidate = seen.get(data[pos:pos + 4])
        seen[data[pos:pos + 4]] = pos
        if candidate is None or pos - candidate >= 1 << 16:
            pos += 1
            continue
        length = 4
        while pos + length < len(data) and length < 64 and data[candidate + length] == data[pos + length]:
            length += 1
        _literal(out, data[lit:pos])
        offset = pos - candidate
        if length <= 11 and offset < 2048:
            out += bytes([1 | (length - 4) << 2 | (offset >> 8) << 5, offset & 0xFF])
        else:
            out += bytes([2 | (length - 1) << 2]) + offset.to_bytes(2, "little")
        pos = lit = pos + length
    _literal(out, data[lit:])
    return bytes(out)


def _handle(data: bytes, pos: int) -> tuple[tuple[int, int], int]:
    offset, pos = read_varint(data, pos)
    size, pos = read_varint(data, pos)
    return (offset, size), pos


def _plain_block(table: bytes, handle: tuple[int, int]) -> bytes:
    offset, size = handle
    assert table[offset + size] == 0, "the table to compress has a compressed block already"
    return table[offset:offset + size]


def _entries(block: bytes) -> list[tuple[bytes, bytes]]:
    (restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    end, pos, key, out = len(block) - 4 - 4 * restarts, 0, b"", []
    while pos < end:
        shared, pos = read_varint(block, pos)
        fresh, pos = read_varint(block, pos)
        length, pos = read_varint(block, pos)
        key = key[:shared] + block[pos:pos + fresh]
        pos += fresh
        out.append((key, block[pos:pos + length]))
        pos += length
    return out


def _block_of(entries: list[tuple[bytes, bytes]]) -> bytes:
    """A block whose every entry is a restart point (no key shares a prefix)."""
    body, restarts = bytearray(), []
    for key, value in entries:
        restarts.append(len(body))
        body += varint(0) + varint(len(key)) + varint(len(value)) + key + value
    restarts = restarts or [0]
    return bytes(body) + b"".join(struct.pack("<I", r) for r in restarts) + struct.pack("<I", len(restarts))


def compress_index(table: bytes) -> bytes:
    """The same table with its data blocks, metaindex block and index block snappy-compressed."""
    assert struct.unpack_from("<Q", table, len(table) - 8)[0] == TABLE_MAGIC
    meta, pos = _handle(table, len(table) - FOOTER)
    index, _ = _handle(table, pos)
    out = bytearray()

    def put(contents: bytes) -> tuple[int, int]:
        stored = snappy_compress(contents) + b"\x01"
        handle = (len(out), len(stored) - 1)
        out.extend(stored + struct.pack("<I", masked(crc32c(stored))))
        return handle

    moved = [(key, b"".join(map(varint, put(_plain_block(table, _handle(value, 0)[0])))))
             for key, value in _entries(_plain_block(table, index))]
    handles = put(_plain_block(table, meta)) + put(_block_of(moved))
    footer = b"".join(map(varint, handles)).ljust(FOOTER - 8, b"\0") + struct.pack("<Q", TABLE_MAGIC)
    return bytes(out + footer)
