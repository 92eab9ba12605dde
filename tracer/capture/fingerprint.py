"""The environment fingerprint of a capture: what built and ran the numbers.

"Different builds" is a cause of its own (CAUSES.md), so the fingerprint records everything
that can change a kernel's result: TF version and build (CUDA/cuDNN for GPU builds), visible
devices (GPU name, compute capability), CPU model and vector flags, oneDNN state, TF32 and
determinism state, and every ``TF_*`` variable. Runs in the child, with TensorFlow imported.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import socket
import sys
from typing import Any

import numpy as np

from .._tf import tf

__all__ = ["environment_fingerprint", "cpu_info"]

VECTOR_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                "avx512_bf16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "asimd", "sve")


def cpu_info() -> dict[str, Any]:
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name":
                    model = value.strip()
                elif key in ("flags", "Features"):
                    flags = set(value.split())
                if model and flags:
                    break
    except OSError:
        pass  # not Linux: platform.processor() is what we have, and that is recorded
    return {
        "model": model,
        "machine": platform.machine(),
        "cores": os.cpu_count(),
        "vector_flags": [f for f in VECTOR_FLAGS if f in flags],
    }


def _onednn_state() -> dict[str, Any]:
    setting = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
    state: dict[str, Any] = {"TF_ENABLE_ONEDNN_OPTS": setting}
    try:
        from tensorflow.python.util import _pywrap_util_port  # noqa: PLC0415

        state["built_with_onednn"] = bool(_pywrap_util_port.IsMklEnabled())
    except (ImportError, AttributeError):
        state["built_with_onednn"] = None
    # Whether oneDNN ops really ran is read off the executed graph (`_Mkl*` op types) by the worker.
    return state


def _gpu_devices() -> list[dict[str, Any]]:
    t = tf()
    out = []
    for device in t.config.list_physical_devices("GPU"):
        details = {}
        try:
            details = t.config.experimental.get_device_details(device)
        except (ValueError, RuntimeError):
            details = {}
        cc = details.get("compute_capability")
        out.append({"name": device.name, "device_name": details.get("device_name"),
                    "compute_capability": ".".join(map(str, cc)) if cc else None})
    return out


def environment_fingerprint() -> dict[str, Any]:
    t = tf()
    build = dict(t.sysconfig.get_build_info())
    gpus = _gpu_devices()
    try:
        tf32 = bool(t.config.experimental.tensor_float_32_execution_enabled())
    except AttributeError:
        tf32 = None
    try:
        determinism = bool(t.config.experimental.is_op_determinism_enabled())  # TF ≥ 2.9
    except AttributeError:
        determinism = None
    return {
        "tensorflow": t.__version__,
        "tf_git_version": getattr(t.version, "GIT_VERSION", ""),
        "build": {k: build.get(k) for k in ("is_cuda_build", "is_rocm_build", "cuda_version", "cudnn_version",
                                            "cuda_compute_capabilities") if k in build},
        "devices": [d.name for d in t.config.list_physical_devices()],
        "gpus": gpus,
        "cpu": cpu_info(),
        "onednn": _onednn_state(),
        "tf32_enabled": tf32 if gpus else None,
        "op_determinism": determinism,
        "tf_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("TF_")},
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "time_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
