# -*- test-case-name: tests.pool -*-
"""
The warm pool of upstream servers: started on first use, kept warm between calls,
reaped when idle, replaced when they die.  See L{mcpx.pool.pool}.
"""

from __future__ import annotations

from mcpx.pool.backoff import Backoff
from mcpx.pool.budget import effective_call_timeout
from mcpx.pool.errors import (
    AnswerTooLarge,
    CallTimedOut,
    PoolError,
    ServerUnavailable,
    TooManyInstances,
    UnknownServer,
)
from mcpx.pool.pool import Connects, Pool
from mcpx.pool.status import ReloadReport, ServerState, ServerStatus

__all__ = [
    "AnswerTooLarge",
    "Backoff",
    "CallTimedOut",
    "Connects",
    "Pool",
    "PoolError",
    "ReloadReport",
    "ServerState",
    "ServerStatus",
    "ServerUnavailable",
    "TooManyInstances",
    "UnknownServer",
    "effective_call_timeout",
]
