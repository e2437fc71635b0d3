"""The HTML report of a recorded project, opened in a real headless browser.

A small project, ``shop``, is recorded by four real pytest runs with the runstore plugin and
pytest-cov (a code change breaks a test from the third run on, with a traceback into the
project's code, and fixes one that failed before; a flaky one; a skipped one; three of growing
duration), then
``runstore report -o FILE`` writes its page and Debian's chromium, driven by playwright, opens
it: the runs chart with its bars, the history matrix, the signature groups, the slowest tests,
the coverage and the failing tests' sections (``#test-<12 hex of the node id's sha1>``) are
there and visible; a bar of the runs chart leads to its run's section; the page logs no error
and asks for nothing but its own file; with JavaScript off every table is still there.

The full-page screenshot (1280 px wide) goes to ``tmp_path``, or to ``docs/report.png``, which
the README shows, with ``RUNSTORE_UPDATE_SCREENSHOTS=1``.

The browser is ``$RUNSTORE_TEST_CHROMIUM``, else ``chromium`` on ``PATH`` (Debian's, which
``.ci/run`` installs when missing), launched with playwright's ``executable_path``: playwright
downloads no browser of its own. Without it the tests are skipped, except under CI, where they
fail, as a test whose acceptance inputs are missing does.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import attrs
import pytest
from playwright.sync_api import (
    Browser,
    ConsoleMessage,
    Page,
    ViewportSize,
    expect,
    sync_playwright,
)

from conftest import in_ci

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = ROOT / "docs" / "report.png"
VIEWPORT: ViewportSize = {"width": 1280, "height": 900}
CHROMIUM_ARGS = [
    "--no-sandbox",  # CI runs as root, where chromium's sandbox refuses to start
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
RUNS = 4
"""Recorded runs of ``shop``; before run ``CHANGED_AT`` the code changes (``CHANGES``)."""
CHANGED_AT = 3

BROKEN = "tests/test_cart.py::test_discount_of_a_sale"
"""Passes in runs 1-2; from run 3 on fails in the project's own code (a ValueError): the
change made ``discount`` take a fraction."""
FLAKY = "tests/test_cart.py::test_checkout"
"""Fails in runs 2 and 4 (it reads ``SHOP_RUN``), passes in 1 on the same code as 2: flaky,
failing in the newest run."""
FIXED = "tests/test_stock.py::test_reserve_an_unknown_name"
"""Fails in runs 1-2 (a KeyError in the project's code); the change fixes it."""
SKIPPED = "tests/test_stock.py::test_restock_from_supplier"
SLOWEST = "tests/test_search.py::test_search[3]"

PROJECT = {
    "shop/__init__.py": "",
    "shop/cart.py": """\
        def total(prices):
            return sum(prices)


        def discount(amount, percent):
            if not 0 <= percent <= 100:
                raise ValueError(f"percent must be from 0 to 100, got {percent}")
            return round(amount * (100 - percent) / 100, 2)


        def shipping(weight_kg):
            if weight_kg > 30:
                return None
            return 5 + weight_kg
        """,
    "shop/stock.py": """\
        def reserve(name, count, stock):
            if stock[name] < count:
                raise LookupError(name)
            stock[name] -= count
            return stock[name]


        def restock(name, count, supplier):
            order = supplier.order(name, count)
            order.wait()
            return order.count
        """,
    "tests/__init__.py": "",
    "tests/test_cart.py": """\
        import os

        from shop.cart import discount, total


        def test_total():
            assert total([120, 250]) == 370


        def test_discount_of_a_sale():
            assert discount(200, 15) == 170


        def test_checkout():
            assert os.environ["SHOP_RUN"] not in ("2", "4"), "the payment stub timed out"
        """,
    "tests/test_stock.py": """\
        import pytest

        from shop.stock import reserve


        def test_reserve():
            assert reserve("apple", 1, {"apple": 3}) == 2


        def test_reserve_an_unknown_name():
            assert reserve("kiwi", 0, {"apple": 3}) == 0


        @pytest.mark.skip(reason="needs the supplier's sandbox")
        def test_restock_from_supplier():
            pass
        """,
    "tests/test_search.py": """\
        import time

        import pytest


        @pytest.mark.parametrize("n", [1, 2, 3])
        def test_search(n):
            time.sleep(0.03 * n)
        """,
}
CHANGES = {
    "shop/cart.py": PROJECT["shop/cart.py"].replace(
        "0 <= percent <= 100", "0 <= percent <= 1"
    ).replace("from 0 to 100", "from 0 to 1").replace("(100 - percent) / 100", "(1 - percent)"),
    "shop/stock.py": PROJECT["shop/stock.py"].replace(
        "stock[name] < count", "stock.get(name, 0) < count"
    ).replace("stock[name] -= count", "stock[name] = stock.get(name, 0) - count"),
}


def section_id(nodeid: str) -> str:
    """The id of a failing test's section: ``test-`` and the first 12 hex digits of the
    sha1 of its node id (UTF-8)."""
    return "test-" + hashlib.sha1(nodeid.encode("utf-8")).hexdigest()[:12]


def find_chromium(environ: Mapping[str, str] = os.environ) -> Path | None:
    """``$RUNSTORE_TEST_CHROMIUM`` when set (None when it names no file), else ``chromium``
    on ``PATH``, else None."""
    named = environ.get("RUNSTORE_TEST_CHROMIUM", "").strip()
    if named:
        return Path(named) if Path(named).is_file() else None
    found = shutil.which("chromium", path=environ.get("PATH"))
    return Path(found) if found else None


def chromium_or_stop() -> Path:
    """The chromium to drive; without one the test is skipped, or fails under CI."""
    chromium = find_chromium()
    if chromium is not None:
        return chromium
    named = os.environ.get("RUNSTORE_TEST_CHROMIUM", "").strip()
    why = (
        f"no chromium: RUNSTORE_TEST_CHROMIUM names no file ({named})" if named else
        "no chromium on PATH: install Debian's chromium (apt-get install chromium; .ci/run "
        "does when it is missing) or name one in RUNSTORE_TEST_CHROMIUM"
    )
    if in_ci():
        pytest.fail(f"{why}; CI runs the browser test, never skips it", pytrace=False)
    pytest.skip(f"{why}; under CI this fails")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    chromium = chromium_or_stop()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


RECORD = """\
import json, os, sys
from pathlib import Path

import coverage, pytest, runstore.recorder  # imported once: each run forks from here

folder, plan, args = Path(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3:]
for run, files in plan:
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    if os.fork() == 0:
        os.environ["SHOP_RUN"] = str(run)
        raise SystemExit(pytest.main(args))
    print(f"run {run} exit", os.waitstatus_to_exitcode(os.wait()[1]), flush=True)
"""
"""Runs pytest (``argv[3:]``) in ``argv[1]`` once per entry of the plan ``argv[2]``, ``[[run,
{file: text}], ...]``, after writing the entry's files; each run is a process of its own,
forked from one that imported pytest, coverage and runstore's recorder, so that no run pays
for their import again: most of a short run's time (the four runs took 9.6 s so, 18 s as four
``python -m pytest`` processes, on 2 busy cores)."""


def _record(folder: Path, plan: list[tuple[int, dict[str, str]]]) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "RUNSTORE_"))}
    env.update(PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run(
        [sys.executable, "-c", RECORD, str(folder), json.dumps(plan), "-p", "no:cacheprovider",
         "-p", "runstore.pytest_plugin", "-p", "pytest_cov.plugin", "--runstore", "--cov=shop",
         "-q"],
        cwd=folder, env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _write(folder: Path, files: Mapping[str, str]) -> None:
    for name, source in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(textwrap.dedent(source), encoding="utf-8")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report of ``shop`` after its runs, written by ``runstore report -o``."""
    folder = tmp_path_factory.mktemp("recorded") / "shop"
    _write(folder, PROJECT)
    changes = {name: textwrap.dedent(text) for name, text in CHANGES.items()}
    plan = [(run, changes if run == CHANGED_AT else {}) for run in range(1, RUNS + 1)]
    out = _record(folder, plan)
    for run in range(1, RUNS + 1):
        assert f"runstore: run {run} recorded" in out, out
        assert f"run {run} exit 1\n" in out, out  # some test fails in each run
    page = folder.parent / "report.html"
    runstore = Path(sys.executable).parent / "runstore"
    done = subprocess.run(
        [str(runstore), "report", "-o", str(page)], cwd=folder, capture_output=True, text=True,
        timeout=60, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return page


@attrs.define
class Seen:
    """What a page did while it was open: every request's URL, console errors, page errors."""

    requests: list[str] = attrs.Factory(list)
    errors: list[str] = attrs.Factory(list)


@contextmanager
def opened(browser: Browser, path: Path, *, javascript: bool = True) -> Iterator[tuple[Page, Seen]]:
    """``path`` open in a fresh context of ``browser`` (its own cache, 1280 px wide, a light
    colour scheme), with what the page does recorded from before it starts loading."""
    context = browser.new_context(
        viewport=VIEWPORT, java_script_enabled=javascript, color_scheme="light"
    )
    seen = Seen()
    context.on("request", lambda request: seen.requests.append(request.url))
    # Recorded above, and never sent: the test reaches no server whatever the page asks for.
    context.route(lambda url: not url.startswith("file:"), lambda route: route.abort())

    def console(message: ConsoleMessage) -> None:
        if message.type == "error":
            seen.errors.append(f"console: {message.text} at {message.location}")

    try:
        page = context.new_page()
        page.on("console", console)
        page.on("pageerror", lambda error: seen.errors.append(f"page error: {error}"))
        page.goto(path.as_uri(), wait_until="load")
        yield page, seen
    finally:
        context.close()


PARTS = ("#runs-chart", "#matrix", "#signatures", "#slowest", "#coverage", "#failing")


def test_the_report_shows_every_part_and_asks_for_nothing(
    browser: Browser, report: Path, tmp_path: Path
) -> None:
    with opened(browser, report) as (page, seen):
        for part in PARTS:
            assert page.locator(part).is_visible(), f"{part} is missing or hidden"
        bars = page.locator("#runs-chart svg rect")
        assert bars.count() >= RUNS, "the runs chart has fewer bars than runs"
        assert bars.first.is_visible()
        assert page.locator("#matrix td").count() >= RUNS * 6, "the matrix has too few cells"
        for nodeid in (BROKEN, FLAKY, FIXED):
            assert page.locator("#matrix").get_by_text(nodeid).first.is_visible(), nodeid
        assert page.locator("#signatures").get_by_text("ValueError").first.is_visible()
        assert page.locator("#signatures").get_by_text("KeyError").first.is_visible()
        assert page.locator("#slowest").get_by_text(SLOWEST).first.is_visible()
        assert page.locator("#coverage").get_by_text("shop/stock.py").first.is_visible()
        for nodeid in (BROKEN, FLAKY):
            failing = page.locator(f"#{section_id(nodeid)}")
            assert failing.is_visible(), f"no section for {nodeid}"
            assert failing.get_by_text(nodeid).first.is_visible()
        broken = page.locator(f"#{section_id(BROKEN)}")
        assert broken.get_by_text("percent must be from 0 to 1, got 15").first.is_visible()
        assert broken.get_by_text("shop/cart.py").first.is_visible(), "no frame in shop/cart.py"
        assert page.locator(f"#{section_id(FIXED)}").count() == 0, "a passing test's section"

        update = os.environ.get("RUNSTORE_UPDATE_SCREENSHOTS") == "1"
        shot = SCREENSHOT if update else tmp_path / "report.png"
        shot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=shot, full_page=True)
        assert shot.read_bytes().startswith(b"\x89PNG")
    assert seen.errors == []
    assert seen.requests == [report.as_uri()]


def test_a_bar_of_the_runs_chart_leads_to_its_runs_failures(browser: Browser, report: Path) -> None:
    with opened(browser, report) as (page, seen):
        links = page.locator('#runs-chart a[href^="#run-"]')
        targets = {links.nth(i).get_attribute("href") for i in range(links.count())}
        assert targets == {f"#run-{run}" for run in range(1, RUNS + 1)}, "each run failed"
        newest = links.last
        assert newest.get_attribute("href") == f"#run-{RUNS}", "the newest run is on the right"
        section = page.locator(f"#run-{RUNS}")
        assert page.locator(":target").count() == 0
        newest.click()
        page.wait_for_function(f"location.hash === '#run-{RUNS}'")
        expect(page.locator(":target")).to_have_id(f"run-{RUNS}")
        expect(section).to_be_in_viewport()
        for nodeid in (BROKEN, FLAKY):  # the run's failing tests, each linking to its section
            assert section.locator(f'a[href="#{section_id(nodeid)}"]').is_visible(), nodeid
        section.locator(f'a[href="#{section_id(BROKEN)}"]').click()
        page.wait_for_function(f"location.hash === '#{section_id(BROKEN)}'")
        expect(page.locator(":target")).to_have_id(section_id(BROKEN))
        expect(page.locator(":target")).to_be_in_viewport()
    assert seen.errors == []
    assert seen.requests == [report.as_uri()]


def test_without_javascript_the_tables_and_charts_are_all_there(
    browser: Browser, report: Path
) -> None:
    with opened(browser, report) as (with_js, _):
        expected = {part: with_js.locator(f"{part} td").count() for part in PARTS}
        bars = with_js.locator("#runs-chart svg rect").count()
    with opened(browser, report, javascript=False) as (page, seen):
        for part in PARTS:
            assert page.locator(part).is_visible(), f"{part} is missing or hidden without JS"
        assert {part: page.locator(f"{part} td").count() for part in PARTS} == expected
        assert page.locator("#runs-chart svg rect").count() == bars
        assert page.locator(f"#{section_id(BROKEN)}").is_visible()
    assert seen.errors == []
    assert seen.requests == [report.as_uri()]


def test_find_chromium_takes_the_named_file_or_the_path() -> None:
    assert find_chromium({"RUNSTORE_TEST_CHROMIUM": "/no/such/chromium", "PATH": ""}) is None
    assert find_chromium({"RUNSTORE_TEST_CHROMIUM": sys.executable}) == Path(sys.executable)
    assert find_chromium({"PATH": str(Path(sys.executable).parent)}) is None
