"""Debian's Chromium in headless mode, driven by Selenium: the status page as a person sees it.

The browser is the system's (``apt-get install chromium chromium-driver``, scripts/setup.sh);
nothing is downloaded. Each session gets a fresh profile directory; :meth:`Browser.close` ends
the driver and the browser it started (by pid if quitting fails).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

# --no-sandbox: CI runs as root; --disable-dev-shm-usage: a container's /dev/shm is often 64 MB,
# too small for a renderer, which then crashes mid-test.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                  "--disable-quic", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--window-size=1400,2000")


def find_chromium() -> tuple[str, str]:
    browser = shutil.which("chromium")
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        raise AssertionError("Chromium is not installed: apt-get install -y chromium "
                             "chromium-driver (scripts/setup.sh does this)")
    return browser, driver


# Every vertex of every polyline and the centre of every circle of one <svg>, checked against
# its viewBox.
_DRAWN_POINTS = """
const svg = document.getElementById(arguments[0]);
const box = svg.viewBox.baseVal;
const seen = new Set(), bad = [];
const add = (x, y) => {
  if (!Number.isFinite(x) || !Number.isFinite(y) || x < box.x || y < box.y
      || x > box.x + box.width || y > box.y + box.height) { bad.push([String(x), String(y)]); }
  else { seen.add(x.toFixed(1) + "," + y.toFixed(1)); }
};
for (const line of svg.querySelectorAll("polyline")) {
  for (const pair of line.getAttribute("points").trim().split(/\\s+/)) {
    const [x, y] = pair.split(",").map(Number);
    add(x, y);
  }
}
for (const dot of svg.querySelectorAll("circle")) {
  add(Number(dot.getAttribute("cx")), Number(dot.getAttribute("cy")));
}
return {count: seen.size, bad: bad};
"""


# Every panel of the page (and the document itself) whose content is wider than its box: what
# a reader would find cut off or scrolling sideways.
_OVERFLOWING = """
const out = [];
const root = document.documentElement;
const wide = (box) => box.scrollWidth > box.clientWidth;
const name = (box) => `${box.id || box.className || box.tagName}`;
if (wide(root)) out.push(`document ${root.scrollWidth} > ${root.clientWidth}`);
for (const panel of document.querySelectorAll("header, .card, .failure, .banner, footer")) {
  if (panel.offsetParent !== null && wide(panel)) {
    out.push(`${name(panel)} ${panel.scrollWidth} > ${panel.clientWidth}`);
  }
}
return out;
"""

# A screenshot shows this much of the page's width; its height is the page's own.
SCREENSHOT_WIDTH = 1280


class Browser:
    def __init__(self, profile: Path) -> None:
        binary, driver = find_chromium()
        options = webdriver.ChromeOptions()
        options.binary_location = binary
        for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must fetch nothing
        self.service = Service(driver)
        self.driver = webdriver.Chrome(service=self.service, options=options)

    def open_page(self, url: str, timeout: float = 30.0) -> None:
        """Load ``url`` and wait until the page has drawn itself from /api/status. The console
        log starts empty: the previous page is left first and its messages dropped."""
        self.driver.get("about:blank")
        self.driver.get_log("browser")  # reading the log empties it
        self.driver.get(url)
        WebDriverWait(self.driver, timeout).until(
            lambda d: int(d.find_element(By.TAG_NAME, "body").get_attribute("data-rendered")
                          or 0) >= 1)

    def console_errors(self) -> list[dict[str, Any]]:
        return [e for e in self.driver.get_log("browser") if e.get("level") == "SEVERE"]

    def chart_points(self, chart_id: str) -> int:
        """The points the chart has drawn: distinct vertices of its lines and centres of its
        markers, read from the SVG itself (not from what the page says it drew). A point
        outside the chart's box or not a number fails the test."""
        drawn = self.driver.execute_script(_DRAWN_POINTS, chart_id)
        assert drawn["bad"] == [], (chart_id, drawn["bad"])
        return int(drawn["count"])

    def table_rows(self, table_id: str) -> list[list[str]]:
        rows = self.driver.find_elements(By.CSS_SELECTOR, f"#{table_id} tbody tr")
        return [[c.text for c in r.find_elements(By.TAG_NAME, "td")] for r in rows]

    def text(self, element_id: str) -> str:
        return str(self.driver.find_element(By.ID, element_id).text)

    def texts(self, selector: str) -> list[str]:
        """The text of every element ``selector`` matches (SVG text included)."""
        return [str(e.get_attribute("textContent"))
                for e in self.driver.find_elements(By.CSS_SELECTOR, selector)]

    def screenshot(self, path: Path) -> Path:
        """The whole page, :data:`SCREENSHOT_WIDTH` wide, as a PNG (the window is put back)."""
        before = self.driver.get_window_size()
        try:
            self.resize(SCREENSHOT_WIDTH)
            height = int(self.driver.execute_script(
                "return document.documentElement.scrollHeight"))
            self.driver.set_window_size(SCREENSHOT_WIDTH, height)
            self.driver.save_screenshot(str(path))
        finally:
            self.driver.set_window_size(before["width"], before["height"])
        return path

    def resize(self, width: int, height: int = 2000) -> None:
        """Make the page ``width`` CSS pixels wide and wait until it has drawn itself again
        (it redraws on a resize: its charts take the new width)."""
        if self.driver.execute_script("return window.innerWidth") == width:
            return
        rendered = self._rendered()
        self.driver.set_window_size(width, height)
        WebDriverWait(self.driver, 10).until(
            lambda d: d.execute_script("return window.innerWidth") == width
            and self._rendered() > rendered)

    def _rendered(self) -> int:
        return int(self.driver.find_element(By.TAG_NAME, "body").get_attribute(
            "data-rendered") or 0)

    def overflowing(self) -> list[str]:
        """The panels whose content is wider than they are (none: nothing is cut off)."""
        return list(self.driver.execute_script(_OVERFLOWING))

    def close(self) -> None:
        process = getattr(self.service, "process", None)
        try:
            self.driver.quit()
        finally:
            if process is not None and process.poll() is None:  # quit failed: end what we began
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGKILL)
