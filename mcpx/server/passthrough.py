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
C{outputSchema}, C{execution} included), then the gateway's tools whose names no
pass-through server uses: on MCP the upstream wins, and the gateway tool it hides stays
reachable on the CLI and C{/v1}.

C{tools/call} goes to the server that lists the name, and to no other: a call meant for
one server is never sent to another.  A name no pass-through server lists goes to the
server that listed it last while that server is still passed through (its catalogue
cannot be listed now: it is down or backing off, and the pool's error names it); it is
refused with C{-32602} naming the server when that server has since been removed from
the configuration, and with C{-32602} naming the tool when no server ever listed it
(unless it is a gateway tool) -- except with a single pass-through server, which gets
such a name all the same: it may answer to tools it does not list, and no other server
could be meant.  The result is carried verbatim (no URI is rewritten: the host reads
the upstream's resources under their own URIs).  A JSON-RPC error the server answers is
raised as that error (code, message, data), so the host gets an error response (and, on
2026-07-28 Streamable HTTP, the status that code maps to), not an C{isError} result.  A
failure of the pool (the server cannot be started, died, timed out) is C{-32603}
naming it.

Which servers are passed through is decided at each request against the configuration
in force: a server named but not configured is left out until a reload adds it, and
one a reload removes leaves the lists at once.

Several servers, one surface
============================

A tool or prompt name two pass-through servers both list is kept for the first of
them in the order named, and routed to it alone; the other server's item of that name
is left out of the list (the rest of both lists is intact).  Each clash is reported
once: a warning in the log and a C{warning} event naming both servers and suggesting
a C{toolPrefix} for one of them (L{clash_message}).  A per-server C{toolPrefix} offers
that server's tools as C{<prefix><name>} and a call of C{<prefix><name>} reaches the
server's C{<name>}.

A resource URI goes to the first server, in the order named, that lists it as a
resource or has a template it falls under (RFC 6570 expressions, where a simple
C{{var}} matches one non-empty path segment); failing that, to the first server that
declares resources and offers others of the same URI scheme, or to the only server that
declares resources at all.  Otherwise it is refused with the revision's
resource-not-found error naming the URI: a server that offers no resources is never
asked to read one.  A URI two servers list is listed once, for the server that would be read.
C{mcpx://} URIs still reach every configured server through the gateway surface, and
the gateway's prompts, resources and templates of the servers not passed through follow
the pass-through servers' own in every list.

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
L{PassThrough.param_headers} says which, derived once per catalogue, and
L{mcpx.server.param_headers} checks them.

What mcpx declares to the upstream is the pool session's own declaration, which holds
only the client capabilities mcpx has a handler for (L{mcpx.upstream.handlers}); the
daemon's pool has none today, so an upstream is never told of a capability the host did
not declare.  Narrowing a 2026-07-28 host's C{clientCapabilities} per call (and passing
a declared one on) needs the pool to take them with the request; until it does, no
capability is passed on.

Log messages
============

A caller that asked for log messages (C{logging/setLevel} on a legacy connection, the
request's C{_meta} on 2026-07-28) gets the server's messages about its request, and the
forwarded request carries the caller's level as C{_meta["io.modelcontextprotocol/logLevel"]}:
a 2026-07-28 server sends no log message for a request that did not ask for them.

Cost
====

A pass-through C{tools/call} is the hot path: its route (L{PassThrough.tool_route}) is
found with dictionary lookups over the pool's cached catalogues, taken without waiting
while the pool has them cached: each server's tools by name, as offered, with the
C{Mcp-Param-*} headers each asks for (L{OfferedTool}), are derived again only when the
pool listed anew, and the owner, the tool's C{execution.taskSupport} and its headers
are all read from them; no merged list is built for a call.  Which servers are passed
through is worked out once per configuration.  Nothing is copied or validated on the
way.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from attrs import frozen
from twisted.logger import Logger

from mcpx.ops import uris
from mcpx.ops.clashes import Clash
from mcpx.ops.errors import error_from
from mcpx.pool.errors import PoolError
from mcpx.pool.interface import PoolInterface
from mcpx.server.catalogues import Catalogues
from mcpx.server.conn import Context
from mcpx.server.derived import Derived, names_in, objects_with, scheme_of, template_pattern
from mcpx.server.forwarding import (
    ProgressSink,
    forwarded,
    guarded,
    upstream_meta,
)
from mcpx.server.log_relay import LogRelay, asking_for_logs
from mcpx.server.param_headers import (
    NO_HEADERS,
    REQUEST_HEADERS,
    HeaderPaths,
    check_headers,
    tool_header_paths,
)
from mcpx.server.results import capped_completion, resource_not_found
from mcpx.server.surface import Surface, UnknownName
from mcpx.upstream.session import UpstreamError
from mcpx.wire.errors import INTERNAL_ERROR, RpcError

log = Logger()

#: Past this many clashes reported, the memory of which were reported starts afresh.
_REMEMBERED_CLASHES: Final = 4096


def clash_message(kind: str, name: str, first: str, second: str) -> str:
    """What is said, once, of a tool or prompt name two pass-through servers both offer."""
    return Clash(kind, name, first, second).message()


class PassThrough:
    """
    The surface of the pass-through servers, merged ahead of the gateway's.

    @ivar named: the servers asked for, in order, configured or not.
    @ivar gateway: the gateway surface, for everything else.
    """

    def __init__(self, gateway: Surface, servers: Sequence[str]) -> None:
        if not servers:
            raise ValueError("pass-through needs at least one server")
        self.gateway = gateway
        self.named: tuple[str, ...] = tuple(dict.fromkeys(servers))
        #: The configuration L{servers} was last worked out for, and the result.
        self._configured_for: object = None
        self._servers: tuple[str, ...] = self.named
        self._catalogues = Catalogues(gateway)
        #: Each prefix's renaming of the catalogues of the servers that have it, worked
        #: out once per catalogue listed.
        self._renamed: dict[str, Derived[list[dict[str, Any]]]] = {}
        #: The clashes reported: (kind, name, kept server, left-out server).
        self._clashes: set[tuple[str, str, str, str]] = set()
        #: The last tools/list each client (owner and subject) was answered from: the
        #: pages that follow a first one are cut from it (L{tools}).
        self._listings: dict[tuple[str, str | None], list[Mapping[str, Any]]] = {}
        #: The last merge of each kind: the catalogues it was made of, the list, the names.
        self._merges: dict[str, tuple[_Offered, list[dict[str, Any]], set[str]]] = {}
        #: Each server's tools as offered, by name: what a call's owner, task support
        #: and C{Mcp-Param-*} headers are read from.
        self._tools: Derived[dict[str, OfferedTool]] = Derived(offered_by_name)
        self._prompt_names: Derived[frozenset[str]] = Derived(lambda items: names_in(items, "name"))
        self._resource_uris: Derived[frozenset[str]] = Derived(lambda items: names_in(items, "uri"))
        self._template_patterns: Derived[tuple[tuple[str, re.Pattern[str]], ...]] = Derived(
            lambda items: tuple(
                (template, template_pattern(template))
                for template in sorted(names_in(items, "uriTemplate"))
            )
        )
        self._resource_schemes: Derived[frozenset[str]] = Derived(
            lambda items: frozenset(scheme_of(uri) for uri in names_in(items, "uri"))
        )

    @property
    def pool(self) -> PoolInterface:
        return self.gateway.pool

    @property
    def servers(self) -> tuple[str, ...]:
        """The servers passed through now: those named that the configuration holds."""
        configured = self.gateway.host.servers
        if configured is None:
            return self.named
        if configured is not self._configured_for:
            # Worked out once per configuration: a reload replaces the object.
            self._servers = tuple(name for name in self.named if name in configured)
            self._configured_for = configured
        return self._servers

    def prefix_of(self, server: str) -> str:
        """The C{toolPrefix} of C{server} in the configuration in force (empty: none)."""
        configured = self.gateway.host.servers
        if configured is None or server not in configured:
            return ""
        return configured[server].tool_prefix

    def upstream_name(self, server: str, name: str) -> str:
        """The name C{server} knows its tool by, offered to the host as C{name}."""
        prefix = self.prefix_of(server)
        return name[len(prefix) :] if prefix and name.startswith(prefix) else name

    def _offered_tools(self, server: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """C{server}'s tools as offered: under their prefixed names when it has a prefix."""
        prefix = self.prefix_of(server)
        if not prefix:
            return items
        renamed = self._renamed.get(prefix)
        if renamed is None:
            if len(self._renamed) >= _REMEMBERED_CLASHES:
                self._renamed.clear()
            renamed = self._renamed[prefix] = Derived(
                lambda tools: [
                    {**tool, "name": prefix + tool["name"]} for tool in objects_with(tools, "name")
                ]
            )
        return renamed.of(server, items)

    @property
    def active(self) -> bool:
        """Whether any server named is configured now (else the gateway serves alone)."""
        return bool(self.servers)

    def owns(self, server: str) -> bool:
        """Whether C{server} is (or, removed, was asked to be) offered under its own names."""
        return server in self.named

    # Lists

    async def _merged(self, context: Context, kind: str) -> tuple[list[dict[str, Any]], set[str]]:
        """
        The pass-through servers' tools or prompts in one list, and their names: a
        name two servers offer is kept for the first (L{_clashed}).

        Merged again only when a catalogue was listed anew or the servers changed: each
        page of a paginated C{tools/list} asks for the whole list, and merging it for
        every page made listing N tools cost N squared.
        """
        offered: _Offered = tuple(
            (server, self._offered_tools(server, listed) if kind == "tools" else listed)
            for server, listed in await self._catalogues.each(context, kind, kind, self.servers)
        )
        held = self._merges.get(kind)
        if held is not None and _same_catalogues(held[0], offered):
            # The same catalogues give the same merge, clashes and owners as last time.
            return list(held[1]), held[2]
        owners: dict[str, str] = {}
        merged: list[dict[str, Any]] = []
        clashes: list[Clash] = []
        for server, items in offered:
            for item in objects_with(items, "name"):
                name = item["name"]
                other = owners.get(name)
                if other is None:
                    owners[name] = server
                    merged.append(item)
                elif other != server:
                    clashes.append(Clash(kind[:-1], name, other, server))
                    self._clashed(kind[:-1], name, other, server)
        # What hosts are offered now, for GET /v1/servers to show.
        self.gateway.host.clashes.record(self.named, kind, clashes)
        if kind == "tools":
            self._catalogues.listed_tools(owners)
        names = set(owners)
        self._merges[kind] = (offered, merged, names)
        return list(merged), names

    def _clashed(self, kind: str, name: str, first: str, second: str) -> None:
        """Report, once per name and pair of servers, that C{second}'s C{name} is left out."""
        key = (kind, name, first, second)
        if key in self._clashes:
            return
        if len(self._clashes) >= _REMEMBERED_CLASHES:
            self._clashes.clear()
        self._clashes.add(key)
        message = clash_message(kind, name, first, second)
        log.warn("pass-through: {message}", message=message)
        self.gateway.host.events.publish("warning", second, message=message)

    async def tools(self, context: Context, *, following: bool = False) -> list[Mapping[str, Any]]:
        """
        The pass-through servers' tools, then the gateway's tools they do not shadow.

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
        merged, names = await self._merged(context, "tools")
        listed: list[Mapping[str, Any]] = list(merged)
        listed.extend(tool for tool in self.gateway.tool_definitions if tool["name"] not in names)
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
        seen: set[str] = set()
        merged: list[dict[str, Any]] = []
        for _, items in await self._catalogues.each(context, what, kind, self.servers):
            for item in objects_with(items, key):
                # Read from the first server that lists it: listed for that one only.
                if item[key] not in seen:
                    seen.add(item[key])
                    merged.append(item)
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

    # Routing

    async def _named_by(
        self,
        derived: Derived[frozenset[str]],
        kind: str,
        context: Context,
        name: str,
        unlisted: dict[str, str] | None = None,
    ) -> str | None:
        """
        The first pass-through server, in the order named, listing C{name}, or C{None}.

        @param unlisted: given, receives the servers that could not be listed, and why.
        """
        owner: str | None = None
        for server in self.servers:
            listed = await self._catalogues.of(kind, server, context, unlisted)
            if name in derived.of(server, listed):
                if owner is not None:
                    self._clashed(kind[:-1], name, owner, server)
                else:
                    owner = server
        return owner

    async def tool_owner(self, context: Context, name: str) -> str | None:
        """
        The pass-through server a C{tools/call} of C{name} goes to, or C{None} for a
        gateway tool none of them shadows (L{tool_route}).
        """
        route = await self.tool_route(context, name)
        return route.server if route is not None else None

    async def tool_route(self, context: Context, name: str) -> ToolRoute | None:
        """
        Where a C{tools/call} of C{name} goes: the pass-through server, with its tools as
        offered, or C{None} for a gateway tool none of them shadows.  Only the server
        that lists the name (or listed it last, when it cannot be listed now) is ever
        chosen.  Nothing is awaited while the pool has every catalogue cached.

        @raise RpcError: C{-32602} naming the server when the one that listed it was
            removed, or naming the tool when none did and it is no gateway tool.
        """
        unlisted: dict[str, str] = {}
        offered = self._tools_now(context)
        if offered is None:
            offered = await self._tools_fetched(context, unlisted)
        return self._routed(name, offered, unlisted)

    def _tools_now(self, context: Context) -> list[tuple[str, Mapping[str, OfferedTool]]] | None:
        """Each server's tools by name, when the pool has them all cached; else C{None}."""
        offered: list[tuple[str, Mapping[str, OfferedTool]]] = []
        for server in self.servers:
            listed = self._catalogues.cached("tools", server, context)
            if listed is None:
                return None
            offered.append((server, self._tools.of(server, self._offered_tools(server, listed))))
        return offered

    async def _tools_fetched(
        self, context: Context, unlisted: dict[str, str]
    ) -> list[tuple[str, Mapping[str, OfferedTool]]]:
        """
        Each server's tools by name, fetched where need be (L{Catalogues.of}).

        @param unlisted: receives the servers that could not be listed, and why.
        """
        offered: list[tuple[str, Mapping[str, OfferedTool]]] = []
        for server in self.servers:
            listed = await self._catalogues.of("tools", server, context, unlisted)
            offered.append((server, self._tools.of(server, self._offered_tools(server, listed))))
        return offered

    def _routed(
        self,
        name: str,
        offered: list[tuple[str, Mapping[str, OfferedTool]]],
        unlisted: dict[str, str],
    ) -> ToolRoute | None:
        """L{tool_route} of C{name}, given each server's tools and those not listed."""
        route: ToolRoute | None = None
        for server, tools in offered:
            if name in tools:
                if route is not None:
                    self._clashed("tool", name, route.server, server)
                else:
                    route = ToolRoute(server, tools)
        if route is not None:
            self._catalogues.routed(name, route.server)
            return route
        servers = self.servers
        last = self._catalogues.lister_of(name)
        if last is not None and last in servers:
            return ToolRoute(last, dict(offered)[last])
        if self.gateway.has_tool(name):
            return None
        if len(servers) == 1 and last is None and not unlisted:
            # One server: it may answer to tools it does not list, and it is the one to
            # say whether the name exists; no other server could be meant.
            return ToolRoute(servers[0], offered[0][1])
        if last is None and unlisted:
            # Its server may be one that cannot be listed now: say which, guess none.
            raise RpcError(
                INTERNAL_ERROR,
                f"tool {name!r} is listed by no pass-through server that could be listed; "
                + "; ".join(f"server {server!r}: {why}" for server, why in unlisted.items()),
                {"name": name, "servers": list(unlisted)},
            )
        if last is not None:
            raise RpcError.invalid_params(
                f"tool {name!r} belonged to server {last!r}, which is no longer configured "
                "(a reload removed it); list the tools again",
                {"name": name, "server": last},
            )
        raise RpcError.invalid_params(
            f"unknown tool {name!r}: no pass-through server ({', '.join(servers)}) "
            "lists it; list the tools again",
            {"name": name},
        )

    def offered_definition(self, route: ToolRoute, name: str) -> Mapping[str, Any] | None:
        """
        The definition of tool C{name} as C{tools/list} offers it to a host whose call
        of it takes C{route}: its server's, else a gateway tool's of that name (a call
        routed to the server that listed it last, or the only server, while it does not
        list it now), else C{None}.
        """
        tool = route.tools.get(name)
        if tool is not None:
            return tool.definition
        for definition in self.gateway.tool_definitions:
            if definition["name"] == name:
                return definition
        return None

    def param_headers(self, route: ToolRoute, name: str) -> HeaderPaths:
        """
        The C{Mcp-Param-*} headers a call of C{name} taking C{route} must carry
        (L{mcpx.server.param_headers}): those of the server's tool it calls upstream.
        """
        server = route.server
        tool = route.tools.get(self.prefix_of(server) + self.upstream_name(server, name))
        return tool.headers if tool is not None else NO_HEADERS

    async def tool_param_headers(self, context: Context, server: str, name: str) -> HeaderPaths:
        """
        The C{Mcp-Param-*} headers a call of C{server}'s tool C{name} must carry
        (L{param_headers}): derived once per catalogue the pool lists.
        """
        listed = self._catalogues.cached("tools", server, context)
        if listed is None:
            listed = await self._catalogues.of("tools", server, context)
        tools = self._tools.of(server, self._offered_tools(server, listed))
        return self.param_headers(ToolRoute(server, tools), name)

    async def check_param_headers(self, context: Context, params: object) -> ToolRoute | None:
        """
        Check the C{Mcp-Param-*} headers of a 2026-07-28 C{tools/call} the transport
        handed over in L{REQUEST_HEADERS}, when it is for a tool of these servers that
        asks for some.

        @return: the call's route, when it was looked up for the check (L{tool_route}):
            what comes next before the call is sent can read it rather than look again.
        @raise RpcError: C{-32020} as L{check_headers} says, or what the call itself
            would fail with when no single pass-through server is its owner
            (L{tool_route}).
        """
        headers = REQUEST_HEADERS.get()
        if headers is None or type(params) is not dict:
            return None
        name = params.get("name")
        if not isinstance(name, str):
            return None
        route = await self.tool_route(context, name)
        if route is None:
            return None
        wanted = self.param_headers(route, name)
        if wanted:
            check_headers(wanted, params.get("arguments"), headers)
        return route

    async def prompt_owner(self, context: Context, name: str) -> str | None:
        """
        The pass-through server a prompt name goes to, or C{None} for a gateway prompt
        (C{<server>_<prompt>}) none of them lists.

        @raise RpcError: C{-32602} naming the prompt when none lists it and it is no
            gateway prompt (it is never handed to a server that did not list it), with
            the servers that could not be listed.
        """
        unlisted: dict[str, str] = {}
        owner = await self._named_by(self._prompt_names, "prompts", context, name, unlisted)
        if owner is not None:
            return owner
        try:
            self.gateway.prompt_owner(name)
        except UnknownName:
            pass
        else:
            return None
        message = (
            f"unknown prompt {name!r}: no pass-through server ({', '.join(self.servers)}) "
            "lists it; list the prompts again"
        )
        if unlisted:
            message += "; not listed now: " + "; ".join(
                f"server {server!r}: {why}" for server, why in unlisted.items()
            )
        raise RpcError.invalid_params(message, {"name": name})

    async def resource_owner(self, context: Context, uri: str) -> str:
        """
        The pass-through server a bare (not C{mcpx://}) resource URI or template goes
        to: the first that lists it, offers it as a template or has a template it falls
        under; else the first server that declares resources and offers others of the
        URI's scheme; else the only server that declares resources (or cannot be asked
        whether it does).

        @raise RpcError: the revision's resource-not-found error, naming the URI, when no
            server can have it: it is never handed to a server that offers no resources.
        """
        scheme = scheme_of(uri)
        same_scheme: str | None = None
        declaring: list[str] = []
        unreachable: list[str] = []
        for server in self.servers:
            listed = await self._catalogues.of("resources", server, context)
            if uri in self._resource_uris.of(server, listed):
                return server
            templates = self._template_patterns.of(
                server, await self._catalogues.of("templates", server, context)
            )
            for template, pattern in templates:
                if template == uri or pattern.fullmatch(uri) is not None:
                    return server
            offers = await self._offers_resources(context, server)
            if offers is None:
                unreachable.append(server)
                continue
            if not offers:
                continue
            declaring.append(server)
            if same_scheme is None and scheme in self._resource_schemes.of(
                server, listed + [{"uri": t} for t, _ in templates]
            ):
                same_scheme = server
        if same_scheme is not None:
            return same_scheme
        candidates = declaring + unreachable
        if len(candidates) == 1:
            # The one server that may have it; one that is down says so when forwarded.
            return candidates[0]
        error = resource_not_found(uri, context)
        if unreachable:
            error = RpcError(
                error.code,
                f"{error.message} (no reachable pass-through server offers it; "
                f"not asked: {', '.join(unreachable)})",
                error.data,
            )
        raise error

    async def _offers_resources(self, context: Context, server: str) -> bool | None:
        """Whether C{server} declared resources; C{None} when it cannot be reached now."""
        try:
            session = await self.pool.session(server, context.identity)
        except (PoolError, UpstreamError):
            return None
        declaration = session.declaration
        return declaration is None or declaration.declares("resources")

    # Forwarding

    async def call_tool(
        self,
        context: Context,
        server: str,
        name: str,
        params: Mapping[str, Any],
        *,
        on_progress: ProgressSink | None = None,
        on_log: LogRelay | None = None,
    ) -> dict[str, Any]:
        """
        Forward a C{tools/call} to C{server} and return its result as it came.

        @param on_progress: where the upstream's progress goes.
        @param on_log: where the server's log messages go while it answers.
        @raise RpcError: the upstream's error as it answered, or C{-32603} when the
            pool could not get an answer.
        """
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        elif type(arguments) is not dict:
            raise RpcError.invalid_params("params.arguments must be an object")
        calling = self.pool.call_tool(
            server,
            self.upstream_name(server, name),
            arguments,
            client=context.identity,
            meta=asking_for_logs(upstream_meta(params.get("_meta")), on_log),
            on_progress=on_progress,
            caller=context.caller,
        )
        return await guarded(self.gateway.host.events, context, server, calling, on_log)

    async def get_prompt(
        self, context: Context, params: Mapping[str, Any], *, on_log: LogRelay | None = None
    ) -> dict[str, Any]:
        """C{prompts/get} of a pass-through prompt, its result as it came, or the gateway's."""
        name = params.get("name")
        if not isinstance(name, str):
            raise RpcError.invalid_params("params.name must be a string")
        server = await self.prompt_owner(context, name)
        if server is None:
            return await self.gateway.get_prompt(context, params, on_log=on_log)
        return await self.gateway.forward(
            context, server, "prompts/get", _asking_for_logs(params, on_log), on_log
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
        server = await self.resource_owner(context, uri)
        return await self.gateway.forward(
            context, server, "resources/read", _asking_for_logs(params, on_log), on_log
        )

    async def subscription_owner(self, context: Context, uri: str) -> tuple[str, str]:
        """
        The server and upstream URI of a subscription's URI: an C{mcpx://} one as the
        gateway reads it, a bare one as L{resource_owner} routes it.

        @raise UnknownName: for an C{mcpx://} URI no server owns.
        """
        if uris.is_mcpx(uri):
            return await self.gateway.resource_owner(context, uri)
        return await self.resource_owner(context, uri), uri

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
            server = await self.prompt_owner(context, target)
        elif kind == "ref/resource" and isinstance(target, str) and not uris.is_mcpx(target):
            server = await self.resource_owner(context, target)
        if server is None:
            return await self.gateway.complete(context, params)
        try:
            session = await self.pool.session(server, context.identity)
        except (PoolError, UpstreamError) as e:
            raise RpcError.internal_error(error_from(e).message) from None
        declaration = session.declaration
        if declaration is not None and not declaration.declares("completions"):
            return {"completion": {"values": [], "hasMore": False}}
        result = await self.gateway.forward(
            context, server, "completion/complete", forwarded(params)
        )
        return capped_completion(result)


@frozen
class OfferedTool:
    """
    One pass-through tool as offered to hosts: its definition, and the C{Mcp-Param-*}
    headers a call of it must carry.
    """

    definition: dict[str, Any]
    headers: HeaderPaths


def offered_by_name(tools: list[dict[str, Any]]) -> dict[str, OfferedTool]:
    """
    One server's tools as offered, by name: the first of a name is the one listed (as
    L{PassThrough.tools} keeps it).
    """
    headers = tool_header_paths(tools)
    found: dict[str, OfferedTool] = {}
    for tool in objects_with(tools, "name"):
        name = tool["name"]
        if name not in found:
            found[name] = OfferedTool(tool, headers.get(name, NO_HEADERS))
    return found


@frozen
class ToolRoute:
    """
    Where a pass-through C{tools/call} goes (L{PassThrough.tool_route}).

    @ivar server: the pass-through server that gets the call.
    @ivar tools: that server's tools as offered, by name, as listed now (or last).
    """

    server: str
    tools: Mapping[str, OfferedTool]


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
