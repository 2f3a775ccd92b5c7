# -*- test-case-name: tests.daemon.test_ops -*-
"""
How an operation fails: L{OpError}, and L{error_from}, which turns any failure from the
floors below (the pool, the policy, an upstream, the task store) into the one the caller
sees, with where to look next.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any, Final

from mcpx.policy.errors import PolicyRefusal
from mcpx.pool.errors import (
    AnswerTooLarge,
    CallTimedOut,
    PoolError,
    ServerUnavailable,
    UnknownServer,
    UpstreamBroke,
)
from mcpx.tasks.store import PER_CLIENT_SETTING, TooManyTasks, TooManyTasksForClient
from mcpx.upstream.records import UpstreamError
from mcpx.wire.errors import INVALID_PARAMS, RESOURCE_NOT_FOUND, RpcError


class OpError(Exception):
    """
    A failed operation: an HTTP status and a stable snake_case code, a message that says
    what to do, and optional detail (the field at fault, the upstream JSON-RPC error,
    when to retry).
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        field: str | None = None,
        rpc: Mapping[str, Any] | None = None,
        retry_in: float | None = None,
    ) -> None:
        super().__init__(status, code, message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.rpc = rpc
        self.retry_in = retry_in

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        """The C{"error"} object of an error answer."""
        shown: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            shown["field"] = self.field
        if self.rpc is not None:
            shown["rpc"] = dict(self.rpc)
        if self.retry_in is not None:
            shown["retry_in"] = self.retry_in
        return shown


#: Upstream JSON-RPC errors that blame the caller's input rather than the server: the answer
#: is a 4xx, so an HTTP client sees the mistake is its own (any other error code stays 502).
_UPSTREAM_REFUSALS: Final[Mapping[int, int]] = {INVALID_PARAMS: 422, RESOURCE_NOT_FOUND: 404}


def error_from(error: BaseException) -> OpError:
    """Any failure as the L{OpError} the caller sees, with the hint of where to look next."""
    if isinstance(error, OpError):
        return error
    if isinstance(error, RpcError):
        return OpError(
            _UPSTREAM_REFUSALS.get(error.code, 502),
            "upstream_error",
            f"the upstream server answered with JSON-RPC error {error.code}: {error.message}",
            rpc=error.to_json(),
        )
    if isinstance(error, PolicyRefusal):
        problems = error.data.get("errors")
        where = problems[0]["path"].strip("/").replace("/", ".") if problems else ""
        field = ("arguments." + where if where else "arguments") if problems else None
        return OpError(error.status, error.code, error.message, field=field)
    if isinstance(error, UnknownServer):
        return OpError(404, error.code, f"{error.message}; GET /v1/servers lists them")
    if isinstance(error, ServerUnavailable):
        return OpError(
            503,
            error.code,
            f"{error.message}; GET /v1/events?server={error.name} shows why",
            retry_in=error.retry_in,
        )
    if isinstance(error, CallTimedOut):
        return OpError(
            504, error.code, f'{error.message}; or pass "task": true to collect the result later'
        )
    if isinstance(error, UpstreamBroke):
        return OpError(
            error.status,
            error.code,
            f"{error.message}; GET /v1/servers shows its state",
            retry_in=error.retry_in,
        )
    if isinstance(error, AnswerTooLarge):
        return OpError(502, error.code, error.message)
    if isinstance(error, PoolError):
        return OpError(503, error.code, error.message, retry_in=error.retry_in)
    if isinstance(error, TooManyTasksForClient):
        return OpError(
            429,
            "too_many_tasks_for_client",
            f"caller {error.client!r} already holds {error.limit} tasks running or waiting "
            f"to be collected ({PER_CLIENT_SETTING}); collect finished ones with "
            "GET /v1/tasks/{id} and try again once they expire",
            retry_in=error.retry_in,
        )
    if isinstance(error, TooManyTasks):
        return OpError(
            503,
            "too_many_tasks",
            f"{error.limit} tasks are running or waiting to be collected; collect finished "
            f"ones with GET /v1/tasks/{{id}} (they are kept {error.ttl:g}s) and try again",
        )
    if isinstance(error, UpstreamError):
        return OpError(502, "upstream_failed", f"{error}; GET /v1/servers shows its state")
    return OpError(
        500,
        "internal_error",
        f"the daemon failed unexpectedly ({type(error).__name__}); its log has the details",
    )


def unknown_name(status: int, code: str, what: str, name: str, known: Sequence[str]) -> OpError:
    close = difflib.get_close_matches(name, known, n=3)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return OpError(status, code, f"no {what} named {name!r}{hint}")
