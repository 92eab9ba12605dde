"""Ground truth for batch-size tests, from plain TensorFlow sessions on the machine running them.

Which op first differs between batch 1 and batch N depends on the CPU (oneDNN and Eigen pick
kernels per shape and per instruction set), so a test must not hard-code it. This module runs a
SavedModel at two batch sizes with nothing of tftrace, fetches every float tensor whose first
axis is the batch, and names the first op, in the same deterministic topological order tftrace
uses (``networkx.lexicographical_topological_sort``), whose rows differ bitwise, and the first
whose rows differ beyond ``|a-b| <= atol + rtol*|a|``.

TensorFlow reads ``TF_ENABLE_ONEDNN_OPTS`` once, at import, so each setting runs in a child
process: :func:`first_row_divergence` starts ``python tests/plain_truth.py`` with it set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["first_row_divergence", "captured_inputs"]


def captured_inputs(capture_dir: Path | str) -> dict[str, np.ndarray]:
    """The examples a capture ran on, by signature key (TF-free: read from its files)."""
    from tracer.captures.reader import Capture  # noqa: PLC0415

    capture = Capture.open(capture_dir)
    return {key: np.asarray(capture.tensor(t)) for key, t in capture.manifest["graph"]["inputs"].items()}


def first_row_divergence(model: Path | str, a_inputs: dict[str, np.ndarray], a_batch: int,
                         b_inputs: dict[str, np.ndarray], b_batch: int, b_rows: list[int], *, onednn: str,
                         b_onednn: str | None = None, atol: float = 1e-6, rtol: float = 1e-5) -> dict[str, Any]:
    """``{"bitwise": op, "beyond_tolerance": op, "agreeing": [ops before it]}`` (None where nothing
    differs) for the SavedModel ``model`` run on ``a_inputs`` at ``a_batch`` with oneDNN ``onednn``
    ("on"/"off") against ``b_inputs`` at ``b_batch`` with ``b_onednn`` (default: the same); A's
    row i is B's row ``b_rows[i]`` (B may hold padding rows). Each side runs in its own child."""
    with tempfile.TemporaryDirectory() as tmp:
        a, order, consumed = _side(Path(tmp, "a"), model, a_inputs, a_batch, onednn)
        b, _, _ = _side(Path(tmp, "b"), model, b_inputs, b_batch, b_onednn or onednn)
        rows = np.asarray(b_rows)
        found: dict[str, Any] = {"bitwise": None, "beyond_tolerance": None, "agreeing": []}
        for op in order:
            for name in sorted(t for t in a.files if _op(t) == op and _tensor(t) in consumed):
                x, y = a[name], b[name][rows]
                if found["bitwise"] is None and not np.array_equal(x, y):
                    found["bitwise"] = op
                x64, y64 = x.astype(np.float64), y.astype(np.float64)
                if found["beyond_tolerance"] is None and np.any(np.abs(x64 - y64) > atol + rtol * np.abs(x64)):
                    found["beyond_tolerance"] = op
            if found["bitwise"] is None:
                found["agreeing"].append(op)
        return found


def _op(key: str) -> str:
    return _tensor(key).rsplit(":", 1)[0]


def _tensor(key: str) -> str:
    """npz keys cannot hold "/": tensor names are stored with "|" instead."""
    return key.replace("|", "/")


def _side(out: Path, model: Path | str, inputs: dict[str, np.ndarray], batch: int,
          onednn: str) -> tuple[Any, list[str], set[str]]:
    out.mkdir()
    np.savez(out / "inputs.npz", **inputs)
    args = {"model": str(model), "inputs": str(out / "inputs.npz"), "batch": batch, "out": str(out)}
    env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": {"on": "1", "off": "0"}[onednn], "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run([sys.executable, __file__, json.dumps(args)], env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"plain-session ground truth failed:\n{proc.stderr[-4000:]}")
    meta = json.loads((out / "graph.json").read_text())
    return np.load(out / "values.npz"), meta["order"], set(meta["consumed"])


def _run(tf: Any, model: str, inputs: dict[str, np.ndarray], batch: int) -> tuple[dict[str, np.ndarray], Any, list[str]]:
    """Every float tensor with a batch axis, all runs concatenated (rows in example order)."""
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as sess:
        meta = tf.compat.v1.saved_model.loader.load(sess, ["serve"], model)
        sig = meta.signature_def["serving_default"]
        feeds = {sig.inputs[k].name: v for k, v in inputs.items()}
        outputs = [t.name for t in sig.outputs.values()]
        fetches = [t for op in graph.get_operations() for t in op.outputs
                   if t.dtype.is_floating and not t.dtype._is_ref_dtype and t.shape.rank and t.shape.rank > 0
                   and t.shape[0] is None]
        count = next(iter(inputs.values())).shape[0]
        runs = []
        for start in range(0, count, batch):
            feed = {k: v[start:start + batch] for k, v in feeds.items()}
            runs.append(sess.run({t.name: t for t in fetches}, feed))
        values = {name: np.concatenate([r[name] for r in runs]) for name in runs[0]}
        return values, graph.as_graph_def(), outputs


def main() -> None:
    """Child: run one side, write its values and the graph's order (tftrace's topological order)."""
    import networkx as nx  # noqa: PLC0415
    import tensorflow as tf  # noqa: PLC0415

    args = json.loads(sys.argv[1])
    values, graph_def, outputs = _run(tf, args["model"], dict(np.load(args["inputs"])), args["batch"])
    dag = nx.DiGraph()
    consumed = set(outputs)  # what tftrace judges: outputs read by another op or returned
    for node in graph_def.node:
        dag.add_node(node.name)
        for inp in node.input:
            dag.add_edge(inp.lstrip("^").split(":")[0], node.name)
            if not inp.startswith("^"):
                consumed.add(inp if ":" in inp else f"{inp}:0")
    inference = set().union(*(nx.ancestors(dag, o.split(":")[0]) | {o.split(":")[0]} for o in outputs))
    order = list(nx.lexicographical_topological_sort(dag.subgraph(inference)))
    np.savez(Path(args["out"], "values.npz"), **{k.replace("/", "|"): v for k, v in values.items()})
    Path(args["out"], "graph.json").write_text(json.dumps({"order": order, "consumed": sorted(consumed)}))


if __name__ == "__main__":
    main()
