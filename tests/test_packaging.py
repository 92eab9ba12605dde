"""The wheel: templates inside the package, TensorFlow only through extras, the console script."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_ships_templates_and_keeps_tensorflow_optional(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path)],
        check=True, capture_output=True, text=True,
    )
    (wheel,) = tmp_path.glob("tftrace-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        entry_points = zf.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    templates = sorted(n for n in names if n.startswith("tracer/templates/"))
    repo_templates = sorted(p.name for p in (REPO / "templates").iterdir() if p.is_file() and p.suffix != ".pyc")
    assert [Path(n).name for n in templates] == repo_templates
    assert "tracer/captures/worker.py" in names and "tracer/report/build.py" in names
    assert "tracer/schemas/report.schema.json" in names  # validates every report read back
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    base = [r for r in requires if "extra ==" not in r]
    assert not any("tensorflow" in r for r in base), base
    assert any("tensorflow-cpu" in r and "2.21" in r and 'extra == "cpu"' in r for r in requires), requires
    assert any("tensorflow[and-cuda]" in r and 'extra == "gpu"' in r for r in requires), requires
    assert "tftrace = tracer.cli:main" in entry_points
