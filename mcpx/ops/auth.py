# -*- test-case-name: tests.auth.test_ops -*-
"""
The operations on the OAuth sign-ins of remote servers (C{/v1/auth}): their state, a
sign-in begun and finished, a sign-out.

Each acts on the caller's own sign-in (its principal: the owner, or an access token's
subject, L{mcpx.auth.signin}).  A server whose sign-in is shared (C{"shared": true})
has the owner's alone: another caller may not sign it in or out (C{403 owner_only}).
"""

from __future__ import annotations

from typing import Any

from mcpx.auth.caller import OWNER, principal_of
from mcpx.auth.flow import NetworkError
from mcpx.auth.metadata import AuthorizationError
from mcpx.auth.signin import SignIns, uses_oauth, whose
from mcpx.ops.errors import OpError, error_from, unknown_name
from mcpx.ops.host import Invocation, OpHost, required
from mcpx.pool.interface import PoolInterface
from mcpx.settings.servers import RemoteServer


def principal(call: Invocation) -> str:
    """Whose sign-ins C{call} acts on: its access token's subject's, else the owner's."""
    return OWNER if call.holder is None else principal_of(call.holder)


def _oauth_server(host: OpHost, call: Invocation) -> tuple[SignIns, RemoteServer, str]:
    """
    The sign-ins, the named server (a remote server using OAuth), and the principal
    whose sign-in to it the caller may change.

    @raise OpError: C{403 owner_only} for a caller other than the owner when the
        server's sign-in is the owner's, shared with everyone.
    """
    sign_ins = required(
        host.sign_ins, "auth_unavailable", "this daemon runs without OAuth sign-ins"
    )
    name = call.args["name"]
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
    caller = principal(call)
    if whose(server, caller) != caller:
        raise OpError(
            403,
            "owner_only",
            f"the sign-in to {name!r} is the daemon owner's, shared with every caller "
            '("shared": true, or a client-credentials server): only the owner signs it in '
            "or out",
        )
    return sign_ins, server, caller


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
    caller = principal(call)
    return {
        "servers": [
            host.sign_ins.describe(name, whose(server, caller))
            for name, server in servers.items()
            if uses_oauth(server)
        ]
    }


async def auth_begin(host: OpHost, call: Invocation) -> dict[str, Any]:
    sign_ins, server, caller = _oauth_server(host, call)
    try:
        return await sign_ins.begin(server.name, server, call.args["redirect_uri"], caller)
    except Exception as error:
        raise _auth_failed(error) from error


async def auth_finish(host: OpHost, call: Invocation) -> dict[str, Any]:
    sign_ins, server, caller = _oauth_server(host, call)
    try:
        shown = await sign_ins.finish(server.name, call.args["url"], caller)
    except Exception as error:
        raise _auth_failed(error) from error
    await restart_after_sign_in(host.pool, server.name, caller)
    return {"server": shown}


async def restart_after_sign_in(
    pool: PoolInterface | None, name: str, principal: str = OWNER
) -> None:
    """
    Start C{principal}'s instances of C{name} in C{pool} again, if it runs there: they
    failed without a token.  Every other caller's go on as they were.
    """
    if pool is not None and any(status.name == name for status in pool.status()):
        await pool.restart(name, principal=principal)


async def auth_logout(host: OpHost, call: Invocation) -> dict[str, Any]:
    sign_ins, server, caller = _oauth_server(host, call)
    forgotten, warnings = await sign_ins.logout(server.name, caller)
    return {"server": server.name, "forgotten": forgotten, "warnings": warnings}
