# -*- test-case-name: tests.conformance.test_fixture_server -*-
"""
The conformance fixture upstream (C{tests/conformance/fixture_server.py}) checked with the
MCP Python SDK's own client, over Streamable HTTP and over stdio, in both eras: so that
a failure of the official suite run through mcpx points at mcpx, not at the fixture.

The SDK client runs on asyncio, so each conversation runs in a worker thread under
C{anyio.run} while the test's reactor keeps the fixture process.
"""

from __future__ import annotations

import base64
import json
import re
import sys
import warnings
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import mcp_types as types
from attrs import define, field
from mcp import Client, StdioServerParameters
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from twisted.internet.defer import Deferred
from twisted.internet.threads import deferToThread
from twisted.trial.unittest import TestCase

from tests.support.processes import REPO, ChildProcess, kill_on_cleanup, spawn

T = TypeVar("T")

FIXTURE = REPO / "tests" / "conformance" / "fixture_server.py"
#: Bound on one SDK-client conversation, so a broken fixture fails instead of hanging.
CONVERSATION_TIMEOUT = 20.0
MODERN = "2026-07-28"
LATEST_LEGACY = "2025-11-25"

BOTH_ERAS_TOOLS = {
    "test_simple_text",
    "test_image_content",
    "test_audio_content",
    "test_embedded_resource",
    "test_multiple_content_types",
    "test_tool_with_logging",
    "test_tool_with_progress",
    "test_error_handling",
    "test_reconnection",
    "test_sampling",
    "test_elicitation",
    "test_elicitation_sep1034_defaults",
    "test_elicitation_sep1330_enums",
    "json_schema_2020_12_tool",
}
MODERN_TOOLS = {
    "test_missing_capability",
    "test_input_required_result_elicitation",
    "test_input_required_result_sampling",
    "test_input_required_result_list_roots",
    "test_input_required_result_request_state",
    "test_input_required_result_multiple_inputs",
    "test_input_required_result_multi_round",
    "test_input_required_result_tampered_state",
    "test_input_required_result_capabilities",
    "test_streaming_elicitation",
    "test_logging_tool",
    "test_trigger_tool_change",
    "test_trigger_prompt_change",
    "test_mcp_param_header",
    # The tasks extension's scenarios (mcpx makes their calls tasks).
    "greet",
    "slow_compute",
    "failing_job",
    "protocol_error_job",
    "confirm_delete",
    "multi_input",
    "test_tool_with_task",
}
BOTH_ERAS_RESOURCES = {"test://static-text", "test://static-binary", "test://watched-resource"}
BOTH_ERAS_PROMPTS = {
    "test_simple_prompt",
    "test_prompt_with_arguments",
    "test_prompt_with_embedded_resource",
    "test_prompt_with_image",
}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def in_thread(conversation: Callable[[], Awaitable[T]]) -> Deferred[T]:
    """Run an SDK-client C{conversation} on its own event loop in a worker thread."""

    async def bounded() -> T:
        with warnings.catch_warnings():
            # The suite tests features 2026-07-28 deprecates; so must this client.
            warnings.simplefilter("ignore")
            with anyio.fail_after(CONVERSATION_TIMEOUT):
                return await conversation()

    return deferToThread(anyio.run, bounded)


def fixture_argv(transport: str) -> list[str]:
    argv = [sys.executable, str(FIXTURE), "--transport", transport]
    return [*argv, "--port", "0"] if transport == "http" else argv


def stdio_target() -> StdioServerParameters:
    argv = fixture_argv("stdio")
    return StdioServerParameters(command=argv[0], args=argv[1:], cwd=str(REPO))


async def start_http_fixture(test: TestCase) -> str:
    """Start the fixture over HTTP on a free loopback port; its C{/mcp} URL."""
    child: ChildProcess = spawn(fixture_argv("http"), cwd=str(REPO))

    async def stop() -> None:
        child.signal("TERM")
        try:
            await child.ended(5)
        finally:
            kill_on_cleanup(child)

    test.addCleanup(stop)
    line = await child.wait_for(rb"fixture listening on http://127\.0\.0\.1:\d+/mcp", timeout=20)
    url = line.decode().rsplit(" ", 1)[1]
    return url


def texts(content: list[Any]) -> str:
    return "".join(part.text for part in content if isinstance(part, types.TextContent))


@define
class Survey:
    """What an SDK client saw of the fixture, gathered in the worker thread."""

    version: str = ""
    server_name: str = ""
    tools: set[str] = field(factory=set)
    resources: set[str] = field(factory=set)
    templates: set[str] = field(factory=set)
    prompts: set[str] = field(factory=set)
    texts: dict[str, str] = field(factory=dict)
    errors: dict[str, bool] = field(factory=dict)
    image: tuple[str, bytes] = ("", b"")
    audio_mime: str = ""
    embedded: Any = None
    binary: tuple[str, bytes] = ("", b"")
    progress: list[float] = field(factory=list)
    log_messages: list[Any] = field(factory=list)
    elicited: list[dict[str, Any]] = field(factory=list)

    async def on_elicit(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        schema = getattr(params, "requested_schema", {})
        self.elicited.append(schema)
        answer = {"name": "Ada", "username": "ada", "email": "ada@example.com", "context": "c"}
        wanted: dict[str, str | int | float | bool | list[str] | None] = {
            key: answer[key] for key in schema.get("properties", {}) if key in answer
        }
        return types.ElicitResult(action="accept", content=wanted)

    async def on_sample(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        asked = params.messages[0].content
        prompt = asked.text if isinstance(asked, types.TextContent) else "?"
        reply = types.TextContent(type="text", text=f"model answer to {prompt}")
        return types.CreateMessageResult(role="assistant", content=reply, model="fake-model")

    async def on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.log_messages.append(params.data)

    async def on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.progress.append(progress)

    def client(self, target: Any, mode: str) -> Client:
        return Client(
            target,
            mode=mode,
            elicitation_callback=self.on_elicit,
            sampling_callback=self.on_sample,
            logging_callback=self.on_log,
            log_level="debug",
        )

    async def call(self, client: Client, name: str, arguments: dict[str, Any]) -> Any:
        answer = await client.call_tool(name, arguments)
        self.errors[name] = answer.is_error
        self.texts[name] = texts(answer.content)
        return answer

    async def survey(self, target: Any, mode: str) -> Survey:
        """List everything, and call, read and get the things whose payloads are checked."""
        async with self.client(target, mode) as client:
            self.version = client.protocol_version
            self.server_name = client.server_info.name if client.server_info else ""
            self.tools = {tool.name for tool in (await client.list_tools()).tools}
            listed = await client.list_resources()
            self.resources = {str(resource.uri) for resource in listed.resources}
            templates = await client.list_resource_templates()
            self.templates = {t.uri_template for t in templates.resource_templates}
            self.prompts = {prompt.name for prompt in (await client.list_prompts()).prompts}
            for name in ("test_simple_text", "test_error_handling", "test_tool_with_logging"):
                await self.call(client, name, {})
            await self.call(client, "test_elicitation", {"message": "Who are you?"})
            await self.call(client, "test_sampling", {"prompt": "ping?"})
            shown = await self.call(client, "test_image_content", {})
            self.image = (shown.content[0].mime_type, base64.b64decode(shown.content[0].data))
            heard = await self.call(client, "test_audio_content", {})
            self.audio_mime = heard.content[0].mime_type
            self.embedded = (await self.call(client, "test_embedded_resource", {})).content[0]
            await client.call_tool(
                "test_tool_with_progress", {}, progress_callback=self.on_progress
            )
            static = (await client.read_resource("test://static-text")).contents[0]
            self.texts["test://static-text"] = getattr(static, "text", "")
            binary = (await client.read_resource("test://static-binary")).contents[0]
            self.binary = (binary.mime_type or "", base64.b64decode(getattr(binary, "blob", "")))
            templated = (await client.read_resource("test://template/123/data")).contents[0]
            self.texts["template"] = getattr(templated, "text", "")
            prompt = await client.get_prompt(
                "test_prompt_with_arguments", {"arg1": "hello", "arg2": "world"}
            )
            self.texts["prompt"] = texts([message.content for message in prompt.messages])
            if self.version == MODERN:
                await self.call(client, "test_input_required_result_elicitation", {})
                asked = await client.get_prompt("test_input_required_result_prompt")
                self.texts["asked prompt"] = texts([m.content for m in asked.messages])
        return self


async def tampered_state_round(target: Any) -> tuple[str, str, str]:
    """
    Drive C{test_input_required_result_request_state} by hand at 2026-07-28: the first
    round's state, the outcome of echoing it altered, and of echoing it intact.
    """
    survey = Survey()
    confirm = types.ElicitResult(action="accept", content={"ok": True})
    async with survey.client(target, MODERN) as client:
        name = "test_input_required_result_request_state"
        first = await client.session.call_tool(name, {}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult), first
        state = first.request_state or ""
        try:
            await client.session.call_tool(
                name, {}, input_responses={"confirm": confirm}, request_state=state + "x"
            )
            tampered = "accepted"
        except MCPError as refusal:
            tampered = f"refused {refusal.error.code}"
        second = await client.session.call_tool(
            name, {}, input_responses={"confirm": confirm}, request_state=state
        )
    return state, tampered, texts(second.content)


class FixtureServerTests(TestCase):
    """The conformance fixture, seen by the SDK client over each transport and era."""

    def assert_common_surface(self, seen: Survey) -> None:
        """What both eras share: names, and the payloads the suite's scenarios spell out."""
        self.assertEqual(seen.server_name, "mcp-conformance-test-server")
        self.assertEqual(seen.templates, {"test://template/{id}/data"})
        self.assertEqual(
            seen.texts["test_simple_text"], "This is a simple text response for testing."
        )
        self.assertEqual(
            (seen.errors["test_error_handling"], seen.texts["test_error_handling"]),
            (True, "This tool intentionally returns an error for testing"),
        )
        self.assertEqual(seen.errors["test_simple_text"], False)
        self.assertEqual(seen.image[0], "image/png")
        self.assertTrue(seen.image[1].startswith(PNG_SIGNATURE))
        self.assertEqual(seen.audio_mime, "audio/wav")
        self.assertEqual(
            (seen.embedded.resource.uri, seen.embedded.resource.text),
            ("test://embedded-resource", "This is an embedded resource content."),
        )
        self.assertEqual(seen.progress, [0, 50, 100])
        self.assertEqual(
            seen.log_messages,
            ["Tool execution started", "Tool processing data", "Tool execution completed"],
        )
        self.assertEqual(
            seen.texts["test_elicitation"],
            'User response: action=accept, content={"email": "ada@example.com", "username": "ada"}',
        )
        self.assertEqual(seen.elicited[0]["required"], ["username", "email"])
        self.assertEqual(seen.texts["test_sampling"], "LLM response: model answer to ping?")
        self.assertEqual(
            seen.texts["test://static-text"], "This is the content of the static text resource."
        )
        self.assertEqual(seen.binary[0], "image/png")
        self.assertTrue(seen.binary[1].startswith(PNG_SIGNATURE))
        self.assertEqual(
            json.loads(seen.texts["template"]),
            {"id": "123", "templateTest": True, "data": "Data for ID: 123"},
        )
        self.assertEqual(seen.texts["prompt"], "Prompt with arguments: arg1='hello', arg2='world'")

    def assert_legacy(self, seen: Survey) -> None:
        """A handshake client sees the 14 shared tools and nothing of 2026-07-28."""
        self.assertEqual(seen.version, LATEST_LEGACY)
        self.assertEqual(seen.tools, BOTH_ERAS_TOOLS)
        self.assertEqual(seen.resources, BOTH_ERAS_RESOURCES)
        self.assertEqual(seen.prompts, BOTH_ERAS_PROMPTS)
        self.assert_common_surface(seen)

    def assert_modern(self, seen: Survey) -> None:
        """A 2026-07-28 client also sees the input_required family, answered in rounds."""
        self.assertEqual(seen.version, MODERN)
        self.assertEqual(seen.tools, BOTH_ERAS_TOOLS | MODERN_TOOLS)
        self.assertEqual(seen.resources, BOTH_ERAS_RESOURCES | {"test://stateless-static-text"})
        self.assertEqual(seen.prompts, BOTH_ERAS_PROMPTS | {"test_input_required_result_prompt"})
        self.assert_common_surface(seen)
        self.assertEqual(seen.texts["test_input_required_result_elicitation"], "Hello, Ada!")
        self.assertEqual(seen.texts["asked prompt"], "Answer with this context in mind: c")

    async def test_http_serves_both_eras_on_one_url(self) -> None:
        """
        One fixture process over Streamable HTTP serves a handshake client at 2025-11-25
        and a probing client (C{server/discover}) at 2026-07-28, each the surface and
        payloads of its era.
        """
        url = await start_http_fixture(self)
        self.assertRegex(url, r"^http://127\.0\.0\.1:\d+/mcp$")
        self.assert_legacy(await in_thread(lambda: Survey().survey(url, "legacy")))
        self.assert_modern(await in_thread(lambda: Survey().survey(url, "auto")))

    async def test_stdio_serves_both_eras(self) -> None:
        """The fixture over stdio serves each era the same surface and payloads as HTTP."""
        self.assert_legacy(await in_thread(lambda: Survey().survey(stdio_target(), "legacy")))
        self.assert_modern(await in_thread(lambda: Survey().survey(stdio_target(), "auto")))

    async def test_tampered_request_state_is_refused(self) -> None:
        """
        The sealed C{requestState} of a 2026-07-28 question is opaque, an altered echo is
        refused with -32602, and the intact echo completes with C{state-ok}.
        """
        url = await start_http_fixture(self)
        state, tampered, completed = await in_thread(lambda: tampered_state_round(url))
        self.assertNotIn("awaiting", state)
        self.assertEqual(tampered, "refused -32602")
        self.assertEqual(completed, "state-ok: confirmed=true")

    async def test_stdio_fixture_exits_on_end_of_input(self) -> None:
        """Closing the fixture's stdin ends the process cleanly, as a stdio peer must."""
        child = spawn(fixture_argv("stdio"), cwd=str(REPO))
        self.addCleanup(kill_on_cleanup, child)
        assert child.transport is not None
        child.transport.closeStdin()
        self.assertEqual(await child.ended(10), 0)
        self.assertIsNone(re.search(r"Traceback", child.text()))
