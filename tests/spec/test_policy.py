"""
Tests for L{mcpx.spec.policy}: which revision wins a conflict, and which are lenient.
"""

from __future__ import annotations

import json

from twisted.trial.unittest import SynchronousTestCase

from mcpx.spec.policy import DEFAULT_POLICY, ConflictPolicy, PolicyError
from mcpx.spec.revision import NEWEST_FIRST, Revision

V1 = Revision.V2024_11_05
V2 = Revision.V2025_03_26
V3 = Revision.V2025_06_18
V4 = Revision.V2025_11_25
V5 = Revision.V2026_07_28


class BuildTests(SynchronousTestCase):
    """Completing C{spec.precedence} and applying C{spec.first}."""

    def test_default_is_newest_first_and_strict(self) -> None:
        """With nothing configured, the newest revision wins and none is lenient."""
        for policy in (DEFAULT_POLICY, ConflictPolicy.build()):
            self.assertEqual(policy.precedence, NEWEST_FIRST)
            self.assertEqual(policy.precedence, (V5, V4, V3, V2, V1))
            self.assertEqual(policy.lenient, frozenset())
            self.assertIs(policy.first(), V5)

    def test_partial_precedence_completed_newest_first(self) -> None:
        """Revisions a partial list leaves out follow it, newest first."""
        policy = ConflictPolicy.build(precedence=[V2, V4])
        self.assertEqual(policy.precedence, (V2, V4, V5, V3, V1))

    def test_full_precedence_kept(self) -> None:
        """A complete list is kept as given."""
        order = (V1, V3, V5, V2, V4)
        self.assertEqual(ConflictPolicy.build(precedence=order).precedence, order)

    def test_first_moves_to_front(self) -> None:
        """C{first} moves one revision to the front and keeps the others' order."""
        self.assertEqual(ConflictPolicy.build(first=V3).precedence, (V3, V5, V4, V2, V1))
        policy = ConflictPolicy.build(precedence=[V2, V4], first=V4)
        self.assertEqual(policy.precedence, (V4, V2, V5, V3, V1))
        self.assertIs(policy.first(), V4)

    def test_first_already_first(self) -> None:
        """C{first} naming the revision already in front changes nothing."""
        self.assertEqual(ConflictPolicy.build(first=V5).precedence, NEWEST_FIRST)

    def test_duplicates_refused(self) -> None:
        """A precedence that names a revision twice is refused, naming the revision."""
        error = self.assertRaises(PolicyError, ConflictPolicy.build, precedence=[V3, V1, V3])
        self.assertIn("2025-06-18", str(error))
        self.assertIsInstance(error, ValueError)

    def test_every_revision_once(self) -> None:
        """Whatever is configured, the precedence lists each revision exactly once."""
        for precedence in ([], [V1], [V3, V2], [V5, V4, V3, V2, V1]):
            for first in (None, *NEWEST_FIRST):
                policy = ConflictPolicy.build(precedence=precedence, first=first)
                self.assertEqual(sorted(policy.precedence), list(Revision))

    def test_lenient(self) -> None:
        """C{lenient} accepts any iterable and is kept as a set."""
        policy = ConflictPolicy.build(lenient=iter([V1, V2, V1]))
        self.assertEqual(policy.lenient, frozenset({V1, V2}))


class PredicateTests(SynchronousTestCase):
    """The questions code asks about the winning revision."""

    def test_strict(self) -> None:
        """A revision is strict unless it is lenient."""
        policy = ConflictPolicy.build(lenient=[V2])
        self.assertFalse(policy.strict(V2))
        self.assertTrue(policy.strict(V3))


class RenderingTests(SynchronousTestCase):
    """The policy as served under C{spec} in C{GET /v1/protocol}."""

    def test_to_json(self) -> None:
        """Precedence, first, and the lenient and strict revisions, newest first."""
        policy = ConflictPolicy.build(precedence=[V2], lenient=[V1, V4])
        self.assertEqual(
            policy.to_json(),
            {
                "precedence": [
                    "2025-03-26",
                    "2026-07-28",
                    "2025-11-25",
                    "2025-06-18",
                    "2024-11-05",
                ],
                "first": "2025-03-26",
                "lenient": ["2025-11-25", "2024-11-05"],
                "strict": ["2026-07-28", "2025-06-18", "2025-03-26"],
            },
        )

    def test_default_json_round_trips(self) -> None:
        """The default policy renders to JSON and back unchanged, with nothing lenient."""
        document = DEFAULT_POLICY.to_json()
        self.assertEqual(json.loads(json.dumps(document)), document)
        self.assertEqual(document["lenient"], [])
        self.assertEqual(document["first"], "2026-07-28")
