"""
Properties of L{mcpx.policy.schemas}: whatever schema an upstream sends, and whatever
value is held against it, the check ends within a bound.

The schemas are generated to be costly: catastrophic patterns (the classic ones and
random nestings of repetitions and alternations), C{anyOf}/C{oneOf}/C{allOf} of many
branches, chains of C{$ref}s through C{anyOf} that fan out exponentially, big C{enum}s,
C{uniqueItems}, C{patternProperties} and C{additionalProperties}; the values are texts
of up to 100 characters built to make a backtracking engine fail slowly, and arrays and
objects of them.

The bound is one second of this thread's CPU time for compiling the schema and one
check.  CPU time rather than wall-clock time: another process on a loaded machine does
not add to it, so the bound does not flake.  One second is about twenty times the work a
check may do before L{mcpx.spec.safe_schema.MAX_CHECK_STEPS} stops it (about 50 ms),
and a hundred thousand times less than what the same patterns cost in Python's C{re}
(C{^(a|a)*$} on 30 characters took 182 s; on 100, longer than the age of the universe),
so an exponential check cannot pass and a linear one cannot fail.
"""

from __future__ import annotations

import time
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from mcpx.policy.schemas import HostileSchema, compile_schema
from tests.properties import bounded

#: The most CPU seconds compiling one schema and one check may take.
BOUND = 1.0

CLASSIC = (
    "^(a|a)*$",
    "(a+)+$",
    "(a|aa)*c",
    "(.*a){20}$",
    "^(a*)*b",
    "(x+x+)+y",
    "^(([a-z])+.)+[A-Z]([a-z])+$",
    "^(\\w+\\s?)*$",
    "(a|a?)+b",
    "([a-z]|[a-z0-9]|.){0,300}z",
)

atoms = st.sampled_from(["a", "aa", ".", "[ab]", "\\w", "a?", "(?:a|a)", "\\s"])


def _combine(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(
        st.tuples(children, children).map("".join),
        st.tuples(children, children).map(lambda p: f"({p[0]}|{p[1]})"),
        st.tuples(children, st.sampled_from(["*", "+", "{1,9}", "{20}", "?"])).map(
            lambda p: f"({p[0]}){p[1]}"
        ),
    )


patterns = st.one_of(
    st.sampled_from(CLASSIC),
    st.recursive(atoms, _combine, max_leaves=8).map(lambda p: f"^{p}$"),
)

#: Texts that make a backtracking engine fail slowly: a long run, then a spoiler.
texts = st.builds(
    lambda run, n, tail: run * n + tail,
    st.sampled_from(["a", "ab", "x", " a"]),
    st.integers(0, 100),
    st.sampled_from(["", "!", "b", "c", "Z"]),
).map(lambda text: text[:100])

leaves = st.one_of(
    st.builds(lambda p: {"type": "string", "pattern": p}, patterns),
    st.builds(lambda n: {"enum": list(range(n))}, st.integers(1, 5000)),
    st.just({"uniqueItems": True}),
    st.sampled_from([{"type": "string"}, {"type": "array"}, {"minLength": 3}, True]),
)


def _extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    branches = st.lists(children, min_size=1, max_size=12)
    return st.one_of(
        st.builds(lambda b: {"anyOf": b}, branches),
        st.builds(lambda b: {"oneOf": b}, branches),
        st.builds(lambda b: {"allOf": b}, branches),
        st.builds(lambda c: {"items": c}, children),
        st.builds(lambda c: {"contains": c}, children),
        st.builds(lambda c: {"not": c}, children),
        st.builds(lambda p, c: {"patternProperties": {p: c}}, patterns, children),
        st.builds(
            lambda p, c: {"patternProperties": {p: c}, "additionalProperties": False},
            patterns,
            children,
        ),
        st.builds(lambda c: {"properties": {"aaaa": c}, "additionalProperties": c}, children),
    )


def ref_chain(depth: int, fan: int, leaf: Any) -> dict[str, Any]:
    """C{$ref}s through C{anyOf}: C{fan ** depth} paths to C{leaf}."""
    defs: dict[str, Any] = {
        f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}] * fan} for i in range(depth)
    }
    defs[f"d{depth}"] = leaf
    return {"$defs": defs, "$ref": "#/$defs/d0"}


schemas = st.one_of(
    st.recursive(leaves, _extend, max_leaves=24),
    st.builds(ref_chain, st.integers(1, 40), st.integers(1, 3), leaves),
)

values = st.recursive(
    st.one_of(texts, st.integers(-2, 2)),
    lambda children: st.one_of(
        st.lists(children, max_size=20),
        st.dictionaries(texts, children, max_size=8),
    ),
    max_leaves=40,
)
big_values = st.builds(
    lambda n, shape: [shape(i) for i in range(n)],
    st.integers(0, 20_000),
    st.sampled_from([lambda i: {"a": i}, lambda i: i, lambda i: [i, i]]),
)


class HostileSchemaProperties(SynchronousTestCase):
    def check_bounded(self, schema: Any, value: Any) -> None:
        started = time.thread_time()
        try:
            check = compile_schema(schema)
        except HostileSchema:
            check = None
        if check is not None:
            problems = check.problems(value)
            self.assertIsInstance(problems, list)
        spent = time.thread_time() - started
        self.assertLess(spent, BOUND, f"{spent:.2f} s of CPU for {schema!r:.300} on {value!r:.100}")

    @bounded(150)
    @given(schemas, values)
    def test_every_check_ends_within_bound(self, schema: Any, value: Any) -> None:
        """Compiling a hostile schema and checking a value against it ends within BOUND."""
        self.check_bounded(schema, value)

    @bounded(30)
    @given(schemas, big_values)
    def test_big_values_checked_within_bound(self, schema: Any, value: Any) -> None:
        """So does checking an array of up to 20,000 items against it."""
        self.check_bounded(schema, value)

    @bounded(100)
    @given(patterns, texts)
    def test_patterns_match_in_linear_time(self, pattern: str, text: str) -> None:
        """A pattern is refused when compiled or matched, never left running."""
        self.check_bounded({"type": "string", "pattern": pattern}, text)
        self.check_bounded({"patternProperties": {pattern: False}}, {text: 1})
