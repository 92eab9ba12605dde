"""Write the benchmark models to disk: ``python -m bench.workloads.export --out DIR NAME...``.

Each model becomes ``DIR/NAME/ckpt`` (a TF1 checkpoint whose ``.meta`` carries the
``serving_default`` signature) and ``DIR/NAME/savedmodel`` (a TF1 SavedModel exported from the
same session), as a TF1 training job leaves them. Values come from :func:`draw_values`, fed
through each variable's initializer, so the files are byte-identical on every run. A model is
written to ``NAME.partial`` and renamed when complete.

Runs in its own process: it imports TensorFlow, which the harness process never does.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from . import MODELS, WIDE_OPS, build
from .layers import draw_values

__all__ = ["main", "write_model"]

SIGNATURE_KEY = "serving_default"


def _tf() -> ModuleType:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf  # only this child process imports TensorFlow

    tf.get_logger().setLevel("ERROR")
    return tf


def write_model(tf: ModuleType, name: str, out: Path, wide_ops: int = WIDE_OPS) -> None:
    """Write ``out/ckpt`` and ``out/savedmodel`` for model ``name`` (``out`` must not exist)."""
    staging = out.with_name(out.name + ".partial")
    if staging.exists():
        shutil.rmtree(staging)
    (staging / "ckpt").mkdir(parents=True)
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as sess:
        inputs, outputs, params = build(tf, name, wide_ops)
        values = draw_values(params.shapes, MODELS[name].seed)
        sess.run([v.initializer for v in params.variables],
                 feed_dict={v.initial_value: values[v.op.name] for v in params.variables})
        sig = tf.compat.v1.saved_model.signature_def_utils.predict_signature_def(
            inputs={MODELS[name].input_key: inputs}, outputs=dict(outputs))
        saver = tf.compat.v1.train.Saver()
        prefix = str((staging / "ckpt" / "model.ckpt").resolve())
        saver.save(sess, prefix, write_meta_graph=False)
        meta = saver.export_meta_graph()
        meta.signature_def[SIGNATURE_KEY].CopyFrom(sig)
        Path(f"{prefix}.meta").write_bytes(meta.SerializeToString(deterministic=True))
        builder = tf.compat.v1.saved_model.Builder(str(staging / "savedmodel"))
        builder.add_meta_graph_and_variables(sess, ["serve"], signature_def_map={SIGNATURE_KEY: sig})
        builder.save()
    if out.exists():
        shutil.rmtree(out)
    staging.rename(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.workloads.export", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory that receives one folder per model")
    parser.add_argument("--wide-ops", type=int, default=WIDE_OPS, help="ops in the wide graph (default %(default)s)")
    parser.add_argument("names", nargs="+", choices=sorted(MODELS))
    args = parser.parse_args(argv)
    tf = _tf()
    for name in args.names:
        started = time.monotonic()
        write_model(tf, name, Path(args.out) / name, args.wide_ops)
        print(f"{name}: written in {time.monotonic() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
