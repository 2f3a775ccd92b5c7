# -*- test-case-name: tests.server.test_logging -*-
"""
An upstream's log messages, passed on to the caller of the call that hears them.

Log messages
============

While C{mcpx_call}, C{prompts/get} or C{resources/read} waits on an upstream server, that
server's C{notifications/message} (the pool's C{server.log} events) are passed on to the
caller, by a L{LogRelay}, when the caller asked for them: a legacy client with
C{logging/setLevel} on its connection, a 2026-07-28 request with
C{_meta["io.modelcontextprotocol/logLevel"]}.  No level, no messages; only messages at or
above the level; only while the call runs.  A log message names no request, so each
caller with a call in flight on that server gets it, though one connection gets it once;
but a caller let in with an OAuth access token gets only the messages the pool could
attribute to its own subject's calls (L{mcpx.ops.events.Event.principal}), never those
heard while another's call ran there too.

A client that stops reading
===========================

While the stream that carries a caller's messages is backed up (its
L{mcpx.server.flow.Flow} paused by Twisted), log messages for it are held, not written:
up to L{LOG_HOLD_BYTES} of them for each stream, in order, and any beyond that are
dropped and counted.  When the stream drains, or before the call's answer, what was held
goes out, then one message of mcpx's own saying how many were dropped.  An upstream that
floods log messages at a client that does not read therefore costs the daemon a bounded
amount of memory, however long it goes on.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, TypeVar
from weakref import WeakKeyDictionary, ref

from mcpx.auth.caller import subject_identity
from mcpx.ops.events import Event, EventBus
from mcpx.server.conn import Conn, Reply
from mcpx.server.flow import Flow
from mcpx.spec.meta_keys import LOG_LEVEL_KEY

_T = TypeVar("_T")

#: The RFC 5424 severities every revision's C{LoggingLevel} names, least severe first.
LOG_SEVERITY: Final[Mapping[str, int]] = {
    level: rank
    for rank, level in enumerate(
        ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
    )
}

#: The pool's event for an upstream's C{notifications/message}.
SERVER_LOG: Final = "server.log"

#: The most bytes of log messages held for one client stream while it is not reading;
#: messages beyond it are dropped, and counted.
LOG_HOLD_BYTES: Final = 1024 * 1024

#: Sends the params of one C{notifications/message} to a client.
_Send = Callable[[dict[str, Any]], None]


def _size(params: Mapping[str, Any]) -> int:
    """About how many bytes C{params} take on the wire."""
    try:
        return len(json.dumps(params, separators=(",", ":"), default=str))
    except (TypeError, ValueError, RecursionError):
        return LOG_HOLD_BYTES + 1


class HeldLogs:
    """
    The log messages waiting for one client stream that is backed up: at most
    L{LOG_HOLD_BYTES} of them, the rest dropped and counted.

    @ivar dropped: messages dropped since the client was last told so.
    """

    def __init__(self, flow: Flow, limit: int = LOG_HOLD_BYTES) -> None:
        # Weakly: the stream's held messages must not keep its flow alive.
        self._flow = ref(flow)
        self._limit = limit
        self._held: deque[tuple[_Send, dict[str, Any]]] = deque()
        self._bytes = 0
        self.dropped = 0
        self._dropped_rank = -1
        self._tell: _Send | None = None
        self._waiting = False

    @property
    def held(self) -> int:
        """Bytes held now."""
        return self._bytes

    def offer(self, send: _Send, params: dict[str, Any]) -> None:
        """Send C{params} now if the stream keeps up, else hold or drop it."""
        flow = self._flow()
        if flow is None or flow.stopped:
            return
        if not flow.paused and not self._held and not self.dropped:
            send(params)
            return
        size = _size(params)
        if self._bytes + size <= self._limit:
            self._held.append((send, params))
            self._bytes += size
        else:
            self.dropped += 1
            self._dropped_rank = max(self._dropped_rank, LOG_SEVERITY.get(params["level"], 0))
            self._tell = send
        if flow.paused and not self._waiting:
            self._waiting = True
            flow.when_resumed(self._resumed)
        elif not flow.paused:
            self.flush()

    def _resumed(self) -> None:
        self._waiting = False
        self.flush()

    def flush(self) -> None:
        """Send what was held, then say how many were dropped (nothing once it is gone)."""
        held, self._held, self._bytes = self._held, deque(), 0
        dropped, self.dropped = self.dropped, 0
        tell, self._tell = self._tell, None
        rank, self._dropped_rank = self._dropped_rank, -1
        flow = self._flow()
        if flow is None or flow.stopped:
            return
        for send, params in held:
            send(params)
        if dropped and tell is not None:
            level = next(name for name, value in LOG_SEVERITY.items() if value == rank)
            tell(
                {
                    "level": level,
                    "logger": "mcpx",
                    "data": f"mcpx dropped {dropped} log messages while this client was "
                    "not reading them",
                }
            )


class RelayedLogs:
    """
    What the log relays of every connection share: the last message each connection
    was told (so that two calls on one connection pass a message on once) and the
    messages held for each backed-up stream.
    """

    def __init__(self, hold_limit: int = LOG_HOLD_BYTES) -> None:
        self.told: WeakKeyDictionary[Conn, int] = WeakKeyDictionary()
        self._held: WeakKeyDictionary[Flow, HeldLogs] = WeakKeyDictionary()
        self._hold_limit = hold_limit

    def held_for(self, flow: Flow) -> HeldLogs:
        """The messages held for the stream of C{flow}."""
        held = self._held.get(flow)
        if held is None:
            held = self._held[flow] = HeldLogs(flow, self._hold_limit)
        return held


class LogRelay:
    """
    Passes the upstream log messages one call hears on to its caller, as
    C{notifications/message}, at or above the caller's level.

    The params are the same in every revision (C{level}, C{logger} when a string,
    C{data}); a message whose level no revision names is dropped, since no schema would
    take it.  Where the transport handed over the stream the request is answered on (a
    legacy Streamable HTTP session: the call's own POST, L{mcpx.server.conn.Reply}),
    they go on it.

    @ivar conn: the caller's connection.
    @ivar level: the caller's level when it is the request's own (2026-07-28), or
        C{None} to read the connection's (legacy C{logging/setLevel}) as each message
        arrives.
    """

    def __init__(
        self, conn: Conn, level: str | None, shared: RelayedLogs, reply: Reply | None = None
    ) -> None:
        self.conn = conn
        self.level = level
        self._told = shared.told
        self._reply = reply
        # The stream this request's notifications go on, as the transport routes them.
        flow = conn.flow_for(None) if reply is None else reply.flow()
        self._held = None if flow is None else shared.held_for(flow)

    def __call__(self, event: Event) -> None:
        conn = self.conn
        push = conn.push
        if push is None or conn.closed:
            return
        data = event.data
        level = data.get("level")
        rank = LOG_SEVERITY.get(level) if isinstance(level, str) else None
        wanted = self.level if self.level is not None else conn.log_level
        if rank is None or wanted is None or rank < LOG_SEVERITY[wanted]:
            return
        if self._told.get(conn) == event.id:
            # Another call on this connection passed this very message on already.
            return
        self._told[conn] = event.id
        params: dict[str, Any] = {"level": level}
        logger = data.get("logger")
        if isinstance(logger, str):
            params["logger"] = logger
        params["data"] = data.get("data")
        if self._held is None:
            self._send(params)
        else:
            self._held.offer(self._send, params)

    def _send(self, params: dict[str, Any]) -> None:
        conn = self.conn
        push = conn.push
        if push is None or conn.closed:
            return
        if self._reply is not None:
            # On the stream the request is answered on, while it is open.
            self._reply.push("notifications/message", params)
        else:
            push("notifications/message", params)

    def flush(self) -> None:
        """The call ends: what was held for its stream goes before its answer."""
        if self._held is not None:
            self._held.flush()


def asking_for_logs(meta: dict[str, Any] | None, on_log: LogRelay | None) -> dict[str, Any] | None:
    """
    C{meta} with the level C{on_log}'s caller wants log messages at, so that the
    upstream sends them (a 2026-07-28 server logs only to a request that asked); as it
    is when the caller wants none.
    """
    if on_log is None:
        return meta
    level = on_log.level if on_log.level is not None else on_log.conn.log_level
    if level is None:
        return meta
    return {**meta, LOG_LEVEL_KEY: level} if meta else {LOG_LEVEL_KEY: level}


async def relaying(events: EventBus, server: str, on_log: LogRelay, work: Awaitable[_T]) -> _T:
    """
    C{work}, with C{server}'s log messages passed to C{on_log} until it ends
    (however it ends: answered, failed or cancelled).
    """
    subject = on_log.conn.subject
    sees = None
    if subject is not None:
        own = subject_identity(subject)

        def sees(principal: str | None) -> bool:
            # A subject hears what its own calls caused; the owner what its calls overhear.
            return principal == own

    subscription = events.subscribe(on_log, servers=(server,), kinds=(SERVER_LOG,), sees=sees)
    try:
        return await work
    finally:
        subscription.cancel()
        on_log.flush()
