"""The report page in a real headless Chromium: no console errors, no network, clicks and search work.

Debian's ``/usr/bin/chromium`` driven by Playwright for Python (no browser download). Each
report is opened from ``file://``; screenshots and the time to first render of a large report
go to ``tests/_output/`` (gitignored) so a person can look at them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tracer.report.render import render_report

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
FIXTURES = Path(__file__).parent / "fixtures"
OUTPUT = Path(__file__).parent / "_output"
ORIGIN = "block2/bn/FusedBatchNormV3"
ORIGIN_FILL = "rgb(200, 16, 46)"  # STYLES["origin"].fill, #c8102e

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed at /usr/bin/chromium "
                                                     "(apt-get install chromium)"),
]
sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed (pip install playwright)")


@dataclass
class Opened:
    page: Any
    url: str
    seconds: float
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        launched = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield launched
        launched.close()


def open_report(browser: Any, html: Path) -> Opened:
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    opened = Opened(page, html.resolve().as_uri(), 0.0)
    page.on("console", lambda m: opened.errors.append(m.text) if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: opened.errors.append(str(e)))
    page.on("request", lambda r: opened.requests.append(r.url))
    page.on("dialog", lambda d: (opened.dialogs.append(d.message), d.dismiss()))
    started = time.monotonic()
    page.goto(opened.url)
    page.wait_for_selector("html[data-ready='1']", timeout=60_000)
    opened.seconds = time.monotonic() - started
    return opened


def fill_of(page: Any, selector: str) -> str:
    return page.eval_on_selector(f"{selector} > rect, {selector} > polygon, {selector} > path",
                                 "e => getComputedStyle(e).fill")


def centred_in_visible_canvas(page: Any, selector: str) -> bool:
    """The node's centre lies in the middle third of the canvas part that the drawer leaves visible."""
    return page.evaluate("""sel => {
        const c = document.getElementById('canvas').getBoundingClientRect();
        const d = document.getElementById('details');
        const right = d.hidden ? c.right : Math.min(c.right, d.getBoundingClientRect().left);
        const b = document.querySelector(sel).getBoundingClientRect();
        const x = b.left + b.width / 2, y = b.top + b.height / 2, w = right - c.left;
        return x > c.left + w / 3 && x < c.left + 2 * w / 3 && y > c.top + c.height / 4 && y < c.bottom - c.height / 4;
    }""", selector)


def wait_for_scroll_to_settle(page: Any) -> None:
    """Wait until the page has not scrolled for five animation frames.

    The page scrolls smoothly (``html { scroll-behavior: smooth }``), also when Playwright scrolls
    the search box into view to fill it; until it stops, the canvas moves under a fixed mouse
    position, so a pointer event aimed at it from an earlier bounding box can miss it.
    """
    page.evaluate("""() => new Promise(done => {
        let last = NaN, still = 0;
        const tick = () => {
            still = window.scrollY === last ? still + 1 : 0;
            last = window.scrollY;
            if (still >= 5) done(); else requestAnimationFrame(tick);
        };
        requestAnimationFrame(tick);
    })""")


def table_names(page: Any) -> list[str]:
    return page.eval_on_selector_all("#op-table tbody tr td:nth-child(2)", "tds => tds.map(t => t.title)")


def test_detector_report_in_chromium(browser: Any, tmp_path: Path) -> None:
    report = json.loads((FIXTURES / "report_detector_planted.json").read_text(encoding="utf-8"))
    render_report(report, tmp_path)
    opened = open_report(browser, tmp_path / "report.html")
    page = opened.page
    assert opened.errors == [] and opened.dialogs == []
    assert opened.requests == [opened.url]  # nothing but the file itself
    idx = list(report["nodes"]).index(ORIGIN)
    assert page.get_attribute(".tab.active", "data-view") == "near"  # opens on the first divergence, fitted
    assert fill_of(page, f"#near_n{idx}") == ORIGIN_FILL
    page.screenshot(path=str(OUTPUT / "report_detector.png"), full_page=True)
    page.click(".tab[data-view=full]")
    origin = f"#full_n{idx}"
    assert fill_of(page, origin) == ORIGIN_FILL

    # Clicking the origin opens its details: name, type, metrics, isolation.
    page.click(origin)
    assert page.is_visible("#details")
    assert page.text_content("#details h2") == "FusedBatchNormV3"
    assert page.text_content("#details .fullname") == ORIGIN
    metrics = page.eval_on_selector_all("#details .mgrid div", "ds => ds.map(d => d.innerText.replace('\\n', '='))")
    assert metrics[:4] == ["MAX ABS=0.0123", "MAX REL=0.0093", "MEAN ABS=0.00168", "ULP MAX=78151"]
    assert "own error" in page.text_content("#details")
    page.screenshot(path=str(OUTPUT / "report_detector_details.png"))

    # The table: filter by text, then by status; sort by max rel, worst first.
    page.keyboard.press("Escape")  # the drawer overlays the right of the page
    assert page.is_hidden("#details")
    page.fill("#op-filter", "FusedBatchNorm")
    # the first divergence first, then the ops beyond tolerance, then the rest, each in flow order
    assert table_names(page) == [f"block{k}/bn/FusedBatchNormV3" for k in (2, 3, 4, 1)]
    page.fill("#op-filter", "")
    page.select_option("#status-filter", "origin")
    assert table_names(page) == [ORIGIN]
    assert page.text_content("#op-count") == "1 of 112 ops"
    page.select_option("#status-filter", "")
    page.click("#op-table th[data-key=max_rel]")
    assert table_names(page)[:2] == ["class_head/MatMul", "class_head/BiasAdd"]  # 0.0412, ties in graph order

    # Search finds an op by name, centres it and marks it.
    page.fill("#search", "block3/relu")
    page.press("#search", "Enter")
    target = f"#full_n{list(report['nodes']).index('block3/relu')}"
    page.wait_for_timeout(100)
    assert "hl" in page.get_attribute(target, "class")
    assert centred_in_visible_canvas(page, target)
    assert page.text_content("#details .fullname") == "block3/relu"

    # Pan and zoom move the viewBox: aim at the canvas once the page has stopped scrolling.
    wait_for_scroll_to_settle(page)
    before = page.get_attribute("#canvas svg", "viewBox")
    box = page.locator("#canvas").bounding_box()
    aimed_at = page.evaluate("([x, y]) => document.elementFromPoint(x, y).closest('#canvas') !== null",
                             [box["x"] + 200, box["y"] + 200])
    assert aimed_at, "the point the mouse wheel is sent to is not on the graph canvas"
    page.mouse.move(box["x"] + 200, box["y"] + 200)
    page.mouse.wheel(0, -300)  # dispatched without waiting for the handler: wait for the viewBox to move
    page.wait_for_function("b => document.querySelector('#canvas svg').getAttribute('viewBox') !== b", arg=before)
    zoomed = page.get_attribute("#canvas svg", "viewBox")
    assert float(zoomed.split()[2]) < float(before.split()[2])
    page.mouse.down()
    page.mouse.move(box["x"] + 320, box["y"] + 260, steps=4)
    page.mouse.up()
    panned = page.get_attribute("#canvas svg", "viewBox")
    assert panned.split()[2:] == zoomed.split()[2:] and panned.split()[:2] != zoomed.split()[:2]
    assert opened.errors == [] and opened.requests == [opened.url]
    page.close()


def test_hostile_names_stay_text_in_chromium(browser: Any, tmp_path: Path) -> None:
    report = json.loads((FIXTURES / "report_hostile.json").read_text(encoding="utf-8"))
    render_report(report, tmp_path)
    opened = open_report(browser, tmp_path / "report.html")
    page = opened.page
    names = list(report["nodes"])
    for k in (0, 4, 8):  # <script>…, new\nline, </script><script>…
        page.click(f"#full_n{k}")
        assert page.text_content("#details .fullname") == names[k]
    page.fill("#search", "日本")
    assert page.text_content("#search-results li .full") == names[5]
    assert opened.dialogs == [] and opened.errors == [] and opened.requests == [opened.url]
    assert page.evaluate("document.querySelectorAll('script').length") == 3
    page.screenshot(path=str(OUTPUT / "report_hostile.png"), full_page=True)
    page.close()


def test_a_large_report_in_chromium(browser: Any, tmp_path: Path) -> None:
    from test_report_render import synthetic_report  # tests/ is on sys.path under pytest's default import mode

    report = synthetic_report(2400)
    started = time.monotonic()
    render_report(report, tmp_path)
    render_s = time.monotonic() - started
    opened = open_report(browser, tmp_path / "report.html")
    page = opened.page
    first_render_ms = page.evaluate("window.tftraceRenderMs")
    (OUTPUT / "browser_2400.json").write_text(json.dumps({
        "ops": len(report["nodes"]), "render_report_s": round(render_s, 2), "load_to_ready_s": round(opened.seconds, 2),
        "script_first_render_ms": round(first_render_ms), "html_bytes": (tmp_path / "report.html").stat().st_size}))
    assert opened.errors == [] and opened.requests == [opened.url]
    assert opened.seconds < 30
    names = list(report["nodes"])
    first = names.index(report["first_divergence"]["node"])
    assert page.get_attribute(".tab.active", "data-view") == "near"
    assert fill_of(page, f"#near_n{first}") == ORIGIN_FILL
    page.screenshot(path=str(OUTPUT / "report_2400.png"))

    # An op far from the divergence: search switches to a view that holds it.
    far = "model/stage3/unit2/relu"
    page.fill("#search", far)
    page.press("#search", "Enter")
    page.wait_for_timeout(100)
    view = page.get_attribute("#canvas", "data-view")
    target = f"#{view}_n{names.index(far)}"
    assert view.startswith("scope") and page.get_attribute("#canvas svg g.graph", "id") == view
    assert "hl" in page.get_attribute(target, "class")
    assert centred_in_visible_canvas(page, target)

    # The overview: the scope holding the origin is drawn in the origin colour; clicking it lists its ops.
    page.click("[data-view=overview]")
    page.keyboard.press("Escape")
    box = page.evaluate("""n => { const d = JSON.parse(document.getElementById('page-data').textContent);
        return d.scopes.find(s => s.members.includes(n)).box; }""", first)
    assert fill_of(page, f"#{box}") == ORIGIN_FILL
    page.click(f"#{box}")
    assert page.text_content("#details h2") == "stage4"  # unit 34 of 171, 8 units a stage
    assert page.text_content("#details ul.ops li .linkish") == report["first_divergence"]["node"]
    page.select_option("#status-filter", "origin")
    assert len(table_names(page)) == len(report["origins"]) == 2
    page.screenshot(path=str(OUTPUT / "report_2400_overview.png"))
    assert opened.errors == [] and opened.requests == [opened.url]
    page.close()


@pytest.fixture(autouse=True)
def _output_dir() -> None:
    OUTPUT.mkdir(exist_ok=True)
