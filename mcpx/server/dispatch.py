# -*- test-case-name: tests.server.test_dispatch -*-
"""
mcpx as an MCP server, whatever the transport: one request in, one result out,
spelled for the revision the request is served in (which one, and who the request
counts as, is L{mcpx.server.request_context}'s).

A method the revision in force removed is C{-32601}; a method mcpx implements that
only a newer revision defines is answered all the same (C{server/discover} from a
legacy client), though never declared to it.

Spelling
========

Every result is built in the newest shape and spelled once, on the way out: through
L{mcpx.spec.downgrade.downgrade} for a legacy revision, through
L{mcpx.spec.downgrade.envelope} for 2026-07-28.

Pass-through
============

With C{mcp.passthrough} naming servers, their tools, prompts and resources are offered
under their own names ahead of the gateway's (L{mcpx.server.passthrough}), and
C{tools.listChanged} is declared to legacy clients mcpx can push to: a pass-through
server's C{notifications/tools/list_changed} is relayed to them.  2026-07-28 clients
hear of list changes and resource updates on C{subscriptions/listen}
(L{mcpx.server.listen}), and their C{tools/call}s of pass-through tools have their
C{Mcp-Param-*} headers checked (L{mcpx.server.param_headers}).  A connection may name
servers of its own instead (C{mcpx serve --passthrough}, L{McpServer.passthrough_for}).
Which of the servers named are passed through is decided at each request against the
configuration in force: one a reload adds is served from then on, one it removes is gone.

Every list a host sees can change with a reload (the gateway's prompts and resources
merge every server's), so C{prompts.listChanged} and C{resources.listChanged} are
declared to every client that can hear of it, C{tools.listChanged} where tools are
passed through; each reload that changes a server is announced
(L{McpServer.configuration_changed}).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

from attrs import evolve
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from mcpx import tracing
from mcpx._version import __version__
from mcpx.ops.host import OpHost
from mcpx.ops.reloading import Reloads
from mcpx.pool.status import ReloadReport
from mcpx.server.asking import Asking
from mcpx.server.calling import Calling
from mcpx.server.conn import HTTP_MODERN, Conn, Context, Method, Reply
from mcpx.server.ext_tasks import ExtensionTasks
from mcpx.server.list_cache import ListCache
from mcpx.server.listen import Listening
from mcpx.server.offering import Offering
from mcpx.server.pages import paginate
from mcpx.server.passthrough import PassThrough
from mcpx.server.passthrough_routes import ToolRoute
from mcpx.server.progress import ProgressRelay
from mcpx.server.promotion import TaskPromotion
from mcpx.server.request_context import LOG_LEVELS, SUPPORTED_VERSIONS, Envelopes, params_of
from mcpx.server.request_state import KeyRing
from mcpx.server.resumable import ConnAsker
from mcpx.server.roots import Roots
from mcpx.server.sign_in_offers import SignInOffers
from mcpx.server.subscriptions import Subscriptions
from mcpx.server.surface import Surface
from mcpx.server.tasks import CAPABILITY as TASKS_CAPABILITY
from mcpx.server.tasks import CoreTasks, declares_tasks
from mcpx.spec.apps import UI_EXTENSION
from mcpx.spec.downgrade import downgrade, envelope
from mcpx.spec.feature import TASKS_EXTENSION
from mcpx.spec.matrix import capability_in, field_in, removed_for
from mcpx.spec.meta_keys import PROTOCOL_VERSION_KEY
from mcpx.spec.methods import LISTEN, ROOTS_CHANGED, SUBSCRIBE, TOOLS_CHANGED, UNSUBSCRIBE
from mcpx.spec.revision import NEWEST_LEGACY, Revision
from mcpx.store.records import RecordStore
from mcpx.upstream.handlers import UpstreamListener
from mcpx.wire.errors import RpcError
from mcpx.wire.messages import Notification, Request, spelled_as_read

log = Logger()

SERVER_NAME: Final = "mcpx"

#: What the gateway tools are for: said wherever they are offered.
GATEWAY_TOOLS_INSTRUCTIONS: Final = (
    "mcpx is a gateway to several MCP servers. mcpx_servers lists them, mcpx_tools finds "
    "their tools (search takes words), mcpx_describe shows one tool's input schema, and "
    "mcpx_call calls it: pass server, tool and arguments."
)

#: How the gateway names the prompts and resources of the servers it does not pass through.
GATEWAY_NAMES_INSTRUCTIONS: Final = (
    "Their prompts are named <server>_<prompt>; their resources are mcpx://<server>/<uri>."
)

INSTRUCTIONS: Final = f"{GATEWAY_TOOLS_INSTRUCTIONS} {GATEWAY_NAMES_INSTRUCTIONS}"

#: A tool or prompt name a host's request span may carry: MCP's tool name characters,
#: at most 128 (another is the host's text, not a name, and is left out).
_NAME: Final = re.compile(r"[A-Za-z0-9_.\-]{1,128}\Z")

_LISTS: Final[Mapping[str, str]] = {
    "tools/list": "tools",
    "prompts/list": "prompts",
    "resources/list": "resources",
    "resources/templates/list": "resourceTemplates",
}


class McpServer:
    """
    The one MCP server implementation behind every transport.

    It answers the methods itself and composes the parts with state of their own: the
    pass-through each connection is offered (L{Offering}), the question relay
    (L{Asking}), the calls that become tasks (L{TaskPromotion}), resource subscriptions
    and list-change fan-out (L{Subscriptions}), the roots clients (L{Roots}) and the
    2026-07-28 listens (L{Listening}).

    @ivar host: the daemon's parts (pool, settings, events).
    @ivar surface: what the server offers (L{Surface}).
    """

    def __init__(
        self,
        host: OpHost,
        clock: IReactorTime,
        *,
        instructions: str = INSTRUCTIONS,
        version: str = __version__,
        surface: Surface | None = None,
        page_size: int | None = None,
        passthrough: Sequence[str] = (),
        rounds_in: tuple[RecordStore, str] | None = None,
        reloads: Reloads | None = None,
        upstream_notices: Callable[[UpstreamListener], object] | None = None,
        state_keys: KeyRing | None = None,
    ) -> None:
        """
        @param page_size: the most items a page of a list holds (else C{mcp.pageSize}).
        @param passthrough: the servers C{mcp.passthrough} names, in order.
        @param rounds_in: the shared store (C{store.url}) the rounds of the
            C{requestState}s this daemon issues are kept in, and this daemon's id in it
            (L{Asking.share}); C{None} keeps them in memory.
        @param reloads: the daemon's reloads, each that changes a server announced to
            the clients (L{configuration_changed}).
        @param upstream_notices: subscribes a listener to the notifications the upstream
            servers send; this server listens (L{upstream_notification}).
        @param state_keys: the keys the C{requestState}s it issues are signed with
            (L{mcpx.server.request_state.state_keys}); else one of this process.
        """
        settings = host.settings
        if page_size is None:
            page_size = settings.integer("mcp.pageSize")
        self.host = host
        self.clock = clock
        self.instructions = instructions
        self.version = version
        self.surface = surface if surface is not None else Surface(host)
        self.offering = Offering(self.surface, passthrough)
        self.page_size = page_size
        self.server_info: dict[str, Any] = {"name": SERVER_NAME, "version": version}
        self._list_max_age = settings.duration("protoMessages.listMaxAge")
        self._read_max_age = settings.duration("protoMessages.readMaxAge")
        task_after = settings.duration("protoMessages.taskAfter")
        self._envelopes = Envelopes()
        #: The open subscriptions/listen requests of 2026-07-28 clients.
        self.listening = Listening()
        self.subscriptions = Subscriptions(self.surface, self.offering, self.listening)
        self.roots = Roots(host)
        #: 2025-11-25 core tasks (L{mcpx.server.tasks}) and the 2026-07-28 tasks
        #: extension (L{mcpx.server.ext_tasks}), where the daemon keeps tasks.
        self.core_tasks = CoreTasks(host.tasks, page_size=page_size)
        self.ext_tasks = ExtensionTasks(host.tasks, self.listening.task_changed)
        if state_keys is None:
            state_keys = KeyRing.of_process(settings.duration("proto.stateTTL"))
        self.asking = Asking(host, clock, self.offering, self.core_tasks, state_keys)
        if rounds_in is not None:
            self.asking.share(*rounds_in)
        self.promotion = TaskPromotion(
            self.core_tasks,
            self.ext_tasks,
            self.asking,
            self.offering,
            clock,
            task_after=task_after,
        )
        #: The calls that go upstream, and may ask, become tasks or be offered a sign-in.
        calling = Calling(
            self.offering,
            self.asking,
            SignInOffers(host),
            self.roots,
            self.promotion,
            self.spell,
            clock,
        ).method
        self._tool_lists = ListCache()
        subscriptions = self.subscriptions
        self._methods: dict[str, Method] = {
            "initialize": self._initialize,
            "ping": self._ping,
            "server/discover": self._discover,
            "tools/list": self._list_tools,
            "tools/call": calling("tools/call", self._call_tool),
            "prompts/list": self._list_prompts,
            "prompts/get": calling("prompts/get", self._get_prompt),
            "resources/list": self._list_resources,
            "resources/templates/list": self._list_templates,
            "resources/read": calling("resources/read", self._read_resource),
            SUBSCRIBE: subscriptions.subscribe,
            UNSUBSCRIBE: subscriptions.unsubscribe,
            "logging/setLevel": self._set_level,
            "completion/complete": self._complete,
        }
        self._methods.update(self.promotion.methods())
        #: The methods each revision has (L{removed_for} the rest): one look-up a request.
        self._methods_in: dict[Revision, dict[str, Method]] = {
            revision: {
                name: answer
                for name, answer in self._methods.items()
                if not removed_for(name, revision)
            }
            for revision in Revision
        }
        #: Answers one request (L{_handle}); in a span of its own when tracing is on,
        #: decided once here so that a daemon without tracing pays nothing per request.
        self.handle = self._traced if tracing.on() else self._handle
        if reloads is not None:
            reloads.listen(self.configuration_changed)
        if upstream_notices is not None:
            upstream_notices(self.upstream_notification)

    # Connections

    def open(self, conn: Conn) -> Conn:
        """
        Take on a connection a transport made (L{Conn}: its transport, who is at the
        other end, how the client is reached, the revision of a request that declared
        nothing, the pass-through servers it wants and its token's subject).

        @return: C{conn}, now known to the subscriptions' fan-out.
        """
        if conn.transport != HTTP_MODERN:
            # A 2026-07-28 request's own connection is never kept (Subscriptions.opened).
            self.subscriptions.opened(conn)
        return conn

    def close(self, conn: Conn) -> None:
        """The connection ended: its subscriptions are released."""
        conn.closed = True
        if conn.transport == HTTP_MODERN and conn.ask is None and not conn.subscriptions:
            # A 2026-07-28 request's own connection: the fan-out never kept it (opened),
            # nor the roots one that cannot ask (Roots.uses).
            return
        self.subscriptions.closed(conn)
        self.roots.closed(conn)

    @property
    def passthrough(self) -> PassThrough | None:
        """
        The servers offered under their own names, ahead of C{surface}, or C{None} when
        C{mcp.passthrough} names none: the default of a connection that names no servers
        of its own (L{passthrough_for}).
        """
        return self.offering.default

    def passthrough_for(self, conn: Conn) -> PassThrough | None:
        """The pass-through serving C{conn} now (L{Offering.serving})."""
        return self.offering.serving(conn)

    def context(self, conn: Conn, request: Request) -> Context:
        """What C{request} is served with (L{Envelopes.context})."""
        return self._envelopes.context(conn, request)

    # Requests

    async def _traced(self, conn: Conn, request: Request, reply: Reply | None = None) -> Any:
        """L{_handle} in the span of the host's request, its parent the host's C{traceparent}."""
        params = params_of(request)
        meta = params.get("_meta")
        # What the host sent is recorded only as one of the names mcpx knows.
        version = meta.get(PROTOCOL_VERSION_KEY) if type(meta) is dict else None
        named = Revision.find(version) if isinstance(version, str) else None
        revision = named or conn.revision or conn.default_revision
        method = request.method
        if method not in self._methods and method != LISTEN:
            method = "unknown"
        attributes: dict[str, str | int | bool] = {
            "mcp.method.name": method,
            "mcp.protocol.version": revision.value,
        }
        name = params.get("name")
        if method in ("tools/call", "prompts/get") and isinstance(name, str) and _NAME.match(name):
            attributes["gen_ai.tool.name" if method == "tools/call" else "gen_ai.prompt.name"] = (
                name
            )
            method = f"{method} {name}"
        with tracing.span(method, attributes, parent=tracing.parent_of(meta), server=True) as span:
            result = await self._handle(conn, request, reply)
            tracing.outcome(span, result)
            return result

    async def _handle(self, conn: Conn, request: Request, reply: Reply | None = None) -> Any:
        """
        Answer one request.

        @param reply: the stream it is answered on, where the transport hands one over.

        @return: the result, spelled for the revision the request is served in.
        @raise RpcError: what the client is answered with instead.
        """
        context = self._envelopes.context(conn, request, reply)
        method = request.method
        answer = self._methods_in[context.revision].get(method)
        if answer is None:
            if method != LISTEN or removed_for(method, context.revision):
                raise RpcError.method_not_found(method)
            listened = await self.listening.listen(
                self, conn, context, request.id, params_of(request)
            )
            return self.spell(listened, method, context)
        params = request.params
        if type(params) is not dict:
            # Absent: none; another value was refused by context already.
            params = params_of(request)
        result = await answer(conn, context, params)
        if method == "tools/list":
            # The same page of the same tools is spelled and encoded once (list_cache).
            return self._tool_lists.spelled(
                result,
                "tools",
                context,
                params.get("cursor"),
                lambda listed: self.spell(listed, method, context),
            )
        if method == "initialize" and conn.revision is not None:
            # Spelled for the revision just agreed, not the one the request came under.
            context = _legacy(context, conn.revision)
        return self.spell(result, method, context)

    def spell(self, result: Mapping[str, Any], method: str, context: Context) -> Any:
        """
        C{result}, built in the newest shape, as the request's revision spells it; an
        upstream's answer passed through keeps the bytes it came in where the spelling
        left it the same (L{spelled_as_read}).
        """
        if context.modern:
            spelled: Mapping[str, Any] = envelope(
                result,
                method,
                server_info=self.server_info,
                list_max_age=self._list_max_age,
                read_max_age=self._read_max_age,
            )
        else:
            spelled = downgrade(result, method, context.revision)
        return spelled_as_read(result, spelled)

    def notification(self, conn: Conn, notification: Notification) -> None:
        """A notification from the client (C{notifications/cancelled} is the transport's)."""
        if notification.method == "notifications/initialized":
            conn.initialized = True
            passthrough = self.passthrough_for(conn)
            if passthrough is not None:
                # Its pass-through servers start for it, and may ask its roots at once.
                self.roots.uses(conn, passthrough.servers)
        elif notification.method == ROOTS_CHANGED:
            self.roots.changed(conn)
        else:
            log.debug(
                "{transport} client {identity} sent {method}; nothing to do",
                transport=conn.transport,
                identity=conn.identity,
                method=notification.method,
            )

    # For the daemon's other parts

    def roots_source(self, server: str, scope_key: str) -> ConnAsker | None:
        """Whose roots a C{roots/list} outside any call gets (L{Roots.source})."""
        return self.roots.source(server, scope_key)

    def configuration_changed(self, report: ReloadReport) -> int:
        """A reload changed servers (L{Subscriptions.configuration_changed})."""
        self.offering.catalogues_changed()
        return self.subscriptions.configuration_changed(report)

    def upstream_notification(
        self, server: str, method: str, params: Mapping[str, Any] | None
    ) -> None:
        """An upstream's notification (L{Subscriptions.upstream_notification})."""
        if method == TOOLS_CHANGED:
            self.offering.catalogues_changed()
        self.subscriptions.upstream_notification(server, method, params)

    # For a listen (L{mcpx.server.listen.ListenHost})

    def subscribe_uri(self, conn: Conn, context: Context, uri: str) -> Any:
        """L{Subscriptions.subscribe_uri}."""
        return self.subscriptions.subscribe_uri(conn, context, uri)

    def visible_tasks(
        self, conn: Conn, context: Context, task_ids: Sequence[str]
    ) -> list[tuple[str, dict[str, Any]]]:
        """The extension tasks of C{task_ids} the caller may see, and their states."""
        return self.promotion.visible(conn, context, task_ids)

    # What mcpx declares

    def capabilities(self, conn: Conn, revision: Revision, *, modern: bool) -> dict[str, Any]:
        """
        The server capabilities for one connection and revision.  Push-dependent ones
        only where this connection can push; C{logging} only to legacy clients.
        """
        tools: dict[str, Any] = {}
        prompts: dict[str, Any] = {}
        resources: dict[str, Any] = {}
        capabilities: dict[str, Any] = {"tools": tools, "prompts": prompts, "resources": resources}
        if modern or conn.can_push:
            # The lists are the upstreams' and change with theirs and with each reload: a
            # legacy client hears of it on its connection, a 2026-07-28 one on
            # subscriptions/listen.  The gateway's own tools never change.
            changing = [("prompts", prompts), ("resources", resources)]
            if self.offering.asked(conn) is not None:
                changing.insert(0, ("tools", tools))
            for name, declared in changing:
                if capability_in("server", f"{name}.listChanged", revision):
                    declared["listChanged"] = True
        if modern:
            # A listen carries the updates of the resources it names (mcpx:// ones through
            # the gateway, the upstreams' own in pass-through).
            resources["subscribe"] = True
        if (
            not modern
            and conn.can_push
            and capability_in("server", "resources.subscribe", revision)
        ):
            resources["subscribe"] = True
        if not modern and capability_in("server", "logging", revision):
            capabilities["logging"] = {}
        if capability_in("server", "completions", revision):
            capabilities["completions"] = {}
        if declares_tasks(revision, modern=modern):
            capabilities["tasks"] = TASKS_CAPABILITY
        if modern:
            capabilities["extensions"] = {TASKS_EXTENSION: {}}
        if capability_in("server", "extensions", revision):
            apps = self.surface.apps_offered()
            if apps is not None:
                capabilities.setdefault("extensions", {})[UI_EXTENSION] = apps
        return capabilities

    def _implementation(self, revision: Revision) -> dict[str, Any]:
        info = dict(self.server_info)
        if field_in("Implementation.title", revision):
            info["title"] = "mcpx gateway"
        return info

    # The methods

    async def _initialize(
        self, conn: Conn, context: Context, params: dict[str, Any]
    ) -> Mapping[str, Any]:
        if conn.revision is not None:
            # Negotiation happens once per connection: a second one would change the revision
            # and capabilities under requests already in flight and subscriptions already made.
            raise RpcError.invalid_request(
                f"already initialized (revision {conn.revision.value}); to negotiate again, "
                "open a new connection or session"
            )
        requested = params.get("protocolVersion")
        if not isinstance(requested, str):
            raise RpcError.invalid_params("params.protocolVersion must be a string")
        found = Revision.find(requested)
        revision = found if found is not None and not found.is_modern else NEWEST_LEGACY
        capabilities = params.get("capabilities")
        conn.revision = revision
        conn.client_capabilities = capabilities if type(capabilities) is dict else {}
        result = {
            "protocolVersion": revision.value,
            "capabilities": self.capabilities(conn, revision, modern=False),
            "serverInfo": self._implementation(revision),
        }
        # A host that declared roots is their roots client once initialized: a server
        # not running yet is not started for its instructions, as it may ask for roots
        # at once (L{PassThrough.instructions}).
        declares_roots = isinstance(conn.client_capabilities.get("roots"), Mapping)
        # Read from the instance the connection's requests will reach: the one for
        # what it just declared (L{mcpx.server.catalogues.upstream_client}).
        context = evolve(context, revision=revision, capabilities=conn.client_capabilities)
        instructions = await self._instructions(conn, context, start=not declares_roots)
        if instructions is not None:
            result["instructions"] = instructions
        return result

    async def _instructions(
        self, conn: Conn, context: Context, *, start: bool = True
    ) -> str | None:
        """
        The instructions C{conn} is given: the gateway's, or where servers are passed
        through, theirs first (L{PassThrough.instructions}).
        """
        passthrough = self.passthrough_for(conn)
        if passthrough is None:
            return self.instructions
        gateway = self.instructions
        if gateway == INSTRUCTIONS and not passthrough.leaves_out_servers():
            # Every configured server is passed through: no prompt or resource is
            # offered under the gateway's names, so they are not described.
            gateway = GATEWAY_TOOLS_INSTRUCTIONS
        return await passthrough.instructions(context, gateway, start=start)

    async def _ping(
        self, conn: Conn, context: Context, params: dict[str, Any]
    ) -> Mapping[str, Any]:
        return {}

    async def _discover(
        self, conn: Conn, context: Context, params: dict[str, Any]
    ) -> Mapping[str, Any]:
        result: dict[str, Any] = {
            "supportedVersions": list(SUPPORTED_VERSIONS),
            "capabilities": self.capabilities(conn, context.revision, modern=context.modern),
        }
        instructions = await self._instructions(conn, context)
        if instructions is not None:
            result["instructions"] = instructions
        return result

    def _page(self, method: str, items: Sequence[Any], params: Mapping[str, Any]) -> dict[str, Any]:
        page, following = paginate(method, items, params.get("cursor"), self.page_size)
        result: dict[str, Any] = {_LISTS[method]: page}
        if following is not None:
            result["nextCursor"] = following
        return result

    async def _list_tools(
        self, conn: Conn, context: Context, params: dict[str, Any]
    ) -> Mapping[str, Any]:
        passthrough = self.passthrough_for(conn)
        if passthrough is not None:
            following = params.get("cursor") is not None
            listed = await passthrough.tools(context, following=following)
            return self._page("tools/list", listed, params)
        # The page is cut from the gateway's own tuple: it is never changed, so not copied.
        return self._page("tools/list", self.surface.tool_definitions, params)

    def _call_tool(
        self,
        conn: Conn,
        context: Context,
        params: dict[str, Any],
        route: ToolRoute | None,
        served: PassThrough | None,
    ) -> Awaitable[Mapping[str, Any]]:
        relay = None
        if context.progress_token is not None and conn.can_push:
            relay = ProgressRelay.for_request(conn, context)
        on_log = self.surface.log_relay(conn, context)
        # A gateway tool's call (no route) does not ask which pass-through serves, nor
        # one whose route was found at once (L{mcpx.server.calling.Forward}).
        passthrough = served
        if route is not None and (
            passthrough is not None or (passthrough := self.offering.serving(conn)) is not None
        ):
            calling = passthrough.call_tool(
                context, route.server, route.upstream, params, on_progress=relay, on_log=on_log
            )
        else:
            calling = self.surface.call_tool(context, params, on_progress=relay, on_log=on_log)
        # Most calls ask for no progress: the call's own coroutine, no other around it.
        return calling if relay is None else _relayed(relay, calling)

    def _serving(self, conn: Conn) -> PassThrough | Surface:
        """What serves C{conn}'s prompts and resources: its pass-through, else the surface."""
        passthrough = self.passthrough_for(conn)
        return self.surface if passthrough is None else passthrough

    async def _list_prompts(
        self, conn: Conn, context: Context, params: dict[str, Any]
    ) -> Mapping[str, Any]:
        return self._page("prompts/list", await self._serving(conn).prompts(context), params)

    async def _get_prompt(
        self,
        conn: Conn,
        context: Context,
        params: dict[str, Any],
        route: ToolRoute | None,
        served: PassThrough | None,
    ) -> Mapping[str, Any]:
        on_log = self.surface.log_relay(conn, context)
        return await self._serving(conn).get_prompt(context, params, on_log=on_log)

    async def _list_resources(
        self, conn: Conn, context: Context, params: dict[str, Any]
    ) -> Mapping[str, Any]:
        return self._page("resources/list", await self._serving(conn).resources(context), params)

    async def _list_templates(
        self, conn: Conn, context: Context, params: dict[str, Any]
    ) -> Mapping[str, Any]:
        items = await self._serving(conn).templates(context)
        return self._page("resources/templates/list", items, params)

    async def _read_resource(
        self,
        conn: Conn,
        context: Context,
        params: dict[str, Any],
        route: ToolRoute | None,
        served: PassThrough | None,
    ) -> Mapping[str, Any]:
        on_log = self.surface.log_relay(conn, context)
        return await self._serving(conn).read_resource(context, params, on_log=on_log)

    async def _complete(
        self, conn: Conn, context: Context, params: dict[str, Any]
    ) -> Mapping[str, Any]:
        return await self._serving(conn).complete(context, params)

    async def _set_level(
        self, conn: Conn, context: Context, params: dict[str, Any]
    ) -> Mapping[str, Any]:
        level = params.get("level")
        # Checked as a string first: an object or array cannot be looked up in a set.
        if type(level) is not str or level not in LOG_LEVELS:
            raise RpcError.invalid_params(
                f"params.level must be one of {', '.join(sorted(LOG_LEVELS))}"
            )
        conn.log_level = level
        return {}


async def _relayed(
    relay: ProgressRelay, calling: Awaitable[Mapping[str, Any]]
) -> Mapping[str, Any]:
    """C{calling}'s result, once the latest progress report held back went out before it."""
    try:
        result = await calling
    except BaseException:
        relay.drop()
        raise
    # The latest report held back by a full stream goes out before the answer.
    relay.flush()
    return result


def _legacy(context: Context, revision: Revision) -> Context:
    return Context(
        revision=revision,
        identity=context.identity,
        capabilities=context.capabilities,
        modern=False,
        subject=context.subject,
    )
