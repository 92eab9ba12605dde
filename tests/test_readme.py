"""The console examples of README.md and docs/*.md are run as written, so the documentation cannot rot.

Every ```console block line starting with ``$ tftrace`` is executed from the repository root;
the lines shown after it (a ``...`` line stands for lines left out) must appear in its output, in
their order. A path under ``out/`` is the test's own directory.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from conftest import REPO, run_cli

pytestmark = pytest.mark.slow


def _examples() -> list[tuple[str, list[str]]]:
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]  # examples moved to docs/ still run
    text = "\n".join(page.read_text(encoding="utf-8") for page in pages)
    examples = []
    for block in re.findall(r"```console\n(.*?)```", text, flags=re.S):
        lines = block.splitlines()
        for i, line in enumerate(lines):
            if line.startswith("$ tftrace "):
                shown = []
                for out in lines[i + 1:]:
                    if out.startswith("$ "):
                        break
                    if out.strip() != "...":
                        shown.append(out.strip())
                examples.append((line[2:], shown))
    return examples


def test_readme_has_examples():
    assert _examples(), "README.md lost its console examples"


@pytest.mark.parametrize(("command", "shown"), _examples(), ids=lambda v: v if isinstance(v, str) else "")
def test_readme_example_runs_as_documented(models, tmp_path: Path, command: str, shown: list[str]):
    assert (REPO / "sample_models" / "generated" / ".complete").exists() or pytest.skip("needs `make models`")
    args = shlex.split(command)[1:]
    args = [str(tmp_path / a) if a.startswith("out/") else a for a in args]
    proc = run_cli(*args, "--force")
    assert proc.returncode in (0, 1), proc.stderr
    # a command broken over lines as a shell continues one (" \" at their ends) reads as one line
    output = " ".join((proc.stdout + proc.stderr).replace(" \\\n", " ").split())
    at = 0
    for line in shown:
        expected = " ".join(_OUT.sub(f"{tmp_path}/out/", line).split())
        assert expected in output[at:], (expected, output[at:at + 3000])
        at = output.index(expected, at) + len(expected)


_OUT = re.compile(r"(?<![\w/-])out/")  # README's out/bf16, run in the test's directory
