"""Hostile tool schemas: refused quickly, never fetched, never stalling a check."""

from __future__ import annotations

import time

from twisted.trial.unittest import SynchronousTestCase

from mcpx.policy.schemas import (
    MAX_SCHEMA_DEPTH,
    MAX_SCHEMA_PATTERN_CHARS,
    MAX_SCHEMA_REF_CHARS,
    HostileSchema,
    compile_schema,
)
from mcpx.spec.safe_schema import MAX_CHECK_STEPS

#: Seconds of this thread's CPU time a check stopped by its steps may take: about twenty
#: times the 50 ms its steps allow, and far below what an unmetered one takes.
CPU_BOUND = 1.0


class DialectTests(SynchronousTestCase):
    def test_draft_07_definitions(self) -> None:
        check = compile_schema(
            {
                "$schema": "http://json-schema.org/draft-07/schema#",
                "definitions": {"n": {"type": "integer"}},
                "properties": {"a": {"$ref": "#/definitions/n"}},
            }
        )
        self.assertEqual(check.problems({"a": "x"})[0]["path"], "/a")
        self.assertEqual(check.problems({"a": 1}), [])

    def test_2020_12_defs_by_default(self) -> None:
        check = compile_schema(
            {"$defs": {"n": {"type": "integer"}}, "properties": {"a": {"$ref": "#/$defs/n"}}}
        )
        self.assertEqual(check.problems({"a": "x"})[0]["reason"], "'x' is not of type 'integer'")

    def test_other_dialect_refused(self) -> None:
        with self.assertRaises(HostileSchema):
            compile_schema({"$schema": "http://json-schema.org/draft-04/schema#"})

    def test_invalid_schema_refused(self) -> None:
        with self.assertRaises(HostileSchema):
            compile_schema({"type": 12})


class HostileTests(SynchronousTestCase):
    def test_remote_ref_never_fetched(self) -> None:
        check = compile_schema({"properties": {"a": {"$ref": "http://127.0.0.1:9/x.json"}}})
        started = time.monotonic()
        problems = check.problems({"a": 1})
        self.assertLess(time.monotonic() - started, 0.5)
        self.assertIn("cannot be applied", problems[0]["reason"])

    def test_deep_nesting_refused(self) -> None:
        schema: dict[str, object] = {"type": "object"}
        for _ in range(MAX_SCHEMA_DEPTH + 5):
            schema = {"properties": {"a": schema}}
        with self.assertRaises(HostileSchema) as caught:
            compile_schema(schema)
        self.assertIn("nested deeper", str(caught.exception))

    def test_huge_enum_refused(self) -> None:
        with self.assertRaises(HostileSchema):
            compile_schema({"enum": list(range(50_000))})

    def test_catastrophic_patterns_matched(self) -> None:
        """
        Patterns on which a backtracking engine takes exponential time are matched by RE2,
        in linear time: refusing a long text that Python's re would never finish.
        """
        text = "a" * 10_000 + "!"
        for pattern in ("(a+)+$", "^(a*)*b", "(x+x+)+y", "^(a|a)*$", "(a|aa)*c", "(.*a){20}$"):
            check = compile_schema({"properties": {"s": {"type": "string", "pattern": pattern}}})
            problems = check.problems({"s": text})
            self.assertEqual([p["path"] for p in problems], ["/s"], pattern)
            self.assertTrue(problems[0]["reason"].startswith("'aaaa"), problems)
            self.assertEqual(
                check.problems({"s": "!"})[0]["reason"], f"'!' does not match {pattern!r}"
            )
        check = compile_schema({"patternProperties": {"(a+)+$": {"type": "integer"}}})
        self.assertEqual(check.problems({text: 1}), [])
        self.assertEqual(check.problems({"a" * 10_000: "x"})[0]["path"], "/" + "a" * 10_000)
        check = compile_schema(
            {"additionalProperties": False, "patternProperties": {"^(a|a)*$": {}}}
        )
        self.assertEqual(len(check.problems({text: 1})), 1)
        self.assertEqual(check.problems({"a" * 10_000: 1}), [])

    def test_long_text_left_to_the_metered_check(self) -> None:
        """
        The quick yes does not match a text too long for it: the full check does, metered,
        and says the same.
        """
        check = compile_schema(
            {"type": "object", "properties": {"s": {"type": "string", "pattern": "^a+$"}}}
        )
        self.assertIsNotNone(check.accepts)
        assert check.accepts is not None
        long = "a" * 3_000_000
        self.assertFalse(check.accepts({"s": long}))
        self.assertEqual(check.problems({"s": long}), [])
        self.assertEqual(check.problems({"s": long + "!"})[0]["path"], "/s")
        self.assertIn("more than", check.problems({"s": "a" * 20_000_000})[0]["reason"])

    def test_patterns_beyond_linear_time_refused(self) -> None:
        """Backreferences and lookarounds have no linear-time match: their schema is refused."""
        for pattern in (r"(a)\1", r"(?<n>a)\k<n>", "a(?=b)", "a(?!b)", "(?<=a)b"):
            with self.assertRaises(HostileSchema, msg=pattern) as caught:
                compile_schema({"properties": {"s": {"type": "string", "pattern": pattern}}})
            self.assertIn("lookarounds and backreferences are not supported", str(caught.exception))
        with self.assertRaises(HostileSchema):
            compile_schema({"patternProperties": {r"(a+)\1": {}}})

    def test_pattern_properties_with_unevaluated_refused(self) -> None:
        """jsonschema would match these patternProperties with Python's re: refused."""
        with self.assertRaises(HostileSchema) as caught:
            compile_schema({"patternProperties": {"^(a|a)*$": {}}, "unevaluatedProperties": False})
        self.assertIn("unevaluatedProperties", str(caught.exception))

    def test_patterns_too_long_together_refused(self) -> None:
        properties = {f"p{i}": {"type": "string", "pattern": "x" * 900} for i in range(12)}
        with self.assertRaises(HostileSchema) as caught:
            compile_schema({"properties": properties})
        self.assertIn(f"more than {MAX_SCHEMA_PATTERN_CHARS} characters", str(caught.exception))

    def test_costly_checks_stop(self) -> None:
        """
        A check that would take more than MAX_CHECK_STEPS steps fails, saying so, rather than
        run on: a chain of C{$ref}s through C{anyOf} (2^30 branches), C{uniqueItems} over a
        big array of objects, a big C{enum} against many items.
        """
        chain: dict[str, object] = {}
        for i in range(30):
            chain[f"d{i}"] = {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2}
        chain["d30"] = {"type": "string"}
        cases = [
            ({"$defs": chain, "$ref": "#/$defs/d0"}, 5),
            ({"type": "array", "uniqueItems": True}, [{"a": i} for i in range(60_000)]),
            ({"type": "array", "items": {"enum": list(range(15_000))}}, [-1] * 20_000),
        ]
        for schema, instance in cases:
            problems = compile_schema(schema).problems(instance)
            self.assertEqual(len(problems), 1, schema)
            self.assertIn(f"more than {MAX_CHECK_STEPS} steps", problems[0]["reason"])

    def test_long_ref_refused(self) -> None:
        """
        A C{$ref} longer than MAX_SCHEMA_REF_CHARS refuses its schema, saying so (resolving
        one costs time in its length: a 2 MB one, once for each of 300 items, held the
        reactor 2.4 s); one that long is resolved and checked.
        """
        for length in (MAX_SCHEMA_REF_CHARS, 2_000_000):
            key = "k" * (length - len("#/$defs/"))
            schema = {
                "$defs": {key: {"type": "string"}},
                "type": "array",
                "items": {"$ref": "#/$defs/" + key},
            }
            if length == MAX_SCHEMA_REF_CHARS:
                check = compile_schema(schema)
                self.assertEqual(check.problems(["a"] * 300), [])
                self.assertEqual(check.problems([1])[0]["reason"], "1 is not of type 'string'")
                continue
            with self.assertRaises(HostileSchema) as caught:
                compile_schema(schema)
            self.assertIn(
                f"a reference longer than {MAX_SCHEMA_REF_CHARS} characters",
                str(caught.exception),
            )

    def test_long_strings_in_schema_charged(self) -> None:
        """
        An C{enum}, C{const} or C{required} is charged for the length of its strings,
        which each of its errors repeats: 1,000 branches of a 2 MB C{enum} held against
        300 items (a minute of work) stop within a bound of CPU time, saying why, while a
        5,000-character C{enum} is still checked.
        """
        big = "k" * 2_000_000
        cases = [
            {"type": "array", "items": {"anyOf": [{"enum": [big]}] * 1_000}},
            {"type": "array", "items": {"anyOf": [{"const": big}] * 1_000}},
            {"type": "array", "items": {"anyOf": [{"required": [big]}] * 1_000}},
        ]
        for schema in cases:
            check = compile_schema(schema)
            started = time.thread_time()
            problems = check.problems([{}] * 300)
            spent = time.thread_time() - started
            self.assertEqual(len(problems), 1, problems)
            self.assertIn(f"more than {MAX_CHECK_STEPS} steps", problems[0]["reason"])
            self.assertLess(spent, CPU_BOUND)
        check = compile_schema({"type": "array", "items": {"enum": ["k" * 5_000]}})
        self.assertEqual(check.problems(["k" * 5_000] * 10), [])
        (problem,) = check.problems(["x"])
        self.assertTrue(problem["reason"].startswith("'x' is not one of ['kkk"), problem)

    def test_plain_patterns_kept(self) -> None:
        check = compile_schema({"type": "string", "pattern": "^[a-z]+(-[a-z]+)?$"})
        self.assertEqual(check.problems("ab-cd"), [])
        self.assertEqual(len(check.problems("AB")), 1)

    def test_flat_schema_gets_fast_acceptor(self) -> None:
        check = compile_schema(
            {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
        )
        self.assertIsNotNone(check.accepts)
