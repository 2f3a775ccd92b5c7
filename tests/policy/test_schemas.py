"""Hostile tool schemas: refused quickly, never fetched, never stalling a check."""

from __future__ import annotations

import time

from twisted.trial.unittest import SynchronousTestCase

from mcpx.policy.schemas import MAX_SCHEMA_DEPTH, HostileSchema, compile_schema


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

    def test_catastrophic_patterns_refused(self) -> None:
        for pattern in ("(a+)+$", "^(a*)*b", "(x+x+)+y", r"(a)\1"):
            with self.assertRaises(HostileSchema, msg=pattern):
                compile_schema({"properties": {"s": {"type": "string", "pattern": pattern}}})
        with self.assertRaises(HostileSchema):
            compile_schema({"patternProperties": {"(a+)+": {}}})

    def test_plain_patterns_kept(self) -> None:
        check = compile_schema({"type": "string", "pattern": "^[a-z]+(-[a-z]+)?$"})
        self.assertEqual(check.problems("ab-cd"), [])
        self.assertEqual(len(check.problems("AB")), 1)

    def test_flat_schema_gets_fast_acceptor(self) -> None:
        check = compile_schema(
            {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
        )
        self.assertIsNotNone(check.accepts)
