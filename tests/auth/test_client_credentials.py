"""
Tests for the client-credentials grant (C{"grant": "client_credentials"}): the daemon
obtains and renews its own token against the stand-in authorization server; nobody
signs in.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.resource import Resource
from twisted.web.server import Request

from mcpx.auth.metadata import AuthorizationError
from mcpx.auth.signin import STEP_UP_LIMIT, SignIns
from mcpx.auth.store import TokenStore
from mcpx.settings.errors import SettingsError
from mcpx.settings.secrets import SecretMasker
from mcpx.settings.server_entry import parse_server
from mcpx.settings.servers import RemoteServer, ServersConfig
from mcpx.spec.revision import Revision
from tests.auth.standin_issuer import ISSUER, StandInIssuer, ec_key, rsa_key
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

    def test_step_up_new_token_with_union(self) -> None:
        """A 403 insufficient_scope: a new token with the union, at most STEP_UP_LIMIT times."""
        run(self, self.credentials.authorization())
        challenge = ['Bearer error="insufficient_scope", scope="mcp:write"']
        for attempt in range(STEP_UP_LIMIT):
            hint = self.credentials.unauthorized(challenge, Revision.V2026_07_28)
            self.assertIn("new token", hint)
            self.fake.token_answer = (
                200,
                {"access_token": f"tok-up-{attempt}", "expires_in": 600},
            )
            run(self, self.credentials.authorization())
            form, _ = self.token_requests()[-1]
            self.assertEqual(form["scope"], ["mcp:read mcp:write"])
        self.assertEqual(len(self.token_requests()), 1 + STEP_UP_LIMIT)
        hint = self.credentials.unauthorized(challenge, Revision.V2026_07_28)
        self.assertIn("stops asking", hint)
        run(self, self.credentials.authorization())
        self.assertEqual(len(self.token_requests()), 1 + STEP_UP_LIMIT)

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


class _MachineWorld(Resource):
    """An MCP server at mcp.example whose authorization server is the stand-in issuer."""

    isLeaf = True

    def __init__(self, issuer: StandInIssuer) -> None:
        super().__init__()
        self.issuer = issuer

    def render(self, request: Request) -> bytes:
        if request.path == b"/mcp":
            request.setResponseCode(401)
            request.setHeader(
                b"www-authenticate",
                b'Bearer resource_metadata="https://mcp.example/.well-known/'
                b'oauth-protected-resource/mcp"',
            )
            return b""
        if request.path == b"/.well-known/oauth-protected-resource/mcp":
            request.setHeader(b"content-type", b"application/json")
            return json.dumps({"resource": MCP, "authorization_servers": [ISSUER]}).encode()
        return self.issuer.render(request)


def _pem_file(test: SynchronousTestCase, key: Any) -> str:
    path = Path(test.mktemp()).absolute()
    path.write_bytes(
        key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()),
    )
    return str(path)


class PrivateKeyJwtTests(SynchronousTestCase):
    """C{"privateKeyFile"}: the token request carries a JWT signed with the client's key."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1_800_000_000)
        self.issuer = StandInIssuer()
        self.issuer.now = self.clock.seconds
        self.masker = SecretMasker()
        self.sign_ins = SignIns(
            stub(_MachineWorld(self.issuer)), self.clock, TokenStore(None), self.masker
        )

    def server(self, key: Any, **auth: str) -> RemoteServer:
        self.issuer.client_keys["robot"] = key
        block = {
            "type": "oauth",
            "grant": "client_credentials",
            "clientId": "robot",
            "privateKeyFile": _pem_file(self, key),
            **auth,
        }
        found = parse_server("remote", {"url": MCP, "auth": block}, origin="t", environ={})
        assert isinstance(found, RemoteServer)
        return found

    def authorize(self, server: RemoteServer, name: str = "remote") -> str:
        header: str = run(self, self.sign_ins.credentials(name, server).authorization())
        return header

    def test_rsa_assertion_accepted(self) -> None:
        """
        An RSA key signs with RS256 by default: the issuer verifies the assertion (iss,
        sub, aud = its issuer, short exp, fresh jti), no client_id or secret is sent,
        and the token it issues is what the server is reached with.
        """
        server = self.server(rsa_key())
        header = self.authorize(server)
        self.assertEqual(self.issuer.assertion_errors, [])
        (form,) = self.issuer.token_requests
        self.assertEqual(form["grant_type"], "client_credentials")
        self.assertEqual(
            form["client_assertion_type"], "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
        )
        self.assertNotIn("client_id", form)
        self.assertNotIn("client_secret", form)
        self.assertEqual(form["resource"], MCP)
        self.assertEqual(jwt.get_unverified_header(form["client_assertion"])["alg"], "RS256")
        claims = jwt.decode(form["client_assertion"], options={"verify_signature": False})
        self.assertLessEqual(claims["exp"] - self.clock.seconds(), 60)
        self.assertEqual(header, "Bearer " + self.issuer.issued[0])
        self.assertEqual(self.sign_ins.describe("remote")["state"], "signed_in")

    def test_ec_and_pss_keys(self) -> None:
        """An EC key signs with ES256; an RSA key set to PS256 signs with PS256."""
        self.authorize(self.server(ec_key()))
        self.authorize(self.server(rsa_key(), signingAlgorithm="PS256"), "other")
        algs = [
            jwt.get_unverified_header(f["client_assertion"])["alg"]
            for f in self.issuer.token_requests
        ]
        self.assertEqual(algs, ["ES256", "PS256"])
        self.assertEqual(self.issuer.assertion_errors, [])

    def test_each_request_new_assertion(self) -> None:
        """A renewal signs a new assertion (a new jti the issuer has not seen)."""
        server = self.server(rsa_key())
        self.authorize(server)
        self.clock.advance(self.issuer.lifetime)
        self.authorize(server)
        self.assertEqual(len(self.issuer.token_requests), 2)
        self.assertEqual(self.issuer.assertion_errors, [])

    def test_foreign_key_refused(self) -> None:
        """An issuer that knows another key refuses; the error names privateKeyFile."""
        server = self.server(rsa_key())
        self.issuer.client_keys["robot"] = rsa_key()
        failure = self.failureResultOf(
            Deferred.fromCoroutine(self.sign_ins.credentials("remote", server).authorization()),
            AuthorizationError,
        )
        self.assertIn("privateKeyFile", str(failure.value))
        self.assertIn("InvalidSignatureError", self.issuer.assertion_errors[0])

    def test_algorithm_not_accepted(self) -> None:
        """An issuer that does not list the key's algorithm is not sent an assertion."""
        self.issuer.metadata["token_endpoint_auth_signing_alg_values_supported"] = ["ES256"]
        failure = self.failureResultOf(
            Deferred.fromCoroutine(
                self.sign_ins.credentials("remote", self.server(rsa_key())).authorization()
            ),
            AuthorizationError,
        )
        self.assertIn("RS256", str(failure.value))
        self.assertEqual(self.issuer.token_requests, [])

    def test_key_never_shown(self) -> None:
        """The key's PEM is masked; the server's repr and redacted block show the path only."""
        key = rsa_key()
        server = self.server(key)
        pem = Path(server.auth.oauth.private_key.path).read_text()  # type: ignore[union-attr]
        self.assertNotIn("PRIVATE KEY", repr(server))
        assert server.auth is not None
        self.assertEqual(server.auth.redacted()["signingAlgorithm"], "RS256")
        masker = SecretMasker()
        masker.learn(ServersConfig({"remote": server}, "test"))
        self.assertEqual(masker.mask("x " + pem), "x ***")


class PrivateKeySettingTests(SynchronousTestCase):
    def test_refused_keys(self) -> None:
        """Each unusable key file is refused at load with the reason, never its contents."""
        good = _pem_file(self, rsa_key())
        garbage = Path(self.mktemp()).absolute()
        garbage.write_text("not a key at all")
        base = {"type": "oauth", "grant": "client_credentials", "clientId": "robot"}
        cases = [
            ({"privateKeyFile": str(garbage)}, "no PEM private key"),
            ({"privateKeyFile": "/nonexistent/key.pem"}, "cannot be read"),
            ({"privateKeyFile": "key.pem"}, "absolute"),
            ({"privateKeyFile": good, "signingAlgorithm": "ES256"}, "cannot sign with ES256"),
            ({"privateKeyFile": good, "clientSecret": "s3cret"}, "not both"),
            ({"signingAlgorithm": "RS256", "clientSecret": "s"}, "privateKeyFile"),
        ]
        for extra, expected in cases:
            with self.assertRaises(SettingsError) as raised:
                remote({**base, **extra})
            self.assertIn(expected, str(raised.exception))
            self.assertNotIn("not a key at all", str(raised.exception))
        with self.assertRaises(SettingsError) as raised:
            remote({"type": "oauth", "clientId": "robot", "privateKeyFile": good})
        self.assertIn("client_credentials", str(raised.exception))
