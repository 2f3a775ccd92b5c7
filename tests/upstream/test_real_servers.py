"""
mcpx's upstream client against real MCP servers written by others, as real processes:
C{@modelcontextprotocol/server-everything} (the TypeScript SDK, legacy era), and the
demo server mcpx ships.  Nothing here is mcpx talking to an mcpx-shaped fake.
"""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from twisted.trial.unittest import TestCase

from mcpx.settings.servers import RemoteServer, StdioServer
from mcpx.spec.revision import Era, Revision
from mcpx.upstream.channel import ChannelClosed
from mcpx.upstream.connect import make_connector
from mcpx.upstream.handlers import UpstreamHandlers
from mcpx.upstream.legacy_session import LegacySession
from mcpx.upstream.modern_session import ModernSession
from mcpx.upstream.probe import Connector, EraCache, Found, era_key
from mcpx.upstream.session import UpstreamSession
from mcpx.wire.peer import ConnectionClosed, RequestTimedOut
from tests.support.peers import (
    fixture_argv,
    misbehaving_argv,
    start_everything_http,
    start_http_fixture,
)
from tests.support.processes import REPO, reactor

PEERS = REPO / "tests" / "peers" / "node_modules"
EVERYTHING = PEERS / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"


def node() -> str:
    found = shutil.which("node")
    if found is None:
        raise AssertionError("node is not on PATH; server-everything needs Node 20 or later")
    return found


def everything_stdio() -> StdioServer:
    if not EVERYTHING.exists():
        raise AssertionError(f"{EVERYTHING} is missing: run `make test`, which installs the peers")
    return StdioServer(name="everything", command=node(), args=(str(EVERYTHING), "stdio"))


class Recorder:
    """Handlers that answer like a person would, and remember what they were asked."""

    def __init__(self) -> None:
        self.elicitations: list[Mapping[str, Any]] = []
        self.samplings: list[Mapping[str, Any]] = []
        self.notifications: list[tuple[str, Any]] = []

    async def elicit(self, params: Mapping[str, Any]) -> Mapping[str, Any]:
        self.elicitations.append(params)
        return {"action": "accept", "content": {"name": "Ada Lovelace"}}

    async def sample(self, params: Mapping[str, Any]) -> Mapping[str, Any]:
        self.samplings.append(params)
        return {
            "role": "assistant",
            "content": {"type": "text", "text": "forty-two"},
            "model": "mcpx-test-model",
            "stopReason": "endTurn",
        }

    def handlers(self) -> UpstreamHandlers:
        return UpstreamHandlers(
            elicitation=self.elicit,
            sampling=self.sample,
            notification=lambda method, params: self.notifications.append((method, params)),
        )


def text_of(result: Mapping[str, Any]) -> str:
    return "\n".join(c.get("text", "") for c in result["content"] if c.get("type") == "text")


class EverythingStdioTests(TestCase):
    """server-everything 2026.8.31 over stdio: a legacy (TypeScript SDK) server."""

    timeout = 60

    async def connect(self, recorder: Recorder) -> UpstreamSession:
        connector = make_connector(
            reactor, os.environ, Path(self.mktemp()), probe_timeout=5.0, grace=2.0
        )
        session = await connector.connect("everything", everything_stdio(), recorder.handlers())
        self.addCleanup(session.close)
        return session

    async def test_lists_and_calls(self) -> None:
        """Handshake, every list, and the plain tools: echo, get-sum, structured, image."""
        recorder = Recorder()
        session = await self.connect(recorder)
        self.assertIsInstance(session, LegacySession)
        self.assertEqual(session.revision, Revision.V2025_11_25)
        self.assertTrue(session.server_info.get("name"))

        tools = {t["name"]: t for t in await session.list_tools()}
        for name in (
            "echo",
            "get-sum",
            "get-structured-content",
            "get-tiny-image",
            "trigger-long-running-operation",
            "trigger-elicitation-request",
            "trigger-sampling-request",
        ):
            self.assertIn(name, tools)
        prompts = {p["name"] for p in await session.list_prompts()}
        self.assertIn("simple-prompt", prompts)
        resources = await session.list_resources()
        self.assertGreaterEqual(len(resources), 1)
        templates = await session.list_resource_templates()
        self.assertTrue(any("{" in t["uriTemplate"] for t in templates))

        echoed = await session.call_tool("echo", {"message": "hello from mcpx"})
        self.assertIn("hello from mcpx", text_of(echoed))
        self.assertEqual(echoed["resultType"], "complete")

        summed = await session.call_tool("get-sum", {"a": 2, "b": 40})
        self.assertIn("42", text_of(summed))

        weather = await session.call_tool("get-structured-content", {"location": "Chicago"})
        self.assertIn("temperature", weather["structuredContent"])

        image = await session.call_tool("get-tiny-image", {})
        images = [c for c in image["content"] if c["type"] == "image"]
        self.assertEqual(len(images), 1)
        self.assertTrue(base64.b64decode(images[0]["data"]).startswith(b"\x89PNG"))

        prompt = await session.get_prompt("simple-prompt")
        self.assertTrue(prompt["messages"])
        read = await session.read_resource(resources[0]["uri"])
        self.assertTrue(read["contents"])

    async def test_progress_reaches_the_notification_handler(self) -> None:
        """trigger-long-running-operation sends progress for mcpx's token, step by step."""
        recorder = Recorder()
        session = await self.connect(recorder)
        await session.call_tool(
            "trigger-long-running-operation",
            {"duration": 0.3, "steps": 3},
            meta={"progressToken": "mcpx-1"},
        )
        progress = [p for m, p in recorder.notifications if m == "notifications/progress"]
        self.assertEqual([p["progress"] for p in progress], [1, 2, 3])
        self.assertTrue(all(p["progressToken"] == "mcpx-1" for p in progress))

    async def test_elicitation_is_answered_by_the_handler(self) -> None:
        """The server's elicitation/create reaches the injected handler; the answer comes back."""
        recorder = Recorder()
        session = await self.connect(recorder)
        result = await session.call_tool("trigger-elicitation-request", {})
        self.assertEqual(len(recorder.elicitations), 1)
        asked = recorder.elicitations[0]
        self.assertIn("name", asked["requestedSchema"]["properties"])
        self.assertIn("Ada Lovelace", text_of(result))

    async def test_sampling_is_answered_by_the_handler(self) -> None:
        """The server's sampling/createMessage reaches the handler; its text reaches the tool."""
        recorder = Recorder()
        session = await self.connect(recorder)
        result = await session.call_tool(
            "trigger-sampling-request", {"prompt": "the answer?", "maxTokens": 20}
        )
        self.assertEqual(len(recorder.samplings), 1)
        self.assertEqual(recorder.samplings[0]["maxTokens"], 20)
        self.assertIn("forty-two", text_of(result))

    async def test_undeclared_capabilities_hide_the_tools(self) -> None:
        """Without handlers mcpx declares nothing, and the server offers no asking tools."""
        connector = make_connector(reactor, os.environ, None, grace=2.0)
        session = await connector.connect("everything", everything_stdio())
        self.addCleanup(session.close)
        names = {t["name"] for t in await session.list_tools()}
        self.assertNotIn("trigger-elicitation-request", names)
        self.assertNotIn("trigger-sampling-request", names)


class DemoStdioTests(TestCase):
    """The shipped demo server, found modern by the probe, and remembered."""

    timeout = 30

    async def test_demo_is_modern_and_the_era_is_remembered(self) -> None:
        """The dual-era demo answers discover; the era cache then skips nothing it needs."""
        import sys

        state = Path(self.mktemp())
        demo = StdioServer(name="demo", command=sys.executable, args=("-m", "mcpx.demo"))
        connector: Connector = make_connector(reactor, os.environ, state, grace=2.0)
        session = await connector.connect("demo", demo)
        try:
            self.assertIsInstance(session, ModernSession)
            result = await session.call_tool("add", {"a": 2, "b": 3})
            self.assertEqual(result["structuredContent"], {"sum": 5})
        finally:
            await session.close()
        remembered = EraCache.load(state / "upstream-eras.json")
        self.assertEqual(remembered.get(era_key(demo)).value, "modern")  # type: ignore[union-attr]


def stdio_config(name: str, argv: list[str]) -> StdioServer:
    return StdioServer(name=name, command=argv[0], args=tuple(argv[1:]))


class Asker(Recorder):
    """Also answers roots, as a host with one workspace would."""

    async def roots(self, params: Mapping[str, Any]) -> Mapping[str, Any]:
        return {"roots": [{"uri": "file:///workspace", "name": "workspace"}]}

    def handlers(self) -> UpstreamHandlers:
        handlers = Recorder.handlers(self)
        return UpstreamHandlers(
            elicitation=handlers.elicitation,
            sampling=handlers.sampling,
            roots=self.roots,
            notification=handlers.notification,
        )


async def check_surface(case: TestCase, session: UpstreamSession, recorder: Recorder) -> None:
    """The fixture's whole surface works through mcpx: pages, structure, every question."""
    tools = [t["name"] for t in await session.list_tools()]
    case.assertEqual(len(tools), 10, f"every page of tools/list is followed: {tools}")
    for name in ("echo", "add", "ask_name", "sample", "roots", "slow"):
        case.assertIn(name, tools)
    added = await session.call_tool("add", {"a": 20, "b": 22})
    case.assertEqual(added["structuredContent"], {"sum": 42})
    named = await session.call_tool("ask_name", {})
    case.assertIn("Ada Lovelace", text_of(named))
    case.assertEqual(len(recorder.elicitations), 1)
    sampled = await session.call_tool("sample", {"prompt": "?"})
    case.assertIn("forty-two", text_of(sampled))
    rooted = await session.call_tool("roots", {})
    case.assertIn("file:///workspace", text_of(rooted))
    prompt = await session.get_prompt("greet", {"name": "Ada"})
    case.assertTrue(prompt["messages"])
    read = await session.read_resource("fixture://static")
    case.assertTrue(read["contents"])
    completion = await session.complete(
        {"type": "ref/prompt", "name": "greet"}, {"name": "name", "value": "Al"}
    )
    case.assertIn("Alice", completion["completion"]["values"])


class SdkStdioTests(TestCase):
    """The `mcp` Python SDK's server (tests/fixtures/sdk_server.py) over stdio, per era."""

    timeout = 60

    async def connect(
        self, argv: list[str], recorder: Recorder | None = None, **options: Any
    ) -> UpstreamSession:
        connector = make_connector(reactor, os.environ, Path(self.mktemp()), grace=2.0, **options)
        handlers = (recorder or Asker()).handlers()
        session = await connector.connect("sdk", stdio_config("sdk", argv), handlers)
        self.addCleanup(session.close)
        return session

    async def test_legacy_only_server(self) -> None:
        """A handshake-only SDK server: probed, initialised at 2025-11-25, every feature works."""
        recorder = Asker()
        session = await self.connect(fixture_argv("stdio", "legacy"), recorder)
        self.assertIsInstance(session, LegacySession)
        self.assertEqual(session.revision, Revision.V2025_11_25)
        await check_surface(self, session, recorder)

    async def test_modern_only_server(self) -> None:
        """A 2026-07-28-only SDK server: its questions come as input_required rounds."""
        recorder = Asker()
        session = await self.connect(fixture_argv("stdio", "modern"), recorder)
        self.assertIsInstance(session, ModernSession)
        await check_surface(self, session, recorder)

    async def test_an_older_legacy_revision_is_accepted(self) -> None:
        """A server that answers initialize with 2024-11-05 is used at 2024-11-05."""
        session = await self.connect(fixture_argv("stdio", "legacy", legacy_version="2024-11-05"))
        self.assertEqual(session.revision, Revision.V2024_11_05)
        echoed = await session.call_tool("echo", {"text": "old"})
        self.assertIn("old", text_of(echoed))

    async def test_progress_from_the_sdk(self) -> None:
        """Progress for mcpx's token arrives from the SDK server during a call."""
        recorder = Asker()
        session = await self.connect(fixture_argv("stdio", "legacy"), recorder)
        await session.call_tool(
            "slow", {"seconds": 0.2, "steps": 3}, meta={"progressToken": "mcpx-7"}
        )
        progress = [p for m, p in recorder.notifications if m == "notifications/progress"]
        self.assertGreaterEqual(len(progress), 3)
        self.assertTrue(all(p["progressToken"] == "mcpx-7" for p in progress))


class MisbehavingServerTests(TestCase):
    """Servers that break the rules: mcpx reports clearly and stays up."""

    timeout = 60

    async def connect(self, mode: Any, **options: Any) -> UpstreamSession:
        connector = make_connector(reactor, os.environ, None, grace=1.0, **options)
        session = await connector.connect("bad", stdio_config("bad", misbehaving_argv(mode)))
        self.addCleanup(session.close)
        return session

    async def test_garbage_on_stdout_is_skipped(self) -> None:
        """Lines that are not JSON are logged and skipped; the calls still work."""
        session = await self.connect("garbage")
        echoed = await session.call_tool("echo", {"text": "through the noise"})
        self.assertIn("through the noise", text_of(echoed))
        self.flushLoggedErrors()

    async def test_silence_to_discover_falls_back_after_the_probe_timeout(self) -> None:
        """A server that never answers server/discover is initialised once the probe times out."""
        session = await self.connect("silent-discover", probe_timeout=0.5)
        self.assertIsInstance(session, LegacySession)

    async def test_a_hung_call_is_bounded_by_the_callers_timeout(self) -> None:
        """tools/call on a server that never answers fails at the timeout the caller gave."""
        session = await self.connect("hang")
        with self.assertRaises(RequestTimedOut):
            await session.call_tool("echo", {"text": "x"}, timeout=0.5)

    async def test_a_crash_mid_call_names_the_server_and_status(self) -> None:
        """The call in flight fails with an error naming the server and its exit status."""
        session = await self.connect("crash-mid-call")
        with self.assertRaises(ConnectionClosed) as caught:
            await session.call_tool("echo", {"text": "x"})
        self.assertIn('"bad"', str(caught.exception))
        self.assertIn("status 3", str(caught.exception))
        self.assertIsInstance(caught.exception.reason, ChannelClosed)


class SdkHttpTests(TestCase):
    """The SDK's server over Streamable HTTP and HTTP+SSE, found by the era probe."""

    timeout = 90

    async def connect(self, url: str, recorder: Recorder) -> UpstreamSession:
        connector = make_connector(reactor, os.environ, Path(self.mktemp()), probe_timeout=5.0)
        session = await connector.connect(
            "sdk-http", RemoteServer(name="sdk-http", url=url), recorder.handlers()
        )
        self.addCleanup(session.close)
        return session

    async def test_dual_era_http_is_used_modern(self) -> None:
        """A server serving both eras on one URL is spoken to in 2026-07-28."""
        server = await start_http_fixture(reactor, "both", add_cleanup=self.addCleanup)
        recorder = Asker()
        session = await self.connect(server.url, recorder)
        self.assertIsInstance(session, ModernSession)
        await check_surface(self, session, recorder)

    async def test_legacy_only_http_falls_back_to_initialize(self) -> None:
        """A handshake-only HTTP server refuses the modern probe; mcpx initialises instead."""
        server = await start_http_fixture(reactor, "legacy", add_cleanup=self.addCleanup)
        recorder = Asker()
        session = await self.connect(server.url, recorder)
        self.assertIsInstance(session, LegacySession)
        self.assertEqual(session.revision, Revision.V2025_11_25)
        await check_surface(self, session, recorder)

    async def test_modern_only_http(self) -> None:
        """A 2026-07-28-only HTTP server: questions as input_required rounds over HTTP."""
        server = await start_http_fixture(reactor, "modern", add_cleanup=self.addCleanup)
        recorder = Asker()
        session = await self.connect(server.url, recorder)
        self.assertIsInstance(session, ModernSession)
        await check_surface(self, session, recorder)

    async def test_http_sse_server_is_reached_through_the_fallback(self) -> None:
        """A 2024-11-05 HTTP+SSE server: POST refused, so mcpx opens the GET stream instead."""
        server = await start_http_fixture(reactor, "legacy", "sse", add_cleanup=self.addCleanup)
        recorder = Asker()
        state = Path(self.mktemp())
        connector = make_connector(reactor, os.environ, state, probe_timeout=5.0)
        config = RemoteServer(name="sse", url=server.url)
        session = await connector.connect("sse", config, recorder.handlers())
        self.addCleanup(session.close)
        self.assertIsInstance(session, LegacySession)
        echoed = await session.call_tool("echo", {"text": "over sse"})
        self.assertIn("over sse", text_of(echoed))
        sampled = await session.call_tool("sample", {"prompt": "?"})
        self.assertIn("forty-two", text_of(sampled))
        remembered = EraCache.load(state / "upstream-eras.json").get(era_key(config))
        self.assertEqual(remembered, Found(Era.LEGACY, http_sse=True))


class EverythingHttpTests(TestCase):
    """server-everything over Streamable HTTP (it binds every interface: private netns only)."""

    timeout = 60

    async def test_lists_calls_and_asks_over_http(self) -> None:
        """The same checks as over stdio: tools, progress, elicitation and sampling over HTTP."""
        server = await start_everything_http(reactor, add_cleanup=self.addCleanup)
        recorder = Recorder()
        connector = make_connector(reactor, os.environ, None, probe_timeout=5.0)
        session = await connector.connect(
            "everything-http",
            RemoteServer(name="everything-http", url=server.url),
            recorder.handlers(),
        )
        self.addCleanup(session.close)
        self.assertIsInstance(session, LegacySession)
        names = {t["name"] for t in await session.list_tools()}
        self.assertIn("trigger-elicitation-request", names)
        summed = await session.call_tool("get-sum", {"a": 1, "b": 2})
        self.assertIn("3", text_of(summed))
        await session.call_tool(
            "trigger-long-running-operation",
            {"duration": 0.3, "steps": 3},
            meta={"progressToken": "http-1"},
        )
        progress = [p for m, p in recorder.notifications if m == "notifications/progress"]
        self.assertEqual([p["progress"] for p in progress], [1, 2, 3])
        elicited = await session.call_tool("trigger-elicitation-request", {})
        self.assertIn("Ada Lovelace", text_of(elicited))
        sampled = await session.call_tool(
            "trigger-sampling-request", {"prompt": "q", "maxTokens": 5}
        )
        self.assertIn("forty-two", text_of(sampled))
