"""``tftrace compare`` read at 80 columns on a pipe, as a new user reads it (issue 27): lines that
continue under their text with no trailing spaces, the first divergence named once, a one-ulp
observer shift not given as a cause, and a Reproduce block whose command, run as printed on a
machine whose oneDNN default is the other one, gives the same numbers.

oneDNN is left to this CPU's default on purpose in the first run (``TF_ENABLE_ONEDNN_OPTS``
removed from its environment): that default is what the Reproduce block must pin. The second
run sets the variable to the opposite value, which the printed command must override."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO

pytestmark = pytest.mark.slow

SECTIONS = ("DIVERGED", "First divergence", "Top origins", "Outputs", "Detections:", "Rewrites:", "Observer effect",
            "why:", "Reproduce:", "Report:", "Report directory:")


def _tftrace(args: list[str] | str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """The CLI in a fresh process at 80 columns, its stdout a pipe (conftest's run_cli forces 200)."""
    env = {**env, "COLUMNS": "80", "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    command = args if isinstance(args, str) else shlex.join(["tftrace", *args])
    return subprocess.run(["bash", "-c", command], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def _relative(path: Path) -> str:
    return os.path.relpath(path, REPO) if path.is_relative_to(REPO) else str(path)


@pytest.fixture(scope="module")
def default_run(models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}  # this CPU's default decides
    out = tmp_path_factory.mktemp("term") / "bf16"
    a, b = _relative(models["detector_ckpt"]), _relative(models["detector_bf16"])
    proc = _tftrace(["compare", a, b, "--out", str(out)], env)
    assert proc.returncode == 1, proc.stderr
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    return {"proc": proc, "out": out, "a": a, "b": b, "report": report, "env": env}


def test_every_line_fits_80_columns_and_continues_under_its_text(default_run: dict[str, Any]) -> None:
    lines = default_run["proc"].stdout.splitlines()
    for line in lines:
        assert line == line.rstrip(), f"trailing space: {line!r}"
        assert line.startswith(" ") or line.startswith(SECTIONS), f"a wrapped line restarted at column 0: {line!r}"
        assert len(line) <= 80 or len(line.split()) == 1, f"longer than 80 columns: {line!r}"
    first = next(i for i, line in enumerate(lines) if line.startswith("First divergence"))
    assert lines[first] == "First divergence, bitwise and beyond tolerance: dense/MatMul (MatMul), max abs"
    assert lines[first + 1].startswith("  ") and not lines[first + 1].startswith("   ")


def test_the_first_divergence_is_named_once_and_the_observer_shift_is_no_cause(
        default_run: dict[str, Any]) -> None:
    stdout, report = default_run["proc"].stdout, default_run["report"]
    why = [line for line in stdout.splitlines() if line.startswith("why:")]
    assert why == ["why: Mixed precision computes parts of the model in float16/bfloat16 [up to"], stdout
    assert "The first divergence is" not in stdout
    assert "The first divergence is `dense/MatMul` (MatMul)." in report["answers"]["why"]  # the API keeps it
    assert report["answers"]["causes"] == ["mixed_precision"]
    observer = report["observer_effect"]
    a_shifts = observer["a"]["outputs_max_abs_diff"]
    assert 0 < max(a_shifts.values()) < 1e-5, a_shifts  # the float32 side's instrumented run moved by float32 ulps
    # B computes its dense layer in bfloat16. Where oneDNN runs it with bf16 instructions (AVX512_BF16,
    # AMX: this CPU's default decides here), the plain run's fused MatMul and the instrumented run's
    # unfused one round differently: up to 1.5e-4 on `scores` on such a CPU, float32 ulps on others.
    # Either way the shift is said, and stays an order below A vs B on every output: no cause.
    for key, shift in observer["b"]["outputs_max_abs_diff"].items():
        assert shift <= report["outputs"][key]["max_abs"] / 10, (key, shift, report["outputs"][key]["max_abs"])
    assert "Observer effect on A: outputs moved by" in stdout and "fetching every tensor moved" not in stdout
    md = (default_run["out"] / "report.md").read_text(encoding="utf-8")
    assert "The first divergence is" not in md and "- **First divergence, bitwise and beyond tolerance:** " \
        "`dense/MatMul` (MatMul)" in md


def _state(report: dict[str, Any]) -> str:
    return "on" if report["sides"]["a"]["environment"]["onednn"]["enabled"] else "off"


def test_the_reproduce_block_pins_this_cpus_onednn_default(default_run: dict[str, Any]) -> None:
    state, out = _state(default_run["report"]), default_run["out"]
    command = f"tftrace compare {default_run['a']} {default_run['b']} --out {out} --onednn {state} --force"
    lines = default_run["proc"].stdout.splitlines()
    start, facts = lines.index("Reproduce:"), next(i for i, line in enumerate(lines) if line.startswith("  oneDNN:"))
    printed = "\n".join(lines[start + 1:facts])  # broken as a shell continues a line: what a paste runs
    assert all(line.endswith(" \\") for line in lines[start + 1:facts - 1]), printed
    assert shlex.split(printed.replace("\\\n", "")) == shlex.split(command), printed
    assert lines[facts] == f"  oneDNN: {state} on both sides (this CPU's default, TF_ENABLE_ONEDNN_OPTS unset);"
    md = (out / "report.md").read_text(encoding="utf-8")
    section = md[md.index("### Reproduce"):].splitlines()
    assert section[:6] == [
        "### Reproduce", "```sh", command, "```",
        f"- oneDNN: {state} on both sides (this CPU's default, TF\\_ENABLE\\_ONEDNN\\_OPTS unset); the command pins it "
        f"with `--onednn {state}`, as oneDNN's default depends on the CPU.",
        "- Inputs: 8 examples generated (seed 0, N(0,1) floats); the command generates the same ones."]


def test_the_printed_command_run_as_printed_gives_the_same_numbers_under_the_other_default(
        default_run: dict[str, Any]) -> None:
    """The machine the command is pasted on defaults the other way (TF_ENABLE_ONEDNN_OPTS set opposite)."""
    report = default_run["report"]
    lines = default_run["proc"].stdout.splitlines()
    start, facts = lines.index("Reproduce:"), next(i for i, line in enumerate(lines) if line.startswith("  oneDNN:"))
    command = "\n".join(lines[start + 1:facts])  # as the terminal printed it, over lines ending in " \\"
    other = {**default_run["env"], "TF_ENABLE_ONEDNN_OPTS": "0" if _state(report) == "on" else "1"}
    proc = _tftrace(command, other)
    assert proc.returncode == 1, proc.stderr
    again = json.loads((default_run["out"] / "report.json").read_text(encoding="utf-8"))
    assert _state(again) == _state(report)
    assert {k: o["max_abs"] for k, o in again["outputs"].items()} == {k: o["max_abs"] for k, o in report["outputs"].items()}
    assert again["first_divergence"]["node"] == "dense/MatMul"
    assert again["first_divergence"]["max_abs"] == report["first_divergence"]["max_abs"]


def test_the_readme_walks_through_what_80_columns_really_show(models: dict[str, Path], tmp_path: Path) -> None:
    """README's five-minute walk quotes, at 80 columns, the part of the 30-second example's output
    that the example leaves out: the 30-second command, run at 80 columns, prints those lines
    as quoted, one after the other."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    command = re.search(r"^\$ (tftrace compare .* --out out/bf16)$", readme, flags=re.M).group(1)
    quoted = re.search(r"At 80 columns.*?```text\n(.*?)```", readme, flags=re.S).group(1).splitlines()
    assert quoted[0] == "Top origins" and len(quoted) > 10
    proc = _tftrace(command.replace("out/bf16", shlex.quote(str(tmp_path / "bf16"))), dict(os.environ))
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    start = lines.index(quoted[0])
    assert lines[start:start + len(quoted)] == quoted
