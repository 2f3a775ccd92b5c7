# -*- test-case-name: tests.auth.test_ops -*-
"""
The operations on the OAuth sign-ins of remote servers (C{/v1/auth}): their state, a
sign-in begun and finished, a sign-out.
"""

from __future__ import annotations

from typing import Any

from mcpx.auth.flow import NetworkError
from mcpx.auth.metadata import AuthorizationError
from mcpx.auth.signin import SignIns, uses_oauth
from mcpx.ops.errors import OpError, error_from, unknown_name
from mcpx.ops.host import Invocation, OpHost, required
from mcpx.pool.interface import PoolInterface
from mcpx.settings.servers import RemoteServer


def _oauth_server(host: OpHost, name: str) -> tuple[SignIns, RemoteServer]:
    """The sign-ins and the named server, which must be a remote server using OAuth."""
    sign_ins = required(
        host.sign_ins, "auth_unavailable", "this daemon runs without OAuth sign-ins"
    )
    servers = host.servers.servers if host.servers is not None else {}
    server = servers.get(name)
    if server is None:
        raise unknown_name(404, "unknown_server", "server", name, list(servers))
    if not uses_oauth(server):
        raise OpError(
            409,
            "not_oauth",
            f'server {name!r} does not use OAuth; give it "auth": {{"type": "oauth"}}',
        )
    assert isinstance(server, RemoteServer)
    return sign_ins, server


def _auth_failed(error: Exception) -> OpError:

    if isinstance(error, NetworkError):
        return OpError(502, "auth_server_unreachable", str(error))
    if isinstance(error, AuthorizationError):
        return OpError(422, "sign_in_failed", str(error))
    return error_from(error)


async def auth_status(host: OpHost, call: Invocation) -> dict[str, Any]:

    if host.sign_ins is None:
        return {"servers": []}
    servers = host.servers.servers if host.servers is not None else {}
    names = [name for name, server in servers.items() if uses_oauth(server)]
    return {"servers": host.sign_ins.status(names)}


async def auth_begin(host: OpHost, call: Invocation) -> dict[str, Any]:
    sign_ins, server = _oauth_server(host, call.args["name"])
    try:
        return await sign_ins.begin(server.name, server, call.args["redirect_uri"])
    except Exception as error:
        raise _auth_failed(error) from error


async def auth_finish(host: OpHost, call: Invocation) -> dict[str, Any]:
    sign_ins, server = _oauth_server(host, call.args["name"])
    try:
        shown = await sign_ins.finish(server.name, call.args["url"])
    except Exception as error:
        raise _auth_failed(error) from error
    await signed_in(host, server.name)
    return {"server": shown}


async def signed_in(host: OpHost, name: str) -> None:
    """A sign-in to C{name} ended: the instance that failed without a token starts again."""
    await restart_after_sign_in(host.pool, name)


async def restart_after_sign_in(pool: PoolInterface | None, name: str) -> None:
    """Start C{name} again in C{pool}, if it runs there: it failed without a token."""
    if pool is not None and any(status.name == name for status in pool.status()):
        await pool.restart(name)


async def auth_logout(host: OpHost, call: Invocation) -> dict[str, Any]:
    sign_ins, server = _oauth_server(host, call.args["name"])
    forgotten, warnings = await sign_ins.logout(server.name)
    return {"server": server.name, "forgotten": forgotten, "warnings": warnings}
