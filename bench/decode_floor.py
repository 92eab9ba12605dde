"""``python -m bench.decode_floor [CAPTURE ...]``: what reading every tensor of format-2 captures costs, as a floor.

Issue 29, item 3 asks that a compare over format-2 captures be as fast as over format 1. A
format-1 tensor is a ``.npy`` file mapped from the page cache; a format-2 one is decoded: zstd,
the byte unshuffle, and a residual added back to its prediction. This times both readings of
every tensor of the given captures (default: the format pair ``make bench`` leaves in
``out/bench/runs/format``), one thread, nothing else: each chunk of each tensor decoded once
(:meth:`Capture.stream`), and each ``.npy`` summed once (every page touched). Compare must read
at least this much for the pairs no digest decides, so the difference is a floor under the
two formats' compare times on one core.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from tracer.captures.reader import Capture

FORMAT = Path("out/bench/runs/format")


def read_all(path: Path) -> dict[str, float]:
    capture = Capture.open(path, received=False)
    began, values = time.perf_counter(), 0
    for name in capture.tensor_names:
        stream = capture.stream(name)
        pieces = stream.chunks() if stream is not None else [np.asarray(capture.tensor(name)).reshape(-1)]
        for piece in pieces:
            if piece.dtype.kind in "fiub":
                values += piece.nbytes
                piece.view(np.uint8).sum(dtype=np.uint64)  # touch every byte, as a metric does
        capture.forget()
    return {"seconds": round(time.perf_counter() - began, 3), "gb": round(values / 1e9, 3)}


def main(argv: list[str]) -> int:
    paths = [Path(p) for p in argv] or [FORMAT / n for n in ("a_npy_b8", "a_packed_b8", "b_npy_b8", "b_packed_b8")]
    for _ in range(2):  # the second round reads from a warm page cache, as compare's does
        rows = {p.name: read_all(p) for p in paths}
    print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
