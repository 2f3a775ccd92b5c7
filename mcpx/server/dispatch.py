# -*- test-case-name: tests.server.test_dispatch -*-
"""
mcpx as an MCP server, whatever the transport: one request in, one result out,
spelled for the revision the request is served in.

Which revision a request is served in
=====================================

  - A request whose C{_meta} names C{io.modelcontextprotocol/protocolVersion} says so
    itself.  2026-07-28 is served statelessly: its C{_meta} must also hold
    C{clientCapabilities}, and nothing the connection agreed earlier applies.  A
    version mcpx does not speak is C{-32022} with C{data.supported} and
    C{data.requested}.
  - A request that looks modern (on a 2026-07-28 HTTP request, or with other
    C{io.modelcontextprotocol/} keys in its C{_meta}) without naming a version is
    C{-32602}.
  - Any other request is legacy: the revision its connection's C{initialize} agreed,
    or, when nothing was agreed, the connection's default (2024-11-05, or 2025-03-26
    for a Streamable HTTP request without a version header).

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

Identity
========

The caller a request counts as (the scope of a C{client}-scoped upstream server) is
C{_meta["dev.mcpx/session"]} when the client names one; otherwise the connection's
identity for a legacy request, and a scope of its own for each 2026-07-28 request
(see C{spec/identity.md}).
"""

from __future__ import annotations

import contextvars
import itertools
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final
from weakref import WeakSet

from attrs import evolve
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from mcpx._version import __version__
from mcpx.ops import uris
from mcpx.ops.host import OpHost
from mcpx.pool.status import ReloadReport
from mcpx.questions.caller import CAPABILITY_FOR, Caller
from mcpx.server.conn import HTTP_MODERN, Ask, Conn, Context, Push
from mcpx.server.ext_tasks import EXTENSION as TASKS_EXTENSION
from mcpx.server.ext_tasks import REQUIRED as TASKS_REQUIRED
from mcpx.server.ext_tasks import (
    ExtensionTasks,
    becomes_task_after,
    client_declares,
    race,
    task_owner,
)
from mcpx.server.flow import Flow
from mcpx.server.listen import (
    LIST_CHANGES,
    LISTEN,
    PROMPTS_CHANGED,
    RESOURCES_CHANGED,
    TOOLS_CHANGED,
    Listener,
    Listening,
)
from mcpx.server.param_headers import check_call
from mcpx.server.passthrough import PassThrough
from mcpx.server.request_state import RequestState, StateSigner, binding
from mcpx.server.resumable import ConnAsker, ResumableCall, waiting
from mcpx.server.surface import CALL_TOOL, EXEC_TOOL, PAGE_SIZE, Surface, UnknownName, paginate
from mcpx.server.tasks import CAPABILITY as TASKS_CAPABILITY
from mcpx.server.tasks import CoreTasks, declares_tasks
from mcpx.settings.servers import Scope
from mcpx.spec.downgrade import downgrade, envelope
from mcpx.spec.matrix import capability_in, field_in, removed_for
from mcpx.spec.revision import NEWEST, NEWEST_FIRST, NEWEST_LEGACY, Revision
from mcpx.tasks.store import TooManyTasks, TooManyTasksForClient
from mcpx.upstream.tasks import task_support
from mcpx.wire.errors import RpcError
from mcpx.wire.messages import Notification, Request
from mcpx.wire.peer import cancelled_by_peer

#: What a client sends when its roots changed; passed on to the servers it uses.
ROOTS_CHANGED = "notifications/roots/list_changed"

log = Logger()

PROTOCOL_VERSION_KEY: Final = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_KEY: Final = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO_KEY: Final = "io.modelcontextprotocol/clientInfo"
LOG_LEVEL_KEY: Final = "io.modelcontextprotocol/logLevel"
#: The key in which a client names the session it belongs to (spec/identity.md).
SESSION_KEY: Final = "dev.mcpx/session"

_MODERN_KEYS: Final = (
    PROTOCOL_VERSION_KEY,
    CLIENT_CAPABILITIES_KEY,
    CLIENT_INFO_KEY,
    LOG_LEVEL_KEY,
)

#: Every revision mcpx speaks, newest first, as C{supportedVersions} and C{data.supported}.
SUPPORTED_VERSIONS: Final[tuple[str, ...]] = tuple(rev.value for rev in NEWEST_FIRST)

#: The levels of C{logging/setLevel} (RFC 5424 severities, as every revision names them).
LOG_LEVELS: Final = frozenset(
    ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
)

SERVER_NAME: Final = "mcpx"

INSTRUCTIONS: Final = (
    "mcpx is a gateway to several MCP servers. mcpx_servers lists them, mcpx_tools finds "
    "their tools (search takes words), mcpx_describe shows one tool's input schema, and "
    "mcpx_call calls it: pass server, tool and arguments. Their prompts are named "
    "<server>_<prompt>; their resources are mcpx://<server>/<uri>."
)

_Method = Callable[[Conn, Context, dict[str, Any]], Awaitable[Mapping[str, Any]]]

_LISTS: Final[Mapping[str, str]] = {
    "tools/list": "tools",
    "prompts/list": "prompts",
    "resources/list": "resources",
    "resources/templates/list": "resourceTemplates",
}

_MISSING: Final[Any] = object()

#: The question capabilities (elicitation, sampling, roots) each revision lacks.
_ABSENT_QUESTIONS: Final[Mapping[Revision, frozenset[str]]] = {
    revision: frozenset(
        name for name in CAPABILITY_FOR.values() if not capability_in("client", name, revision)
    )
    for revision in Revision
}


def _params(request: Request) -> dict[str, Any]:
    params = request.params
    if params is None:
        return {}
    if type(params) is not dict:
        raise RpcError.invalid_params("params must be an object")
    return params


def _token(meta: Mapping[str, Any] | None) -> str | int | None:
    if meta is None:
        return None
    token = meta.get("progressToken")
    return token if type(token) is str or type(token) is int else None


#: The method each question-asking handler answers, by the handler's name.
_METHOD_OF: Final = {
    "_call_tool": "tools/call",
    "_get_prompt": "prompts/get",
    "_read_resource": "resources/read",
}


def _task_error(failure: Failure, call: ResumableCall) -> dict[str, Any]:
    """A resumable call's failure, as its task shows it."""
    error = failure.value
    if isinstance(error, RpcError):
        return error.to_json()
    if isinstance(error, CancelledError):
        why = call.abandoned or "the call was cancelled before it finished"
        return {"code": -32603, "message": why}
    return {"code": -32603, "message": failure.getErrorMessage()}


class McpServer:
    """
    The one MCP server implementation behind every transport.

    @ivar host: the daemon's parts (pool, settings, events).
    @ivar surface: what the server offers (L{Surface}).
    @ivar passthrough: the servers offered under their own names, ahead of
        C{surface} (L{PassThrough}), or C{None} when C{mcp.passthrough} names none: the
        default of a connection that names no servers of its own (L{passthrough_for}).
    """

    def __init__(
        self,
        host: OpHost,
        clock: IReactorTime,
        *,
        instructions: str = INSTRUCTIONS,
        version: str = __version__,
        surface: Surface | None = None,
        page_size: int = PAGE_SIZE,
        passthrough: Sequence[str] = (),
    ) -> None:
        """
        @param passthrough: the servers C{mcp.passthrough} names, in order.
        """
        self.host = host
        self.clock = clock
        self.instructions = instructions
        self.version = version
        self.surface = surface if surface is not None else Surface(host)
        self.passthrough = PassThrough(self.surface, passthrough) if passthrough else None
        #: The pass-through of each distinct list of servers a connection named.
        self._passthroughs: dict[tuple[str, ...], PassThrough | None] = {}
        self.page_size = page_size
        self.server_info: dict[str, Any] = {"name": SERVER_NAME, "version": version}
        settings = host.settings
        self._list_max_age = 60.0
        self._read_max_age = 0.0
        self._task_after = 5.0
        if settings is not None:
            self._list_max_age = settings.duration("protoMessages.listMaxAge")
            self._read_max_age = settings.duration("protoMessages.readMaxAge")
            self._task_after = settings.duration("protoMessages.taskAfter")
        self._request_scopes = itertools.count(1)
        # The question relay: see mcpx.server.resumable.
        self._native = True
        self._ask_rounds = 8
        self._state_ttl = 1800.0
        self._ask_ttl = 900.0
        if settings is not None:
            self._native = settings.boolean("proto.native")
            self._ask_rounds = settings.integer("proto.askRounds")
            self._state_ttl = settings.duration("proto.stateTTL")
            self._ask_ttl = settings.duration("proto.askTTL")
        self._signer = StateSigner()
        self._call_prefix = f"call-{secrets.token_hex(4)}-"
        self._call_numbers = itertools.count(1)
        #: 2026-07-28 calls that asked their client something, by id, until collected.
        self._resumables: dict[str, ResumableCall] = {}
        #: Who watches each upstream resource: (server, identity, uri) to each connection
        #: watching it and how it named it (C{True}: by the upstream's own URI, in
        #: pass-through; C{False}: by its mcpx:// URI).
        self._watchers: dict[tuple[str, str, str], dict[Conn, set[bool]]] = {}
        #: The open connections mcpx can push to, for what concerns them all.
        self._pushable: WeakSet[Conn] = WeakSet()
        #: The open subscriptions/listen requests of 2026-07-28 clients.
        self.listening = Listening()
        #: The legacy connections that declared roots, by each server they use, most
        #: recently active last: whose roots a server asking outside any call gets.
        self._roots_users: dict[str, list[Conn]] = {}
        self._methods: dict[str, _Method] = {
            "initialize": self._initialize,
            "ping": self._ping,
            "server/discover": self._discover,
            "tools/list": self._list_tools,
            "tools/call": self._asks(self._call_tool),
            "prompts/list": self._list_prompts,
            "prompts/get": self._asks(self._get_prompt),
            "resources/list": self._list_resources,
            "resources/templates/list": self._list_templates,
            "resources/read": self._asks(self._read_resource),
            "resources/subscribe": self._subscribe,
            "resources/unsubscribe": self._unsubscribe,
            "logging/setLevel": self._set_level,
            "completion/complete": self._complete,
        }
        #: 2025-11-25 core tasks (L{mcpx.server.tasks}), where the daemon keeps tasks.
        self.core_tasks: CoreTasks | None = None
        #: The 2026-07-28 tasks extension (L{mcpx.server.ext_tasks}), likewise.
        self.ext_tasks: ExtensionTasks | None = None
        store = getattr(host, "tasks", None)
        if store is not None:
            self.core_tasks = CoreTasks(store, page_size=page_size)
            self.ext_tasks = ExtensionTasks(store)
            self.ext_tasks.on_change.append(self.listening.task_changed)
            self._methods["tasks/get"] = self._by_era(
                "tasks/get", self.core_tasks.get, self.ext_tasks.get
            )
            self._methods["tasks/result"] = self.core_tasks.result
            self._methods["tasks/list"] = self.core_tasks.list_tasks
            self._methods["tasks/cancel"] = self._by_era(
                "tasks/cancel", self.core_tasks.cancel, self.ext_tasks.cancel
            )
            self._methods["tasks/update"] = self._by_era(
                "tasks/update", None, self.ext_tasks.update
            )

    # Connections

    def open(
        self,
        transport: str,
        identity: str,
        *,
        push: Push | None = None,
        ask: Ask | None = None,
        default_revision: Revision | None = None,
        passthrough: Sequence[str] | None = None,
    ) -> Conn:
        """
        A new connection.

        @param transport: C{"stdio"}, C{"http-session"}, C{"http-post"} or C{"http-modern"}.
        @param identity: who is at the other end (spec/identity.md).
        @param push: sends the client a notification; C{None} where the connection cannot.
        @param ask: sends the client a request (legacy), where the connection can.
        @param default_revision: the revision of a request that declared nothing
            (2024-11-05 unless given; 2025-03-26 for a headerless HTTP request).
        @param passthrough: the servers this connection wants offered under their own
            names instead of C{mcp.passthrough}'s (L{passthrough_for}); C{None} for those.
        """
        conn = Conn(transport, identity, push=push, ask=ask)
        if passthrough is not None:
            conn.passthrough = tuple(passthrough)
        if default_revision is not None:
            conn.default_revision = default_revision
        if push is not None:
            self._pushable.add(conn)
        return conn

    def close(self, conn: Conn) -> None:
        """The connection ended: its subscriptions are released."""
        conn.closed = True
        self._pushable.discard(conn)
        for key in tuple(conn.subscriptions):
            self._unwatch(conn, key)
        for server in tuple(self._roots_users):
            users = self._roots_users[server]
            if conn in users:
                users.remove(conn)
                if not users:
                    del self._roots_users[server]

    def passthrough_for(self, conn: Conn) -> PassThrough | None:
        """
        The pass-through serving C{conn} now: the servers it named itself
        (L{Conn.passthrough}), else the daemon's default (L{passthrough}); C{None} while
        none of them is configured, when the gateway serves alone.
        """
        named = self.passthrough_named(conn)
        return named if named is not None and named.active else None

    def passthrough_named(self, conn: Conn) -> PassThrough | None:
        """
        The pass-through C{conn} asked for, whether or not its servers are configured
        now (what it is declared and told about).

        Names the daemon does not configure when a list is first seen are warned of once;
        they are passed through as soon as a reload configures them.
        """
        names = conn.passthrough
        if names is None:
            return self.passthrough
        try:
            return self._passthroughs[names]
        except KeyError:
            built = self._passthroughs[names] = self._build_passthrough(names)
            return built

    def _build_passthrough(self, names: tuple[str, ...]) -> PassThrough | None:
        if not names:
            return None
        configured = self.host.servers
        unknown = [name for name in names if configured is not None and name not in configured]
        if unknown:
            self._warn(
                None,
                "pass-through asked for by a connection ignores servers not configured: "
                + ", ".join(repr(name) for name in unknown),
            )
        return PassThrough(self.surface, names)

    # Revisions

    def revision_of(self, conn: Conn, request: Request) -> Revision:
        """
        The revision C{request} is served in, as far as its envelope tells (for a
        transport choosing statuses): 2026-07-28 for anything that looks modern, even
        when its C{_meta} is incomplete.
        """
        params = request.params if type(request.params) is dict else {}
        meta = params.get("_meta")
        if type(meta) is dict:
            named = Revision.find(meta.get(PROTOCOL_VERSION_KEY))
            if named is not None and not named.is_modern:
                return conn.revision or named
            if named is not None or any(key in meta for key in _MODERN_KEYS):
                return NEWEST
        if conn.transport == HTTP_MODERN:
            return NEWEST
        return conn.revision or conn.default_revision

    def context(self, conn: Conn, request: Request) -> Context:
        """
        What C{request} is served with.

        @raise RpcError: -32602 for a modern request without a usable C{_meta};
            -32022 for a protocol version mcpx does not speak.
        """
        params = _params(request)
        raw_meta = params.get("_meta", _MISSING)
        meta: dict[str, Any] | None = raw_meta if type(raw_meta) is dict else None
        if raw_meta is not _MISSING and meta is None:
            raise RpcError.invalid_params("params._meta must be an object")
        version = meta.get(PROTOCOL_VERSION_KEY, _MISSING) if meta is not None else _MISSING
        looks_modern = conn.transport == HTTP_MODERN or (
            meta is not None and any(key in meta for key in _MODERN_KEYS)
        )
        session = meta.get(SESSION_KEY) if meta is not None else None
        named_session = session if isinstance(session, str) and session else None
        if version is _MISSING and not looks_modern:
            revision = conn.revision or conn.default_revision
            return Context(
                revision=revision,
                identity=named_session or conn.identity,
                capabilities=conn.client_capabilities,
                modern=False,
                progress_token=_token(meta),
                log_level=conn.log_level,
            )
        if meta is None:
            raise RpcError.invalid_params(
                f"a {NEWEST} request carries params._meta with {PROTOCOL_VERSION_KEY} and "
                f"{CLIENT_CAPABILITIES_KEY}"
            )
        if version is _MISSING:
            raise RpcError.invalid_params(f"params._meta has no {PROTOCOL_VERSION_KEY}")
        named = Revision.find(version)
        if named is None:
            raise RpcError.unsupported_version(version, SUPPORTED_VERSIONS)
        if not named.is_modern:
            # A legacy client restating its revision: the handshake still governs.
            return Context(
                revision=conn.revision or named,
                identity=named_session or conn.identity,
                capabilities=conn.client_capabilities,
                modern=False,
                progress_token=_token(meta),
                log_level=conn.log_level,
            )
        capabilities = meta.get(CLIENT_CAPABILITIES_KEY)
        if type(capabilities) is not dict:
            raise RpcError.invalid_params(
                f"params._meta has no {CLIENT_CAPABILITIES_KEY} object ({{}} declares none)"
            )
        level = meta.get(LOG_LEVEL_KEY)
        if level is not None and level not in LOG_LEVELS:
            raise RpcError.invalid_params(f"{LOG_LEVEL_KEY} {level!r} is not a logging level")
        return Context(
            revision=named,
            identity=named_session or f"{conn.identity}/request-{next(self._request_scopes)}",
            capabilities=capabilities,
            modern=True,
            progress_token=_token(meta),
            log_level=level,
        )

    # Requests

    async def handle(self, conn: Conn, request: Request) -> Any:
        """
        Answer one request.

        @return: the result, spelled for the revision the request is served in.
        @raise RpcError: what the client is answered with instead.
        """
        context = self.context(conn, request)
        method = request.method
        if removed_for(method, context.revision):
            raise RpcError.method_not_found(method)
        if method == LISTEN:
            listened = await self.listening.listen(
                self, conn, context, request.id, _params(request)
            )
            return self.spell(listened, method, context)
        answer = self._methods.get(method)
        if answer is None:
            raise RpcError.method_not_found(method)
        if context.modern and method == "tools/call":
            passthrough = self.passthrough_for(conn)
            if passthrough is not None:
                # SEP-2243: the transport's Mcp-Param-* headers against the arguments.
                await check_call(passthrough, context, request.params)
            params = _params(request)
            if self.ext_tasks is not None:
                if client_declares(context):
                    # The tasks extension: the call may be answered with a task (the
                    # core tasks' task field means nothing at this revision).
                    return self.spell(
                        await self._call_may_become_task(conn, context, params),
                        method,
                        context,
                    )
                if passthrough is not None and isinstance(params.get("name"), str):
                    support, _, _ = await self._task_support(conn, context, params)
                    if support == "required":
                        # Only the extension can carry a tool that runs as a task only.
                        raise RpcError.missing_client_capability(TASKS_REQUIRED)
        elif (
            method == "tools/call"
            and self.core_tasks is not None
            and "task" in _params(request)
            and not context.modern
        ):
            # 2025-11-25 core tasks, honoured from any legacy client: {task} at once.
            created = await self.core_tasks.create(
                conn, context, _params(request), answer, self._task_support
            )
            return self.spell(created, "tasks/get", context)
        result = await answer(conn, context, _params(request))
        if method == "initialize" and conn.revision is not None:
            # Spelled for the revision just agreed, not the one the request came under.
            context = _legacy(context, conn.revision)
        return self.spell(result, method, context)

    def spell(self, result: Mapping[str, Any], method: str, context: Context) -> Any:
        """C{result}, built in the newest shape, as the request's revision spells it."""
        if context.modern:
            return envelope(
                result,
                method,
                server_info=self.server_info,
                list_max_age=self._list_max_age,
                read_max_age=self._read_max_age,
            )
        return downgrade(result, method, context.revision)

    def notification(self, conn: Conn, notification: Notification) -> None:
        """A notification from the client (C{notifications/cancelled} is the transport's)."""
        if notification.method == "notifications/initialized":
            conn.initialized = True
            passthrough = self.passthrough_for(conn)
            if passthrough is not None:
                # Its pass-through servers start for it, and may ask its roots at once.
                self._uses(conn, passthrough.servers)
        elif notification.method == ROOTS_CHANGED:
            self._roots_changed(conn)
        else:
            log.debug(
                "{transport} client {identity} sent {method}; nothing to do",
                transport=conn.transport,
                identity=conn.identity,
                method=notification.method,
            )

    # Roots

    def _uses(self, conn: Conn, servers: Sequence[str]) -> None:
        """C{conn} uses C{servers}: if it declared roots, it is their latest roots client."""
        if conn.closed or conn.ask is None:
            return
        if not isinstance(conn.client_capabilities.get("roots"), Mapping):
            return
        for server in servers:
            users = self._roots_users.setdefault(server, [])
            if users and users[-1] is conn:
                continue
            if conn in users:
                users.remove(conn)
            users.append(conn)

    def roots_source(self, server: str, scope_key: str) -> ConnAsker | None:
        """
        The client a C{roots/list} from C{server}'s instance for C{scope_key} is put to
        when it belongs to no one call: the most recently active open connection that
        declared roots and uses that server (for a C{client}-scoped server, one of that
        instance's own client).
        """
        users = self._roots_users.get(server)
        if not users:
            return None
        configured = self.host.servers
        config = configured.servers.get(server) if configured is not None else None
        own_only = config is not None and config.scope is Scope.CLIENT
        for conn in reversed(users):
            if conn.closed or (own_only and conn.identity != scope_key):
                continue
            return ConnAsker(conn, contextvars.Context())
        return None

    def _roots_changed(self, conn: Conn) -> None:
        """A client's roots changed: every server it uses that is running hears it."""
        pool = self.host.pool
        notify = getattr(pool, "notify", None)
        if notify is None:
            return
        servers = [name for name, users in self._roots_users.items() if conn in users]
        self._uses(conn, servers)
        for server in servers:
            notify(server, conn.identity, ROOTS_CHANGED)

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
            if self.passthrough_named(conn) is not None:
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
        if self.core_tasks is not None and declares_tasks(revision, modern=modern):
            capabilities["tasks"] = TASKS_CAPABILITY
        if modern and self.ext_tasks is not None:
            capabilities["extensions"] = {TASKS_EXTENSION: {}}
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
        info = params.get("clientInfo")
        conn.client_info = info if type(info) is dict else None
        result = {
            "protocolVersion": revision.value,
            "capabilities": self.capabilities(conn, revision, modern=False),
            "serverInfo": self._implementation(revision),
            "instructions": self.instructions,
        }
        return result

    async def _ping(
        self, conn: Conn, context: Context, params: dict[str, Any]
    ) -> Mapping[str, Any]:
        return {}

    async def _discover(
        self, conn: Conn, context: Context, params: dict[str, Any]
    ) -> Mapping[str, Any]:
        return {
            "supportedVersions": list(SUPPORTED_VERSIONS),
            "capabilities": self.capabilities(conn, context.revision, modern=context.modern),
            "instructions": self.instructions,
        }

    def _page(self, method: str, items: list[Any], params: Mapping[str, Any]) -> dict[str, Any]:
        page, following = paginate(method, items, params.get("cursor"), self.page_size)
        result: dict[str, Any] = {_LISTS[method]: page}
        if following is not None:
            result["nextCursor"] = following
        return result

    def _by_era(
        self,
        method: str,
        legacy: _Method | None,
        modern: Callable[[str, dict[str, Any]], Awaitable[Mapping[str, Any]]],
    ) -> _Method:
        """
        A C{tasks/*} method: core tasks' C{legacy} for a legacy client (C{-32601} where
        there is none), the extension's C{modern} for a 2026-07-28 one.
        """

        def by_era(
            conn: Conn, context: Context, params: dict[str, Any]
        ) -> Awaitable[Mapping[str, Any]]:
            if context.modern:
                if not client_declares(context):
                    raise RpcError.missing_client_capability(TASKS_REQUIRED)
                return modern(task_owner(context, conn.identity), params)
            if legacy is None:
                raise RpcError.method_not_found(method)
            return legacy(conn, context, params)

        return by_era

    async def _call_may_become_task(
        self, conn: Conn, context: Context, params: dict[str, Any]
    ) -> Mapping[str, Any]:
        """
        A 2026-07-28 C{tools/call} from a client that declared the tasks extension: the
        call's own answer if it finishes or asks its client something soon enough, a
        C{CreateTaskResult} once it has run longer, or as soon as the upstream made it
        a task of its own (see L{mcpx.server.ext_tasks}).  A retry that answers the
        call's questions (C{requestState}) may become a task the same way.
        """
        assert self.ext_tasks is not None
        if not isinstance(params.get("name"), str):
            raise RpcError.invalid_params("params.name must be a string")
        support, server, tool = await self._task_support(conn, context, params)
        after = becomes_task_after(support, self._task_after)
        rounds = 0
        if "requestState" in params:
            call, rounds = self._resumed(context, params, "tools/call")
        else:
            caller = self._caller(conn, context, params, "tools/call") or Caller(
                self._call_prefix + str(next(self._call_numbers)), context.capabilities
            )
            caller.wants_task = True
            context = evolve(context, caller=caller)
            if isinstance(caller.asker, ResumableCall):
                call = caller.asker
            else:
                call = ResumableCall(caller.id, "tools/call", self.clock)
            deciding, now = race(call, after, self.clock)
            caller.on_upstream_task = now
            call.run(Deferred.fromCoroutine(self._call_tool(conn, context, params)))
        if "requestState" in params:
            deciding, now = race(call, after, self.clock)
        try:
            became_task = await deciding
        except CancelledError:
            # The request went before the call was anything but the request's.
            if not call.promoted:
                call.cancel()
            raise
        if not became_task:
            return self._round(call, context, params, rounds)
        try:
            return self.ext_tasks.adopt(
                task_owner(context, conn.identity),
                call,
                server=server,
                tool=tool or params["name"],
                spell=lambda result: self.spell(result, "tools/call", context),
                describe_error=lambda failure: _task_error(failure, call),
            )
        except (TooManyTasksForClient, TooManyTasks):
            # No room for a task: the call is answered inline, however long it takes.
            await waiting(call, call.cancel)
            return self._round(call, context, params, rounds)

    async def _task_support(
        self, conn: Conn, context: Context, params: dict[str, Any]
    ) -> tuple[str | None, str | None, str | None]:
        """
        The C{execution.taskSupport} of the tool a C{tools/call} names, as this client
        sees it (a pass-through tool's own, C{"optional"} for C{mcpx_call}, nothing for
        the rest), and the server and tool it calls upstream.
        """
        name = params["name"]
        passthrough = self.passthrough_for(conn)
        if passthrough is not None:
            server = await passthrough.tool_owner(context, name)
            if server is not None:
                for tool in await passthrough.tools(context):
                    if tool.get("name") == name:
                        return task_support(tool), server, name
                return None, server, name
        if name == EXEC_TOOL:
            return "optional", None, None
        if name == CALL_TOOL:
            arguments = params.get("arguments")
            called = arguments if type(arguments) is dict else {}
            upstream, called_tool = called.get("server"), called.get("tool")
            return (
                "optional",
                upstream if isinstance(upstream, str) else None,
                called_tool if isinstance(called_tool, str) else None,
            )
        return None, None, None

    async def _list_tools(
        self, conn: Conn, context: Context, params: dict[str, Any]
    ) -> Mapping[str, Any]:
        passthrough = self.passthrough_for(conn)
        if passthrough is not None:
            return self._page("tools/list", await passthrough.tools(context), params)
        return self._page("tools/list", list(self.surface.tool_definitions), params)

    # Calls whose upstream may ask the client something

    def _asks(self, answer: _Method) -> _Method:
        """
        C{answer} for a method whose upstream may ask questions on the way (C{tools/call},
        C{prompts/get}, C{resources/read}): the call carries a L{Caller} when its client
        may be asked or declares upstream on its own, and a 2026-07-28 client is asked
        with C{input_required} and resumes with the C{requestState} it was given.
        """

        method = _METHOD_OF[answer.__name__]

        def asking(
            conn: Conn, context: Context, params: dict[str, Any]
        ) -> Awaitable[Mapping[str, Any]]:
            # A plain function: the common call, with no Caller, costs no extra frame.
            if context.modern and "requestState" in params:
                return self._resume(context, params, method)
            if method == "tools/call" and params.get("name") == "mcpx_call":
                target = params.get("arguments")
                server = target.get("server") if type(target) is dict else None
                if type(server) is str:
                    self._uses(conn, (server,))
            caller = self._caller(conn, context, params, method)
            if caller is None:
                return answer(conn, context, params)
            context = evolve(context, caller=caller)
            answering = _refusing(answer, caller) if caller.strict else answer
            if caller.asker is None:
                return answering(conn, context, params)
            return self._asking(answering, conn, context, params, method)

        asking.__name__ = answer.__name__
        return asking

    async def _asking(
        self,
        answer: _Method,
        conn: Conn,
        context: Context,
        params: dict[str, Any],
        method: str,
    ) -> Mapping[str, Any]:
        """C{answer} for a call whose client may be asked (see L{_asks})."""
        caller = context.caller
        assert isinstance(caller, Caller)

        async def run() -> Mapping[str, Any]:
            return await answer(conn, context, params)

        if context.modern:
            call = caller.asker
            assert isinstance(call, ResumableCall)
            call.run(Deferred.fromCoroutine(run()))
            # Until it asks, the call is the request's: its going cancels the call.
            await waiting(call, lambda: None if call.promoted else call.cancel())
            return self._round(call, context, params, 0)
        # A legacy client is asked on its connection.  If it cancels the call, the
        # call is cancelled upstream and its questions are withdrawn; if it stops
        # waiting otherwise (its connection went) once the call has asked something,
        # the call runs on as a task.
        held = ResumableCall(caller.id, method, self.clock)
        held.run(Deferred.fromCoroutine(run()))
        if context.task is not None:
            # A core task is cancelled by tasks/cancel, and then it stops for good,
            # its questions withdrawn wherever they were put.
            def cancelled() -> None:
                # Withdrawn before the call is cut: the server then hears the answer a
                # withdrawn question gets (cancel), not the cancellation of its wait.
                caller.withdraw()
                held.cancel()

            await waiting(held, cancelled)
            return held.result()  # type: ignore[no-any-return]

        def stopped() -> None:
            if caller.asked and not cancelled_by_peer():
                self._promote(held)
                return
            # Withdrawn first, as above.
            caller.withdraw()
            held.cancel()

        await waiting(held, stopped)
        return held.result()  # type: ignore[no-any-return]

    def _caller(
        self, conn: Conn, context: Context, params: dict[str, Any], method: str
    ) -> Caller | None:
        """
        The L{Caller} of one request, or C{None} when nothing about it needs one (a
        client that declares nothing, outside pass-through and outside a core task: the
        fast path).  A core task always has one, so that cancelling it withdraws the
        questions its call asked (L{Caller.call_ended}).
        """
        capabilities = context.capabilities
        if any(name in capabilities for name in _ABSENT_QUESTIONS.get(context.revision, ())):
            # A capability the revision lacks (elicitation before 2025-06-18) is no
            # promise: such a client has no schema for the question.
            capabilities = {
                name: value
                for name, value in capabilities.items()
                if name not in _ABSENT_QUESTIONS[context.revision]
            }
        askable = (
            self._native
            and bool(capabilities)
            and any(name in capabilities for name in CAPABILITY_FOR.values())
        )
        held = params.get("inputResponses") if context.modern else None
        narrow = self.passthrough_for(conn) is not None
        as_task = context.task is not None
        if not askable and not narrow and not as_task and type(held) is not dict:
            return None
        caller = Caller(
            self._call_prefix + str(next(self._call_numbers)),
            capabilities,
            narrow=narrow,
            held=dict(held) if type(held) is dict else None,
            wants_task=as_task,
            strict=context.modern and narrow,
        )
        if askable:
            if context.modern:
                caller.asker = ResumableCall(caller.id, method, self.clock)
            elif conn.ask is not None:
                caller.asker = ConnAsker(conn, contextvars.copy_context())
                if context.task is not None and self.core_tasks is not None:
                    caller.asker = self.core_tasks.asker_for(context.task, caller.asker)
        return caller

    def _round(
        self, call: ResumableCall, context: Context, params: dict[str, Any], rounds: int
    ) -> Mapping[str, Any]:
        """
        What a 2026-07-28 request is answered once its call has finished or asks.

        @param rounds: the rounds the request's state counted; the call keeps its own
            count too, so resending an older state cannot reset it.
        """
        if call.done:
            if call.abandoned is not None:
                raise RpcError.internal_error(call.abandoned)
            try:
                return call.result()  # type: ignore[no-any-return]
            except CancelledError:
                raise RpcError.internal_error("the call was cancelled before it finished") from None
        rounds = max(rounds, call.rounds) + 1
        call.rounds = rounds
        if rounds > self._ask_rounds:
            call.abandoned = (
                f"the call was still asking after {self._ask_rounds} rounds "
                "(proto.askRounds); it was abandoned"
            )
            call.cancel()
            raise RpcError.internal_error(call.abandoned)
        self._promote(call)
        method = call.method
        state = RequestState(
            call.id,
            binding(method, params),
            rounds,
            self.clock.seconds() + self._state_ttl,
        )
        return {
            "resultType": "input_required",
            "inputRequests": call.asking(),
            "requestState": self._signer.issue(state),
        }

    def _promote(self, call: ResumableCall) -> None:
        """The call asked its client: it outlives the request, as a task until collected."""
        if call.promoted:
            return
        call.promoted = True
        self._resumables[call.id] = call
        tasks = getattr(self.host, "tasks", None)
        if tasks is not None:
            try:
                tasks.adopt(call.id, call.outcome(), lambda failure: _task_error(failure, call))
            except Exception:
                log.failure("the call {call} could not be kept as a task", call=call.id)

        def forget(_: object) -> None:
            # Kept for retries and collection a while after it ends, then forgotten.
            self.clock.callLater(self._ask_ttl, self._resumables.pop, call.id, None)

        call.outcome().addBoth(forget)

    def _resumed(
        self, context: Context, params: dict[str, Any], method: str
    ) -> tuple[ResumableCall, int]:
        """The call a retry's C{requestState} names, given its answers; its rounds."""
        state = self._signer.verify(
            params.get("requestState"), method, params, self.clock.seconds()
        )
        call = self._resumables.get(state.call)
        if call is None:
            raise RpcError.invalid_params(
                "requestState names a call mcpx no longer holds (it ended and was forgotten "
                f"after proto.askTTL, {self._ask_ttl:g}s): send the request again without "
                "requestState"
            )
        responses = params.get("inputResponses")
        if type(responses) is dict:
            call.answer(responses)
        return call, state.rounds

    async def _resume(
        self, context: Context, params: dict[str, Any], method: str
    ) -> Mapping[str, Any]:
        call, rounds = self._resumed(context, params, method)
        # The call is no longer the request's: a retry that goes away leaves it running.
        await waiting(call, lambda: None)
        return self._round(call, context, params, rounds)

    async def _call_tool(
        self, conn: Conn, context: Context, params: dict[str, Any]
    ) -> Mapping[str, Any]:
        relay = None
        if context.progress_token is not None and conn.can_push:
            relay = self._progress_relay(conn, context)
        try:
            result = await self._call_tool_relayed(conn, context, params, relay)
        except BaseException:
            if relay is not None:
                relay.drop()
            raise
        if relay is not None:
            # The latest report held back by a full stream goes out before the answer.
            relay.flush()
        return result

    async def _call_tool_relayed(
        self,
        conn: Conn,
        context: Context,
        params: dict[str, Any],
        relay: _ProgressRelay | None,
    ) -> Mapping[str, Any]:
        on_log = self.surface.log_relay(conn, context)
        passthrough = self.passthrough_for(conn)
        name = params.get("name")
        if passthrough is not None and isinstance(name, str):
            server = await passthrough.tool_owner(context, name)
            if server is not None:
                return await passthrough.call_tool(
                    context, server, name, params, on_progress=relay, on_log=on_log
                )
        return await self.surface.call_tool(context, params, on_progress=relay, on_log=on_log)

    def _progress_relay(self, conn: Conn, context: Context) -> _ProgressRelay:
        """The upstream's progress, passed on to C{conn} with the client's token."""
        assert context.progress_token is not None
        return _ProgressRelay(
            conn,
            context.progress_token,
            conn.flow_for(context.progress_token),
            with_message=field_in("ProgressNotification.message", context.revision),
        )

    async def _list_prompts(
        self, conn: Conn, context: Context, params: dict[str, Any]
    ) -> Mapping[str, Any]:
        passthrough = self.passthrough_for(conn)
        if passthrough is not None:
            return self._page("prompts/list", await passthrough.prompts(context), params)
        return self._page("prompts/list", await self.surface.prompts(context), params)

    async def _get_prompt(
        self, conn: Conn, context: Context, params: dict[str, Any]
    ) -> Mapping[str, Any]:
        on_log = self.surface.log_relay(conn, context)
        passthrough = self.passthrough_for(conn)
        if passthrough is not None:
            return await passthrough.get_prompt(context, params, on_log=on_log)
        return await self.surface.get_prompt(context, params, on_log=on_log)

    async def _list_resources(
        self, conn: Conn, context: Context, params: dict[str, Any]
    ) -> Mapping[str, Any]:
        passthrough = self.passthrough_for(conn)
        if passthrough is not None:
            return self._page("resources/list", await passthrough.resources(context), params)
        return self._page("resources/list", await self.surface.resources(context), params)

    async def _list_templates(
        self, conn: Conn, context: Context, params: dict[str, Any]
    ) -> Mapping[str, Any]:
        passthrough = self.passthrough_for(conn)
        if passthrough is not None:
            items = await passthrough.templates(context)
        else:
            items = await self.surface.templates(context)
        return self._page("resources/templates/list", items, params)

    async def _read_resource(
        self, conn: Conn, context: Context, params: dict[str, Any]
    ) -> Mapping[str, Any]:
        on_log = self.surface.log_relay(conn, context)
        passthrough = self.passthrough_for(conn)
        if passthrough is not None:
            return await passthrough.read_resource(context, params, on_log=on_log)
        return await self.surface.read_resource(context, params, on_log=on_log)

    async def _complete(
        self, conn: Conn, context: Context, params: dict[str, Any]
    ) -> Mapping[str, Any]:
        passthrough = self.passthrough_for(conn)
        if passthrough is not None:
            return await passthrough.complete(context, params)
        return await self.surface.complete(context, params)

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

    # Subscriptions

    async def _subscribe(
        self, conn: Conn, context: Context, params: dict[str, Any]
    ) -> Mapping[str, Any]:
        if not conn.can_push:
            # Not declared to this connection: it has nowhere to receive updates.
            raise RpcError.method_not_found("resources/subscribe")
        uri = params.get("uri")
        if not isinstance(uri, str):
            raise RpcError.invalid_params("params.uri must be a string")
        try:
            server, upstream = await self._subscription_owner(conn, context, uri)
        except UnknownName:
            self._warn(None, f"no updates will be delivered for {uri}: no server owns it")
            return {}
        key = (server, context.identity, upstream)
        bare = not uris.is_mcpx(uri)
        if key in conn.subscriptions:
            self._watchers[key][conn].add(bare)
            return {}
        # Each connection holds its own interest in the pool, which counts them across
        # connections, identities and eras: the last one released unsubscribes upstream.
        pool = self.surface.pool
        session = await self.surface._guard(pool.session(server, context.identity))
        declaration = session.declaration
        if declaration is not None and not declaration.declares("resources.subscribe"):
            self._warn(
                server,
                f"no updates will be delivered for {uri}: server {server!r} does not "
                "offer resource subscriptions",
            )
            return {}
        await self.surface._guard(
            pool.request(server, "resources/subscribe", {"uri": upstream}, client=key[1])
        )
        if key in conn.subscriptions:
            # The same connection subscribed twice at once: one interest is enough.
            self._watchers[key][conn].add(bare)
            self._release_interest(key)
            return {}
        self._watchers.setdefault(key, {}).setdefault(conn, set()).add(bare)
        conn.subscriptions.add(key)
        if conn.closed:
            self._unwatch(conn, key)
        return {}

    async def _unsubscribe(
        self, conn: Conn, context: Context, params: dict[str, Any]
    ) -> Mapping[str, Any]:
        if not conn.can_push:
            raise RpcError.method_not_found("resources/unsubscribe")
        uri = params.get("uri")
        if not isinstance(uri, str):
            raise RpcError.invalid_params("params.uri must be a string")
        try:
            server, upstream = await self._subscription_owner(conn, context, uri)
        except UnknownName:
            return {}
        key = (server, context.identity, upstream)
        if key in conn.subscriptions:
            named = self._watchers[key][conn]
            named.discard(not uris.is_mcpx(uri))
            if not named:
                self._unwatch(conn, key)
        return {}

    async def _subscription_owner(self, conn: Conn, context: Context, uri: str) -> tuple[str, str]:
        passthrough = self.passthrough_for(conn)
        if passthrough is not None:
            return await passthrough.subscription_owner(context, uri)
        return await self.surface.resource_owner(context, uri)

    def visible_tasks(
        self, conn: Conn, context: Context, task_ids: Sequence[str]
    ) -> list[tuple[str, dict[str, Any]]]:
        """The extension tasks of C{task_ids} the caller may see, and their states."""
        if self.ext_tasks is None or not task_ids:
            return []
        owner = task_owner(context, conn.identity)
        found = []
        for task_id in task_ids:
            task = self.ext_tasks.visible(owner, task_id)
            if task is not None:
                found.append((task_id, self.ext_tasks.detailed(task)))
        return found

    async def subscribe_uri(self, conn: Conn, context: Context, uri: str) -> bool:
        """
        Watch C{uri} for C{conn} as C{resources/subscribe} would (for a 2026-07-28
        listen's C{resourceSubscriptions}).

        @return: whether an upstream took the subscription.
        """
        await self._subscribe(conn, context, {"uri": uri})
        try:
            server, upstream = await self._subscription_owner(conn, context, uri)
        except UnknownName:
            return False
        return (server, context.identity, upstream) in conn.subscriptions

    def _unwatch(self, conn: Conn, key: tuple[str, str, str]) -> None:
        conn.subscriptions.discard(key)
        watchers = self._watchers.get(key)
        if watchers is None:
            return
        if watchers.pop(conn, None) is None:
            return
        if not watchers:
            del self._watchers[key]
        self._release_interest(key)

    def _release_interest(self, key: tuple[str, str, str]) -> None:
        """Give back one connection's interest in an upstream resource to the pool."""
        pool = self.host.pool
        if pool is None:
            return
        server, identity, upstream = key
        releasing = Deferred.fromCoroutine(
            pool.request(server, "resources/unsubscribe", {"uri": upstream}, client=identity)
        )
        releasing.addErrback(self._release_failed, server, upstream)

    def _release_failed(self, failure: Failure, server: str, uri: str) -> None:
        log.warn(
            "unsubscribing from {uri} on {server} failed: {why}",
            uri=uri,
            server=server,
            why=failure.getErrorMessage(),
        )

    def watching(self, server: str, uri: str) -> list[Conn]:
        """The connections subscribed to C{uri} of C{server}, through any identity."""
        return [
            conn
            for (owner, _, watched), conns in self._watchers.items()
            if owner == server and watched == uri
            for conn in conns
        ]

    def resource_updated(self, server: str, uri: str) -> int:
        """
        Tell every connection subscribed to C{uri} of C{server} that it changed (for
        whatever hears the upstream's C{notifications/resources/updated}), under the
        name it subscribed by: the C{mcpx://} URI, or the upstream's own in pass-through.

        @return: how many connections were told.
        """
        told = 0
        gateway_name = uris.to_mcpx(server, uri)
        for (owner, _, watched), conns in tuple(self._watchers.items()):
            if owner != server or watched != uri:
                continue
            for conn, named in tuple(conns.items()):
                if conn.push is None or conn.closed:
                    continue
                for bare in sorted(named):
                    conn.push(
                        "notifications/resources/updated", {"uri": uri if bare else gateway_name}
                    )
                told += 1
        return told

    def tools_changed(self, server: str) -> int:
        """L{list_changed} for tools."""
        return self.list_changed(server, "notifications/tools/list_changed")

    def list_changed(self, server: str, method: str) -> int:
        """
        Tell every legacy client mcpx can push to that a list changed (C{method}, one of
        the three C{list_changed} notifications) when that list holds C{server}'s: tools
        where C{server} is passed through to it, prompts and resources everywhere (the
        gateway's merge every server's); the pool has already forgotten the list it cached.

        @return: how many connections were told.
        """
        return self._announce(method, frozenset((server,)))

    def _hears(self, conn: Conn, method: str, servers: frozenset[str]) -> bool:
        """Whether a change of C{servers} changes the list C{method} announces, for C{conn}."""
        if method != TOOLS_CHANGED:
            return True
        passthrough = self.passthrough_named(conn)
        return passthrough is not None and not servers.isdisjoint(passthrough.named)

    def _announce(self, method: str, servers: frozenset[str]) -> int:
        told = 0
        for conn in tuple(self._pushable):
            push = conn.push
            # Declared at initialize, so only to a connection that agreed a revision.
            revision = conn.revision
            if push is None or conn.closed or revision is None:
                continue
            kind = method.split("/")[1]
            if not capability_in("server", f"{kind}.listChanged", revision):
                continue
            if not self._hears(conn, method, servers):
                continue
            # Outside any request's context: it concerns none of the client's requests,
            # so a legacy HTTP session sends it on its GET stream.
            contextvars.Context().run(push, method, None)
            told += 1
        return told

    def configuration_changed(self, report: ReloadReport) -> int:
        """
        A reload changed servers (for L{mcpx.ops.reloading.Reloads}): every host that
        can hear of it is told of each of its lists that may have changed, legacy clients
        on their connection, 2026-07-28 ones on their listens.

        @return: how many notifications went out.
        """
        servers = frozenset(
            (*report.removed, *report.added, *report.changed, *report.policy_changed)
        )
        if not servers:
            return 0
        told = 0
        for method in (TOOLS_CHANGED, PROMPTS_CHANGED, RESOURCES_CHANGED):
            told += self._announce(method, servers)

            def hears(listener: Listener, method: str = method) -> bool:
                conn = listener.conn
                return conn is not None and self._hears(conn, method, servers)

            told += self.listening.announce(method, hears)
        return told

    def upstream_notification(
        self, server: str, method: str, params: Mapping[str, Any] | None
    ) -> None:
        """
        What concerns hosts of a notification an upstream sent (for the pool's
        notification sink): resource updates and, in pass-through, tool list changes.
        """
        if method in LIST_CHANGES:
            # 2026-07-28 clients hear of it on the listens that asked.
            self.listening.heard(server, method)
        if method == "notifications/resources/updated":
            uri = params.get("uri") if params else None
            if isinstance(uri, str):
                self.resource_updated(server, uri)
        elif method in LIST_CHANGES:
            self.list_changed(server, method)

    def _warn(self, server: str | None, message: str) -> None:
        log.warn("{message}", message=message)
        self.host.events.publish("server.log", server, level="warning", data=message)


def _refusing(answer: _Method, caller: Caller) -> _Method:
    """
    C{answer}, failing with the -32021 a question of its upstream was refused with
    (L{Caller.strict}), whatever the upstream answered after the refusal.
    """

    async def refusing(conn: Conn, context: Context, params: dict[str, Any]) -> Mapping[str, Any]:
        try:
            result = await answer(conn, context, params)
        except Exception:
            if caller.refused is not None:
                raise caller.refused from None
            raise
        if caller.refused is not None:
            raise caller.refused
        return result

    refusing.__name__ = answer.__name__
    return refusing


def _legacy(context: Context, revision: Revision) -> Context:
    return Context(
        revision=revision,
        identity=context.identity,
        capabilities=context.capabilities,
        modern=False,
    )


class _ProgressRelay:
    """
    Passes one call's progress on, every report in order: never backwards and nothing
    once the total is reached (the spec forbids both), and nothing else held back
    while the client's stream keeps up.  Only while that stream is backed up (its
    L{Flow} paused by Twisted) does a report wait, and then only the latest one: it
    goes out when the stream drains, or before the answer if that comes first, so a
    host is never left on stale progress and never misses the last report.
    """

    def __init__(
        self, conn: Conn, token: str | int, flow: Flow | None, *, with_message: bool
    ) -> None:
        self._conn = conn
        self._token = token
        self._flow = flow
        self._with_message = with_message
        self._last: float | None = None
        self._finished = False
        self._held: dict[str, Any] | None = None
        self._waiting = False

    def __call__(self, given: dict[str, Any]) -> None:
        progress = given.get("progress")
        if type(progress) is not int and type(progress) is not float:
            return
        if self._finished or (self._last is not None and progress <= self._last):
            return
        total = given.get("total")
        has_total = type(total) is int or type(total) is float
        final = has_total and progress >= float(total)  # type: ignore[arg-type]
        report: dict[str, Any] = {"progressToken": self._token, "progress": progress}
        if has_total:
            report["total"] = total
        message = given.get("message")
        if self._with_message and isinstance(message, str):
            report["message"] = message
        self._last = progress
        self._finished = final
        flow = self._flow
        if not final and flow is not None and flow.paused and not flow.stopped:
            self._held = report
            if not self._waiting:
                self._waiting = True
                flow.when_resumed(self._resumed)
            return
        self._send(report)

    def _resumed(self) -> None:
        self._waiting = False
        self.flush()

    def flush(self) -> None:
        """Send the report held while the stream was backed up, if any."""
        held, self._held = self._held, None
        if held is not None:
            self._send(held)

    def drop(self) -> None:
        """The call ended without an answer worth reporting on: send nothing more."""
        self._held = None
        self._finished = True

    def _send(self, report: dict[str, Any]) -> None:
        # A report sent now supersedes whatever was held.
        self._held = None
        conn = self._conn
        if conn.push is not None and not conn.closed:
            conn.push("notifications/progress", report)
