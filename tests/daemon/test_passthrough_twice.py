"""
Starting the daemon on a configuration that passes the same server through twice under
two names without a C{toolPrefix}: refused before anything starts, naming both.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase

from mcpx.daemon.config import daemon_config
from mcpx.settings.errors import SettingsError
from mcpx.settings.load import load_settings


class PassthroughTwiceAtStartTests(SynchronousTestCase):
    def start(self, home: dict[str, object], passthrough: str) -> None:
        directory = tempfile.mkdtemp(prefix="mcpx-cfg-")
        self.addCleanup(shutil.rmtree, directory, True)
        config = Path(directory) / "servers.json"
        work = {"command": "notes-mcp", "args": ["--dir", "/srv"]}
        config.write_text(json.dumps({"servers": {"work": work, "home": {**work, **home}}}))
        environ = {
            "MCPX_STATE_DIR": directory,
            "XDG_CONFIG_HOME": directory,
            "MCPX_CONFIG": str(config),
            "MCPX_MCP_PASSTHROUGH": passthrough,
        }
        settings, servers = load_settings(environ, {})
        daemon_config(settings, servers, environ)

    def test_refused_naming_both(self) -> None:
        """The same entry under two names, both passed through, is a configuration error."""
        error = self.assertRaises(SettingsError, self.start, {}, "work,home")
        self.assertIn("'work' and 'home'", str(error))
        self.assertIn("toolPrefix", str(error))

    def test_a_prefix_resolves_it(self) -> None:
        """With a toolPrefix on one of them, or one passed through, the daemon starts."""
        self.start({"toolPrefix": "home_"}, "work,home")
        self.start({}, "work")
