"""The HTML report in a real headless Chromium: verdict, category filter, injected markup.

Needs Debian's Chromium and Playwright for Python (no browser download):

    apt-get install -y chromium        # /usr/bin/chromium, or set GPUCI_CHROMIUM
    pip install playwright             # never `playwright install`: we use the system one

Without them the tests skip, except in CI (CI=true), where they fail. Screenshots go to
$GPUCI_ARTIFACTS (default: the test's tmp_path).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpuci.formats import read_verdict
from gpuci.model import Category, Root, TestVerdict
from gpuci.report.render import render_html

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # a real Chromium starts: seconds

VERDICT_ALL = Path(__file__).parent / "data" / "report" / "verdict_all.json"
VERDICT_ROOTS = Path(__file__).parent / "data" / "report" / "verdict_roots.json"
CHROMIUM = os.environ.get("GPUCI_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# If any of these ran, it would change the page's title or set a global.
PAYLOAD_ID = (
    "tests/gpu/test_x.py::test_inject[<img src=x onerror=\"document.title='pwned';"
    'window.__pwned=1">]'
)
PAYLOAD_MESSAGE = "<script>window.__pwned=2</script><svg onload=window.__pwned=3>"
TITLE = "gpuci: fail — abc123def"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; CI must run the browser tests")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (pip install playwright)")
    if not (Path(CHROMIUM).is_file() or shutil.which(CHROMIUM)):
        _unavailable(f"no Chromium at {CHROMIUM} (apt-get install -y chromium)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    directory = Path(os.environ.get("GPUCI_ARTIFACTS") or tmp_path)
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@pytest.fixture
def report_file(tmp_path: Path) -> Path:
    verdict = read_verdict(VERDICT_ALL)
    injected = TestVerdict(
        id=PAYLOAD_ID,
        file="tests/gpu/test_x.py",
        category=Category.FAILED,
        outcomes={"isolated": "failed", "parallel": "failed", "suite": "failed"},
        reruns=("failed", "failed"),
        message=PAYLOAD_MESSAGE,
    )
    path = tmp_path / "report.html"
    path.write_text(render_html(replace(verdict, tests=(*verdict.tests, injected))), "utf-8")
    return path


@pytest.fixture
def roots_file(tmp_path: Path) -> Path:
    """verdict_roots.json, plus a root whose culprit and sanitizer output are payloads."""
    verdict = read_verdict(VERDICT_ROOTS)
    victim = TestVerdict(
        id="tests/gpu/test_x.py::test_victim",
        file="tests/gpu/test_x.py",
        category=Category.ORDER_DEPENDENT,
        outcomes={"isolated": "passed", "parallel": "passed", "suite": "failed"},
        reruns=("passed", "passed"),
        message=PAYLOAD_MESSAGE,
        culprits=(PAYLOAD_ID,),
        search="bisection: 1 run(s)",
        sanitizer=PAYLOAD_MESSAGE,
    )
    root = Root(
        culprits=(PAYLOAD_ID,),
        category=Category.ORDER_DEPENDENT,
        victims=(victim.id,),
        reproduce=f"python -m pytest '{PAYLOAD_ID}' {victim.id}",
    )
    injected = replace(verdict, tests=(*verdict.tests, victim), roots=(*verdict.roots, root))
    path = tmp_path / "roots.html"
    path.write_text(render_html(injected), "utf-8")
    return path


class _Watch:
    """What a page asked the network for and what it logged."""

    def __init__(self, page: Any) -> None:
        self.requests: list[str] = []
        self.console: list[str] = []
        page.on("request", lambda request: self.requests.append(request.url))
        page.on("console", lambda msg: self.console.append(f"{msg.type}: {msg.text}"))
        page.on("pageerror", lambda error: self.console.append(f"pageerror: {error}"))


def _open(browser: Any, path: Path, **context: Any) -> tuple[Any, Any, _Watch]:
    ctx = browser.new_context(**context)
    page = ctx.new_page()
    page.set_default_timeout(15_000)
    watch = _Watch(page)
    page.goto(path.as_uri())
    return ctx, page, watch


def test_report_in_chromium(browser: Any, report_file: Path, artifacts: Path) -> None:
    ctx, page, watch = _open(browser, report_file, viewport={"width": 1280, "height": 900})
    try:
        # The verdict opens the page.
        assert page.locator("h1").inner_text() == "FAIL gpuci verdict"
        assert "3 new isolation regressions" in page.locator("ul.reasons").inner_text()

        # The injected markup is shown as text, and nothing of it ran or loaded.
        assert page.title() == TITLE
        assert page.evaluate("window.__pwned") is None
        assert page.locator("img").count() == 0
        ids = page.locator("code.id").all_inner_texts()
        assert PAYLOAD_ID in ids
        assert PAYLOAD_MESSAGE in page.locator("div.msg").all_inner_texts()
        assert watch.requests == [report_file.as_uri()]
        # Our own script and style passed the CSP (the filter bar only shows if it ran).
        assert [m for m in watch.console if "error" in m.split(":")[0]] == []
        assert page.locator("nav#filter").is_visible()

        # The category filter hides and shows rows, and a section left empty.
        flaky = page.locator('tr[data-cat="flaky"]')
        failed = page.locator('tr[data-cat="failed"]')
        assert flaky.count() == 1 and failed.count() == 3
        assert flaky.is_visible() and failed.first.is_visible()
        page.locator('nav#filter input[value="flaky"]').uncheck()
        assert not flaky.is_visible() and not page.locator("section#flaky").is_visible()
        assert failed.first.is_visible()
        page.locator('nav#filter input[value="flaky"]').check()
        assert flaky.is_visible() and page.locator("section#flaky").is_visible()

        # thread-unsafe: filtered like the other isolation regressions, in their colour
        race = page.locator('tr[data-cat="thread-unsafe"]')
        assert race.count() == 1 and race.is_visible()
        page.locator('nav#filter input[value="thread-unsafe"]').uncheck()
        assert not race.is_visible() and page.locator("section#regressions").is_visible()
        page.locator('nav#filter input[value="thread-unsafe"]').check()
        assert race.is_visible()
        color = "el => getComputedStyle(el).color"
        assert page.locator("tr .cat.c-thread-unsafe").evaluate(color) == (
            page.locator("tr .cat.c-concurrency").evaluate(color)
        )

        passed = page.locator('details.group[data-cat="passed"]').first
        assert passed.is_visible()
        page.get_by_role("button", name="findings only").click()
        assert not passed.is_visible() and failed.first.is_visible() and flaky.is_visible()
        page.get_by_role("button", name="all").click()
        assert passed.is_visible()

        page.screenshot(path=str(artifacts / "report-wide.png"), full_page=True)
    finally:
        ctx.close()


def test_report_in_a_narrow_window(browser: Any, report_file: Path, artifacts: Path) -> None:
    ctx, page, _ = _open(browser, report_file, viewport={"width": 400, "height": 800})
    try:
        # Wide tables scroll inside their box; the page itself does not scroll sideways.
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 1
        assert page.locator("svg.timeline rect.bar").count() == 5
        page.screenshot(path=str(artifacts / "report-narrow.png"), full_page=True)
    finally:
        ctx.close()


def test_report_without_javascript_shows_everything(browser: Any, report_file: Path) -> None:
    ctx, page, _ = _open(browser, report_file, java_script_enabled=False)
    try:
        assert not page.locator("nav#filter").is_visible()
        rows = page.locator("tr[data-cat]")
        assert rows.count() == 12
        assert all(rows.nth(i).is_visible() for i in range(rows.count()))
        assert page.title() == TITLE
    finally:
        ctx.close()


OOB = "tests/gpu/test_oob.py::test_scatter_oob"
OOB_COMMAND = (
    f"cd /builds/team/project && CUDA_VISIBLE_DEVICES=0 python -m pytest {OOB}"
    " tests/gpu/test_oob.py::test_after_oob"
)


def test_root_cards_in_chromium(browser: Any, roots_file: Path, artifacts: Path) -> None:
    from playwright.sync_api import expect

    ctx, page, watch = _open(
        browser,
        roots_file,
        viewport={"width": 1280, "height": 900},
        permissions=["clipboard-read", "clipboard-write"],
    )
    try:
        cards = page.locator("article.card")
        assert cards.count() == 6
        first = page.locator("article#root-1")
        headline = first.locator("h3").inner_text()
        assert headline.startswith(f"{OOB} (failed) broke 5 later tests")
        # The payload culprit is shown as text, and nothing of it ran or loaded.
        assert page.title() == TITLE
        assert page.evaluate("window.__pwned") is None
        assert page.locator("img").count() == 0
        assert PAYLOAD_ID in page.locator("article.card h3 code").all_inner_texts()
        assert PAYLOAD_MESSAGE in page.locator("div.san pre").all_inner_texts()
        assert watch.requests == [roots_file.as_uri()]
        assert [m for m in watch.console if "error" in m.split(":")[0]] == []
        page.screenshot(path=str(artifacts / "report-roots.png"), full_page=True)

        # The copy button copies the minimal command, and says so.
        button = first.locator("button.copy")
        assert button.is_visible() and button.inner_text() == "copy"
        button.click()
        expect(button).to_have_text("copied")
        assert page.evaluate("navigator.clipboard.readText()") == OOB_COMMAND
        expect(button).to_have_text("copy", timeout=5_000)  # back after two seconds

        # A victim's row links to its root's card, and the card back to the row.
        victim = page.locator("tr[data-cat]", has=page.locator("code.id", has_text="test_sum"))
        victim.locator("div.rootref a").click()
        assert page.evaluate("location.hash") == "#root-1"
        assert page.evaluate("document.querySelector(':target').id") == "root-1"
        assert first.is_visible() and _in_view(page, "#root-1")
        page.screenshot(path=str(artifacts / "report-root-card.png"))
        first.locator("ul.victims a", has_text="test_sum").click()
        row = page.evaluate("document.querySelector(':target').id")
        assert row.startswith("t-") and _in_view(page, f"#{row}")
        assert "test_sum" in page.locator(f"#{row} code.id").inner_text()

        # The category filter hides a card with its victims' rows.
        page.locator('nav#filter input[value="concurrency"]').uncheck()
        assert not page.locator("article#root-4").is_visible() and first.is_visible()
    finally:
        ctx.close()


def test_copy_falls_back_to_selecting_the_command(browser: Any, roots_file: Path) -> None:
    ctx = browser.new_context()
    # As where the Clipboard API is missing (an old browser, an insecure context).
    ctx.add_init_script("Object.defineProperty(navigator, 'clipboard', {value: undefined})")
    page = ctx.new_page()
    try:
        page.goto(roots_file.as_uri())
        assert page.evaluate("navigator.clipboard") is None
        page.locator("article#root-1 button.copy").click()
        said = page.locator("article#root-1 button.copy").inner_text()
        assert said in ("copied", "selected: press Ctrl+C")
        assert page.evaluate("window.getSelection().toString()") == OOB_COMMAND
    finally:
        ctx.close()


def test_root_cards_in_a_narrow_window(browser: Any, roots_file: Path) -> None:
    ctx, page, _ = _open(browser, roots_file, viewport={"width": 400, "height": 800})
    try:
        # Long culprit ids and commands wrap; the evidence table scrolls in its box.
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 1
        assert page.locator("article#root-1 button.copy").is_visible()
    finally:
        ctx.close()


def test_copy_buttons_need_javascript(browser: Any, roots_file: Path) -> None:
    ctx, page, _ = _open(browser, roots_file, java_script_enabled=False)
    try:
        assert page.locator("article.card").count() == 6
        assert page.locator("article#root-1 div.repro code").is_visible()
        assert not page.locator("button.copy").first.is_visible()
    finally:
        ctx.close()


def _in_view(page: Any, selector: str) -> bool:
    """The element's top is on screen, below the sticky filter bar."""
    top = page.evaluate(f"document.querySelector('{selector}').getBoundingClientRect().top")
    bar = page.evaluate("document.getElementById('filter').getBoundingClientRect().bottom")
    return bool(bar <= top < page.viewport_size["height"])


@pytest.mark.slow
def test_report_of_50000_tests_opens_and_filters_in_seconds(browser: Any, tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from test_report import BIG, _big_verdict

    path = tmp_path / "big.html"
    path.write_text(render_html(_big_verdict(BIG)), "utf-8")
    ctx = browser.new_context()
    try:
        page = ctx.new_page()
        start = time.perf_counter()
        page.goto(path.as_uri())
        page.evaluate("document.body.offsetHeight")  # forces the first layout
        opened = time.perf_counter() - start
        assert opened < 20, opened  # about 2.5 s on 2 cores
        failed = page.locator('tr[data-cat="failed"]').first
        assert failed.is_visible()
        start = time.perf_counter()
        page.locator('nav#filter input[value="failed"]').uncheck()
        assert not failed.is_visible()
        assert time.perf_counter() - start < 10
    finally:
        ctx.close()
