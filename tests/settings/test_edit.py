"""Tests for L{mcpx.settings.edit}: the config file read, checked and written for an edit."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase

from mcpx.settings.edit import (
    check_document,
    open_document,
    with_server,
    without_server,
    write_document,
)
from mcpx.settings.errors import SettingsError


class EditTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="mcpx-edit-"))
        self.addCleanup(shutil.rmtree, self.home, True)
        self.environ = {"HOME": str(self.home), "XDG_CONFIG_HOME": str(self.home / "cfg")}
        self.path = self.home / "cfg" / "mcpx" / "config.json"

    def test_missing_file_is_empty(self) -> None:
        """No file yet: an empty document at the default location, to be created."""
        document = open_document(self.environ)
        self.assertEqual((document.path, document.data, document.exists), (self.path, {}, False))

    def test_write_replaces_keeping_mode(self) -> None:
        """The new text replaces the file in one step (a new inode), with the old mode;
        nothing else is left in the directory."""
        self.path.parent.mkdir(parents=True)
        self.path.write_text("{}")
        self.path.chmod(0o640)
        before = self.path.stat().st_ino
        write_document(self.path, {"servers": {"a": {"command": "true"}}})
        self.assertNotEqual(self.path.stat().st_ino, before)
        self.assertEqual(stat.S_IMODE(self.path.stat().st_mode), 0o640)
        self.assertEqual(json.loads(self.path.read_text())["servers"]["a"]["command"], "true")
        self.assertEqual(os.listdir(self.path.parent), ["config.json"])

    def test_groups(self) -> None:
        """A server is set where its name is (C{mcpServers} too), else under C{servers};
        removing takes it from its group."""
        self.path.parent.mkdir(parents=True)
        self.path.write_text(json.dumps({"mcpServers": {"a": {"command": "x"}}}))
        document = open_document(self.environ)
        self.assertEqual(
            with_server(document, "a", {"command": "y"}), {"mcpServers": {"a": {"command": "y"}}}
        )
        self.assertEqual(
            with_server(document, "b", {"command": "y"}),
            {"mcpServers": {"a": {"command": "x"}, "b": {"command": "y"}}},
        )
        self.assertEqual(without_server(document, "a"), {"mcpServers": {}})

    def test_check(self) -> None:
        """The check is the daemon's: a bad entry or a pass-through of a server not
        configured is refused; a variable this environment lacks is returned, not refused."""
        unset = check_document(
            {"servers": {"a": {"url": "https://${HOST}/mcp"}}}, self.path, self.environ
        )
        self.assertEqual(unset, ["HOST"])
        self.assertRaises(
            SettingsError, check_document, {"servers": {"a": {}}}, self.path, self.environ
        )
        error = self.assertRaises(
            SettingsError,
            check_document,
            {"servers": {}, "mcp": {"passthrough": ["gone"]}},
            self.path,
            self.environ,
        )
        self.assertIn("'gone'", str(error))
