# -*- test-case-name: tests.upstream.test_session -*-
"""
A 2026-07-28 session: no handshake, the revision and the client's capabilities
restated in every request's C{_meta}, the tools' C{Mcp-Param-*} headers, and the
server's notifications on a C{subscriptions/listen} stream kept open as wanted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Final

from attrs import define, field
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall
from twisted.python.failure import Failure

from mcpx.call import Call
from mcpx.spec.apps import UI_EXTENSION, declared_ui
from mcpx.spec.feature import TASKS_EXTENSION
from mcpx.spec.meta_keys import (
    CLIENT_CAPABILITIES_KEY,
    CLIENT_INFO_KEY,
    PROTOCOL_VERSION_KEY,
    SERVER_INFO_KEY,
)
from mcpx.spec.methods import ACKNOWLEDGED, LISTEN
from mcpx.spec.revision import NEWEST, Era
from mcpx.upstream.records import (
    CLIENT_INFO,
    NotModern,
    ServerDeclaration,
)
from mcpx.upstream.session import UpstreamSession
from mcpx.upstream.tasks import declares_extension
from mcpx.wire.errors import UNSUPPORTED_PROTOCOL_VERSION, RpcError
from mcpx.wire.http_common import InvalidParamHeader, param_header_paths
from mcpx.wire.messages import EncodedTail, Notification, Request, is_mapping, tail_of
from mcpx.wire.peer import NoReply

#: The members a 2026-07-28 request's C{_meta} ends with (L{ModernSession._meta}).
_TAIL_KEYS: Final = frozenset((PROTOCOL_VERSION_KEY, CLIENT_CAPABILITIES_KEY, CLIENT_INFO_KEY))

#: The revision's name, read once: an enum member's C{value} is a Python-level lookup.
_NEWEST_VALUE: Final = NEWEST.value


@define(eq=False)
class ModernSession(UpstreamSession):
    """
    A 2026-07-28 session: no handshake, the revision restated on every request, and
    notifications only on a C{subscriptions/listen} stream.
    """

    era: ClassVar[Era] = Era.MODERN
    #: Seconds to wait before reopening a listen stream the server ended.
    listen_retry: ClassVar[float] = 1.0
    _subscriptions: set[str] = field(init=False, factory=set)
    _listen: Deferred[Any] | None = field(init=False, default=None)
    _reopen: IDelayedCall | None = field(init=False, default=None)
    _listen_filter: dict[str, Any] = field(init=False, factory=dict)
    _closing: bool = field(init=False, default=False)
    acknowledged: Mapping[str, Any] | None = field(init=False, default=None)
    _tool_headers: dict[str, dict[tuple[str, ...], str]] = field(init=False, factory=dict)
    #: The host's declaration, tasks flag and capabilities L{_capabilities_for} made
    #: of them last.
    _last_declared: tuple[Mapping[str, Any], bool, dict[str, Any]] | None = field(
        init=False, default=None
    )
    #: The server declares the tasks extension: mcpx declares it on its calls (L{_meta}).
    _follows_tasks: bool = field(init=False, default=False)
    #: The capabilities L{_meta} last wrote, the members they end a C{_meta} with, and
    #: those members' text (L{EncodedTail}; C{None}: not UTF-8).  Capabilities are never
    #: changed once made (L{_capabilities_for}), so the same object writes the same text.
    _last_tail: tuple[dict[str, Any], dict[str, Any], bytes | None] | None = field(
        init=False, default=None
    )

    def _meta(self, meta: Any, call: Call | None = None, *, tasks: bool = False) -> dict[str, Any]:
        # The caller's own dict is the head of an EncodedTail, which copies it and
        # never changes it; it is copied before anything is added to it.
        head = meta if type(meta) is dict else dict(meta) if is_mapping(meta) else {}
        capabilities = self._capabilities_for(call, tasks)
        tail = self._last_tail
        if tail is None or tail[0] is not capabilities:
            last = {
                PROTOCOL_VERSION_KEY: _NEWEST_VALUE,
                CLIENT_CAPABILITIES_KEY: capabilities,
                CLIENT_INFO_KEY: CLIENT_INFO,
            }
            self._last_tail = tail = (capabilities, last, tail_of(last))
        written = tail[2]
        if written is None or not _TAIL_KEYS.isdisjoint(head):
            merged = dict(head) if head is meta else head
            merged[PROTOCOL_VERSION_KEY] = _NEWEST_VALUE
            merged[CLIENT_CAPABILITIES_KEY] = capabilities
            merged[CLIENT_INFO_KEY] = CLIENT_INFO
            return merged
        # Written after the caller's own members, as assigned one by one: their text,
        # the same for the same capabilities, is written once (EncodedTail).
        return EncodedTail(head, tail[1], written)

    def _spelled(
        self, method: str, params: Mapping[str, Any] | None, call: Call | None
    ) -> dict[str, Any] | None:
        """The params with the revision, capabilities and identity in C{_meta}."""
        spelled = dict(params) if params is not None else {}
        calling = method == "tools/call"
        spelled["_meta"] = self._meta(
            spelled.get("_meta"),
            call,
            tasks=calling and self._follows_tasks,
        )
        if calling and self._tool_headers:
            self._stage_param_headers(spelled)
        return spelled

    async def list_tools(self, *, timeout: float | None = None) -> list[dict[str, Any]]:
        """
        Every tool, following each C{nextCursor}, without the tools whose
        C{x-mcp-header} annotations are invalid: 2026-07-28 tells a client to leave
        those out, so one malformed definition costs only itself.
        """
        listed = await self._list("tools/list", "tools", timeout)
        tools: list[dict[str, Any]] = []
        headers: dict[str, dict[tuple[str, ...], str]] = {}
        for tool in listed:
            if not isinstance(tool, dict):
                continue
            name = tool.get("name")
            try:
                wanted = param_header_paths(tool)
            except InvalidParamHeader as e:
                self.log.warn(
                    "upstream {server}: leaving out the tool {tool!r}: {why}",
                    server=self.name,
                    tool=name,
                    why=str(e),
                )
                continue
            tools.append(tool)
            if wanted and isinstance(name, str):
                headers[name] = wanted
        self._tool_headers = headers
        if not headers:
            # No call stages Mcp-Param-* headers now (_spelled): none are left staged.
            self.channel.negotiated.param_headers = {}
        return self._learn_tools(tools)

    def _stage_param_headers(self, params: Mapping[str, Any]) -> None:
        name = params.get("name")
        wanted = self._tool_headers.get(name) if isinstance(name, str) else None
        if not wanted:
            # Most tools ask for no Mcp-Param-* header (told once a listing by
            # list_tools): nothing to stage, and what an earlier call staged is dropped.
            negotiated = self.channel.negotiated
            if negotiated.param_headers:
                negotiated.param_headers = {}
            return
        arguments = params.get("arguments")
        if not isinstance(arguments, Mapping):
            self.channel.negotiated.param_headers = {}
            return
        values: dict[str, str] = {}
        for path, header in wanted.items():
            value: Any = arguments
            for key in path:
                value = value.get(key) if isinstance(value, Mapping) else None
            if value is not None:
                values[header] = _header_value(value)
        assert isinstance(name, str)
        self.channel.negotiated.param_headers = {name: values}

    def _capabilities_for(self, call: Call | None, tasks: bool) -> dict[str, Any]:
        """
        The client capabilities a request declares upstream (L{_meta}): a pass-through
        call's host's (its C{declared}), or mcpx's own.  A pass-through host restates
        equal ones in each request's own new object, so those last made are kept for
        an equal declaration and tasks flag (one entry a session) and sent again as
        they are: nothing changes a request's C{_meta} once it is spelled.
        """
        if call is None or not call.narrow:
            return self._capabilities_made(call, tasks)
        host = call.capabilities
        last = self._last_declared
        if last is not None and last[1] is tasks and (last[0] is host or last[0] == host):
            made: dict[str, Any] = last[2]
            return made
        made = self._capabilities_made(call, tasks)
        self._last_declared = (host, tasks, made)
        return made

    def _capabilities_made(self, call: Call | None, tasks: bool) -> dict[str, Any]:
        declared = call.declared if call is not None else None
        # The host's own declarations of the extensions mcpx relays travel upstream as it
        # spelled them: MCP Apps, so a server offers its app only to a host that renders
        # one.  mcpx never declares one on a host's behalf.
        ui = declared_ui(call.capabilities) if call is not None else None
        if declared is None and ui is None and not tasks:
            # mcpx's own, nothing added: the handlers' kept object, the same while they
            # declare the same, so its text is written once (_meta's tail).
            return self.handlers.kept_capabilities(NEWEST)
        capabilities = (
            dict(declared) if declared is not None else self.handlers.client_capabilities(NEWEST)
        )
        if ui is not None:
            extensions = capabilities.get("extensions")
            capabilities["extensions"] = {
                **(extensions if isinstance(extensions, Mapping) else {}),
                UI_EXTENSION: dict(ui),
            }
        if tasks:
            # mcpx follows any task the server makes of a call, whoever the caller is.
            extensions = capabilities.get("extensions")
            capabilities["extensions"] = {
                **(extensions if isinstance(extensions, Mapping) else {}),
                TASKS_EXTENSION: {},
            }
        return capabilities

    async def open(self, timeout: float | None = None) -> ServerDeclaration:
        """
        C{server/discover}: read C{supportedVersions}, capabilities, instructions and the
        server's identity.  A C{-32022} naming 2026-07-28 among the supported versions is
        tried once more; one that does not is refused with what the server speaks.
        """
        self.channel.negotiated.modern = True
        self.channel.negotiated.revision = NEWEST
        try:
            result = await self.request("server/discover", {}, timeout=timeout)
        except RpcError as e:
            if e.code != UNSUPPORTED_PROTOCOL_VERSION:
                raise
            supported = _supported_versions(e.data)
            if NEWEST.value not in supported:
                raise NotModern(
                    self.name,
                    f"the server does not speak {NEWEST.value}; it supports "
                    + (", ".join(supported) or "nothing it named"),
                    supported,
                ) from None
            result = await self.request("server/discover", {}, timeout=timeout)
        return self._declare(result)

    def _declare(self, result: Mapping[str, Any]) -> ServerDeclaration:
        supported = result.get("supportedVersions")
        if not isinstance(supported, list) or NEWEST.value not in supported:
            raise NotModern(
                self.name,
                f"server/discover lists supportedVersions {supported!r}, without {NEWEST.value}",
                [v for v in supported if isinstance(v, str)] if isinstance(supported, list) else (),
            )
        meta = result.get("_meta")
        server_info = meta.get(SERVER_INFO_KEY) if isinstance(meta, Mapping) else None
        self.declaration = ServerDeclaration.read(NEWEST, result, server_info)
        self._follows_tasks = declares_extension(self.declaration.capabilities)
        self._update_listen()
        return self.declaration

    def close(self) -> Deferred[None]:
        self._closing = True
        if self._reopen is not None and self._reopen.active():
            self._reopen.cancel()
        self._reopen = None
        if self._listen is not None:
            self._listen.cancel()
            self._listen = None
        return UpstreamSession.close(self)

    def _server_request(self, request: Request) -> object:
        if self.lenient:
            return UpstreamSession._server_request(self, request)
        # 2026-07-28 has no server-to-client requests: a client answering one would be
        # talking a protocol that does not exist, so it is logged and left unanswered.
        self.log.warn(
            "upstream {server} sent a {method} request, which 2026-07-28 does not have; "
            "not answered",
            server=self.name,
            method=request.method,
        )
        raise NoReply()

    def _server_notification(self, notification: Notification) -> None:
        if notification.method == ACKNOWLEDGED:
            params = notification.params if isinstance(notification.params, Mapping) else {}
            granted = params.get("notifications")
            self.acknowledged = granted if isinstance(granted, Mapping) else {}
            return
        UpstreamSession._server_notification(self, notification)

    # subscriptions/listen upkeep

    def _wanted_filter(self) -> dict[str, Any]:
        declaration = self.declaration
        wanted: dict[str, Any] = {}
        if declaration is None:
            return wanted
        if declaration.declares("tools.listChanged"):
            wanted["toolsListChanged"] = True
        if declaration.declares("prompts.listChanged"):
            wanted["promptsListChanged"] = True
        if declaration.declares("resources.listChanged"):
            wanted["resourcesListChanged"] = True
        if self._subscriptions and declaration.declares("resources.subscribe"):
            wanted["resourceSubscriptions"] = sorted(self._subscriptions)
        return wanted

    def _update_listen(self) -> None:
        """Open, reopen or close the listen stream so it asks for what is wanted now."""
        self._reopen = None
        if self._closing:
            return
        wanted = self._wanted_filter()
        if wanted == self._listen_filter and self._listen is not None:
            return
        previous, self._listen = self._listen, None
        self._listen_filter = wanted
        if previous is not None:
            previous.cancel()
        if not wanted:
            return
        self.acknowledged = None
        listening = Deferred.fromCoroutine(self.request(LISTEN, {"notifications": wanted}))
        self._listen = listening
        listening.addBoth(self._listen_ended, listening)

    def _listen_ended(self, outcome: object, listening: Deferred[Any]) -> None:
        if self._listen is not listening:
            return None  # replaced or cancelled on purpose
        self._listen = None
        self._listen_filter = {}
        if self._closing:
            return None
        if isinstance(outcome, Failure):
            self.log.warn(
                "upstream {server}: subscriptions/listen ended: {why}; reopening",
                server=self.name,
                why=outcome.getErrorMessage(),
            )
        # Reopened after a pause either way: a server that ends every stream at once
        # must not be answered with a tight loop of new ones.
        if self._reopen is None or not self._reopen.active():
            self._reopen = self.clock.callLater(self.listen_retry, self._update_listen)
        return None

    async def subscribe(self, uri: str) -> None:
        self._subscriptions.add(uri)
        self._update_listen()

    async def unsubscribe(self, uri: str) -> None:
        self._subscriptions.discard(uri)
        self._update_listen()


def _supported_versions(data: Any) -> list[str]:
    supported = data.get("supported") if isinstance(data, Mapping) else None
    if not isinstance(supported, Sequence) or isinstance(supported, str):
        return []
    return [v for v in supported if isinstance(v, str)]


def _header_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
