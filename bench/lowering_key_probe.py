"""``python -m bench.lowering_key_probe``: what the lowered-graph folder's key costs on a large graph.

The key (:func:`tracer.artifacts.lowering._cache_path`) hashes the whole MetaGraphDef in every
process; this builds a 105 MB graph of constants with one ``tf.cond`` and times the key against
the Grappler lowering it lets later processes skip (``bench/lowering_notes.md``).
"""

import hashlib
import time

import numpy as np

from tracer._tf import tf as _tf
from tracer.artifacts.lowering import _lowered, functional_control_flow


def main() -> None:
    tf = _tf()
    tf.compat.v1.disable_eager_execution()
    graph = tf.Graph()
    rng = np.random.default_rng(0)
    with graph.as_default():
        h = tf.compat.v1.placeholder(tf.float32, [None, 1024], name="x")
        for i in range(25):
            h = tf.matmul(h, tf.constant(rng.random((1024, 1024), dtype=np.float32), name=f"w{i}"))  # 4 MB each
        which = tf.compat.v1.placeholder_with_default(True, [], name="p")
        tf.cond(which, lambda: h * 2.0, lambda: h)
    meta_graph = tf.compat.v1.train.export_meta_graph(graph=graph)
    began = time.perf_counter()
    hashlib.sha256(meta_graph.SerializeToString(deterministic=True)).hexdigest()
    key = time.perf_counter() - began
    began = time.perf_counter()
    _lowered(meta_graph, "probe", frozenset(), functional_control_flow(meta_graph.graph_def))
    lowering = time.perf_counter() - began
    print(f"MetaGraphDef {meta_graph.ByteSize() / 1e6:.0f} MB: key {key:.3f} s, Grappler lowering {lowering:.3f} s "
          f"({key / lowering:.0%})")


if __name__ == "__main__":
    main()
