"""
Tests for L{mcpx.spec.revision}: the five revisions, their order and their era.
"""

from __future__ import annotations

import copy
import pickle

from twisted.trial.unittest import SynchronousTestCase

from mcpx.spec import revision
from mcpx.spec.revision import Era, Revision, UnknownRevision

DATES = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28"]


class OrderTests(SynchronousTestCase):
    """Revisions compare by date."""

    def test_five_revisions_oldest_first(self) -> None:
        """Iterating the type gives the five dates, oldest first, with matching indexes."""
        self.assertEqual([rev.value for rev in Revision], DATES)
        self.assertEqual([rev.index for rev in Revision], [0, 1, 2, 3, 4])

    def test_comparisons(self) -> None:
        """Every comparison operator agrees with the dates' own order."""
        for a in Revision:
            for b in Revision:
                self.assertEqual(a < b, a.value < b.value, (a, b))
                self.assertEqual(a <= b, a.value <= b.value, (a, b))
                self.assertEqual(a > b, a.value > b.value, (a, b))
                self.assertEqual(a >= b, a.value >= b.value, (a, b))

    def test_sorting(self) -> None:
        """C{sorted} and C{max} work on revisions."""
        shuffled = [Revision.V2025_11_25, Revision.V2024_11_05, Revision.V2026_07_28]
        self.assertEqual(
            sorted(shuffled),
            [Revision.V2024_11_05, Revision.V2025_11_25, Revision.V2026_07_28],
        )
        self.assertIs(max(Revision), Revision.V2026_07_28)

    def test_keys(self) -> None:
        """
        A revision found by its date, copied or unpickled is the same key of a dict or a
        set as the member itself, and no date string is.
        """
        keyed = {rev: rev.value for rev in Revision}
        for rev in Revision:
            for same in (
                Revision.parse(rev.value),
                copy.deepcopy(rev),
                pickle.loads(pickle.dumps(rev)),
            ):
                self.assertIs(same, rev)
                self.assertEqual(keyed[same], rev.value)
                self.assertIn(same, set(Revision))
            self.assertNotIn(rev.value, keyed)
            self.assertNotEqual(rev, rev.value)

    def test_not_comparable_with_strings(self) -> None:
        """Comparing a revision with a date string is a TypeError, not a silent answer."""
        self.assertRaises(TypeError, lambda: Revision.V2025_06_18 < "2025-11-25")

    def test_str_is_the_date(self) -> None:
        """C{str()} of a revision is its date, for messages and headers."""
        self.assertEqual(str(Revision.V2025_06_18), "2025-06-18")

    def test_named_revisions(self) -> None:
        """The module's named tuples and constants are in order and point where they say."""
        self.assertEqual(revision.ALL_REVISIONS, tuple(Revision))
        self.assertEqual(revision.NEWEST_FIRST, tuple(reversed(tuple(Revision))))
        self.assertIs(revision.OLDEST, Revision.V2024_11_05)
        self.assertIs(revision.NEWEST, Revision.V2026_07_28)
        self.assertIs(revision.NEWEST_LEGACY, Revision.V2025_11_25)
        self.assertIs(revision.UNDECLARED, Revision.V2024_11_05)
        self.assertIs(revision.HEADERLESS_HTTP, Revision.V2025_03_26)


class EraTests(SynchronousTestCase):
    """Legacy revisions handshake; the modern one does not."""

    def test_era(self) -> None:
        """Only 2026-07-28 is modern."""
        self.assertEqual(
            [rev.era for rev in Revision],
            [Era.LEGACY, Era.LEGACY, Era.LEGACY, Era.LEGACY, Era.MODERN],
        )
        self.assertEqual([rev.is_modern for rev in Revision], [False] * 4 + [True])

    def test_legacy_revisions(self) -> None:
        """C{LEGACY_REVISIONS} is the four handshake revisions, oldest first."""
        self.assertEqual([rev.value for rev in revision.LEGACY_REVISIONS], DATES[:4])


class ParseTests(SynchronousTestCase):
    """Reading revisions from strings."""

    def test_parse_each(self) -> None:
        """Each date string parses to its revision."""
        for date, rev in zip(DATES, Revision, strict=True):
            self.assertIs(Revision.parse(date), rev)

    def test_parse_strips_whitespace(self) -> None:
        """Surrounding whitespace, as in a header value, is ignored."""
        self.assertIs(Revision.parse(" 2025-06-18\n"), Revision.V2025_06_18)

    def test_unknown_revision_names_all_five(self) -> None:
        """An unknown date is refused with a message that names it and all five revisions."""
        error = self.assertRaises(UnknownRevision, Revision.parse, "2025-01-01")
        message = str(error)
        self.assertIn("'2025-01-01'", message)
        for date in DATES:
            self.assertIn(date, message)
        self.assertEqual(error.given, "2025-01-01")
        self.assertIsInstance(error, ValueError)

    def test_unknown_revision_names_where(self) -> None:
        """C{where} says where the bad string came from."""
        error = self.assertRaises(UnknownRevision, Revision.parse, "draft", where="spec.precedence")
        self.assertIn("in spec.precedence", str(error))
        self.assertEqual(error.where, "spec.precedence")

    def test_parse_non_string(self) -> None:
        """A non-string (from a JSON body) is an unknown revision, not a crash."""
        error = self.assertRaises(UnknownRevision, Revision.parse, 20250618)
        self.assertIn("20250618", str(error))

    def test_find_is_liberal(self) -> None:
        """C{find} answers None instead of raising, for any value a peer might send."""
        self.assertIs(Revision.find("2025-11-25"), Revision.V2025_11_25)
        self.assertIsNone(Revision.find("2099-01-01"))
        self.assertIsNone(Revision.find(None))
        self.assertIsNone(Revision.find(["2025-11-25"]))

    def test_parse_list(self) -> None:
        """A list parses in order; the first unknown entry is refused."""
        self.assertEqual(
            Revision.parse_list(["2026-07-28", "2024-11-05"]),
            (Revision.V2026_07_28, Revision.V2024_11_05),
        )
        error = self.assertRaises(
            UnknownRevision, Revision.parse_list, ["2026-07-28", "latest", "old"], "flag"
        )
        self.assertEqual(error.given, "latest")
        self.assertEqual(error.where, "flag")
