"""Tests for L{mcpx.auth.store} and L{mcpx.auth.refresh}."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from mcpx.auth.flow import (
    Discovery,
    GrantRefused,
    NetworkError,
    Registration,
    Tokens,
)
from mcpx.auth.metadata import default_server_metadata
from mcpx.auth.refresh import NeedsSignIn, Refresher
from mcpx.auth.store import Entry, Key, TokenStore
from mcpx.settings.secrets import SecretMasker
from mcpx.spec.revision import Revision

KEY = Key("remote", "https://as.example", "https://mcp.example/mcp")
CLIENT = Registration("https://as.example", "cid", "client-secret-value", "client_secret_basic")


def signed_in(expires_at: float | None = 1000.0, refresh: str | None = "refresh-value") -> Entry:
    return Entry(KEY, CLIENT, Tokens("access-value", refresh, expires_at, ("a",)))


class StoreTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.path = Path(self.mktemp())
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def test_survives_restart_0600(self) -> None:
        """An entry written is read back by a new store; the file is 0600."""
        TokenStore(self.path).put(signed_in())
        again = TokenStore(self.path).get(KEY)
        assert again is not None and again.tokens is not None
        self.assertEqual(again.tokens.refresh_token, "refresh-value")
        self.assertEqual(again.registration, CLIENT)
        self.assertEqual(stat.S_IMODE(self.path.stat().st_mode), 0o600)

    def test_keyed_by_issuer(self) -> None:
        """Another issuer of the same server is another entry; forget drops them all."""
        store = TokenStore(self.path)
        store.put(signed_in())
        other = Key("remote", "https://new-as.example", KEY.resource)
        self.assertIsNone(store.get(other))
        store.put(Entry(other))
        self.assertEqual(len(store.forget("remote")), 2)
        self.assertEqual(TokenStore(self.path).entries(), [])

    def test_keyed_by_principal(self) -> None:
        """
        A subject's sign-in is an entry of its own, kept across restarts; forgetting one
        principal's leaves the owner's, and a file of before (no principal) is the owner's.
        """
        store = TokenStore(self.path)
        store.put(signed_in())
        bobs = Key("remote", KEY.issuer, KEY.resource, 'subject:"bob"')
        store.put(Entry(bobs, CLIENT, Tokens("bob-access", None, None, ())))
        again = TokenStore(self.path)
        self.assertEqual([e.key for e in again.entries("remote", 'subject:"bob"')], [bobs])
        self.assertEqual([e.key for e in again.entries("remote", "")], [KEY])
        self.assertEqual([e.key for e in again.forget("remote", 'subject:"bob"')], [bobs])
        self.assertEqual([e.key for e in TokenStore(self.path).entries()], [KEY])
        self.assertNotIn("principal", self.path.read_text())

    def test_masked(self) -> None:
        """The masker taught the store's secrets hides tokens and the client secret."""
        store = TokenStore(None)
        store.put(signed_in())
        masker = SecretMasker()
        masker.add_values(store.secrets())
        self.assertEqual(
            masker.mask("got access-value, refresh-value, client-secret-value"),
            "got ***, ***, ***",
        )

    def test_garbage_file_ignored(self) -> None:
        self.path.write_text("not json")
        self.assertEqual(TokenStore(self.path).entries(), [])


class FakeClient:
    def __init__(self) -> None:
        self.calls = 0
        self.pending: list[Deferred[Tokens]] = []

    async def refresh(self, discovery: Any, client: Any, tokens: Tokens) -> Tokens:
        self.calls += 1
        waiting: Deferred[Tokens] = Deferred()
        self.pending.append(waiting)
        return await waiting


DISCOVERY = Discovery(
    KEY.resource, Revision.V2025_11_25, KEY.resource, None, default_server_metadata(KEY.resource)
)


class RefreshTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.store = TokenStore(None)
        self.client = FakeClient()
        self.refresher = Refresher(self.store, self.client, self.clock)  # type: ignore[arg-type]

    def token(self) -> Deferred[str]:
        return Deferred.fromCoroutine(self.refresher.access_token(KEY, DISCOVERY))

    def test_fresh_token_no_refresh(self) -> None:
        self.store.put(signed_in())
        self.assertEqual(self.successResultOf(self.token()), "access-value")
        self.assertEqual(self.client.calls, 0)

    def test_one_refresh_at_a_time(self) -> None:
        """Two uses of an expiring token share one refresh."""
        self.store.put(signed_in(expires_at=30.0))
        first, second = self.token(), self.token()
        self.assertEqual(self.client.calls, 1)
        self.client.pending[0].callback(Tokens("new-access", "r2", 5000.0, ("a",)))
        self.assertEqual(self.successResultOf(first), "new-access")
        self.assertEqual(self.successResultOf(second), "new-access")
        self.assertEqual(self.client.calls, 1)

    def test_network_failure_keeps_token(self) -> None:
        """A refresh failing on the network keeps the tokens; a later use retries."""
        self.store.put(signed_in(expires_at=10.0))
        self.clock.advance(20)
        attempt = self.token()
        self.client.pending[0].errback(NetworkError("down"))
        self.failureResultOf(attempt, NetworkError)
        entry = self.store.get(KEY)
        assert entry is not None and entry.tokens is not None
        self.assertFalse(entry.needs_sign_in)
        self.clock.advance(5)
        retry = self.token()
        self.client.pending[1].callback(Tokens("new-access", None, 9000.0, ()))
        self.assertEqual(self.successResultOf(retry), "new-access")

    def test_invalid_grant_needs_sign_in(self) -> None:
        """invalid_grant marks the entry, and the error names mcpx auth login."""
        self.store.put(signed_in(expires_at=10.0))
        attempt = self.token()
        self.client.pending[0].errback(GrantRefused("invalid_grant"))
        failure = self.failureResultOf(attempt, NeedsSignIn)
        self.assertIn("mcpx auth login remote", str(failure.value))
        entry = self.store.get(KEY)
        assert entry is not None
        self.assertTrue(entry.needs_sign_in)
        self.failureResultOf(self.token(), NeedsSignIn)

    def test_invalid_client_forgets_the_client(self) -> None:
        """invalid_client drops the registration, so the next sign-in registers anew."""
        self.store.put(signed_in(expires_at=10.0))
        attempt = self.token()
        self.client.pending[0].errback(GrantRefused("invalid_client"))
        self.failureResultOf(attempt, NeedsSignIn)
        entry = self.store.get(KEY)
        assert entry is not None
        self.assertIsNone(entry.registration)
        self.assertTrue(entry.needs_sign_in)

    def test_never_signed_in(self) -> None:
        failure = self.failureResultOf(self.token(), NeedsSignIn)
        self.assertIn("mcpx auth login remote", str(failure.value))
