# -*- test-case-name: tests.server.test_passthrough -*-
"""
Where a pass-through request goes (L{Routes}): the server a C{tools/call}, a prompt, a
resource URI or a subscription is for, the C{Mcp-Param-*} headers a call must carry, and
the refusals that name what could not be found.  A C{tools/call}'s route is found from
the pool's cached catalogues without waiting while it has them all (the hot path).

A request waits on no server it does not involve (issue 43, item 9): a name or URI is
looked up first in the catalogues known now (cached; or listed last, for a server that
cannot be listed now: L{Catalogues.current}), and a server that
lists it there is its route, whatever the servers whose catalogues are not known yet
(starting, hung, crash-looping) may list; only a name none of them lists has those
fetched, each at once and for at most C{pool.listWait} (L{Catalogues.fetching}).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any, Final, NamedTuple

from attrs import frozen
from twisted.internet.defer import Deferred

from mcpx.ops import uris
from mcpx.ops.errors import OpError
from mcpx.pool.errors import PoolError
from mcpx.server.catalogues import Catalogues, upstream_client
from mcpx.server.conn import Context
from mcpx.server.derived import (
    Derived,
    names_in,
    objects_with,
    scheme_of,
    template_pattern,
    template_routes,
)
from mcpx.server.param_headers import (
    NO_HEADERS,
    HeaderPaths,
    tool_header_paths,
)
from mcpx.server.passthrough_names import PassedThrough
from mcpx.server.results import resource_not_found
from mcpx.server.surface import UnknownName
from mcpx.upstream.records import UpstreamError
from mcpx.upstream.tasks import task_support
from mcpx.wire.errors import INTERNAL_ERROR, RpcError

#: Past this many tool names told not reserved, the memory of them starts afresh; a
#: longer name than L{MAX_REMEMBERED_NAME} (MCP's names are at most 128 characters) is
#: told again at each call.
REMEMBERED_NAMES: Final = 4096
MAX_REMEMBERED_NAME: Final = 128


class _Fetch(Enum):
    """What L{Routes.tool_route_now} answers when catalogues must be fetched first."""

    FETCH = "fetch"


FETCH: Final = _Fetch.FETCH


class Routes:
    """
    The routes of one pass-through's requests to its servers.

    @ivar passed: the servers passed through, and their names.
    """

    def __init__(self, passed: PassedThrough, catalogues: Catalogues) -> None:
        self.passed = passed
        self.gateway = passed.gateway
        self._catalogues = catalogues
        #: Tool names called that are not the gateway's (L{PassedThrough.reserved_tool}:
        #: the same for a name whatever the configuration), told once.
        self._unreserved: set[str] = set()
        #: Each server's tools as offered, by name: what a call's owner, task support
        #: and C{Mcp-Param-*} headers are read from.
        self._tools: Derived[dict[str, OfferedTool]] = Derived(offered_by_name)
        #: Each server's cached catalogue of tools and the configuration it was last
        #: offered under (L{_tools_now}), and its tools as offered then: one per server named.
        #: The route of each tool name called since, listed by a server as offered now
        #: (L{_tools_now}); no more than the tools offered.
        self._routes: dict[str, ToolRoute] = {}
        self._tools_last: dict[
            str, tuple[list[dict[str, Any]], object, dict[str, OfferedTool]]
        ] = {}
        self._prompt_names: Derived[frozenset[str]] = Derived(lambda items: names_in(items, "name"))
        self._resource_uris: Derived[frozenset[str]] = Derived(lambda items: names_in(items, "uri"))
        self._template_patterns: Derived[tuple[tuple[str, Any], ...]] = Derived(
            lambda items: tuple(
                (template, template_pattern(template))
                for template in sorted(names_in(items, "uriTemplate"))
            )
        )
        self._resource_schemes: Derived[frozenset[str]] = Derived(
            lambda items: frozenset(scheme_of(uri) for uri in names_in(items, "uri"))
        )

    async def _named_by(
        self,
        derived: Derived[frozenset[str]],
        kind: str,
        context: Context,
        name: str,
        unlisted: dict[str, str] | None = None,
    ) -> str | None:
        """
        The first pass-through server, in the order named, listing C{name}, or C{None}:
        the first whose catalogue known now lists it (L{Catalogues.known}), else the
        first listing it once the others' are fetched.

        @param unlisted: given, receives the servers that could not be listed, and why.
        """
        failing = self._catalogues.failing(context)
        for server in self.passed.servers:
            known = self._catalogues.current(kind, server, context, failing)
            if known is not None and name in derived.of(server, known):
                return server
        owner: str | None = None
        for server, listed in await self._fetched(kind, context, unlisted):
            if name in derived.of(server, listed):
                if owner is not None:
                    self.passed.clashed(kind[:-1], name, owner, server)
                else:
                    owner = server
        return owner

    async def tool_route(self, context: Context, name: str) -> ToolRoute | None:
        """
        Where a C{tools/call} of C{name} goes: the pass-through server, with its tools as
        offered, or C{None} for a gateway tool.  A name reserved for the gateway (any
        C{mcpx_...}, L{PassedThrough.reserved_tool}) goes to the gateway whatever the
        servers list.  Only the server that lists the name (or listed it last, when it
        cannot be listed now) is ever chosen.  Nothing is awaited while the pool has
        every catalogue cached.

        @raise RpcError: C{-32602} naming the server when the one that listed it was
            removed, or naming the tool when none did and it is no gateway tool.
        """
        route = self.tool_route_now(context, name)
        if route is not FETCH:
            return route
        unlisted: dict[str, str] = {}
        offered = await self._tools_fetched(context, unlisted)
        return self._routed(name, offered, unlisted)

    def tool_route_now(self, context: Context, name: str) -> ToolRoute | _Fetch | None:
        """
        L{tool_route}, when the catalogues known now say it (every call while the pool
        has them cached: no coroutine of its own); else L{FETCH}, and L{tool_route}
        fetches them.
        """
        if name not in self._unreserved:
            if self.passed.reserved_tool(name):
                return None
            if len(name) <= MAX_REMEMBERED_NAME:
                if len(self._unreserved) >= REMEMBERED_NAMES:
                    self._unreserved.clear()
                self._unreserved.add(name)
        offered = self._tools_now(context)
        if offered is None:
            known = self._tools_known(context, name)
            return FETCH if known is None else known
        route = self._routes.get(name)
        if route is not None:
            self._catalogues.routed(name, route.server)
            return route
        route = self._routed(name, offered, {})
        if route is not None and name in route.tools:
            # Listed: the same route while every server's tools are as offered now.
            self._routes[name] = route
        return route

    def _tools_known(self, context: Context, name: str) -> ToolRoute | None:
        """
        The route of a call of C{name} through the first server whose tools known now
        (L{Catalogues.known}) offer it, without waiting for the others; else C{None}.
        """
        failing = self._catalogues.failing(context)
        for server in self.passed.servers:
            listed = self._catalogues.current("tools", server, context, failing)
            if listed is None:
                continue
            tools = self._tools.of(server, self.passed.offered_tools(server, listed))
            if name in tools:
                self._catalogues.routed(name, server)
                return self._route(server, tools, name)
        return None

    async def _fetched(
        self, kind: str, context: Context, unlisted: dict[str, str] | None = None
    ) -> list[tuple[str, list[dict[str, Any]]]]:
        """
        Each server's C{kind} catalogue (L{Catalogues.of}), all asked for at once.

        @param unlisted: given, receives the servers that could not be listed, and why.
        """
        failing = self._catalogues.failing(context)
        servers = self.passed.servers
        asked = [
            self._catalogues.fetching(kind, server, context, unlisted, failing)
            for server in servers
        ]
        return list(zip(servers, [await listed for listed in asked], strict=True))

    def _tools_now(self, context: Context) -> list[tuple[str, Mapping[str, OfferedTool]]] | None:
        """Each server's tools by name, when the pool has them all cached; else C{None}."""
        offered: list[tuple[str, Mapping[str, OfferedTool]]] = []
        configured = self.gateway.host.servers
        last = self._tools_last
        for server in self.passed.servers:
            listed = self._catalogues.cached("tools", server, context)
            if listed is None:
                return None
            held = last.get(server)
            if held is None or held[0] is not listed or held[1] is not configured:
                # The pool's own cached list (no policy hides a tool of it) under the same
                # configuration (the same prefix): as offered last time, not asked again.
                tools = self._tools.of(server, self.passed.offered_tools(server, listed))
                if held is None or held[1] is not configured or tools is not held[2]:
                    # Routed anew from now on: the servers or their tools changed (a
                    # policy that hides tools hands out a new list of the same ones).
                    self._routes.clear()
                held = last[server] = (listed, configured, tools)
            offered.append((server, held[2]))
        return offered

    async def _tools_fetched(
        self, context: Context, unlisted: dict[str, str]
    ) -> list[tuple[str, Mapping[str, OfferedTool]]]:
        """
        Each server's tools by name, fetched where need be (L{Catalogues.of}).

        @param unlisted: receives the servers that could not be listed, and why.
        """
        return [
            (server, self._tools.of(server, self.passed.offered_tools(server, listed)))
            for server, listed in await self._fetched("tools", context, unlisted)
        ]

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
                    self.passed.clashed("tool", name, route.server, server)
                else:
                    route = self._route(server, tools, name)
        if route is not None:
            self._catalogues.routed(name, route.server)
            return route
        servers = self.passed.servers
        last = self._catalogues.lister_of(name)
        if last is not None and last in servers:
            return self._route(last, dict(offered)[last], name)
        if self.gateway.has_tool(name):
            return None
        if len(servers) == 1 and last is None and not unlisted:
            # One server: it may answer to tools it does not list, and it is the one to
            # say whether the name exists; no other server could be meant.
            return self._route(servers[0], offered[0][1], name)
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

    def _route(self, server: str, tools: Mapping[str, OfferedTool], name: str) -> ToolRoute:
        """
        The route of a call of C{name} to C{server}, which offers C{tools}: with what
        every call of it reads, worked out once for the route.
        """
        return ToolRoute(
            server,
            tools,
            self.passed.upstream_name(server, name),
            self._param_headers(server, tools, name),
            self._offered_task_support(tools, name),
        )

    def _offered_task_support(self, tools: Mapping[str, OfferedTool], name: str) -> str | None:
        """
        The task support (L{mcpx.upstream.tasks.task_support}) of tool C{name} as
        C{tools/list} offers it to a host whose call of it goes to the server offering
        C{tools}: that server's (read once per catalogue, L{OfferedTool}), else a gateway
        tool's of that name (a call routed to the server that listed it last, or the only
        server, while it does not list it now), else C{None}.
        """
        tool = tools.get(name)
        if tool is not None:
            return tool.task_support
        for definition in self.gateway.tool_definitions:
            if definition["name"] == name:
                return task_support(definition)
        return None

    def _param_headers(
        self, server: str, tools: Mapping[str, OfferedTool], name: str
    ) -> HeaderPaths:
        """
        The C{Mcp-Param-*} headers a call of C{name} to the server offering C{tools} must
        carry (L{mcpx.server.param_headers}): those of the server's tool it calls upstream.
        """
        # The tools are keyed by their offered names, every one with its server's
        # prefix: C{name} itself (every call of a tool as listed), else C{name} with the
        # prefix when it has none (as L{PassedThrough.upstream_name} takes it off).
        tool = tools.get(name)
        if tool is None:
            prefix = self.passed.prefix_of(server)
            if prefix and not name.startswith(prefix):
                tool = tools.get(prefix + name)
        return tool.headers if tool is not None else NO_HEADERS

    async def prompt_owner(self, context: Context, name: str) -> str | None:
        """
        The pass-through server a prompt name goes to, or C{None} for a gateway prompt
        (C{<server>_<prompt>}): the name the gateway gives a prompt of a server not
        passed through is its own whatever the servers list
        (L{PassedThrough.reserved_prompt}), and the others are the gateway's when none
        of them lists it.

        A pass-through server's prompts are routed only as listed: C{fm_fm_greet} is
        not C{fm}'s C{fm_greet} under the gateway's naming, as it would be directly an
        unknown prompt (the gateway's names are offered for the other servers alone).

        @raise RpcError: C{-32602} naming the prompt when none lists it and it is no
            gateway prompt (it is never handed to a server that did not list it), with
            the servers that could not be listed.
        """
        if self.passed.reserved_prompt(name):
            return None
        unlisted: dict[str, str] = {}
        owner = await self._named_by(self._prompt_names, "prompts", context, name, unlisted)
        if owner is not None:
            return owner
        try:
            gateway_server, _ = self.gateway.prompt_owner(name)
        except UnknownName:
            pass
        else:
            if not self.passed.owns(gateway_server):
                return None
        message = (
            f"unknown prompt {name!r}: no pass-through server ({', '.join(self.passed.servers)}) "
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
        failing = self._catalogues.failing(context)
        for server in self.passed.servers:
            # Known now: a server that lists it or has its template is its route at once.
            listed = self._catalogues.current("resources", server, context, failing)
            if listed is not None and uri in self._resource_uris.of(server, listed):
                return server
            known = self._catalogues.current("templates", server, context, failing)
            if known is not None and template_routes(
                self._template_patterns.of(server, known), uri
            ):
                return server
        scheme = scheme_of(uri)
        same_scheme: str | None = None
        declaring: list[str] = []
        unreachable: list[str] = []
        every_resources = dict(await self._fetched("resources", context))
        every_templates = dict(await self._fetched("templates", context))
        offering = {
            server: Deferred.fromCoroutine(self._offers_resources(context, server, failing))
            for server in self.passed.servers
        }
        for server in self.passed.servers:
            listed = every_resources[server]
            if uri in self._resource_uris.of(server, listed):
                return server
            templates = self._template_patterns.of(server, every_templates[server])
            if template_routes(templates, uri):
                return server
            offers = await offering[server]
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

    async def _offers_resources(
        self, context: Context, server: str, failing: frozenset[str]
    ) -> bool | None:
        """
        Whether C{server} declared resources; C{None} when it cannot be reached now, or
        within C{pool.listWait} (at once, for a server L{Catalogues.failing}).
        """
        try:
            session = await self._catalogues.waited(
                server,
                failing,
                Deferred.fromCoroutine(self.gateway.pool.session(server, upstream_client(context))),
                lambda: None,
            )
        except (PoolError, UpstreamError, OpError):
            return None
        declaration = session.declaration
        return declaration is None or declaration.declares("resources")

    async def subscription_owner(self, context: Context, uri: str) -> tuple[str, str]:
        """
        The server and upstream URI of a subscription's URI: an C{mcpx://} one as the
        gateway reads it, a bare one as L{resource_owner} routes it.

        @raise UnknownName: for an C{mcpx://} URI no server owns.
        """
        if uris.is_mcpx(uri):
            return await self.gateway.resource_owner(context, uri)
        return await self.resource_owner(context, uri), uri


@frozen
class OfferedTool:
    """
    One pass-through tool as offered to hosts: its definition, the C{Mcp-Param-*}
    headers a call of it must carry, and its task support
    (L{mcpx.upstream.tasks.task_support}), asked of every 2026-07-28 call.
    """

    definition: dict[str, Any]
    headers: HeaderPaths
    task_support: str | None


def offered_by_name(tools: list[dict[str, Any]]) -> dict[str, OfferedTool]:
    """
    One server's tools as offered, by name: the first of a name is the one listed (as
    L{mcpx.server.passthrough.PassThrough.tools} keeps it).
    """
    headers = tool_header_paths(tools)
    found: dict[str, OfferedTool] = {}
    for tool in objects_with(tools, "name"):
        name = tool["name"]
        if name not in found:
            found[name] = OfferedTool(tool, headers.get(name, NO_HEADERS), task_support(tool))
    return found


class ToolRoute(NamedTuple):
    """
    Where a pass-through C{tools/call} goes (L{Routes.tool_route}); one is made for
    every call, so a named tuple, not at a frozen class's cost.

    @ivar server: the pass-through server that gets the call.
    @ivar tools: that server's tools as offered, by name, as listed now (or last).
    @ivar upstream: the name the server knows the tool by (without its C{toolPrefix},
        L{PassedThrough.upstream_name}).
    @ivar headers: the C{Mcp-Param-*} headers a call of it must carry.
    @ivar task_support: its task support as C{tools/list} offers it (C{"required"}: it
        runs only as a task).
    """

    server: str
    tools: Mapping[str, OfferedTool]
    upstream: str
    headers: HeaderPaths
    task_support: str | None
