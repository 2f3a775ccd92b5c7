"""Tests for L{mcpx.cli.arguments}: a tool's arguments as typed on the command line."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from mcpx.cli.arguments import ArgumentError, parse_arguments, parse_value


class ParseArgumentsTests(SynchronousTestCase):
    def test_values_are_json_when_they_parse(self) -> None:
        """C{n=3} is a number, C{on=false} a boolean, C{x=null} null, a list a list."""
        self.assertEqual(
            parse_arguments(["n=3", "f=2.5", "on=false", "x=null", "l=[1]", "o={}"]),
            {"n": 3, "f": 2.5, "on": False, "x": None, "l": [1], "o": {}},
        )

    def test_other_values_are_strings(self) -> None:
        """Text that is not JSON stays text, including an empty value and one holding C{=}."""
        self.assertEqual(
            parse_arguments(["s=hello", "e=", "eq=a=b", "q='x'"]),
            {"s": "hello", "e": "", "eq": "a=b", "q": "'x'"},
        )
        self.assertEqual(parse_value('"3"'), "3")

    def test_one_json_object(self) -> None:
        """A single word that starts with C{{} is the whole arguments object."""
        self.assertEqual(parse_arguments([' {"a": [1, 2]}']), {"a": [1, 2]})
        self.assertEqual(parse_arguments([]), {})

    def test_standard_input(self) -> None:
        """C{-} takes the object from standard input."""
        self.assertEqual(parse_arguments(["-"], '{"k": "v"}\n'), {"k": "v"})
        self.assertRaises(ArgumentError, parse_arguments, ["-"], "[1]")
        self.assertRaises(ArgumentError, parse_arguments, ["-"], "")

    def test_errors(self) -> None:
        """A word without C{=}, an empty key, a repeated key and JSON that is not an object
        are refused with a message that says how to write arguments."""
        for words in (["text"], ["=x"], ["a=1", "a=2"], ["{bad"], ['{"a": 1}', "b=2"]):
            self.assertRaises(ArgumentError, parse_arguments, words)
        error = self.assertRaises(ArgumentError, parse_arguments, ["text"])
        self.assertIn("key=value", str(error))
        stdin_error = self.assertRaises(ArgumentError, parse_arguments, ["-"], "[1]")
        self.assertIn("must be a JSON object", str(stdin_error))
