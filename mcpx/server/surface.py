# -*- test-case-name: tests.server.test_surface,tests.server.test_logging -*-
"""
What a host sees of mcpx as a gateway: its own tools, and every upstream's prompts and
resources under names that say which server they belong to.

Tools
=====

C{mcpx_call} calls any tool of any configured server and answers with that server's
C{CallToolResult} as it sent it (every content block, C{isError}, C{structuredContent},
C{_meta}), resource URIs rewritten to C{mcpx://} ones.  The other tools are generated
from the operation table (L{mcpx.ops.table.OPS}, the ops marked C{gateway}), so the
CLI, C{/v1} and MCP take the same input: each answers with the operation's JSON body as
C{structuredContent} (under the op's output schema) and as text.  The C{call_tool} op
is the one exception: C{mcpx_call} stands for it, because its MCP answer is the
upstream's result itself rather than the C{/v1} body.

A failure of the work a tool does (an unknown server, a server that is down, a timeout,
an upstream JSON-RPC error, arguments of the wrong shape) is an C{isError} result the
model can read and act on; a tool name mcpx does not have is the caller's protocol
error (C{-32602}).

Prompts and resources
=====================

Prompt C{p} of server C{s} is C{s_p}; a name is routed to the longest configured server
name it starts with, followed by C{_}.  Resources and templates use the C{mcpx://}
names of L{mcpx.ops.uris}.

Every list is built in the newest shape from the pool's cached catalogues; a server
that cannot be listed is left out with a warning (in the log and as a C{warning} event)
rather than failing the list.  Lists are paginated with opaque cursors.  In
pass-through mode (L{mcpx.server.passthrough}) the servers passed through are left out
of these lists, which follow their own.

Log messages
============

While C{mcpx_call}, C{prompts/get} or C{resources/read} waits on an upstream server, that
server's C{notifications/message} (the pool's C{server.log} events) are passed on to the
caller, by a L{LogRelay}, when the caller asked for them: a legacy client with
C{logging/setLevel} on its connection, a 2026-07-28 request with
C{_meta["io.modelcontextprotocol/logLevel"]}.  No level, no messages; only messages at or
above the level; only while the call runs.  A log message names no request, so each
caller with a call in flight on that server gets it, though one connection gets it once.
"""

from __future__ import annotations

import base64
import binascii
import contextvars
import json
import math
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any, Final, TypeVar
from weakref import WeakKeyDictionary

from attrs import frozen
from twisted.internet.defer import CancelledError, Deferred, gatherResults
from twisted.logger import Logger

from mcpx.ops import uris
from mcpx.ops.errors import OpError, error_from
from mcpx.ops.events import Event
from mcpx.ops.host import Invocation, OpHost, PoolInterface, Reply
from mcpx.ops.op import Op
from mcpx.ops.table import OPS
from mcpx.pool.errors import PoolError
from mcpx.questions.caller import Caller
from mcpx.scripts.artifacts import UnknownArtifact, parse_uri
from mcpx.server.conn import Conn, Context
from mcpx.spec.matrix import error_code_in
from mcpx.wire.errors import RESOURCE_NOT_FOUND, RpcError

log = Logger()

#: Items per page of every list.
PAGE_SIZE: Final = 50

#: The most values one completion may carry (every revision's limit).
MAX_COMPLETION_VALUES: Final = 100

CALL_TOOL: Final = "mcpx_call"
EXEC_TOOL: Final = "mcpx_exec"

#: What a model is told about C{mcpx_exec}: enough to write a working program.
EXEC_DESCRIPTION: Final = (
    "Run a short Python program that calls the configured servers' tools and returns only "
    "what matters, instead of calling them one by one. Each server is a name and each "
    "tool an async function with keyword arguments: `r = await demo.add(a=2, b=40)`. "
    "Results are plain values (structured content, else text); a failed call raises "
    "RuntimeError with the server's message. Run calls in parallel with "
    "`await asyncio.gather(...)` (import asyncio). SERVERS lists the servers; "
    '`print(await stubs("demo"))` shows one server\'s tools as Python signatures. The '
    "last expression is the result, print() is the output; files written under /out "
    "become resources. No other files, network or processes."
)

#: The MCP tool name of each gateway op; an op not named here is C{mcpx_<op name>}.
TOOL_NAMES: Final[Mapping[str, str]] = {
    "call_tool": CALL_TOOL,
    "exec": EXEC_TOOL,
    "list_servers": "mcpx_servers",
    "list_tools": "mcpx_tools",
    "describe_tool": "mcpx_describe",
    "get_task": "mcpx_task",
    "get_prompt": "mcpx_prompt",
    "read_resource": "mcpx_read",
    "complete": "mcpx_complete",
    "restart_server": "mcpx_restart",
    "reload": "mcpx_reload",
    "get_settings": "mcpx_settings",
    "get_protocol": "mcpx_protocol",
}

#: Ops whose work only reads (besides every GET).
_READ_ONLY_POSTS: Final = frozenset(("get_prompt", "read_resource", "complete"))

#: The C{_meta} keys passed upstream with a call unchanged (trace context).
_TRACE_KEYS: Final = ("traceparent", "tracestate", "baggage")

#: What the C{call_tool} op takes that C{mcpx_call} does not: MCP has its own ways
#: (C{_meta.progressToken}, and tasks where the revision has them), and an MCP call is
#: named by mcpx itself (C{call_id}).
_NOT_IN_MCPX_CALL: Final = frozenset(("task", "progress", "call_id"))

_DESCRIPTIONS: Final[Mapping[str, str]] = {
    "server": "The configured server to call (mcpx_servers lists them).",
    "tool": "The tool's name on that server (mcpx_tools lists them, mcpx_describe shows "
    "one's input schema).",
    "arguments": "The tool's arguments, as its input schema describes them.",
    "timeout": "Seconds to wait at most; clamped to pool.callTimeout.",
}

ProgressSink = Callable[[dict[str, Any]], None]

_T = TypeVar("_T")

#: The RFC 5424 severities every revision's C{LoggingLevel} names, least severe first.
LOG_SEVERITY: Final[Mapping[str, int]] = {
    level: rank
    for rank, level in enumerate(
        ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
    )
}

#: The pool's event for an upstream's C{notifications/message}.
SERVER_LOG: Final = "server.log"


_LOG_LEVEL_KEY: Final = "io.modelcontextprotocol/logLevel"


class LogRelay:
    """
    Passes the upstream log messages one call hears on to its caller, as
    C{notifications/message}, at or above the caller's level.

    The params are the same in every revision (C{level}, C{logger} when a string,
    C{data}); a message whose level no revision names is dropped, since no schema would
    take it.  They are pushed from within the context the call was started in, so a
    transport that routes a push by the request it is made during (a legacy Streamable
    HTTP session: the call's own POST stream) routes these the same way.

    @ivar conn: the caller's connection.
    @ivar level: the caller's level when it is the request's own (2026-07-28), or
        C{None} to read the connection's (legacy C{logging/setLevel}) as each message
        arrives.
    """

    def __init__(self, conn: Conn, level: str | None, told: WeakKeyDictionary[Conn, int]) -> None:
        self.conn = conn
        self.level = level
        self._told = told
        self._context = contextvars.copy_context()

    def __call__(self, event: Event) -> None:
        conn = self.conn
        push = conn.push
        if push is None or conn.closed:
            return
        data = event.data
        level = data.get("level")
        rank = LOG_SEVERITY.get(level) if isinstance(level, str) else None
        wanted = self.level if self.level is not None else conn.log_level
        if rank is None or wanted is None or rank < LOG_SEVERITY[wanted]:
            return
        if self._told.get(conn) == event.id:
            # Another call on this connection passed this very message on already.
            return
        self._told[conn] = event.id
        params: dict[str, Any] = {"level": level}
        logger = data.get("logger")
        if isinstance(logger, str):
            params["logger"] = logger
        params["data"] = data.get("data")
        # A copy each time: a context cannot be entered twice at once.
        self._context.copy().run(push, "notifications/message", params)


def asking_for_logs(meta: dict[str, Any] | None, on_log: LogRelay | None) -> dict[str, Any] | None:
    """
    C{meta} with the level C{on_log}'s caller wants log messages at, so that the
    upstream sends them (a 2026-07-28 server logs only to a request that asked); as it
    is when the caller wants none.
    """
    if on_log is None:
        return meta
    level = on_log.level if on_log.level is not None else on_log.conn.log_level
    if level is None:
        return meta
    return {**meta, _LOG_LEVEL_KEY: level} if meta else {_LOG_LEVEL_KEY: level}


@frozen
class GatewayTool:
    """
    One of mcpx's own tools.

    @ivar definition: the C{Tool}, in the newest shape.
    @ivar op: the operation it runs, or C{None} for C{mcpx_call}.
    """

    name: str
    definition: Mapping[str, Any]
    op: Op | None


def _mcpx_call_schema(op: Op) -> dict[str, Any]:
    properties = {
        name: {**schema, "description": _DESCRIPTIONS[name]} if name in _DESCRIPTIONS else schema
        for name, schema in op.properties.items()
        if name not in _NOT_IN_MCPX_CALL
    }
    return {
        "type": "object",
        "properties": properties,
        "required": [name for name in op.required if name in properties],
        "additionalProperties": False,
    }


def _op_tool(op: Op) -> GatewayTool:
    name = TOOL_NAMES.get(op.name, f"mcpx_{op.name}")
    description = op.summary + "." + (f" {op.description}" if op.description else "")
    definition: dict[str, Any] = {"name": name, "title": op.summary, "description": description}
    if op.name == "call_tool":
        definition["description"] = (
            "Call a tool of one of the configured MCP servers and get its result exactly as "
            "the server gave it. Progress is relayed when the call asks for it."
        )
        definition["title"] = "Call a tool of a configured server"
        definition["inputSchema"] = _mcpx_call_schema(op)
        definition["annotations"] = {"openWorldHint": True}
        # A call may be made as a 2025-11-25 task (mcpx.server.tasks); the field is
        # dropped for every revision without Tool.execution.
        definition["execution"] = {"taskSupport": "optional"}
        return GatewayTool(name, definition, None)
    if op.name == "exec":
        definition["description"] = EXEC_DESCRIPTION
        definition["title"] = "Run a program that calls tools"
        definition["inputSchema"] = dict(op.input_schema)
        definition["annotations"] = {"openWorldHint": True}
        # A long program may run as a 2025-11-25 task, as mcpx_call may.
        definition["execution"] = {"taskSupport": "optional"}
        return GatewayTool(name, definition, op)
    definition["inputSchema"] = dict(op.input_schema)
    definition["outputSchema"] = dict(op.output_schema)
    if op.method == "GET" or op.name in _READ_ONLY_POSTS:
        definition["annotations"] = {"readOnlyHint": True}
    else:
        definition["annotations"] = {"readOnlyHint": False, "destructiveHint": False}
    return GatewayTool(name, definition, op)


def gateway_tools(ops: Sequence[Op] = OPS) -> tuple[GatewayTool, ...]:
    """mcpx's own tools: C{mcpx_call} first, then one per other gateway op, in table order."""
    tools = [_op_tool(op) for op in ops if op.gateway]
    tools.sort(key=lambda tool: tool.name != CALL_TOOL)
    return tuple(tools)


# -- Results carried from upstream -----------------------------------------------------------


def _rewrite_block(server: str, block: Any) -> Any:
    """A content block with its resource URI in C{mcpx://} form (a copy when it changes)."""
    if type(block) is not dict:
        return block
    kind = block.get("type")
    if kind == "resource_link":
        uri = block.get("uri")
        if isinstance(uri, str):
            return {**block, "uri": uris.to_mcpx(server, uri)}
    elif kind == "resource":
        resource = block.get("resource")
        if type(resource) is dict and isinstance(resource.get("uri"), str):
            rewritten = {**resource, "uri": uris.to_mcpx(server, resource["uri"])}
            return {**block, "resource": rewritten}
    return block


def _needs_rewrite(block: Any) -> bool:
    return type(block) is dict and block.get("type") in ("resource_link", "resource")


def rewrite_call_result(server: str, result: Mapping[str, Any]) -> dict[str, Any]:
    """
    An upstream C{CallToolResult} as a host may read it: the same, except for the
    resource URIs in its content, which become C{mcpx://} URIs.  The upstream's dict is
    returned as is when nothing needs rewriting.
    """
    content = result.get("content")
    if type(content) is not list or not any(_needs_rewrite(block) for block in content):
        return result if type(result) is dict else dict(result)
    return {**result, "content": [_rewrite_block(server, block) for block in content]}


def rewrite_prompt_result(server: str, result: Mapping[str, Any]) -> dict[str, Any]:
    """An upstream C{GetPromptResult}, with the resource URIs of its messages rewritten."""
    messages = result.get("messages")
    if type(messages) is not list:
        return dict(result)
    rewritten = []
    changed = False
    for message in messages:
        if type(message) is dict and _needs_rewrite(message.get("content")):
            block = _rewrite_block(server, message["content"])
            rewritten.append({**message, "content": block})
            changed = True
        else:
            rewritten.append(message)
    if not changed:
        return result if type(result) is dict else dict(result)
    return {**result, "messages": rewritten}


def rewrite_read_result(server: str, result: Mapping[str, Any]) -> dict[str, Any]:
    """An upstream C{ReadResourceResult}, each content's URI rewritten."""
    contents = result.get("contents")
    if type(contents) is not list:
        return dict(result)
    return {
        **result,
        "contents": [
            {**item, "uri": uris.to_mcpx(server, item["uri"])}
            if type(item) is dict and isinstance(item.get("uri"), str)
            else item
            for item in contents
        ],
    }


def text_result(text: str, *, is_error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


def json_result(body: Any) -> dict[str, Any]:
    """A tool result carrying C{body} as structured content and as its JSON text."""
    text = json.dumps(body, ensure_ascii=False, indent=2, sort_keys=False)
    return {
        "content": [{"type": "text", "text": text}],
        "structuredContent": body,
        "isError": False,
    }


def exec_result(body: Mapping[str, Any]) -> dict[str, Any]:
    """
    A finished run as a C{CallToolResult}: its output and result as text, the result as
    C{structuredContent} when it is an object, and a C{resource_link} to each file it
    left (spelled down for revisions without them by L{mcpx.spec.downgrade}).
    """
    text = str(body.get("output", ""))
    structured = None
    if "result" in body:
        value = body["result"]
        rendered = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        text = f"{text}{rendered}" if not text or text.endswith("\n") else f"{text}\n{rendered}"
        if type(value) is dict:
            structured = value
    elif "text" in body:
        text = f"{text}{body['text']}"
    content: list[dict[str, Any]] = [{"type": "text", "text": text or "(no output)"}]
    for artifact in body.get("artifacts", ()):
        link = {"type": "resource_link", "uri": artifact["uri"], "name": artifact["name"]}
        for key in ("mimeType", "size", "description"):
            if key in artifact:
                link[key] = artifact[key]
        content.append(link)
    result: dict[str, Any] = {"content": content, "isError": False}
    if structured is not None:
        result["structuredContent"] = structured
    return result


# -- Pagination ------------------------------------------------------------------------------


def encode_cursor(kind: str, offset: int) -> str:
    raw = json.dumps([kind, offset], separators=(",", ":")).encode("ascii")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(kind: str, cursor: object) -> int:
    """
    The offset a cursor of L{encode_cursor} stands for.  No cursor (or an empty one)
    is the first page.

    @raise RpcError: -32602 for anything mcpx did not hand out for this list.
    """
    if cursor is None or cursor == "":
        return 0
    if not isinstance(cursor, str):
        raise RpcError.invalid_params("Invalid cursor: a cursor is a string")
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        decoded = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
    except (ValueError, binascii.Error, UnicodeError):
        raise RpcError.invalid_params(f"Invalid cursor: {cursor!r}") from None
    if (
        type(decoded) is not list
        or len(decoded) != 2
        or decoded[0] != kind
        or type(decoded[1]) is not int
        or decoded[1] < 0
    ):
        raise RpcError.invalid_params(f"Invalid cursor: {cursor!r}")
    return int(decoded[1])


def paginate(
    kind: str, items: Sequence[Any], cursor: object, page_size: int = PAGE_SIZE
) -> tuple[list[Any], str | None]:
    """
    One page of C{items} and the cursor of the next, if any.

    @raise RpcError: -32602 for an invalid cursor, or one past the end of the list.
    """
    offset = decode_cursor(kind, cursor)
    if offset > len(items) or (offset and offset == len(items)):
        raise RpcError.invalid_params(f"Invalid cursor: {cursor!r} is past the end of the list")
    end = offset + page_size
    following = encode_cursor(kind, end) if end < len(items) else None
    return list(items[offset:end]), following


# -- The surface -----------------------------------------------------------------------------


class UnknownName(Exception):
    """A prompt name or resource URI that no configured server owns."""


class Surface:
    """
    The gateway surface over the daemon's pool: lists, calls, reads and completions
    for one request's L{Context}.
    """

    def __init__(self, host: OpHost, *, tools: Sequence[GatewayTool] | None = None) -> None:
        self.host = host
        self.tools: tuple[GatewayTool, ...] = tuple(tools) if tools is not None else gateway_tools()
        self._tools = {tool.name: tool for tool in self.tools}
        #: The tool list in the newest shape, built once: it never changes.
        self.tool_definitions: tuple[Mapping[str, Any], ...] = tuple(
            tool.definition for tool in self.tools
        )
        #: The id of the last log event pushed to each connection, so that two calls
        #: in flight on one connection do not both pass the same message on.
        self._log_told: WeakKeyDictionary[Conn, int] = WeakKeyDictionary()

    @property
    def pool(self) -> PoolInterface:
        pool = self.host.pool
        if pool is None:
            raise RpcError.internal_error(
                "this daemon is running without its server pool, so it cannot reach servers"
            )
        return pool

    def server_names(self) -> list[str]:
        """The configured servers, in the configuration's order."""
        pool = self.host.pool
        if pool is None:
            return []
        return [status.name for status in pool.status()]

    # Tools

    def has_tool(self, name: str) -> bool:
        return name in self._tools

    # Log messages

    def log_relay(self, conn: Conn, context: Context) -> LogRelay | None:
        """
        What passes upstream log messages on to the caller of one request, or C{None}
        when they would go nowhere: the connection cannot push, or no level was set
        (by C{logging/setLevel} for a legacy request, in the request's C{_meta} for a
        2026-07-28 one).
        """
        if not conn.can_push:
            return None
        if context.modern:
            if context.log_level is None:
                return None
            return LogRelay(conn, context.log_level, self._log_told)
        if conn.log_level is None:
            return None
        return LogRelay(conn, None, self._log_told)

    async def relaying(self, server: str, on_log: LogRelay, work: Awaitable[_T]) -> _T:
        """
        C{work}, with C{server}'s log messages passed to C{on_log} until it ends
        (however it ends: answered, failed or cancelled).
        """
        subscription = self.host.events.subscribe(on_log, servers=(server,), kinds=(SERVER_LOG,))
        try:
            return await work
        finally:
            subscription.cancel()

    async def call_tool(
        self,
        context: Context,
        params: Mapping[str, Any],
        *,
        on_progress: ProgressSink | None = None,
        on_log: LogRelay | None = None,
    ) -> dict[str, Any]:
        """
        Run one of mcpx's tools.

        @param on_progress: where the upstream's progress goes (C{mcpx_call}).
        @param on_log: where the called server's log messages go (C{mcpx_call}).
        @raise RpcError: -32602 for a tool mcpx does not have.
        """
        name = params.get("name")
        if not isinstance(name, str):
            raise RpcError.invalid_params("params.name must be a string")
        tool = self._tools.get(name)
        if tool is None:
            raise RpcError.invalid_params(
                f"no tool named {name!r}; the tools are {', '.join(self._tools)}"
            )
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        if type(arguments) is not dict:
            raise RpcError.invalid_params("params.arguments must be an object")
        if tool.op is None:
            meta = params.get("_meta")
            return await self._mcpx_call(context, arguments, meta, on_progress, on_log)
        return await self._run_op(context, tool.op, arguments)

    async def _mcpx_call(
        self,
        context: Context,
        arguments: Mapping[str, Any],
        meta: object,
        on_progress: ProgressSink | None,
        on_log: LogRelay | None = None,
    ) -> dict[str, Any]:
        problem = _mcpx_call_problem(arguments)
        if problem is not None:
            return text_result(f"{problem}; mcpx_call takes server, tool, arguments", is_error=True)
        server: str = arguments["server"]
        tool: str = arguments["tool"]
        upstream_meta = None
        if type(meta) is dict:
            trace = {key: meta[key] for key in _TRACE_KEYS if key in meta}
            upstream_meta = trace or None
        # A 2026-07-28 upstream logs only to a request that asks; ask at the caller's level.
        upstream_meta = asking_for_logs(upstream_meta, on_log)
        try:
            calling = self.pool.call_tool(
                server,
                tool,
                arguments.get("arguments") or {},
                client=context.identity,
                timeout=arguments.get("timeout"),
                meta=upstream_meta,
                on_progress=on_progress,
                caller=context.caller,
            )
            result = await (calling if on_log is None else self.relaying(server, on_log, calling))
        except CancelledError:
            raise
        except RpcError as e:
            return text_result(
                f"server {server!r} answered the call of {tool!r} with JSON-RPC error "
                f"{e.code}: {e.message}",
                is_error=True,
            )
        except PoolError as e:
            return text_result(error_from(e).message, is_error=True)
        if type(result) is not dict:
            raise RpcError.internal_error(f"server {server!r} answered with a malformed result")
        return rewrite_call_result(server, result)

    async def _run_op(
        self, context: Context, op: Op, arguments: Mapping[str, Any]
    ) -> dict[str, Any]:
        try:
            op.check(arguments)
            caller = context.caller if isinstance(context.caller, Caller) else None
            invocation = Invocation(arguments, client=context.identity, caller=caller)
            body = await op.handler(self.host, invocation)
        except CancelledError:
            raise
        except Exception as e:
            error = error_from(e)
            if error.status == 500 and not isinstance(e, OpError):
                log.failure("gateway tool {tool} failed unexpectedly", tool=op.name)
            return text_result(error.message, is_error=True)
        if isinstance(body, Reply):
            body = body.body
        if op.name == "exec":
            return exec_result(body)
        return json_result(body)

    # Across servers

    async def each_server(
        self,
        what: str,
        fetch: Callable[[str], Deferred[list[dict[str, Any]]]],
        *,
        names: Sequence[str] | None = None,
        leaving_out: Collection[str] = (),
    ) -> list[tuple[str, list[dict[str, Any]]]]:
        """
        C{fetch} for every server at once; a server that fails is left out, with a warning.

        @param names: the servers to ask, in order (every configured one unless given).
        @param leaving_out: servers not to ask (those offered under their own names).
        """
        if names is None:
            names = self.server_names()
        if leaving_out:
            names = [name for name in names if name not in leaving_out]

        def failed(failure: Any, name: str) -> list[dict[str, Any]]:
            if failure.check(CancelledError):
                return failure  # type: ignore[no-any-return]
            message = f"the {what} of server {name!r} were left out: {failure.getErrorMessage()}"
            log.warn("{message}", message=message)
            self.host.events.publish("warning", name, message=message)
            return []

        listings = [fetch(name).addErrback(failed, name) for name in names]
        found = await gatherResults(listings, consumeErrors=True)
        return list(zip(names, found, strict=True))

    async def prompts(
        self, context: Context, *, leaving_out: Collection[str] = ()
    ) -> list[dict[str, Any]]:
        """Every server's prompts, as C{<server>_<prompt>}."""
        pool = self.pool
        listed = await self.each_server(
            "prompts",
            lambda name: Deferred.fromCoroutine(pool.prompts(name, client=context.identity)),
            leaving_out=leaving_out,
        )
        return [
            {**prompt, "name": f"{server}_{prompt['name']}"}
            for server, prompts in listed
            for prompt in prompts
            if type(prompt) is dict and isinstance(prompt.get("name"), str)
        ]

    async def resources(
        self, context: Context, *, leaving_out: Collection[str] = ()
    ) -> list[dict[str, Any]]:
        """Every server's resources, under their C{mcpx://} URIs."""
        pool = self.pool
        listed = await self.each_server(
            "resources",
            lambda name: Deferred.fromCoroutine(pool.resources(name, client=context.identity)),
            leaving_out=leaving_out,
        )
        return [
            *self.artifacts(context),
            *(
                {**resource, "uri": uris.to_mcpx(server, resource["uri"])}
                for server, resources in listed
                for resource in resources
                if type(resource) is dict and isinstance(resource.get("uri"), str)
            ),
        ]

    def artifacts(self, context: Context) -> list[dict[str, Any]]:
        """The files the caller's own runs left, first: nobody else's are listed."""
        scripts = self.host.scripts
        if scripts is None or scripts.artifacts is None:
            return []
        return scripts.artifacts.listed(context.identity)

    async def templates(
        self, context: Context, *, leaving_out: Collection[str] = ()
    ) -> list[dict[str, Any]]:
        """Every server's resource templates, in C{mcpx://} form."""
        pool = self.pool
        listed = await self.each_server(
            "resource templates",
            lambda name: Deferred.fromCoroutine(pool.templates(name, client=context.identity)),
            leaving_out=leaving_out,
        )
        return [
            {**template, "uriTemplate": uris.template_to_mcpx(server, template["uriTemplate"])}
            for server, templates in listed
            for template in templates
            if type(template) is dict and isinstance(template.get("uriTemplate"), str)
        ]

    # Routing

    def prompt_owner(self, name: str) -> tuple[str, str]:
        """
        The server and upstream name of prompt C{name} (C{<server>_<prompt>}): the
        longest configured server name it starts with, followed by C{_}.

        @raise UnknownName: when no server name fits.
        """
        fitting = [
            server
            for server in self.server_names()
            if name.startswith(server + "_") and len(name) > len(server) + 1
        ]
        if not fitting:
            raise UnknownName(name)
        server = max(fitting, key=len)
        return server, name[len(server) + 1 :]

    async def resource_owner(self, context: Context, uri: str) -> tuple[str, str]:
        """
        The server and upstream URI of C{mcpx://} URI C{uri} (a listed one, or one filled
        in from a template).

        @raise UnknownName: when it names no configured server, or no template of it.
        """
        try:
            parsed = uris.parse(uri)
        except uris.NotAnMcpxUri:
            raise UnknownName(uri) from None
        server = self._server_named(parsed.server)
        if not parsed.from_template:
            upstream = parsed.upstream()
        else:
            templates = await self.pool.templates(server, client=context.identity)
            upstream = parsed.upstream(_template_strings(templates))
        if upstream is None:
            raise UnknownName(uri)
        return server, upstream

    async def template_owner(self, context: Context, uri: str) -> tuple[str, str]:
        """
        The server and upstream URI (or URI template) of a completion's C{ref/resource}.

        @raise UnknownName: as L{resource_owner}.
        """
        try:
            parsed = uris.parse(uri)
        except uris.NotAnMcpxUri:
            raise UnknownName(uri) from None
        server = self._server_named(parsed.server)
        if not parsed.from_template:
            return server, unquoted(parsed)
        templates = _template_strings(await self.pool.templates(server, client=context.identity))
        found = parsed.template(templates) or parsed.upstream(templates)
        if found is None:
            raise UnknownName(uri)
        return server, found

    def _server_named(self, name: str) -> str:
        names = self.server_names()
        if name in names:
            return name
        # URI libraries may lower-case what looks like a host name.
        folded = [known for known in names if known.lower() == name.lower()]
        if len(folded) == 1:
            return folded[0]
        raise UnknownName(name)

    async def get_prompt(
        self, context: Context, params: Mapping[str, Any], *, on_log: LogRelay | None = None
    ) -> dict[str, Any]:
        """
        C{prompts/get} routed to the owning server, its result carried as it sent it.

        @param on_log: where that server's log messages go while it answers.
        """
        name = params.get("name")
        if not isinstance(name, str):
            raise RpcError.invalid_params("params.name must be a string")
        try:
            server, inner = self.prompt_owner(name)
        except UnknownName:
            raise RpcError.invalid_params(f"no prompt named {name!r}") from None
        forwarded: dict[str, Any] = {"name": inner}
        if params.get("arguments") is not None:
            forwarded["arguments"] = params["arguments"]
        result = await self._forward(context, server, "prompts/get", forwarded, on_log)
        return rewrite_prompt_result(server, result)

    async def read_resource(
        self, context: Context, params: Mapping[str, Any], *, on_log: LogRelay | None = None
    ) -> dict[str, Any]:
        """
        C{resources/read} routed to the owning server, content URIs rewritten.

        @param on_log: where that server's log messages go while it answers.
        """
        uri = params.get("uri")
        if not isinstance(uri, str):
            raise RpcError.invalid_params("params.uri must be a string")
        if parse_uri(uri) is not None:
            return self.read_artifact(context, uri)
        try:
            server, upstream = await self.resource_owner(context, uri)
        except UnknownName:
            raise resource_not_found(uri, context) from None
        result = await self._forward(context, server, "resources/read", {"uri": upstream}, on_log)
        return rewrite_read_result(server, result)

    def read_artifact(self, context: Context, uri: str) -> dict[str, Any]:
        """One of the caller's artifacts; another caller's is not found, as a stranger's."""
        scripts = self.host.scripts
        store = scripts.artifacts if scripts is not None else None
        settings = self.host.settings
        limit = settings.integer("transport.maxMessageSize") if settings else 64 * 1024 * 1024
        try:
            if store is None:
                raise UnknownArtifact(uri)
            return {"contents": [store.read(context.identity, uri, limit)]}
        except UnknownArtifact:
            raise resource_not_found(uri, context) from None
        except ValueError as e:
            raise RpcError.internal_error(str(e)) from None

    async def complete(self, context: Context, params: Mapping[str, Any]) -> dict[str, Any]:
        """
        C{completion/complete} routed to the server that owns the prompt or template.
        A server that did not declare completions is not asked: the answer is empty.
        """
        ref = params.get("ref")
        argument = params.get("argument")
        if type(ref) is not dict or type(argument) is not dict:
            raise RpcError.invalid_params("params.ref and params.argument must be objects")
        kind = ref.get("type")
        try:
            if kind == "ref/prompt" and isinstance(ref.get("name"), str):
                server, inner = self.prompt_owner(ref["name"])
                upstream_ref = {**ref, "name": inner}
            elif kind == "ref/resource" and isinstance(ref.get("uri"), str):
                server, inner = await self.template_owner(context, ref["uri"])
                upstream_ref = {**ref, "uri": inner}
            else:
                raise RpcError.invalid_params(
                    "params.ref must be a ref/prompt with a name or a ref/resource with a uri"
                )
        except UnknownName as e:
            raise RpcError.invalid_params(f"nothing named {e.args[0]!r} to complete") from None
        session = await self._guard(self.pool.session(server, context.identity))
        declaration = session.declaration
        if declaration is not None and not declaration.declares("completions"):
            return {"completion": {"values": [], "hasMore": False}}
        forwarded = {key: value for key, value in params.items() if key != "_meta"}
        forwarded["ref"] = upstream_ref
        result = await self._forward(context, server, "completion/complete", forwarded)
        return capped_completion(result)

    async def _forward(
        self,
        context: Context,
        server: str,
        method: str,
        params: Mapping[str, Any],
        on_log: LogRelay | None = None,
    ) -> dict[str, Any]:
        work = self._guard(
            self.pool.request(
                server, method, params, client=context.identity, caller=context.caller
            )
        )
        result = await (work if on_log is None else self.relaying(server, on_log, work))
        if type(result) is not dict:
            raise RpcError.internal_error(f"server {server!r} answered {method} malformed")
        return result

    async def _guard(self, work: Any) -> Any:
        """Pool failures as JSON-RPC errors the host can read; upstream errors as they are."""
        try:
            return await work
        except PoolError as e:
            raise RpcError.internal_error(error_from(e).message) from None


def capped_completion(result: Mapping[str, Any]) -> dict[str, Any]:
    """
    An upstream C{CompleteResult} as a client may receive it: at most
    L{MAX_COMPLETION_VALUES} values (C{hasMore} set when some were cut), and an empty
    completion for an answer without a list of values.
    """
    completion = result.get("completion")
    if type(completion) is not dict or type(completion.get("values")) is not list:
        return {"completion": {"values": [], "hasMore": False}}
    values = completion["values"]
    if len(values) > MAX_COMPLETION_VALUES:
        completion = {**completion, "values": values[:MAX_COMPLETION_VALUES], "hasMore": True}
    return {**result, "completion": completion}


def unquoted(parsed: uris.McpxUri) -> str:
    upstream = parsed.upstream()
    assert upstream is not None
    return upstream


def _template_strings(templates: Sequence[Mapping[str, Any]]) -> list[str]:
    return [t["uriTemplate"] for t in templates if isinstance(t.get("uriTemplate"), str)]


def resource_not_found(uri: str, context: Context) -> RpcError:
    """The error for a resource nobody offers, with the code C{context}'s revision uses."""
    if error_code_in(RESOURCE_NOT_FOUND, context.revision):
        return RpcError.resource_not_found(uri)
    # 2026-07-28 retired -32002: an unknown resource is bad params there.
    return RpcError.invalid_params(f"Resource not found: {uri}", {"uri": uri})


def _mcpx_call_problem(arguments: Mapping[str, Any]) -> str | None:
    """What is wrong with C{mcpx_call}'s arguments, or C{None}: checked by hand, it is hot."""
    extra = sorted(set(arguments) - {"server", "tool", "arguments", "timeout"})
    if extra:
        return f"unexpected argument {extra[0]!r}"
    for name in ("server", "tool"):
        value = arguments.get(name)
        if not isinstance(value, str) or not value:
            return f"{name} must be a non-empty string"
    inner = arguments.get("arguments")
    if inner is not None and type(inner) is not dict:
        return "arguments must be an object"
    timeout = arguments.get("timeout")
    if timeout is not None and (
        type(timeout) not in (int, float) or not math.isfinite(timeout) or timeout <= 0
    ):
        return "timeout must be a positive number of seconds"
    return None
