"""
Tests for RFC 7009 revocation on sign-out (L{mcpx.auth.signin.SignIns.logout} and
C{DELETE /v1/auth/NAME}): the tokens are revoked where the authorization server
offers it, and forgotten whatever it answers.
"""

from __future__ import annotations

import base64
from urllib.parse import parse_qs, urlencode, urlsplit

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from mcpx.auth.signin import SignIns
from mcpx.auth.store import TokenStore
from mcpx.settings.secrets import SecretMasker
from mcpx.settings.servers import RemoteServer, ServersConfig
from tests.auth.test_flow import stub
from tests.auth.test_signin import REDIRECT, ProtectedServers, remote, run
from tests.daemon.fake_pool import Harness, swap_part

METADATA = "/.well-known/openid-configuration/tenant1"


def revoking() -> ProtectedServers:
    """The fake authorization server, offering RFC 7009 revocation at C{/revoke}."""
    fake = ProtectedServers()
    fake.documents[METADATA]["revocation_endpoint"] = "https://mcp.example/revoke"
    fake.documents[METADATA]["authorization_response_iss_parameter_supported"] = True
    return fake


def sign_in(test: SynchronousTestCase, sign_ins: SignIns, fake: ProtectedServers) -> None:
    started = run(test, sign_ins.begin("remote", sign_ins_server(), REDIRECT))
    query = parse_qs(urlsplit(started["url"]).query)
    params = {"code": "c", "state": query["state"][0], "iss": "https://mcp.example/tenant1"}
    run(test, sign_ins.finish("remote", REDIRECT + "?" + urlencode(params)))
    del fake.requests[:]


def sign_ins_server() -> RemoteServer:
    return remote({"type": "oauth", "clientId": "the-client", "clientSecret": "the-secret"})


class LogoutRevocationTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.fake = revoking()
        self.sign_ins = SignIns(stub(self.fake), Clock(), TokenStore(None), SecretMasker())
        sign_in(self, self.sign_ins, self.fake)

    def revocations(self) -> list[tuple[dict[str, list[str]], dict[str, str]]]:
        return [
            (form, headers) for _, path, form, headers in self.fake.requests if path == "/revoke"
        ]

    def test_refresh_then_access_token_revoked(self) -> None:
        """
        Both tokens are revoked, the refresh token first, each with its hint and the
        client's authentication (client_secret_basic); then they are gone.
        """
        self.assertEqual(run(self, self.sign_ins.logout("remote")), (1, []))
        sent = self.revocations()
        self.assertEqual(
            [(form["token"], form["token_type_hint"]) for form, _ in sent],
            [(["ref-1"], ["refresh_token"]), (["tok-1"], ["access_token"])],
        )
        basic = "Basic " + base64.b64encode(b"the-client:the-secret").decode()
        self.assertEqual([headers["authorization"] for _, headers in sent], [basic, basic])
        self.assertEqual(self.sign_ins.describe("remote")["state"], "signed_out")

    def test_client_secret_post(self) -> None:
        """A server that takes only client_secret_post gets the secret in the form."""
        self.fake = revoking()
        self.fake.documents[METADATA]["token_endpoint_auth_methods_supported"] = [
            "client_secret_post"
        ]
        self.sign_ins = SignIns(stub(self.fake), Clock(), TokenStore(None), SecretMasker())
        sign_in(self, self.sign_ins, self.fake)
        run(self, self.sign_ins.logout("remote"))
        (form, headers), _ = self.revocations()
        self.assertEqual(
            (form["client_id"], form["client_secret"]), (["the-client"], ["the-secret"])
        )
        self.assertNotIn("authorization", headers)

    def test_refused_revocation_warns_and_forgets(self) -> None:
        """A revocation refused (or failing) is a warning; the tokens are forgotten anyway."""
        self.fake.revoke_answer = (400, {"error": "unsupported_token_type"})
        forgotten, warnings = run(self, self.sign_ins.logout("remote"))
        self.assertEqual(forgotten, 1)
        (warning,) = warnings
        self.assertIn("https://mcp.example/tenant1 did not revoke", warning)
        self.assertIn("unsupported_token_type", warning)
        self.assertNotIn("ref-1", warning)
        self.assertEqual(self.sign_ins.describe("remote")["state"], "signed_out")

    def test_no_revocation_endpoint(self) -> None:
        """Without a revocation_endpoint nothing is revoked, and nothing is warned."""
        del self.fake.documents[METADATA]["revocation_endpoint"]
        # The daemon forgets its discoveries on restart; the metadata is asked again.
        self.sign_ins._discoveries.clear()
        self.assertEqual(run(self, self.sign_ins.logout("remote")), (1, []))
        self.assertEqual(self.revocations(), [])


class LogoutOpTests(SynchronousTestCase):
    def test_warning_in_the_answer(self) -> None:
        """DELETE /v1/auth/NAME forgets and answers the failed revocation as a warning."""
        harness = Harness()
        fake = revoking()
        fake.revoke_answer = (503, {})
        http = harness.http
        assert http.host.servers is not None
        sign_ins = SignIns(stub(fake), harness.clock, TokenStore(None), SecretMasker())
        configured = {**http.host.servers.servers, "remote": sign_ins_server()}
        swap_part(http.host, servers=ServersConfig(configured, "test"), sign_ins=sign_ins)
        sign_in(self, sign_ins, fake)
        gone = harness.send("DELETE", "/v1/auth/remote")
        self.assertEqual(gone.code, 200, gone.body)
        self.assertEqual((gone.json["server"], gone.json["forgotten"]), ("remote", 1))
        (warning,) = gone.json["warnings"]
        self.assertIn("HTTP 503", warning)
        self.assertEqual(harness.get("/v1/auth").json["servers"][0]["state"], "signed_out")
