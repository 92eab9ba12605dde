"""A reader that goes away (``tftrace compare A B | head -1``) must not change the exit code:
0, 1 and 2 are the contract scripts read (rich's default answer to a broken pipe is exit 1,
which says "diverged")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from test_fuzz import synthetic

REPO = Path(__file__).resolve().parents[1]


def _run_with_reader_gone(args: list[str], stderr_too: bool) -> int:
    read_end, write_end = os.pipe()
    os.close(read_end)  # nobody will read: every write to stdout fails with EPIPE
    try:
        proc = subprocess.run([sys.executable, "-m", "tracer.cli", *args], cwd=REPO, stdout=write_end,
                              stderr=write_end if stderr_too else subprocess.DEVNULL, timeout=300, check=False)
    finally:
        os.close(write_end)
    return proc.returncode


def test_the_exit_code_is_the_verdict_when_the_reader_of_stdout_is_gone(tmp_path: Path) -> None:
    a = synthetic(tmp_path / "a", 2.0, "/nonexistent/model_a")
    same = synthetic(tmp_path / "same", 2.0, "/nonexistent/model_a")
    other = synthetic(tmp_path / "other", 2.5, "/nonexistent/model_b")
    for stderr_too in (False, True):
        out = tmp_path / f"identical_{stderr_too}"
        assert _run_with_reader_gone(["compare", str(a), str(same), "--out", str(out), "--isolate", "0"], stderr_too) == 0
        assert json.loads((out / "report.json").read_text())["verdict"] == "identical"
        out = tmp_path / f"diverged_{stderr_too}"
        assert _run_with_reader_gone(["compare", str(a), str(other), "--out", str(out), "--isolate", "0"], stderr_too) == 1
        assert json.loads((out / "report.json").read_text())["verdict"] == "diverged"
