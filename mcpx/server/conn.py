# -*- test-case-name: tests.server.test_dispatch -*-
"""
One connection from a host to mcpx as an MCP server, and what one request on it carries.

A L{Conn} is made by a transport (L{mcpx.server.dispatch.McpServer.open}) for each stdio
stream, each legacy Streamable HTTP session, each sessionless legacy POST and each
2026-07-28 HTTP request.  It holds what a legacy handshake agreed (the revision, the
client's capabilities and identity) and how mcpx can reach the client outside a
response: L{Conn.push} for notifications, L{Conn.ask} for requests.

A 2026-07-28 request agrees on nothing with the connection: it restates everything in
its C{_meta}, read into a L{Context} for that request alone.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeAlias

from attrs import define, field
from twisted.internet.defer import Deferred

from mcpx.auth.caller import subject_identity
from mcpx.call import Call
from mcpx.server.flow import Flow
from mcpx.spec.revision import UNDECLARED, Revision
from mcpx.tasks.task import Task
from mcpx.wire.messages import RequestId

Push: TypeAlias = Callable[[str, "dict[str, Any] | None"], None]
Ask: TypeAlias = Callable[[str, "dict[str, Any]"], "Deferred[Any]"]
FlowFor: TypeAlias = Callable[["str | int | None"], "Flow | None"]
#: Tells a connection's peer which call the request it handles under an id is.
Calling: TypeAlias = Callable[[RequestId, Call], None]
#: How the MCP server answers one method: the connection, the request's context and
#: its params in, the result in the newest shape out.
Method: TypeAlias = Callable[["Conn", "Context", "dict[str, Any]"], "Awaitable[Mapping[str, Any]]"]
#: A request header's value by name (case-insensitive), trimmed of surrounding
#: whitespace, or C{None} when the request has no such header.
HeaderSource: TypeAlias = Callable[[str], "str | None"]


if TYPE_CHECKING:
    from attrs import frozen as _made_once
else:
    # Frozen to the type checker, a plain slotted class at run time (made_once says why).
    from mcpx.wire.messages import made_once as _made_once


def _no_flow(token: str | int | None) -> Flow | None:
    return None


#: The transports a connection may come from.
STDIO: Final = "stdio"
HTTP_SESSION: Final = "http-session"
HTTP_POST: Final = "http-post"
HTTP_MODERN: Final = "http-modern"
TRANSPORTS: Final = frozenset((STDIO, HTTP_SESSION, HTTP_POST, HTTP_MODERN))


class Reply(Protocol):
    """
    The stream one request is answered on, where it can carry more than the answer and
    the transport hands it over with the request (a legacy Streamable HTTP session's
    POST): what the request's call pushes and asks goes on it while it is open, and
    where the connection sends the rest once it is not.
    """

    def push(self, method: str, params: dict[str, Any] | None) -> None: ...

    def ask(self, method: str, params: dict[str, Any]) -> Deferred[Any]: ...

    def flow(self) -> Flow | None:
        """The L{Flow} of what is pushed about the request (L{Conn.flow_for})."""


@define(eq=False)
class Conn:
    """
    One connection.

    @ivar transport: one of L{TRANSPORTS}.
    @ivar identity: who is at the other end when the client names nobody (the host
        process on stdio, the C{Mcp-Session-Id} of a legacy HTTP session); see
        C{spec/identity.md}.
    @ivar revision: the legacy revision agreed by C{initialize}, or C{None} before one.
    @ivar default_revision: the revision of a request when nothing was declared:
        2024-11-05, or 2025-03-26 for a Streamable HTTP request without a header.
    @ivar client_capabilities: what C{initialize} declared.
    @ivar initialized: the client sent C{notifications/initialized}.
    @ivar log_level: set by C{logging/setLevel}, or C{None}.
    @ivar push: sends the client a notification, where the connection can.
    @ivar ask: sends the client a request (legacy only), where the connection can.
    @ivar flow_for: the L{Flow} of the stream that carries the notifications about the
        request with a progress token (C{None}: about the request being handled, asked
        from within its handling), when the transport tells of back-pressure.
    @ivar passthrough: the servers this connection asked to have offered under their own
        names (C{mcpx serve --passthrough}), or C{None} for the daemon's C{mcp.passthrough}.
    @ivar subject: the access token's subject the connection's requests came with
        (C{daemon.auth} C{oauth}), or C{None}: it scopes the sessions its requests name
        and is signed into the C{requestState} they are handed.
    @ivar calling: tells the connection's peer the call a request is handled as
        (L{mcpx.wire.peer.RpcPeer.calling}), so that the client's
        C{notifications/cancelled} withdraws it, where the client can cancel a request.
    @ivar headers: the HTTP request headers of a 2026-07-28 request's own connection,
        where the transport hands them over (a C{tools/call} on C{/mcp}), carried into
        its L{Context}; else C{None}.
    """

    transport: str
    identity: str
    push: Push | None = None
    ask: Ask | None = None
    default_revision: Revision = UNDECLARED
    revision: Revision | None = None
    client_capabilities: Mapping[str, Any] = field(factory=dict)
    initialized: bool = False
    log_level: str | None = None
    closed: bool = False
    passthrough: tuple[str, ...] | None = None
    flow_for: FlowFor = _no_flow
    subject: str | None = None
    calling: Calling | None = None
    headers: HeaderSource | None = None
    #: The resources this connection subscribed to: (server, caller identity, upstream URI).
    subscriptions: set[tuple[str, str, str]] = field(factory=set)

    def __attrs_post_init__(self) -> None:
        if self.transport not in TRANSPORTS:
            raise ValueError(
                f"unknown transport {self.transport!r}; one of {', '.join(sorted(TRANSPORTS))}"
            )

    @property
    def can_push(self) -> bool:
        """Whether mcpx can send this client a notification outside a response."""
        return self.push is not None and not self.closed


@_made_once
class Context:
    """
    What one request is served with: made once and never changed (L{with_call} and
    C{attrs.evolve} make another).

    @ivar revision: the revision its answer is spelled for.
    @ivar identity: the caller, for C{client}-scoped upstream servers.
    @ivar capabilities: the client's capabilities in force for this request.
    @ivar modern: whether it came with 2026-07-28 C{_meta} (stateless).
    @ivar progress_token: the C{_meta.progressToken} it asked progress for.
    @ivar log_level: the level of log messages it asked for, or C{None}.
    @ivar call: the L{mcpx.call.Call} its upstream requests are made
        for, when its client may be asked questions or declares upstream on its own.
    @ivar task: the L{mcpx.tasks.store.Task} a task-augmented call runs as, or C{None}.
    @ivar owner: who owns what the request leaves behind (a run's artifacts) when that
        is not C{identity}: a 2026-07-28 request's identity is a scope of that request
        alone, so what it leaves is its connection's (or its named session's), and a
        later request can read it.
    @ivar subject: the access token's subject of its connection, or C{None}.
    @ivar request_id: a legacy request's JSON-RPC id, by which its client may cancel it.
    @ivar headers: the HTTP request headers it came with, where the transport hands
        them over (a 2026-07-28 C{tools/call} on C{/mcp}: its C{Mcp-Param-*} headers
        are checked, L{mcpx.server.param_headers}); else C{None}.
    @ivar reply: the stream it is answered on, where the transport handed one over
        (L{Reply}): its call's questions and log messages go there; else C{None}, and
        they go where its connection sends them.
    """

    revision: Revision
    identity: str
    capabilities: Mapping[str, Any]
    modern: bool
    progress_token: str | int | None = None
    log_level: str | None = None
    call: Call | None = None
    task: Task | None = None
    owner: str | None = None
    subject: str | None = None
    request_id: RequestId | None = None
    headers: HeaderSource | None = None
    reply: Reply | None = None

    def with_call(self, call: Call) -> Context:
        """
        This context with C{call}: C{attrs.evolve(self, call=call)}, made at the cost of
        a plain construction (it runs for every call that goes upstream, and C{evolve}
        looks its fields up each time).
        """
        return Context(
            self.revision,
            self.identity,
            self.capabilities,
            self.modern,
            self.progress_token,
            self.log_level,
            call,
            self.task,
            self.owner,
            self.subject,
            self.request_id,
            self.headers,
            self.reply,
        )

    @property
    def artifact_owner(self) -> str:
        """Whose the artifacts this request makes or reads are."""
        return self.owner if self.owner is not None else self.identity

    @property
    def holder(self) -> str | None:
        """
        The caller identity of the access token's subject it came with (an op's
        L{mcpx.ops.host.Invocation.holder}), or C{None} for the daemon's owner.
        """
        return subject_identity(self.subject) if self.subject is not None else None
