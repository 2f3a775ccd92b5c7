"""
C{tools/list} answers are spelled and encoded once per page of the same tools, give the
same bytes as spelling and encoding them afresh, and are made again when the list changes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from mcpx.server.conn import Context
from mcpx.server.dispatch import McpServer
from mcpx.server.list_cache import ListCache
from mcpx.server.pages import encode_cursor
from mcpx.spec.revision import LEGACY_REVISIONS, NEWEST, Revision
from mcpx.wire.messages import EncodedResult, Request, Response, encode, encode_json
from tests.server import Harness, Session, result_of
from tests.server.test_passthrough import names_of, passed_through, upstream

REVISIONS = (*LEGACY_REVISIONS, NEWEST)

#: A scripted server's lists other than its tools, empty.
NOTHING_ELSE: Mapping[str, list[Any]] = {"prompts": [], "resources": [], "templates": []}


def rich_tool(name: str) -> dict[str, Any]:
    """A tool with fields older revisions spell away (title, annotations, outputSchema)."""
    return {
        "name": name,
        "title": name.title(),
        "description": f"the tool {name}",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
        "outputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": True},
    }


class RawHarness(Harness):
    """A harness that also keeps the bytes of every frame the server wrote."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.raw: list[bytes] = []
        super().__init__(*args, **kwargs)

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


class EveryPageTests(SynchronousTestCase):
    """
    Every page of a long pass-through list, more pages than answers were once kept by
    count, is spelled once and gives the bytes spelling and encoding it afresh gives.
    """

    def list_all(self, session: Session, raw: list[bytes]) -> list[tuple[bytes, Any]]:
        """Every page of C{tools/list}, followed cursor by cursor: (bytes, cursor asked)."""
        pages: list[tuple[bytes, Any]] = []
        cursor: Any = None
        while True:
            page = session.result("tools/list", {"cursor": cursor} if cursor else None)
            pages.append((raw[-1], cursor))
            cursor = page.get("nextCursor")
            if cursor is None:
                return pages

    def assert_slow_path(
        self,
        harness: RawHarness,
        session: Session,
        pages: list[tuple[bytes, Any]],
        expected: list[dict[str, Any]],
        page_size: int,
    ) -> None:
        """C{pages} are C{expected} cut into pages, each spelled and encoded afresh."""
        self.assertEqual(len(pages), -(-len(expected) // page_size))
        for number, (raw, cursor) in enumerate(pages):
            offset = number * page_size
            page: dict[str, Any] = {}
            if offset + page_size < len(expected):
                page["nextCursor"] = encode_cursor("tools/list", offset + page_size)
            if cursor is not None:
                page["params"] = {"cursor": cursor}
            tools = expected[offset : offset + page_size]
            slow = slow_answer(harness.server, session, answer_id(raw), tools, **page)
            self.assertEqual(raw, slow, (session.revision, number))

    def test_every_page_across_revisions_and_a_change(self) -> None:
        """
        In every revision, listing every page again spells none of them again; each page is
        byte for byte the slow path's page of the list built from what the servers offer;
        after a server says its list changed, every page is again the slow path's page
        of the new list.
        """
        for revision in REVISIONS:
            self.check_revision(revision)

    def check_revision(self, revision: Revision) -> None:
        page_size = 1
        scripts = {
            "alpha": {"tools": [rich_tool(f"a{i}") for i in range(40)], **NOTHING_ELSE},
            "beta": {"tools": [rich_tool(f"b{i}") for i in range(30)], **NOTHING_ELSE},
        }
        made, connector = passed_through(scripted=scripts, harness_type=RawHarness)
        assert isinstance(made, RawHarness)
        harness = made
        harness.server.page_size = page_size
        session = Session(revision, harness)
        spelled = count_spelling(harness.server)

        def expected() -> list[dict[str, Any]]:
            """The tools as the servers offer them now, then the gateway's."""
            offered = [*scripts["alpha"]["tools"], *scripts["beta"]["tools"]]
            names = names_of(offered)
            gateway = harness.server.surface.tool_definitions
            return offered + [tool for tool in gateway if tool["name"] not in names]

        first = self.list_all(session, harness.raw)
        self.assertGreater(len(first), 64)
        again = self.list_all(session, harness.raw)
        self.assertEqual(len(spelled), len(first), revision)
        for pages in (first, again):
            self.assert_slow_path(harness, session, pages, expected(), page_size)
        scripts["beta"]["tools"].append(rich_tool("b-new"))
        upstream(connector, "beta").notify("notifications/tools/list_changed")
        changed = self.list_all(session, harness.raw)
        self.assertIn("b-new", names_of(expected()))
        self.assert_slow_path(harness, session, changed, expected(), page_size)
        self.assertEqual(len(changed), len(first) + 1)


def spelling() -> tuple[Any, list[Mapping[str, Any]], Callable[[Mapping[str, Any]], Any]]:
    """
    A 2025-06-18 C{tools/list} request's context, and a spelling function that records
    every result it is given (in the list returned beside it).
    """
    harness = Harness()
    session = Session(Revision.V2025_06_18, harness)
    context = harness.server.context(harness.conn, Request(1, "tools/list", session.params()))
    spelled: list[Mapping[str, Any]] = []

    def spell(result: Mapping[str, Any]) -> dict[str, Any]:
        spelled.append(result)
        return dict(result)

    return context, spelled, spell


class BudgetTests(SynchronousTestCase):
    def test_oldest_go_first(self) -> None:
        """
        Past its budget in bytes the cache lets its oldest answers go and never holds more
        than the budget; an answer larger than the whole budget is answered, not kept.
        """
        context, spelled, spell = spelling()

        pages = {
            cursor: {"tools": [{"name": f"t{cursor}", "inputSchema": {"type": "object"}}]}
            for cursor in "abc"
        }
        size = len(encode_json(pages["a"]))
        cache = ListCache(max_bytes=2 * size)
        for cursor, page in pages.items():
            cache.spelled(page, "tools", context, cursor, spell)
            self.assertLessEqual(cache.kept_bytes, 2 * size)
        self.assertEqual(len(spelled), 3)
        self.assertEqual(cache.spelled(pages["c"], "tools", context, "c", spell), pages["c"])
        self.assertEqual(len(spelled), 3)
        self.assertEqual(cache.spelled(pages["a"], "tools", context, "a", spell), pages["a"])
        self.assertEqual(len(spelled), 4)
        self.assertEqual(cache.kept_bytes, 2 * size)
        big = {"tools": [{"name": "x" * 3 * size}]}
        for _ in range(2):
            self.assertEqual(cache.spelled(big, "tools", context, "big", spell), big)
        self.assertEqual(len(spelled), 6)
        self.assertEqual(cache.kept_bytes, 2 * size)

    def test_only_a_plain_page_is_kept(self) -> None:
        """
        A page (a list or a tuple, with or without C{nextCursor}) is kept and answered
        again unspelled; a result with any other member, without its list, with a list
        that is not a sequence, or asked for with a cursor that is not a string, is spelled
        every time and answered as spelled.
        """
        context, spelled, spell = spelling()

        tool = {"name": "t", "inputSchema": {"type": "object"}}
        kept: list[tuple[Mapping[str, Any], object]] = [
            ({"tools": [tool]}, None),
            ({"tools": (tool,)}, "tuple"),
            ({"tools": [tool], "nextCursor": "n"}, "paged"),
        ]
        for result, cursor in kept:
            cache = ListCache()
            for _ in range(2):
                answer = cache.spelled(result, "tools", context, cursor, spell)
                self.assertIsInstance(answer, EncodedResult)
            self.assertEqual(spelled, [result])
            spelled.clear()
        refused: list[tuple[Mapping[str, Any], object]] = [
            ({"tools": [tool], "other": 1}, None),
            ({"tools": [tool], "nextCursor": "n", "other": 1}, None),
            ({"tools": [tool], "_meta": {}}, None),
            ({"other": [tool]}, None),
            ({"tools": {"name": "t"}}, None),
            ({"tools": [tool]}, 3),
            ({"tools": [tool]}, ["c"]),
        ]
        for result, cursor in refused:
            cache = ListCache()
            for _ in range(2):
                self.assertEqual(cache.spelled(result, "tools", context, cursor, spell), result)
            self.assertEqual(spelled, [result, result])
            self.assertEqual(cache.kept_bytes, 0)
            spelled.clear()


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
