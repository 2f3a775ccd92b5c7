"""Tests for L{mcpx.settings.config}."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase

from mcpx.settings.config import DEFAULT_CONFIG_ORIGIN, ConfigFile, load_config, parse_config
from mcpx.settings.errors import SettingsError
from mcpx.settings.servers import RemoteServer, StdioServer

FILE = "/home/u/.config/mcpx/config.json"


def parse(data: object) -> ConfigFile:
    return parse_config(data, origin=FILE, path=FILE, environ={})


class SettingsInFileTests(SynchronousTestCase):
    """Settings may be nested by section or dotted at the top level."""

    def test_nested_and_dotted(self) -> None:
        """Both forms are read, into the same dotted names."""
        found = parse_config(
            {"pool": {"callTimeout": "30s"}, "daemon.logLevel": "debug"},
            origin=FILE,
            path=FILE,
            environ={},
        )
        self.assertEqual(
            dict(found.settings), {"pool.callTimeout": 30.0, "daemon.logLevel": "debug"}
        )

    def test_both_forms(self) -> None:
        """The same setting given nested and dotted is refused."""
        error = self.assertRaises(
            SettingsError, parse, {"pool": {"callTimeout": "1s"}, "pool.callTimeout": "2s"}
        )
        self.assertIn("'pool.callTimeout' is given both nested and dotted", str(error))

    def test_unknown_top_level(self) -> None:
        """An unknown top-level key is refused, suggesting the closest, and only that: the
        suggestion is not buried under every valid name."""
        error = self.assertRaises(SettingsError, parse, {"sever": {}})
        message = str(error)
        self.assertTrue(message.startswith(f"{FILE}: unknown key 'sever'"))
        self.assertTrue(message.endswith("'sever'; did you mean 'servers'?"), message)
        self.assertNotIn("pool.callTimeout", message)

    def test_section_not_object(self) -> None:
        """A section given as something other than an object is refused."""
        error = self.assertRaises(SettingsError, parse, {"pool": "30s"})
        self.assertIn("'pool' must be an object", str(error))

    def test_bad_value(self) -> None:
        """A bad value names the file and the setting."""
        error = self.assertRaises(SettingsError, parse, {"exec": {"timeout": "soon"}})
        self.assertTrue(str(error).startswith(f"{FILE}: setting 'exec.timeout': invalid duration"))

    def test_not_object(self) -> None:
        """A file that is not a JSON object is refused."""
        self.assertRaises(SettingsError, parse, ["servers"])

    def test_schema_allowed(self) -> None:
        """C{$schema}, which editors add, is allowed and ignored."""
        found = parse_config({"$schema": "x"}, origin=FILE, path=FILE, environ={})
        self.assertEqual(dict(found.settings), {})


class ServersInFileTests(SynchronousTestCase):
    """C{servers} and C{mcpServers} are both read."""

    def test_both_groups(self) -> None:
        """Servers from C{servers} and C{mcpServers} are merged, in file order."""
        found = parse_config(
            {
                "servers": {"a": {"command": "a-mcp"}},
                "mcpServers": {"b": {"url": "https://b.example/mcp"}},
            },
            origin=FILE,
            path=FILE,
            environ={},
        )
        self.assertEqual(list(found.servers), ["a", "b"])
        self.assertIsInstance(found.servers["a"], StdioServer)
        self.assertIsInstance(found.servers["b"], RemoteServer)
        self.assertEqual(found.servers.origin, FILE)

    def test_same_name_twice(self) -> None:
        """A name in both C{servers} and C{mcpServers} is refused."""
        error = self.assertRaises(
            SettingsError,
            parse,
            {"servers": {"a": {"command": "x"}}, "mcpServers": {"a": {"command": "y"}}},
        )
        self.assertIn("server 'a' is named in both 'servers' and 'mcpServers'", str(error))

    def test_servers_not_object(self) -> None:
        """C{servers} must be an object."""
        self.assertRaises(SettingsError, parse, {"servers": [{"command": "x"}]})


class LoadConfigTests(SynchronousTestCase):
    """Finding and reading the file."""

    def setUp(self) -> None:
        self.root = Path(self.mktemp()).absolute()
        self.root.mkdir()
        self.environ = {"XDG_CONFIG_HOME": str(self.root), "HOME": str(self.root)}

    def write(self, text: str) -> Path:
        path = self.root / "mcpx" / "config.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        return path

    def test_default_location(self) -> None:
        """A file at the default location is read, with its path as the origin."""
        path = self.write(json.dumps({"servers": {"x": {"command": "x-mcp"}}}))
        found = load_config(self.environ)
        self.assertEqual(found.origin, str(path))
        self.assertEqual(found.path, str(path))
        self.assertEqual(list(found.servers), ["x"])

    def test_missing_default(self) -> None:
        """
        No file at the default location means the shipped configuration: one
        C{demo} server run by this interpreter, from C{default config}.
        """
        found = load_config(self.environ)
        self.assertEqual(found.origin, DEFAULT_CONFIG_ORIGIN)
        self.assertIsNone(found.path)
        demo = found.servers["demo"]
        assert isinstance(demo, StdioServer)
        self.assertEqual(demo.command, sys.executable)
        self.assertEqual(demo.args, ("-P", "-m", "mcpx.demo"))

    def test_python_only_in_shipped(self) -> None:
        """In a user's file, C{"python"} stays C{"python"}."""
        self.write(json.dumps({"servers": {"x": {"command": "python"}}}))
        server = load_config(self.environ).servers["x"]
        assert isinstance(server, StdioServer)
        self.assertEqual(server.command, "python")

    def test_missing_named(self) -> None:
        """A missing file that C{$MCPX_CONFIG} names is refused."""
        missing = self.root / "nope.json"
        error = self.assertRaises(
            SettingsError, load_config, {**self.environ, "MCPX_CONFIG": str(missing)}
        )
        self.assertIn(f"MCPX_CONFIG={missing}: no such file", str(error))

    def test_named(self) -> None:
        """A file that C{$MCPX_CONFIG} names is read instead of the default location."""
        named = self.root / "other.json"
        named.write_text('{"proto": {"askRounds": 2}}')
        self.write('{"proto": {"askRounds": 5}}')
        found = load_config({**self.environ, "MCPX_CONFIG": str(named)})
        self.assertEqual(found.settings["proto.askRounds"], 2)

    def test_invalid_json(self) -> None:
        """Invalid JSON is refused with the file, line and column."""
        path = self.write('{\n  "pool": {,}\n}')
        error = self.assertRaises(SettingsError, load_config, self.environ)
        self.assertTrue(str(error).startswith(f"{path}: not valid JSON"))
        self.assertIn("line 2", str(error))

    def test_duplicate_key(self) -> None:
        """A key given twice in one object is refused rather than silently overwritten."""
        self.write('{"pool": {"callTimeout": "1s", "callTimeout": "2s"}}')
        error = self.assertRaises(SettingsError, load_config, self.environ)
        self.assertIn("'callTimeout' appears twice", str(error))


class HostFileTests(SynchronousTestCase):
    """A host's own config file pointed at as it is (L{parse_config} on its JSON)."""

    def test_unknown_key_punctuated(self) -> None:
        """In mcpx's own file an unknown key with no near name is refused, saying where the
        valid names are listed rather than listing every setting."""
        message = str(self.assertRaises(SettingsError, parse, {"globalShortcut": "x"}))
        self.assertIn("unknown key 'globalShortcut'; docs/configuration.md lists the", message)
        self.assertNotIn("pool.callTimeout", message)

    def test_claude_desktop(self) -> None:
        """A Claude Desktop file's own keys are ignored, each with a note naming the file;
        its servers and mcpx's settings beside them are read."""
        found = parse_config(
            {
                "globalShortcut": "Ctrl+Space",
                "mcpServers": {"a": {"command": "true"}},
                "pool": {"callTimeout": "20s"},
            },
            origin=FILE,
            path=FILE,
            environ={},
        )
        self.assertEqual(list(found.servers), ["a"])
        self.assertEqual(dict(found.settings), {"pool.callTimeout": 20.0})
        [note] = found.notes
        self.assertIn(f"{FILE}: ignored 'globalShortcut'", note)
        self.assertEqual(found.servers.notes, found.notes)

    def test_vscode_inputs(self) -> None:
        """A VS Code file's C{inputs} are ignored with a note; C{type} is accepted."""
        found = parse(
            {
                "inputs": [{"id": "tok", "type": "promptString"}],
                "servers": {"a": {"type": "stdio", "command": "true"}},
            }
        )
        [note] = found.notes
        self.assertIn("ignored 'inputs'", note)

    def test_host_variables_are_not_environment(self) -> None:
        """C{${workspaceFolder}} and C{${input:ID}} are refused as the host's variables,
        even when the environment has a variable of that name; C{${env:NAME}} is the
        environment variable C{NAME}."""
        for reference in ("${workspaceFolder}", "${input:token}", "${userHome}"):
            entry = {"mcpServers": {"a": {"command": "x", "args": [reference]}}}
            error = self.assertRaises(
                SettingsError,
                parse_config,
                entry,
                origin=FILE,
                path=FILE,
                environ={"workspaceFolder": "/w", "userHome": "/h"},
            )
            self.assertIn(f"{reference} is a variable of an MCP host", str(error))
            self.assertIn("mcpx import", str(error))
        found = parse_config(
            {"mcpServers": {"a": {"command": "x", "env": {"K": "${env:HOME}"}}}},
            origin=FILE,
            path=FILE,
            environ={"HOME": "/home/u"},
        )
        server = found.servers["a"]
        assert isinstance(server, StdioServer)
        self.assertEqual(server.env["K"].reveal(), "/home/u")
