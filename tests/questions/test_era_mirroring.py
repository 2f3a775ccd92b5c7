"""
Era mirroring (issue 43, item 2; spec/era-mirroring.md): a dual-era upstream is met in
the era of the host that calls it, so what exists only in the legacy era (a server's
own requests on the connection: C{ctx.elicit()}, C{roots/list}) reaches a handshake-era
host through mcpx as it does directly.

The upstream is a real FastMCP 4 server (C{tests/fixtures/fastmcp_server.py}, in the
Makefile's C{.venv-fastmcp}) whose tools elicit a name and list the client's roots; the
hosts are the MCP Python SDK's client in the legacy era (2025-11-25) and in the
2026-07-28 one, and the TypeScript SDK's pinned to 2025-06-18, each through C{mcpx serve
--passthrough}, C{/mcp} pass-through and the gateway's C{mcpx_call}, and each compared
with the same host talking to the server directly.  Each test starts one daemon, which
its hosts and paths share.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Final

import mcp_types as types
from attrs import define, field
from mcp import Client, StdioServerParameters
from mcp.client.context import ClientRequestContext
from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial.unittest import TestCase

from tests.questions.support import Daemon, in_thread
from tests.support.peers import (
    NotInPrivateNetwork,
    PeersMissing,
    node22,
    start_reference_server,
)
from tests.support.processes import REPO, reactor

FASTMCP_PYTHON: Final = REPO / ".venv-fastmcp" / "bin" / "python"
FASTMCP_SERVER: Final = REPO / "tests" / "fixtures" / "fastmcp_server.py"
TS_HOST: Final = REPO / "tests" / "peers" / "client2-host.mjs"

#: The server's name in the daemon's configuration.
NAME: Final = "fm"

ROOT: Final = "file:///srv/era-mirroring"


def fastmcp_server() -> dict[str, Any]:
    """The FastMCP 4 fixture's server entry, over stdio."""
    if not FASTMCP_PYTHON.exists():
        raise PeersMissing(
            f"{FASTMCP_PYTHON} is missing: run `make test`, which creates .venv-fastmcp"
        )
    return {"command": str(FASTMCP_PYTHON), "args": [str(FASTMCP_SERVER)]}


@define
class Host:
    """
    An SDK host that answers every elicitation with a name (under C{key}), every
    sampling request with a line, and has one root.
    """

    key: str = "value"
    asked: list[str] = field(factory=list)
    sampled: int = 0
    listed: int = 0

    async def elicit(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        self.asked.append(params.message)
        return types.ElicitResult(action="accept", content={self.key: "Ada"})

    async def sample(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        self.sampled += 1
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="Hello from the host"),
            model="era-model",
        )

    async def roots(self, context: ClientRequestContext) -> types.ListRootsResult:
        self.listed += 1
        return types.ListRootsResult(roots=[types.Root.model_validate({"uri": ROOT})])


def _text(result: types.CallToolResult) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


async def conversation(
    target: Any, mode: str, calls: Sequence[tuple[str, Mapping[str, Any]]], host: Host
) -> tuple[str, list[tuple[bool, str]]]:
    """
    The host's tool calls on C{target} in C{mode}; its revision and each call's
    C{(isError, text)}.
    """

    async def talk() -> tuple[str, list[tuple[bool, str]]]:
        async with Client(
            target,
            mode=mode,
            elicitation_callback=host.elicit,
            sampling_callback=host.sample,
            list_roots_callback=host.roots,
            cache=None,
        ) as client:
            results = []
            for name, arguments in calls:
                result = await client.call_tool(name, dict(arguments))
                results.append((result.is_error, _text(result)))
            return str(client.protocol_version), results

    answer: tuple[str, list[tuple[bool, str]]] = await in_thread(talk)
    return answer


TOOLS: Final[list[tuple[str, Mapping[str, Any]]]] = [("ask_name", {}), ("list_roots", {})]


def through_gateway(calls: Sequence[tuple[str, Mapping[str, Any]]]) -> list[tuple[str, Any]]:
    """The same calls, made through the gateway's C{mcpx_call}."""
    return [
        ("mcpx_call", {"server": NAME, "tool": name, "arguments": dict(arguments)})
        for name, arguments in calls
    ]


class FastMcpMirroringTests(TestCase):
    """
    A FastMCP 4 server behind mcpx, in pass-through and through the gateway, answers
    each host as it does directly.
    """

    timeout = 240

    async def direct(self, mode: str) -> tuple[str, list[tuple[bool, str]]]:
        server = fastmcp_server()
        target = StdioServerParameters(command=server["command"], args=server["args"])
        return await conversation(target, mode, TOOLS, Host())

    async def servers(self, daemon: Daemon) -> dict[str, Any]:
        listed = await daemon.api("/v1/servers")
        return {entry["name"]: entry for entry in listed["servers"]}

    def serve(self, daemon: Daemon) -> StdioServerParameters:
        return StdioServerParameters(
            command=sys.executable,
            args=["-m", "mcpx", "serve", "--passthrough", NAME],
            env=daemon.env,
            cwd=str(REPO),
        )

    async def test_each_host_meets_the_server_in_its_own_era(self) -> None:
        """
        Directly, a legacy host's tools elicit and list its roots, and a 2026-07-28
        host's fail with FastMCP's own words.  Through C{mcpx serve} and C{/mcp}
        pass-through, each host gets exactly what it gets directly: the legacy host
        is asked the elicitation and its roots, and its answers reach the tools.  The
        legacy-era instance starts only with the first legacy host's call, beside the
        server's own; both stay warm.
        """
        daemon = await Daemon(self, {NAME: fastmcp_server()}, passthrough=[NAME]).start()
        for mode, revision in (("auto", "2026-07-28"), ("legacy", "2025-11-25")):
            direct = await self.direct(mode)
            self.assertEqual(direct[0], revision)
            for path, target in (("serve", self.serve(daemon)), ("mcp", daemon.mcp_url)):
                host = Host()
                through = await conversation(target, mode, TOOLS, host)
                self.assertEqual(through, direct, (mode, path))
                if mode == "legacy":
                    self.assertEqual(len(host.asked), 1, path)
                    self.assertIn("What is your name?", host.asked[0], path)
                    self.assertEqual(host.listed, 1, path)
            if mode == "auto":
                # Only modern hosts so far: the server's own instance alone.
                self.assertEqual((await self.servers(daemon))[NAME]["instances"], 1)
        self.assertEqual(direct[1], [(False, "Hello, Ada!"), (False, ROOT)])
        self.assertEqual((await self.servers(daemon))[NAME]["instances"], 2)
        self.assertIn("speaks both eras", daemon.log())
        # Nothing went to the broker: every question reached its host.
        self.assertEqual((await daemon.api("/v1/questions"))["questions"], [])

    async def ts_host(self, env: Mapping[str, str], *where: str) -> dict[str, Any]:
        """
        The TypeScript SDK v2 host (C{tests/peers/client2-host.mjs}) pinned to
        2025-06-18, calling the two tools on C{where}; what it reports.
        """
        node = node22()
        steps = {"elicitation": "ask_name", "roots": "list_roots"}
        out, err, code = await getProcessOutputAndValue(
            node,
            [str(TS_HOST), "--era", "2025-06-18", *where, "--steps", json.dumps(steps)],
            env=dict(env),
            path=str(TS_HOST.parent),
            reactor=reactor,
        )
        self.assertEqual(code, 0, err)
        seen: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
        return seen

    async def test_a_2025_06_18_host(self) -> None:
        """
        A host that offers only 2025-06-18 (the TypeScript SDK's client) is asked and
        answered through C{mcpx serve} and C{/mcp} pass-through as directly.
        """
        server = fastmcp_server()
        direct = await self.ts_host(
            os.environ, "--command", server["command"], "--args", json.dumps(server["args"])
        )
        # The host offers 2025-06-18 alone: a handshake on any other fails.
        self.assertEqual((direct["era"], direct.get("error")), ("2025-06-18", None))
        self.assertEqual(
            (direct["steps"]["elicitation"]["text"], direct["steps"]["roots"]["text"]),
            ("Hello, ada!", "file:///interop"),
        )
        daemon = await Daemon(self, {NAME: server}, passthrough=[NAME]).start()
        serve = [
            "--command",
            sys.executable,
            "--args",
            json.dumps(["-m", "mcpx", "serve", "--passthrough", NAME]),
        ]
        for path, where in (("serve", serve), ("mcp", ["--url", daemon.mcp_url])):
            through = await self.ts_host(daemon.env, *where)
            self.assertEqual((through["era"], through.get("error")), ("2025-06-18", None), path)
            for step in ("elicitation", "roots"):
                self.assertEqual(through["steps"][step], direct["steps"][step], (path, step))
            self.assertEqual(len(through["asked"]), 1, path)

    async def test_the_gateway_meets_a_legacy_host_in_its_era(self) -> None:
        """
        A 2025-11-25 host calling the tools through the gateway's C{mcpx_call} (no
        pass-through) is asked and answered as directly: the elicitation and the roots
        reach it, and its answers reach the tools.
        """
        daemon = await Daemon(self, {NAME: fastmcp_server()}).start()
        host = Host()
        version, results = await conversation(
            daemon.mcp_url, "legacy", through_gateway(TOOLS), host
        )
        self.assertEqual(version, "2025-11-25")
        self.assertEqual([error for error, _ in results], [False, False], results)
        self.assertIn("Hello, Ada!", results[0][1])
        self.assertIn(ROOT, results[1][1])
        self.assertEqual((len(host.asked), host.listed), (1, 1))


#: The reference server's tools that ask their client with C{sendRequest}.
REFERENCE_TOOLS: Final[list[tuple[str, Mapping[str, Any]]]] = [
    ("test_elicitation", {"message": "What is your name?"}),
    ("test_sampling", {"prompt": "Say hello"}),
]


class ReferenceServerTests(TestCase):
    """
    The conformance suite's own reference server (dual era, over Streamable HTTP:
    C{tests/peers/reference}) behind mcpx in pass-through: a legacy host's calls to its
    C{sendRequest} tools are asked and answered as directly.
    """

    timeout = 240

    async def test_a_legacy_hosts_send_request_tools(self) -> None:
        """
        C{test_elicitation} and C{test_sampling} from a 2025-11-25 host, through
        C{mcpx serve} and C{/mcp}: the same results as directly (the host's answer in
        the elicitation's), the host asked once each time.
        """
        try:
            server = await start_reference_server(reactor, add_cleanup=self.addCleanup)
        except NotInPrivateNetwork as e:
            self.fail(str(e))
        host = Host(key="response")
        direct = await conversation(server.url, "legacy", REFERENCE_TOOLS, host)
        self.assertEqual(direct[0], "2025-11-25")
        self.assertEqual(
            direct[1][0], (False, 'User response: action=accept, content={"response":"Ada"}')
        )
        # Its sampling tool asks, and then refuses the host's answer itself (it checks
        # the result against a request's schema): through mcpx it must do the same.
        self.assertIn("Invalid input", direct[1][1][1])
        self.assertEqual((len(host.asked), host.sampled), (1, 1))
        daemon = await Daemon(self, {"ref": {"url": server.url}}, passthrough=["ref"]).start()
        serve = StdioServerParameters(
            command=sys.executable,
            args=["-m", "mcpx", "serve", "--passthrough", "ref"],
            env=daemon.env,
            cwd=str(REPO),
        )
        for path, target in (("serve", serve), ("mcp", daemon.mcp_url)):
            host = Host(key="response")
            through = await conversation(target, "legacy", REFERENCE_TOOLS, host)
            self.assertEqual(through, direct, path)
            self.assertEqual((len(host.asked), host.sampled), (1, 1), path)
