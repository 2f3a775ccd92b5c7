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
server's log messages are passed on to a caller that asked for them
(L{mcpx.server.log_relay}).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from functools import partial
from typing import Any, Final, TypeVar

from twisted.internet.defer import CancelledError, Deferred, gatherResults
from twisted.logger import Logger
from twisted.python.failure import Failure

from mcpx.ops import uris
from mcpx.ops.calls import call_upstream
from mcpx.ops.errors import OpError, error_from
from mcpx.ops.host import Invocation, OpHost, Reply
from mcpx.ops.listing import server_wait, within
from mcpx.ops.op import Op
from mcpx.pool.errors import PoolError
from mcpx.pool.interface import PoolInterface
from mcpx.pool.progress import ProgressSink
from mcpx.scripts.artifacts import UnknownArtifact, parse_uri
from mcpx.server.conn import Conn, Context
from mcpx.server.forwarding import forward, pool_failure
from mcpx.server.gateway_tools import CALL_TOOL, GatewayTool, gateway_tools
from mcpx.server.log_relay import (
    SERVER_LOG,
    LogRelay,
    RelayedLogs,
    asking_for_logs,
    relaying,
)
from mcpx.server.results import (
    capped_completion,
    exec_result,
    json_result,
    resource_not_found,
    rewrite_call_result,
    rewrite_prompt_result,
    rewrite_read_result,
    text_result,
    with_tool_ui,
)
from mcpx.spec.apps import APP_MIME_TYPE, UI_SCHEME, app_may_call, app_only, offers_apps
from mcpx.wire.errors import RpcError

log = Logger()

_T = TypeVar("_T")

#: The C{_meta} keys passed upstream with a call unchanged (trace context).
_TRACE_KEYS: Final = ("traceparent", "tracestate", "baggage")


#: The most MIME types mcpx declares to hosts for MCP Apps, the app's own first: the
#: types the servers' C{ui://} resources are listed with, in the order met.
MAX_APP_MIME_TYPES: Final = 16
#: The longest of those types declared; a longer one is left out.
MAX_APP_MIME_TYPE_CHARS: Final = 255


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
        #: in flight on one connection do not both pass the same message on, and the
        #: messages held for each stream that is backed up.
        self._logs = RelayedLogs()

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

    def warn(self, server: str | None, message: str) -> None:
        """Log C{message} and tell the event bus, as a warning about C{server}'s."""
        log.warn("{message}", message=message)
        self.host.events.publish(SERVER_LOG, server, level="warning", data=message)

    # Tools

    def has_tool(self, name: str) -> bool:
        return name in self._tools

    def apps_offered(self) -> dict[str, Any] | None:
        """
        mcpx's declaration of MCP Apps (L{UI_EXTENSION}) to its hosts: the MIME types
        of every configured server's app resources, when some server offers an app (a
        tool naming a C{ui://} resource, which is how the official servers offer one,
        declaring nothing); else C{None}.  Read from the catalogues the pool has now,
        without waiting: a server counts once it has listed its tools.  At most
        L{MAX_APP_MIME_TYPES} types, none longer than L{MAX_APP_MIME_TYPE_CHARS}.
        """
        pool = self.host.pool
        if pool is None:
            return None
        types: dict[str, None] = {APP_MIME_TYPE: None}
        offered = False
        for status in pool.status():
            tools = pool.cached_catalogue(status.name, "tools")
            if tools is None or not offers_apps(tools):
                continue
            offered = True
            for resource in pool.cached_catalogue(status.name, "resources") or ():
                if len(types) >= MAX_APP_MIME_TYPES:
                    # What one server lists is declared to every host: bounded.
                    break
                uri = resource.get("uri") if type(resource) is dict else None
                mime = resource.get("mimeType") if isinstance(uri, str) else None
                if (
                    isinstance(uri, str)
                    and uri.startswith(UI_SCHEME)
                    and isinstance(mime, str)
                    and len(mime) <= MAX_APP_MIME_TYPE_CHARS
                ):
                    types[mime] = None
        if not offered:
            return None
        return {"mimeTypes": list(types)}

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
            return LogRelay(conn, context.log_level, self._logs, context.reply)
        if conn.log_level is None:
            return None
        return LogRelay(conn, None, self._logs, context.reply)

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
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        if type(arguments) is not dict:
            raise RpcError.invalid_params("params.arguments must be an object")
        if tool is None:
            # Not one of mcpx's: an app's own call of a tool of its server (MCP Apps).
            server = await self._app_tool_owner(context, name)
            called = {"server": server, "tool": name, "arguments": arguments}
            meta = params.get("_meta")
            return await self._mcpx_call(context, called, meta, on_progress, on_log, app=True)
        if tool.op is None:
            meta = params.get("_meta")
            return await self._mcpx_call(context, arguments, meta, on_progress, on_log)
        return await self._run_op(context, tool.op, arguments)

    async def _app_tool_owner(self, context: Context, name: str) -> str:
        """
        The one server offering an app (L{offers_apps}) that lists a tool C{name} an app
        may call: where an app's C{tools/call} through the gateway goes, since the app
        knows its tools by their own names.

        @raise RpcError: -32602 when no such server lists it, or several do (then the
            host calls it with C{mcpx_call}, naming the server).
        """
        unlisted: set[str] = set()
        listed = await self._every(context, "tools", "tools", (), unlisted=unlisted)
        owners = [
            server
            for server, tools in listed
            if offers_apps(tools)
            and any(
                type(tool) is dict and tool.get("name") == name and app_may_call(tool)
                for tool in tools
            )
        ]
        if len(owners) > 1:
            raise RpcError.invalid_params(
                f"tool {name!r} is an app tool of several servers ({', '.join(owners)}); "
                "call it with mcpx_call, naming the server"
            )
        if owners and unlisted:
            # A server that could not be listed may be the app's own: the one seen
            # listing the name may be another, hoping for the app's arguments.
            raise RpcError.invalid_params(
                f"tool {name!r}: server(s) {', '.join(sorted(unlisted))} could not be "
                "listed, so whose app tool it is is not known; call it with mcpx_call, "
                "naming the server"
            )
        if owners:
            return owners[0]
        raise RpcError.invalid_params(
            f"no tool named {name!r}; the tools are {', '.join(self._tools)}"
        )

    async def _definition(
        self, context: Context, server: str, name: str
    ) -> Mapping[str, Any] | None:
        """
        Tool C{name} of C{server} as its policy lets it be listed: from the cached
        catalogue at once, else listed (as the policy's own checks would list it);
        C{None} when it is not listed or the listing fails (the call then fails its own way).
        """
        pool = self.pool
        listed = pool.cached_catalogue(server, "tools", client=context.identity)
        if listed is None:
            try:
                listed = await pool.tools(server, client=context.identity)
            except CancelledError:
                raise
            except Exception:
                return None
        for tool in listed:
            if type(tool) is dict and tool.get("name") == name:
                return tool
        return None

    async def _mcpx_call(
        self,
        context: Context,
        arguments: Mapping[str, Any],
        meta: object,
        on_progress: ProgressSink | None,
        on_log: LogRelay | None = None,
        *,
        app: bool = False,
    ) -> dict[str, Any]:
        """
        C{mcpx_call}: the call of the C{call_tool} op, for this request's caller.  Its
        result carries what a host renders the tool's app from (L{with_tool_ui}); a tool
        only an app may call is refused to the model, and called when C{app} (an app's
        own C{tools/call}, L{_app_tool_owner}), through the same policy.
        """
        problem = _mcpx_call_problem(arguments)
        if problem is not None:
            return text_result(f"{problem}; mcpx_call takes server, tool, arguments", is_error=True)
        server: str = arguments["server"]
        tool: str = arguments["tool"]
        definition = await self._definition(context, server, tool)
        if definition is not None and not app and app_only(definition):
            return text_result(
                f"tool {tool!r} of server {server!r} is its app's alone "
                '(_meta.ui.visibility is ["app"]): only the app calls it, with tools/call',
                is_error=True,
            )
        upstream_meta = None
        if type(meta) is dict:
            trace = {key: meta[key] for key in _TRACE_KEYS if key in meta}
            upstream_meta = trace or None
        invocation = Invocation(
            {
                "server": server,
                "tool": tool,
                "arguments": arguments.get("arguments") or {},
                "timeout": arguments.get("timeout"),
                "progress": on_progress is not None,
            },
            client=context.identity,
            on_progress=on_progress,
            call=context.call,
            # A 2026-07-28 upstream logs only to a request that asks; ask at the caller's level.
            meta=asking_for_logs(upstream_meta, on_log),
        )
        calling = call_upstream(self.host, invocation, context.call)
        try:
            result = await (
                calling if on_log is None else relaying(self.host.events, server, on_log, calling)
            )
        except CancelledError:
            raise
        except Exception as e:
            return self._failed(CALL_TOOL, e, called=(server, tool))
        if not isinstance(result, dict):
            raise RpcError.internal_error(f"server {server!r} answered with a malformed result")
        rewritten = rewrite_call_result(server, result)
        if definition is None or app:
            return rewritten
        return with_tool_ui(server, definition, rewritten)

    async def _run_op(
        self, context: Context, op: Op, arguments: Mapping[str, Any]
    ) -> dict[str, Any]:
        try:
            if op.name == "exec" and "task" in arguments:
                raise OpError(
                    400,
                    "invalid_input",
                    'mcpx_exec takes no "task" argument; to run a program as a task, make '
                    "the tools/call itself a task (2025-11-25)",
                )
            op.check(arguments)
            invocation = Invocation(
                arguments,
                client=context.identity,
                call=context.call,
                owner=context.artifact_owner,
                holder=context.holder,
            )
            body = await op.run(self.host, invocation)
        except CancelledError:
            raise
        except Exception as e:
            return self._failed(op.name, e)
        if isinstance(body, Reply):
            body = body.body
        if op.name == "exec":
            return exec_result(body)
        return json_result(body)

    def _failed(
        self, tool: str, error: Exception, *, called: tuple[str, str] | None = None
    ) -> dict[str, Any]:
        """
        How a gateway tool's failure is answered: as a tool error saying what went wrong
        (L{error_from}), the same for every one of mcpx's tools.

        @param called: for C{mcpx_call}, the (server, tool) called: what that server
            answered with a JSON-RPC error is told as its own answer.
        """
        upstream = error.__cause__ if isinstance(error, OpError) else error
        if called is not None and isinstance(upstream, RpcError):
            server, name = called
            return text_result(
                f"server {server!r} answered the call of {name!r} with JSON-RPC error "
                f"{upstream.code}: {upstream.message}",
                is_error=True,
            )
        answer = error_from(error)
        if answer.status == 500 and not isinstance(error, OpError):
            log.failure("gateway tool {tool} failed unexpectedly", tool=tool)
        return text_result(answer.message, is_error=True)

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

    async def _every(
        self,
        context: Context,
        what: str,
        kind: str,
        leaving_out: Collection[str],
        *,
        unlisted: set[str] | None = None,
    ) -> list[tuple[str, list[dict[str, Any]]]]:
        """
        Every server's C{kind} catalogue but those C{leaving_out} (L{each_server}); a server
        that has not answered within C{pool.listWait} stands on its cached catalogue, or is
        left out with a warning (L{within}).

        @param unlisted: given, gets the name of each server left out.
        """
        fetch = getattr(self.pool, kind)

        def noted(failure: Failure, name: str) -> Failure:
            if unlisted is not None and not failure.check(CancelledError):
                unlisted.add(name)
            return failure

        def listing(name: str) -> Deferred[list[dict[str, Any]]]:
            return within(
                self.host.clock,
                server_wait(self.host.settings, self.pool, name),
                name,
                Deferred.fromCoroutine(fetch(name, client=context.identity)),
                partial(self.pool.cached_catalogue, name, kind, client=context.identity),
            ).addErrback(noted, name)

        return await self.each_server(what, listing, leaving_out=leaving_out)

    async def prompts(
        self, context: Context, *, leaving_out: Collection[str] = ()
    ) -> list[dict[str, Any]]:
        """Every server's prompts, as C{<server>_<prompt>}."""
        listed = await self._every(context, "prompts", "prompts", leaving_out)
        return _renamed(listed, "name", _prompt_name)

    async def resources(
        self, context: Context, *, leaving_out: Collection[str] = ()
    ) -> list[dict[str, Any]]:
        """Every server's resources, under their C{mcpx://} URIs."""
        listed = await self._every(context, "resources", "resources", leaving_out)
        return [*self.artifacts(context), *_renamed(listed, "uri", uris.to_mcpx)]

    def artifacts(self, context: Context) -> list[dict[str, Any]]:
        """The files the caller's own runs left, first: nobody else's are listed."""
        scripts = self.host.scripts
        if scripts is None or scripts.artifacts is None:
            return []
        return scripts.artifacts.listed(context.artifact_owner)

    async def templates(
        self, context: Context, *, leaving_out: Collection[str] = ()
    ) -> list[dict[str, Any]]:
        """Every server's resource templates, in C{mcpx://} form."""
        listed = await self._every(context, "resource templates", "templates", leaving_out)
        return _renamed(listed, "uriTemplate", uris.template_to_mcpx)

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
        parsed, server = self._parsed(uri)
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
        parsed, server = self._parsed(uri)
        if not parsed.from_template:
            return server, unquoted(parsed)
        templates = _template_strings(await self.pool.templates(server, client=context.identity))
        found = parsed.template(templates) or parsed.upstream(templates)
        if found is None:
            raise UnknownName(uri)
        return server, found

    def _parsed(self, uri: str) -> tuple[uris.McpxUri, str]:
        """C{mcpx://} URI C{uri}, parsed, and the configured server it names."""
        try:
            parsed = uris.parse(uri)
        except uris.NotAnMcpxUri:
            raise UnknownName(uri) from None
        return parsed, self._server_named(parsed.server)

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
        result = await self.forward(context, server, "prompts/get", forwarded, on_log)
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
        result = await self.forward(context, server, "resources/read", {"uri": upstream}, on_log)
        return rewrite_read_result(server, result)

    def read_artifact(self, context: Context, uri: str) -> dict[str, Any]:
        """One of the caller's artifacts; another caller's is not found, as a stranger's."""
        scripts = self.host.scripts
        store = scripts.artifacts if scripts is not None else None
        limit = self.host.settings.integer("transport.maxMessageSize")
        try:
            if store is None:
                raise UnknownArtifact(uri)
            return {"contents": [store.read(context.artifact_owner, uri, limit)]}
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
        session = await self.guard(self.pool.session(server, context.identity))
        declaration = session.declaration
        if declaration is not None and not declaration.declares("completions"):
            return {"completion": {"values": [], "hasMore": False}}
        forwarded = {key: value for key, value in params.items() if key != "_meta"}
        forwarded["ref"] = upstream_ref
        result = await self.forward(context, server, "completion/complete", forwarded)
        return capped_completion(result)

    def forward(
        self,
        context: Context,
        server: str,
        method: str,
        params: Mapping[str, Any],
        on_log: LogRelay | None = None,
        *,
        client: str | None = None,
    ) -> Awaitable[dict[str, Any]]:
        """
        C{method} to C{server} for the request of C{context} (L{mcpx.server.forwarding}).

        @param client: the pool's client identity, when not the request's own (a
            pass-through host's, L{mcpx.server.catalogues.upstream_client}).
        """
        return forward(
            self.pool,
            self.host.events,
            context,
            server=server,
            method=method,
            params=params,
            on_log=on_log,
            client=client,
        )

    async def guard(self, work: Awaitable[_T]) -> _T:
        """Pool failures as JSON-RPC errors the host can read; upstream errors as they are."""
        try:
            return await work
        except PoolError as e:
            raise pool_failure(e) from None


def _prompt_name(server: str, name: str) -> str:
    return f"{server}_{name}"


def _renamed(
    listed: list[tuple[str, list[dict[str, Any]]]],
    key: str,
    rename: Callable[[str, str], str],
) -> list[dict[str, Any]]:
    """Each server's items with a string C{key}, that C{key} renamed for the gateway."""
    return [
        {**item, key: rename(server, item[key])}
        for server, items in listed
        for item in items
        if type(item) is dict and isinstance(item.get(key), str)
    ]


def unquoted(parsed: uris.McpxUri) -> str:
    upstream = parsed.upstream()
    assert upstream is not None
    return upstream


def _template_strings(templates: Sequence[Mapping[str, Any]]) -> list[str]:
    return [t["uriTemplate"] for t in templates if isinstance(t.get("uriTemplate"), str)]


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
