# -*- test-case-name: tests.daemon.test_events -*-
"""
The events operation: which events a stream gets, and the resources it watches
(C{GET /v1/events?uri=}), subscribed upstream for the stream's life.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from twisted.internet.defer import CancelledError, Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from mcpx.ops import uris
from mcpx.ops.errors import OpError, error_from
from mcpx.ops.events import split_filter
from mcpx.ops.host import EventFeed, Invocation, OpHost, pool_of
from mcpx.pool.interface import PoolInterface
from mcpx.spec.methods import SUBSCRIBE, UNSUBSCRIBE

_log = Logger()


#: The most resources one event stream may watch (C{GET /v1/events?uri=}).
MAX_WATCHED: Final = 64


async def events(host: OpHost, call: Invocation) -> EventFeed:
    keep_alive = host.settings.duration("transport.sseKeepAlive")
    servers = tuple(split_filter(call.args.get("server", ())))
    kinds = tuple(split_filter(call.args.get("kind", ())))
    watched = list(dict.fromkeys(call.args.get("uri", ())))
    if not watched:
        return EventFeed(servers=servers, kinds=kinds, keep_alive=keep_alive)
    if len(watched) > MAX_WATCHED:
        raise OpError(
            400,
            "invalid_input",
            f"one event stream watches at most {MAX_WATCHED} resources, not {len(watched)}; "
            "open several streams",
            field="uri",
        )
    pool = pool_of(host)
    held: list[tuple[str, str]] = []

    def release() -> None:
        for server, upstream in held:
            unsubscribe(pool, server, upstream, call.client)

    try:
        subscribed, refused = await _watch(pool, call.client, watched, servers, held)
    except BaseException:
        release()  # the client went away while the subscriptions were being made
        raise
    return EventFeed(
        servers=servers or tuple(dict.fromkeys(server for server, _ in held)),
        kinds=kinds or ("resource.updated",),
        keep_alive=keep_alive,
        resources=tuple(held),
        watching={"subscribed": subscribed, "refused": refused},
        release=release,
    )


def unsubscribe(pool: PoolInterface, server: str, upstream: str, client: str) -> None:
    """Give back C{client}'s interest in C{upstream} of C{server}; a failure is logged."""
    releasing = Deferred.fromCoroutine(
        pool.request(server, UNSUBSCRIBE, {"uri": upstream}, client=client)
    )
    releasing.addErrback(_release_failed, server, upstream)


def _release_failed(failure: Failure, server: str, uri: str) -> None:
    _log.warn(
        "unsubscribing from {uri} on {server} failed: {why}",
        uri=uri,
        server=server,
        why=failure.getErrorMessage(),
    )


async def _watch(
    pool: PoolInterface,
    client: str,
    watched: Sequence[str],
    servers: Sequence[str],
    held: list[tuple[str, str]],
) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """
    Subscribe to each URI for an event stream: an C{mcpx://} URI, or a bare upstream
    URI of the one server C{servers} names.

    @param held: gets each (server, upstream URI) pair subscribed, as it is.
    @return: what was subscribed, and what was not with why (as the stream's first
        event says).
    """
    subscribed: list[dict[str, str]] = []
    refused: list[dict[str, str]] = []
    for uri in watched:
        if uris.is_mcpx(uri):
            try:
                parsed = uris.parse(uri)
            except uris.NotAnMcpxUri as e:
                refused.append({"uri": uri, "reason": str(e)})
                continue
            server = parsed.server
            upstream = parsed.upstream()
            if parsed.from_template:
                try:
                    templates = await pool.templates(server, client=client)
                except Exception as e:
                    refused.append({"uri": uri, "reason": str(e)})
                    continue
                upstream = parsed.upstream(
                    str(t.get("uriTemplate")) for t in templates if t.get("uriTemplate")
                )
            if upstream is None:
                refused.append({"uri": uri, "reason": "no resource template of it gives it"})
                continue
        elif len(servers) == 1:
            server, upstream = servers[0], uri
        else:
            refused.append(
                {
                    "uri": uri,
                    "reason": "a URI that is not mcpx:// needs exactly one server= to say "
                    "whose it is",
                }
            )
            continue
        try:
            session = await pool.session(server, client)
            declaration = session.declaration
            if declaration is not None and not declaration.declares("resources.subscribe"):
                refused.append(
                    {
                        "uri": uri,
                        "reason": f"server {server!r} does not offer resource subscriptions",
                    }
                )
                continue
            await pool.request(server, SUBSCRIBE, {"uri": upstream}, client=client)
        except CancelledError:
            raise
        except Exception as e:
            refused.append({"uri": uri, "reason": error_from(e).message})
            continue
        held.append((server, upstream))
        subscribed.append({"uri": uri, "server": server, "upstream": upstream})
    return subscribed, refused
