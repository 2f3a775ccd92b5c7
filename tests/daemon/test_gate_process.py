"""
The trust boundary against a real daemon, as an attacker would try it: a web page's
cross-site request, a DNS-rebinding page, another local user, the network without a
token; and the owner, who needs no configuration.

Each test starts C{mcpx daemon} on its default settings (the demo server, a loopback
TCP port) and talks to it with L{tests.support.raw_http} in a process of its own, so
the headers are exactly what a browser or another user's program would send.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from twisted.trial.unittest import SkipTest, TestCase

from tests.support.daemons import NOBODY, daemon_environ, probe, start_daemon, stop_daemon
from tests.support.processes import (
    ChildProcess,
    free_tcp_port,
    kill_on_cleanup,
    spawn,
)

CALL_ECHO = {"server": "demo", "tool": "echo", "arguments": {"text": "hello"}}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


class GateProcessTests(TestCase):
    timeout = 60

    def setUp(self) -> None:
        # Short paths: a unix socket path must fit in 108 bytes.
        self.state_dir = tempfile.mkdtemp(prefix="mcpx-state-")
        self.config_home = tempfile.mkdtemp(prefix="mcpx-cfg-")
        self.socket = str(Path(self.state_dir) / "mcpx.sock")
        self.port = free_tcp_port()
        self.env = daemon_environ(self.state_dir, self.config_home)

    async def start_daemon(self, *flags: str) -> ChildProcess:
        return await start_daemon(
            self, self.env, self.port, *flags, ready=rb"upstream servers: demo"
        )

    async def probe(self, requests: list[dict[str, Any]], uid: int | None = None) -> Any:
        """Send C{requests} from a process of its own, as C{uid} when given."""
        return await probe(self, self.env, requests, uid)

    def tcp(self, method: str, path: str, headers: dict[str, str], body: Any = None) -> Any:
        sent = {"Host": f"127.0.0.1:{self.port}", **headers}
        return {"port": self.port, "method": method, "path": path, "headers": sent, "body": body}

    def unix(self, method: str, path: str, headers: dict[str, str], body: Any = None) -> Any:
        return {
            "unix": self.socket,
            "method": method,
            "path": path,
            "headers": headers,
            "body": body,
        }

    async def demo_instances(self) -> int:
        """How many demo processes the daemon started: none unless a tool ran."""
        (answer,) = await self.probe([self.unix("GET", "/v1/servers", {"Host": "mcpx"})])
        self.assertEqual(answer["status"], 200, answer)
        (demo,) = [s for s in json.loads(answer["body"])["servers"] if s["name"] == "demo"]
        instances: int = demo["instances"]
        return instances

    def assertRefused(self, answer: Any, status: int, code: str) -> None:
        self.assertEqual(answer["status"], status, answer)
        self.assertEqual(json.loads(answer["body"])["error"]["code"], code)

    async def test_cross_site_request_runs_no_tool(self) -> None:
        """A web page's simple request to POST /v1/call is 403 (Origin) or 415 (text/plain)."""
        await self.start_daemon()
        plain = {"Content-Type": "text/plain"}
        foreign, bare = await self.probe(
            [
                self.tcp("POST", "/v1/call", {**plain, "Origin": "http://evil.example"}, CALL_ECHO),
                self.tcp("POST", "/v1/call", plain, CALL_ECHO),
            ]
        )
        self.assertRefused(foreign, 403, "origin_not_allowed")
        self.assertRefused(bare, 415, "unsupported_media_type")
        self.assertEqual(await self.demo_instances(), 0)

    async def test_rebinding_is_refused(self) -> None:
        """A Host naming another site gets 403 on /v1 and /mcp, and no session is minted."""
        await self.start_daemon()
        evil = {"Host": f"evil.example:{self.port}"}
        call, servers, mcp = await self.probe(
            [
                self.tcp(
                    "POST",
                    "/v1/call",
                    {**evil, "Origin": f"http://evil.example:{self.port}"}
                    | {"Content-Type": "application/json"},
                    CALL_ECHO,
                ),
                self.tcp("GET", "/v1/servers", evil),
                self.tcp("POST", "/mcp", {"Host": "evil.example", **MCP_HEADERS}, INITIALIZE),
            ]
        )
        # Refused for its Origin or its Host, whichever is looked at first.
        self.assertEqual(call["status"], 403, call)
        self.assertRefused(servers, 403, "host_not_allowed")
        self.assertEqual(mcp["status"], 403, mcp)
        self.assertNotIn("mcp-session-id", mcp["headers"])
        self.assertIsNone(json.loads(mcp["body"])["id"])
        self.assertEqual(await self.demo_instances(), 0)

    async def test_other_local_user_needs_the_token(self) -> None:
        """Another user on 127.0.0.1 gets 401 without the token and is served with it."""
        if os.getuid() != 0:
            raise SkipTest("becoming another user takes root")
        await self.start_daemon()
        token = (Path(self.state_dir) / "token").read_text().strip()
        json_type = {"Content-Type": "application/json"}
        bearer = {"Authorization": f"Bearer {token}"}
        answers = await self.probe(
            [
                self.tcp("POST", "/v1/call", json_type, CALL_ECHO),
                self.tcp("POST", "/mcp", MCP_HEADERS, INITIALIZE),
                self.tcp("GET", "/health", {}),
                self.tcp("GET", "/v1/servers", {**bearer}),
                self.tcp("POST", "/v1/call", {**json_type, **bearer}, CALL_ECHO),
                self.unix("GET", "/v1/servers", {"Host": "mcpx"}),
            ],
            uid=NOBODY,
        )
        call, mcp, health, servers, call_with_token, socket = answers
        self.assertRefused(call, 401, "unauthorized")
        self.assertEqual(call["headers"]["www-authenticate"], "Bearer")
        self.assertEqual(mcp["status"], 401, mcp)
        self.assertNotIn("mcp-session-id", mcp["headers"])
        self.assertEqual(health["status"], 200, health)
        self.assertEqual(servers["status"], 200, servers)
        self.assertEqual(call_with_token["status"], 200, call_with_token)
        self.assertIn("hello", call_with_token["body"])
        # The unix socket stays its owner's: the file system refuses everyone else.
        self.assertEqual(socket["status"], 0, socket)
        self.assertIn("PermissionError", socket["body"])

    async def test_other_user_on_an_open_unix_socket_needs_the_token(self) -> None:
        """A world-writable unix socket in daemon.listen does not let another user in freely."""
        if os.getuid() != 0:
            raise SkipTest("becoming another user takes root")
        open_socket = str(Path(tempfile.mkdtemp(prefix="mcpx-open-")) / "open.sock")
        os.chmod(Path(open_socket).parent, 0o755)
        argv = [sys.executable, "-m", "mcpx", "daemon", "--daemon-listen"]
        listen = f"tcp:{self.port}:interface=127.0.0.1,unix:{open_socket}:mode=666"
        child = spawn([*argv, listen], env=self.env)
        self.addCleanup(stop_daemon, child)
        await child.wait_for(rb"upstream servers: demo")
        token = (Path(self.state_dir) / "token").read_text().strip()
        at = {"unix": open_socket, "method": "GET", "path": "/v1/servers"}
        bare, with_token = await self.probe(
            [
                {**at, "headers": {"Host": "mcpx"}},
                {**at, "headers": {"Host": "mcpx", "Authorization": f"Bearer {token}"}},
            ],
            uid=NOBODY,
        )
        self.assertRefused(bare, 401, "unauthorized")
        self.assertEqual(with_token["status"], 200, with_token)
        (own,) = await self.probe([{**at, "headers": {"Host": "mcpx"}}])
        self.assertEqual(own["status"], 200, own)

    async def test_owner_needs_no_configuration(self) -> None:
        """The owner calls tools over loopback TCP, /mcp and the unix socket without a token."""
        daemon = await self.start_daemon()
        # The banner shows an HTTP host both ways: as the owner, and with the token.
        banner = daemon.text(2)
        self.assertIn("(no token needed)", banner)
        self.assertIn('"headers": {"Authorization": "Bearer <mcpx token>"}', banner)
        json_type = {"Content-Type": "application/json"}
        tcp_call, mcp, unix_call = await self.probe(
            [
                self.tcp("POST", "/v1/call", json_type, CALL_ECHO),
                self.tcp("POST", "/mcp", MCP_HEADERS, INITIALIZE),
                self.unix("POST", "/v1/call", {"Host": "mcpx", **json_type}, CALL_ECHO),
            ]
        )
        self.assertEqual(tcp_call["status"], 200, tcp_call)
        self.assertIn("hello", tcp_call["body"])
        self.assertEqual(mcp["status"], 200, mcp)
        self.assertIn("mcp-session-id", mcp["headers"])
        self.assertEqual(unix_call["status"], 200, unix_call)
        cli = spawn([sys.executable, "-m", "mcpx", "call", "demo", "echo", "text=hi"], env=self.env)
        self.addCleanup(kill_on_cleanup, cli)
        self.assertEqual(await cli.ended(), 0, cli.text())
        self.assertIn("hi", cli.text(1))
        printed = spawn([sys.executable, "-m", "mcpx", "token"], env=self.env)
        self.addCleanup(kill_on_cleanup, printed)
        self.assertEqual(await printed.ended(), 0, printed.text())
        token = (Path(self.state_dir) / "token").read_text().strip()
        self.assertEqual(printed.text(1).strip(), token)
        self.assertEqual(os.stat(Path(self.state_dir) / "token").st_mode & 0o777, 0o600)

    async def test_token_rotation_reaches_the_running_daemon(self) -> None:
        """With daemon.auth token, `mcpx token --rotate` retires the old token at once."""
        await self.start_daemon("--daemon-auth", "token")
        old = (Path(self.state_dir) / "token").read_text().strip()
        rotate = spawn([sys.executable, "-m", "mcpx", "token", "--rotate"], env=self.env)
        self.addCleanup(kill_on_cleanup, rotate)
        self.assertEqual(await rotate.ended(), 0, rotate.text())
        new = rotate.text(1).strip()
        self.assertNotEqual(new, old)
        with_new, without, with_old = await self.probe(
            [
                self.tcp("GET", "/v1/servers", {"Authorization": f"Bearer {new}"}),
                self.tcp("GET", "/v1/servers", {}),
                self.tcp("GET", "/v1/servers", {"Authorization": f"Bearer {old}"}),
            ]
        )
        self.assertEqual(with_new["status"], 200, with_new)
        self.assertRefused(without, 401, "unauthorized")
        self.assertRefused(with_old, 401, "unauthorized")

    async def test_unauthenticated_network_listener_refuses_to_start(self) -> None:
        """daemon.auth none with a listener beyond loopback exits 2 and says what to set."""
        argv = [sys.executable, "-m", "mcpx", "daemon", "--daemon-auth", "none"]
        child = spawn([*argv, "--daemon-listen", f"tcp:{self.port}"], env=self.env)
        self.addCleanup(kill_on_cleanup, child)
        self.assertEqual(await child.ended(), 2)
        self.assertIn("daemon.allowUnauthenticatedNetwork", child.text(2))
        self.assertFalse(os.path.exists(self.socket))
