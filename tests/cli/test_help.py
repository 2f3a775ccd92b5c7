"""What C{mcpx --help} and a command's C{--help} offer."""

from __future__ import annotations

import os
import subprocess
import sys

from click.testing import CliRunner
from twisted.trial.unittest import SynchronousTestCase

from mcpx.cli.main import main


class HelpTests(SynchronousTestCase):
    def help_of(self, *args: str) -> str:
        result = CliRunner().invoke(main, [*args, "--help"])
        self.assertEqual(result.exit_code, 0, result.output)
        return result.output

    def test_serve_help_offers_no_transport(self) -> None:
        """`mcpx serve --help` offers no --transport: stdio is all it speaks."""
        self.assertNotIn("--transport", self.help_of("serve"))
        self.assertIn("--passthrough", self.help_of("serve"))

    def test_stop_and_reload_are_commands(self) -> None:
        """`mcpx --help` lists stop and reload, each with its own help."""
        listed = self.help_of()
        for name in ("stop", "reload"):
            self.assertRegex(listed, rf"\n  {name}\s")
        self.assertIn("SIGTERM", self.help_of("stop"))
        self.assertIn("config file", self.help_of("reload"))

    def test_completion_offers_command_names(self) -> None:
        """The bash completion documented in docs/cli.md completes `mcpx st` to stop and status."""
        result = CliRunner().invoke(
            main,
            [],
            env={"_MCPX_COMPLETE": "bash_complete", "COMP_WORDS": "mcpx st", "COMP_CWORD": "1"},
            prog_name="mcpx",
        )
        self.assertEqual(result.output.split(), ["plain,status", "plain,stop"])

    def test_completion_scripts(self) -> None:
        """
        Each line docs/cli.md gives (C{_MCPX_COMPLETE=<shell>_source mcpx}) makes the
        command itself, through its console entry, print a script that registers
        completion for C{mcpx} in that shell.
        """
        registers = {
            "bash": "complete -o nosort -F _mcpx_completion mcpx",
            "zsh": "#compdef mcpx",
            "fish": "complete --no-files --command mcpx",
        }
        # The installed console script: click names the variable after the program.
        command = os.path.join(os.path.dirname(sys.executable), "mcpx")
        for shell, line in registers.items():
            env = {**os.environ, "_MCPX_COMPLETE": f"{shell}_source"}
            done = subprocess.run(
                [command], check=False, env=env, capture_output=True, text=True, timeout=30
            )
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertIn(line, done.stdout, shell)
            self.assertIn(f"_MCPX_COMPLETE={shell}_complete", done.stdout, shell)
