"""
The one-time codes and sessions that sign a browser in to the status page
(L{mcpx.daemon.browser_login}), on an injected clock.
"""

from __future__ import annotations

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from mcpx.daemon.browser_login import (
    CODE_LIFETIME,
    MAX_CODES,
    MAX_SESSIONS,
    SESSION_LIFETIME,
    BrowserLogins,
)


class BrowserLoginTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.logins = BrowserLogins(self.clock)

    def test_code_is_good_once(self) -> None:
        """A code signs one browser in; the same code again gets nothing."""
        code = self.logins.new_code()
        session = self.logins.exchange(code)
        assert session is not None
        self.assertTrue(self.logins.signed_in(session.encode()))
        self.assertIsNone(self.logins.exchange(code))

    def test_code_expires(self) -> None:
        """A code not used within CODE_LIFETIME is refused, and stays refused."""
        code = self.logins.new_code()
        self.clock.advance(CODE_LIFETIME)
        self.assertIsNone(self.logins.exchange(code))

    def test_made_up_values_refused(self) -> None:
        self.logins.new_code()
        self.assertIsNone(self.logins.exchange("not-a-code"))
        self.assertIsNone(self.logins.exchange("x" * 10_000))
        self.assertFalse(self.logins.signed_in(b"not-a-session"))
        self.assertFalse(self.logins.signed_in(None))

    def test_session_expires(self) -> None:
        session = self.logins.exchange(self.logins.new_code())
        assert session is not None
        self.clock.advance(SESSION_LIFETIME - 1)
        self.assertTrue(self.logins.signed_in(session.encode()))
        self.clock.advance(1)
        self.assertFalse(self.logins.signed_in(session.encode()))

    def test_bounded(self) -> None:
        """Past MAX_CODES codes or MAX_SESSIONS sessions, the oldest gives way."""
        codes = [self.logins.new_code() for _ in range(MAX_CODES + 1)]
        self.assertIsNone(self.logins.exchange(codes[0]))
        self.assertIsNotNone(self.logins.exchange(codes[-1]))
        sessions = []
        for _ in range(MAX_SESSIONS + 1):
            session = self.logins.exchange(self.logins.new_code())
            assert session is not None
            sessions.append(session.encode())
        self.assertFalse(self.logins.signed_in(sessions[0]))
        self.assertTrue(all(self.logins.signed_in(s) for s in sessions[1:]))
