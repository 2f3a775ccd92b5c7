"""
Tests for the client-credentials grant (C{"grant": "client_credentials"}): the daemon
obtains and renews its own token against the stand-in authorization server; nobody
signs in.
"""

from __future__ import annotations

import base64

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from mcpx.auth.metadata import AuthorizationError
from mcpx.auth.signin import SignIns
from mcpx.auth.store import TokenStore
from mcpx.settings.errors import SettingsError
from mcpx.settings.secrets import SecretMasker
from mcpx.settings.server_entry import parse_server
from mcpx.settings.servers import RemoteServer
from tests.auth.test_flow import MCP, stub
from tests.auth.test_signin import ProtectedServers, remote, run

MACHINE = {
    "type": "oauth",
    "grant": "client_credentials",
    "clientId": "robot",
    "clientSecret": "${ROBOT_SECRET}",
}


class ClientCredentialsTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.fake = ProtectedServers()
        self.fake.token_answer = (200, {"access_token": "tok-1", "expires_in": 600})
        self.clock = Clock()
        self.masker = SecretMasker()
        self.sign_ins = SignIns(stub(self.fake), self.clock, TokenStore(None), self.masker)
        found = parse_server(
            "remote",
            {"url": MCP, "auth": MACHINE},
            origin="test",
            environ={"ROBOT_SECRET": "robot-secret"},
        )
        assert isinstance(found, RemoteServer)
        self.credentials = self.sign_ins.credentials("remote", found)

    def token_requests(self) -> list[tuple[dict[str, list[str]], dict[str, str]]]:
        return [
            (form, headers) for _, path, form, headers in self.fake.requests if path == "/token"
        ]

    def test_obtained_without_sign_in(self) -> None:
        """
        The first use gets a token with the client's own credentials (client_secret_basic),
        the resource and the server's scopes; status says signed in; the token is masked.
        """
        self.assertEqual(run(self, self.credentials.authorization()), "Bearer tok-1")
        ((form, headers),) = self.token_requests()
        self.assertEqual(form["grant_type"], ["client_credentials"])
        self.assertEqual(form["resource"], [MCP])
        self.assertEqual(form["scope"], ["mcp:read"])
        basic = "Basic " + base64.b64encode(b"robot:robot-secret").decode()
        self.assertEqual(headers["authorization"], basic)
        self.assertEqual(self.sign_ins.describe("remote")["state"], "signed_in")
        self.assertEqual(self.masker.mask("got tok-1"), "got ***")

    def test_renewed_before_expiry(self) -> None:
        """The token is reused while fresh, and a new one is obtained before it expires."""
        run(self, self.credentials.authorization())
        self.clock.advance(300)
        run(self, self.credentials.authorization())
        self.assertEqual(len(self.token_requests()), 1)
        self.fake.token_answer = (200, {"access_token": "tok-2", "expires_in": 600})
        self.clock.advance(250)  # within the refresh leeway of the expiry
        self.assertEqual(run(self, self.credentials.authorization()), "Bearer tok-2")
        self.assertEqual(len(self.token_requests()), 2)

    def test_refused_after_401(self) -> None:
        """A 401 makes the next use obtain a new token; refused credentials say what to check."""
        run(self, self.credentials.authorization())
        self.credentials.unauthorized(['Bearer error="invalid_token"'])
        self.fake.token_answer = (401, {"error": "invalid_client"})
        failure = self.failureResultOf(
            Deferred.fromCoroutine(self.credentials.authorization()), AuthorizationError
        )
        self.assertIn("refused the client credentials of remote", str(failure.value))
        self.assertIn("clientSecret", str(failure.value))


class ClientCredentialsSettingTests(SynchronousTestCase):
    def test_needs_a_secret(self) -> None:
        """The grant without clientId and clientSecret is refused, saying why."""
        with self.assertRaises(SettingsError) as raised:
            remote({"type": "oauth", "grant": "client_credentials"})
        self.assertIn("clientSecret", str(raised.exception))
        with self.assertRaises(SettingsError) as raised:
            remote({"type": "oauth", "grant": "password"})
        self.assertIn("auth.grant", str(raised.exception))

    def test_shown(self) -> None:
        found = remote({**MACHINE, "clientSecret": "s"})
        assert found.auth is not None
        self.assertEqual(
            found.auth.redacted(),
            {
                "type": "oauth",
                "clientId": "robot",
                "clientSecret": "***",
                "grant": "client_credentials",
            },
        )
