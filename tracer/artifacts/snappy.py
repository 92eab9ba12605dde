"""Snappy's raw block format, decompressed in pure Python (no python-snappy needed).

Why: a TensorFlow table (a checkpoint's ``.index``) may store a block snappy-compressed (block
type 1, ``tensorflow/core/lib/io/format.cc``; TensorFlow 1.1 wrote them, and every release since
reads them). Those blocks are small (the index of a ResNet is 20 KB) and the format is a few
rules (google/snappy's ``format_description.txt``), so they are read here rather than by a
dependency that is often not installed.

The bytes may be hostile: the declared length is checked against a limit before anything is
allocated, every literal and copy against the bytes that hold it and the length left, and the
result against the declared length. Anything else is a ``ValueError``.
"""

from __future__ import annotations

__all__ = ["decompress", "read_varint"]

MAX_EXPANSION = 24  # a 3-byte copy of 64 bytes is snappy's best ratio (~21:1); more is no snappy stream


def decompress(data: bytes, limit: int) -> bytes:
    """The bytes a raw snappy block holds; ValueError when it is malformed or would exceed ``limit``."""
    length, pos = read_varint(data, 0, bits=32, what="snappy length")  # the preamble: a 32-bit length
    if length > limit or length > MAX_EXPANSION * len(data) + 64:
        raise ValueError(f"a snappy block declares {length:,} bytes")
    out = bytearray()
    end = len(data)
    while pos < end:
        tag = data[pos]
        pos += 1
        kind = tag & 3
        if kind == 0:  # literal: its length - 1 in the tag, or in the 1-4 bytes after it
            size = tag >> 2
            if size >= 60:
                width = size - 59
                if pos + width > end:
                    raise ValueError("a truncated snappy literal length")
                size = int.from_bytes(data[pos:pos + width], "little")
                pos += width
            size += 1
            if pos + size > end or len(out) + size > length:
                raise ValueError("a snappy literal runs past its block")
            out += data[pos:pos + size]
            pos += size
            continue
        if kind == 1:  # copy, 1-byte offset: length 4-11, offset's high 3 bits in the tag
            if pos + 1 > end:
                raise ValueError("a truncated snappy copy")
            size, offset = 4 + ((tag >> 2) & 7), ((tag >> 5) << 8) | data[pos]
            pos += 1
        else:  # copy, 2- or 4-byte offset: length 1-64
            width = 2 if kind == 2 else 4
            if pos + width > end:
                raise ValueError("a truncated snappy copy")
            size, offset = (tag >> 2) + 1, int.from_bytes(data[pos:pos + width], "little")
            pos += width
        if offset == 0 or offset > len(out) or len(out) + size > length:
            raise ValueError("a snappy copy reaches outside its block")
        start = len(out) - offset
        if size <= offset:
            out += out[start:start + size]
        else:  # overlapping: the pattern of `offset` bytes repeats
            pattern = bytes(out[start:])
            out += (pattern * (size // offset + 1))[:size]
    if len(out) != length:
        raise ValueError(f"a snappy block holds {len(out):,} bytes, not the {length:,} it declares")
    return bytes(out)


def read_varint(data: bytes, pos: int, end: int | None = None, bits: int = 64, what: str = "varint"
                ) -> tuple[int, int]:
    """A little-endian base-128 varint at ``data[pos:end]`` (protobuf's, LevelDB's table format's
    and snappy's preamble): ``(value, the position after it)``; ValueError("a malformed WHAT")
    where it runs past ``end`` or past ``bits`` bits."""
    end = len(data) if end is None else end
    value = shift = 0
    while True:
        if pos >= end or shift >= bits:
            raise ValueError(f"a malformed {what}")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
