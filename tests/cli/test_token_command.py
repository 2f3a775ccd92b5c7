"""C{mcpx token}: print the daemon's token, or rotate it, without a daemon."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from click.testing import CliRunner
from twisted.trial.unittest import SynchronousTestCase

from mcpx.cli.main import main


class TokenCommandTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.state = Path(tempfile.mkdtemp()) / "state"
        self.runner = CliRunner()

    def token(self, *args: str) -> str:
        result = self.runner.invoke(main, ["token", *args], env={"MCPX_STATE_DIR": str(self.state)})
        self.assertEqual(result.exit_code, 0, result.output)
        return result.output.strip()

    def test_prints_the_same_token_each_time(self) -> None:
        """The first run makes the token (0600); later runs print the same one."""
        token = self.token()
        self.assertEqual(self.token(), token)
        self.assertEqual((self.state / "token").read_text().strip(), token)
        self.assertEqual(os.stat(self.state / "token").st_mode & 0o777, 0o600)

    def test_rotate(self) -> None:
        """--rotate prints a new token, which is the one kept from then on."""
        old = self.token()
        new = self.token("--rotate")
        self.assertNotEqual(new, old)
        self.assertEqual(self.token(), new)
