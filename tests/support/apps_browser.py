"""
A real headless Chromium on the MCP Apps test host (tests/support/apps_host), driven by
Playwright in a process of its own (Playwright's sync API blocks; the trial test's
reactor must not).

Run as C{python apps_browser.py '<json>'} with an object of:

  - C{url}: the host page;
  - C{show}: the selector, inside the app's iframe, of what the app shows;
  - C{click}: the selector, inside the app's iframe, of the control that makes the app
    call a tool of its own through the host;
  - C{screenshot}: where to save the page (PNG) once the app showed its own call's result.

Prints one JSON object: the host's log (C{window.hostLog}: tools listed, calls made and
by whom, the resource read, errors), the iframe's C{sandbox} attribute and the origin
its document runs in, what C{show} read once the host handed the app the tool's result
and again once the app's own call came back, and the console's errors.  Uses Debian's
C{/usr/bin/chromium} (C{MCPX_CHROMIUM} overrides), as tests/support/status_browser.py
does; Playwright's own browsers are never downloaded.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from playwright.sync_api import Page, sync_playwright

from tests.support.status_browser import CHROMIUM

# Generous: a loaded 2-core CI starts Chromium, the daemon's upstream and the app slowly.
WAIT_MS = 60_000


def shown_as(page: Page, selector: str, origin: str) -> str | None:
    """
    Wait until the app's C{selector} shows the text of the newest call made by
    C{origin} (C{host} or C{app}); that text, or C{None} when the host logged an error
    instead (a call that failed).
    """
    page.wait_for_function(
        """([selector, origin]) => {
            if (window.hostLog.errors.length) return true;
            const calls = window.hostLog.calls.filter((call) => call.origin === origin);
            const frame = document.getElementById("app");
            if (!calls.length || !frame) return false;
            const block = (calls[calls.length - 1].result.content || [])[0];
            window.hostLog.expected = block && block.text;
            return window.hostLog.expected !== undefined;
        }""",
        arg=[selector, origin],
        timeout=WAIT_MS,
    )
    if page.evaluate("window.hostLog.errors.length"):
        return None
    expected = page.evaluate("window.hostLog.expected")
    shown = page.frame_locator("#app").locator(selector)
    shown.filter(has_text=expected).wait_for(timeout=WAIT_MS)
    return shown.inner_text()


def main(spec: dict[str, Any]) -> dict[str, Any]:
    seen: dict[str, Any] = {"console_errors": []}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            page = browser.new_page(viewport={"width": 760, "height": 500})
            page.on(
                "console",
                lambda m: seen["console_errors"].append(m.text) if m.type == "error" else None,
            )
            page.goto(spec["url"])
            page.wait_for_function(
                "window.hostLog && (window.hostLog.done || window.hostLog.errors.length)",
                timeout=WAIT_MS,
            )
            seen["host_log"] = page.evaluate("window.hostLog")
            if seen["host_log"]["errors"]:
                return seen
            iframe = page.locator("#app")
            seen["sandbox"] = iframe.get_attribute("sandbox")
            frame = iframe.element_handle().content_frame()
            assert frame is not None
            seen["app_origin"] = frame.evaluate("window.origin")
            seen["shown_first"] = shown_as(page, spec["show"], "host")
            if seen["shown_first"] is None:
                seen["host_log"] = page.evaluate("window.hostLog")
                return seen
            page.frame_locator("#app").locator(spec["click"]).click()
            seen["shown_after"] = shown_as(page, spec["show"], "app")
            seen["host_log"] = page.evaluate("window.hostLog")
            if seen["host_log"]["errors"]:
                return seen
            page.screenshot(path=spec["screenshot"])
        finally:
            browser.close()
    return seen


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
