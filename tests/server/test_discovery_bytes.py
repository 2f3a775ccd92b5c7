"""
C{mcpx_tools} answers put together from each server's kept summaries and their JSON
(L{mcpx.ops.servers}, L{mcpx.ops.written}) are byte for byte the answers written whole.
"""

from __future__ import annotations

from typing import Any

from twisted.python.monkey import MonkeyPatcher
from twisted.trial.unittest import SynchronousTestCase

from mcpx.ops import servers as servers_op
from mcpx.ops.written import WrittenAnswer
from mcpx.server import results, surface
from mcpx.spec.revision import Revision
from mcpx.wire.messages import Response, encode_json, parse
from tests.daemon.fake_pool import FakePool, FakeServer, unavailable
from tests.server import Harness, Session


class RecordingHarness(Harness):
    """A harness that keeps every frame the server wrote, as bytes."""

    def __init__(self, pool: FakePool) -> None:
        self.raw: list[bytes] = []
        super().__init__(pool)

    def _to_client(self, data: bytes) -> None:
        self.raw.append(data)
        super()._to_client(data)


def tool(name: str, description: Any = None, **more: Any) -> dict[str, Any]:
    found = {"name": name, "inputSchema": {"type": "object"}, **more}
    if description is not None:
        found["description"] = description
    return found


def server_tools(server: str, words: str = "echoes") -> list[dict[str, Any]]:
    return [
        tool(f"{server}_tool_{j}", f'Tool "{j}" of {server}: {words}\ttext\n\\ ✓ é')
        for j in range(5)
    ] + [
        tool(f"{server}_titled", title="A title", annotations={"title": "ignored"}),
        tool(f"{server}_annotated", "", annotations={"title": "From annotations"}),
        tool(f"{server}_odd", 7, title=3),
    ]


def many_servers() -> dict[str, FakeServer]:
    found = {f"s{i}": FakeServer(f"s{i}", tools=server_tools(f"s{i}")) for i in range(4)}
    found["empty"] = FakeServer("empty")
    return found


def written_whole(answer: dict[str, Any], listed: Any) -> dict[str, Any]:
    """The answer as before: a plain dict, which the gateway and the wire encode whole."""
    return answer


class SameBytesTests(SynchronousTestCase):
    """The answer as it is put together, against the same answer written whole."""

    def setUp(self) -> None:
        self.pool = FakePool(many_servers())

    def call(self, revision: Revision, arguments: dict[str, Any]) -> tuple[Any, bytes]:
        """One C{mcpx_tools} call: its result, and the bytes of the result in its answer."""
        harness = RecordingHarness(self.pool)
        result = Session(revision, harness).call("mcpx_tools", arguments)
        frame = harness.raw[-1]
        message = parse(frame)
        assert isinstance(message, Response)
        # The request ids may differ: what follows them is compared.
        prefix = b'{"jsonrpc":"2.0","id":%s,"result":' % encode_json(message.id)
        self.assertTrue(frame.startswith(prefix), frame[:80])
        return result, frame[len(prefix) :]

    def whole(self, revision: Revision, arguments: dict[str, Any]) -> bytes:
        """The bytes with every summary written again and nothing put together."""
        patcher = MonkeyPatcher(
            (servers_op, "_KEPT_SUMMARIES", servers_op._KeptSummaries()),
            (servers_op, "_written", written_whole),
        )
        answered: bytes = patcher.runWithPatches(self.call, revision, arguments)[1]
        return answered

    def assertSameAnswers(self, arguments: dict[str, Any]) -> list[Any]:
        """The same bytes either way, at every revision; the results."""
        found = []
        for revision in Revision:
            result, answered = self.call(revision, arguments)
            self.assertIs(result["isError"], False)
            self.assertEqual(answered, self.whole(revision, arguments), f"{revision} {arguments}")
            found.append(result)
        return found

    def test_every_server(self) -> None:
        """Every server's tools: the same bytes at every revision."""
        result = self.assertSameAnswers({})[-1]
        tools = result["structuredContent"]["tools"]
        self.assertEqual(len(tools), 4 * 8)
        self.assertEqual(
            tools[5:8],
            [
                {"server": "s0", "name": "s0_titled", "title": "A title", "description": None},
                {
                    "server": "s0",
                    "name": "s0_annotated",
                    "title": "From annotations",
                    "description": "",
                },
                {"server": "s0", "name": "s0_odd", "title": None, "description": None},
            ],
        )

    def test_search(self) -> None:
        """A search's answer, which is written whole, is as it was."""
        self.assertSameAnswers({"search": "TOOL_3"})
        self.assertSameAnswers({"search": "from annotations"})
        self.assertSameAnswers({"search": "nothing has this"})

    def test_one_server(self) -> None:
        """One server's tools, or an empty list."""
        self.assertSameAnswers({"server": "s2"})
        self.assertSameAnswers({"server": "empty"})
        self.assertSameAnswers({"server": "s2", "search": "titled"})

    def test_errors(self) -> None:
        """A server that cannot be listed is in C{errors}, in the same bytes."""
        self.pool.servers["s1"].failure = unavailable("s1")
        result = self.assertSameAnswers({})[-1]
        self.assertEqual(
            [entry["server"] for entry in result["structuredContent"]["errors"]], ["s1"]
        )

    def test_catalogue_changes(self) -> None:
        """New tools from a server (listed again, or a new instance) are what is answered."""
        self.assertSameAnswers({})
        self.pool.servers["s1"].tools = server_tools("s1", "has new words")
        tools = self.assertSameAnswers({})[-1]["structuredContent"]["tools"]
        self.assertIn("has new words", tools[8]["description"])
        self.pool.servers["s1"].tools.append(tool("s1_more", "One more"))
        tools = self.assertSameAnswers({})[-1]["structuredContent"]["tools"]
        self.assertEqual(tools[16]["name"], "s1_more")
        # A server replaced by one of another name with the same tool objects.
        self.pool.servers["renamed"] = self.pool.servers.pop("s2")
        tools = self.assertSameAnswers({})[-1]["structuredContent"]["tools"]
        self.assertEqual({entry["server"] for entry in tools[-8:]}, {"renamed"})

    def test_lone_surrogate(self) -> None:
        """A description JSON cannot carry as UTF-8 takes the long way, to the same bytes."""
        self.pool.servers["s3"].tools = [tool("lone", "half a pair: \ud800")]
        self.assertSameAnswers({})

    def bodies(self) -> list[Any]:
        """The bodies the gateway makes tool results of, from now on."""
        bodies: list[Any] = []
        json_result = results.json_result

        def spy(body: Any) -> dict[str, Any]:
            bodies.append(body)
            return json_result(body)

        self.patch(surface, "json_result", spy)
        return bodies

    def test_put_together(self) -> None:
        """Without a search, the answer comes with its JSON (nothing encodes it again)."""
        bodies = self.bodies()
        self.pool.servers["s1"].failure = unavailable("s1")
        for revision in (Revision.V2026_07_28, Revision.V2024_11_05):
            self.call(revision, {})
            self.call(revision, {"server": "s0"})
        self.call(Revision.V2026_07_28, {"search": "tool"})
        self.assertEqual([type(body) for body in bodies], [WrittenAnswer] * 4 + [dict])

    def test_kept(self) -> None:
        """The answer is kept while every server's tools are the same, and only then."""
        bodies = self.bodies()
        self.call(Revision.V2026_07_28, {})
        self.call(Revision.V2025_03_26, {})
        self.assertIs(bodies[1], bodies[0])
        self.pool.servers["s3"].tools = server_tools("s3")
        self.call(Revision.V2026_07_28, {})
        self.assertIsNot(bodies[2], bodies[0])
        self.assertEqual(bodies[2], bodies[0])
        # A server that fails: its errors are never kept.
        self.pool.servers["empty"].failure = unavailable("empty")
        self.call(Revision.V2026_07_28, {})
        self.call(Revision.V2026_07_28, {})
        self.assertEqual([len(body.get("errors", ())) for body in bodies], [0, 0, 0, 1, 1])
        self.pool.servers["empty"].failure = None
        self.call(Revision.V2026_07_28, {})
        self.assertIs(bodies[-1], bodies[2])
