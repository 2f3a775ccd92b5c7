"""Tests for L{mcpx.auth.signin}: a whole sign-in, then tokens for the channel."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.server import Request

from mcpx.auth.metadata import AuthorizationError
from mcpx.auth.refresh import NeedsSignIn
from mcpx.auth.signin import STEP_UP_LIMIT, SignIns
from mcpx.auth.store import TokenStore
from mcpx.settings.secrets import SecretMasker
from mcpx.settings.server_entry import parse_server
from mcpx.settings.servers import RemoteServer
from mcpx.spec.revision import Revision
from tests.auth.test_flow import MCP, FakeServers, stub

REDIRECT = "http://127.0.0.1:4711/callback"


class ProtectedServers(FakeServers):
    """The fake servers, with an MCP endpoint that wants a token."""

    def render(self, request: Request) -> bytes:
        if request.path == b"/mcp":
            self.requests.append(("POST", "/mcp", {}, {}))
            request.setResponseCode(401)
            request.setHeader(
                b"www-authenticate",
                b'Bearer resource_metadata="https://mcp.example/.well-known/'
                b'oauth-protected-resource/mcp", scope="mcp:read"',
            )
            return b""
        return super().render(request)


BOB = 'subject:"bob"'
ALICE = 'subject:"alice"'
ISSUER_1 = "https://mcp.example/tenant1"


def remote(auth: dict[str, Any] | None = None) -> RemoteServer:
    found = parse_server(
        "remote", {"url": MCP, "auth": auth or {"type": "oauth"}}, origin="test", environ={}
    )
    assert isinstance(found, RemoteServer)
    return found


def run(test: SynchronousTestCase, coroutine: Any) -> Any:
    return test.successResultOf(Deferred.fromCoroutine(coroutine))


class SignInTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.fake = ProtectedServers()
        self.fake.documents["/.well-known/openid-configuration/tenant1"][
            "authorization_response_iss_parameter_supported"
        ] = True
        self.clock = Clock()
        self.path = Path(self.mktemp())
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.masker = SecretMasker()
        self.sign_ins = SignIns(stub(self.fake), self.clock, TokenStore(self.path), self.masker)
        self.server = remote()

    def browse(self, url: str, **changes: str) -> str:
        """What the authorization server redirects the browser to."""
        query = parse_qs(urlsplit(url).query)
        params = {
            "code": "the-code",
            "state": query["state"][0],
            "iss": "https://mcp.example/tenant1",
        }
        params.update(changes)
        return query["redirect_uri"][0] + "?" + urlencode(params)

    def test_sign_in_then_token(self) -> None:
        """Sign in, and the channel gets the token; status shows no token."""
        self.failureResultOf(
            Deferred.fromCoroutine(self.sign_ins.authorization("remote", self.server)),
            NeedsSignIn,
        )
        started = run(self, self.sign_ins.begin("remote", self.server, REDIRECT))
        query = parse_qs(urlsplit(started["url"]).query)
        self.assertEqual(query["scope"], ["mcp:read"])
        self.assertEqual(query["resource"], [MCP])
        shown = run(self, self.sign_ins.finish("remote", self.browse(started["url"])))
        self.assertEqual(shown["state"], "signed_in")
        self.assertEqual(shown["issuer"], "https://mcp.example/tenant1")
        self.assertNotIn("tok-1", repr(shown))
        header = run(self, self.sign_ins.authorization("remote", self.server))
        self.assertEqual(header, "Bearer tok-1")
        self.assertEqual(self.masker.mask("x tok-1 ref-1"), "x *** ***")

    def test_survives_restart(self) -> None:
        started = run(self, self.sign_ins.begin("remote", self.server, REDIRECT))
        run(self, self.sign_ins.finish("remote", self.browse(started["url"])))
        again = SignIns(stub(self.fake), self.clock, TokenStore(self.path), SecretMasker())
        self.assertEqual(run(self, again.authorization("remote", self.server)), "Bearer tok-1")

    def test_wrong_state_or_iss_refused(self) -> None:
        """A redirect with a foreign state or issuer makes no token request."""
        started = run(self, self.sign_ins.begin("remote", self.server, REDIRECT))
        self.failureResultOf(
            Deferred.fromCoroutine(
                self.sign_ins.finish("remote", self.browse(started["url"], state="forged"))
            ),
            AuthorizationError,
        )
        self.failureResultOf(
            Deferred.fromCoroutine(
                self.sign_ins.finish("remote", self.browse(started["url"], iss="https://evil"))
            ),
            AuthorizationError,
        )
        self.assertNotIn("/token", self.fake.paths())

    def test_refresh_after_401(self) -> None:
        """A 401 makes the next use rediscover and refresh, with resource."""
        started = run(self, self.sign_ins.begin("remote", self.server, REDIRECT))
        run(self, self.sign_ins.finish("remote", self.browse(started["url"])))
        credentials = self.sign_ins.credentials("remote", self.server)
        hint = credentials.unauthorized(['Bearer error="invalid_token"'])
        self.assertIn("mcpx auth login remote", hint)
        self.fake.token_answer = (200, {"access_token": "tok-2", "expires_in": 60})
        del self.fake.requests[:]
        self.assertEqual(run(self, credentials.authorization()), "Bearer tok-2")
        refresh = [form for _, path, form, _ in self.fake.requests if path == "/token"]
        self.assertEqual(refresh[0]["grant_type"], ["refresh_token"])
        self.assertEqual(refresh[0]["resource"], [MCP])

    def test_logout(self) -> None:
        started = run(self, self.sign_ins.begin("remote", self.server, REDIRECT))
        run(self, self.sign_ins.finish("remote", self.browse(started["url"])))
        self.assertEqual(run(self, self.sign_ins.logout("remote")), (1, []))
        self.assertEqual(
            self.sign_ins.describe("remote"), {"server": "remote", "state": "signed_out"}
        )
        self.failureResultOf(
            Deferred.fromCoroutine(self.sign_ins.authorization("remote", self.server)),
            NeedsSignIn,
        )


class PendingLimitTests(SynchronousTestCase):
    def test_bounded_and_expiring(self) -> None:
        """At most MAX_PENDING sign-ins wait; an old one expires and makes room."""
        from mcpx.auth.signin import MAX_PENDING, PENDING_TTL

        clock = Clock()
        sign_ins = SignIns(stub(ProtectedServers()), clock, TokenStore(None), SecretMasker())
        server = remote()
        for _ in range(MAX_PENDING):
            run(self, sign_ins.begin("remote", server, REDIRECT))
        failure = self.failureResultOf(
            Deferred.fromCoroutine(sign_ins.begin("remote", server, REDIRECT)),
            AuthorizationError,
        )
        self.assertIn("already waiting", str(failure.value))
        self.assertIn("daemon.pendingSignIns", str(failure.value))
        clock.advance(PENDING_TTL + 1)
        run(self, sign_ins.begin("remote", server, REDIRECT))

    def test_per_principal(self) -> None:
        """
        A subject with every slot it may have taken leaves the owner's (and another
        subject's) free; all subjects together hold at most SUBJECTS_PENDING.
        """
        from mcpx.auth import signin
        from mcpx.auth.signin import MAX_PENDING

        self.patch(signin, "SUBJECTS_PENDING", MAX_PENDING + 2)
        sign_ins = SignIns(stub(ProtectedServers()), Clock(), TokenStore(None), SecretMasker())
        server = remote()
        for _ in range(MAX_PENDING):
            run(self, sign_ins.begin("remote", server, REDIRECT, BOB))
        self.failureResultOf(
            Deferred.fromCoroutine(sign_ins.begin("remote", server, REDIRECT, BOB)),
            AuthorizationError,
        )
        run(self, sign_ins.begin("remote", server, REDIRECT))
        for _ in range(2):
            run(self, sign_ins.begin("remote", server, REDIRECT, ALICE))
        failure = self.failureResultOf(
            Deferred.fromCoroutine(sign_ins.begin("remote", server, REDIRECT, ALICE)),
            AuthorizationError,
        )
        self.assertIn("of other callers", str(failure.value))
        run(self, sign_ins.begin("remote", server, REDIRECT))


class PerPersonTests(SynchronousTestCase):
    """Each principal's sign-in is its own; a shared server's is the owner's."""

    def setUp(self) -> None:
        self.fake = ProtectedServers()
        self.fake.documents["/.well-known/openid-configuration/tenant1"][
            "authorization_response_iss_parameter_supported"
        ] = True
        self.sign_ins = SignIns(stub(self.fake), Clock(), TokenStore(None), SecretMasker())

    def sign_in(self, server: RemoteServer, principal: str) -> None:
        started = run(self, self.sign_ins.begin("remote", server, REDIRECT, principal))
        query = parse_qs(urlsplit(started["url"]).query)
        back = {"code": "the-code", "state": query["state"][0], "iss": ISSUER_1}
        redirected = REDIRECT + "?" + urlencode(back)
        # Another principal cannot finish it, even with its state.
        other = ALICE if principal != ALICE else BOB
        self.failureResultOf(
            Deferred.fromCoroutine(self.sign_ins.finish("remote", redirected, other)),
            AuthorizationError,
        )
        run(self, self.sign_ins.finish("remote", redirected, principal))

    def test_subjects_own_tokens(self) -> None:
        """
        Bob's sign-in serves bob alone: the owner's calls keep the owner's token, alice
        still needs one of her own (told how, not `mcpx auth login`), and bob's sign-out
        leaves the owner's.
        """
        server = remote()
        self.fake.token_answer = (200, {"access_token": "tok-1", "expires_in": 3600})
        self.sign_in(server, "")
        self.fake.token_answer = (200, {"access_token": "bobs", "expires_in": 3600})
        self.sign_in(server, BOB)
        self.assertEqual(run(self, self.sign_ins.authorization("remote", server)), "Bearer tok-1")
        self.assertEqual(
            run(self, self.sign_ins.authorization("remote", server, BOB)), "Bearer bobs"
        )
        needs = self.failureResultOf(
            Deferred.fromCoroutine(self.sign_ins.authorization("remote", server, ALICE)),
            NeedsSignIn,
        )
        self.assertIn("POST /v1/auth/remote/begin", str(needs.value))
        self.assertNotIn("mcpx auth login", str(needs.value))
        self.assertEqual(run(self, self.sign_ins.logout("remote", BOB))[0], 1)
        self.assertEqual(run(self, self.sign_ins.authorization("remote", server)), "Bearer tok-1")
        self.assertEqual(self.sign_ins.describe("remote", BOB)["state"], "signed_out")

    def test_shared_is_the_owners(self) -> None:
        """With "shared": true every principal's requests carry the owner's token."""
        server = remote({"type": "oauth", "shared": True})
        self.fake.token_answer = (200, {"access_token": "tok-1", "expires_in": 3600})
        self.sign_in(server, "")
        self.assertEqual(
            run(self, self.sign_ins.authorization("remote", server, BOB)), "Bearer tok-1"
        )


class StepUpTests(SynchronousTestCase):
    """A 403 insufficient_scope: a step-up sign-in with the scopes, at most STEP_UP_LIMIT."""

    def setUp(self) -> None:
        self.fake = ProtectedServers()
        self.clock = Clock()
        self.fake.token_answer = (
            200,
            {"access_token": "tok-1", "expires_in": 3600, "scope": "mcp:read"},
        )
        self.sign_ins = SignIns(stub(self.fake), self.clock, TokenStore(None), SecretMasker())
        self.server = remote()
        started = run(self, self.sign_ins.begin("remote", self.server, REDIRECT))
        query = parse_qs(urlsplit(started["url"]).query)
        back = query["redirect_uri"][0] + "?" + urlencode({"code": "c", "state": query["state"][0]})
        run(self, self.sign_ins.finish("remote", back))
        self.credentials = self.sign_ins.credentials("remote", self.server)

    def scopes_asked(self) -> list[str]:
        started = run(self, self.sign_ins.begin("remote", self.server, REDIRECT))
        url: str = started["url"]
        return parse_qs(urlsplit(url).query)["scope"][0].split()

    def test_step_up_union_modern(self) -> None:
        """
        At 2026-07-28 the next sign-in asks for the held scopes and the challenged ones;
        status and the call's error say a sign-in with them is needed.
        """
        hint = self.credentials.unauthorized(
            ['Bearer error="insufficient_scope", scope="mcp:write"'], Revision.V2026_07_28
        )
        self.assertIn("mcpx auth login remote", hint)
        self.assertIn("mcp:write", hint)
        shown = self.sign_ins.describe("remote")
        self.assertEqual(shown["state"], "needs_sign_in")
        self.assertEqual(shown["required_scopes"], ["mcp:read", "mcp:write"])
        refused = self.failureResultOf(
            Deferred.fromCoroutine(self.credentials.authorization()), NeedsSignIn
        )
        self.assertIn("mcpx auth login remote", str(refused.value))
        self.assertIn("missing: mcp:write", str(refused.value))
        self.assertEqual(self.scopes_asked(), ["mcp:read", "mcp:write"])

    def test_subjects_step_up_is_its_own(self) -> None:
        """
        A step-up a server asks of bob's token marks bob's sign-in and asks bob's next
        one for the scopes; the owner's sign-in and its next scopes are as they were.
        """
        started = run(self, self.sign_ins.begin("remote", self.server, REDIRECT, BOB))
        query = parse_qs(urlsplit(started["url"]).query)
        back = query["redirect_uri"][0] + "?" + urlencode({"code": "c", "state": query["state"][0]})
        run(self, self.sign_ins.finish("remote", back, BOB))
        bobs = self.sign_ins.credentials("remote", self.server, BOB)
        hint = bobs.unauthorized(['Bearer error="insufficient_scope", scope="mcp:write"'])
        self.assertIn("POST /v1/auth/remote/begin", hint)
        self.assertEqual(self.sign_ins.describe("remote", BOB)["state"], "needs_sign_in")
        self.assertEqual(self.sign_ins.describe("remote")["state"], "signed_in")
        self.assertEqual(run(self, self.credentials.authorization()), "Bearer tok-1")
        self.assertEqual(self.scopes_asked(), ["mcp:read"])
        started = run(self, self.sign_ins.begin("remote", self.server, REDIRECT, BOB))
        asked = parse_qs(urlsplit(started["url"]).query)["scope"][0].split()
        self.assertEqual(asked, ["mcp:read", "mcp:write"])

    def test_step_up_union_before(self) -> None:
        """
        At 2025-11-25 too the step-up asks for the challenged scopes with the held ones,
        so what worked with the old token goes on working.
        """
        self.credentials.unauthorized(
            ['Bearer error="insufficient_scope", scope="mcp:write"'], Revision.V2025_11_25
        )
        self.assertEqual(self.scopes_asked(), ["mcp:read", "mcp:write"])

    def test_retry_limit(self) -> None:
        """After STEP_UP_LIMIT step-ups for the same scopes mcpx stops asking for sign-ins."""
        challenge = ['Bearer error="insufficient_scope", scope="mcp:admin"']
        for attempt in range(STEP_UP_LIMIT):
            # Every refused request of one token is one step-up, however many there are.
            for _ in range(3):
                self.assertIn("mcpx auth login", self.credentials.unauthorized(challenge))
            self.assertEqual(self.sign_ins.describe("remote")["state"], "needs_sign_in")
            self.fake.token_answer = (
                200,
                {"access_token": f"tok-up-{attempt}", "expires_in": 3600, "scope": "mcp:admin"},
            )
            started = run(self, self.sign_ins.begin("remote", self.server, REDIRECT))
            query = parse_qs(urlsplit(started["url"]).query)
            back = (
                query["redirect_uri"][0]
                + "?"
                + urlencode({"code": "c", "state": query["state"][0]})
            )
            run(self, self.sign_ins.finish("remote", back))
        hint = self.credentials.unauthorized(challenge)
        self.assertNotIn("mcpx auth login", hint)
        self.assertIn("stops asking", hint)
        shown = self.sign_ins.describe("remote")
        self.assertEqual(shown["state"], "signed_in")
        self.assertEqual(shown["scopes_refused"], ["mcp:admin"])
