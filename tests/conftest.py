"""Shared fixtures: the sample models (generated once), a CLI runner, TF-free helpers."""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
GENERATED = REPO / "sample_models" / "generated"

# Numbers in these tests depend on oneDNN; its default depends on the CPU. Pin it for every
# child process the tests start (tests that compare settings pass --onednn explicitly).
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# On a GPU machine a test process that loads a model in process would otherwise reserve nearly all
# of the GPU's memory, and the tftrace children of the other test workers die in cudaSetDevice()
# (seen on the H200, 2026-12-02 evening). No kernel and no number depends on it.
os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")


def _fresh(models_dir: Path) -> bool:
    return (models_dir / ".complete").exists() and (models_dir / "models.json").exists()


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """name -> path of every sample model (see sample_models/README.md).

    Uses ``sample_models/generated`` when ``make models`` made it; otherwise generates into a
    temporary directory (in a child process, so the test process does not import TF for it).
    """
    root = GENERATED
    if not _fresh(root):
        root = tmp_path_factory.mktemp("models") / "generated"
        # on the CPU: a model-building process on a GPU machine takes the GPU's memory from the tests beside it
        subprocess.run([sys.executable, "-m", "sample_models.generate", "--out", str(root)], cwd=REPO, check=True,
                       env={**os.environ, "CUDA_VISIBLE_DEVICES": "-1"})
    table = json.loads((root / "models.json").read_text())
    return {name: root / rel for name, rel in table.items()}


@pytest.fixture(scope="session")
def real_models() -> dict[str, Path]:
    """The two SavedModels written by old TF releases (tests/real_models, see its README)."""
    base = REPO / "tests" / "real_models"  # in the repository, so CI's fresh clone has them
    return {
        "half_plus_two": base / "saved_model_half_plus_two_mkl",
        "counter": base / "saved_model_counter",
    }


def build_model(script: str, *args: object) -> None:
    """Run a model-building script (a TF1 graph or a TF2 module, written the way its users wrote
    them) in a child process on the CPU, so the test process never imports TensorFlow."""
    subprocess.run([sys.executable, "-c", textwrap.dedent(script), *map(str, args)], check=True, capture_output=True,
                   timeout=300, env={**os.environ, "CUDA_VISIBLE_DEVICES": "-1"})


def build_fixture(script: str, out: Path) -> Path:
    """Run ``tests/fixtures/SCRIPT OUT`` in a child process, on the CPU with oneDNN off (the numbers
    the fixtures record depend on it); returns ``out``."""
    subprocess.run([sys.executable, str(REPO / "tests" / "fixtures" / script), str(out)], cwd=REPO, check=True,
                   capture_output=True, timeout=300,
                   env={**os.environ, "CUDA_VISIBLE_DEVICES": "-1", "TF_ENABLE_ONEDNN_OPTS": "0"})
    return out


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``tftrace`` as a user would, in a fresh process; returns the CompletedProcess."""
    full_env = {**os.environ, **(env or {}), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "tracer.cli", *args], cwd=REPO, env=full_env, capture_output=True, text=True,
        timeout=timeout,
    )


def assert_user_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    """Exit 2, one line on stderr naming the problem (and fix), no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    err = proc.stderr.strip()
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("tftrace: error:")]
    assert len(lines) == 1, err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


class Captured:
    """What the isolation judge reads of a capture, held in memory: ``has`` and ``tensor``."""

    def __init__(self, tensors: dict[str, Any]) -> None:
        self.tensors = tensors

    def has(self, name: str) -> bool:
        return name in self.tensors

    def tensor(self, name: str) -> Any:
        return self.tensors[name]


# The packages only some fixtures need, and how make setup installs each (the Makefile says why)
TEST_PACKAGES = {"tf_slim": "pip install -e '.[dev]' (tf-slim is in the dev extra)",
                 "tf_keras": "pip install --no-deps tf-keras==2.21.0 (--no-deps: its wheel requires the full "
                             "`tensorflow` package, which would go over tensorflow-cpu)"}
SKIP_MISSING = "TFTRACE_SKIP_MISSING_TEST_PACKAGES"


def require_packages(*modules: str) -> None:
    """Fail the test, naming what to install, when a module its fixture needs is missing.

    ``make setup`` installs every one, so a missing one is a broken setup; a skip would let CI go
    green without ever running the tests that need it. Only a runner that says so by setting
    ``TFTRACE_SKIP_MISSING_TEST_PACKAGES=1`` (a machine that cannot install them) skips instead."""
    import importlib.util  # noqa: PLC0415

    missing = [m for m in modules if importlib.util.find_spec(m) is None]  # found, not imported: no TensorFlow here
    if not missing:
        return
    how = "; ".join(f"{m}: {TEST_PACKAGES.get(m, 'pip install ' + m)}" for m in missing)
    message = f"{', '.join(missing)} not installed, which this test's models are built with. Run make setup, or {how}"
    if os.environ.get(SKIP_MISSING) == "1":
        pytest.skip(f"{message} ({SKIP_MISSING}=1 skips it)")
    pytest.fail(f"{message}; or set {SKIP_MISSING}=1 to skip such tests", pytrace=False)


@pytest.fixture(scope="session")
def slim_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """TF1-era artifacts of a tf_slim net (see tests/fixtures/slim_export.py), built once per
    session in a child process: ``ckpt/`` (no signature), ``savedmodel/``, ``renamed/``,
    ``meta_only/``, ``v1/``, ``renumbered/*.pbtxt``."""
    require_packages("tf_slim")
    out = tmp_path_factory.mktemp("slim") / "models"
    subprocess.run([sys.executable, str(REPO / "tests" / "fixtures" / "slim_export.py"), str(out)], cwd=REPO,
                   check=True, capture_output=True, timeout=300)
    return out


@pytest.fixture(scope="session")
def ema_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A TF1 net trained with an ExponentialMovingAverage and its export of the averages (see
    tests/fixtures/ema_export.py), built once per session in a child process: ``ref/`` (TF1 ref
    variables) and ``resource/`` (resource variables), each ``ckpt/`` + ``savedmodel/``; ``steps/``
    (no averages, the export two training steps later); ``facts.json``."""
    out = tmp_path_factory.mktemp("ema") / "models"
    return build_fixture("ema_export.py", out)


@pytest.fixture(scope="session")
def dropout_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small TF1 classifier whose exported graph kept an unseeded dropout (tests/fixtures/dropout_tf1.py):
    ``ckpt/`` (Saver, no signature) and ``savedmodel/`` (its faithful export). Every run draws a new mask."""
    out = tmp_path_factory.mktemp("dropout") / "models"
    return build_fixture("dropout_tf1.py", out)


@pytest.fixture(scope="session")
def mobilenet_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small MobileNet-style TF1 net with fixed random weights (see tests/fixtures/mobilenet_tf1.py),
    built once per session in a child process: ``ckpt/`` (Saver, no signature), ``savedmodel/`` (its
    faithful SavedModelBuilder export), ``folded/`` (optimize_for_inference: batch norms folded),
    ``images_b8.npz`` / ``images_b1.npz`` (key ``images``), ``facts.json``. Built on CPU with oneDNN off."""
    out = tmp_path_factory.mktemp("mobilenet") / "models"
    return build_fixture("mobilenet_tf1.py", out)


@pytest.fixture(scope="session")
def keras_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Keras 3 exports of one small functional model (see tests/fixtures/keras_export.py), built once
    per session in a child process: ``export/`` (``model.export``), ``tfsave/``
    (``tf.saved_model.save``), ``module/`` (a ``tf.Module`` serving it under its own keys), ``bf16/`` and ``fp16/`` (the same weights under ``mixed_bfloat16`` and
    ``mixed_float16``), ``auto_f32/`` and ``auto_fp16/`` (float32 and mixed_float16 twins left for Keras
    to name, so their scopes differ), ``model.keras``; recurrent exports ``lstm/`` (and ``lstm_tfsave/``),
    ``gru/``, ``simple_rnn/``, ``lstm_unrolled/`` with their inputs ``seq.npz`` and what TensorFlow
    computes on them (``truth.json``, oneDNN off as the tests run them); ``augment/`` (Keras random
    augmentation layers, which write their seed state)."""
    out = tmp_path_factory.mktemp("keras") / "models"
    subprocess.run([sys.executable, str(REPO / "tests" / "fixtures" / "keras_export.py"), str(out)], cwd=REPO,
                   check=True, capture_output=True, timeout=300,
                   env={**os.environ, "CUDA_VISIBLE_DEVICES": "-1", "TF_ENABLE_ONEDNN_OPTS": "0"})
    return out


# ------------------------------------------------------------------ every report written satisfies the schema

_CHECKED: dict[Path, int] = {}  # report.json -> the mtime it was checked at


def written_report_errors(path: Path) -> list[str]:
    """How a report.json breaks tracer/schemas/report.schema.json (the whole schema), as lines."""
    from tracer.report.contract import report_errors  # noqa: PLC0415

    doc = json.loads(path.read_text(encoding="utf-8"))
    return [f"{path}: {'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message[:300]}" for e in report_errors(doc)]


@pytest.fixture(autouse=True)
def _written_reports_satisfy_the_schema(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """After each test: every report.json tftrace wrote under the test temp directories (claimed in
    its output directory's ownership record and signed by tftrace) satisfies the published schema,
    in full. Reports planted by hand (hostile ones) carry no such record."""
    yield
    problems: list[str] = []
    for path in tmp_path_factory.getbasetemp().rglob("report.json"):
        try:
            stamp = path.stat(follow_symlinks=False).st_mtime_ns
            owned = json.loads((path.parent / ".tftrace-owned.json").read_text(encoding="utf-8"))["paths"]
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if _CHECKED.get(path) == stamp or "report.json" not in owned or not isinstance(doc, dict):
            continue
        _CHECKED[path] = stamp
        if (doc.get("tool") or {}).get("name") == "tftrace":
            problems += written_report_errors(path)
    assert not problems, "a report tftrace wrote breaks tracer/schemas/report.schema.json:\n" + "\n".join(problems[:20])


SHARE = re.compile(r" \[(?:up to [^\]]+|its share not measured)\]")


def why_lines(answers: dict[str, Any]) -> list[str]:
    """A comparison's "why" lines without the share each cause line carries (tracer/cause_shares.py:
    ``[up to X at ...]``), for tests that hold the evidence's words; every cause line must carry one,
    and the shares are ranked biggest first (the unmeasured last)."""
    why = list(answers["why"])
    causes = answers.get("causes") or []
    for line in why[: len(causes)]:
        assert SHARE.search(line), line
    sizes = [s["max_abs"] for s in answers.get("shares") or []]
    measured = [v for v in sizes if v is not None]
    assert measured == sorted(measured, reverse=True) and sizes[: len(measured)] == measured, sizes
    return [SHARE.sub("", line, count=1) for line in why]
