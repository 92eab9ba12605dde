"""Shared fixtures: the sample models (generated once), a CLI runner, TF-free helpers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GENERATED = REPO / "sample_models" / "generated"

# Numbers in these tests depend on oneDNN; its default depends on the CPU. Pin it for every
# child process the tests start (tests that compare settings pass --onednn explicitly).
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


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
        subprocess.run([sys.executable, "-m", "sample_models.generate", "--out", str(root)], cwd=REPO, check=True)
    table = json.loads((root / "models.json").read_text())
    return {name: root / rel for name, rel in table.items()}


@pytest.fixture(scope="session")
def real_models() -> dict[str, Path]:
    """The two SavedModels written by old TF releases (shared/real_models, see its README)."""
    base = REPO / "tests" / "real_models"  # a copy of shared/real_models, so CI's fresh clone has them
    return {
        "half_plus_two": base / "saved_model_half_plus_two_mkl",
        "counter": base / "saved_model_counter",
    }


def build_model(script: str, *args: object) -> None:
    """Run a model-building script (a TF1 graph or a TF2 module, written the way its users wrote
    them) in a child process on the CPU, so the test process never imports TensorFlow."""
    subprocess.run([sys.executable, "-c", textwrap.dedent(script), *map(str, args)], check=True, capture_output=True,
                   timeout=300, env={**os.environ, "CUDA_VISIBLE_DEVICES": "-1"})


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


@pytest.fixture(scope="session")
def slim_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """TF1-era artifacts of a tf_slim net (see tests/fixtures/slim_export.py), built once per
    session in a child process: ``ckpt/`` (no signature), ``savedmodel/``, ``renamed/``,
    ``meta_only/``, ``v1/``, ``renumbered/*.pbtxt``."""
    import importlib.util  # noqa: PLC0415

    if importlib.util.find_spec("tf_slim") is None:  # found, not imported: importing it imports TensorFlow
        pytest.skip("tf-slim is in the dev extra: pip install -e '.[dev]'")
    out = tmp_path_factory.mktemp("slim") / "models"
    subprocess.run([sys.executable, str(REPO / "tests" / "fixtures" / "slim_export.py"), str(out)], cwd=REPO,
                   check=True, capture_output=True, timeout=300)
    return out
