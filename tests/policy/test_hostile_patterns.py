"""
A real daemon and a real upstream whose tool schemas hold catastrophic regular expressions.

Python's C{re} takes exponential time to refuse C{^(a|a)*$}, C{(a+)+$}, C{(a|aa)*c} or
C{(.*a){20}$} on L{redos_server.HOSTILE_TEXT}; a check made with it on the reactor would
freeze every host, socket and the status page.  The daemon must answer every call (each
check done, none stuck) and a C{/health} asked alongside them, and refuse a schema
holding a backreference with a reason saying why.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import treq
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.trial.unittest import TestCase
from twisted.web.http_headers import Headers

from tests.fixtures import redos_server
from tests.questions.support import Daemon
from tests.support.http import TestClient
from tests.support.processes import reactor

#: The protocol revision the host speaks on C{/mcp}.
MODERN = "2026-07-28"


class HostilePatternTests(TestCase):
    """Catastrophic patterns in an upstream's schemas never hold the daemon."""

    timeout = 120

    async def start(self, passthrough: tuple[str, ...] = ()) -> TestClient:
        entry = {"command": sys.executable, "args": [redos_server.__file__]}
        self.daemon = await Daemon(self, {"redos": entry}, passthrough=passthrough).start()
        client = TestClient(reactor, unix_socket=self.daemon.socket)
        self.addCleanup(client.close)
        return client

    async def call(self, client: TestClient, tool: str, **arguments: Any) -> tuple[int, Any]:
        response = await client.http.post(
            "http://mcpx/v1/call", json={"server": "redos", "tool": tool, "arguments": arguments}
        )
        return response.code, json.loads(await treq.content(response))

    async def test_output_and_input_patterns_answered(self) -> None:
        """
        Every hostile tool's call is answered while C{/health} is answered alongside: an
        C{outputSchema} pattern the answer breaks is reported and the answer passed on (the
        default C{validate.output: warn}); an C{inputSchema} pattern the argument breaks
        refuses the call naming the argument (the default C{validate.input: enforce}).
        """
        client = await self.start()
        hostile = redos_server.HOSTILE_TEXT
        calls: list[Deferred[tuple[int, Any]]] = []
        for index in range(len(redos_server.PATTERNS)):
            calls.append(ensureDeferred(self.call(client, f"out_{index}")))
            calls.append(ensureDeferred(self.call(client, f"in_{index}", s=hostile)))
        health = await client.get_json("http://mcpx/health")
        self.assertEqual(health[0], 200, health)
        for index in range(len(redos_server.PATTERNS)):
            status, body = await calls[2 * index]
            self.assertEqual(status, 200, body)
            self.assertEqual(body["structuredContent"], {"s": hostile})
            status, body = await calls[2 * index + 1]
            self.assertEqual(status, 400, body)
            self.assertEqual(body["error"]["code"], "invalid_arguments", body)
            self.assertEqual(body["error"]["field"], "arguments.s", body)
            self.assertIn("do not fit its inputSchema: /s: 'aaaa", body["error"]["message"])
        # A value that fits is let through: the patterns are matched, not just refused.
        status, body = await self.call(client, "in_0", s="aaaa")
        self.assertEqual(status, 200, body)
        self.assertEqual((await client.get_json("http://mcpx/health"))[0], 200)
        # Each output was checked, and found not to fit, rather than skipped.
        assert self.daemon.child is not None
        log = self.daemon.child.text()
        for index in range(len(redos_server.PATTERNS)):
            self.assertIn(f"tool 'out_{index}' of server 'redos' had results that do not fit", log)

    async def test_backreference_refused(self) -> None:
        """
        A backreference cannot be matched in linear time: the C{inputSchema} holding one
        is refused, and so is a call of its tool (C{validate.input: enforce}), saying why.
        """
        client = await self.start()
        status, body = await self.call(client, "backref_in", s="aa")
        self.assertEqual(status, 400, body)
        message = body["error"]["message"]
        self.assertIn("its inputSchema was refused", message)
        self.assertIn("backreferences are not supported", message)

    async def test_hostile_template_routes_a_read(self) -> None:
        """
        A pass-through server's resource template of sixteen C{{+var}}s is matched in
        linear time against a bare URI a host reads: the read reaches the server while a
        C{/health} asked alongside is answered (matched by Python's C{re}, refusing
        L{redos_server.HOSTILE_URI} would hold the daemon for ever).
        """
        client = await self.start(passthrough=("redos",))
        uri = redos_server.HOSTILE_URI
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "resources/read",
            "params": {
                "uri": uri,
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": MODERN,
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
            },
        }
        headers = {
            "Content-Type": ["application/json"],
            "Accept": ["application/json, text/event-stream"],
            "MCP-Protocol-Version": [MODERN],
            "Mcp-Method": ["resources/read"],
            "Mcp-Name": [uri],
        }
        read = client.http.post(
            "http://mcpx/mcp", data=json.dumps(body).encode(), headers=Headers(headers)
        )
        health = await client.get_json("http://mcpx/health")
        self.assertEqual(health[0], 200, health)
        response = await read
        raw = (await treq.content(response)).decode()
        self.assertEqual(response.code, 200, raw)
        frames = [line[5:] for line in raw.splitlines() if line.startswith("data:")] or [raw]
        (answer,) = [json.loads(f) for f in frames if '"id"' in f]
        self.assertEqual(answer["result"]["contents"][0]["text"], f"read {uri}", answer)
