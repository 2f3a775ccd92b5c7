"""
Tests for L{mcpx.server.param_headers}: SEP-2243 C{Mcp-Param-*} headers of 2026-07-28
calls of pass-through tools, checked on their own and on C{/mcp} over the real pool.
"""

from __future__ import annotations

from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from mcpx.server.http import McpHTTP
from mcpx.server.param_headers import check_headers, decode_param, tool_header_paths
from mcpx.settings.servers import ServersConfig, StdioServer
from mcpx.wire.errors import HEADER_MISMATCH, RpcError
from tests.daemon.fake_pool import swap_part
from tests.server.test_http import Client, modern, modern_headers, request
from tests.server.test_passthrough import passed_through, scripts, upstream

#: A pass-through tool mirroring three arguments, one of them nested.
REGIONAL: dict[str, Any] = {
    "name": "echo",
    "inputSchema": {
        "type": "object",
        "properties": {
            "text": {"type": "string", "x-mcp-header": "Region"},
            "count": {"type": "integer", "x-mcp-header": "Count"},
            "where": {
                "type": "object",
                "properties": {"exact": {"type": "boolean", "x-mcp-header": "Exact"}},
            },
        },
    },
}


def headers_of(given: dict[str, str]) -> Any:
    folded = {name.lower(): value for name, value in given.items()}
    return lambda name: folded.get(name.lower())


class CheckTests(SynchronousTestCase):
    wanted = {("text",): "Region", ("count",): "Count", ("where", "exact"): "Exact"}

    def refused(self, arguments: dict[str, Any], given: dict[str, str]) -> str:
        with self.assertRaises(RpcError) as raised:
            check_headers(self.wanted, arguments, headers_of(given))
        self.assertEqual(raised.exception.code, HEADER_MISMATCH)
        return str(raised.exception.message)

    def test_agreeing_headers_pass(self) -> None:
        """
        Headers saying what the arguments say pass: strings as they are or Base64,
        integers as numbers, booleans as true/false; absent arguments want no header.
        """
        check_headers(
            self.wanted,
            {"text": "us-west1", "count": 42, "where": {"exact": False}},
            headers_of(
                {
                    "Mcp-Param-Region": "us-west1",
                    "mcp-param-count": "42.0",
                    "MCP-PARAM-EXACT": "false",
                }
            ),
        )
        check_headers(
            self.wanted,
            {"text": "Hello, 世界", "count": None},
            headers_of({"Mcp-Param-Region": "=?base64?SGVsbG8sIOS4lueVjA==?="}),
        )
        check_headers(self.wanted, {}, headers_of({}))

    def test_missing(self) -> None:
        """An argument with a value and no header is refused, naming the header."""
        message = self.refused({"text": "us-west1"}, {})
        self.assertIn("Mcp-Param-Region", message)
        self.assertIn("Mcp-Param-Exact", self.refused({"where": {"exact": True}}, {}))

    def test_invalid_characters(self) -> None:
        """Characters a header may not hold, and malformed Base64, are refused."""
        self.assertIn(
            "characters", self.refused({"text": "a\x01b"}, {"Mcp-Param-Region": "a\x01b"})
        )
        self.assertIn("characters", self.refused({"text": "é"}, {"Mcp-Param-Region": "é"}))
        for bad in ("=?base64?SGVsbG8?=", "=?base64?SGVs!!!bG8=?=", "=?base64?/w==?="):
            self.assertIn("base64", self.refused({"text": "Hello"}, {"Mcp-Param-Region": bad}))

    def test_mismatch(self) -> None:
        """A header disagreeing with its argument, or with none, is refused."""
        self.assertIn(
            "disagrees", self.refused({"text": "us-west1"}, {"Mcp-Param-Region": "eu-west1"})
        )
        self.refused({"count": 42}, {"Mcp-Param-Count": "41"})
        self.refused({"count": 42}, {"Mcp-Param-Count": "forty-two"})
        self.refused({"where": {"exact": True}}, {"Mcp-Param-Exact": "True"})
        self.refused({"text": "SGVsbG8="}, {"Mcp-Param-Region": "=?base64?SGVsbG8=?="})
        self.assertIn("no value", self.refused({}, {"Mcp-Param-Region": "us-west1"}))

    def test_sentinel_halves_are_literal(self) -> None:
        """A value with only the prefix or only the suffix is taken as it is."""
        self.assertEqual(decode_param("X", "=?base64?SGVsbG8="), "=?base64?SGVsbG8=")
        self.assertEqual(decode_param("X", "SGVsbG8=?="), "SGVsbG8=?=")
        self.assertEqual(decode_param("X", "=?base64?SGk=?="), "Hi")

    def test_paths_by_tool(self) -> None:
        """Each tool's annotated paths, by name; tools with invalid annotations are left out."""
        broken = {
            "name": "broken",
            "inputSchema": {"properties": {"n": {"type": "number", "x-mcp-header": "N"}}},
        }
        plain = {"name": "plain", "inputSchema": {"type": "object"}}
        self.assertEqual(
            tool_header_paths([REGIONAL, broken, plain]),
            {"echo": {("text",): "Region", ("count",): "Count", ("where", "exact"): "Exact"}},
        )


class HTTPTests(SynchronousTestCase):
    """C{/mcp} in pass-through, C{alpha}'s C{echo} annotated as L{REGIONAL}."""

    def setUp(self) -> None:
        scripted = scripts()
        scripted["alpha"]["tools"] = [REGIONAL]
        self.harness, self.connector = passed_through(scripted=scripted)
        self.mcp = McpHTTP(self.harness.server, self.harness.clock, keep_alive=15.0)
        self.addCleanup(self.mcp.close)
        self.client = Client(self.mcp, self.harness.clock)

    def call(self, request_id: int, arguments: dict[str, Any], **given: str) -> tuple[Any, Any]:
        headers = modern_headers("tools/call", **{"Mcp-Name": "echo"}, **given)
        return self.client.post(
            modern(request_id, "tools/call", {"name": "echo", "arguments": arguments}), headers
        )

    def calls(self) -> int:
        return upstream(self.connector, "alpha").methods().count("tools/call")

    def test_correct_header_is_forwarded(self) -> None:
        """A call whose headers agree is forwarded and answered (200)."""
        response, body = self.call(1, {"text": "us-west1"}, **{"Mcp-Param-Region": "us-west1"})
        self.assertEqual(response.code, 200)
        self.assertEqual(body["result"]["content"], [{"type": "text", "text": "us-west1"}])
        response, _ = self.call(
            2, {"text": " padded "}, **{"Mcp-Param-Region": "=?base64?IHBhZGRlZCA=?="}
        )
        self.assertEqual(response.code, 200)
        self.assertEqual(self.calls(), 2)

    def test_a_prefixed_tool_is_checked(self) -> None:
        """
        With C{toolPrefix} "a_" on alpha, a call of C{a_echo} is checked against alpha's
        C{echo}: refused (400, -32020) without its header, forwarded with it.
        """
        swap_part(
            self.harness.host,
            servers=ServersConfig(
                {
                    "alpha": StdioServer("alpha", "fake-server", tool_prefix="a_"),
                    "beta": StdioServer("beta", "fake-server"),
                },
                "test",
            ),
        )

        def call(request_id: int, **given: str) -> tuple[Any, Any]:
            headers = modern_headers("tools/call", **{"Mcp-Name": "a_echo"}, **given)
            params = {"name": "a_echo", "arguments": {"text": "ünï"}}
            return self.client.post(modern(request_id, "tools/call", params), headers)

        response, body = call(1)
        self.assertEqual(response.code, 400)
        self.assertEqual(body["error"]["code"], HEADER_MISMATCH)
        self.assertEqual(self.calls(), 0)
        response, body = call(2, **{"Mcp-Param-Region": "=?base64?w7xuw68=?="})
        self.assertEqual(response.code, 200, body)
        self.assertEqual(body["result"]["content"], [{"type": "text", "text": "ünï"}])
        self.assertEqual(self.calls(), 1)

    def test_refusals(self) -> None:
        """
        A missing header, one with invalid characters or malformed Base64, and one
        disagreeing with the body: 400 with -32020 and the request's id, and nothing
        is forwarded.
        """
        for request_id, given in enumerate(
            (
                {},
                {"Mcp-Param-Region": "=?base64?dXMtd2VzdDE?="},
                {"Mcp-Param-Region": "us\x01west1"},
                {"Mcp-Param-Region": "eu-west1"},
            ),
            start=1,
        ):
            response, body = self.call(request_id, {"text": "us-west1"}, **given)
            self.assertEqual(response.code, 400, given)
            self.assertEqual(body["id"], request_id)
            self.assertEqual(body["error"]["code"], HEADER_MISMATCH, given)
        self.assertEqual(self.calls(), 0)

    def test_a_changed_catalogue_is_read_anew(self) -> None:
        """
        The headers a call must carry, and the server it goes to, are those of the
        tools as listed now: once a server says its tools changed, a call is checked
        and routed against its new list, never one derived from the old.
        """
        response, _ = self.call(1, {"text": "us-west1"}, **{"Mcp-Param-Region": "us-west1"})
        self.assertEqual(response.code, 200)
        # The upstreams read their scripted lists in place at each listing.
        alpha, beta = (self.connector.scripted[name]["tools"] for name in ("alpha", "beta"))
        alpha[:] = [{"name": "echo", "inputSchema": {"type": "object"}}]
        upstream(self.connector, "alpha").notify("notifications/tools/list_changed")
        response, body = self.call(2, {"text": "us-west1"})
        self.assertEqual(response.code, 200, body)
        self.assertEqual(self.calls(), 2)

        # The name moves to beta, annotated there: checked as beta's, and sent to beta.
        alpha[:] = []
        beta[:] = [REGIONAL]
        upstream(self.connector, "alpha").notify("notifications/tools/list_changed")
        upstream(self.connector, "beta").notify("notifications/tools/list_changed")
        response, body = self.call(3, {"text": "us-west1"})
        self.assertEqual(response.code, 400)
        self.assertEqual(body["error"]["code"], HEADER_MISMATCH)
        response, body = self.call(4, {"text": "us-west1"}, **{"Mcp-Param-Region": "us-west1"})
        self.assertEqual(response.code, 200, body)
        self.assertEqual(self.calls(), 2)
        beta = upstream(self.connector, "beta").methods()
        self.assertEqual(beta.count("tools/call"), 1)

    def test_legacy_and_gateway_unchecked(self) -> None:
        """
        A legacy call carries no Mcp-Param-* headers to check; a gateway tool
        annotates nothing and needs none.
        """
        response, body = self.client.post(
            request(1, "tools/call", {"name": "echo", "arguments": {"text": "x"}})
        )
        self.assertEqual(response.code, 200)
        self.assertNotIn("error", body)
        response, body = self.client.post(
            modern(2, "tools/call", {"name": "mcpx_servers", "arguments": {}}),
            modern_headers("tools/call", **{"Mcp-Name": "mcpx_servers"}),
        )
        self.assertEqual(response.code, 200)
        self.assertNotIn("error", body)
