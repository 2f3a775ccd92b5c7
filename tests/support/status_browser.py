"""
A real headless Chromium on mcpx's status page, driven by Playwright in a process of
its own (Playwright's sync API blocks; the trial test's reactor must not).

Run as C{python status_browser.py '<json>'} with an object of:

  - C{url}: the page;
  - C{login}: a one-time link (C{mcpx status --open --print}) to open first, instead
    of C{url}: the browser must land on the page, signed in; the session cookie it
    then holds is reported (C{cookies}: name, value and attributes);
  - C{answers}: the values to type into the first question's form, by field name (a
    string for a text or number box, C{true}/C{false} for a checkbox, the visible label
    for a list of choices);
  - C{empty_first}: press Accept once with the form as it is first (a required field
    empty), and report whether the question was still shown afterwards;
  - C{call}: the C{server/tool} whose row in the recent calls must appear once answered;
  - C{screenshots}: a folder for C{question.png} (the page with the question) and
    C{answered.png} (after the call completed).

Prints one JSON object: what the page showed (the servers table's cells by server, the
question's message, its fields' labels and input types) and what became of it.  Uses
Debian's C{/usr/bin/chromium} (C{MCPX_CHROMIUM} overrides); Playwright's own browsers
are never downloaded.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from playwright.sync_api import sync_playwright

CHROMIUM = os.environ.get("MCPX_CHROMIUM", "/usr/bin/chromium")
WAIT_MS = 20_000


def main(spec: dict[str, Any]) -> dict[str, Any]:
    seen: dict[str, Any] = {"console_errors": []}
    shots = Path(spec["screenshots"])
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.on(
                "console",
                lambda m: seen["console_errors"].append(m.text) if m.type == "error" else None,
            )
            if spec.get("login"):
                page.goto(spec["login"])
                page.wait_for_url(spec["url"], timeout=WAIT_MS)
                seen["cookies"] = [
                    {k: cookie.get(k) for k in ("name", "value", "path", "httpOnly", "sameSite")}
                    for cookie in page.context.cookies()
                ]
            else:
                page.goto(spec["url"])
            seen["title"] = page.title()
            page.locator("#live[data-state=live]").wait_for(timeout=WAIT_MS)
            card = page.locator(".question").first
            card.wait_for(timeout=WAIT_MS)
            seen["message"] = card.locator(".message").inner_text()
            seen["fields"] = []
            for label in card.locator(".field label").all():
                control = page.locator(f"[id='{label.get_attribute('for')}']")
                seen["fields"].append(
                    {
                        "label": label.inner_text().strip(),
                        "tag": control.evaluate("e => e.tagName.toLowerCase()"),
                        "type": control.evaluate("e => e.type"),
                    }
                )
            seen["servers"] = {
                row.get_attribute("data-server"): [
                    cell.inner_text() for cell in row.locator("td").all()
                ]
                for row in page.locator("#servers tr").all()
            }
            accept = card.locator("button[type=submit]")
            if spec.get("empty_first"):
                accept.click()
                page.wait_for_timeout(500)
                seen["pending_after_empty"] = page.locator(".question").count() == 1
            for name, value in spec["answers"].items():
                control = card.locator(f"[name='{name}']")
                if control.evaluate("e => e.tagName.toLowerCase()") == "select":
                    control.select_option(label=value)
                elif control.get_attribute("type") == "checkbox":
                    control.set_checked(bool(value))
                else:
                    control.fill(str(value))
            page.screenshot(path=str(shots / "question.png"), full_page=True)
            accept.click()
            page.locator(".question").wait_for(state="detached", timeout=WAIT_MS)
            row = page.locator(f"#calls tr[data-call='{spec['call']}']").first
            row.wait_for(timeout=WAIT_MS)
            seen["call_outcome"] = row.locator("td").last.inner_text()
            seen["questions_count"] = page.inner_text("#questions-count")
            seen["events"] = page.inner_text("#events")
            page.screenshot(path=str(shots / "answered.png"), full_page=True)
        finally:
            browser.close()
    return seen


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
