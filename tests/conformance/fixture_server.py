# -*- test-case-name: tests.conformance.test_fixture_server -*-
"""
The upstream the official conformance suite's server leg is run against: an MCP server
on the Python SDK's low-level C{Server}, offering the tools, resources, templates and
prompts the suite's server scenarios name, with the payloads their descriptions give.

Run it as C{python tests/conformance/fixture_server.py --transport stdio} or
C{--transport http --port N} (C{127.0.0.1} only; C{--port 0} picks a free port). Over
HTTP it prints C{fixture listening on http://127.0.0.1:PORT/mcp} on stderr once the
socket accepts connections. One URL, and one stdio process, serve both eras: a client
that starts with C{initialize} gets the handshake revisions, one that sends the
2026-07-28 per-request envelope gets 2026-07-28. The script imports nothing from this
repository.

The surface differs by era only where the suite's does:
 - both eras: 14 tools (C{test_simple_text} ... C{json_schema_2020_12_tool}), resources
   C{test://static-text}, C{test://static-binary}, C{test://watched-resource}, the
   template C{test://template/{id}/data}, four prompts, completions;
 - 2026-07-28 adds the C{test_input_required_result_*} tools and prompt,
   C{test_missing_capability}, C{test_streaming_elicitation}, C{test_logging_tool},
   C{test://stateless-static-text}, and three tools of our own that the suite probes
   for but does not name in a description: C{test_trigger_tool_change} and
   C{test_trigger_prompt_change} (announce a list change on C{subscriptions/listen}
   streams) and C{test_mcp_param_header} (an C{x-mcp-header} parameter, for SEP-2243),
   and the tasks extension's C{greet}, C{slow_compute}, C{failing_job},
   C{protocol_error_job}, C{confirm_delete}, C{multi_input} and C{test_tool_with_task}.
   These declare their task support (C{_meta["io.modelcontextprotocol/tasks"]
   ["taskSupport"]}, as 2026-07-28's C{Tool} has no C{execution}) but create no task:
   mcpx in front makes their calls tasks, so each waits longer than mcpx's 250 ms where
   a scenario needs a task;
 - handshake revisions keep C{logging/setLevel}, C{resources/subscribe} and
   C{resources/unsubscribe}, which 2026-07-28 removed.

A question to the client (elicitation, sampling, roots) is a server-to-client request
on the handshake revisions and an C{input_required} result on 2026-07-28, whose
C{requestState} the SDK seals, so a tampered one is refused with -32602.
"""

from __future__ import annotations

import argparse
import io
import json
import socket
import struct
import sys
import warnings
import wave
import zlib
from base64 import b64encode
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
from mcp.server.caching import CacheHint
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ToolsListChanged,
)
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

Context = ServerRequestContext[Any, Any]
Wire = dict[str, Any]

SERVER_NAME = "mcp-conformance-test-server"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
SERVER_VERSION = "1.0.0"
LOG_LEVELS: tuple[types.LoggingLevel, ...] = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)

SIMPLE_TEXT = "This is a simple text response for testing."
ERROR_TEXT = "This tool intentionally returns an error for testing"
EMBEDDED_URI = "test://embedded-resource"
EMBEDDED_TEXT = "This is an embedded resource content."
MIXED_URI = "test://mixed-content-resource"
MIXED_JSON = '{"test":"data","value":123}'
STATIC_TEXT_URI = "test://static-text"
STATIC_TEXT = "This is the content of the static text resource."
STATIC_BINARY_URI = "test://static-binary"
WATCHED_URI = "test://watched-resource"
WATCHED_TEXT = "This is the content of the watched resource."
STATELESS_TEXT_URI = "test://stateless-static-text"
STATELESS_TEXT = "This is the content of the stateless static text resource."
TEMPLATE = "test://template/{id}/data"
TEMPLATE_PREFIX, TEMPLATE_SUFFIX = "test://template/", "/data"
LOG_LINES = ("Tool execution started", "Tool processing data", "Tool execution completed")
COMPLETION_WORDS = ("paris", "park", "party")

#: How long, in milliseconds, a 2026-07-28 client may reuse a listing (SEP-2549).
CACHE_TTL_MS = 300_000
CACHE_HINTS: Mapping[Any, CacheHint] = {
    "tools/list": CacheHint(CACHE_TTL_MS, "public"),
    "prompts/list": CacheHint(CACHE_TTL_MS, "public"),
    "resources/list": CacheHint(CACHE_TTL_MS, "public"),
    "resources/templates/list": CacheHint(CACHE_TTL_MS, "public"),
    "resources/read": CacheHint(CACHE_TTL_MS, "private"),
}


def _png_one_red_pixel() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


def _wav_short_silence() -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(1)
        out.setframerate(8000)
        out.writeframes(b"\x80" * 80)
    return buffer.getvalue()


PNG_BASE64 = b64encode(_png_one_red_pixel()).decode("ascii")
WAV_BASE64 = b64encode(_wav_short_silence()).decode("ascii")


def text(value: str) -> Wire:
    return {"type": "text", "text": value}


def image() -> Wire:
    return {"type": "image", "data": PNG_BASE64, "mimeType": "image/png"}


def embedded(uri: str, mime_type: str, body: str) -> Wire:
    return {"type": "resource", "resource": {"uri": uri, "mimeType": mime_type, "text": body}}


def no_arguments() -> Wire:
    return {"type": "object", "properties": {}}


def is_modern(ctx: Context) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


class InputRequired(Exception):
    """A question the 2026-07-28 client must answer before the request can complete."""

    def __init__(self, result: Wire) -> None:
        super().__init__("input required")
        self.result = result


class ToolFailure(Exception):
    """A tool outcome reported as an C{isError} result rather than a JSON-RPC error."""


# Elicitation, sampling and roots requests, by the client capability each needs and the
# result class that answers it.
_CAPABILITY_FOR = {
    "elicitation/create": "elicitation",
    "sampling/createMessage": "sampling",
    "roots/list": "roots",
}
_ANSWER_CLASSES: dict[str, tuple[type[BaseModel], ...]] = {
    "elicitation/create": (types.ElicitResult,),
    "sampling/createMessage": (types.CreateMessageResult, types.CreateMessageResultWithTools),
    "roots/list": (types.ListRootsResult,),
}


def elicitation(message: str, schema: Wire) -> Wire:
    return {
        "method": "elicitation/create",
        "params": {"message": message, "requestedSchema": schema},
    }


def sampling(prompt: str, max_tokens: int) -> Wire:
    message = {"role": "user", "content": text(prompt)}
    return {
        "method": "sampling/createMessage",
        "params": {"messages": [message], "maxTokens": max_tokens},
    }


def roots_listing() -> Wire:
    return {"method": "roots/list", "params": {}}


def string_form(*names: str) -> Wire:
    properties = {name: {"type": "string"} for name in names}
    return {"type": "object", "properties": properties, "required": list(names)}


def _undeclared(ctx: Context, requests: Mapping[str, Wire]) -> list[str]:
    declared = ctx.session.client_capabilities
    needed = {_CAPABILITY_FOR[request["method"]] for request in requests.values()}
    return sorted(name for name in needed if getattr(declared, name, None) is None)


async def _send(ctx: Context, request: Wire) -> BaseModel:
    """Put C{request} to a handshake-era client on the stream of the request being served."""
    related = ServerMessageMetadata(related_request_id=ctx.request_id)
    method = request["method"]
    if method == "elicitation/create":
        elicit = types.ElicitRequest.model_validate(request)
        return await ctx.session.send_request(elicit, types.ElicitResult, metadata=related)
    if method == "sampling/createMessage":
        sample = types.CreateMessageRequest.model_validate(request)
        return await ctx.session.send_request(sample, types.CreateMessageResult, metadata=related)
    listing = types.ListRootsRequest.model_validate(request)
    return await ctx.session.send_request(listing, types.ListRootsResult, metadata=related)


async def ask(
    ctx: Context,
    params: types.CallToolRequestParams | types.GetPromptRequestParams,
    requests: Mapping[str, Wire],
    state: str | None = None,
) -> dict[str, BaseModel]:
    """
    The client's answers to C{requests}, keyed as they are.

    On 2026-07-28 the answers come from the retried request's C{inputResponses}; while
    any is missing or of the wrong kind, L{InputRequired} carries the whole question
    again, with C{state} as its C{requestState}. On the handshake revisions each is a
    server-to-client request.

    @raise MCPError: -32021 on 2026-07-28 for a capability the client did not declare.
    @raise ToolFailure: for such a capability on the handshake revisions.
    """
    missing = _undeclared(ctx, requests)
    if missing:
        if is_modern(ctx):
            raise MCPError(
                code=types.MISSING_REQUIRED_CLIENT_CAPABILITY,
                message=f"This request needs the client capability: {', '.join(missing)}",
                data={"requiredCapabilities": {name: {} for name in missing}},
            )
        raise ToolFailure(f"The client did not declare the capability: {', '.join(missing)}")
    if not is_modern(ctx):
        return {key: await _send(ctx, request) for key, request in requests.items()}
    given = params.input_responses or {}
    answers: dict[str, BaseModel] = {
        key: given[key]
        for key, request in requests.items()
        if isinstance(given.get(key), _ANSWER_CLASSES[request["method"]])
    }
    if len(answers) == len(requests):
        return answers
    question: Wire = {"resultType": "input_required", "inputRequests": dict(requests)}
    if state is not None:
        question["requestState"] = state
    raise InputRequired(question)


def accepted(answer: BaseModel) -> dict[str, Any]:
    """The form content of an accepted elicitation; empty for any other answer."""
    if isinstance(answer, types.ElicitResult) and answer.action == "accept":
        return dict(answer.content or {})
    return {}


def describe_elicitation(answer: BaseModel) -> str:
    assert isinstance(answer, types.ElicitResult)
    return f"action={answer.action}, content={json.dumps(answer.content or {}, sort_keys=True)}"


def sampled_text(answer: BaseModel) -> str:
    content = getattr(answer, "content", None)
    parts = content if isinstance(content, list) else [content]
    return "".join(part.text for part in parts if isinstance(part, types.TextContent))


def root_uris(answer: BaseModel) -> list[str]:
    assert isinstance(answer, types.ListRootsResult)
    return [str(root.uri) for root in answer.roots]


ToolRun = Callable[[Context, types.CallToolRequestParams], Awaitable[Wire]]


@dataclass(frozen=True)
class FixtureTool:
    """One tool: its listing, what calling it does, and which era offers it."""

    name: str
    description: str
    input_schema: Wire
    run: ToolRun
    modern_only: bool = False
    #: C{execution.taskSupport}: C{"optional"} or C{"required"}, C{None} for neither.
    task_support: str | None = None

    def listing(self) -> Wire:
        listed: Wire = {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
        }
        if self.task_support is not None:
            # 2026-07-28's Tool has no execution (the SDK drops it): the tasks
            # extension's support travels in the tool's _meta, under the extension's id.
            listed["execution"] = {"taskSupport": self.task_support}
            listed["_meta"] = {TASKS_EXTENSION: {"taskSupport": self.task_support}}
        return listed


def result(*content: Wire) -> Wire:
    return {"content": list(content)}


JSON_SCHEMA_2020_12: Wire = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}

DEFAULTS_FORM: Wire = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "User name", "default": "John Doe"},
        "age": {"type": "integer", "description": "User age", "default": 30},
        "score": {"type": "number", "description": "User score", "default": 95.5},
        "status": {
            "type": "string",
            "description": "User status",
            "enum": ["active", "inactive", "pending"],
            "default": "active",
        },
        "verified": {"type": "boolean", "description": "Verification status", "default": True},
    },
    "required": [],
}

ENUMS_FORM: Wire = {
    "type": "object",
    "properties": {
        "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
        "titledSingle": {
            "type": "string",
            "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"},
            ],
        },
        "legacyEnum": {
            "type": "string",
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
        "untitledMulti": {
            "type": "array",
            "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
        },
        "titledMulti": {
            "type": "array",
            "items": {
                "anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"},
                ]
            },
        },
    },
    "required": [],
}

CONTACT_FORM: Wire = {
    "type": "object",
    "properties": {
        "username": {"type": "string", "description": "User's response"},
        "email": {"type": "string", "description": "User's email address"},
    },
    "required": ["username", "email"],
}

CONFIRM_FORM: Wire = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}},
    "required": ["ok"],
}


class Fixture:
    """
    The conformance surface and what one server process remembers across requests.

    One log level and one subscription set serve the whole process: the suite runs its
    scenarios one after another, and the SDK gives a handler no public handle on "this
    connection" to key them by.
    """

    def __init__(self) -> None:
        self.log_level: types.LoggingLevel = "debug"
        self.subscribed: set[str] = set()
        self.bus = InMemorySubscriptionBus()
        self.tools = {tool.name: tool for tool in self._tools()}

    # -- tools -------------------------------------------------------------------------

    def _tools(self) -> list[FixtureTool]:
        def both(
            name: str, description: str, run: ToolRun, schema: Wire | None = None
        ) -> FixtureTool:
            return FixtureTool(name, description, schema or no_arguments(), run)

        def modern(
            name: str,
            description: str,
            run: ToolRun,
            schema: Wire | None = None,
            task_support: str | None = None,
        ) -> FixtureTool:
            return FixtureTool(name, description, schema or no_arguments(), run, True, task_support)

        return [
            both("test_simple_text", "Returns simple text content", self.simple_text),
            both("test_image_content", "Returns a 1x1 red PNG image", self.image_content),
            both("test_audio_content", "Returns a short WAV audio clip", self.audio_content),
            both("test_embedded_resource", "Returns an embedded text resource", self.embedded),
            both("test_multiple_content_types", "Returns text, image and resource", self.mixed),
            both("test_tool_with_logging", "Sends three info log messages", self.logging),
            both("test_tool_with_progress", "Reports progress 0, 50, 100 of 100", self.progress),
            both("test_error_handling", "Always returns an error result", self.error),
            both("test_reconnection", "Closes its SSE stream before answering", self.reconnect),
            both(
                "test_sampling",
                "Asks the client's model to answer a prompt",
                self.sampling,
                string_form("prompt"),
            ),
            both(
                "test_elicitation",
                "Asks the user for a username and an email address",
                self.elicitation,
                string_form("message"),
            ),
            both(
                "test_elicitation_sep1034_defaults",
                "Elicits a form whose fields all carry defaults (SEP-1034)",
                self.elicitation_defaults,
            ),
            both(
                "test_elicitation_sep1330_enums",
                "Elicits a form with every enum variant (SEP-1330)",
                self.elicitation_enums,
            ),
            both(
                "json_schema_2020_12_tool",
                "Tool with JSON Schema 2020-12 features",
                self.echo_arguments,
                JSON_SCHEMA_2020_12,
            ),
            modern(
                "test_missing_capability",
                "Needs the sampling capability, which the client must declare",
                self.missing_capability,
            ),
            modern(
                "test_input_required_result_elicitation",
                "Asks the user's name through an input_required result",
                self.input_elicitation,
            ),
            modern(
                "test_input_required_result_sampling",
                "Asks the client's model through an input_required result",
                self.input_sampling,
            ),
            modern(
                "test_input_required_result_list_roots",
                "Asks for the client's roots through an input_required result",
                self.input_roots,
            ),
            modern(
                "test_input_required_result_request_state",
                "Asks for a confirmation and checks the echoed requestState",
                self.input_request_state,
            ),
            modern(
                "test_input_required_result_multiple_inputs",
                "Asks for a name, a sample and the roots in one round",
                self.input_multiple,
            ),
            modern(
                "test_input_required_result_multi_round",
                "Asks two questions in two rounds",
                self.input_multi_round,
            ),
            modern(
                "test_input_required_result_tampered_state",
                "Asks for a confirmation; a tampered requestState is refused",
                self.input_request_state,
            ),
            modern(
                "test_input_required_result_capabilities",
                "Asks only through the capabilities the client declared",
                self.input_capabilities,
            ),
            modern(
                "test_streaming_elicitation",
                "Asks the user for a name; the answer stream holds only the question",
                self.input_elicitation,
            ),
            modern(
                "test_logging_tool",
                "Logs at info, which reaches only a request that asked for logs",
                self.logging,
            ),
            modern(
                "test_trigger_tool_change",
                "Announces a tools list change to subscribers",
                self.announce_tools_changed,
            ),
            modern(
                "test_trigger_prompt_change",
                "Announces a prompts list change to subscribers",
                self.announce_prompts_changed,
            ),
            modern("greet", "Greets by name, at once", self.greet, string_form("name")),
            modern(
                "slow_compute",
                "Sleeps the given seconds, then answers; may run as a task",
                self.slow_compute,
                {
                    "type": "object",
                    "properties": {"seconds": {"type": "number"}, "label": {"type": "string"}},
                    "required": ["seconds"],
                },
                task_support="optional",
            ),
            modern(
                "failing_job",
                "Reports a tool error after a second; runs only as a task",
                self.failing_job,
                task_support="required",
            ),
            modern(
                "protocol_error_job",
                "Fails with a JSON-RPC error after a second; may run as a task",
                self.protocol_error_job,
                task_support="optional",
            ),
            modern(
                "confirm_delete",
                "Asks to confirm deleting a file, after half a second",
                self.confirm_delete,
                string_form("filename"),
                task_support="optional",
            ),
            modern(
                "multi_input",
                "Asks two questions at once, after half a second",
                self.multi_input,
                task_support="optional",
            ),
            modern(
                "test_tool_with_task",
                "Asks the user's name at once, then works a second on the answer",
                self.tool_with_task,
                task_support="required",
            ),
            modern(
                "test_mcp_param_header",
                "Echoes a parameter that travels as an Mcp-Param-Region header",
                self.echo_arguments,
                {
                    "type": "object",
                    "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
                    "required": ["region"],
                },
            ),
        ]

    def offered_tools(self, ctx: Context) -> list[FixtureTool]:
        modern = is_modern(ctx)
        return [tool for tool in self.tools.values() if modern or not tool.modern_only]

    async def list_tools(self, ctx: Context, params: types.PaginatedRequestParams) -> Wire:
        return {"tools": [tool.listing() for tool in self.offered_tools(ctx)]}

    async def call_tool(self, ctx: Context, params: types.CallToolRequestParams) -> Wire:
        tool = self.tools.get(params.name)
        if tool is None or (tool.modern_only and not is_modern(ctx)):
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
        try:
            return await tool.run(ctx, params)
        except InputRequired as question:
            return question.result
        except ToolFailure as failure:
            return {"content": [text(str(failure))], "isError": True}

    async def simple_text(self, ctx: Context, params: types.CallToolRequestParams) -> Wire:
        return result(text(SIMPLE_TEXT))

    async def image_content(self, ctx: Context, params: types.CallToolRequestParams) -> Wire:
        return result(image())

    async def audio_content(self, ctx: Context, params: types.CallToolRequestParams) -> Wire:
        return result({"type": "audio", "data": WAV_BASE64, "mimeType": "audio/wav"})

    async def embedded(self, ctx: Context, params: types.CallToolRequestParams) -> Wire:
        return result(embedded(EMBEDDED_URI, "text/plain", EMBEDDED_TEXT))

    async def mixed(self, ctx: Context, params: types.CallToolRequestParams) -> Wire:
        return result(
            text("Multiple content types test:"),
            image(),
            embedded(MIXED_URI, "application/json", MIXED_JSON),
        )

    async def logging(self, ctx: Context, params: types.CallToolRequestParams) -> Wire:
        # The delays let a client see the messages arrive one by one during the call.
        for index, line in enumerate(LOG_LINES):
            if index:
                await anyio.sleep(0.05)
            if LOG_LEVELS.index("info") >= LOG_LEVELS.index(self.log_level):
                # On 2026-07-28 the SDK drops these unless the request's _meta asked for them.
                await ctx.session.send_log_message(
                    "info", line, logger="conformance", related_request_id=ctx.request_id
                )
        return result(text("Tool with logging executed successfully"))

    async def progress(self, ctx: Context, params: types.CallToolRequestParams) -> Wire:
        for index, done in enumerate((0, 50, 100)):
            if index:
                await anyio.sleep(0.05)
            # A no-op when the request carried no progress token.
            await ctx.session.report_progress(done, 100)
        return result(text("Tool with progress executed successfully"))

    async def error(self, ctx: Context, params: types.CallToolRequestParams) -> Wire:
        raise ToolFailure(ERROR_TEXT)

    async def reconnect(self, ctx: Context, params: types.CallToolRequestParams) -> Wire:
        # Only Streamable HTTP with an event store offers the close (SEP-1699): the
        # result is then stored and replayed to the client's GET with Last-Event-ID.
        if ctx.close_sse_stream is not None:
            await anyio.sleep(0.05)
            await ctx.close_sse_stream()
            await anyio.sleep(0.1)
        return result(text("Reconnection test completed successfully"))

    async def sampling(self, ctx: Context, params: types.CallToolRequestParams) -> Wire:
        prompt = str((params.arguments or {}).get("prompt", ""))
        answers = await ask(ctx, params, {"sampling": sampling(prompt, 100)})
        return result(text(f"LLM response: {sampled_text(answers['sampling'])}"))

    async def elicitation(self, ctx: Context, params: types.CallToolRequestParams) -> Wire:
        message = str((params.arguments or {}).get("message", "Please provide your information"))
        answers = await ask(ctx, params, {"elicitation": elicitation(message, CONTACT_FORM)})
        return result(text(f"User response: {describe_elicitation(answers['elicitation'])}"))

    async def elicitation_defaults(self, ctx: Context, params: types.CallToolRequestParams) -> Wire:
        question = elicitation(
            "Please review and update the form fields with defaults", DEFAULTS_FORM
        )
        answers = await ask(ctx, params, {"elicitation": question})
        return result(
            text(f"Elicitation completed: {describe_elicitation(answers['elicitation'])}")
        )

    async def elicitation_enums(self, ctx: Context, params: types.CallToolRequestParams) -> Wire:
        question = elicitation("Please choose from each kind of enum field", ENUMS_FORM)
        answers = await ask(ctx, params, {"elicitation": question})
        return result(
            text(f"Elicitation completed: {describe_elicitation(answers['elicitation'])}")
        )

    async def echo_arguments(self, ctx: Context, params: types.CallToolRequestParams) -> Wire:
        arguments = json.dumps(params.arguments or {}, sort_keys=True)
        return result(text(f"{params.name} called with {arguments}"))

    async def missing_capability(self, ctx: Context, params: types.CallToolRequestParams) -> Wire:
        answers = await ask(ctx, params, {"sampling": sampling("Say something", 20)})
        return result(text(f"Sampled: {sampled_text(answers['sampling'])}"))

    async def input_elicitation(self, ctx: Context, params: types.CallToolRequestParams) -> Wire:
        question = elicitation("What is your name?", string_form("name"))
        answers = await ask(ctx, params, {"user_name": question})
        name = accepted(answers["user_name"]).get("name", "stranger")
        return result(text(f"Hello, {name}!"))

    async def input_sampling(self, ctx: Context, params: types.CallToolRequestParams) -> Wire:
        question = sampling("What is the capital of France?", 100)
        answers = await ask(ctx, params, {"capital_question": question})
        return result(text(f"Sampling answer: {sampled_text(answers['capital_question'])}"))

    async def input_roots(self, ctx: Context, params: types.CallToolRequestParams) -> Wire:
        answers = await ask(ctx, params, {"client_roots": roots_listing()})
        return result(text(f"Client roots: {', '.join(root_uris(answers['client_roots']))}"))

    async def input_request_state(self, ctx: Context, params: types.CallToolRequestParams) -> Wire:
        expected = f"awaiting-confirmation:{params.name}"
        question = elicitation("Please confirm", CONFIRM_FORM)
        answers = await ask(ctx, params, {"confirm": question}, state=expected)
        # By now the SDK has verified the seal; what is left to check is that the
        # answer belongs to the question this tool asked.
        if is_modern(ctx) and params.request_state != expected:
            raise MCPError(code=types.INVALID_PARAMS, message="requestState missing or not ours")
        confirmed = accepted(answers["confirm"]).get("ok")
        return result(text(f"state-ok: confirmed={json.dumps(confirmed)}"))

    async def input_multiple(self, ctx: Context, params: types.CallToolRequestParams) -> Wire:
        questions = {
            "user_name": elicitation("What is your name?", string_form("name")),
            "greeting": sampling("Generate a greeting", 50),
            "client_roots": roots_listing(),
        }
        answers = await ask(ctx, params, questions, state="awaiting-all-three")
        name = accepted(answers["user_name"]).get("name", "stranger")
        greeting = sampled_text(answers["greeting"])
        roots = ", ".join(root_uris(answers["client_roots"]))
        return result(text(f"name={name}; greeting={greeting}; roots={roots}"))

    async def input_multi_round(self, ctx: Context, params: types.CallToolRequestParams) -> Wire:
        state = params.request_state or ""
        if state.startswith("step2:"):
            name = json.loads(state.removeprefix("step2:"))
        else:
            step1 = elicitation("Step 1: What is your name?", string_form("name"))
            first = await ask(ctx, params, {"step1": step1}, state="step1")
            name = accepted(first["step1"]).get("name", "stranger")
        step2 = elicitation("Step 2: What is your favorite color?", string_form("color"))
        second = await ask(ctx, params, {"step2": step2}, state="step2:" + json.dumps(name))
        color = accepted(second["step2"]).get("color", "no colour")
        return result(text(f"{name} likes {color}"))

    async def input_capabilities(self, ctx: Context, params: types.CallToolRequestParams) -> Wire:
        declared = ctx.session.client_capabilities
        possible = {
            "elicitation": elicitation("What is your name?", string_form("name")),
            "sampling": sampling("Say hello", 20),
            "roots": roots_listing(),
        }
        questions = {
            key: q for key, q in possible.items() if getattr(declared, key, None) is not None
        }
        if not questions:
            return result(text("The client declared no capability to ask through"))
        answers = await ask(ctx, params, questions)
        return result(text(f"Answered: {', '.join(sorted(answers))}"))

    # The tasks extension's tools.  mcpx, not this server, makes a call a task (once it
    # has run 250 ms, for a tool declaring task support), so what must happen on a task
    # waits longer than that; a question asked before then is answered inline.

    async def greet(self, ctx: Context, params: types.CallToolRequestParams) -> Wire:
        name = (params.arguments or {}).get("name", "stranger")
        return result(text(f"Hello, {name}!"))

    async def slow_compute(self, ctx: Context, params: types.CallToolRequestParams) -> Wire:
        arguments = params.arguments or {}
        seconds = arguments.get("seconds", 0)
        if type(seconds) not in (int, float) or not 0 <= seconds <= 600:
            raise MCPError(code=types.INVALID_PARAMS, message="seconds must be 0 to 600")
        await anyio.sleep(seconds)
        return result(text(f"computed {arguments.get('label', '')!s} after {seconds}s"))

    async def failing_job(self, ctx: Context, params: types.CallToolRequestParams) -> Wire:
        await anyio.sleep(1)
        raise ToolFailure("failing_job failed, as it always does")

    async def protocol_error_job(self, ctx: Context, params: types.CallToolRequestParams) -> Wire:
        await anyio.sleep(1)
        raise MCPError(code=types.INTERNAL_ERROR, message="protocol_error_job broke down")

    async def confirm_delete(self, ctx: Context, params: types.CallToolRequestParams) -> Wire:
        filename = (params.arguments or {}).get("filename", "")
        if not params.input_responses:
            await anyio.sleep(0.5)
        form: Wire = {"type": "object", "properties": {"confirm": {"type": "boolean"}}}
        question = elicitation(f"Delete {filename}?", form)
        answers = await ask(ctx, params, {"confirm": question})
        confirmed = accepted(answers["confirm"]).get("confirm", False)
        return result(text(f"{filename}: {'deleted' if confirmed else 'kept'}"))

    async def multi_input(self, ctx: Context, params: types.CallToolRequestParams) -> Wire:
        if not params.input_responses:
            await anyio.sleep(0.5)
        form: Wire = {
            "type": "object",
            "properties": {"name": {"type": "string"}, "confirm": {"type": "boolean"}},
        }
        questions = {
            "first": elicitation("First question", form),
            "second": elicitation("Second question", form),
        }
        answers = await ask(ctx, params, questions)
        names = [accepted(answers[key]).get("name", "?") for key in ("first", "second")]
        return result(text(f"answered: {', '.join(map(str, names))}"))

    async def tool_with_task(self, ctx: Context, params: types.CallToolRequestParams) -> Wire:
        question = elicitation("What is your name?", string_form("name"))
        answers = await ask(ctx, params, {"user_name": question})
        await anyio.sleep(1)
        return result(text(f"Hello, {accepted(answers['user_name']).get('name', 'stranger')}!"))

    async def announce_tools_changed(
        self, ctx: Context, params: types.CallToolRequestParams
    ) -> Wire:
        # The list stays the same: the notification only lets a client's listen stream
        # be tested, and a fixed list keeps every other test's expectations simple.
        if is_modern(ctx):
            await self.bus.publish(ToolsListChanged())
        else:
            await ctx.session.send_tool_list_changed()
        return result(text("Announced a tools list change"))

    async def announce_prompts_changed(
        self, ctx: Context, params: types.CallToolRequestParams
    ) -> Wire:
        if is_modern(ctx):
            await self.bus.publish(PromptsListChanged())
        else:
            await ctx.session.send_prompt_list_changed()
        return result(text("Announced a prompts list change"))

    # -- resources ---------------------------------------------------------------------

    def offered_resources(self, ctx: Context) -> list[Wire]:
        resources = [
            {
                "uri": STATIC_TEXT_URI,
                "name": "static-text",
                "description": "A static text resource",
                "mimeType": "text/plain",
            },
            {
                "uri": STATIC_BINARY_URI,
                "name": "static-binary",
                "description": "A static binary resource (a PNG image)",
                "mimeType": "image/png",
            },
            {
                "uri": WATCHED_URI,
                "name": "watched-resource",
                "description": "A resource clients can subscribe to",
                "mimeType": "text/plain",
            },
        ]
        if is_modern(ctx):
            resources.append(
                {
                    "uri": STATELESS_TEXT_URI,
                    "name": "stateless-static-text",
                    "description": "A static text resource offered on 2026-07-28",
                    "mimeType": "text/plain",
                }
            )
        return resources

    async def list_resources(self, ctx: Context, params: types.PaginatedRequestParams) -> Wire:
        return {"resources": self.offered_resources(ctx)}

    async def list_templates(self, ctx: Context, params: types.PaginatedRequestParams) -> Wire:
        template = {
            "uriTemplate": TEMPLATE,
            "name": "template-data",
            "description": "JSON data for any id",
            "mimeType": "application/json",
        }
        return {"resourceTemplates": [template]}

    async def read_resource(self, ctx: Context, params: types.ReadResourceRequestParams) -> Wire:
        uri = str(params.uri)
        fixed = {
            STATIC_TEXT_URI: ("text/plain", "text", STATIC_TEXT),
            STATIC_BINARY_URI: ("image/png", "blob", PNG_BASE64),
            WATCHED_URI: ("text/plain", "text", WATCHED_TEXT),
        }
        if is_modern(ctx):
            fixed[STATELESS_TEXT_URI] = ("text/plain", "text", STATELESS_TEXT)
        if uri in fixed:
            mime_type, field, body = fixed[uri]
            return {"contents": [{"uri": uri, "mimeType": mime_type, field: body}]}
        if uri.startswith(TEMPLATE_PREFIX) and uri.endswith(TEMPLATE_SUFFIX):
            item = uri[len(TEMPLATE_PREFIX) : -len(TEMPLATE_SUFFIX)]
            if item and "/" not in item:
                data = {"id": item, "templateTest": True, "data": f"Data for ID: {item}"}
                body = json.dumps(data, separators=(",", ":"))
                return {"contents": [{"uri": uri, "mimeType": "application/json", "text": body}]}
        # SEP-2164: an unknown URI is -32602 naming it, never an empty contents array.
        raise MCPError(code=types.INVALID_PARAMS, message="Resource not found", data={"uri": uri})

    async def subscribe(self, ctx: Context, params: types.SubscribeRequestParams) -> Wire:
        self.subscribed.add(str(params.uri))
        return {}

    async def unsubscribe(self, ctx: Context, params: types.UnsubscribeRequestParams) -> Wire:
        self.subscribed.discard(str(params.uri))
        return {}

    async def set_level(self, ctx: Context, params: types.SetLevelRequestParams) -> Wire:
        self.log_level = params.level
        return {}

    # -- prompts -----------------------------------------------------------------------

    def offered_prompts(self, ctx: Context) -> list[Wire]:
        def argument(name: str, description: str) -> Wire:
            return {"name": name, "description": description, "required": True}

        prompts: list[Wire] = [
            {"name": "test_simple_prompt", "description": "A simple prompt without arguments"},
            {
                "name": "test_prompt_with_arguments",
                "description": "A prompt with two required arguments",
                "arguments": [
                    argument("arg1", "First test argument"),
                    argument("arg2", "Second test argument"),
                ],
            },
            {
                "name": "test_prompt_with_embedded_resource",
                "description": "A prompt embedding a resource",
                "arguments": [argument("resourceUri", "URI of the resource to embed")],
            },
            {"name": "test_prompt_with_image", "description": "A prompt with image content"},
        ]
        if is_modern(ctx):
            prompts.append(
                {
                    "name": "test_input_required_result_prompt",
                    "description": "A prompt that first asks the user for context",
                }
            )
        return prompts

    async def list_prompts(self, ctx: Context, params: types.PaginatedRequestParams) -> Wire:
        return {"prompts": self.offered_prompts(ctx)}

    async def get_prompt(self, ctx: Context, params: types.GetPromptRequestParams) -> Wire:
        arguments = params.arguments or {}
        offered = {prompt["name"]: prompt for prompt in self.offered_prompts(ctx)}
        prompt = offered.get(params.name)
        if prompt is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown prompt: {params.name}")
        absent = [a["name"] for a in prompt.get("arguments", ()) if a["name"] not in arguments]
        if absent:
            message = f"Missing required arguments: {', '.join(absent)}"
            raise MCPError(code=types.INVALID_PARAMS, message=message)

        def user(content: Wire) -> Wire:
            return {"role": "user", "content": content}

        if params.name == "test_simple_prompt":
            messages = [user(text("This is a simple prompt for testing."))]
        elif params.name == "test_prompt_with_arguments":
            said = f"arg1='{arguments['arg1']}', arg2='{arguments['arg2']}'"
            messages = [user(text(f"Prompt with arguments: {said}"))]
        elif params.name == "test_prompt_with_embedded_resource":
            resource = embedded(
                arguments["resourceUri"], "text/plain", "Embedded resource content for testing."
            )
            messages = [user(resource), user(text("Please process the embedded resource above."))]
        elif params.name == "test_prompt_with_image":
            messages = [user(image()), user(text("Please analyze the image above."))]
        else:
            question = elicitation("What context should the prompt use?", string_form("context"))
            try:
                answers = await ask(ctx, params, {"user_context": question})
            except InputRequired as asked:
                return asked.result
            context = accepted(answers["user_context"]).get("context", "no context")
            messages = [user(text(f"Answer with this context in mind: {context}"))]
        return {"description": prompt["description"], "messages": messages}

    # -- completion --------------------------------------------------------------------

    async def complete(self, ctx: Context, params: types.CompleteRequestParams) -> Wire:
        ref = params.ref
        values: list[str] = []
        if isinstance(ref, types.PromptReference) and ref.name == "test_prompt_with_arguments":
            values = [w for w in COMPLETION_WORDS if w.startswith(params.argument.value)]
        return {"completion": {"values": values, "total": len(values), "hasMore": False}}


class FixtureServer(Server[Any]):
    """
    The SDK's low-level server, declaring list-change notifications on the handshake
    revisions as well: the SDK derives them from C{subscriptions/listen} on 2026-07-28
    but would leave them off for C{initialize}.
    """

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        every_change = NotificationOptions(
            prompts_changed=True, resources_changed=True, tools_changed=True
        )
        return super().create_initialization_options(
            notification_options or every_change, experimental_capabilities, extensions
        )


Handler = Callable[[Context, Any], Awaitable[Wire]]


def stamped(handler: Handler) -> Handler:
    """
    C{handler}, its 2026-07-28 results marked C{resultType: complete} unless they say
    otherwise: the SDK's typed results default to that, but these are wire mappings.
    """

    async def run(ctx: Context, params: Any) -> Wire:
        answer = await handler(ctx, params)
        if is_modern(ctx) and "resultType" not in answer:
            return {"resultType": "complete", **answer}
        return answer

    return run


def build_server() -> FixtureServer:
    """The fixture's server definition, independent of transport."""
    fixture = Fixture()
    server = FixtureServer(
        SERVER_NAME,
        version=SERVER_VERSION,
        cache_hints=CACHE_HINTS,
        on_subscriptions_listen=ListenHandler(fixture.bus),
    )
    handlers: list[tuple[str, type[BaseModel], Handler]] = [
        ("tools/list", types.PaginatedRequestParams, fixture.list_tools),
        ("tools/call", types.CallToolRequestParams, fixture.call_tool),
        ("resources/list", types.PaginatedRequestParams, fixture.list_resources),
        ("resources/templates/list", types.PaginatedRequestParams, fixture.list_templates),
        ("resources/read", types.ReadResourceRequestParams, fixture.read_resource),
        ("resources/subscribe", types.SubscribeRequestParams, fixture.subscribe),
        ("resources/unsubscribe", types.UnsubscribeRequestParams, fixture.unsubscribe),
        ("logging/setLevel", types.SetLevelRequestParams, fixture.set_level),
        ("prompts/list", types.PaginatedRequestParams, fixture.list_prompts),
        ("prompts/get", types.GetPromptRequestParams, fixture.get_prompt),
        ("completion/complete", types.CompleteRequestParams, fixture.complete),
    ]
    for method, params_type, handler in handlers:
        server.add_request_handler(method, params_type, stamped(handler))
    # Seals every requestState this server hands out and verifies every one echoed back.
    security = RequestStateSecurity.ephemeral()
    server.middleware.append(RequestStateBoundary(security, default_audience=SERVER_NAME))
    return server


class MemoryEventStore(EventStore):
    """
    The last few thousand SSE events, so a client whose stream was closed mid-call can
    resume it with C{Last-Event-ID} (SEP-1699).
    """

    def __init__(self, capacity: int = 4096) -> None:
        self._events: deque[tuple[str, str, types.JSONRPCMessage | None]] = deque(maxlen=capacity)
        self._next = 0

    async def store_event(self, stream_id: str, message: types.JSONRPCMessage | None) -> str:
        self._next += 1
        event_id = str(self._next)
        self._events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(
        self, last_event_id: str, send_callback: EventCallback
    ) -> str | None:
        events = list(self._events)
        for index, (event_id, stream_id, _message) in enumerate(events):
            if event_id == last_event_id:
                for later_id, later_stream, message in events[index + 1 :]:
                    if later_stream == stream_id and message is not None:
                        await send_callback(EventMessage(message, later_id))
                return stream_id
        return None


def loopback_security() -> TransportSecuritySettings:
    """DNS-rebinding protection: only loopback C{Host} and C{Origin} values are served."""
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
    )


async def run_stdio(server: FixtureServer) -> None:
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


async def run_http(server: FixtureServer, port: int) -> None:
    import uvicorn

    app = server.streamable_http_app(
        streamable_http_path="/mcp",
        transport_security=loopback_security(),
        event_store=MemoryEventStore(),
        retry_interval=500,
    )
    # Bind before announcing, so whoever waits for the line can connect at once.  The
    # protocol is named: asyncio turns Nagle off only on sockets whose proto is TCP, and
    # with it on, an event written right after the headers waits ~40 ms for an ACK.
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(128)
    bound = listener.getsockname()[1]
    print(f"fixture listening on http://127.0.0.1:{bound}/mcp", file=sys.stderr, flush=True)
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, timeout_graceful_shutdown=1, lifespan="on"
    )
    await uvicorn.Server(config).serve(sockets=[listener])


def parse_arguments(argv: Sequence[str]) -> argparse.Namespace:
    summary = (__doc__ or "").split("\n\n")[0].strip()
    parser = argparse.ArgumentParser(prog="fixture_server", description=summary)
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    parser.add_argument(
        "--port", type=int, default=0, help="TCP port on 127.0.0.1 for http (0: any free one)"
    )
    options = parser.parse_args(argv)
    if not 0 <= options.port < 65536:
        parser.error("--port must be between 0 and 65535")
    return options


def main(argv: Sequence[str] | None = None) -> None:
    options = parse_arguments(sys.argv[1:] if argv is None else argv)
    # Logging, roots and sampling are deprecated at 2026-07-28; the suite still tests
    # them, and the warnings would only clutter the output.
    warnings.simplefilter("ignore")
    server = build_server()
    if options.transport == "stdio":
        anyio.run(run_stdio, server)
    else:
        anyio.run(run_http, server, options.port)


if __name__ == "__main__":
    main()
