"""Tests for L{mcpx.settings.load}."""

from __future__ import annotations

import json
from pathlib import Path

from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase

from mcpx.settings.errors import SettingsError
from mcpx.settings.load import flags_from_usage, load_settings, usage_parameters
from mcpx.settings.resolve import SourceKind


class LoadSettingsTests(SynchronousTestCase):
    """Paths, config file and resolution in one call."""

    def setUp(self) -> None:
        root = Path(self.mktemp()).absolute()
        (root / "mcpx").mkdir(parents=True)
        self.path = root / "mcpx" / "config.json"
        self.environ = {"XDG_CONFIG_HOME": str(root), "HOME": str(root)}

    def test_layers(self) -> None:
        """The file found through the environment is layered under env and flags."""
        self.path.write_text(
            json.dumps(
                {
                    "servers": {"a": {"command": "a"}},
                    "pool": {"callTimeout": "5s"},
                    "exec.timeout": "9s",
                }
            )
        )
        settings, servers = load_settings(
            {**self.environ, "MCPX_EXEC_TIMEOUT": "7s"}, {"proto.askRounds": "2"}
        )
        self.assertEqual(list(servers), ["a"])
        self.assertEqual(settings.source("pool.callTimeout").detail, str(self.path))
        self.assertEqual(settings.duration("exec.timeout"), 7.0)
        self.assertEqual(settings.source("exec.timeout").kind, SourceKind.ENV)
        self.assertEqual(settings.source("proto.askRounds").kind, SourceKind.FLAG)

    def test_passthrough_unknown_server(self) -> None:
        """C{mcp.passthrough} naming a server nobody configured is refused."""
        self.path.write_text(json.dumps({"servers": {"a": {"command": "a"}}}))
        error = self.assertRaises(
            SettingsError, load_settings, {**self.environ, "MCPX_MCP_PASSTHROUGH": "a,b"}, {}
        )
        self.assertIn("names server 'b'", str(error))
        self.assertIn("env MCPX_MCP_PASSTHROUGH", str(error))
        self.assertIn("configured servers: a", str(error))

    def test_passthrough_known_server(self) -> None:
        """C{mcp.passthrough} naming configured servers is accepted."""
        settings, _ = load_settings(self.environ, {"mcp.passthrough": "demo"})
        self.assertEqual(settings.strings("mcp.passthrough"), ("demo",))


class UsageOptionsTests(SynchronousTestCase):
    """Settings as options of a twistd plugin."""

    def test_round_trip(self) -> None:
        """Flags parsed by a C{usage.Options} come back keyed by setting name."""

        class Options(usage.Options):
            optParameters = usage_parameters()

        options = Options()
        options.parseOptions(["--mcp-spec", "2025-06-18", "--pool-call-timeout=3s"])
        self.assertEqual(
            flags_from_usage(options), {"spec.first": "2025-06-18", "pool.callTimeout": "3s"}
        )
