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
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Mapping
from typing import Any, Final, TypeVar
from weakref import WeakKeyDictionary

from mcpx.auth.caller import subject_identity
from mcpx.ops.events import Event, EventBus
from mcpx.server.conn import Conn
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


class LogRelay:
    """
    Passes the upstream log messages one call hears on to its caller, as
    C{notifications/message}, at or above the caller's level.

    The params are the same in every revision (C{level}, C{logger} when a string,
    C{data}); a message whose level no revision names is dropped, since no schema would
    take it.  They are pushed from within the context the call was started in, so a
    transport that routes a push by the request it is made during (a legacy Streamable
    HTTP session: the call's own POST stream) routes these the same way.

    @ivar conn: the caller's connection.
    @ivar level: the caller's level when it is the request's own (2026-07-28), or
        C{None} to read the connection's (legacy C{logging/setLevel}) as each message
        arrives.
    """

    def __init__(self, conn: Conn, level: str | None, told: WeakKeyDictionary[Conn, int]) -> None:
        self.conn = conn
        self.level = level
        self._told = told
        self._context = contextvars.copy_context()

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
        # A copy each time: a context cannot be entered twice at once.
        self._context.copy().run(push, "notifications/message", params)


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
