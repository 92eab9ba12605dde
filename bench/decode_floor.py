"""``python -m bench.decode_floor [CAPTURE ...]``: what reading every tensor of format-2 captures costs, as a floor.

Issue 29, item 3 asks that a compare over format-2 captures be as fast as over format 1. A
format-1 tensor is a ``.npy`` file mapped from the page cache; a format-2 one is decoded: zstd,
the byte unshuffle, and a residual added back to its prediction. This times both readings of
every tensor of the given captures (default: the format pair ``make bench`` leaves in
``out/bench/runs/format``), one thread, nothing else, each read once with every byte touched:

- ``npy``: each ``.npy`` mapped and summed;
- ``zstd``: only the zstd decompression of every chunk of a packed capture, with no unshuffle and
  no prediction. No reader of format 2 can do less, so this is the floor;
- ``decoded``: each packed tensor read as :meth:`Capture.stream` gives it. A predicted tensor
  decodes its inputs too, so this counts some chunks twice that compare's reading in step decodes
  once; it bounds the decoding from above.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import zstandard as zstd

from tracer.captures.reader import Capture

FORMAT = Path("out/bench/runs/format")


def _touch(values: np.ndarray) -> int:
    values.view(np.uint8).sum(dtype=np.uint64)  # every byte read, as a metric reads them
    return values.nbytes


def read_all(path: Path) -> dict[str, dict[str, float]]:
    capture = Capture.open(path, received=False)
    out: dict[str, dict[str, float]] = {}
    tensors = capture.manifest["tensors"]
    packed = [n for n in capture.tensor_names if (tensors.get(n) or {}).get("encoding")
              and not tensors[n].get("alias_of") and tensors[n].get("values") != "artifact"]
    ways = {"zstd": packed, "decoded": packed} if packed else {"npy": capture.tensor_names}
    for way, names in ways.items():
        began, total = time.perf_counter(), 0
        for name in names:
            if way == "zstd":
                with open(capture.stored_file(name), "rb") as f:  # the floor reads the files as stored
                    for r0, r1, offset, nbytes, _ in tensors[name]["encoding"]["chunks"]:
                        f.seek(offset)
                        raw = zstd.ZstdDecompressor().decompress(f.read(nbytes))
                        total += _touch(np.frombuffer(raw, np.uint8))
                continue
            stream = capture.stream(name) if way == "decoded" else None
            pieces = stream.pieces() if stream is not None else [np.asarray(capture.tensor(name)).reshape(-1)]
            total += sum(_touch(piece) for piece in pieces if piece.dtype.kind in "fiub")
            capture.forget()
        out[way] = {"seconds": round(time.perf_counter() - began, 3), "gb": round(total / 1e9, 3)}
    return out


def main(argv: list[str]) -> int:
    paths = [Path(p) for p in argv] or [FORMAT / n for n in ("a_npy_b8", "a_packed_b8", "b_npy_b8", "b_packed_b8")]
    for _ in range(2):  # the second round reads from a warm page cache, as compare's does
        rows = {p.name: read_all(p) for p in paths}
    print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
