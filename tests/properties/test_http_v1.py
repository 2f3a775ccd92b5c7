"""
Properties of the C{/v1} routes, driven in memory over a fake pool: whatever the path, query
or body, the answer is JSON with the documented shape, never a 500, and nothing is left failing
in a Deferred or logged as a failure.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote, urlencode

from hypothesis import example, given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from twisted.logger import ILogObserver, LogEvent, globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer

from mcpx.daemon.status_page import ASSETS as PAGE_ASSETS
from mcpx.ops.op import NDJSON, Op
from mcpx.ops.schemas import ERROR_SCHEMA
from mcpx.ops.table import OPS
from tests.daemon.fake_pool import Answer, Harness
from tests.properties import bounded, hostile_bytes, json_values

#: The event stream never ends by itself; tests.daemon.test_events covers it.
ROUTED = [op for op in OPS if op.name != "events"]

names = st.sampled_from(
    ["files", "search", "read_file", "review", "nowhere", "", "\ud800"]
) | st.text(max_size=12)


@implementer(ILogObserver)
class FailureWatch:
    """Collects every log event that carries a failure while installed."""

    def __init__(self) -> None:
        self.failures: list[LogEvent] = []

    def __call__(self, event: LogEvent) -> None:
        if "log_failure" in event:
            self.failures.append(event)


@contextmanager
def watching_failures() -> Iterator[FailureWatch]:
    watch = FailureWatch()
    globalLogPublisher.addObserver(watch)
    try:
        yield watch
    finally:
        globalLogPublisher.removeObserver(watch)


def field_values(op: Op, name: str) -> st.SearchStrategy[Any]:
    """Values for an input field: often of the declared type, sometimes anything."""
    declared = op.properties.get(name, {}).get("type")
    typed: dict[Any, st.SearchStrategy[Any]] = {
        "string": names,
        "boolean": st.booleans(),
        "number": st.floats(allow_nan=False, allow_infinity=False) | st.integers(),
        "integer": st.integers(),
        "object": st.dictionaries(st.text(max_size=6), json_values, max_size=4),
        "array": st.lists(names, max_size=3),
    }
    return typed.get(declared, json_values) | json_values


@st.composite
def requests(draw: st.DrawFn) -> tuple[Op, str, bytes]:
    """An op, a path and query for it, and a body: sometimes fitting, sometimes hostile."""
    op = draw(st.sampled_from(ROUTED))
    path = op.path
    for param in op.path_params:
        name = draw(names)
        path = path.replace("{" + param + "}", quote(name, safe="", errors="surrogatepass") or "x")
    fields = draw(
        st.fixed_dictionaries({}, optional={name: field_values(op, name) for name in op.properties})
    )
    if op.method == "GET":
        query = {k: v if isinstance(v, str) else json.dumps(v) for k, v in fields.items()}
        encoded = urlencode(query, errors="surrogatepass")
        return op, path + ("?" + encoded if query else ""), b""
    body = draw(st.just(json.dumps(fields).encode()) | hostile_bytes)
    return op, path, body


class V1Properties(SynchronousTestCase):
    def check(self, op: Op, answer: Answer) -> None:
        self.assertNotEqual(answer.code, 500, answer.body[:300])
        kind = answer.header("content-type")
        if kind == NDJSON:
            lines = [json.loads(line) for line in answer.body.splitlines()]
            self.assertTrue(lines)
            return
        self.assertEqual(kind, "application/json", answer.body[:300])
        body = json.loads(answer.body)
        if answer.code >= 400:
            schema: Any = ERROR_SCHEMA
        elif answer.code == 202 and op.accepted_schema is not None:
            schema = op.accepted_schema
        else:
            schema = op.output_schema
        errors = [e.message for e in Draft202012Validator(schema).iter_errors(body)]
        self.assertEqual(errors, [], (op.name, answer.code, body))

    @bounded(250)
    @given(requests())
    def test_every_route_answers_json_never_500(self, sent: tuple[Op, str, bytes]) -> None:
        """
        Any path, query or body on any /v1 route is answered with JSON its op's schema
        (or the error schema) accepts, never a 500, and no failure is logged.
        """
        op, path, body = sent
        harness = Harness()
        with watching_failures() as watch:
            answer = harness.send(op.method, path, raw=body)
        self.check(op, answer)
        self.assertEqual(watch.failures, [])

    @bounded(100)
    @given(st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]), st.text(max_size=30))
    @example("GET", "")
    @example("GET", "status.js")
    @example("POST", "")
    def test_any_method_and_path_is_json(self, method: str, path: str) -> None:
        """
        Any method on any path is answered JSON, never a 500 or an HTML page, except
        the status page's own files, which a GET gets with their own types.
        """
        harness = Harness()
        target = "/" + quote(path)
        with watching_failures() as watch:
            answer = harness.send(method, target, raw=b"{}")
        self.assertNotEqual(answer.code, 500)
        if method == "GET" and target in PAGE_ASSETS:
            self.assertEqual(answer.code, 200)
            self.assertEqual(answer.header("content-type"), PAGE_ASSETS[target][1].decode("ascii"))
        else:
            self.assertEqual(answer.header("content-type"), "application/json")
            json.loads(answer.body)
        self.assertEqual(watch.failures, [])
