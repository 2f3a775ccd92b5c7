"""
The gateway's names are reserved, with a real daemon and a real hostile upstream
(L{tests.fixtures.impostor}) passed through that lists C{mcpx_call}, C{mcpx_exec},
C{mcpx_read}, C{mcpx_servers}, a future C{mcpx_future}, the name the gateway gives
another server's prompt and C{mcpx://} resources (issue 41 item 5): a host's
C{mcpx_call} carrying another server's API key reaches the gateway, and through it that
server, on C{mcpx serve} (both eras, a 2025-03-26 batch) and on C{/mcp}; the impostor's
names are left out of the lists and shown as shadowed in C{GET /v1/servers}.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import treq
from twisted.internet import reactor
from twisted.web.http_headers import Headers

from tests.server.test_passthrough import GATEWAY_NAMES, PassThroughDaemonCase, names_of
from tests.server.test_resource_updates import Host
from tests.support.http import TestClient
from tests.support.processes import REPO

FIXTURE = str(REPO / "tests" / "fixtures" / "impostor.py")
#: The other server's credential a host hands mcpx_call.
API_KEY = "sk-vault-0123456789"
#: Every name of the impostor's that is the gateway's.
STOLEN = ["mcpx_call", "mcpx_exec", "mcpx_read", "mcpx_servers", "mcpx_future"]
MODERN = "2026-07-28"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}


def requests_of(record: Path) -> list[dict[str, Any]]:
    """What reached one fixture server, in order (nothing when it was never asked)."""
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text().splitlines()]


def calls_of(record: Path) -> list[dict[str, Any]]:
    return [r["params"] for r in requests_of(record) if r["method"] == "tools/call"]


async def answer_to(host: Host, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """The host's whole answer to one request: its result or its error."""
    host.next_id += 1
    wanted = host.next_id
    host.send({"jsonrpc": "2.0", "id": wanted, "method": method, "params": params})
    return await host.message(
        lambda m: isinstance(m, dict) and m.get("id") == wanted and "method" not in m
    )


def text_of(result: dict[str, Any]) -> str:
    return " ".join(block.get("text", "") for block in result.get("content", []))


class ReservedNamesTests(PassThroughDaemonCase):
    """
    The impostor, a copy of it with C{toolPrefix} C{"p_"} (its names offered as
    C{p_<name>}: no longer the gateway's) and one with C{toolPrefix} C{"mcpx_"} (every
    name of it the gateway's) passed through; C{vault} configured, not passed through.
    """

    async def start(self) -> None:
        """The daemon, with the four servers configured and three passed through."""
        home = Path(self.config_home)
        self.records = {
            name: home / f"{name}.jsonl" for name in ("impostor", "prefixed", "masked", "vault")
        }
        entries: dict[str, dict[str, Any]] = {
            name: {
                "command": sys.executable,
                "args": [FIXTURE, "--record", str(record), "--name", name],
            }
            for name, record in self.records.items()
        }
        entries["prefixed"]["toolPrefix"] = "p_"
        entries["masked"]["toolPrefix"] = "mcpx_"
        config = home / "servers.json"
        config.write_text(json.dumps({"servers": entries}))
        self.env["MCPX_CONFIG"] = str(config)
        await self._start("--passthrough", "impostor,prefixed,masked")

    def assert_never_reached(self, *methods: str) -> None:
        """Neither server under a gateway's name was sent any of C{methods}."""
        for name in ("impostor", "masked"):
            sent = [r for r in requests_of(self.records[name]) if r["method"] in methods]
            self.assertEqual(sent, [], name)

    def assert_vault_called(self, count: int) -> None:
        """The vault got C{count} calls of echo, each with the API key the host gave."""
        calls = calls_of(self.records["vault"])
        self.assertEqual(len(calls), count, calls)
        for call in calls:
            self.assertEqual(
                (call["name"], call["arguments"]), ("echo", {"api_key": API_KEY}), call
            )

    async def test_legacy_host_on_serve(self) -> None:
        """
        A 2025-06-18 host on C{mcpx serve}: the list has each gateway tool once, as
        mcpx's, none of the impostor's or the masked server's reserved names, and the
        prefixed server's under C{p_}; C{mcpx_call} with the vault's key reaches the
        vault through the gateway, C{mcpx_future} is refused by mcpx, C{p_mcpx_call}
        reaches the prefixed server (its name no longer the gateway's); the prompt and
        resource under the gateway's names are the vault's.
        """
        await self.start()
        host = Host(self)
        await self._initialize(host)
        tools = (await host.request("tools/list", {}))["tools"]
        names = names_of(tools)
        for name in GATEWAY_NAMES:
            self.assertEqual(names.count(name), 1, (name, names))
        self.assertNotIn("mcpx_future", names)
        self.assertNotIn("mcpx_echo", names, "the masked server's echo, under mcpx_")
        self.assertIn("echo", names)
        self.assertIn("p_mcpx_call", names)
        (call_tool,) = [tool for tool in tools if tool["name"] == "mcpx_call"]
        self.assertNotIn("impostor", call_tool.get("description", ""))
        self.assertIn("server", call_tool["inputSchema"]["properties"])

        arguments = {"server": "vault", "tool": "echo", "arguments": {"api_key": API_KEY}}
        called = await host.request("tools/call", {"name": "mcpx_call", "arguments": arguments})
        self.assertIn("vault got echo", text_of(called))
        refused = await answer_to(
            host, "tools/call", {"name": "mcpx_future", "arguments": {"x": API_KEY}}
        )
        self.assertEqual(refused["error"]["code"], -32602, refused)
        prefixed = await host.request("tools/call", {"name": "p_mcpx_call", "arguments": {"a": 1}})
        self.assertIn("prefixed got mcpx_call", text_of(prefixed))

        prompts = names_of((await host.request("prompts/list", {}))["prompts"])
        self.assertEqual(prompts.count("vault_greet"), 1, prompts)
        got = await host.request("prompts/get", {"name": "vault_greet"})
        self.assertEqual(got["description"], "vault's prompt greet")
        resources = [r["uri"] for r in (await host.request("resources/list", {}))["resources"]]
        self.assertNotIn("mcpx://vault/doc", resources)
        self.assertIn("mcpx://vault/impostor://doc", resources)
        read = await host.request("resources/read", {"uri": "mcpx://vault/impostor://doc"})
        self.assertEqual(read["contents"][0]["text"], "vault's impostor://doc")
        templates = (await host.request("resources/templates/list", {}))["resourceTemplates"]
        self.assertNotIn("mcpx://vault/{path}", [t["uriTemplate"] for t in templates])

        self.assert_vault_called(1)
        self.assert_never_reached("tools/call", "prompts/get", "resources/read")
        self.assertEqual(
            [(c["name"], c["arguments"]) for c in calls_of(self.records["prefixed"])],
            [("mcpx_call", {"a": 1})],
        )

        # GET /v1/servers (mcpx servers --json) shows what is left out, and why.
        status = {s["name"]: s for s in (await self.ok("servers", "--json")).json()["servers"]}
        shadowed = {(e["kind"], e["name"]): e for e in status["impostor"]["shadowed"]}
        for name in STOLEN:
            entry = shadowed["tool", name]
            self.assertEqual((entry["by"], entry["reserved"]), ("mcpx", True), entry)
            self.assertIn("reserved", entry["message"])
        self.assertEqual(shadowed["prompt", "vault_greet"]["by"], "mcpx")
        self.assertEqual(shadowed["resource", "mcpx://vault/doc"]["reserved"], True)
        self.assertEqual(shadowed["template", "mcpx://vault/{path}"]["reserved"], True)
        masked = {e["name"] for e in status["masked"]["shadowed"] if e["kind"] == "tool"}
        self.assertEqual(masked, {"mcpx_" + name for name in [*STOLEN, "echo"]})
        self.assertNotIn("shadowed", status["vault"])
        self.assertNotIn(
            "tool", {e["kind"] for e in status["prefixed"].get("shadowed", [])}, status
        )
        text = (await self.ok("servers")).out
        self.assertIn("impostor: tools mcpx_call, mcpx_exec, mcpx_read", text)
        self.assertIn("(names reserved for mcpx", text)

    async def test_batch_and_modern_on_serve(self) -> None:
        """
        A 2025-03-26 host's batch of C{mcpx_call} and C{mcpx_servers}, and a 2026-07-28
        host's C{mcpx_call} (no handshake) on C{mcpx serve}: the gateway answers each.
        """
        await self.start()
        batcher = Host(self)
        await batcher.request(
            "initialize",
            {
                "protocolVersion": "2025-03-26",
                "capabilities": {},
                "clientInfo": {"name": "batcher", "version": "1"},
            },
        )
        batcher.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        arguments = {"server": "vault", "tool": "echo", "arguments": {"api_key": API_KEY}}
        batcher.send(
            [  # type: ignore[arg-type]
                {
                    "jsonrpc": "2.0",
                    "id": 101,
                    "method": "tools/call",
                    "params": {"name": "mcpx_call", "arguments": arguments},
                },
                {
                    "jsonrpc": "2.0",
                    "id": 102,
                    "method": "tools/call",
                    "params": {"name": "mcpx_servers", "arguments": {}},
                },
            ]
        )
        answers: Any = await batcher.message(lambda m: isinstance(m, list))
        by_id = {answer["id"]: answer for answer in answers}
        self.assertIn("vault got echo", text_of(by_id[101]["result"]))
        self.assertIn('"vault"', text_of(by_id[102]["result"]))

        modern = Host(self)
        answer = await answer_to(
            modern,
            "tools/call",
            {"name": "mcpx_call", "arguments": arguments, "_meta": MODERN_META},
        )
        self.assertIn("vault got echo", text_of(answer["result"]))
        self.assert_vault_called(2)
        self.assert_never_reached("tools/call")

    async def test_modern_on_http(self) -> None:
        """A 2026-07-28 C{tools/call} of C{mcpx_call} POSTed to C{/mcp} reaches the gateway."""
        await self.start()
        client = TestClient(reactor, str(Path(self.state_dir) / "mcpx.sock"))
        self.addCleanup(client.close)
        arguments = {"server": "vault", "tool": "echo", "arguments": {"api_key": API_KEY}}
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "mcpx_call", "arguments": arguments, "_meta": MODERN_META},
        }
        response = await client.http.post(
            "http://mcpx/mcp",
            data=json.dumps(body).encode(),
            headers=Headers(
                {
                    "Content-Type": ["application/json"],
                    "Accept": ["application/json, text/event-stream"],
                    "MCP-Protocol-Version": [MODERN],
                    "Mcp-Method": ["tools/call"],
                    "Mcp-Name": ["mcpx_call"],
                }
            ),
        )
        raw = (await treq.content(response)).decode()
        self.assertEqual(response.code, 200, raw)
        frames = [line[5:] for line in raw.splitlines() if line.startswith("data:")] or [raw]
        (answer,) = [json.loads(f) for f in frames if '"id": 1' in f or '"id":1' in f]
        self.assertIn("vault got echo", text_of(answer["result"]))
        self.assert_vault_called(1)
        self.assert_never_reached("tools/call")
