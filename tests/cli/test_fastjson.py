"""
L{mcpx.cli.fastjson} reads and writes JSON exactly as the json package does: the same
values, the same text, the same refusals.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from mcpx.cli import fastjson

VALUES: list[Any] = [
    {"a": [1, 2.5, None, True, False, "caf\u00e9 \u2603", {"b": "x", "e": [], "f": {}}]},
    {"n": {3: 2, 2.5: 3, False: 4, None: 5}, "q": 'say "hi"\n\ttab \x1b'},
    [],
    {},
    "\u00e9",
    "lone \ud800",
    1,
    2**70,
    -0.0,
    1e-7,
    1e400,
    -1e400,
    [float("nan")],
    [[[]]],
    ("t", 1),
    {"k": ("a", [1, {"z": None}])},
]

TEXTS = [
    "1",
    ' [1, 2.5, "\u00e9", {"a": null}] \n',
    '{"a": "\\u00e9\\ud800"}',
    "NaN",
    "-Infinity",
    "1e400",
    "true",
    '"x"',
]

NOT_TEXTS = ["x", "hello world", "1abc", '"a', '{"a":1} x', "", "  ", "\ufeff1", "[1,]", "{'a': 1}"]


class DumpsTests(SynchronousTestCase):
    def test_same_text(self) -> None:
        """Compact, spaced and indented, ASCII or not: the json package's text."""
        variants: list[dict[str, Any]] = [
            {},
            {"separators": (",", ":")},
            {"indent": 2},
            {"indent": 0},
        ]
        for value in VALUES:
            for ensure_ascii in (True, False):
                for options in variants:
                    self.assertEqual(
                        fastjson.dumps(value, ensure_ascii=ensure_ascii, **options),
                        json.dumps(value, ensure_ascii=ensure_ascii, **options),
                        (value, ensure_ascii, options),
                    )

    def test_same_refusals(self) -> None:
        """What json cannot write is refused with the same error, indented or not."""
        looped: list[Any] = []
        looped.append(looped)
        variants: list[dict[str, Any]] = [{}, {"indent": 2}]
        for value in ([object()], {(1, 2): 1}, looped):
            for options in variants:
                with self.assertRaises((TypeError, ValueError)) as ours:
                    fastjson.dumps(value, **options)
                with self.assertRaises((TypeError, ValueError)) as theirs:
                    json.dumps(value, **options)
                self.assertEqual(type(ours.exception), type(theirs.exception), value)


class LoadsTests(SynchronousTestCase):
    def test_same_values(self) -> None:
        """Valid JSON, as text or UTF-8 bytes, reads as json reads it."""
        for text in TEXTS:
            expected = json.loads(text)
            for given in (text, text.encode("utf-8", "surrogatepass")):
                found = fastjson.loads(given)
                self.assertEqual(repr(found), repr(expected), given)
        self.assertEqual(fastjson.loads('{"a": 1}'.encode("utf-16")), {"a": 1})

    def test_not_json(self) -> None:
        """
        What json refuses, L{fastjson.try_loads} calls L{fastjson.NOT_JSON}, and
        L{fastjson.loads} refuses with json's own error and message.
        """
        for text in NOT_TEXTS:
            self.assertIs(fastjson.try_loads(text), fastjson.NOT_JSON, text)
            with self.assertRaises(ValueError) as theirs:
                json.loads(text)
            with self.assertRaises(ValueError) as ours:
                fastjson.loads(text)
            self.assertEqual(str(ours.exception), str(theirs.exception), text)

    def test_not_json_before_json_is_imported(self) -> None:
        """
        Malformed JSON is refused in a process that has not imported the json package
        (the C scanner needs json.decoder loaded to raise its error).
        """
        code = (
            "import sys\n"
            "from mcpx.cli import fastjson\n"
            "assert 'json.decoder' not in sys.modules\n"
            "print(fastjson.try_loads('{not json') is fastjson.NOT_JSON)\n"
            "try:\n"
            "    fastjson.loads('[1,')\n"
            "except ValueError as e:\n"
            "    print(type(e).__name__, e)\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=False
        )
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(
            done.stdout.splitlines(),
            ["True", "JSONDecodeError Expecting value: line 1 column 4 (char 3)"],
        )
