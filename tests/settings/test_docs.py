"""Tests for L{mcpx.settings.docs}."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase

from mcpx.settings.declarations import SETTINGS
from mcpx.settings.docs import REGENERATE, render_configuration_md

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


class ConfigurationDocsTests(SynchronousTestCase):
    """C{docs/configuration.md} is generated from the declarations."""

    def test_up_to_date(self) -> None:
        """The committed file is exactly what the declarations generate."""
        committed = COMMITTED.read_text(encoding="utf-8") if COMMITTED.exists() else ""
        if committed != render_configuration_md():
            self.fail(f"docs/configuration.md is out of date; run: {REGENERATE}")

    def test_every_setting(self) -> None:
        """Every setting is documented with its variable, flag and help."""
        text = render_configuration_md()
        for setting in SETTINGS:
            for part in [f"`{setting.name}`", f"`{setting.env}`", f"`{setting.flag}`"]:
                self.assertIn(part, text)

    def test_module_prints(self) -> None:
        """C{python -m mcpx.settings.docs} prints the document."""
        printed = subprocess.run(
            [sys.executable, "-m", "mcpx.settings.docs"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        self.assertEqual(printed, render_configuration_md())
