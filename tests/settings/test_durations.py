"""Tests for L{mcpx.settings.durations}."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from mcpx.settings.durations import format_duration, parse_duration
from mcpx.settings.errors import SettingsError


class ParseDurationTests(SynchronousTestCase):
    """Durations written the way people write them are read as seconds."""

    def test_each_unit(self) -> None:
        """Milliseconds, seconds, minutes and hours are each understood."""
        self.assertEqual(parse_duration("250ms"), 0.25)
        self.assertEqual(parse_duration("30s"), 30.0)
        self.assertEqual(parse_duration("10m"), 600.0)
        self.assertEqual(parse_duration("1h"), 3600.0)

    def test_compound(self) -> None:
        """Several parts add up, so C{1m30s} is ninety seconds."""
        self.assertEqual(parse_duration("1m30s"), 90.0)
        self.assertEqual(parse_duration("1h2m3s4ms"), 3723.004)

    def test_fraction(self) -> None:
        """A part may have a decimal fraction."""
        self.assertEqual(parse_duration("1.5s"), 1.5)
        self.assertEqual(parse_duration("0.5h"), 1800.0)

    def test_zero(self) -> None:
        """C{0s} and a lone C{0} are both zero."""
        self.assertEqual(parse_duration("0s"), 0.0)
        self.assertEqual(parse_duration("0"), 0.0)

    def test_surrounding_space(self) -> None:
        """Whitespace around a duration, as a shell variable may carry, is ignored."""
        self.assertEqual(parse_duration(" 30s\n"), 30.0)

    def test_bad(self) -> None:
        """
        A bare number, an unknown unit, a negative value, an empty string or junk
        is refused with a message showing the accepted forms.
        """
        for text in ["30", "5x", "-1s", "", "s", "1m 30s", "10M", "1.2.3s", "30s!"]:
            with self.subTest(text=text):
                error = self.assertRaises(SettingsError, parse_duration, text)
                self.assertIn(repr(text), str(error))
                self.assertIn("250ms, 30s, 10m, 1h or 1m30s", str(error))


class FormatDurationTests(SynchronousTestCase):
    """Durations are written in their shortest canonical spelling."""

    def test_canonical(self) -> None:
        """Largest units first, with zero parts left out."""
        cases = {
            0: "0s",
            0.25: "250ms",
            1.5: "1.5s",
            30: "30s",
            60: "1m",
            90: "1m30s",
            600: "10m",
            3600: "1h",
            3660: "1h1m",
            3601: "1h1s",
            0.0005: "0.5ms",
        }
        for seconds, text in cases.items():
            with self.subTest(seconds=seconds):
                self.assertEqual(format_duration(seconds), text)

    def test_round_trip(self) -> None:
        """Whatever is written reads back as the same number of seconds."""
        for seconds in [0.001, 0.25, 1.5, 59.999, 60.25, 90, 3599.5, 86400, 12345.678]:
            with self.subTest(seconds=seconds):
                self.assertAlmostEqual(parse_duration(format_duration(seconds)), seconds, places=6)

    def test_negative(self) -> None:
        """A negative duration cannot be written."""
        self.assertRaises(ValueError, format_duration, -1)
