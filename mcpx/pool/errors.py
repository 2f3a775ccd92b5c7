# -*- test-case-name: tests.pool.test_errors -*-
"""
What the pool tells a caller it could not do, each with the stable code the API
answers with.

Upstream JSON-RPC errors are not wrapped: they reach the caller as the
L{mcpx.wire.errors.RpcError} the server sent, with the configured credentials in
it masked (L{masked_rpc_error}).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import ClassVar

from mcpx.settings.errors import closest
from mcpx.settings.secrets import SecretMasker
from mcpx.upstream.channel import TransportRefused
from mcpx.wire.errors import RpcError


def format_seconds(seconds: float) -> str:
    """
    A duration for a message, rounded up: a caller told "4s" must not find the server
    still unavailable after four seconds.
    """
    if seconds >= 10:
        return f"{math.ceil(seconds)}s"
    return f"{math.ceil(seconds * 10) / 10:g}s"


def masked_rpc_error(error: RpcError, masker: SecretMasker) -> RpcError:
    """C{error} with every secret in its message and data masked; itself if it had none."""
    message = masker.mask(error.message)
    data = masker.mask_json(error.data)
    if message is error.message and data is error.data:
        return error
    return RpcError(error.code, message, data)


class PoolError(Exception):
    """
    Something the pool could not do.

    @cvar code: the stable snake_case code the API reports it with.
    """

    code: ClassVar[str] = "pool_error"
    #: Seconds after which trying again may succeed, when the pool can tell.
    retry_in: float | None = None

    @property
    def message(self) -> str:
        return str(self)


class UnknownServer(PoolError):
    """No server of that name is configured."""

    code: ClassVar[str] = "unknown_server"

    def __init__(self, name: str, known: Iterable[str]) -> None:
        self.name = name
        self.known = tuple(known)
        if not self.known:
            super().__init__(f"no server named {name!r} is configured; no servers are configured")
            return
        guess = closest(name, self.known)
        hint = f"; did you mean {guess!r}?" if guess is not None else ""
        super().__init__(
            f"no server named {name!r} is configured{hint} "
            f"(configured servers: {', '.join(self.known)})"
        )


class ServerUnavailable(PoolError):
    """
    The server is configured but cannot serve the call now: it failed to start, it
    crashed (during this call or before it and is waiting out its restart delay),
    or it was stopped while the call needed it.

    @ivar retry_in: seconds until the pool will try to start it again, or C{None}
        when a new call may try at once.
    """

    code: ClassVar[str] = "server_unavailable"

    def __init__(self, name: str, reason: str, retry_in: float | None = None) -> None:
        self.name = name
        self.reason = reason
        self.retry_in = retry_in
        message = f"server {name!r} is unavailable: {reason}"
        if retry_in is not None and retry_in > 0:
            message += f"; next start in {format_seconds(retry_in)}"
        super().__init__(message)


class CallTimedOut(PoolError):
    """
    An upstream call had no answer within its bound and was cancelled upstream.

    @ivar tool: the tool called, or the method, for a request that is not a call.
    @ivar timeout: the bound that ran out, in seconds.
    """

    code: ClassVar[str] = "call_timeout"

    def __init__(
        self, server: str, tool: str, timeout: float, *, extended_to: float | None = None
    ) -> None:
        """
        @param extended_to: for a call whose progress reports extended its bound, how
            long it ran in all (paused time not counted).
        """
        self.server = server
        self.tool = tool
        self.timeout = timeout
        if extended_to is None:
            message = (
                f"server {server!r} did not answer {tool!r} within {timeout:g}s, so the "
                "call was cancelled; a call may ask for a shorter timeout, and "
                "pool.callTimeout sets the longest"
            )
        else:
            message = (
                f"server {server!r} did not answer {tool!r}: it reported progress, which "
                f"kept the call alive for {extended_to:g}s in all, but then either went "
                f"{timeout:g}s without a report or reached pool.callMaxDuration, so the "
                "call was cancelled"
            )
        super().__init__(message)


class TooManyInstances(PoolError):
    """
    A C{client}-scoped server already runs as many instances as it may (one per caller),
    every one of them busy, so none could be stopped to make room for a new caller.

    @ivar limit: the cap that was reached.
    @ivar setting: the setting that sets it.
    """

    code: ClassVar[str] = "too_many_instances"

    def __init__(self, name: str, limit: int, setting: str, retry_in: float) -> None:
        self.name = name
        self.limit = limit
        self.setting = setting
        self.retry_in = retry_in
        super().__init__(
            f"server {name!r} already runs {limit} instances, one per caller, and every one "
            f"is busy, so none can be stopped for a new caller; try again when one is idle, "
            f"or raise {setting}"
        )


class AnswerTooLarge(PoolError):
    """
    The server's answer to a call was longer than mcpx reads; the server itself keeps
    serving.

    @ivar limit: the limit, in bytes (C{transport.maxMessageSize}).
    """

    code: ClassVar[str] = "answer_too_large"

    def __init__(self, server: str, tool: str, limit: int) -> None:
        self.server = server
        self.tool = tool
        self.limit = limit
        super().__init__(
            f"server {server!r} answered {tool!r} with a message longer than {limit} bytes "
            f"({limit / 2**20:g} MiB), the limit transport.maxMessageSize sets; raise it "
            "in the config file or ask the tool for less"
        )


class UpstreamBroke(PoolError):
    """
    The transport to a remote server failed during a request: the server refused it
    with an HTTP status, the answer's stream ended without the answer, the answer was
    too large, or the connection broke.

    @ivar status: the HTTP status the API answers with: 503 when the server said it
        is overloaded or unavailable (HTTP 429 or 503), else 502.
    @ivar outcome_unknown: the server may have started the request, so it was not
        sent again; whether it ran is unknown.
    @ivar retry_in: seconds the server asked to wait (C{Retry-After}), if it did.
    """

    code: ClassVar[str] = "upstream_transport"

    def __init__(
        self,
        server: str,
        what: str,
        reason: str,
        *,
        status: int = 502,
        outcome_unknown: bool = False,
        retry_in: float | None = None,
    ) -> None:
        self.server = server
        self.what = what
        self.reason = reason
        self.status = status
        self.outcome_unknown = outcome_unknown
        self.retry_in = retry_in
        message = f"server {server!r} failed {what!r}: {reason}"
        if outcome_unknown:
            message += (
                "; the server may have started it, so it was not sent again and whether "
                "it ran is unknown"
            )
        if retry_in is not None and retry_in > 0:
            message += f"; it asked to wait {format_seconds(retry_in)}"
        super().__init__(message)


def transport_error(server: str, what: str, error: ConnectionError) -> UpstreamBroke:
    """
    What a caller is told when the transport to C{server} failed C{what}: a refusal
    by status (503 when the server said it is busy or unavailable), or a request that
    broke, saying whether the server may have started it.
    """
    if isinstance(error, TransportRefused):
        busy = error.status in (429, 503)
        return UpstreamBroke(
            server,
            what,
            f"it refused the request: {error}",
            status=503 if busy else 502,
            retry_in=error.retry_after,
        )
    started = bool(getattr(error, "started", True))
    return UpstreamBroke(
        server, what, str(error), status=502 if started else 503, outcome_unknown=started
    )


def asked_to_wait(error: BaseException | None) -> float | None:
    """The C{Retry-After} of the HTTP refusal behind C{error}, if there is one."""
    seen = error
    for _ in range(5):
        if seen is None:
            return None
        if isinstance(seen, TransportRefused):
            return seen.retry_after
        seen = seen.__cause__
    return None
