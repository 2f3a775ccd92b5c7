"""
Every C{test-case-name} header in C{mcpx/} names test modules that exist, so that
C{trial --testmodule} on a source file runs its tests instead of failing to import.
"""

from __future__ import annotations

import re
from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase

ROOT = Path(__file__).resolve().parent.parent
HEADER = re.compile(r"#\s*-\*-\s*test-case-name:\s*(?P<names>[^-]*?)\s*-\*-")


def named_tests(source: Path) -> list[str]:
    """The test modules C{source}'s first line names, if it has the header."""
    with source.open(encoding="utf-8") as lines:
        first = lines.readline()
    found = HEADER.match(first)
    if found is None:
        return []
    return [name.strip() for name in found.group("names").split(",") if name.strip()]


def exists(module: str) -> bool:
    path = ROOT.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


class HeaderTests(SynchronousTestCase):
    def test_headers_name_existing_modules(self) -> None:
        """No C{test-case-name} header in C{mcpx/} names a module that is not there."""
        wrong = [
            f"{source.relative_to(ROOT)}: {module}"
            for source in sorted((ROOT / "mcpx").rglob("*.py"))
            for module in named_tests(source)
            if not exists(module)
        ]
        self.assertEqual(wrong, [])

    def test_headers_are_read(self) -> None:
        """The check reads the headers it is meant to: this package has dozens."""
        named = [
            module for source in (ROOT / "mcpx").rglob("*.py") for module in named_tests(source)
        ]
        self.assertGreater(len(named), 50)
        self.assertIn("tests.daemon.test_http", named_tests(ROOT / "mcpx" / "daemon" / "http.py"))
