"""The jsonschema dialects mcpx builds its validators from: RE2 patterns, metered checks."""

from __future__ import annotations

from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from mcpx.spec.safe_schema import (
    PatternRefused,
    TooCostly,
    compile_pattern,
    dialect,
    metered,
    search,
)


def fits(schema: dict[str, Any], value: Any) -> bool:
    return dialect("2020-12")(schema).is_valid(value)


class EcmaPatternTests(SynchronousTestCase):
    """ECMA-262 patterns, as JSON Schema writes them, mean what they say in ECMA-262."""

    def test_unicode_escapes(self) -> None:
        self.assertTrue(search(r"^\u0041$", "A"))
        self.assertTrue(search(r"^\u{1F600}$", "\U0001f600"))
        self.assertTrue(search(r"^\uD83D\uDE00$", "\U0001f600"))
        self.assertTrue(search(r"^[\u0061-\u0063]+$", "abc"))
        # An escaped backslash followed by u is a backslash and a u.
        self.assertTrue(search(r"^\\u0041$", "\\u0041"))
        with self.assertRaises(PatternRefused):
            compile_pattern(r"\u00")

    def test_classes_are_ascii(self) -> None:
        self.assertTrue(search(r"^\d+$", "123"))
        self.assertFalse(search(r"^\d$", "\u0663"))  # ARABIC-INDIC DIGIT THREE
        self.assertTrue(search(r"^\p{L}+$", "été"))
        self.assertTrue(search(r"^\p{Greek}+$", "αβγ"))

    def test_dollar_is_the_end(self) -> None:
        self.assertFalse(search("^a$", "a\n"))
        self.assertTrue(search("^a$", "a"))

    def test_beyond_re2_refused(self) -> None:
        for pattern in (r"(a)\1", "a(?=b)", r"\p{Letter}", r"\cA", "a{1001}", "[^]"):
            with self.assertRaises(PatternRefused, msg=pattern):
                compile_pattern(pattern)

    def test_program_size_bounded(self) -> None:
        with self.assertRaises(PatternRefused) as caught:
            compile_pattern("[^a]{999}")
        self.assertIn("instructions", str(caught.exception))


class DialectTests(SynchronousTestCase):
    def test_patterns_through_re2(self) -> None:
        """A pattern Python's re would backtrack on for ever is refused at once."""
        text = "a" * 50_000 + "!"
        self.assertFalse(fits({"pattern": "^(a|a)*$"}, text))
        self.assertFalse(fits({"patternProperties": {"(a+)+$": False}}, {"a" * 50_000: 1}))
        self.assertTrue(fits({"patternProperties": {"(a+)+$": False}}, {text: 1}))
        closed = {"patternProperties": {"(a|aa)*c$": {}}, "additionalProperties": False}
        self.assertFalse(fits(closed, {text: 1}))
        self.assertTrue(fits(closed, {"aac": 1}))

    def test_unique_items_as_json_schema_says(self) -> None:
        unique = {"uniqueItems": True}
        self.assertFalse(fits(unique, [1, 1.0]))
        self.assertTrue(fits(unique, [1, True]))
        self.assertTrue(fits(unique, [0, False, None, "0"]))
        self.assertFalse(fits(unique, [{"a": [1, {"b": 2}]}, {"a": [1, {"b": 2.0}]}]))
        self.assertTrue(fits(unique, [[1], [True]]))
        self.assertTrue(fits(unique, [{"a": 1}, {"a": 1, "b": 1}]))

    def test_metered_check_stops(self) -> None:
        validator = dialect("2020-12")({"items": {"enum": list(range(100))}})
        with metered(1_000), self.assertRaises(TooCostly):
            list(validator.iter_errors([-1] * 100))
        with metered(1_000):
            self.assertEqual(len(list(validator.iter_errors([-1] * 5))), 5)
        # Unmetered outside the block.
        self.assertEqual(len(list(validator.iter_errors([-1] * 100))), 100)
