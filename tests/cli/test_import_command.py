# -*- test-case-name: tests.cli.test_import_command -*-
"""C{mcpx import FILE}, run as a real process on a config file of the test's own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.cli.test_config_commands import ConfigFileCase


class ImportTests(ConfigFileCase):
    """Host files merged into mcpx's config file."""

    def host_file(self, relative: str, data: dict[str, Any]) -> Path:
        path = Path(self.config_home) / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data))
        return path

    async def test_claude_desktop(self) -> None:
        """A Claude Desktop file's servers are added; its own keys are noted on stderr and
        not copied; the summary names the host and what was added."""
        source = self.host_file(
            "Claude/claude_desktop_config.json",
            {"globalShortcut": "Ctrl+Space", "mcpServers": {"fs": {"command": "true"}}},
        )
        done = await self.ok("import", str(source))
        self.assertEqual(self.read(), {"servers": {"fs": {"command": "true"}}})
        self.assertIn("(Claude Desktop)", done.out)
        self.assertIn("added fs", done.out)
        self.assertIn("ignored 'globalShortcut'", done.err)

    async def test_vscode_merge_and_clash(self) -> None:
        """A VS Code file is merged beside what is there: an identical entry is 'already
        there', a different one of the same name is left out (exit 1) unless
        C{--replace}; C{${workspaceFolder}} is filled in and C{${input:ID}} becomes a
        variable, both noted; C{--dry-run} writes nothing."""
        self.write({"servers": {"same": {"command": "true"}, "gh": {"command": "old"}}})
        source = self.host_file(
            "app/.vscode/mcp.json",
            {
                "inputs": [{"id": "tok", "type": "promptString", "description": "Token"}],
                "servers": {
                    "same": {"type": "stdio", "command": "true"},
                    "gh": {
                        "type": "http",
                        "url": "https://example.com/mcp",
                        "headers": {"Authorization": "Bearer ${input:tok}"},
                    },
                    "local": {"command": "node", "args": ["${workspaceFolder}/s.js"]},
                },
            },
        )
        before = self.config.read_text()
        done = await self.mcpx("import", str(source), "--dry-run")
        self.assertEqual(done.code, 1, done)
        self.assertIn("would import", done.out)
        self.assertEqual(self.config.read_text(), before)

        done = await self.mcpx("import", str(source))
        self.assertEqual(done.code, 1, done)
        self.assertIn("added local; already there same", done.out)
        self.assertIn("left out 'gh'", done.err)
        self.assertIn("--replace", done.err)
        app = Path(self.config_home) / "app"
        self.assertIn(f"${{workspaceFolder}} filled in as {app}", done.err)
        data = self.read()
        self.assertEqual(data["servers"]["gh"], {"command": "old"})
        self.assertEqual(
            data["servers"]["local"],
            {"command": "node", "args": [f"{Path(self.config_home) / 'app'}/s.js"]},
        )

        done = await self.ok("import", str(source), "--replace", "--only", "gh")
        self.assertIn("replaced gh", done.out)
        self.assertIn("${input:tok} is a value VS Code asks for ('Token')", done.err)
        self.assertEqual(
            self.read()["servers"]["gh"],
            {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ${TOK}"}},
        )

    async def test_unusable(self) -> None:
        """A file that is not JSON, or has no servers, is exit 2 and writes nothing; the
        daemon's own file is not imported into itself."""
        bad = self.host_file("bad.json", {"globalShortcut": "x"})
        done = await self.mcpx("import", str(bad))
        self.assertEqual(done.code, 2, done)
        self.assertIn("holds no MCP servers", done.err)
        self.write({"servers": {}})
        done = await self.mcpx("import", str(self.config))
        self.assertEqual(done.code, 2, done)
        self.assertIn("mcpx's own config file", done.err)
