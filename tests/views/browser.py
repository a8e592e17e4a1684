"""Real-browser harness: open a local HTML page in Debian's chromium.

Uses Playwright's Python package driving ``/usr/bin/chromium`` (installed by
``scripts/install_chromium.sh``); Playwright's own browser downloads
(``playwright install``) are never used. Every request to a non-local URL is
recorded and aborted, so a page that tries the network fails fast and loudly.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:")

# circuitsvis views are divs carrying this attribute (see perm_circuits.views.html).
_VIEW_SELECTOR = "[data-circuitsvis]"
_PLOTLY_SELECTOR = ".plotly-graph-div"

_COUNT_JS = """([viewSel, plotSel]) => {
  const views = [...document.querySelectorAll(viewSel)];
  const plots = [...document.querySelectorAll(plotSel)];
  return {
    views_total: views.length,
    views_mounted: views.filter(v => v.childElementCount > 0 && v.innerHTML.trim()).length,
    plotly_total: plots.length,
    plotly_rendered: plots.filter(p => p.querySelector('svg.main-svg')).length,
  };
}"""

_VISIBLE_JS = """(selector) => {
  const all = [...document.querySelectorAll(selector)];
  const seen = all.filter(e => { const r = e.getBoundingClientRect();
    return (r.width > 0 || r.height > 0) && r.top < window.innerHeight && r.bottom > 0; });
  return [all.length, seen.length];
}"""

_ALL_RENDERED_JS = """([viewSel, plotSel]) =>
  [...document.querySelectorAll(viewSel)].every(v => v.childElementCount > 0) &&
  [...document.querySelectorAll(plotSel)].every(p => p.querySelector('svg.main-svg'))"""


@dataclass
class PageReport:
    """What happened when a page was opened in chromium."""

    url: str
    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    remote_requests: list[str] = field(default_factory=list)
    views_total: int = 0
    views_mounted: int = 0
    plotly_total: int = 0
    plotly_rendered: int = 0
    rendered_in_time: bool = False
    screenshot: Path | None = None
    counts: dict[str, tuple[int, int]] = field(default_factory=dict)
    """``count`` selector name -> (elements on the page, elements drawn on the first screen)."""

    @property
    def ok(self) -> bool:
        """Everything mounted, no errors, no network."""
        return (
            self.rendered_in_time
            and self.views_mounted == self.views_total
            and self.plotly_rendered == self.plotly_total
            and not (self.console_errors or self.page_errors or self.remote_requests)
        )


def chromium_available() -> bool:
    """True when Debian's chromium is installed at ``/usr/bin/chromium``."""
    return CHROMIUM.is_file()


def require_chromium() -> Path:
    """Skip the calling test (with a reason) when ``/usr/bin/chromium`` is absent."""
    if not chromium_available():
        pytest.skip(f"{CHROMIUM} not found; run scripts/install_chromium.sh (Debian chromium)")
    return CHROMIUM


@pytest.fixture
def chromium() -> Path:
    """Fixture form of ``require_chromium``: path of the chromium binary."""
    return require_chromium()


def _is_local(url: str) -> bool:
    """URL schemes that never touch the network."""
    return url.startswith(LOCAL_SCHEMES)


_SHARED: list = []
"""The browser of an active :func:`one_browser` block (at most one)."""


@contextlib.contextmanager
def one_browser():
    """Within this block every :func:`open_page` opens its page in one chromium (a fresh browser
    context each time: no cookie, cache or storage is shared) instead of launching its own (about
    a second each).  A test module with several pages uses it as a module fixture."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        _SHARED.append(browser)
        try:
            yield browser
        finally:
            _SHARED.remove(browser)
            browser.close()


@contextlib.contextmanager
def _browser():
    """The :func:`one_browser` browser when one is active, else a chromium of its own."""
    if _SHARED:
        yield _SHARED[-1]
    else:
        with one_browser() as browser:
            yield browser


def open_page(
    path: str | Path,
    screenshot: str | Path | None = None,
    *,
    timeout_s: float = 10.0,
    viewport: tuple[int, int] = (1280, 900),
    count: dict[str, str] | None = None,
    first_screen: str | Path | None = None,
) -> PageReport:
    """Open a local HTML file in headless chromium and report on it.

    Waits for the load event and then (up to ``timeout_s``) for every
    circuitsvis view div to have rendered children and every plotly figure to
    have an ``svg.main-svg``. Records console errors, page errors and every
    request whose URL is not file:/data:/blob:/about: (those are aborted).

    Args:
        path: HTML file to open (as a file:// URL).
        screenshot: Where to save a full-page PNG (none if ``None``).
        timeout_s: Budget for load + rendering.
        viewport: Browser viewport (width, height).
        count: name -> CSS selector; ``report.counts[name]`` is (elements on the page, elements
            drawn within the first screen).
        first_screen: Where to save a PNG of the first screen only (the viewport, unscrolled).
    """
    from playwright.sync_api import Error as PlaywrightError

    url = Path(path).resolve().as_uri()
    report = PageReport(url=url)
    with _browser() as browser:
        context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]}, service_workers="block")
        try:
            _record_network(context, report)
            page = context.new_page()
            page.on("console", lambda m: _record_console(m, report))
            page.on("pageerror", lambda e: report.page_errors.append(str(e)))
            page.goto(url, wait_until="load", timeout=timeout_s * 1000)
            selectors = [_VIEW_SELECTOR, _PLOTLY_SELECTOR]
            try:
                page.wait_for_function(_ALL_RENDERED_JS, arg=selectors, timeout=timeout_s * 1000)
                report.rendered_in_time = True
            except PlaywrightError:
                report.rendered_in_time = False
            for key, value in page.evaluate(_COUNT_JS, selectors).items():
                setattr(report, key, value)
            for name, selector in (count or {}).items():
                report.counts[name] = tuple(page.evaluate(_VISIBLE_JS, selector))
            if first_screen is not None:
                page.screenshot(path=str(first_screen), full_page=False)
            if screenshot is not None:
                report.screenshot = Path(screenshot)
                page.screenshot(path=str(report.screenshot), full_page=True)
        finally:
            context.close()
    return report


def _record_network(context, report: PageReport) -> None:
    """Record every non-local request of ``context`` and abort it."""

    def on_request(request) -> None:
        if not _is_local(request.url):
            report.remote_requests.append(request.url)

    def on_route(route) -> None:
        if _is_local(route.request.url):
            route.continue_()
        else:
            route.abort("blockedbyclient")

    context.on("request", on_request)
    context.route("**/*", on_route)


def _record_console(message, report: PageReport) -> None:
    """Keep console messages of type ``error``."""
    if message.type == "error":
        report.console_errors.append(message.text)
