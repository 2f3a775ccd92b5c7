# -*- test-case-name: tests.cli.test_config_commands -*-
"""C{mcpx add} and C{mcpx remove}, run as real processes on a config file of the test's own."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.cli.test_commands import CommandRunner, Done
from tests.cli.test_real_daemon import RealDaemonCase


class ConfigFileCase(CommandRunner):
    """Commands run on a config file at the default location of a config home of its own."""

    def setUp(self) -> None:
        super().setUp()
        self.config_home = tempfile.mkdtemp(prefix="mcpx-cfg-")
        self.addCleanup(shutil.rmtree, self.config_home, True)
        self.env["XDG_CONFIG_HOME"] = self.config_home
        self.config = Path(self.config_home) / "mcpx" / "config.json"

    def write(self, data: dict[str, Any], mode: int = 0o644) -> None:
        self.config.parent.mkdir(parents=True, exist_ok=True)
        self.config.write_text(json.dumps(data))
        self.config.chmod(mode)

    def read(self) -> Any:
        return json.loads(self.config.read_text())

    async def ok(self, *args: str) -> Done:
        done = await self.mcpx(*args)
        self.assertEqual(done.code, 0, done)
        return done


class ConfigEditTests(ConfigFileCase):
    """Edits of the config file, with no daemon running."""

    async def test_add_stdio_creates_the_file(self) -> None:
        """C{mcpx add NAME -- COMMAND...} creates the default config file, private to its
        owner, with the command's own options kept as arguments and C{--env} as its
        environment; it says the shipped demo is no longer used and that no daemon runs."""
        done = await self.ok(
            "add", "fs", "--env", "ROOT=/srv/x=y", "--", "npx", "-y", "@scope/fs", "/tmp"
        )
        self.assertEqual(
            self.read(),
            {
                "servers": {
                    "fs": {
                        "command": "npx",
                        "args": ["-y", "@scope/fs", "/tmp"],
                        "env": {"ROOT": "/srv/x=y"},
                    }
                }
            },
        )
        self.assertEqual(stat.S_IMODE(self.config.stat().st_mode), 0o600)
        self.assertIn(
            f"added server 'fs' (stdio: npx -y @scope/fs /tmp) in {self.config}", done.out
        )
        self.assertIn("demo", done.err)
        self.assertIn("no daemon is running", done.err)
        self.assertEqual([p.name for p in self.config.parent.iterdir()], ["config.json"])

    async def test_add_as_a_readme_writes_it(self) -> None:
        """C{mcpx add fs npx -y @scope/server}, the form every server's README shows, works
        without C{--}: the command's C{-y} is its own, mcpx's options before it are mcpx's."""
        await self.ok("add", "--env", "A=1", "fs", "npx", "-y", "@scope/fs", "--tmp", "/tmp")
        self.assertEqual(
            self.read()["servers"]["fs"],
            {"command": "npx", "args": ["-y", "@scope/fs", "--tmp", "/tmp"], "env": {"A": "1"}},
        )

    async def test_add_pass_env(self) -> None:
        """C{--pass-env NAME} names a variable of the daemon's for the command
        (C{envPassthrough}); one of mcpx's own is refused and nothing is written."""
        await self.ok(
            "add", "aws", "--pass-env", "AWS_PROFILE", "--pass-env", "HTTPS_PROXY", "--", "aws-mcp"
        )
        self.assertEqual(
            self.read()["servers"]["aws"],
            {"command": "aws-mcp", "args": [], "envPassthrough": ["AWS_PROFILE", "HTTPS_PROXY"]},
        )
        refused = await self.mcpx("add", "x", "--pass-env", "MCPX_STATE_DIR", "--", "true")
        self.assertNotEqual(refused.code, 0, refused)
        self.assertIn("MCPX_STATE_DIR is mcpx's own", refused.err)
        self.assertNotIn("x", self.read()["servers"])

    async def test_add_remote_keeps_the_rest(self) -> None:
        """C{mcpx add NAME URL} adds a remote server beside what the file holds (settings,
        other servers, in their order) and keeps the file's mode; an unset variable in a
        header is noted, not refused."""
        self.write({"pool": {"callTimeout": "45s"}, "servers": {"a": {"command": "true"}}}, 0o640)
        done = await self.ok(
            "add", "gh", "https://example.com/mcp", "--header", "Authorization: Bearer ${GH_TOK}"
        )
        data = self.read()
        self.assertEqual(data["pool"], {"callTimeout": "45s"})
        self.assertEqual(list(data["servers"]), ["a", "gh"])
        self.assertEqual(
            data["servers"]["gh"],
            {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ${GH_TOK}"}},
        )
        self.assertEqual(stat.S_IMODE(self.config.stat().st_mode), 0o640)
        self.assertIn("${GH_TOK} is not set here", done.err)
        self.assertNotIn("demo", done.err)

    async def test_existing_name(self) -> None:
        """An existing name is refused, saying what it is and how to replace or remove it;
        C{--replace} replaces it."""
        self.write({"servers": {"fs": {"command": "old", "args": ["1"]}}})
        done = await self.mcpx("add", "fs", "--", "new")
        self.assertEqual(done.code, 1, done)
        self.assertIn("already has a server 'fs' (stdio: old 1)", done.err)
        self.assertIn("--replace", done.err)
        self.assertIn("`mcpx remove fs`", done.err)
        self.assertEqual(self.read()["servers"]["fs"]["command"], "old")
        await self.ok("add", "fs", "--replace", "--", "new")
        self.assertEqual(self.read()["servers"]["fs"], {"command": "new", "args": []})

    async def test_invalid_is_not_written(self) -> None:
        """An entry the daemon would refuse is refused with its reason and exit 2, and the
        file is left as it was."""
        self.write({"servers": {"a": {"command": "true"}}})
        before = self.config.read_text()
        done = await self.mcpx("add", "b", "--tool-prefix", "no spaces", "--", "true")
        self.assertEqual(done.code, 2, done)
        self.assertIn("'toolPrefix'", done.err)
        self.assertIn("nothing was written", done.err)
        self.assertEqual(self.config.read_text(), before)
        done = await self.mcpx("add", "b", "ftp://example.com")
        self.assertEqual(done.code, 2, done)
        self.assertIn("http:// or https://", done.err)
        done = await self.mcpx("add", "b", "https://example.com", "--env", "A=1")
        self.assertEqual(done.code, 2, done)
        self.assertIn("--header", done.err)
        self.assertEqual(self.config.read_text(), before)

    async def test_bad_file_is_not_touched(self) -> None:
        """A config file that is not valid JSON is reported, with where, and left alone."""
        self.config.parent.mkdir(parents=True)
        self.config.write_text('{"servers": {')
        done = await self.mcpx("add", "b", "--", "true")
        self.assertEqual(done.code, 2, done)
        self.assertIn("not valid JSON", done.err)
        self.assertIn("fix the file first", done.err)
        self.assertEqual(self.config.read_text(), '{"servers": {')

    async def test_remove(self) -> None:
        """C{mcpx remove} removes a server from C{servers} or C{mcpServers}; an unknown
        name is exit 3, listing the names there are; a server that C{mcp.passthrough}
        names is refused, as the daemon would refuse the file."""
        self.write(
            {
                "servers": {"a": {"command": "true"}},
                "mcpServers": {"b": {"command": "true"}, "c": {"command": "true"}},
                "mcp": {"passthrough": ["c"]},
            }
        )
        done = await self.ok("remove", "b")
        self.assertIn("removed server 'b'", done.out)
        self.assertEqual(self.read()["mcpServers"], {"c": {"command": "true"}})
        done = await self.mcpx("remove", "zz")
        self.assertEqual(done.code, 3, done)
        self.assertIn("has no server 'zz'; the servers it has: a, c", done.err)
        done = await self.mcpx("remove", "c")
        self.assertEqual(done.code, 2, done)
        self.assertIn("mcp.passthrough", done.err)
        self.assertIn("c", self.read()["mcpServers"])

    async def test_symlink_and_named_file(self) -> None:
        """The file C{MCPX_CONFIG} names is the one edited; a symbolic link stays a link
        and the file it points at changes."""
        real = Path(self.config_home) / "real.json"
        real.write_text(json.dumps({"servers": {}}))
        link = Path(self.config_home) / "link.json"
        link.symlink_to(real)
        self.env["MCPX_CONFIG"] = str(link)
        await self.ok("add", "x", "--", "true")
        self.assertTrue(link.is_symlink())
        self.assertEqual(
            json.loads(real.read_text())["servers"], {"x": {"command": "true", "args": []}}
        )
        self.assertFalse(self.config.exists())

    async def test_command_environment_is_not_the_daemons(self) -> None:
        """The command's own C{MCPX_} variables (an empty C{MCPX_DAEMON}, a setting for
        this shell) do not make the file look invalid: only the file is checked."""
        self.env.update(MCPX_DAEMON="", MCPX_POOL_CALL_TIMEOUT="not a duration")
        await self.ok("add", "x", "--", "true")
        self.assertIn("x", self.read()["servers"])

    async def test_remote_daemon_refused(self) -> None:
        """With C{--daemon ssh://...} the command refuses, saying where to run it."""
        done = await self.mcpx("--daemon", "ssh://box", "add", "x", "--", "true")
        self.assertEqual(done.code, 2, done)
        self.assertIn("ssh box mcpx add", done.err)
        self.assertFalse(self.config.exists())


class RunningDaemonTests(RealDaemonCase):
    """A daemon running from the file edited is reloaded."""

    async def test_add_then_remove_reloads(self) -> None:
        """C{mcpx add} makes the server available at once (the daemon reloaded), C{mcpx
        remove} takes it away; C{--no-reload} leaves the daemon as it was and says how to
        apply the change."""
        await self.start_daemon({"a": [sys.executable, "-m", "mcpx.demo"]})
        done = await self.ok("add", "b", "--", sys.executable, "-m", "mcpx.demo")
        self.assertIn("reloaded: added b; unchanged a", done.out)
        servers = (await self.ok("servers", "--json")).json()["servers"]
        self.assertEqual([s["name"] for s in servers], ["a", "b"])
        done = await self.ok("call", "b", "add", "a=2", "b=3", "--json")
        self.assertEqual(done.json()["structuredContent"], {"sum": 5})

        done = await self.ok("remove", "a", "--no-reload")
        self.assertIn("`mcpx reload`", done.err)
        servers = (await self.ok("servers", "--json")).json()["servers"]
        self.assertEqual([s["name"] for s in servers], ["a", "b"])
        done = await self.ok("remove", "b")
        self.assertIn("reloaded: removed a, b", done.out)

    async def test_variable_the_daemon_lacks(self) -> None:
        """C{mcpx add} of a server naming a C{${VAR}} the daemon's environment lacks (the
        command's own has it) is applied and warned about: that server is misconfigured,
        saying why, in C{mcpx servers}; the others run; C{mcpx settings} still reads the
        file; and the next C{add} is applied too."""
        await self.start_daemon({"a": [sys.executable, "-m", "mcpx.demo"]})
        self.env["MCPX_TEST_TOKEN"] = "from-this-shell-only"
        done = await self.ok(
            "add", "b", "--env", "TOKEN=${MCPX_TEST_TOKEN}", "--", sys.executable, "-m", "mcpx.demo"
        )
        self.assertIn("misconfigured b", done.out)
        self.assertIn("warning: server 'b' cannot start", done.err)
        self.assertIn("MCPX_TEST_TOKEN is not set in the daemon's environment", done.err)
        servers = {s["name"]: s for s in (await self.ok("servers", "--json")).json()["servers"]}
        self.assertEqual(servers["b"]["state"], "misconfigured")
        self.assertIn("MCPX_TEST_TOKEN", servers["b"]["last_error"])
        self.assertIn(servers["a"]["state"], ("configured", "ready", "starting"))
        done = await self.ok("call", "a", "add", "a=2", "b=3", "--json")
        self.assertEqual(done.json()["structuredContent"], {"sum": 5})
        called = await self.mcpx("call", "b", "add", "a=2", "b=3")
        self.assertNotEqual(called.code, 0)
        self.assertIn("MCPX_TEST_TOKEN", called.err)
        del self.env["MCPX_TEST_TOKEN"]
        await self.ok("settings")
        done = await self.ok("add", "c", "--", sys.executable, "-m", "mcpx.demo")
        self.assertIn("added c", done.out)

    async def test_daemon_reads_a_claude_desktop_file(self) -> None:
        """A daemon pointed at a Claude Desktop file starts, its C{globalShortcut} noted in
        the log and its servers served; C{mcpx add} then adds to that file, keeping the
        host's key."""
        config = Path(self.config_home) / "claude_desktop_config.json"
        config.write_text(
            json.dumps(
                {
                    "globalShortcut": "Ctrl+Space",
                    "mcpServers": {"a": {"command": sys.executable, "args": ["-m", "mcpx.demo"]}},
                }
            )
        )
        self.env["MCPX_CONFIG"] = str(config)
        daemon = await self.start_daemon()
        await daemon.wait_for(rb"ignored 'globalShortcut'", fd=2, timeout=10)
        done = await self.ok("call", "a", "add", "a=1", "b=2", "--json")
        self.assertEqual(done.json()["structuredContent"], {"sum": 3})
        done = await self.ok("add", "b", "--", sys.executable, "-m", "mcpx.demo")
        self.assertIn("reloaded: added b; unchanged a", done.out)
        data = json.loads(config.read_text())
        self.assertEqual(data["globalShortcut"], "Ctrl+Space")
        self.assertEqual(list(data["mcpServers"]), ["a", "b"])

    async def test_other_file_not_reloaded(self) -> None:
        """A daemon running from another file is left alone, and the command says which
        file it reads."""
        await self.start_daemon({"a": [sys.executable, "-m", "mcpx.demo"]})
        other = Path(self.config_home) / "other.json"
        env = dict(self.env, MCPX_CONFIG=str(other))
        other.write_text("{}")
        self.env, saved = env, self.env
        try:
            done = await self.ok("add", "b", "--", "true")
        finally:
            self.env = saved
        self.assertIn("the running daemon reads", done.err)
        self.assertIn(os.path.realpath(self.env["MCPX_CONFIG"]), done.err)
        servers = (await self.ok("servers", "--json")).json()["servers"]
        self.assertEqual([s["name"] for s in servers], ["a"])
