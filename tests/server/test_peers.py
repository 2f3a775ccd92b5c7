"""
mcpx as an MCP server, proven with clients mcpx did not write.

A real daemon (one for every test here, L{start_daemon}) runs with two upstream servers
configured: mcpx's demo server and C{@modelcontextprotocol/server-everything} (over
stdio).  Against it:

  - the MCP Python SDK's client, as a legacy client (the C{initialize} handshake) and as
    a 2026-07-28 one (C{server/discover}), through a real C{mcpx serve} process and
    through C{/mcp} on a TCP port: listing and calling tools, getting a prompt, reading
    a resource, and cancelling a slow call;
  - C{@modelcontextprotocol/inspector-cli}, listing tools and calling one, through
    C{mcpx serve} and through C{/mcp}.

The SDK client runs on asyncio, so each conversation runs in a worker thread under
C{anyio.run} while the reactor keeps the processes.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import mcp_types as types
from attrs import define, field
from mcp import Client, StdioServerParameters
from twisted.internet.defer import Deferred
from twisted.internet.threads import deferToThread
from twisted.trial.unittest import TestCase

from tests.support.daemons import run_daemon
from tests.support.peers import NODE_MODULES, PeersMissing, everything_stdio_argv, node22
from tests.support.processes import REPO, kill_on_cleanup, spawn

T = TypeVar("T")

MODERN = "2026-07-28"
NEWEST_LEGACY = "2025-11-25"
#: Bound on one whole SDK conversation, so a hang fails the test instead of a thread.
CONVERSATION_TIMEOUT = 40.0
#: The countdown the cancelled call runs: long enough never to finish by itself.
SLOW_COUNTDOWN = {"steps": 50, "interval": 0.2}
#: How soon the daemon must have let go of a cancelled call.
CANCEL_DEADLINE = 3.0
INSPECTOR = NODE_MODULES / "@modelcontextprotocol" / "inspector-cli" / "build"
GATEWAY_TOOLS = {"mcpx_call", "mcpx_servers", "mcpx_tools", "mcpx_describe"}


def in_thread(conversation: Callable[[], Awaitable[T]]) -> Deferred[T]:
    """Run an SDK-client C{conversation} on its own event loop in a worker thread."""

    async def bounded() -> T:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with anyio.fail_after(CONVERSATION_TIMEOUT):
                return await conversation()

    return deferToThread(anyio.run, bounded)


@define
class RunningDaemon:
    """The daemon of this module's tests: its process, its TCP port, and the environment
    (state directory, configuration) a client process needs to reach it."""

    process: subprocess.Popen[bytes]
    port: int
    env: dict[str, str]
    folders: tuple[str, ...]

    @property
    def mcp_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def serve_argv(self) -> list[str]:
        """C{mcpx serve}, as a host would start it."""
        return [sys.executable, "-m", "mcpx", "serve"]

    def serve_params(self) -> StdioServerParameters:
        argv = self.serve_argv()
        return StdioServerParameters(command=argv[0], args=argv[1:], env=self.env, cwd=str(REPO))

    def stop(self) -> None:
        """SIGTERM, and wait for the daemon to end (SIGKILL if it will not)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for folder in self.folders:
            shutil.rmtree(folder, ignore_errors=True)


def _start_daemon() -> RunningDaemon:
    """
    A daemon with the demo and server-everything configured, listening on a free
    loopback port; returns once it runs. Started outside the reactor, so that it may
    outlive the test that started it.
    """
    # Short paths: a unix socket path must fit in 108 bytes.
    state = tempfile.mkdtemp(prefix="mcpx-peers-")
    config_home = tempfile.mkdtemp(prefix="mcpx-peers-cfg-")
    config = os.path.join(config_home, "servers.json")
    node, everything, mode = everything_stdio_argv()
    with open(config, "w") as f:
        json.dump(
            {
                "servers": {
                    "demo": {"command": sys.executable, "args": ["-m", "mcpx.demo"]},
                    "everything": {"command": node, "args": [everything, mode]},
                }
            },
            f,
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPX_")}
    env.update(MCPX_STATE_DIR=state, XDG_CONFIG_HOME=config_home, MCPX_CONFIG=config)
    log = Path(config_home) / "daemon.log"
    try:
        process, port = run_daemon(env, log)
    except BaseException:
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(config_home, ignore_errors=True)
        raise
    daemon = RunningDaemon(process, port, env, (state, config_home))
    return daemon


#: The daemon every test of this module talks to (L{start_daemon}).
_daemon: list[RunningDaemon] = []
#: The tests of this module that have ended since it started.
_ended: list[str] = []


async def start_daemon(test: TestCase) -> RunningDaemon:
    """
    The daemon of this module's tests: one for all of them, started by the first and
    stopped after the last (or when the test process ends, if only some of them run).
    Each test leaves it as it found it (a cancelled call let go of, every session
    closed); its upstreams' processes stay up between tests, and server-everything,
    which ignores the end of its stdin, takes mcpx's grace period to stop once, not
    after every test.
    """
    if not _daemon:
        daemon = await deferToThread(_start_daemon)
        _daemon.append(daemon)
        _ended.clear()
        atexit.register(daemon.stop)

    def ended() -> Deferred[None] | None:
        _ended.append(test.id())
        everyone = [
            name
            for case in (SdkClientTests, InspectorTests)
            for name in dir(case)
            if name.startswith("test")
        ]
        if len(_ended) < len(everyone) or not _daemon:
            return None
        daemon = _daemon.pop()
        atexit.unregister(daemon.stop)
        return deferToThread(daemon.stop)

    test.addCleanup(ended)
    return _daemon[0]


def _servers(port: int) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/servers", timeout=5) as response:
        return json.load(response)


async def demo_in_flight(port: int) -> int:
    """How many calls the daemon has in flight to the demo server (C{/v1/servers})."""
    listed = await anyio.to_thread.run_sync(_servers, port)
    for server in listed["servers"]:
        if server["name"] == "demo":
            return int(server["in_flight"])
    raise AssertionError(f"no demo server in {listed}")


def texts(result: types.CallToolResult | types.GetPromptResult) -> str:
    if isinstance(result, types.GetPromptResult):
        blocks: list[Any] = [message.content for message in result.messages]
    else:
        blocks = list(result.content)
    return "".join(block.text for block in blocks if isinstance(block, types.TextContent))


@define
class Seen:
    """What the SDK client saw, gathered in the worker thread."""

    version: str = ""
    server_name: str | None = None
    instructions: str | None = None
    tools: set[str] = field(factory=set)
    texts: dict[str, str] = field(factory=dict)
    errors: dict[str, bool] = field(factory=dict)
    structured: Any = None
    everything_structured: Any = None
    link_uri: str = ""
    link_read_uri: str = ""
    prompts: set[str] = field(factory=set)
    resource_uri: str = ""
    resource_text: str = ""
    progress: list[float] = field(factory=list)
    in_flight_during: int = -1
    cancel_took: float = -1.0
    released_after: float = -1.0
    after_cancel: str = ""

    async def call(self, client: Client, key: str, server: str, tool: str, **arguments: Any) -> Any:
        result = await client.call_tool(
            "mcpx_call", {"server": server, "tool": tool, "arguments": arguments}
        )
        self.texts[key] = texts(result)
        self.errors[key] = result.is_error
        return result

    async def on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.progress.append(progress)

    async def conversation(self, target: Any, mode: str, port: int) -> Seen:
        async with Client(target, mode=mode) as client:
            self.version = client.protocol_version
            info = client.server_info
            self.server_name = info.name if info is not None else None
            self.instructions = client.instructions
            page = await client.list_tools()
            self.tools.update(tool.name for tool in page.tools)
            while page.next_cursor is not None:
                page = await client.list_tools(cursor=page.next_cursor)
                self.tools.update(tool.name for tool in page.tools)
            added = await self.call(client, "add", "demo", "add", a=2, b=3)
            self.structured = added.structured_content
            await self.call(client, "echo", "demo", "echo", text="hi there")
            await self.call(client, "fail", "demo", "fail", message="as asked")
            await self.call(client, "everything-echo", "everything", "echo", message="hello")
            await self.call(client, "everything-sum", "everything", "get-sum", a=1, b=2)
            weather = await self.call(
                client, "weather", "everything", "get-structured-content", location="New York"
            )
            self.everything_structured = weather.structured_content
            links = await self.call(client, "links", "everything", "get-resource-links", count=1)
            self.link_uri = next(
                str(block.uri) for block in links.content if isinstance(block, types.ResourceLink)
            )
            linked = await client.read_resource(self.link_uri)
            self.link_read_uri = str(linked.contents[0].uri)
            listed = await client.list_prompts()
            self.prompts = {prompt.name for prompt in listed.prompts}
            prompt = await client.get_prompt("demo_greet", {"name": "Bea"})
            self.texts["greet"] = texts(prompt)
            resources = await client.list_resources()
            self.resource_uri = next(
                str(r.uri) for r in resources.resources if str(r.uri).startswith("mcpx://demo/")
            )
            read = await client.read_resource(self.resource_uri)
            contents = read.contents[0]
            if isinstance(contents, types.TextResourceContents):
                self.resource_text = contents.text
            await self.cancel_a_slow_call(client, port)
            await self.call(client, "after", "demo", "echo", text="after the cancel")
        return self

    async def cancel_a_slow_call(self, client: Client, port: int) -> None:
        """
        Start a countdown that would take ten seconds, wait until it runs upstream and
        reports progress, cancel it, and time how long the daemon takes to let go.
        """
        async with anyio.create_task_group() as group:

            async def slow() -> None:
                await client.call_tool(
                    "mcpx_call",
                    {"server": "demo", "tool": "countdown", "arguments": SLOW_COUNTDOWN},
                    progress_callback=self.on_progress,
                )

            group.start_soon(slow)
            with anyio.fail_after(10):
                while not self.progress:
                    await anyio.sleep(0.02)
            self.in_flight_during = await demo_in_flight(port)
            cancelled_at = time.monotonic()
            group.cancel_scope.cancel()
        self.cancel_took = time.monotonic() - cancelled_at
        with anyio.fail_after(CANCEL_DEADLINE):
            while await demo_in_flight(port) != 0:
                await anyio.sleep(0.02)
        self.released_after = time.monotonic() - cancelled_at


class SdkClientTests(TestCase):
    """The MCP Python SDK's client, in each era, through each transport."""

    timeout = 90

    def check(self, seen: Seen, version: str) -> None:
        self.assertEqual(seen.version, version)
        self.assertTrue(seen.tools >= GATEWAY_TOOLS, seen.tools)
        self.assertEqual(seen.structured, {"sum": 5})
        self.assertEqual(json.loads(seen.texts["add"]), {"sum": 5})
        self.assertEqual(seen.texts["echo"], "hi there")
        self.assertEqual((seen.errors["echo"], seen.errors["fail"]), (False, True))
        self.assertEqual(seen.texts["fail"], "as asked")
        self.assertEqual(seen.texts["everything-echo"], "Echo: hello")
        self.assertEqual(seen.texts["everything-sum"], "The sum of 1 and 2 is 3.")
        # Structured content passes through; a resource link comes back as an mcpx://
        # URI that reads the upstream resource.
        self.assertEqual(set(seen.everything_structured), {"temperature", "conditions", "humidity"})
        self.assertEqual(json.loads(seen.texts["weather"]), seen.everything_structured)
        self.assertTrue(
            seen.link_uri.startswith("mcpx://everything/demo://resource/"), seen.link_uri
        )
        self.assertEqual(seen.link_read_uri, seen.link_uri)
        self.assertTrue({"demo_greet", "everything_simple-prompt"} <= seen.prompts, seen.prompts)
        self.assertEqual(seen.texts["greet"], "Please write a short, friendly greeting for Bea.")
        self.assertEqual(seen.resource_uri, "mcpx://demo/demo://readme")
        self.assertTrue(seen.resource_text.startswith("# The mcpx demo server"))
        # The slow call ran upstream and reported progress before it was cancelled ...
        self.assertEqual(seen.in_flight_during, 1)
        self.assertTrue(seen.progress)
        # ... ended at once for the client, upstream within the deadline (the countdown
        # had seconds to go), and the next call went through.
        self.assertLess(seen.cancel_took, 1.0)
        self.assertLess(seen.released_after, CANCEL_DEADLINE)
        self.assertEqual(seen.texts["after"], "after the cancel")

    def check_legacy(self, seen: Seen) -> None:
        self.check(seen, NEWEST_LEGACY)
        self.assertEqual(seen.server_name, "mcpx")
        self.assertIn("mcpx_call", seen.instructions or "")

    async def test_legacy_over_serve(self) -> None:
        """A handshake SDK client, through mcpx serve, reaches every feature."""
        daemon = await start_daemon(self)
        seen = await in_thread(
            lambda: Seen().conversation(daemon.serve_params(), "legacy", daemon.port)
        )
        self.check_legacy(seen)

    async def test_modern_over_serve(self) -> None:
        """
        A probing SDK client, through mcpx serve, ends on 2026-07-28 (server/discover)
        and reaches every feature.
        """
        daemon = await start_daemon(self)
        seen = await in_thread(
            lambda: Seen().conversation(daemon.serve_params(), "auto", daemon.port)
        )
        self.check(seen, MODERN)

    async def test_legacy_over_http(self) -> None:
        """A handshake SDK client, through /mcp, reaches every feature."""
        daemon = await start_daemon(self)
        seen = await in_thread(lambda: Seen().conversation(daemon.mcp_url, "legacy", daemon.port))
        self.check_legacy(seen)

    async def test_modern_over_http(self) -> None:
        """
        A probing SDK client, through /mcp, ends on 2026-07-28 (server/discover) and
        reaches every feature; its cancellation is closing the request's stream.
        """
        daemon = await start_daemon(self)
        seen = await in_thread(lambda: Seen().conversation(daemon.mcp_url, "auto", daemon.port))
        self.check(seen, MODERN)


class InspectorTests(TestCase):
    """C{@modelcontextprotocol/inspector-cli}, as its users run it."""

    timeout = 60

    async def inspect(self, daemon: RunningDaemon, target: list[str], *method: str) -> Any:
        """Run the inspector's CLI once; its stdout is the JSON result."""
        if not (INSPECTOR / "index.js").exists():
            raise PeersMissing(f"{INSPECTOR} is missing: run `make test` to install the npm peers")
        # The CLI finds its own package.json at ../package.json from the working
        # directory, so it must run from its build directory.
        child = spawn(
            [node22(), str(INSPECTOR / "index.js"), *target, *method],
            env=daemon.env,
            cwd=str(INSPECTOR),
        )
        self.addCleanup(kill_on_cleanup, child)
        code = await child.ended(30)
        self.assertEqual(code, 0, child.text())
        return json.loads(child.text(1))

    async def list_and_call(self, daemon: RunningDaemon, target: list[str]) -> None:
        listed = await self.inspect(daemon, target, "--method", "tools/list")
        self.assertTrue({tool["name"] for tool in listed["tools"]} >= GATEWAY_TOOLS)
        called = await self.inspect(
            daemon,
            target,
            "--method",
            "tools/call",
            "--tool-name",
            "mcpx_call",
            "--tool-arg",
            "server=demo",
            "tool=add",
            'arguments={"a": 2, "b": 3}',
        )
        self.assertEqual(called["structuredContent"], {"sum": 5})
        self.assertEqual(called["content"], [{"type": "text", "text": '{"sum": 5}'}])
        called = await self.inspect(
            daemon,
            target,
            "--method",
            "tools/call",
            "--tool-name",
            "mcpx_call",
            "--tool-arg",
            "server=everything",
            "tool=echo",
            'arguments={"message": "from the inspector"}',
        )
        self.assertEqual(called["content"], [{"type": "text", "text": "Echo: from the inspector"}])

    async def test_over_serve(self) -> None:
        """The inspector, starting mcpx serve itself, lists mcpx's tools and calls one."""
        daemon = await start_daemon(self)
        await self.list_and_call(daemon, daemon.serve_argv())

    async def test_over_http(self) -> None:
        """The inspector, pointed at /mcp, lists mcpx's tools and calls one."""
        daemon = await start_daemon(self)
        await self.list_and_call(daemon, [daemon.mcp_url])
