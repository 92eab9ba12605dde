"""Is a GPU visible to TensorFlow here? Asked honestly, or the GPU experiments are skipped.

A CPU side's capture cannot tell: its child runs with ``CUDA_VISIBLE_DEVICES=-1``. Its
fingerprint does say whether this TensorFlow build can use a GPU at all (a CPU-only build
never can), which costs nothing; only for a CUDA/ROCm build is a small child process started
that lists the GPUs TensorFlow sees with the user's own environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

__all__ = ["gpu_unavailable_reason", "list_gpus"]

LIST_GPUS = ("import json, tensorflow as tf; "
             "print(json.dumps([d.name for d in tf.config.list_physical_devices('GPU')]))")


def list_gpus(timeout_s: float = 180.0) -> list[str]:
    """The GPUs a fresh TensorFlow process sees with this process's environment."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run([sys.executable, "-c", LIST_GPUS], env=env, capture_output=True, text=True,
                          timeout=timeout_s, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"listing GPUs failed ({tail})")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def gpu_unavailable_reason(environment: dict[str, Any], *, ask_tensorflow: bool) -> str | None:
    """None when a GPU is visible; otherwise why the GPU experiments cannot run here."""
    if environment.get("gpus"):
        return None
    build = environment.get("build") or {}
    version = environment.get("tensorflow", "?")
    if not build.get("is_cuda_build") and not build.get("is_rocm_build"):
        return f"no GPU: TensorFlow {version} here is a CPU-only build (is_cuda_build false)"
    if not ask_tensorflow:
        return "not asked: no GPU experiment was selected"
    try:
        gpus = list_gpus()
    except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError, IndexError) as exc:
        return f"no GPU could be listed: {exc}"
    if gpus:
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return ("no GPU visible to TensorFlow" + (f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else "")
            + f" although TensorFlow {version} is a GPU build")
