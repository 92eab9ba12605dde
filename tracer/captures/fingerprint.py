"""The environment fingerprint of a capture: what built and ran the numbers.

"Different builds" is a cause of its own (docs/causes.md), so the fingerprint records everything
that can change a kernel's result: TF version and build (CUDA/cuDNN for GPU builds), visible
devices (GPU name, compute capability), CPU model and vector flags, oneDNN state, TF32 and
determinism state, and the ``TF_*`` variables TensorFlow may read. Runs in the child, with
TensorFlow imported.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import socket
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._tf import tf

__all__ = ["environment_fingerprint", "cpu_info", "tensorflow_env"]

VECTOR_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                "avx512_bf16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "asimd", "sve")


# Terraform's variables share the TF_ prefix; TensorFlow reads none of them, and TF_VAR_* and
# TF_TOKEN_* often hold credentials. A report is meant to be attached to an issue: leave them out.
_TERRAFORM = re.compile(
    r"TF_(VAR|TOKEN|CLI|REGISTRY|CLOUD|PLUGIN|ACC|LOG|REATTACH)_.*"
    r"|TF_(LOG|INPUT|DATA_DIR|WORKSPACE|IN_AUTOMATION|IGNORE|APPEND_USER_AGENT|STATE_PERSIST_INTERVAL|MODULE_DEPTH|ACC)"
)
# Any other variable named like a credential is kept as set, without its value.
_CREDENTIAL = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|API_?KEY|ACCESS_KEY|PRIVATE_KEY|AUTH", re.IGNORECASE)
REDACTED = "(set; value not recorded)"


def tensorflow_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The ``TF_*`` variables of ``environ`` that can be TensorFlow's, sorted, credentials redacted."""
    return {
        name: REDACTED if _CREDENTIAL.search(name) else value
        for name, value in sorted(environ.items())
        if name.startswith("TF_") and not _TERRAFORM.fullmatch(name)
    }


def cpu_info() -> dict[str, Any]:
    """CPU model and the vector flags that decide kernels (and oneDNN's default), from /proc/cpuinfo."""
    model, flags = "", set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and not model:
                    model = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = set(value.split())
                elif not line.strip() and flags:
                    break  # the end of the first processor's block: the others repeat it
    except OSError:
        flags = set()  # not Linux: the flags are unknown, and recorded as none
    model = model or platform.processor() or platform.machine()
    return {
        "model": model,
        "machine": platform.machine(),
        "cores": os.cpu_count(),
        "vector_flags": [f for f in VECTOR_FLAGS if f in flags],
    }


ONEDNN_DEFAULT_FLAGS = ("avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16")


def _onednn_state(cpu: dict[str, Any]) -> dict[str, Any]:
    """Whether oneDNN's custom ops are on in *this* process, and why.

    ``_pywrap_util_port.IsMklEnabled()`` is TF's own runtime decision (tensorflow/core/util/
    port.cc): ``TF_ENABLE_ONEDNN_OPTS`` if set, else on for Linux x86 CPUs with AVX512_VNNI,
    AVX512_BF16, AVX_VNNI or AMX (``default_on_this_cpu``), and always false in a build
    without oneDNN. Whether oneDNN ops really ran is read off the executed graph
    (``_Mkl*`` op types) by the worker.
    """
    setting = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
    state: dict[str, Any] = {
        "TF_ENABLE_ONEDNN_OPTS": setting,
        "default_on_this_cpu": any(f in cpu["vector_flags"] for f in ONEDNN_DEFAULT_FLAGS),
    }
    try:
        from tensorflow.python.util import _pywrap_util_port  # noqa: PLC0415

        state["enabled"] = bool(_pywrap_util_port.IsMklEnabled())
    except (ImportError, AttributeError):
        state["enabled"] = None  # a TF without the binding: the executed op types still tell
    return state


def _gpu_devices() -> list[dict[str, Any]]:
    """Each physical GPU: name and compute capability (TF32 needs >= 8.0)."""
    t = tf()
    out = []
    for device in t.config.list_physical_devices("GPU"):
        try:
            details = t.config.experimental.get_device_details(device)
        except (ValueError, RuntimeError):
            details = {}
        cc = details.get("compute_capability")
        out.append({"name": device.name, "device_name": details.get("device_name"),
                    "compute_capability": ".".join(map(str, cc)) if cc else None})
    return out


def _session_devices(session: Any) -> list[dict[str, Any]]:
    """The devices the capture's session really ran on, with the memory TF may use on each.

    Asked of the session itself: opening another device list with other GPU options would
    clash with the session's GPU mapping in the same process.
    """
    return [{"name": d.name, "type": d.device_type, "memory_limit_bytes": int(d.memory_limit_bytes)}
            for d in session.list_devices()]


def environment_fingerprint(session: Any | None = None) -> dict[str, Any]:
    """Everything about this process that can change a kernel's result (``session``: the
    capture's session, whose devices and their memory are recorded too)."""
    t = tf()
    build = dict(t.sysconfig.get_build_info())
    gpus = _gpu_devices()
    cpu = cpu_info()
    try:
        tf32 = bool(t.config.experimental.tensor_float_32_execution_enabled())
    except AttributeError:
        tf32 = None
    try:
        from tensorflow.python.framework import config as tf_config  # noqa: PLC0415 - not public API

        determinism = bool(tf_config.is_op_determinism_enabled())  # TF >= 2.8
    except (ImportError, AttributeError):
        determinism = None
    return {
        "tensorflow": t.__version__,
        "tf_git_version": getattr(t.version, "GIT_VERSION", ""),
        "build": {k: build.get(k) for k in ("is_cuda_build", "is_rocm_build", "cuda_version", "cudnn_version",
                                            "cuda_compute_capabilities") if k in build},
        "devices": [d.name for d in t.config.list_physical_devices()],
        "gpus": gpus,
        "session_devices": _session_devices(session) if session is not None else [],
        "cpu": cpu,
        "onednn": _onednn_state(cpu),
        "tf32_enabled": tf32 if gpus else None,
        "op_determinism": determinism,
        "tf_env": tensorflow_env(os.environ),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "python": sys.version.split()[0],
        "python_executable": sys.executable,  # --python: the environment whose TensorFlow ran
        "numpy": np.__version__,
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "time_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
