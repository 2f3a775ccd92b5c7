# -*- test-case-name: tests.server.test_passthrough -*-
"""
Pass-through: configured servers offered as themselves (C{mcp.passthrough}).

The servers named by C{mcp.passthrough} (C{--passthrough a,b} on C{mcpx daemon},
C{MCPX_MCP_PASSTHROUGH}) are not reached through the gateway's tools and C{mcpx://}
names: their tools, prompts, resources and templates are offered under their own names,
ahead of the gateway's, and what a host asks of them is forwarded through the pool as
the host asked it, with the caller's identity.  Their answers are returned as they
sent them; L{mcpx.server.dispatch.McpServer} spells them down for the host's revision
like any other result.

Tools
=====

C{tools/list} carries every pass-through server's tools in the order the servers were
named, each definition as the server gave it (C{title}, C{annotations}, C{icons},
C{outputSchema}, C{execution} included), then the gateway's tools.  The gateway's
names are reserved (L{mcpx.server.passthrough_names}): a server's tool offered under a
name starting with C{mcpx_} is left out of the list, reported once (a warning, a
C{warning} event and C{shadowed} in C{GET /v1/servers}, with C{reserved}), and a call of
that name goes to the gateway whatever the servers list; so do a prompt under the name
the gateway gives another server's and a resource or template under an C{mcpx://} URI.

C{tools/call} goes to the server that lists the name, and to no other: a call meant for
one server is never sent to another.  A name no pass-through server lists goes to the
server that listed it last while that server is still passed through (its catalogue
cannot be listed now: it is down or backing off, and the pool's error names it); it is
refused with C{-32602} naming the server when that server has since been removed from
the configuration, and with C{-32602} naming the tool when no server ever listed it
(unless it is a gateway tool) -- except with a single pass-through server, which gets
such a name all the same (never one starting with C{mcpx_}): it may answer to tools it
does not list, and no other server could be meant.  The result is carried verbatim (no
URI is rewritten: the host reads the upstream's resources under their own URIs).  A
JSON-RPC error the server answers is raised as that error (code, message, data), so the
host gets an error response (and, on 2026-07-28 Streamable HTTP, the status that code
maps to), not an C{isError} result.  A failure of the pool (the server cannot be
started, died, timed out) is C{-32603} naming it, C{-32010} where the server's answer
failed (L{mcpx.server.forwarding.pool_failure}).

A request waits on no server it does not involve (issue 43, item 9): a call, a prompt
or a resource goes to the server whose catalogue known now lists it without waiting for
the others; lists, C{initialize}'s instructions and a name no known catalogue has wait
for a server at most C{pool.listWait}, and not at all for one that is failing or was
given up on before and is still starting; such a server stands on what it listed last,
or is left out of the list with a warning, while its start goes on in the background
(L{mcpx.server.catalogues}).

Which servers are passed through is decided at each request against the configuration
in force: a server named but not configured is left out until a reload adds it, and
one a reload removes leaves the lists at once.

Several servers, one surface
============================

A tool or prompt name two pass-through servers both list is kept for the first of
them in the order named, and routed to it alone; the other server's item of that name
is left out of the list (the rest of both lists is intact).  Each clash is reported
once: a warning in the log and a C{warning} event naming both servers and suggesting
a C{toolPrefix} for one of them (L{mcpx.ops.clashes.Clash.message}).  A
per-server C{toolPrefix} offers that server's tools as C{<prefix><name>} and a call of
C{<prefix><name>} reaches the server's C{<name>}.

A resource URI goes to the first server, in the order named, that lists it as a
resource or has a template it falls under (RFC 6570 expressions, where a simple
C{{var}} matches one non-empty path segment); failing that, to the first server that
declares resources and offers others of the same URI scheme, or to the only server that
declares resources at all.  Otherwise it is refused with the revision's
resource-not-found error naming the URI: a server that offers no resources is never
asked to read one.  A URI two servers list is listed once, for the server that would be read.
C{mcpx://} URIs still reach every configured server through the gateway surface, and
the gateway's prompts, resources and templates of the servers not passed through follow
the pass-through servers' own in every list.  A pass-through server's prompt is routed
only by the name it lists: the gateway's C{<server>_<prompt>} name of it is an unknown
prompt, as it would be directly.

Declarations
============

C{tools.listChanged} is declared to a legacy client on a connection mcpx can push to,
and a pass-through server's C{notifications/tools/list_changed} is relayed to every
such client (L{mcpx.server.dispatch.McpServer.upstream_notification}).  A 2026-07-28
client is declared C{tools.listChanged}, C{prompts.listChanged},
C{resources.listChanged} and C{resources.subscribe}, and hears of them on a
C{subscriptions/listen} stream that asked (L{mcpx.server.listen}).

A pass-through tool whose C{inputSchema} marks arguments with C{x-mcp-header} wants
them mirrored in C{Mcp-Param-*} headers on 2026-07-28 Streamable HTTP;
L{mcpx.server.passthrough_routes.Routes.param_headers} says which, derived once per
catalogue, and L{mcpx.server.param_headers} checks them.

What mcpx declares to the upstream for a pass-through host is no more than that host
declared of the questions mcpx relays (elicitation and its modes, sampling, roots): its
requests reach the pool under an identity marked with them
(L{mcpx.server.catalogues.upstream_client}), so an instance of its own for that set is
started whose handlers declare only it (L{mcpx.upstream.handlers.declaring}), and a
server that offers some tools only to a client that can be asked (server-everything)
lists the host the same tools as directly; a 2026-07-28 request also carries the
narrowed set in its own C{clientCapabilities} (L{mcpx.call.Call.declared}).
A host that declares them all shares the instance the gateway uses.

Log messages
============

A caller that asked for log messages (C{logging/setLevel} on a legacy connection, the
request's C{_meta} on 2026-07-28) gets the server's messages about its request, and the
forwarded request carries the caller's level as C{_meta["io.modelcontextprotocol/logLevel"]}:
a 2026-07-28 server sends no log message for a request that did not ask for them.

Cost
====

A pass-through C{tools/call} is the hot path: its route
(L{mcpx.server.passthrough_routes.Routes.tool_route}) is found with dictionary lookups
over the pool's cached catalogues, taken without waiting while the pool has them
cached: each server's tools by name, as offered, with the C{Mcp-Param-*} headers each
asks for (L{mcpx.server.passthrough_routes.OfferedTool}), are derived again only when
the pool listed anew, and the owner, the tool's C{execution.taskSupport} and its headers
are all read from them; no merged list is built for a call.  Which servers are passed
through is worked out once per configuration.  Nothing is copied or validated on the
way.

Three modules share the work: which servers are passed through and under what names
(L{mcpx.server.passthrough_names}), where each request goes
(L{mcpx.server.passthrough_routes}), and here the merged lists and the forwarding.
"""

from __future__ import annotations

import operator
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, Final

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from mcpx.ops import uris
from mcpx.ops.clashes import Clash
from mcpx.ops.errors import OpError, error_from
from mcpx.policy.errors import InvalidArguments, InvalidOutput
from mcpx.pool.errors import PoolError, UpstreamBroke
from mcpx.pool.interface import PoolInterface
from mcpx.pool.progress import ProgressSink
from mcpx.server.catalogues import Catalogues, upstream_client
from mcpx.server.conn import Context
from mcpx.server.derived import objects_with
from mcpx.server.forwarding import (
    failure_of,
    forwarded,
    guarded,
    pool_failure,
    upstream_meta,
    well_formed,
)
from mcpx.server.log_relay import LogRelay, asking_for_logs
from mcpx.server.passthrough_names import PassedThrough
from mcpx.server.passthrough_routes import Routes
from mcpx.server.results import capped_completion, text_result
from mcpx.server.surface import Surface
from mcpx.upstream.records import ServerDeclaration, UpstreamError
from mcpx.wire.errors import RpcError

log = Logger()


class PassThrough:
    """
    The surface of the pass-through servers, merged ahead of the gateway's.

    @ivar gateway: the gateway surface, for everything else.
    @ivar passed: the servers passed through, and their names (L{mcpx.server.passthrough_names}).
    @ivar routes: where their requests go (L{mcpx.server.passthrough_routes}).
    """

    def __init__(self, gateway: Surface, servers: Sequence[str]) -> None:
        self.gateway = gateway
        self.passed = PassedThrough(gateway, servers)
        self._catalogues = Catalogues(gateway)
        self.routes = Routes(self.passed, self._catalogues)
        #: The last tools/list each client (owner and subject) was answered from: the
        #: pages that follow a first one are cut from it (L{tools}).
        self._listings: dict[tuple[str, str | None], list[Mapping[str, Any]]] = {}
        #: The last merge of each kind: the configuration and catalogues it was made of,
        #: the list, the names.
        self._merges: dict[str, tuple[object, _Offered, list[dict[str, Any]], set[str]]] = {}

    @property
    def pool(self) -> PoolInterface:
        return self.gateway.pool

    @property
    def servers(self) -> tuple[str, ...]:
        """The servers passed through now (L{PassedThrough.servers})."""
        return self.passed.servers

    @property
    def active(self) -> bool:
        """Whether any server named is configured now (else the gateway serves alone)."""
        return self.passed.active

    # Lists

    async def _merged(self, context: Context, kind: str) -> tuple[list[dict[str, Any]], set[str]]:
        """
        The pass-through servers' tools or prompts in one list, and their names: a
        name two servers offer is kept for the first (L{PassedThrough.clashed}).

        Merged again only when a catalogue was listed anew or the servers changed: each
        page of a paginated C{tools/list} asks for the whole list, and merging it for
        every page made listing N tools cost N squared.
        """
        offered: _Offered = tuple(
            (server, self.passed.offered_tools(server, listed) if kind == "tools" else listed)
            for server, listed in await self._catalogues.each(context, kind, kind, self.servers)
        )
        configured = self.gateway.host.servers
        held = self._merges.get(kind)
        if held is not None and held[0] is configured and _same_catalogues(held[1], offered):
            # The same catalogues give the same merge, clashes and owners as last time
            # (and the same names reserved, under the same configuration).
            return list(held[2]), held[3]
        reserved = self.passed.reserved_tool if kind == "tools" else self.passed.reserved_prompt
        owners: dict[str, str] = {}
        merged: list[dict[str, Any]] = []
        clashes: list[Clash] = []
        for server, items in offered:
            for item in objects_with(items, "name"):
                name = item["name"]
                if reserved(name):
                    # The gateway's name: left out, and its requests go to the gateway.
                    clashes.append(self.passed.reserved(kind[:-1], name, server))
                    continue
                other = owners.get(name)
                if other is None:
                    owners[name] = server
                    merged.append(item)
                elif other != server:
                    clashes.append(Clash(kind[:-1], name, other, server))
                    self.passed.clashed(kind[:-1], name, other, server)
        # What hosts are offered now, for GET /v1/servers to show.
        self.gateway.host.clashes.record(self.passed.named, kind, clashes)
        if kind == "tools":
            self._catalogues.listed_tools(owners)
        names = set(owners)
        self._merges[kind] = (configured, offered, merged, names)
        return list(merged), names

    async def tools(self, context: Context, *, following: bool = False) -> list[Mapping[str, Any]]:
        """
        The pass-through servers' tools (none under a gateway's name), then the gateway's.

        @param following: the list is for a page after the first (a C{tools/list} with a
            cursor): it is cut from the list the client's first page was, as long as no
            server said its tools changed (L{catalogues_changed}) since; asking every
            server again for each page made a list of N tools cost N squared.
        """
        # Whose listing it is: a 2026-07-28 request's identity is its own scope, so its
        # connection's (or named session's) owner is what the pages share.
        whose = (context.artifact_owner, context.subject)
        if following:
            held = self._listings.get(whose)
            if held is not None:
                return held
        merged, _ = await self._merged(context, "tools")
        listed: list[Mapping[str, Any]] = list(merged)
        # No name of the gateway's is among them (L{PassedThrough.reserved_tool}).
        listed.extend(self.gateway.tool_definitions)
        if len(self._listings) >= _REMEMBERED_LISTINGS:
            self._listings.clear()
        self._listings[whose] = listed
        return listed

    def catalogues_changed(self) -> None:
        """A server's tools changed, or the configuration did: the next page asks again."""
        self._listings.clear()

    async def prompts(self, context: Context) -> list[dict[str, Any]]:
        """
        The pass-through servers' prompts under their own names, then the other
        servers' as the gateway names them.
        """
        merged, names = await self._merged(context, "prompts")
        others = await self.gateway.prompts(context, leaving_out=self.servers)
        merged.extend(prompt for prompt in others if prompt["name"] not in names)
        return merged

    async def _unique(
        self, context: Context, what: str, kind: str, key: str
    ) -> list[dict[str, Any]]:
        """
        The pass-through servers' resources or templates, each URI once; those under an
        C{mcpx://} URI are the gateway's (a read of one goes to the gateway) and are left
        out, reported as a reserved name is (L{PassedThrough.reserved}).
        """
        seen: set[str] = set()
        merged: list[dict[str, Any]] = []
        reserved: list[Clash] = []
        for server, items in await self._catalogues.each(context, what, kind, self.servers):
            for item in objects_with(items, key):
                uri = item[key]
                if self.passed.reserved_uri(uri):
                    reserved.append(self.passed.reserved(kind.removesuffix("s"), uri, server))
                # Read from the first server that lists it: listed for that one only.
                elif uri not in seen:
                    seen.add(uri)
                    merged.append(item)
        self.gateway.host.clashes.record(self.passed.named, kind, reserved)
        return merged

    async def resources(self, context: Context) -> list[dict[str, Any]]:
        """The pass-through servers' resources under their own URIs, then the others'."""
        merged = await self._unique(context, "resources", "resources", "uri")
        merged.extend(await self.gateway.resources(context, leaving_out=self.servers))
        return merged

    async def templates(self, context: Context) -> list[dict[str, Any]]:
        """The pass-through servers' templates as they are, then the others'."""
        merged = await self._unique(context, "resource templates", "templates", "uriTemplate")
        merged.extend(await self.gateway.templates(context, leaving_out=self.servers))
        return merged

    # Instructions

    def leaves_out_servers(self) -> bool:
        """Whether any configured server is not passed through (offered by the gateway)."""
        return any(server not in self.servers for server in self.gateway.server_names())

    async def instructions(
        self, context: Context, gateway: str | None, *, start: bool = True
    ) -> str | None:
        """
        The instructions a host of this pass-through is given: each pass-through
        server's own, as it declared them (one server's verbatim; several, each under
        a C{## <server>} heading, in the order named), then C{gateway}'s, which
        describe the gateway tools offered after theirs.  A server that cannot be
        reached now adds nothing, nor one that is not ready within C{pool.listWait}, or
        at once when it is failing (L{Catalogues.failing}): a host's session does not
        wait on a server it may never use, which goes on starting meanwhile.

        @param start: start a server not running to read its declaration; else only
            the running ones are read (a legacy host that declared roots: a server
            started by its C{initialize} would ask for roots before the host may be
            asked, and get mcpx's own).
        """
        own: list[tuple[str, str]] = []
        failing = self._catalogues.failing(context) if start else frozenset()
        sessions = {
            server: Deferred.fromCoroutine(
                self._catalogues.waited(
                    server,
                    failing,
                    Deferred.fromCoroutine(self.pool.session(server, upstream_client(context))),
                    lambda: None,
                )
            )
            for server in (self.servers if start else ())
        }
        for server in self.servers:
            declaration: ServerDeclaration | None = None
            if not start:
                declaration = self.pool.running_declaration(server, upstream_client(context))
            else:
                try:
                    declaration = (await sessions[server]).declaration
                except (PoolError, UpstreamError, OpError):
                    continue
            said = None if declaration is None else declaration.instructions
            if said:
                own.append((server, said))
        headed = len(self.servers) > 1
        parts = [f"## {server}\n\n{said}" if headed else said for server, said in own]
        if gateway:
            parts.append(f"## mcpx\n\n{gateway}" if headed and own else gateway)
        return "\n\n".join(parts) if parts else None

    # Forwarding

    async def call_tool(
        self,
        context: Context,
        server: str,
        tool: str,
        params: Mapping[str, Any],
        *,
        on_progress: ProgressSink | None = None,
        on_log: LogRelay | None = None,
    ) -> dict[str, Any]:
        """
        Forward a C{tools/call} of C{server}'s C{tool} (by the name the server knows it
        by, L{mcpx.server.passthrough_routes.ToolRoute.upstream}) and return its result
        as it came.

        @param on_progress: where the upstream's progress goes.
        @param on_log: where the server's log messages go while it answers.
        @raise RpcError: the upstream's error as it answered, or C{-32603} when the
            pool could not get an answer (the server is unavailable).  A remote server's
            transport failure and a result its C{outputSchema} refuses
            (C{validate.output: enforce}) are no JSON-RPC error but a tool error the model
            reads (L{tool_failure}).
        @return: the result as it came, or a tool error (C{isError}, mcpx's message as
            text) when C{validate.input: enforce} refused the arguments: input validation
            is a tool error, which the model reads and corrects (SEP-1303, 2025-11-25),
            as the servers' SDKs answer it on every revision (L{refused_arguments}).
        """
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        elif type(arguments) is not dict:
            raise RpcError.invalid_params("params.arguments must be an object")
        meta = upstream_meta(params.get("_meta"))
        calling = self.gateway.pool.call_tool(
            server,
            tool,
            arguments,
            client=upstream_client(context),
            meta=meta if on_log is None else asking_for_logs(meta, on_log),
            on_progress=on_progress,
            call=context.call,
        )
        if on_log is not None:
            try:
                return await guarded(
                    self.gateway.host.events, context, server, tool_failure(calling), on_log
                )
            except InvalidArguments as e:
                return refused_arguments(e)
        # No log relay, as most calls: L{guarded} of L{tool_failure} in this coroutine,
        # not two more that every step of the call passes through.
        try:
            result = await calling
        except (UpstreamBroke, InvalidOutput) as e:
            return text_result(str(error_from(e)), is_error=True)
        except InvalidArguments as e:
            return refused_arguments(e)
        except (RpcError, PoolError, UpstreamError) as e:
            raise failure_of(e, context) from None
        return well_formed(server, result)

    async def get_prompt(
        self, context: Context, params: Mapping[str, Any], *, on_log: LogRelay | None = None
    ) -> dict[str, Any]:
        """C{prompts/get} of a pass-through prompt, its result as it came, or the gateway's."""
        name = params.get("name")
        if not isinstance(name, str):
            raise RpcError.invalid_params("params.name must be a string")
        server = await self.routes.prompt_owner(context, name)
        if server is None:
            return await self.gateway.get_prompt(context, params, on_log=on_log)
        return await self.gateway.forward(
            context,
            server,
            "prompts/get",
            _asking_for_logs(params, on_log),
            on_log,
            client=upstream_client(context),
        )

    async def read_resource(
        self, context: Context, params: Mapping[str, Any], *, on_log: LogRelay | None = None
    ) -> dict[str, Any]:
        """C{resources/read} of an upstream's own URI, its result as it came; C{mcpx://} URIs
        through the gateway."""
        uri = params.get("uri")
        if not isinstance(uri, str):
            raise RpcError.invalid_params("params.uri must be a string")
        if uris.is_mcpx(uri):
            return await self.gateway.read_resource(context, params, on_log=on_log)
        server = await self.routes.resource_owner(context, uri)
        return await self.gateway.forward(
            context,
            server,
            "resources/read",
            _asking_for_logs(params, on_log),
            on_log,
            client=upstream_client(context),
        )

    async def complete(self, context: Context, params: Mapping[str, Any]) -> dict[str, Any]:
        """
        C{completion/complete} for a pass-through prompt or resource template, routed as
        C{prompts/get} and C{resources/read} are; the gateway's refs through the gateway.
        A server that did not declare completions is not asked: the answer is empty.
        """
        ref = params.get("ref")
        if type(ref) is not dict or type(params.get("argument")) is not dict:
            raise RpcError.invalid_params("params.ref and params.argument must be objects")
        kind = ref.get("type")
        target = ref.get("name") if kind == "ref/prompt" else ref.get("uri")
        server: str | None = None
        if kind == "ref/prompt" and isinstance(target, str):
            server = await self.routes.prompt_owner(context, target)
        elif kind == "ref/resource" and isinstance(target, str) and not uris.is_mcpx(target):
            server = await self.routes.resource_owner(context, target)
        if server is None:
            return await self.gateway.complete(context, params)
        try:
            session = await self.pool.session(server, upstream_client(context))
        except (PoolError, UpstreamError) as e:
            raise pool_failure(e) from None
        declaration = session.declaration
        if declaration is not None and not declaration.declares("completions"):
            return {"completion": {"values": [], "hasMore": False}}
        result = await self.gateway.forward(
            context,
            server,
            "completion/complete",
            forwarded(params),
            client=upstream_client(context),
        )
        return capped_completion(result)


async def tool_failure(calling: Awaitable[Any]) -> Any:
    """
    C{calling}'s result; a remote server's transport failure (L{UpstreamBroke}) or an
    output its schema refuses (L{InvalidOutput}) as an C{isError} result whose text is
    C{/v1}'s error code and message (L{error_from}): the call reached the tool's server,
    or its answer came back, so it is the tool's failure, not mcpx's (C{-32603}).
    """
    try:
        return await calling
    except (UpstreamBroke, InvalidOutput) as e:
        return text_result(str(error_from(e)), is_error=True)


def refused_arguments(refusal: InvalidArguments) -> dict[str, Any]:
    """
    The tool error a pass-through C{tools/call} whose arguments C{validate.input: enforce}
    refused is answered with: a C{CallToolResult} with C{isError} and mcpx's message as
    its text, valid on every revision (C{isError} is in every schema).
    """
    return {"content": [{"type": "text", "text": refusal.message}], "isError": True}


def _asking_for_logs(params: Mapping[str, Any], on_log: LogRelay | None) -> dict[str, Any]:
    """
    A host's C{params} for the upstream (L{forwarded}), asking for log messages at the
    caller's level: a 2026-07-28 upstream logs only to a request that asks.
    """
    kept = forwarded(params)
    meta = asking_for_logs(kept.get("_meta"), on_log)
    if meta is not None:
        kept["_meta"] = meta
    return kept


#: Past this many clients, the lists kept for their next pages start afresh.
_REMEMBERED_LISTINGS: Final = 256

#: The catalogues a merge is made of: each server's name and the items it offers.
_Offered = tuple[tuple[str, list[dict[str, Any]]], ...]


def _same_catalogues(held: _Offered, offered: _Offered) -> bool:
    """
    Whether C{offered} is the same servers with the same item objects as C{held} (the
    pool hands out a fresh list of the same objects while its cache holds; see
    L{Derived}).
    """
    return len(held) == len(offered) and all(
        server == other and len(items) == len(others) and all(map(operator.is_, items, others))
        for (server, items), (other, others) in zip(held, offered, strict=True)
    )
