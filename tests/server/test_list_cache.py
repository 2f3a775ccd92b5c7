"""
C{tools/list} answers are spelled and encoded once per page of the same tools, give the
same bytes as spelling and encoding them afresh, and are made again when the list changes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from mcpx.server.conn import Context
from mcpx.server.dispatch import McpServer
from mcpx.spec.revision import LEGACY_REVISIONS, NEWEST, Revision
from mcpx.wire.messages import EncodedResult, Request, Response, encode, encode_json
from tests.server import Harness, Session, result_of
from tests.server.test_passthrough import names_of, passed_through, upstream

REVISIONS = (*LEGACY_REVISIONS, NEWEST)


class RawHarness(Harness):
    """A harness that also keeps the bytes of every frame the server wrote."""

    def __init__(self, **kwargs: Any) -> None:
        self.raw: list[bytes] = []
        super().__init__(**kwargs)

    def _to_client(self, data: bytes) -> None:
        self.raw.append(data)
        super()._to_client(data)


def count_spelling(server: McpServer) -> list[str]:
    """The methods C{server} spells a result for, from now on, in order."""
    spelled: list[str] = []
    spell = server.spell

    def counting(result: Mapping[str, Any], method: str, context: Context) -> Any:
        spelled.append(method)
        return spell(result, method, context)

    server.spell = counting  # type: ignore[method-assign]
    return spelled


def slow_answer(
    server: McpServer, session: Session, request_id: int, tools: list[Any], **page: Any
) -> bytes:
    """What the answer would be spelled and encoded afresh: a plain dict, encoded whole."""
    request = Request(request_id, "tools/list", session.params(page.pop("params", None)))
    context = server.context(session.harness.conn, request)
    spelled = server.spell({"tools": tools, **page}, "tools/list", context)
    assert type(spelled) is dict
    return encode_json(Response(request_id, spelled).to_json())


def answer_id(raw: bytes) -> int:
    found = json.loads(raw)["id"]
    assert isinstance(found, int)
    return found


class GatewayListTests(SynchronousTestCase):
    def test_same_bytes_as_the_slow_path(self) -> None:
        """
        In every revision, the second C{tools/list} is not spelled again, and both answers
        are byte for byte what spelling and encoding the gateway's tools afresh gives.
        """
        for revision in REVISIONS:
            harness = RawHarness()
            session = Session(revision, harness)
            spelled = count_spelling(harness.server)
            tools = list(harness.server.surface.tool_definitions)
            session.result("tools/list")
            first = harness.raw[-1]
            session.result("tools/list")
            second = harness.raw[-1]
            self.assertEqual(spelled, ["tools/list"], revision)
            for raw in (first, second):
                expected = slow_answer(harness.server, session, answer_id(raw), tools)
                self.assertEqual(raw, expected, revision)

    def test_pages_kept_apart(self) -> None:
        """Each page is kept on its own, and each is the slow path's page."""
        harness = RawHarness(page_size=3)
        session = Session(Revision.V2025_06_18, harness)
        spelled = count_spelling(harness.server)
        tools = list(harness.server.surface.tool_definitions)
        self.assertGreater(len(tools), 6)
        first = session.result("tools/list")
        first_raw = harness.raw[-1]
        second = session.result("tools/list", {"cursor": first["nextCursor"]})
        second_raw = harness.raw[-1]
        session.result("tools/list")
        again_raw = harness.raw[-1]
        self.assertEqual(spelled, ["tools/list", "tools/list"])
        self.assertEqual(names_of(first["tools"]), [t["name"] for t in tools[:3]])
        self.assertEqual(names_of(second["tools"]), [t["name"] for t in tools[3:6]])
        server = harness.server
        cursor = first["nextCursor"]
        self.assertEqual(
            first_raw,
            slow_answer(server, session, answer_id(first_raw), tools[:3], nextCursor=cursor),
        )
        self.assertEqual(
            again_raw,
            slow_answer(server, session, answer_id(again_raw), tools[:3], nextCursor=cursor),
        )
        self.assertEqual(
            second_raw,
            slow_answer(
                server,
                session,
                answer_id(second_raw),
                tools[3:6],
                nextCursor=second["nextCursor"],
                params={"cursor": cursor},
            ),
        )


class PassThroughListTests(SynchronousTestCase):
    def test_a_changed_catalogue_is_spelled_again(self) -> None:
        """
        Listing a pass-through server's tools again is not spelled again; once the server
        says its list changed, the next listing has the new tool, spelled afresh, and it
        is what spelling the new list afresh gives.
        """
        for revision in (Revision.V2025_06_18, NEWEST):
            harness, connector = passed_through()
            session = Session(revision, harness)
            spelled = count_spelling(harness.server)
            before = session.result("tools/list")
            session.result("tools/list")
            self.assertEqual(spelled, ["tools/list"], revision)
            connector.scripted["beta"]["tools"].append(
                {"name": "sub", "inputSchema": {"type": "object"}}
            )
            upstream(connector, "beta").notify("notifications/tools/list_changed")
            after = session.result("tools/list")
            self.assertEqual(spelled, ["tools/list", "tools/list"], revision)
            self.assertNotIn("sub", names_of(before["tools"]))
            self.assertIn("sub", names_of(after["tools"]))
            request = Request(1, "tools/list", session.params())
            context = harness.server.context(harness.conn, request)
            passthrough = harness.server.passthrough_for(harness.conn)
            assert passthrough is not None
            tools = result_of(Deferred.fromCoroutine(passthrough.tools(context)))
            self.assertEqual(after, harness.server.spell({"tools": tools}, "tools/list", context))


class EncodedResultTests(SynchronousTestCase):
    def test_encoded_as_the_plain_result(self) -> None:
        """
        A response carrying an L{EncodedResult} is encoded to the same bytes as one
        carrying the same result as a plain dict, whatever its id and text.
        """
        results: list[dict[str, Any]] = [
            {"tools": [{"name": "a", "description": "caf\u00e9 \u2603", "n": 1.5}]},
            {"tools": [{"name": "lone \ud800 surrogate"}], "nextCursor": "x"},
            {},
        ]
        for result in results:
            for request_id in (7, -3, 0, "abc", 'q"uote', "\u00e9t\u00e9", "\udc00"):
                plain = encode(Response(request_id, dict(result)))
                self.assertEqual(
                    encode(Response(request_id, EncodedResult(result))), plain, request_id
                )
                self.assertEqual(json.loads(plain)["result"], result)
