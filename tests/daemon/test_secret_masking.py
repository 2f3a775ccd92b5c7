"""
A real daemon and a real remote upstream that quotes the credential it received:
the credential must not come back out of the daemon anywhere.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import treq
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase

from tests.support.daemons import daemon_environ
from tests.support.http import TestClient
from tests.support.processes import (
    REPO,
    ChildProcess,
    free_tcp_port,
    kill_on_cleanup,
    reactor,
    spawn,
)

TOKEN = "sk-live-5bd1e0c4a9f27783"
PASSWORD = "pw-9c1f0e6a2b"
BASIC = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
LEAKS = (TOKEN, PASSWORD, BASIC)


class SecretMaskingTests(TestCase):
    timeout = 60

    def setUp(self) -> None:
        self.state_dir = tempfile.mkdtemp(prefix="mcpx-sec-")
        self.config_home = tempfile.mkdtemp(prefix="mcpx-cfg-")
        self.socket = str(Path(self.state_dir) / "mcpx.sock")
        self.log_file = str(Path(self.state_dir) / "daemon.log")

    def child(self, argv: list[str], env: dict[str, str] | None = None) -> ChildProcess:
        process = spawn(argv, env=env)
        self.addCleanup(kill_on_cleanup, process)
        return process

    def assertMasked(self, text: str, where: str) -> None:
        for secret in LEAKS:
            self.assertNotIn(secret, text, f"a credential leaked in {where}")

    async def start(self) -> tuple[ChildProcess, dict[str, str]]:
        port = free_tcp_port()
        upstream = self.child(
            [sys.executable, str(REPO / "tests" / "fixtures" / "echo_auth_server.py"), str(port)]
        )

        async def stop_upstream() -> None:
            if upstream.exit_code is None:
                upstream.signal("KILL")
                await upstream.ended()

        self.addCleanup(stop_upstream)
        await upstream.wait_for(rb"listening", fd=1)
        base = f"http://127.0.0.1:{port}"
        config = {
            "servers": {
                "echo": {"url": f"{base}/ok", "auth": {"type": "bearer", "token": "${ECHO_TOKEN}"}},
                "refuse": {
                    "url": f"{base}/refuse",
                    "auth": {"type": "bearer", "token": "${ECHO_TOKEN}"},
                },
                "userinfo": {"url": f"http://alice:${{ECHO_PASSWORD}}@127.0.0.1:{port}/ok"},
            }
        }
        (Path(self.config_home) / "mcpx").mkdir()
        (Path(self.config_home) / "mcpx" / "config.json").write_text(json.dumps(config))
        env = daemon_environ(self.state_dir, self.config_home)
        env.update(ECHO_TOKEN=TOKEN, ECHO_PASSWORD=PASSWORD, MCPX_DAEMON_LOG_FILE=self.log_file)
        daemon = self.child([sys.executable, "-m", "mcpx", "daemon", "--daemon-listen", ""], env)
        await daemon.wait_for(rb"listening on")
        return daemon, env

    async def test_an_echoed_credential_leaves_the_daemon_nowhere(self) -> None:
        daemon, env = await self.start()
        client = TestClient(reactor, unix_socket=self.socket)
        self.addCleanup(client.close)
        http = client.http

        events = await http.get("http://mcpx/v1/events", unbuffered=True)
        streamed: list[bytes] = []
        events_done: Deferred[None] = treq.collect(events, streamed.append)
        events_done.addErrback(lambda _: None)

        async def post(path: str, body: Any, **headers: str) -> tuple[int, str, Any]:
            sent: dict[bytes | str, bytes | str] = {"Content-Type": "application/json"}
            sent.update(headers)
            response = await http.post(
                f"http://mcpx{path}", data=json.dumps(body).encode(), headers=sent
            )
            return response.code, (await treq.content(response)).decode(), response

        call = {"tool": "whoami", "arguments": {}}
        code, body, _ = await post("/v1/call", {"server": "echo", **call})
        self.assertEqual(code, 502, body)
        self.assertIn("credentials Bearer ***", body)
        self.assertMasked(body, "the /v1/call error of a JSON-RPC error")

        code, body, _ = await post("/v1/call", {"server": "refuse", **call})
        self.assertEqual(code, 503, body)
        self.assertIn("invalid credentials: Bearer ***", body)
        self.assertMasked(body, "the /v1/call error of a failed start")

        # The URL's user:password@ was sent as basic auth, and is masked coming back.
        code, body, _ = await post("/v1/call", {"server": "userinfo", **call})
        self.assertEqual(code, 502, body)
        self.assertIn("credentials Basic ***", body)
        self.assertMasked(body, "the /v1/call error of the userinfo server")

        code, servers = await client.get_json("http://mcpx/v1/servers")
        self.assertEqual(code, 200)
        shown = json.dumps(servers)
        self.assertIn("***", shown)
        self.assertMasked(shown, "/v1/servers")

        mcp_headers = {"Accept": "application/json, text/event-stream"}
        code, body, response = await post(
            "/mcp",
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            },
            **mcp_headers,
        )
        self.assertEqual(code, 200, body)
        session = response.headers.getRawHeaders("mcp-session-id", [""])[0]
        mcp_headers.update({"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-06-18"})
        for server in ("echo", "refuse"):
            code, body, _ = await post(
                "/mcp",
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "tools/call",
                    "params": {"name": "mcpx_call", "arguments": {"server": server, **call}},
                },
                **mcp_headers,
            )
            self.assertEqual(code, 200, body)
            self.assertIn("***", body)
            self.assertMasked(body, f"the /mcp answer to a call of {server}")

        cli = self.child([sys.executable, "-m", "mcpx", "servers", "--json"], env)
        await cli.ended()
        self.assertIn("***", cli.text(1))
        self.assertMasked(cli.text(), "mcpx servers --json")

        await deferLater(reactor, 0.3, lambda: None)
        text = b"".join(streamed).decode()
        self.assertIn("server.failed", text)
        self.assertMasked(text, "/v1/events")

        daemon.signal("TERM")
        await daemon.ended()
        log = Path(self.log_file).read_text()
        self.assertIn("***", log)
        self.assertMasked(log, "the daemon's log file")
        self.assertNotIn("Unhandled error in Deferred", log + daemon.text())
        os.remove(self.log_file)
