# -*- test-case-name: tests.upstream.test_session -*-
"""
A session with a server of the handshake era (2024-11-05 … 2025-11-25):
C{initialize} once, the server's own requests answered, a session the server forgot
opened again, and 2025-11-25 tasks for the tools that want them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Final

from attrs import define, field
from twisted.internet.defer import TimeoutError as DeferredTimeout

from mcpx.call import Call
from mcpx.spec.methods import SUBSCRIBE, UNSUBSCRIBE
from mcpx.spec.revision import LEGACY_REVISIONS, NEWEST_LEGACY, Era, Revision
from mcpx.upstream.channel import SessionExpired
from mcpx.upstream.records import (
    CLIENT_INFO,
    AnsweredModern,
    AnsweredWithoutRevision,
    ServerDeclaration,
    UpstreamError,
)
from mcpx.upstream.session import Sending, UpstreamSession
from mcpx.upstream.tasks import (
    call_legacy_task,
    declares_tool_tasks,
    runs_as_task,
)

#: How long opening a legacy session waits for the server's own message stream.
SERVER_STREAM_WAIT = 2.0


#: The requests that change nothing on the server, so may be sent again.
REPEATABLE_METHODS: Final = frozenset(
    {
        "ping",
        "tools/list",
        "prompts/list",
        "prompts/get",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "completion/complete",
    }
)


@define(eq=False)
class LegacySession(UpstreamSession):
    """A session that shook hands with C{initialize} (2024-11-05 … 2025-11-25)."""

    era: ClassVar[Era] = Era.LEGACY
    #: The revision C{initialize} offers: the newest, unless the server entry pins
    #: another (C{protocol}).
    offered: Revision = field(default=NEWEST_LEGACY, kw_only=True)
    _subscriptions: set[str] = field(init=False, factory=set)
    #: The tools the server annotated C{idempotentHint: true} when last listed.
    _idempotent_tools: frozenset[str] = field(init=False, factory=frozenset)

    async def open(self, timeout: float | None = None) -> ServerDeclaration:
        """
        C{initialize} offering L{offered} (the newest legacy revision unless pinned),
        then C{notifications/initialized}.

        @raise UpstreamError: if the server answers with a revision mcpx does not speak.
        """
        self.channel.negotiated.modern = False
        self.channel.negotiated.revision = None
        offered = self.offered
        result = await self.rpc.request(
            "initialize",
            {
                "protocolVersion": offered.value,
                "capabilities": self.handlers.client_capabilities(offered),
                "clientInfo": dict(CLIENT_INFO),
            },
            timeout=timeout,
            send_cancel=False,
        )
        if not isinstance(result, dict):
            raise UpstreamError(self.name, "initialize answered with a non-object result")
        answered = result.get("protocolVersion")
        revision = Revision.find(answered)
        if revision is None or revision not in LEGACY_REVISIONS:
            speaks = ", ".join(r.value for r in LEGACY_REVISIONS)
            kind: type[UpstreamError] = AnsweredModern
            if revision is None:
                kind = AnsweredWithoutRevision if answered is None else UpstreamError
            raise kind(
                self.name,
                f"initialize answered protocol version {answered!r}, which mcpx cannot use "
                f"with a handshake (it speaks {speaks})",
            )
        self.declaration = ServerDeclaration.read(revision, result, result.get("serverInfo"))
        self.channel.negotiated.revision = revision
        self.rpc.allow_batches = revision is Revision.V2025_03_26
        self.rpc.notify("notifications/initialized")
        ready = self.channel.initialized()
        if ready is not None:
            # Bounded: a server slow to answer its GET stream must not hold the session.
            ready.addTimeout(SERVER_STREAM_WAIT, self.clock)
            try:
                await ready
            except DeferredTimeout:
                self.log.info(
                    "upstream {server}: its stream for server messages is slow to open",
                    server=self.name,
                )
        return self.declaration

    async def _sent_again(self, expired: SessionExpired, request: Sending) -> Any:
        """
        The server forgot the session a request went on: it is opened again once (and
        its resource subscriptions made again), and the request sent again only if the
        server cannot have started it or it is safe to repeat (L{repeatable}).

        @raise SessionExpired: (with C{started}) the server forgot the session after it
            had accepted the request, which is not safe to repeat: whether it ran is
            unknown.  The session is open again for the next request.
        """
        self.log.info("upstream {server}: session expired; initializing again", server=self.name)
        self.channel.reset_session()
        await self.open(timeout=request.timeout)
        for uri in sorted(self._subscriptions):
            self._internal(
                SUBSCRIBE,
                await self._send(SUBSCRIBE, {"uri": uri}, None, None),
            )
        if expired.started and not self.repeatable(request.method, request.params):
            raise expired
        # Once only: a second expiry is the caller's to see.
        return await self._send(request.method, request.params, request.timeout, request.call)

    def repeatable(self, method: str, params: Mapping[str, Any] | None) -> bool:
        """
        Whether sending this request twice does no harm: a listing, a read, a ping, or
        a call of a tool the server annotated C{idempotentHint: true}.
        """
        if method in REPEATABLE_METHODS:
            return True
        if method == "tools/call" and params is not None:
            return params.get("name") in self._idempotent_tools
        return False

    async def list_tools(self, *, timeout: float | None = None) -> list[dict[str, Any]]:
        """Every tool, remembering which the server says are safe to call twice."""
        tools = await UpstreamSession.list_tools(self, timeout=timeout)
        self._idempotent_tools = frozenset(
            tool["name"]
            for tool in tools
            if isinstance(tool, dict)
            and isinstance(tool.get("name"), str)
            and isinstance(tool.get("annotations"), dict)
            and tool["annotations"].get("idempotentHint") is True
        )
        return tools

    def _may_call_as_task(self) -> bool:
        """Where the server declares tool tasks (2025-11-25)."""
        return declares_tool_tasks(self.capabilities)

    async def _calls_as_task(self, name: str, timeout: float | None, call: Call | None) -> bool:
        """
        A tool that must run as a task (or may, and C{call} wants one) is called as a
        2025-11-25 task and its result awaited.
        """
        support = await self.task_support_of(name, timeout)
        return runs_as_task(support, call is not None and call.wants_task)

    async def _call_as_task(
        self, params: dict[str, Any], timeout: float | None, call: Call | None
    ) -> dict[str, Any]:
        return await call_legacy_task(
            self, params, timeout=timeout, call=call, watch=self.watch_task
        )

    async def subscribe(self, uri: str) -> None:
        await self.request(SUBSCRIBE, {"uri": uri})
        self._subscriptions.add(uri)

    async def unsubscribe(self, uri: str) -> None:
        self._subscriptions.discard(uri)
        await self.request(UNSUBSCRIBE, {"uri": uri})
