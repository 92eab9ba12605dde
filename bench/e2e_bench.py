"""``tftrace compare ckpt/ savedmodel/`` end to end, as the user types it, report included.

Both sides captured in their child processes, graph diff, alignment, metrics, divergence,
isolation (if anything diverged) and report.json/.html/.md: the CLI's wall time from process
start to exit, at batch 1 (one example).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from .procs import median, run_child
from .workspace import Model, Workspace

__all__ = ["measure_end_to_end"]


def measure_end_to_end(ws: Workspace, model: Model, rounds: int, log: Callable[[str], None]) -> dict[str, Any]:
    inputs = ws.inputs(model, 1)
    runs = []
    out = ws.fresh("e2e", model.name)
    for r in range(rounds):
        # --keep-captures: the throughput figures reuse the two captures
        run = run_child([sys.executable, "-m", "tracer.cli", "compare", str(model.ckpt), str(model.savedmodel),
                         "--inputs", str(inputs), "--out", str(out), "--force", "--keep-captures"], ok_codes=(0, 1))
        report = json.loads((out / "report.json").read_text())
        html = out / "report.html"
        runs.append({"seconds": run.wall_s, "exit_code": run.returncode, "verdict": report["verdict"],
                     "html_bytes": html.stat().st_size if html.exists() else 0})
        log(f"  end to end round {r + 1}/{rounds}: {run.wall_s:.1f} s, verdict {report['verdict']}")
    return {"model": model.name, "batch": 1, "seconds": median([x["seconds"] for x in runs]), "runs": runs,
            "report_dir": str(out), "html": runs[-1]["html_bytes"] > 0}
