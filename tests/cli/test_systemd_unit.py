"""C{mcpx systemd-unit}: the unit files a user installs to run the daemon under systemd."""

from __future__ import annotations

import configparser
import os
import subprocess
import sys

from click.testing import CliRunner
from twisted.trial.unittest import SynchronousTestCase

from mcpx.cli.main import main
from mcpx.cli.systemd_unit import exec_word, unit_text


def parse_unit(text: str) -> configparser.ConfigParser:
    unit = configparser.ConfigParser(interpolation=None, strict=True)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string(text)
    return unit


class SystemdUnitCommandTests(SynchronousTestCase):
    def run_command(self, *args: str) -> configparser.ConfigParser:
        result = CliRunner().invoke(main, ["systemd-unit", *args])
        self.assertEqual(result.exit_code, 0, result.output)
        return parse_unit(result.output)

    def test_user_unit_runs_this_mcpx_as_a_notify_service(self) -> None:
        """The user unit is Type=notify, starts this mcpx by absolute path, restarts on failure."""
        unit = self.run_command()
        service = unit["Service"]
        self.assertEqual(service["Type"], "notify")
        self.assertEqual(service["Restart"], "on-failure")
        self.assertEqual(service["WatchdogSec"], "30s")
        program, *rest = service["ExecStart"].split()
        self.assertTrue(os.path.isabs(program), program)
        self.assertTrue(os.access(program, os.X_OK), program)
        self.assertEqual(rest[-1], "daemon")
        self.assertEqual(unit["Install"]["WantedBy"], "default.target")
        self.assertNotIn("User", service)

    def test_the_exec_start_command_is_a_working_mcpx(self) -> None:
        """What ExecStart names answers C{--version} as this mcpx."""
        program = self.run_command()["Service"]["ExecStart"].split()[:-1]
        done = subprocess.run(
            [*program, "--version"], check=False, capture_output=True, text=True, timeout=30
        )
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("mcpx", done.stdout)

    def test_system_template_runs_as_the_instance_user(self) -> None:
        """C{--system} prints an mcpx@.service template that runs as the user after the @."""
        unit = self.run_command("--system")
        service = unit["Service"]
        self.assertEqual(service["User"], "%i")
        self.assertEqual(service["Type"], "notify")
        self.assertEqual(service["NoNewPrivileges"], "yes")
        self.assertEqual(unit["Install"]["WantedBy"], "multi-user.target")

    def test_watchdog_is_chosen_or_turned_off(self) -> None:
        self.assertEqual(self.run_command("--watchdog", "10")["Service"]["WatchdogSec"], "10s")
        self.assertEqual(self.run_command("--watchdog", "0")["Service"]["WatchdogSec"], "0s")
        result = CliRunner().invoke(main, ["systemd-unit", "--watchdog", "-1"])
        self.assertEqual(result.exit_code, 2)

    def test_a_path_with_spaces_is_quoted(self) -> None:
        word = exec_word("/opt/my tools/mcpx")
        unit = parse_unit(unit_text(system=False, watchdog=30, exec_start=word))
        self.assertEqual(unit["Service"]["ExecStart"], '"/opt/my tools/mcpx" daemon')

    def test_printing_the_unit_does_not_import_twisted(self) -> None:
        """Like every command that does not run the daemon, it starts without Twisted."""
        probe = (
            "import sys\n"
            "from mcpx.cli.main import main\n"
            "try:\n"
            "    main(['systemd-unit'])\n"
            "except SystemExit:\n"
            "    pass\n"
            "sys.stderr.write(str(sorted(m for m in sys.modules if m.startswith('twisted'))))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", probe], check=False, capture_output=True, text=True, timeout=30
        )
        self.assertIn("Type=notify", done.stdout)
        self.assertEqual(done.stderr, "[]")
