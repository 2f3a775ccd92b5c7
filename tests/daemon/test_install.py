"""
mcpx from a normal (non-editable) install: the wheel carries the twistd plugin
without shadowing Twisted, and C{twistd mcpx} runs from it.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial.unittest import TestCase

from tests.support.http import TestClient
from tests.support.processes import REPO, free_tcp_port, kill_on_cleanup, reactor, spawn

_SKIP_DIRS = {".git", ".venv", "_trial_temp", "build", "node_modules", ".mypy_cache"}


def _skipped(name: str) -> bool:
    return name in _SKIP_DIRS or name.endswith(".egg-info") or name.startswith("_trial_temp")


async def run(argv: list[str], env: dict[str, str], cwd: str) -> tuple[str, int]:
    out, err, code = await getProcessOutputAndValue(
        argv[0], argv[1:], env=env, path=cwd, reactor=reactor
    )
    return (out + err).decode("utf-8", "replace"), code


class WheelInstallTests(TestCase):
    timeout = 180

    async def test_twistd_mcpx_from_a_wheel(self) -> None:
        """
        A wheel installed into a plain directory offers `twistd mcpx`, serves /health,
        and a second start with the plugin cache already written still works.
        """
        work = Path(tempfile.mkdtemp(prefix="mcpx-wheel-"))
        self.addCleanup(shutil.rmtree, work, True)
        source = work / "src"
        shutil.copytree(
            REPO,
            source,
            ignore=lambda d, names: [n for n in names if _skipped(n)],
            symlinks=True,
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("MCPX_")}
        out, code = await run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--no-deps",
                "--no-build-isolation",
                "-q",
                "-w",
                str(work / "dist"),
                str(source),
            ],
            env,
            str(work),
        )
        self.assertEqual(code, 0, out)
        [wheel] = list((work / "dist").glob("mcpx-*.whl"))
        names = set(zipfile.ZipFile(wheel).namelist())
        self.assertIn("twisted/plugins/mcpx_plugin.py", names)
        self.assertNotIn("twisted/__init__.py", names, "the wheel must not replace Twisted")
        self.assertNotIn("twisted/plugins/__init__.py", names)
        self.assertIn("mcpx/spec/schemas/2026-07-28/schema.json", names)
        [metadata_name] = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = zipfile.ZipFile(wheel).read(metadata_name).decode("utf-8")
        self.assertIn("License-Expression: MIT", metadata)
        self.assertIn("License-File: LICENSE", metadata)
        self.assertIn("Classifier: Framework :: Twisted", metadata)
        self.assertTrue([n for n in names if n.endswith("licenses/LICENSE")], "LICENSE shipped")

        target = work / "site"
        out, code = await run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--target",
                str(target),
                str(wheel),
            ],
            env,
            str(work),
        )
        self.assertEqual(code, 0, out)

        # -S keeps the venv's .pth files (and so the editable checkout) off sys.path:
        # only the installed wheel and the dependencies are importable.
        isolated = dict(env)
        isolated["PYTHONPATH"] = os.pathsep.join([str(target), sysconfig.get_paths()["purelib"]])
        isolated["MCPX_STATE_DIR"] = str(work / "state")
        isolated["XDG_CONFIG_HOME"] = str(work / "config")
        twistd = [sys.executable, "-S", "-c", "from twisted.scripts.twistd import run; run()"]

        out, code = await run(
            [sys.executable, "-S", "-c", "import mcpx; print(mcpx.__file__)"], isolated, str(work)
        )
        self.assertTrue(out.strip().startswith(str(target)), out)

        for attempt in (1, 2):
            out, code = await run([*twistd, "--help"], isolated, str(work))
            self.assertEqual(code, 0, out)
            self.assertIn("mcpx", out, f"twistd does not list mcpx (attempt {attempt})")
        self.assertTrue((target / "twisted" / "plugins" / "dropin.cache").exists())

        port = free_tcp_port()
        child = spawn(
            [
                *twistd,
                "-n",
                "--pidfile=",
                "--logfile=-",
                "mcpx",
                "--daemon-listen",
                f"tcp:{port}:interface=127.0.0.1",
            ],
            env=isolated,
            cwd=str(work),
        )
        self.addCleanup(kill_on_cleanup, child)
        await child.wait_for(rb"mcpx daemon listening on", fd=1)
        client = TestClient(reactor)
        try:
            code, body = await client.get_json(f"http://127.0.0.1:{port}/health")
        finally:
            await client.close()
        self.assertEqual((code, body["status"]), (200, "ok"))
        child.signal("TERM")
        await child.ended()
