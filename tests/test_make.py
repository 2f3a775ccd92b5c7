"""
C{make run} installs the product alone: on a checkout with no C{.venv}, what C{make -n run}
would execute installs mcpx without its C{test} extra, and the test tools come only with
C{make test}.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase

REPO = Path(__file__).resolve().parents[1]


def _dry_run(target: str) -> list[str]:
    """The commands C{make -n TARGET} prints for a checkout without a virtualenv."""
    if shutil.which("make") is None:
        raise AssertionError("make is not installed; the Makefile's targets cannot be read")
    printed = subprocess.run(
        ["make", "-n", "-B", "-f", str(REPO / "Makefile"), "VENV=.no-such-venv", target],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line for line in printed.splitlines() if "pip install" in line]


class MakeRunTests(SynchronousTestCase):
    def test_run_installs_the_product_alone(self) -> None:
        """C{make run} installs C{mcpx} without the test extra and starts the daemon."""
        installs = _dry_run("run")
        self.assertTrue(installs, "make run installs nothing")
        for line in installs:
            self.assertNotIn("[test]", line)
            self.assertNotIn("[dev]", line)
        self.assertTrue(any(re.search(r"install .*-e \.( |$)", line) for line in installs))

    def test_test_installs_the_test_tools(self) -> None:
        """C{make test} does install the test extra, so the two differ only in that."""
        self.assertTrue(any("'.[test]'" in line for line in _dry_run("test")))

    def test_no_setuptools_warning_reaches_the_user(self) -> None:
        """Every install runs with the build backend's warnings silenced (setuptools' notice
        that compat editable mode is transitional is nothing for the user to act on)."""
        for line in _dry_run("run") + _dry_run("test"):
            if "-e " in line:
                self.assertIn("PYTHONWARNINGS=ignore", line)
