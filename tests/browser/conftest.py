"""Fixtures for the browser tests: a throw-away JupyterLab server and headless Chromium.

See lab_server.py for the server's test-only setup and its teardown; these tests skip (with one line
saying why) only where Chromium or Playwright is missing.

Try it:  .venv/bin/pytest -q tests/browser
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from lab_server import ARTIFACTS, CHROMIUM, CHROMIUM_FLAGS, REPO, LabServer, skip_reason, start_lab, stop_lab


@pytest.fixture(scope="session")
def browser_ready() -> None:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)


@pytest.fixture(scope="session")
def lab(browser_ready, tmp_path_factory) -> Iterator[LabServer]:
    """JupyterLab serving a temporary copy of notebooks/ (tests may add notebooks to `lab.root`)."""
    workdir = tmp_path_factory.mktemp("jupyterlab")
    shutil.copytree(REPO / "notebooks", workdir / "notebooks", ignore=shutil.ignore_patterns(".*"))
    server = start_lab(workdir)
    try:
        yield server
    finally:
        survivors = stop_lab(server)
        assert not survivors, f"processes left running after JupyterLab's shutdown: {survivors}"


@pytest.fixture(scope="session")
def chromium(browser_ready):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS, timeout=60_000
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    # keep each phase's report on the test item, so the page fixture can tell that the test failed
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"report_{report.when}", report)


@pytest.fixture
def page(request, chromium, lab):
    """A fresh browser page (own context: no shared storage), logged in with the token."""
    context = chromium.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto(lab.url(f"lab?token={lab.token}"))
    try:
        yield page
    finally:
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:  # what the page showed when the test failed
            page.screenshot(path=ARTIFACTS / f"FAILED_{request.node.name}.png")
        context.close()
