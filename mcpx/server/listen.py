# -*- test-case-name: tests.server.test_listen -*-
"""
C{subscriptions/listen}: how a 2026-07-28 client, which has no session, hears of changes.

The client names what it wants in C{params.notifications} (a C{SubscriptionFilter}):
C{toolsListChanged}, C{promptsListChanged}, C{resourcesListChanged} and
C{resourceSubscriptions} (URIs whose C{notifications/resources/updated} it wants).
The request stays open; on Streamable HTTP its response is an event stream.

  - First comes C{notifications/subscriptions/acknowledged}, whose C{notifications}
    holds the part of the filter mcpx honours: the list changes it declared to that
    client (L{mcpx.server.dispatch.McpServer.capabilities}: in pass-through, where
    the lists are the upstreams' and change with theirs), and the URIs an upstream
    took the subscription for.  Nothing else goes out before it.
  - Then only what was honoured: an upstream's C{tools/list_changed} when it is one
    of the client's pass-through servers, any upstream's C{prompts/list_changed} and
    C{resources/list_changed} (the lists merge every server's), and the updates of
    the URIs named, under the name the client used.  Progress and log messages never
    go on the stream.
  - C{taskIds} (the tasks extension's): the acknowledgement lists those the caller
    can see; each one's C{notifications/tasks} follows at once with its state, then
    one on every change (L{Listening.task_changed}).
  - Every message carries C{_meta["io.modelcontextprotocol/subscriptionId"]}, the
    listen request's id.
  - The client ends it by going away (closing the HTTP response; on stdio,
    C{notifications/cancelled}): its upstream subscriptions are released.  mcpx ends
    it when the daemon stops, answering C{resultType: complete} with the
    subscription id in C{_meta}.

Through the gateway (no pass-through) the tools never change, but the prompts and
resources (every server's, merged) change with the upstreams' and with each reload:
C{promptsListChanged} and C{resourcesListChanged} are offered with resource
subscriptions for C{mcpx://} URIs.  A reload that changes a server is announced on every
listen that carries the lists it may have changed (L{Listening.announce}).  A legacy
client has its own ways (the initialize handshake's notifications), but a listen it
sends is served all the same where mcpx can push to it (stdio, a Streamable HTTP
session), as the seed's "accept liberally" asks; it is never declared to it.

Keep-alive comments and the stream itself are the transport's
(L{mcpx.server.http_exchange.Exchange}, every C{transport.sseKeepAlive} of silence).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Final, Protocol

from attrs import frozen
from twisted.internet.defer import Deferred
from twisted.logger import Logger

from mcpx.server.conn import Conn, Context, Push
from mcpx.server.flow import Flow, Notices
from mcpx.spec.feature import TASKS_EXTENSION
from mcpx.spec.meta_keys import SUBSCRIPTION_ID_KEY
from mcpx.spec.methods import (
    ACKNOWLEDGED,
    LISTEN,
    PROMPTS_CHANGED,
    RESOURCE_UPDATED,
    RESOURCES_CHANGED,
    TOOLS_CHANGED,
)
from mcpx.spec.revision import Revision
from mcpx.wire.errors import RpcError
from mcpx.wire.messages import RequestId

if TYPE_CHECKING:
    from mcpx.server.passthrough import PassThrough

log = Logger()


#: The tasks extension's notification of a task's state (a C{DetailedTask}).
TASK_STATE: Final = "notifications/tasks"

#: The list changes a listen may carry.
LIST_CHANGES: Final = frozenset((TOOLS_CHANGED, PROMPTS_CHANGED, RESOURCES_CHANGED))

#: Each list-change field of a filter: the capability that offers it, its notification.
_LIST_FIELDS: Final = (
    ("toolsListChanged", "tools", TOOLS_CHANGED),
    ("promptsListChanged", "prompts", PROMPTS_CHANGED),
    ("resourcesListChanged", "resources", RESOURCES_CHANGED),
)
_URIS_FIELD: Final = "resourceSubscriptions"
_TASKS_FIELD: Final = "taskIds"


class ListenHost(Protocol):
    """What a listen needs of the MCP server (L{mcpx.server.dispatch.McpServer})."""

    def open(self, conn: Conn) -> Conn: ...

    def close(self, conn: Conn) -> None: ...

    def capabilities(self, conn: Conn, revision: Revision, *, modern: bool) -> dict[str, Any]: ...

    def passthrough_for(self, conn: Conn) -> PassThrough | None: ...

    def subscribe_uri(self, conn: Conn, context: Context, uri: str) -> Awaitable[bool]: ...

    def visible_tasks(
        self, conn: Conn, context: Context, task_ids: Sequence[str]
    ) -> list[tuple[str, dict[str, Any]]]:
        """The tasks of C{task_ids} this caller may see, with their C{DetailedTask}s."""
        ...


@frozen
class SubscriptionFilter:
    """
    What a listen asks for, or what mcpx honours of it.

    @ivar methods: the list-change notifications.
    @ivar uris: the resources whose updates, in the order named, without repeats.
    @ivar task_ids: the tasks (of the tasks extension) whose changes, likewise.
    """

    methods: frozenset[str] = frozenset()
    uris: tuple[str, ...] = ()
    task_ids: tuple[str, ...] = ()

    @classmethod
    def parse(cls, params: Mapping[str, Any]) -> SubscriptionFilter:
        """
        The filter of a listen's params.

        @raise RpcError: C{-32602} when C{notifications} is not an object, a flag not a
            boolean, or C{resourceSubscriptions} not a list of strings.  Fields mcpx
            does not know (an extension's) are ignored, so never acknowledged.
        """
        wanted = params.get("notifications")
        if type(wanted) is not dict:
            raise RpcError.invalid_params("params.notifications must be an object")
        methods = set()
        for key, _, method in _LIST_FIELDS:
            flag = wanted.get(key, False)
            if type(flag) is not bool:
                raise RpcError.invalid_params(f"params.notifications.{key} must be a boolean")
            if flag:
                methods.add(method)
        uris = wanted.get(_URIS_FIELD, [])
        if type(uris) is not list or not all(isinstance(uri, str) for uri in uris):
            raise RpcError.invalid_params(
                f"params.notifications.{_URIS_FIELD} must be a list of strings"
            )
        task_ids = wanted.get(_TASKS_FIELD, [])
        if type(task_ids) is not list or not all(isinstance(task, str) for task in task_ids):
            raise RpcError.invalid_params(
                f"params.notifications.{_TASKS_FIELD} must be a list of strings"
            )
        return cls(frozenset(methods), tuple(dict.fromkeys(uris)), tuple(dict.fromkeys(task_ids)))

    def offered(self, capabilities: Mapping[str, Any]) -> SubscriptionFilter:
        """The part of this filter C{capabilities} (a server declaration) covers."""
        methods = {
            method
            for _, kind, method in _LIST_FIELDS
            if method in self.methods and _declares(capabilities, kind, "listChanged")
        }
        uris = self.uris if _declares(capabilities, "resources", "subscribe") else ()
        extensions = capabilities.get("extensions")
        tasks = isinstance(extensions, Mapping) and TASKS_EXTENSION in extensions
        return SubscriptionFilter(frozenset(methods), uris, self.task_ids if tasks else ())

    def to_json(self) -> dict[str, Any]:
        """The filter as C{SubscriptionFilter} spells it, with only what it holds."""
        spelled: dict[str, Any] = {
            key: True for key, _, method in _LIST_FIELDS if method in self.methods
        }
        if self.uris:
            spelled[_URIS_FIELD] = list(self.uris)
        if self.task_ids:
            spelled[_TASKS_FIELD] = list(self.task_ids)
        return spelled


def _declares(capabilities: Mapping[str, Any], kind: str, flag: str) -> bool:
    declared = capabilities.get(kind)
    return isinstance(declared, Mapping) and declared.get(flag) is True


def offers_any(capabilities: Mapping[str, Any]) -> bool:
    """Whether a declaration gives a listen anything to deliver."""
    return any(_declares(capabilities, kind, "listChanged") for _, kind, _ in _LIST_FIELDS) or (
        _declares(capabilities, "resources", "subscribe")
    )


class Listener:
    """
    One open listen: tags what it carries with its subscription id, lets through only
    what was honoured, and holds everything until the acknowledgement has gone.

    @ivar subscription_id: the listen request's id.
    @ivar granted: what it carries.
    @ivar conn: the connection its resource subscriptions are held by (whose push is
        L{deliver}).
    @ivar ended: fires when mcpx ends the listen (not when the client goes away).
    """

    def __init__(
        self,
        subscription_id: RequestId,
        send: Push,
        owns_tools: Callable[[str], bool],
        flow: Flow | None = None,
        notices: Notices | None = None,
    ) -> None:
        """
        @param flow: the back-pressure of the stream it goes on, if known: while it is
            backed up, only the latest of each notice waits (L{Notices}).
        """
        self.subscription_id = subscription_id
        self._flow = flow
        self._notices = notices if notices is not None else Notices()
        self.granted = SubscriptionFilter()
        self.conn: Conn | None = None
        self.ended: Deferred[None] = Deferred()
        self._send = send
        self._owns_tools = owns_tools
        self._allowed: frozenset[str] = frozenset()
        self._held: list[tuple[str, dict[str, Any]]] | None = []
        self._open = True

    def _tagged(self, params: Mapping[str, Any] | None) -> dict[str, Any]:
        tagged = dict(params) if params else {}
        meta = tagged.get("_meta")
        tagged["_meta"] = {
            **(meta if isinstance(meta, Mapping) else {}),
            SUBSCRIPTION_ID_KEY: self.subscription_id,
        }
        return tagged

    def deliver(self, method: str, params: Mapping[str, Any] | None) -> None:
        """Send C{method} on the stream, if it was asked for and honoured."""
        if not self._open:
            return
        if self._held is not None:
            # Judged when the acknowledgement says what is honoured.
            self._held.append((method, self._tagged(params)))
            return
        if self._carries(method, params):
            tagged = self._tagged(params)
            notice = _notice(method, params)
            if notice is None:
                self._send(method, tagged)
            else:
                # Each listen's own: two on one stream are each told.
                self._notices.send(
                    self._flow, (id(self), notice), partial(self._send_open, method, tagged)
                )

    def _send_open(self, method: str, params: dict[str, Any]) -> None:
        if self._open:
            self._send(method, params)

    def _carries(self, method: str, params: Mapping[str, Any] | None) -> bool:
        if method == TASK_STATE:
            return params is not None and params.get("taskId") in self.granted.task_ids
        return method in self._allowed or (method == RESOURCE_UPDATED and bool(self.granted.uris))

    def acknowledge(self, granted: SubscriptionFilter) -> None:
        """Send the acknowledgement of C{granted}, then what waited for it."""
        if not self._open:
            # Ended while it was being set up: the answer is all that goes out.
            return
        self.granted = granted
        self._allowed = granted.methods
        held, self._held = self._held, None
        self._send(ACKNOWLEDGED, self._tagged({"notifications": granted.to_json()}))
        for method, params in held or ():
            if self._carries(method, params):
                self._send(method, params)

    def watches_task(self, task_id: str) -> bool:
        return self._open and (self._held is not None or task_id in self.granted.task_ids)

    def carries_change(self, method: str) -> bool:
        """Whether the list change C{method} was asked for and honoured (or still may be)."""
        return self._open and (self._held is not None or method in self._allowed)

    def heard(self, server: str, method: str) -> bool:
        """An upstream's list change: delivered if this listen carries it from C{server}."""
        if method not in self._allowed:
            return False
        if method == TOOLS_CHANGED and not self._owns_tools(server):
            return False
        self.deliver(method, None)
        return True

    def end(self) -> None:
        """mcpx ends the listen: its request answers."""
        self.close()
        if not self.ended.called:
            self.ended.callback(None)

    def close(self) -> None:
        """Nothing more goes out."""
        self._open = False
        self._held = None


def _notice(method: str, params: Mapping[str, Any] | None) -> Hashable | None:
    """
    What C{method} says that a later one of the same would say again (L{Notices}), or
    C{None} for a notification each of which must go.
    """
    if method in LIST_CHANGES:
        return method
    if method == RESOURCE_UPDATED and params is not None:
        return (method, str(params.get("uri")))
    if method == TASK_STATE and params is not None:
        return (method, str(params.get("taskId")))
    return None


class Listening:
    """The open listens of one MCP server."""

    def __init__(self) -> None:
        self._open: set[Listener] = set()
        self._notices = Notices()

    def __len__(self) -> int:
        return len(self._open)

    async def listen(
        self,
        host: ListenHost,
        conn: Conn,
        context: Context,
        request_id: RequestId,
        params: Mapping[str, Any],
    ) -> dict[str, Any]:
        """
        Serve one C{subscriptions/listen} until mcpx ends it.

        @return: the result that ends it gracefully (the subscription id in C{_meta}).
        @raise RpcError: C{-32601} for a server with nothing to offer; C{-32602} for a
            malformed filter; C{-32600} where the transport cannot carry a stream (the
            client does not accept one, or a legacy one has no connection to push to).
        @raise CancelledError: when the client goes away (the listen is cleaned up).
        """
        # A legacy client's listen is offered what a 2026-07-28 client's would be.
        capabilities = host.capabilities(conn, Revision.V2026_07_28, modern=True)
        if not offers_any(capabilities):
            raise RpcError.method_not_found(LISTEN)
        wanted = SubscriptionFilter.parse(params)
        push = conn.push
        if push is None or conn.closed:
            if not context.modern:
                raise RpcError.invalid_request(
                    f"{LISTEN} needs a connection mcpx can send notifications on: stdio, "
                    "or a Streamable HTTP session with its GET stream"
                )
            raise RpcError.invalid_request(
                f"{LISTEN} answers with an event stream: accept text/event-stream"
            )
        offered = wanted.offered(capabilities)
        passthrough = host.passthrough_for(conn)
        listener = Listener(
            request_id,
            push,
            lambda server: passthrough is not None and passthrough.passed.owns(server),
            conn.flow_for(None),
            self._notices,
        )
        # A connection of its own holds the listen's resource subscriptions, so what
        # the server pushes to them comes through the listener, tagged, and they are
        # released with it.
        listener.conn = host.open(
            Conn(conn.transport, conn.identity, push=listener.deliver, passthrough=conn.passthrough)
        )
        self._open.add(listener)
        try:
            honoured: list[str] = []
            for uri in offered.uris:
                if await self._subscribe(host, listener.conn, context, uri):
                    honoured.append(uri)
            visible = host.visible_tasks(conn, context, offered.task_ids)
            listener.acknowledge(
                SubscriptionFilter(
                    offered.methods, tuple(honoured), tuple(task_id for task_id, _ in visible)
                )
            )
            # Each task's state as it is now, then every change (L{task_changed}).
            for _, state in visible:
                listener.deliver(TASK_STATE, state)
            await listener.ended
        finally:
            listener.close()
            self._open.discard(listener)
            host.close(listener.conn)
        return {"_meta": {SUBSCRIPTION_ID_KEY: request_id}}

    async def _subscribe(self, host: ListenHost, conn: Conn, context: Context, uri: str) -> bool:
        try:
            return await host.subscribe_uri(conn, context, uri)
        except RpcError as e:
            log.warn("subscriptions/listen: no updates for {uri}: {why}", uri=uri, why=e.message)
            return False

    def heard(self, server: str, method: str) -> int:
        """
        An upstream's list change (for the pool's notification sink): passed on to
        every listen that carries it.

        @return: how many listens were told.
        """
        if not self._open:
            return 0
        return sum(listener.heard(server, method) for listener in tuple(self._open))

    def task_changed(self, task_id: str, state: Callable[[], dict[str, Any]]) -> int:
        """
        A task of the tasks extension changed: C{notifications/tasks} with its
        C{DetailedTask} (made by C{state}, once) on every listen that names it.

        @return: how many listens were told.
        """
        told = 0
        shown: dict[str, Any] | None = None
        for listener in tuple(self._open):
            if listener.watches_task(task_id):
                if shown is None:
                    shown = state()
                listener.deliver(TASK_STATE, shown)
                told += 1
        return told

    def announce(self, method: str, hears: Callable[[Listener], bool]) -> int:
        """
        A list change mcpx itself made (a reload): passed on to every listen that
        carries C{method} and for which C{hears} says the change concerns it.

        @return: how many listens were told.
        """
        told = 0
        for listener in tuple(self._open):
            if listener.carries_change(method) and hears(listener):
                listener.deliver(method, None)
                told += 1
        return told

    def end_all(self) -> None:
        """End every listen gracefully (the daemon is stopping)."""
        for listener in tuple(self._open):
            listener.end()
