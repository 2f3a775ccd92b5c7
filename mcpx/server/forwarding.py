# -*- test-case-name: tests.server.test_passthrough -*-
"""
A host's request handed to an upstream through the pool, and its answer handed back.

Both the gateway (L{mcpx.server.surface}) and pass-through (L{mcpx.server.passthrough})
forward C{prompts/get}, C{resources/read} and C{completion/complete} the same way: the
request goes to the pool under the caller's identity and
L{mcpx.call.Call}, the server's log messages go to the caller while it
answers, and what comes back is a result the host can read or a JSON-RPC error it can
act on (L{guarded}).
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any, Final

from mcpx.ops.errors import error_from
from mcpx.ops.events import EventBus
from mcpx.policy.errors import InvalidArguments, PolicyRefusal
from mcpx.pool.errors import PoolError
from mcpx.pool.interface import PoolInterface
from mcpx.server.conn import Context
from mcpx.server.log_relay import LogRelay, relaying
from mcpx.spec.matrix import error_code_in
from mcpx.spec.meta_keys import RESERVED_PREFIX
from mcpx.upstream.records import UpstreamError
from mcpx.wire.errors import INTERNAL_ERROR, RESOURCE_NOT_FOUND, UPSTREAM_FAILED, RpcError

#: C{/v1}'s status for a request whose upstream's answer failed.
BAD_GATEWAY: Final = 502

#: C{_meta} keys that describe the host's own request to mcpx, not passed upstream
#: (the pool sets its own progress token and protocol keys).
_OWN_META_PREFIXES: Final = (RESERVED_PREFIX, "dev.mcpx/")


def upstream_meta(meta: object) -> dict[str, Any] | None:
    """
    The part of a host's C{_meta} passed upstream: everything but its progress token
    and the keys that describe its request to mcpx.
    """
    if type(meta) is not dict or not meta:
        return None
    kept: dict[str, Any] | None = None
    # Most requests keep nothing (a 2026-07-28 one's _meta is its own keys): no dict made.
    for key, value in meta.items():
        if key != "progressToken" and not key.startswith(_OWN_META_PREFIXES):
            if kept is None:
                kept = {}
            kept[key] = value
    return kept


def forwarded(params: Mapping[str, Any]) -> dict[str, Any]:
    """C{params} for the upstream: as the host sent them, less its own C{_meta} keys."""
    kept = {key: value for key, value in params.items() if key != "_meta"}
    meta = upstream_meta(params.get("_meta"))
    if meta is not None:
        kept["_meta"] = meta
    return kept


def relayed(error: RpcError, context: Context) -> RpcError:
    """
    An upstream's JSON-RPC error as the host may receive it: itself, except for
    C{-32002} to a revision that retired it, which becomes C{-32602} with the same
    message and data.
    """
    if error.code == RESOURCE_NOT_FOUND and not error_code_in(RESOURCE_NOT_FOUND, context.revision):
        return RpcError.invalid_params(error.message, error.data)
    return error


def pool_failure(error: PoolError | UpstreamError) -> RpcError:
    """
    What the pool could not do, with C{/v1}'s message and, in C{data}, its stable code
    (C{upstream_transport}, C{server_unavailable}, ...) and C{retry_in}: C{-32010}
    (upstream failed) when the upstream's answer failed (C{/v1}'s C{502}: its transport
    broke, its answer was too large), else C{-32603}.
    """
    shown = error_from(error)
    data: dict[str, Any] = {"code": shown.code}
    if shown.retry_in is not None:
        data["retry_in"] = shown.retry_in
    code = UPSTREAM_FAILED if shown.status == BAD_GATEWAY else INTERNAL_ERROR
    return RpcError(code, shown.message, data)


async def guarded(
    events: EventBus,
    context: Context,
    server: str,
    work: Awaitable[Any],
    on_log: LogRelay | None,
) -> dict[str, Any]:
    """
    C{work}'s result, C{server}'s log messages passed to C{on_log} meanwhile; the pool's
    failures as L{pool_failure} has them, a policy's refusal as its own code, the
    upstream's JSON-RPC errors as they are (see L{relayed}).
    """
    try:
        result = await (work if on_log is None else relaying(events, server, on_log, work))
    except (RpcError, PoolError, UpstreamError) as e:
        raise failure_of(e, context) from None
    return well_formed(server, result)


def failure_of(error: RpcError | PoolError | UpstreamError, context: Context) -> Exception:
    """
    What a request that failed with C{error} raises to its host (L{guarded}): the
    upstream's JSON-RPC error as L{relayed} has it, a policy's refusal as its own code,
    the pool's failures as L{pool_failure} has them; invalid arguments as they are, the
    caller's to answer (a tool error: L{mcpx.server.passthrough.refused_arguments}).
    """
    if isinstance(error, RpcError):
        return relayed(error, context)
    if isinstance(error, InvalidArguments):
        return error
    if isinstance(error, PolicyRefusal):
        return error.rpc_error()
    return pool_failure(error)


def well_formed(server: str, result: object) -> dict[str, Any]:
    """C{server}'s result, if it is an object (L{guarded}).

    @raise RpcError: C{-32603} when it is not.
    """
    if not isinstance(result, dict):
        raise RpcError.internal_error(f"server {server!r} answered with a malformed result")
    return result


async def forward(
    pool: PoolInterface,
    events: EventBus,
    context: Context,
    *,
    server: str,
    method: str,
    params: Mapping[str, Any],
    on_log: LogRelay | None = None,
    client: str | None = None,
) -> dict[str, Any]:
    """
    C{method} with C{params} to C{server} for the request of C{context} (L{guarded}),
    under C{client}'s identity if given, else the request's.
    """
    work = pool.request(
        server,
        method,
        params,
        client=context.identity if client is None else client,
        call=context.call,
    )
    return await guarded(events, context, server, work, on_log)
