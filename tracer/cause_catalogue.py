"""The cause catalogue (docs/causes.md) as data: each :class:`Cause` with its title, its remedy
and what the remedy costs, in the catalogue's words, and the settings (``KNOB_CAUSES``) whose
difference between two sides points at a cause. :mod:`tracer.causes` says which of them a
comparison shows; ``tftrace diagnose`` (:mod:`tracer.diagnosis.answers`) measures them."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Cause", "CAUSES", "KNOB_CAUSES"]


@dataclass(frozen=True)
class Cause:
    key: str
    title: str
    remedy: str
    cost: str


CAUSES: dict[str, Cause] = {c.key: c for c in (
    Cause("batch", "shape-dependent kernel choice (GEMM blocking on CPU, cuDNN/cuBLAS algorithm per shape on GPU)",
          "serve and test with one fixed batch shape (TF Serving `allowed_batch_sizes: [N]`), or compare with a tolerance",
          "the throughput/latency of a fixed batch shape"),
    Cause("autotune", "cuDNN autotuning picks algorithms by timing, per process and shape",
          "`tf.config.experimental.enable_op_determinism()` (TF ≥ 2.8); `TF_CUDNN_USE_AUTOTUNE=0` alone only narrows the gap",
          "autotune off: reported ~30% slower on one model; determinism: 6% on one model, several times on others"),
    Cause("atomics", "GPU kernels that accumulate with atomics are nondeterministic run to run",
          "`tf.config.experimental.enable_op_determinism()` (ops without a deterministic kernel then raise)",
          "as for determinism"),
    Cause("tf32", "TensorFloat-32 rounds float32 matmul/conv inputs to 10 mantissa bits on Ampere+ GPUs",
          "`tf.config.experimental.enable_tensor_float_32_execution(False)`", "loses the TF32 speed-up on matmul/conv"),
    Cause("onednn", "oneDNN CPU kernels (default on for CPUs with AVX512_VNNI/BF16, AVX_VNNI or AMX)",
          "set `TF_ENABLE_ONEDNN_OPTS` explicitly and the same everywhere", "oneDNN's CPU speed-up"),
    Cause("grappler", "Grappler rewrites at run time (remapper fusions, layout, constant folding, arithmetic)",
          "use the same fetches and the same `ConfigProto.graph_options.rewrite_options` on both sides "
          "(TF Serving: `--tensorflow_session_config_file`)",
          "fusions are worth up to ~1.8× on CPU"),
    Cause("observation", "fetching a tensor prevents fusions that involve it (the observer effect)",
          "capture both sides the same way; read the plain-vs-instrumented shift", "debugging only"),
    Cause("xla", "XLA compilation changes fusion and arithmetic order", "the same jit setting everywhere",
          "the XLA speed-up"),
    Cause("mixed_precision", "mixed precision computes parts of the model in float16/bfloat16",
          "turn it off where it enters: at run time Grappler's `auto_mixed_precision*` rewrites (no "
          "`--mixed_precision=bfloat16` in TF Serving); in the graph itself (`cast_inserted`: a Keras "
          "`mixed_float16`/`mixed_bfloat16` dtype policy, a converter's FP16 mode) export with float32 compute "
          "(Keras: build under the `float32` policy and load the same weights); or accept it and test with a tolerance",
          "the mixed-precision speed-up"),
    Cause("export", "export-time rewrites (batch-norm folding, optimize_for_inference, TF-TRT, fp16 conversion)",
          "test the exported artifact itself; fold in both or in neither (freezing alone is exact)",
          "folding is a speed-up (~1.8× on one CPU model)"),
    Cause("weights", "the two artifacts hold different weights (other values for the same variables or constants: "
          "an export written from another training step, from the weights' moving averages, or with weights "
          "changed on purpose)",
          "compare the export with the very weights it was written from (the same checkpoint step, the averaged "
          "weights if the export restored them); a weight changed on purpose (quantised, retrained) is tested on "
          "the exported artifact itself", "none"),
    Cause("moving_averages", "the export holds the checkpoint's exponential moving averages of the weights "
          "(`<variable>/ExponentialMovingAverage`, restored into the variables as the Object Detection API's "
          "exporter does), not the weights the checkpoint's graph restores",
          "compare the export against the checkpoint's averaged weights (restore the checkpoint with "
          "`tf.compat.v1.train.Saver(tf.compat.v1.train.ExponentialMovingAverage(decay).variables_to_restore())`, "
          "save it with a plain `Saver()` and compare that checkpoint with the export), or export the raw weights "
          "if those are the ones to serve",
          "none: the averages are what the export serves"),
    Cause("serving_batching", "TF Serving batching pads requests up to the next allowed batch size",
          "`allowed_batch_sizes: [N]` or batching off", "latency/throughput"),
    Cause("build", "different TF/CUDA/cuDNN builds", "the same build for tests and serving", "none"),
    Cause("nondeterminism", "a kernel that gives different results from run to run on identical inputs",
          "`tf.config.experimental.enable_op_determinism()` (TF ≥ 2.8), then compare again",
          "determinism: 6% on one model, several times slower on others"),
    Cause("load_state", "variables set when the model loads instead of restored from its checkpoint "
          "(an initialiser, often random, runs at every load)",
          "save every variable the model reads in its checkpoint (or freeze the graph), so every load restores "
          "the same values", "none"),
    Cause("training_graph", "a training graph, or another graph that takes statistics over the batch (batch norms "
          "in training mode, such as is_training=True or tf.nn.moments over the batch, normalise with each run's batch "
          "statistics, and may update their moving averages as they run; any other reduction over the batch axis "
          "couples a run's examples alike)",
          "compare the inference graph: rebuild the model with is_training=False (Keras: training=False), restore the "
          "checkpoint into it and compare that, or the SavedModel exported from it; where the inference graph itself "
          "reduces over the batch axis, compute that statistic per example (over the other axes) or from fixed "
          "values. Outputs that depend on which examples share a run differ at any other batch, which no fixed batch "
          "shape or tolerance removes",
          "none: the inference graph is what serving runs"),
    Cause("state", "the model updates its own variables when it runs (a stateful signature)",
          "compare fresh loads, or reset the state before each run; this is not numerical nondeterminism", "none"),
)}

KNOB_CAUSES = {"onednn": "onednn", "autotune": "autotune", "determinism": "autotune", "tf32": "tf32", "xla": "xla",
               "grappler": "grappler", "session_config_path": "grappler", "threads": "build"}
