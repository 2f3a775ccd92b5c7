"""
L{mcpx.lasting}: a key is news when it enters a lasting condition, not while it lasts.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from mcpx.lasting import Lasting


class LastingTests(SynchronousTestCase):
    def test_a_key_is_news_once_while_it_lasts(self) -> None:
        crowded: Lasting[str] = Lasting()
        self.assertTrue(crowded.begins("alice"))
        self.assertFalse(crowded.begins("alice"))
        self.assertFalse(crowded.begins("alice"))
        self.assertIn("alice", crowded)

    def test_keys_are_apart(self) -> None:
        crowded: Lasting[str] = Lasting()
        self.assertTrue(crowded.begins("alice"))
        self.assertTrue(crowded.begins("bob"))
        self.assertNotIn("carol", crowded)

    def test_entering_again_after_it_ended_is_news_again(self) -> None:
        crowded: Lasting[str] = Lasting()
        crowded.begins("alice")
        crowded.ends("alice")
        self.assertNotIn("alice", crowded)
        self.assertTrue(crowded.begins("alice"))

    def test_ending_a_key_not_in_it_is_harmless(self) -> None:
        crowded: Lasting[str] = Lasting()
        crowded.ends("nobody")
        self.assertTrue(crowded.begins("nobody"))

    def test_clear_makes_every_key_news_again(self) -> None:
        crowded: Lasting[str] = Lasting()
        crowded.begins("alice")
        crowded.begins("bob")
        crowded.clear()
        self.assertTrue(crowded.begins("alice"))
        self.assertTrue(crowded.begins("bob"))

    def test_at_most_so_many_keys_are_held(self) -> None:
        """Keyed by what a peer sends, the set cannot grow past its bound."""
        refused: Lasting[tuple[str, str]] = Lasting(most=2)
        self.assertTrue(refused.begins(("403", "origin")))
        self.assertTrue(refused.begins(("403", "host")))
        self.assertFalse(refused.begins(("401", "token")))
        self.assertNotIn(("401", "token"), refused)
        refused.ends(("403", "host"))
        self.assertTrue(refused.begins(("401", "token")))
