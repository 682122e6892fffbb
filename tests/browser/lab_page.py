"""Driving JupyterLab's page in Chromium: write a notebook, open and run it, read its outputs and
dashboards."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from lab_server import LabServer
from playwright.sync_api import TimeoutError as PlaywrightTimeout

RUN_TIMEOUT_MS = 150_000  # the welcome notebook trains for real: about 20 s alone on 2 cores


WIDGET_TIMEOUT_MS = 30_000


def write_notebook(root: Path, name: str, cells: list[str]) -> str:
    notebook = {
        "cells": [
            {"cell_type": "code", "metadata": {}, "source": src, "outputs": [], "execution_count": None}
            for src in cells
        ],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    for i, cell in enumerate(notebook["cells"]):
        cell["id"] = f"cell-{i}"
    (root / name).write_text(json.dumps(notebook, indent=1))
    return name


# ---- driving JupyterLab ----------------------------------------------------------------------------
def open_and_run_all(page, lab: LabServer, name: str, timeout_ms: int | None = RUN_TIMEOUT_MS) -> None:
    """Open `name` (fresh workspace) and run it with the Run menu, as a student would; then wait until
    every cell ran (timeout_ms=None: only until the cells started)."""
    page.goto(lab.url(f"lab/tree/{name}?reset"))
    page.locator(".jp-Notebook .jp-Cell").first.wait_for()
    wait_for_kernel(page, lab, name)
    for _attempt in range(3):
        menu(page, "Run", "Run All Cells")
        try:  # a request sent while the kernel's websocket still settles can be lost: then ask again
            page.wait_for_function(
                """() => [...document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')]
                          .some(p => /\\[(\\*|\\d+)\\]/.test(p.textContent))""",
                timeout=10_000,
            )
            break
        except PlaywrightTimeout:
            continue
    if timeout_ms is not None:
        wait_until_all_ran(page, timeout_ms)


def wait_for_kernel(page, lab: LabServer, name: str, timeout_s: float = 60) -> None:
    """Until the server sees the page connected to the notebook's kernel, idle (the page's status follows)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        kernels = [s["kernel"] for s in lab.api("sessions") if s["path"] == name]
        if any(k["connections"] > 0 and k["execution_state"] == "idle" for k in kernels):
            page.get_by_text(re.compile(r"\| Idle$")).first.wait_for(timeout=WIDGET_TIMEOUT_MS)
            return
        page.wait_for_timeout(250)
    raise AssertionError(f"{name}: no kernel became idle within {timeout_s} s: {lab.api('sessions')}")


def menu(page, menu_name: str, item: str) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{menu_name}$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{item}$")).click()


def wait_until_all_ran(page, timeout_ms: int = RUN_TIMEOUT_MS) -> None:
    """Every code cell shows an execution count: none pending ("[*]") or never run ("[ ]")."""
    page.wait_for_function(
        """() => {
            const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')];
            return prompts.length > 0 && prompts.every(p => /\\[\\d+\\]/.test(p.textContent));
        }""",
        timeout=timeout_ms,
        polling=250,
    )


def output_texts(page) -> list[str]:
    return page.locator(".jp-OutputArea-output").all_inner_texts()


def assert_no_traceback(page) -> None:
    errors = [text for text in output_texts(page) if "Traceback" in text]
    assert not errors, "a cell failed in the browser:\n" + "\n---\n".join(errors)


class DashboardView:
    """The dashboard as rendered in the page: its controls, chart and printed figures."""

    def __init__(self, page):
        self.page = page
        label = page.locator("label", has_text="p (devices)")
        self.root = page.locator(".widget-vbox", has=label).last
        self.root.wait_for(timeout=WIDGET_TIMEOUT_MS)
        self.image = self.root.locator("img.widget-image").first
        # the summary HTML widget's own element (a child of the box): its <pre> is replaced on every redraw
        self.summary = self.root.locator(":scope > .widget-html").first  # not the line beside the buttons

    def button(self, description: str):
        return self.root.locator("button", has_text=re.compile(f"^{description}$"))

    def train_output(self) -> str:
        """What the dashboard printed under its chart (its Output widget)."""
        return self.root.locator(".widget-output").inner_text()

    def wait_for_output(self, pattern: str, timeout_ms: int = RUN_TIMEOUT_MS) -> str:
        self.page.wait_for_function(
            "([el, pattern]) => new RegExp(pattern).test(el.textContent)",
            arg=[self.root.locator(".widget-output").element_handle(), pattern],
            timeout=timeout_ms,
            polling=100,
        )
        return self.train_output()

    def dropdown(self, description: str):
        label = self.page.locator("label", has_text=description)
        return self.root.locator(".widget-dropdown", has=label).locator("select")

    def schedule(self) -> str:
        return self.dropdown("schedule").input_value()

    def slider(self, description: str):
        return self.root.locator(".widget-hslider", has=self.page.locator("label", has_text=description))

    def readout(self, description: str) -> int:
        return int(self.slider(description).locator(".widget-readout").inner_text().strip())

    def drag_slider(self, description: str, value: int) -> None:
        """Drag the handle with the mouse to `value`; finish with arrow keys if it lands a step off."""
        slider = self.slider(description)
        handle = slider.locator(".noUi-handle")
        track = slider.locator(".noUi-target").bounding_box()
        lo, hi = (float(handle.get_attribute(a)) for a in ("aria-valuemin", "aria-valuemax"))
        grip = handle.bounding_box()
        x0, y = grip["x"] + grip["width"] / 2, grip["y"] + grip["height"] / 2
        x1 = track["x"] + track["width"] * (value - lo) / (hi - lo)
        self.page.mouse.move(x0, y)
        self.page.mouse.down()
        self.page.mouse.move(x1, y, steps=8)
        self.page.mouse.up()
        for _ in range(int(hi - lo)):
            now = self.readout(description)
            if now == value:
                return
            handle.press("ArrowRight" if now < value else "ArrowLeft")
        assert self.readout(description) == value

    def chart(self) -> tuple[str, int, int]:
        """(sha256 of the PNG the page shows, its width, height in pixels)."""
        return self.image.evaluate(
            """async img => {
                await img.decode();
                const bytes = await (await fetch(img.src)).arrayBuffer();
                const digest = await crypto.subtle.digest('SHA-256', bytes);
                const hex = [...new Uint8Array(digest)].map(b => b.toString(16).padStart(2, '0')).join('');
                return [hex, img.naturalWidth, img.naturalHeight];
            }"""
        )

    def wait_for_change(self, summary_before: str, chart_before: tuple) -> tuple[str, tuple]:
        """Wait until both the printed figures and the chart differ from before; return the new ones."""
        self.page.wait_for_function(
            "([el, before]) => el.innerText !== before",  # innerText: what inner_text() returned before
            arg=[self.summary.element_handle(), summary_before],
            timeout=WIDGET_TIMEOUT_MS,
        )
        for _ in range(WIDGET_TIMEOUT_MS // 100):  # the image and the HTML come as two messages: both
            chart = self.chart()
            if chart != chart_before:
                break
            self.page.wait_for_timeout(100)
        return self.summary.inner_text(), chart
