"""
OAuth around a real daemon: the stand-in authorization server on a loopback port, the
C{daemon.auth} that trusts it, and a daemon whose server signs in with the
client-credentials grant.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import TypeVar, overload

import treq
from twisted.trial.unittest import TestCase
from twisted.web.http_headers import Headers
from twisted.web.resource import Resource
from twisted.web.server import Site

from tests.auth.standin_issuer import StandInIssuer
from tests.support.daemons import daemon_environ, stop_daemon
from tests.support.http import TestClient
from tests.support.processes import ChildProcess, reactor, spawn

Issuer = TypeVar("Issuer", bound=StandInIssuer)

#: The client-credentials server's client secret, which its entry names as ${ROBOT_SECRET}.
ROBOT_SECRET = "robot-secret"


@overload
def serve_issuer(test: TestCase) -> StandInIssuer: ...


@overload
def serve_issuer(test: TestCase, kind: type[Issuer]) -> Issuer: ...


def serve_issuer(test: TestCase, kind: type[StandInIssuer] = StandInIssuer) -> StandInIssuer:
    """
    A L{StandInIssuer} (or one of C{kind}) on a loopback port until C{test} ends, its
    issuer URL C{http://127.0.0.1:PORT/realms/tools}.
    """
    site = Site(Resource())
    port = reactor.listenTCP(0, site, interface="127.0.0.1")
    test.addCleanup(port.stopListening)
    issuer = kind(f"http://127.0.0.1:{port.getHost().port}/realms/tools")
    site.resource = issuer
    return issuer


def oauth_auth(issuer: StandInIssuer, audience: str) -> str:
    """C{MCPX_DAEMON_AUTH} trusting C{issuer}'s tokens for C{audience} with scope mcp:tools."""
    return json.dumps(
        {"type": "oauth", "issuer": issuer.issuer, "audience": audience, "scopes": ["mcp:tools"]}
    )


async def call_with_client_credentials(
    test: TestCase, upstream_url: str
) -> tuple[ChildProcess, int, bytes]:
    """
    A real daemon (its unix socket only) whose one server, C{m2m} at C{upstream_url},
    signs in with the client-credentials grant as C{robot} (its secret from
    C{${ROBOT_SECRET}}), and its C{/v1/call} of C{m2m}'s C{echo}: the daemon, still
    running until C{test} ends, and the call's status and answer.
    """
    state_dir = tempfile.mkdtemp(prefix="mcpx-state-")
    config_home = tempfile.mkdtemp(prefix="mcpx-cfg-")
    auth = {
        "type": "oauth",
        "grant": "client_credentials",
        "clientId": "robot",
        "clientSecret": "${ROBOT_SECRET}",
    }
    (Path(config_home) / "mcpx").mkdir()
    (Path(config_home) / "mcpx" / "config.json").write_text(
        json.dumps({"servers": {"m2m": {"url": upstream_url, "auth": auth}}})
    )
    env = daemon_environ(state_dir, config_home)
    env["ROBOT_SECRET"] = ROBOT_SECRET
    child = spawn([sys.executable, "-m", "mcpx", "daemon", "--daemon-listen", ""], env=env)
    test.addCleanup(stop_daemon, child)
    await child.wait_for(rb"listening on")
    client = TestClient(reactor, unix_socket=str(Path(state_dir) / "mcpx.sock"))
    test.addCleanup(client.close)
    body = {"server": "m2m", "tool": "echo", "arguments": {}}
    response = await client.http.post(
        "http://mcpx/v1/call",
        data=json.dumps(body).encode(),
        headers=Headers({"Content-Type": ["application/json"]}),
    )
    content: bytes = await treq.content(response)
    return child, response.code, content
