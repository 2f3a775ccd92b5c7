"""Tests for the C{/v1/auth} operations, over the daemon's HTTP app in memory."""

from __future__ import annotations

from urllib.parse import parse_qs, urlencode, urlsplit

from twisted.trial.unittest import SynchronousTestCase

from mcpx.auth.signin import SignIns
from mcpx.auth.store import TokenStore
from mcpx.settings.secrets import SecretMasker
from mcpx.settings.servers import ServersConfig
from tests.auth.test_flow import stub
from tests.auth.test_signin import ProtectedServers, remote
from tests.daemon.fake_pool import Harness, swap_part


class AuthOpsTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.harness = Harness()
        self.fake = ProtectedServers()
        http = self.harness.http
        assert http.host.servers is not None
        servers = dict(http.host.servers.servers)
        servers["remote"] = remote()
        swap_part(
            http.host,
            servers=ServersConfig(servers, "test"),
            sign_ins=SignIns(stub(self.fake), self.harness.clock, TokenStore(None), SecretMasker()),
        )

    def test_login_status_logout(self) -> None:
        """Begin, finish with the redirect, see the state (no token), log out."""
        begun = self.harness.post(
            "/v1/auth/remote/begin", {"redirect_uri": "http://127.0.0.1:5555/callback"}
        )
        self.assertEqual(begun.code, 200, begun.body)
        query = parse_qs(urlsplit(begun.json["url"]).query)
        redirected = "http://127.0.0.1:5555/callback?" + urlencode(
            {"code": "c", "state": query["state"][0]}
        )
        finished = self.harness.post("/v1/auth/remote/finish", {"url": redirected})
        self.assertEqual(finished.code, 200, finished.body)
        self.assertEqual(finished.json["server"]["state"], "signed_in")
        status = self.harness.get("/v1/auth")
        self.assertEqual(
            [(s["server"], s["state"]) for s in status.json["servers"]], [("remote", "signed_in")]
        )
        self.assertNotIn(b"tok-1", status.body)
        gone = self.harness.send("DELETE", "/v1/auth/remote")
        self.assertEqual(gone.json, {"server": "remote", "forgotten": 1, "warnings": []})
        self.assertEqual(self.harness.get("/v1/auth").json["servers"][0]["state"], "signed_out")

    def test_forged_redirect(self) -> None:
        """A redirect whose state no sign-in knows is 422 and says to log in again."""
        self.harness.post(
            "/v1/auth/remote/begin", {"redirect_uri": "http://127.0.0.1:5555/callback"}
        )
        answer = self.harness.post(
            "/v1/auth/remote/finish", {"url": "http://127.0.0.1:5555/callback?code=c&state=x"}
        )
        self.assertEqual(answer.code, 422)
        self.assertEqual(answer.json["error"]["code"], "sign_in_failed")
        self.assertIn("mcpx auth login remote", answer.json["error"]["message"])

    def test_not_oauth(self) -> None:
        """A server without OAuth is 409; an unknown one 404."""
        self.assertEqual(self.harness.send("DELETE", "/v1/auth/files").code, 409)
        self.assertEqual(self.harness.send("DELETE", "/v1/auth/nope").code, 404)
