"""Tests for L{mcpx.settings.host_files}: the hosts' config files read as mcpx entries."""

from __future__ import annotations

from pathlib import PurePosixPath

from twisted.trial.unittest import SynchronousTestCase

from mcpx.settings.host_files import env_name_for, host_servers

HOME = PurePosixPath("/home/me")


def read(data: object, path: str, workspace: str | None = None) -> object:
    return host_servers(
        data,
        PurePosixPath(path),
        home=HOME,
        workspace=PurePosixPath(workspace) if workspace else None,
    )


class HostFileTests(SynchronousTestCase):
    def test_claude_desktop(self) -> None:
        """Claude Desktop's own keys are ignored with one note; the entries are kept, a
        name mcpx would refuse is made one it takes, with a note."""
        found = host_servers(
            {
                "globalShortcut": "Ctrl+Space",
                "mcpServers": {
                    "fs": {"command": "npx", "args": ["-y", "fs", "/tmp"]},
                    "My Notes": {"command": "notes", "env": {"K": "v"}},
                },
            },
            PurePosixPath("/home/me/.config/Claude/claude_desktop_config.json"),
            home=HOME,
        )
        self.assertEqual(found.kind, "Claude Desktop")
        self.assertEqual(
            found.entries,
            {
                "fs": {"command": "npx", "args": ["-y", "fs", "/tmp"]},
                "My-Notes": {"command": "notes", "env": {"K": "v"}},
            },
        )
        self.assertIn("ignored 'globalShortcut': not about MCP servers", found.notes)
        self.assertIn("server 'My Notes' is imported as 'My-Notes', a name mcpx takes", found.notes)

    def test_cursor_variables(self) -> None:
        """In C{.cursor/mcp.json}, C{${workspaceFolder}} is the folder holding C{.cursor},
        C{${userHome}} the home, C{${env:X}} mcpx's C{${X}}; each fill-in is noted."""
        found = host_servers(
            {
                "mcpServers": {
                    "fs": {
                        "command": "npx",
                        "args": ["${workspaceFolder}/docs", "${userHome}${/}x"],
                        "env": {"T": "${env:TOKEN}"},
                    }
                }
            },
            PurePosixPath("/src/app/.cursor/mcp.json"),
            home=HOME,
        )
        self.assertEqual(found.kind, "Cursor")
        self.assertEqual(
            found.entries["fs"],
            {"command": "npx", "args": ["/src/app/docs", "/home/me/x"], "env": {"T": "${TOKEN}"}},
        )
        self.assertIn("server 'fs': args[0]: ${workspaceFolder} filled in as /src/app", found.notes)

    def test_workspace_unknown(self) -> None:
        """In Cursor's file for every workspace (C{~/.cursor/mcp.json}) there is no
        workspace: such an entry is left out, saying to give C{--workspace}, unless one is
        given."""
        data = {"mcpServers": {"fs": {"command": "x", "args": ["${workspaceFolder}"]}}}
        found = host_servers(data, PurePosixPath("/home/me/.cursor/mcp.json"), home=HOME)
        self.assertEqual(found.entries, {})
        self.assertIn("--workspace DIR", found.skipped["fs"])
        found = host_servers(
            data,
            PurePosixPath("/home/me/.cursor/mcp.json"),
            home=HOME,
            workspace=PurePosixPath("/w"),
        )
        self.assertEqual(found.entries["fs"]["args"], ["/w"])

    def test_vscode(self) -> None:
        """VS Code's C{servers}: C{type} and fields mcpx lacks are left out (noted);
        C{${input:ID}} becomes an environment variable, the note saying what VS Code
        asks; a variable mcpx cannot fill leaves the entry out."""
        found = host_servers(
            {
                "inputs": [{"type": "promptString", "id": "gh-token", "description": "PAT"}],
                "servers": {
                    "gh": {
                        "type": "http",
                        "url": "https://api.example.com/mcp",
                        "headers": {"Authorization": "Bearer ${input:gh-token}"},
                    },
                    "local": {"type": "stdio", "command": "node", "envFile": ".env"},
                    "pick": {"command": "x", "args": ["${command:pickFile}"]},
                },
            },
            PurePosixPath("/src/app/.vscode/mcp.json"),
            home=HOME,
        )
        self.assertEqual(found.kind, "VS Code")
        self.assertEqual(
            found.entries,
            {
                "gh": {
                    "url": "https://api.example.com/mcp",
                    "headers": {"Authorization": "Bearer ${GH_TOKEN}"},
                },
                "local": {"command": "node"},
            },
        )
        notes = "\n".join(found.notes)
        self.assertIn("${input:gh-token} is a value VS Code asks for ('PAT')", notes)
        self.assertIn("GH_TOKEN", notes)
        self.assertIn("server 'local': left out 'envFile'", notes)
        self.assertIn("${command:pickFile} is a variable of the host", found.skipped["pick"])

    def test_mcpx_fields_said_apart(self) -> None:
        """A host's entry with keys that are mcpx's own fields (its policy, warm) is not told
        mcpx has no such field: it is told mcpx does not take them from a host's file."""
        found = host_servers(
            {"mcpServers": {"fs": {"command": "x", "tools": {"deny": ["rm"]}, "warm": True}}},
            PurePosixPath("/home/u/.config/Claude/claude_desktop_config.json"),
            home=HOME,
        )
        notes = "\n".join(found.notes)
        self.assertIn("left out 'tools', 'warm': mcpx has such fields", notes)
        self.assertNotIn("no such field", notes)

    def test_claude_code(self) -> None:
        """C{~/.claude.json}: the user's servers and each project's, the project's
        directory as its workspace; the same name again, the same, is imported once, and
        differently is left out; a default in C{${X:-d}} is dropped with a note."""
        found = host_servers(
            {
                "numStartups": 3,
                "mcpServers": {"time": {"type": "stdio", "command": "uvx", "args": ["t"]}},
                "projects": {
                    "/src/app": {
                        "allowedTools": [],
                        "mcpServers": {
                            "time": {"command": "uvx", "args": ["t"]},
                            "db": {"command": "pg", "env": {"URL": "${DB_URL:-postgres://x}"}},
                        },
                    },
                    "/src/other": {"mcpServers": {"time": {"command": "other"}}},
                },
            },
            PurePosixPath("/home/me/.claude.json"),
            home=HOME,
        )
        self.assertEqual(found.kind, "Claude Code")
        self.assertEqual(
            found.entries,
            {
                "time": {"command": "uvx", "args": ["t"]},
                "db": {"command": "pg", "env": {"URL": "${DB_URL}"}},
            },
        )
        self.assertEqual(list(found.skipped), ["time of projects['/src/other'].mcpServers"])
        self.assertIn("ignored 'numStartups': not about MCP servers", found.notes)
        self.assertIn("has a default, which mcpx does not take", "\n".join(found.notes))

    def test_no_servers(self) -> None:
        """A file with no servers at all is refused."""
        self.assertRaises(ValueError, read, {"globalShortcut": "x"}, "/x/c.json")
        self.assertRaises(ValueError, read, [], "/x/c.json")

    def test_env_name_for(self) -> None:
        self.assertEqual(env_name_for("github-token"), "GITHUB_TOKEN")
        self.assertEqual(env_name_for("1pass"), "INPUT_1PASS")
