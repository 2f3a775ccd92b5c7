"""
The package as it is published: C{python -m build} makes an sdist and a wheel from a copy of
the checkout, C{twine check} passes them as PyPI would, and the wheel holds what an installed
mcpx needs (every data file of the package, the twistd plugin, the C{mcpx} command, the
licence and classifiers).
"""

from __future__ import annotations

import atexit
import email.parser
import functools
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase

REPO = Path(__file__).resolve().parents[1]


def _checkout_files() -> list[str]:
    """The checkout's files as git sees them (tracked, or new and not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [name for name in listed.split("\0") if name and (REPO / name).is_file()]


class Build:
    """A build of a copy of the checkout: the sdist, and the wheel built from it."""

    def __init__(self) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="mcpx-build-"))
        atexit.register(shutil.rmtree, self.work, True)
        source = self.work / "src"
        for name in _checkout_files():
            # Only what a release carries: the build must not see tests or benchmarks.
            if name.split("/", 1)[0] in ("tests", "bench"):
                continue
            target = source / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, target)
        out = self.work / "dist"
        # --no-isolation: the test environment has setuptools and wheel, so no network is
        # needed; the wheel is built from the sdist, so the sdist is checked too.
        self.done = subprocess.run(
            [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
            check=False,
            capture_output=True,
            text=True,
        )
        self.wheels = sorted(out.glob("mcpx-*.whl"))
        self.sdists = sorted(out.glob("mcpx-*.tar.gz"))


@functools.cache
def _build() -> Build:
    return Build()


class WheelTests(SynchronousTestCase):
    """Checks of one build, made for the first of them."""

    def artifacts(self) -> tuple[Path, Path]:
        build = _build()
        self.assertEqual(build.done.returncode, 0, build.done.stdout + build.done.stderr)
        self.assertEqual((len(build.wheels), len(build.sdists)), (1, 1), build.done.stdout)
        return build.wheels[0], build.sdists[0]

    def wheel_names(self) -> set[str]:
        wheel, _ = self.artifacts()
        with zipfile.ZipFile(wheel) as archive:
            return set(archive.namelist())

    def test_twine_check(self) -> None:
        """C{twine check --strict} passes the wheel and the sdist (metadata, README)."""
        wheel, sdist = self.artifacts()
        checked = subprocess.run(
            [sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)],
            check=False,
            capture_output=True,
            text=True,
        )
        self.assertEqual(checked.returncode, 0, checked.stdout + checked.stderr)
        self.assertEqual(checked.stdout.count("PASSED"), 2, checked.stdout)

    def test_package_data(self) -> None:
        """Every file of the package that is not Python (schemas, the shipped config,
        C{py.typed}, the status page, ...) is in the wheel, as is the twistd plugin, and
        C{twisted/plugins} has no C{__init__.py} (which would hide Twisted's own)."""
        names = self.wheel_names()
        data = [
            name
            for name in _checkout_files()
            if name.startswith("mcpx/") and not name.endswith((".py", ".pyc"))
        ]
        self.assertIn("mcpx/settings/default-config.json", data)
        self.assertIn("mcpx/spec/schemas/2025-06-18/schema.json", data)
        self.assertEqual([name for name in data if name not in names], [])
        self.assertIn("mcpx/demo/__main__.py", names)
        self.assertIn("twisted/plugins/mcpx_plugin.py", names)
        self.assertNotIn("twisted/plugins/__init__.py", names)
        self.assertNotIn("twisted/__init__.py", names)
        self.assertFalse([name for name in names if name.startswith("tests/")])

    def test_metadata(self) -> None:
        """The wheel says its licence (and carries the file), its classifiers, and installs
        the C{mcpx} command."""
        wheel, _ = self.artifacts()
        with zipfile.ZipFile(wheel) as archive:
            info = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
            metadata = email.parser.Parser().parsestr(archive.read(info).decode())
            dist_info = info.rsplit("/", 1)[0]
            entry_points = archive.read(f"{dist_info}/entry_points.txt").decode()
            licence = archive.read(f"{dist_info}/licenses/LICENSE").decode()
        self.assertEqual(metadata["License-Expression"], "MIT")
        self.assertIn("MIT License", licence)
        classifiers = metadata.get_all("Classifier") or []
        self.assertIn("Framework :: Twisted", classifiers)
        self.assertIn("Programming Language :: Python :: 3 :: Only", classifiers)
        self.assertIn("mcpx = mcpx.cli.quick:main", entry_points)
