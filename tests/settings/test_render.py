"""Tests for L{mcpx.settings.render} and C{mcpx settings}."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from click.testing import CliRunner
from twisted.trial.unittest import SynchronousTestCase

from mcpx.cli.settings_command import flags_from_options, setting_options, settings_command
from mcpx.settings.declarations import SETTINGS

SECRET = "tok-9f8e7d"


class SettingsCommandTests(SynchronousTestCase):
    """C{mcpx settings} shows each value and where it came from."""

    def setUp(self) -> None:
        self.root = Path(self.mktemp()).absolute()
        (self.root / "config" / "mcpx").mkdir(parents=True)
        self.path = self.root / "config" / "mcpx" / "config.json"
        self.env = {
            "HOME": str(self.root),
            "XDG_CONFIG_HOME": str(self.root / "config"),
            "XDG_STATE_HOME": str(self.root / "state"),
        }

    def invoke(self, *args: str, **env: str) -> Any:
        return CliRunner().invoke(settings_command, list(args), env={**self.env, **env})

    def write(self, data: object) -> None:
        self.path.write_text(json.dumps(data))

    def test_table(self) -> None:
        """Each setting is a row of name, value and source, aligned in columns."""
        self.write({"pool": {"idleTimeout": "20m"}, "servers": {"a": {"command": "a-mcp"}}})
        result = self.invoke("--exec-timeout", "90s", MCPX_MCP_SPEC="2025-06-18")
        self.assertEqual(result.exit_code, 0, result.output)
        lines = result.output.splitlines()
        self.assertEqual(lines[0], f"config: {self.path}")
        header = next(line for line in lines if line.startswith("SETTING"))
        value_at, source_at = header.index("VALUE"), header.index("SOURCE")
        names = {setting.name for setting in SETTINGS}
        rows = {line.split()[0]: line for line in lines if line and line.split()[0] in names}
        # A section at a time (pool., daemon., ...), each in the order it is declared.
        sections: dict[str, list[str]] = {}
        for setting in SETTINGS:
            sections.setdefault(setting.name.split(".")[0], []).append(setting.name)
        self.assertEqual(list(rows), [name for names in sections.values() for name in names])
        expected = {
            "pool.idleTimeout": ("20m", str(self.path)),
            "exec.timeout": ("1m30s", "flag --exec-timeout"),
            "spec.first": ("2025-06-18", "env MCPX_MCP_SPEC"),
            "pool.callTimeout": ("1m", "default"),
        }
        for name, (value, source) in expected.items():
            row = rows[name]
            self.assertEqual(row[value_at:source_at].strip(), value)
            self.assertEqual(row[source_at:].strip(), source)
        self.assertIn(
            "effective precedence (first wins): 2025-06-18, 2026-07-28, 2025-11-25, "
            "2025-03-26, 2024-11-05",
            lines,
        )

    def test_default_config(self) -> None:
        """Without a config file the shipped configuration is shown as C{default config}."""
        self.path.unlink(missing_ok=True)
        result = self.invoke()
        self.assertEqual(result.exit_code, 0, result.output)
        self.assertIn("(no such file: the configuration shipped with mcpx is used)", result.output)
        self.assertIn("demo", result.output)

    def test_json(self) -> None:
        """C{--json} prints every setting with value, source, variable and flag."""
        self.write(
            {
                "servers": {
                    "gh": {"url": "https://e.x/mcp", "auth": {"type": "bearer", "token": SECRET}}
                },
                "proto.askRounds": 3,
            }
        )
        result = self.invoke("--json", MCPX_SPEC_LENIENT="2026-07-28")
        self.assertEqual(result.exit_code, 0, result.output)
        self.assertNotIn(SECRET, result.output)
        shown = json.loads(result.output)
        self.assertEqual(shown["config"], str(self.path))
        self.assertEqual([s["name"] for s in shown["settings"]], [s.name for s in SETTINGS])
        by_name = {s["name"]: s for s in shown["settings"]}
        self.assertEqual(
            by_name["proto.askRounds"],
            {
                "name": "proto.askRounds",
                "value": 3,
                "source": {"kind": "file", "detail": str(self.path)},
                "env": "MCPX_PROTO_ASK_ROUNDS",
                "flag": "--proto-ask-rounds",
            },
        )
        self.assertEqual(by_name["spec.lenient"]["value"], ["2026-07-28"])
        self.assertEqual(by_name["spec.lenient"]["source"]["kind"], "env")
        self.assertEqual(by_name["pool.callTimeout"]["value"], "1m")
        self.assertEqual(shown["policy"]["lenient"], ["2026-07-28"])
        self.assertEqual(
            shown["servers"],
            {
                "gh": {
                    "url": "https://e.x/mcp",
                    "headers": {},
                    "auth": {"type": "bearer", "token": "***"},
                    "scope": "shared",
                }
            },
        )

    def test_json_default_config(self) -> None:
        """With the shipped configuration, C{config} is null."""
        result = self.invoke("--json")
        shown = json.loads(result.output)
        self.assertIsNone(shown["config"])
        self.assertEqual(shown["configOrigin"], "default config")

    def test_error(self) -> None:
        """A settings problem is printed to stderr and the command exits 2."""
        result = self.invoke(MCPX_MCP_SPEC="1999-01-01")
        self.assertEqual(result.exit_code, 2)
        self.assertIn("mcpx: MCPX_MCP_SPEC=1999-01-01: unknown MCP revision", result.stderr)
        self.assertIn("2026-07-28", result.stderr)
        self.assertEqual(result.stdout, "")

    def test_bad_file(self) -> None:
        """A bad config file is reported with its path, and the command exits 2."""
        self.write({"servers": {"gh": {"url": "https://e.x", "auth": {"type": "oauth2"}}}})
        result = self.invoke()
        self.assertEqual(result.exit_code, 2)
        self.assertIn(f"{self.path}: server 'gh': field 'auth.type'", result.stderr)


class SettingOptionsTests(SynchronousTestCase):
    """Other commands take the same flags."""

    def test_flags(self) -> None:
        """Every setting gets a flag, and the given ones come back by setting name."""
        seen: dict[str, str] = {}

        @click.command()
        @click.option("--other")
        @setting_options
        def command(**kwargs: str | None) -> None:
            seen.update(flags_from_options(kwargs))

        result = CliRunner().invoke(
            command, ["--passthrough", "a,b", "--other", "x", "--daemon-log-level", "debug"]
        )
        self.assertEqual(result.exit_code, 0, result.output)
        self.assertEqual(seen, {"mcp.passthrough": "a,b", "daemon.logLevel": "debug"})
        help_text = CliRunner().invoke(command, ["--help"]).output
        for setting in SETTINGS:
            self.assertIn(setting.flag, help_text)
