"""
The shipped deployment files, checked by the tools that run them: C{deploy/haproxy.cfg}
by HAProxy's own configuration check, C{deploy/mcpx@.service} by C{systemd-analyze
verify} (both from Debian's packages, installed by C{make peers}). L{tests.fleet.
test_fleet} runs them.
"""

from __future__ import annotations

import configparser
import shutil
import subprocess
import tempfile
from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase

from mcpx.settings.declarations import SETTINGS
from tests.fleet.fleet import HAPROXY, HAPROXY_CFG, UNIT, render_haproxy, unit_environment
from tests.support.processes import VENV_BIN

#: Variables the daemon reads besides its settings' (docs/configuration.md), and the
#: upstream servers' home.
LOCATIONS = {"MCPX_CONFIG", "MCPX_STATE_DIR", "HOME"}


def unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(UNIT.read_text())
    return parser


class HaproxyConfigTests(SynchronousTestCase):
    def check(self, path: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [HAPROXY, "-c", "-f", str(path)],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        )

    def test_shipped_config_is_valid(self) -> None:
        """HAProxy accepts deploy/haproxy.cfg as shipped, without a warning."""
        done = self.check(HAPROXY_CFG)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertNotIn("WARNING", done.stdout + done.stderr)

    def test_rendered_config_is_valid(self) -> None:
        """What the fleet's tests run (ports and process lines changed) is valid too."""
        directory = Path(tempfile.mkdtemp(prefix="mcpx-haproxy-"))
        self.addCleanup(shutil.rmtree, directory, True)
        rendered = render_haproxy(
            HAPROXY_CFG.read_text(),
            bind=18080,
            servers={"mcpx1": 18001, "mcpx2": 18002, "mcpx3": 18003},
            directory=directory,
        )
        (directory / "haproxy.cfg").write_text(rendered)
        done = self.check(directory / "haproxy.cfg")
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn("server mcpx3 127.0.0.1:18003", rendered)
        self.assertIn("stick store-response res.hdr(Mcp-Session-Id)", rendered)


class UnitTests(SynchronousTestCase):
    def test_systemd_verifies_the_unit(self) -> None:
        """
        systemd-analyze verify finds nothing to say about an instance of the template
        (its ExecStart pointed at this mcpx, which verify requires to exist).
        """
        directory = Path(tempfile.mkdtemp(prefix="mcpx-unit-"))
        self.addCleanup(shutil.rmtree, directory, True)
        text = UNIT.read_text().replace("/usr/local/bin/mcpx", str(VENV_BIN / "mcpx"))
        self.assertIn(str(VENV_BIN / "mcpx"), text)
        (directory / "mcpx@.service").write_text(text)
        instance = directory / "mcpx@8801.service"
        instance.write_text(text)
        done = subprocess.run(
            ["systemd-analyze", "verify", str(instance)],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=directory,
        )
        self.assertEqual((done.returncode, done.stderr, done.stdout), (0, "", ""))

    def test_instance_is_the_port_and_the_password_a_credential(self) -> None:
        """
        Instance 8801 listens on 127.0.0.1:8801 with a state directory of its own, and
        reads the database password from its credential and the requestState keys from
        the one key file every instance shares, under names the daemon knows.
        """
        service = unit()["Service"]
        env = unit_environment(8801, Path("/var/lib"), Path("/run/credentials/mcpx@8801.service"))
        self.assertEqual(env["MCPX_DAEMON_LISTEN"], "tcp:8801:interface=127.0.0.1")
        self.assertEqual(env["MCPX_STATE_DIR"], "/var/lib/mcpx/8801")
        self.assertEqual(env["HOME"], "/var/lib/mcpx/8801")
        self.assertEqual(service["StateDirectory"], "mcpx/%i")
        credential = service["LoadCredential"].split(":", 1)[0]
        self.assertEqual(
            env["MCPX_STORE_PASSWORD_FILE"], f"/run/credentials/mcpx@8801.service/{credential}"
        )
        self.assertEqual(env["MCPX_PROTO_STATE_KEY_FILE"], "/etc/mcpx/state-keys")
        known = {setting.env for setting in SETTINGS} | LOCATIONS
        self.assertEqual(set(env) - known, set())
        self.assertTrue(service["ExecStart"].endswith(" daemon"))
        self.assertEqual(service["Type"], "notify")
        self.assertEqual(service["User"], "mcpx")
