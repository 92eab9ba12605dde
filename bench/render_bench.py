"""The report at 5,000+ ops: render time, page size, and whether the page is interactive.

The report comes from a real comparison (``tftrace compare`` of the wide graph against its
planted twin, one example, isolation off), not a hand-made dict, so its size and shape are
what a user's large model produces. :func:`tracer.report.render.render_report` is then timed
on that ``report.json`` (Graphviz included), in rounds. "Interactive" is checked in headless
Chromium (Playwright, Debian's ``/usr/bin/chromium``) when both are present: the page loads
from ``file://`` to its ready mark, a search for the first divergent op highlights it, and
nothing is logged to the console; otherwise the check is reported as skipped, with why.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tracer.report.render import render_report

from .procs import median, run_child
from .workspace import Model, Workspace

__all__ = ["browser_check", "make_wide_report", "measure_render"]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def make_wide_report(ws: Workspace, a: Model, b: Model, log: Callable[[str], None]) -> Path:
    out = ws.fresh("render", "compare")
    run = run_child([sys.executable, "-m", "tracer.cli", "compare", str(a.savedmodel), str(b.savedmodel),
                     "--inputs", str(ws.inputs(a, 1)), "--isolate", "0", "--out", str(out), "--force"], ok_codes=(0, 1))
    log(f"  compare of the wide graphs: {run.wall_s:.1f} s")
    return out


def measure_render(ws: Workspace, report_dir: Path, rounds: int) -> dict[str, Any]:
    report = json.loads((report_dir / "report.json").read_text())
    times, notices = [], []
    out = ws.fresh("render", "html")
    for _ in range(rounds):
        if out.exists():
            shutil.rmtree(out)
        t0 = time.perf_counter()
        result = render_report(report, out)
        times.append(time.perf_counter() - t0)
        notices = list(result.get("notices", []))
    html = out / "report.html"
    first = (report.get("first_divergence") or {}).get("node")
    return {"ops": len(report["nodes"]), "seconds": median(times), "raw_seconds": times,
            "html_bytes": html.stat().st_size, "notices": notices, "html": str(html),
            "browser": browser_check(html, first)}


def browser_check(html: Path, node: str | None) -> dict[str, Any]:
    """Load the page in headless Chromium; search ``node`` and expect it highlighted."""
    try:
        from playwright.sync_api import sync_playwright  # optional: the dev extra
    except ImportError:
        return {"skipped": "Playwright for Python is not installed (pip install -e '.[dev]')"}
    if not CHROMIUM.exists():
        return {"skipped": f"no Chromium at {CHROMIUM} (apt-get install chromium)"}
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            t0 = time.perf_counter()
            page.goto(html.resolve().as_uri())
            page.wait_for_selector("html[data-ready='1']", timeout=120_000)
            ready_s = time.perf_counter() - t0
            highlighted = None
            if node:
                t1 = time.perf_counter()
                page.fill("#search", node)
                page.press("#search", "Enter")
                page.wait_for_selector("#canvas svg g.hl", timeout=30_000)
                highlighted = time.perf_counter() - t1
            script_ms = page.evaluate("window.tftraceRenderMs")
        finally:
            browser.close()
    return {"ready_s": ready_s, "script_first_paint_ms": script_ms, "search_to_highlight_s": highlighted,
            "console_errors": errors, "interactive": not errors and (highlighted is not None or node is None)}
