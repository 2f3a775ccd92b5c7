"""
The caller identity an access token's subject is given, and what it may see: its own
identity and the sessions and request scopes under it, never another subject's.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from mcpx.auth.caller import subject_identity
from mcpx.ops.host import Invocation
from mcpx.server.request_context import subject_session


class HolderTests(SynchronousTestCase):
    def test_own_identity_sessions_and_scopes(self) -> None:
        """Alice's caller holds what her identity, her named sessions and scopes left."""
        alice = Invocation({}, holder=subject_identity("alice"))
        for client in (
            subject_identity("alice"),
            subject_session("alice", "team"),
            f"{subject_identity('alice')}/request-3",
        ):
            self.assertTrue(alice.holds(client), client)

    def test_no_other_subject_by_any_spelling(self) -> None:
        """
        No subject, however it is spelled, reaches what another's identity left: the
        subject is quoted, so one cannot end another's and add a scope of its own.
        """
        alice = Invocation({}, holder=subject_identity("alice"))
        for other in ('alice"/x', "alice/x", "alic", "alicee", "cli", "http"):
            self.assertFalse(alice.holds(subject_identity(other)), other)
            self.assertFalse(alice.holds(subject_session(other, "team")), other)
        for unbound in ("cli", "http", "team", None):
            self.assertFalse(alice.holds(unbound), unbound)

    def test_without_a_token_everything(self) -> None:
        """The owner's socket (no token) sees every caller's tasks and questions."""
        owner = Invocation({})
        for client in ("cli", subject_identity("alice"), subject_session("bob", "x"), None):
            self.assertTrue(owner.holds(client), client)
