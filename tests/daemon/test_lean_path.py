"""
The lean path for C{POST /mcp} (L{mcpx.daemon.lean_path}) answers with the same bytes
as twisted.web and the Klein app: the same requests, raw HTTP on a string transport,
sent to a daemon site with the lean path and to one without, answered alike (status,
headers but C{Date}, body), over TCP and the unix socket, in both eras, refusals
included.
"""

from __future__ import annotations

import functools
import inspect
import json
import random
import re
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any, cast

from twisted.internet.address import IPv4Address, UNIXAddress
from twisted.internet.defer import CancelledError, Deferred, fail, succeed
from twisted.internet.protocol import connectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.http import HTTPChannel, Request, datetimeToString
from twisted.web.http_headers import Headers

from mcpx.daemon.gate import Gate, HostRule, OriginRule
from mcpx.daemon.lean_path import (
    MAX_HEAD,
    MAX_HEADERS,
    SLOW,
    Head,
    HttpDate,
    LeanChannel,
    LeanMcp,
    LeanRequest,
    read_head,
)
from mcpx.daemon.limits import TransportLimits
from mcpx.daemon.site import DaemonSite, JSONRequest, SiteOptions
from mcpx.daemon.token import TokenFile, read_token
from mcpx.server import http_legacy as session_ids
from mcpx.server.dispatch import McpServer
from mcpx.server.http import McpHTTP
from mcpx.server.http_exchange import KeepAlive
from mcpx.wire.errors import RpcError
from tests.daemon.fake_pool import (
    FakePool,
    HeldCall,
    daemon_http,
    default_settings,
    text_result,
)
from tests.server import gateway_servers, servers_config

OWNER = 1000
OTHER = 65534
TCP = IPv4Address("TCP", "127.0.0.1", 8899)
TCP_CLIENT = IPv4Address("TCP", "127.0.0.1", 40000)
UNIX = UNIXAddress(b"/state/mcpx.sock")
LEGACY = "2025-06-18"
MODERN = "2026-07-28"
ACCEPT = b"application/json, text/event-stream"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
}
LIMITS = TransportLimits(max_body=4096, max_bodies_total=64 * 1024)


class _Tokens:
    """Session ids in order, so two daemons mint the same ones."""

    def __init__(self) -> None:
        self.count = 0

    def token_urlsafe(self, size: int) -> str:
        self.count += 1
        return f"session-{self.count}"


def post(
    message: Any, *headers: tuple[str, str], raw: bytes | None = None, host: str = "127.0.0.1"
) -> bytes:
    body = raw if raw is not None else json.dumps(message).encode()
    lines = [
        b"POST /mcp HTTP/1.1",
        b"Host: " + host.encode(),
        b"Content-Type: application/json",
        b"Accept: " + ACCEPT,
        *(f"{name}: {value}".encode() for name, value in headers),
        b"Content-Length: %d" % len(body),
    ]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def rpc(request_id: int | None, method: str, params: Any = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if request_id is not None:
        message["id"] = request_id
    if params is not None:
        message["params"] = params
    return message


def modern(request_id: int | None, method: str, params: dict[str, Any] | None = None) -> bytes:
    extra = [("MCP-Protocol-Version", MODERN), ("Mcp-Method", method)]
    if method == "tools/call" and params is not None:
        extra.append(("Mcp-Name", params["name"]))
    return post(rpc(request_id, method, {**(params or {}), "_meta": META}), *extra)


def legacy(request_id: int | None, method: str, params: Any = None, session: int = 1) -> bytes:
    return post(
        rpc(request_id, method, params),
        ("Mcp-Session-Id", f"session-{session}"),
        ("MCP-Protocol-Version", LEGACY),
    )


INITIALIZE = post(
    rpc(
        1,
        "initialize",
        {
            "protocolVersion": LEGACY,
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    ),
    ("MCP-Protocol-Version", LEGACY),
)
CALL = {"name": "mcpx_call", "arguments": {"server": "search", "tool": "search", "arguments": {}}}
PASS_THROUGH = {"name": "read_file", "arguments": {"path": "/a"}}


def responses(raw: bytes) -> Iterator[tuple[int, list[tuple[bytes, bytes]], bytes]]:
    """Each HTTP answer in C{raw}: status, headers but C{Date} as sent, the body unframed."""
    while raw:
        head, _, raw = raw.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        headers = [tuple(line.split(b": ", 1)) for line in lines[1:]]
        named = {name.lower(): value for name, value in headers}
        if named.get(b"transfer-encoding") == b"chunked":
            body = bytearray()
            while True:
                size_line, _, raw = raw.partition(b"\r\n")
                size = int(size_line, 16)
                body += raw[:size]
                raw = raw[size + 2 :]
                if size == 0:
                    break
            content = bytes(body)
        else:
            length = int(named.get(b"content-length", b"0"))
            content, raw = raw[:length], raw[length:]
        kept = [(n, v) for n, v in headers if n.lower() != b"date"]
        yield status, kept, content


class _Transport(StringTransport):
    """
    A string transport that, like a socket's, lets a producer be unregistered twice and
    paused or resumed once closing (twisted.web does both on a refused request).
    """

    def unregisterProducer(self) -> None:
        self.producer = None

    def _checkState(self) -> None:
        pass


class Daemon:
    """A daemon's site over the real MCP server and a fake pool, with or without the lean path."""

    def __init__(self, lean: bool, state: Path, auth: str = "peer") -> None:
        self.clock = Clock()
        self.clock.advance(1000)
        self.unix_uid: int | None = OWNER
        self.tcp_uid: int | None = OWNER
        self.pool = FakePool(gateway_servers())
        http = daemon_http(
            clock=self.clock,
            pid=1,
            pool=self.pool,
            settings=default_settings(),
            servers=servers_config("files", "search"),
        )
        http.mcp = McpHTTP(
            McpServer(http.host, self.clock, passthrough=("files",)), self.clock, max_body=2048
        )
        self.http = http
        self.gate = Gate(
            http.resource(),
            origins=OriginRule(()),
            hosts=HostRule(()),
            auth=auth,
            token=TokenFile(state, self.clock.seconds),
            uid=OWNER,
            lookup_uid=lambda peer, own: self.tcp_uid,
            lookup_unix_uid=lambda request: self.unix_uid,
        )
        self.site = DaemonSite(
            self.gate,
            self.clock,
            SiteOptions(LIMITS, lean=LeanMcp(self.gate, http.mcp) if lean else None),
        )

    def connect(self, own: Any = TCP, peer: Any = TCP_CLIENT) -> tuple[Any, StringTransport]:
        channel = self.site.buildProtocol(peer)
        transport = _Transport(hostAddress=own, peerAddress=peer)
        channel.makeConnection(transport)
        return channel, transport


_DATE = re.compile(rb"\r\nDate: [^\r]*")


class SameBytesCase(SynchronousTestCase):
    auth = "peer"

    def setUp(self) -> None:
        self.state = Path(tempfile.mkdtemp())
        self.token = read_token(self.state)
        self.tokens = {True: _Tokens(), False: _Tokens()}
        self.daemons = {lean: Daemon(lean, self.state, self.auth) for lean in (True, False)}

    def exchange(
        self, requests: Sequence[bytes], *, own: Any = TCP, peer: Any = TCP_CLIENT, split: int = 0
    ) -> list[tuple[int, list[tuple[bytes, bytes]], bytes]]:
        """
        Send C{requests} on one connection to each daemon, one after another (in pieces of
        C{split} bytes when given); assert both answered alike, and return the answers.
        """
        answers = {}
        for lean, daemon in self.daemons.items():
            self.patch(session_ids, "secrets", self.tokens[lean])
            channel, transport = daemon.connect(own, peer)
            for data in requests:
                pieces = (
                    [data[i : i + split] for i in range(0, len(data), split)] if split else [data]
                )
                for piece in pieces:
                    channel.dataReceived(piece)
            answers[lean] = list(responses(transport.value()))
            if lean:
                self.assertIsInstance(channel, LeanChannel)
                self.channel = channel
        self.assertEqual(answers[True], answers[False])
        self.assertEqual(len(answers[True]), len(requests))
        return answers[True]

    def held_exchange(
        self, request: bytes, answer: Callable[[HeldCall], None], split: int = 0
    ) -> bytes:
        """
        Send C{request}, a tool call, to each daemon on a connection of its own, let
        C{answer} answer the call the pool holds; assert both sent the same bytes but
        C{Date}, and return them.
        """
        sent = {}
        for lean, daemon in self.daemons.items():
            self.patch(session_ids, "secrets", self.tokens[lean])
            daemon.pool.hold = True
            channel, transport = daemon.connect()
            pieces = (
                [request[i : i + split] for i in range(0, len(request), split)]
                if split
                else [request]
            )
            for piece in pieces:
                channel.dataReceived(piece)
            held = daemon.pool.held.pop()
            self.assertEqual(daemon.pool.held, [])
            answer(held)
            sent[lean] = _DATE.sub(b"", transport.value())
            self.assertEqual(isinstance(channel, LeanChannel) and not channel.slow, lean)
        self.assertEqual(sent[True], sent[False])
        return sent[True]

    def assertLean(self) -> None:
        """The lean daemon's last connection never went to twisted.web's parser."""
        self.assertFalse(self.channel.slow)


def header(answer: tuple[int, list[tuple[bytes, bytes]], bytes], name: bytes) -> bytes | None:
    for found, value in answer[1]:
        if found.lower() == name:
            return value
    return None


class SameBytesTests(SameBytesCase):
    def test_legacy_session(self) -> None:
        """A 2025-06-18 session: initialize, initialized, lists, calls, a ping, its errors."""
        answers = self.exchange(
            [
                INITIALIZE,
                legacy(None, "notifications/initialized"),
                legacy(2, "tools/list"),
                legacy(3, "tools/call", CALL),
                legacy(4, "tools/call", PASS_THROUGH),
                legacy(5, "ping"),
                legacy(6, "no/such/method"),
                legacy(7, "ping", session=99),
                post(
                    rpc(8, "ping"),
                    ("Mcp-Session-Id", "session-1"),
                    ("MCP-Protocol-Version", "2025-03-26"),
                ),
                post(None, ("Mcp-Session-Id", "session-1"), raw=b'{"jsonrpc":"2.0","id":'),
            ]
        )
        self.assertLean()
        statuses = [answer[0] for answer in answers]
        self.assertEqual(statuses, [200, 202, 200, 200, 200, 200, 200, 404, 400, 400])
        self.assertEqual(header(answers[0], b"mcp-session-id"), b"session-1")
        self.assertEqual(header(answers[2], b"content-type"), b"application/json")
        self.assertEqual(header(answers[2], b"content-length"), str(len(answers[2][2])).encode())
        tools = [tool["name"] for tool in json.loads(answers[2][2])["result"]["tools"]]
        self.assertIn("mcpx_call", tools)
        self.assertIn("read_file", tools)
        self.assertEqual(json.loads(answers[9][2])["error"]["code"], -32700)

    def test_modern_requests(self) -> None:
        """2026-07-28 requests: lists, calls, a notification, a header that disagrees."""
        answers = self.exchange(
            [
                modern(1, "tools/list"),
                modern(2, "tools/call", CALL),
                modern(3, "tools/call", PASS_THROUGH),
                modern(None, "notifications/roots/list_changed"),
                post(
                    rpc(4, "tools/list", {"_meta": META}),
                    ("MCP-Protocol-Version", MODERN),
                    ("Mcp-Method", "tools/call"),
                ),
                post(rpc(5, "tools/list", {"_meta": META}), ("MCP-Protocol-Version", MODERN)),
            ]
        )
        self.assertLean()
        self.assertEqual([answer[0] for answer in answers], [200, 200, 200, 202, 400, 400])
        self.assertIsNone(header(answers[0], b"mcp-session-id"))

    def test_every_revision_twice(self) -> None:
        """
        A session of each legacy revision (2024-11-05 to 2025-11-25; the first sends no
        version header) and 2026-07-28 requests: lists, calls and a pass-through call,
        a header that disagrees, each sent twice on one connection (the second reads
        what the first's header values were read as, L{mcpx.server.http_exchange}):
        the bytes twisted.web's path sends, the same statuses both times.
        """
        for number, revision in enumerate(("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")):
            session = number + 1

            def at(
                request_id: int,
                method: str,
                params: Any = None,
                session: int = session,
                revision: str = revision,
            ) -> bytes:
                headers = [("Mcp-Session-Id", f"session-{session}")]
                if revision != "2024-11-05":
                    headers.append(("MCP-Protocol-Version", revision))
                return post(rpc(request_id, method, params), *headers)

            opening = post(
                rpc(
                    1,
                    "initialize",
                    {
                        "protocolVersion": revision,
                        "capabilities": {},
                        "clientInfo": {"name": "t", "version": "1"},
                    },
                )
            )
            asked = [
                at(2, "tools/list"),
                at(3, "tools/call", CALL),
                at(4, "tools/call", PASS_THROUGH),
                at(5, "ping"),
            ]
            answers = self.exchange([opening, *asked, *asked])
            self.assertLean()
            statuses = [answer[0] for answer in answers]
            self.assertEqual(statuses, [200] * 9, revision)
            self.assertEqual(header(answers[0], b"mcp-session-id"), f"session-{session}".encode())
            self.assertEqual(answers[1:5], answers[5:], revision)
        asked = [
            modern(1, "tools/list"),
            modern(2, "tools/call", CALL),
            modern(3, "tools/call", PASS_THROUGH),
            post(
                rpc(4, "tools/list", {"_meta": META}),
                ("MCP-Protocol-Version", MODERN),
                ("Mcp-Method", "tools/call"),
            ),
            post(
                rpc(5, "tools/call", {**PASS_THROUGH, "_meta": META}),
                ("MCP-Protocol-Version", f" {MODERN}\t"),
                ("Mcp-Method", "tools/call"),
                ("Mcp-Name", "=?base64?cmVhZF9maWxl?="),
            ),
        ]
        answers = self.exchange([*asked, *asked])
        self.assertLean()
        self.assertEqual([answer[0] for answer in answers], [200, 200, 200, 400, 200] * 2)
        self.assertEqual(answers[:5], answers[5:])

    def test_the_unix_socket(self) -> None:
        """The unix socket's rules: any Host, the owner without a token."""
        answers = self.exchange(
            [modern(1, "tools/list"), post(rpc(2, "ping"), host="anything.example")],
            own=UNIX,
            peer=UNIXAddress(None),
        )
        self.assertLean()
        self.assertEqual([answer[0] for answer in answers], [200, 200])

    def test_origin_and_host_refused(self) -> None:
        """A foreign Origin or Host is 403, the JSON-RPC error of /mcp."""
        answers = self.exchange(
            [
                post(rpc(1, "ping"), ("Origin", "https://evil.example")),
                post(rpc(2, "ping"), host="evil.example"),
            ]
        )
        self.assertLean()
        self.assertEqual([answer[0] for answer in answers], [403, 403])
        self.assertEqual(json.loads(answers[0][2])["error"]["code"], -32600)

    def test_no_token_is_401_with_its_challenge(self) -> None:
        """Another user's connection needs the token: 401 with WWW-Authenticate, then in."""
        for daemon in self.daemons.values():
            daemon.tcp_uid = OTHER
            daemon.unix_uid = OTHER
        token = ("Authorization", f"Bearer {self.token}")
        for own, peer in ((TCP, TCP_CLIENT), (UNIX, UNIXAddress(None))):
            answers = self.exchange(
                [post(rpc(1, "ping")), post(rpc(2, "ping"), token)], own=own, peer=peer
            )
            self.assertEqual([answer[0] for answer in answers], [401, 200])
            self.assertEqual(header(answers[0], b"www-authenticate"), b"Bearer")

    def test_bodies_too_large(self) -> None:
        """
        Over transport.maxRequestBody is refused before the body and closes; over
        transport.maxMessageSize is the JSON-RPC 413 of /mcp.
        """
        answers = self.exchange([post(None, raw=b" " * 3000)])
        self.assertEqual(answers[0][0], 413)
        answers = self.exchange([post(None, raw=b"x" * 5000)])
        self.assertEqual(answers[0][0], 413)
        self.assertEqual(json.loads(answers[0][2])["error"]["code"], "body_too_large")
        self.assertTrue(self.channel.transport.disconnecting)

    def test_heads_repeated_and_changed(self) -> None:
        """
        One connection's requests whose heads repeat byte for byte, then change (a
        length, a header's value, a header more or less), are answered as twisted.web
        answers them, in one piece or in several.
        """
        same = modern(1, "tools/list")
        requests = [
            same,
            same,
            modern(2, "tools/list"),
            modern(22, "tools/list"),
            modern(22, "tools/list").replace(b"Accept: ", b"Accept:  "),
            modern(3, "tools/call", CALL),
            modern(3, "tools/call", CALL).replace(b"MCP-Protocol-Version", b"mcp-protocol-version"),
            post(rpc(4, "tools/list", {"_meta": META}), ("MCP-Protocol-Version", MODERN)),
            same,
        ]
        for split in (0, 5):
            self.exchange(requests, split=split)
            self.assertLean()
        answers = self.exchange([same, same])
        self.assertEqual(answers[0][0], 200)
        self.assertEqual(answers[0][2], answers[1][2])

    def test_in_pieces(self) -> None:
        """Requests arriving a few bytes at a time are answered as when they come whole."""
        self.exchange([INITIALIZE, modern(1, "tools/list")], split=7)
        self.assertLean()

    def test_pipelined(self) -> None:
        """Requests sent together are answered in order."""
        self.exchange([INITIALIZE + legacy(2, "tools/list") + modern(3, "tools/list"), b"", b""])
        self.assertLean()

    def test_other_requests_go_to_twisted_web(self) -> None:
        """
        Another route, a chunked body or HTTP/1.0 on a connection that began lean are
        twisted.web's from then on, and answered as they would have been.
        """
        chunked = (
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n10\r\n"
            + b'{"jsonrpc":"2.0"'
            + b"\r\n13\r\n"
            + b',"id":1,"method":"p'
            + b"\r\n6\r\n"
            + b'ing"}\n'
            + b"\r\n0\r\n\r\n"
        )
        self.exchange(
            [
                modern(1, "tools/list"),
                b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                chunked,
                modern(2, "tools/list"),
            ]
        )
        self.assertTrue(self.channel.slow)

    def test_a_connection_lost_mid_body_lets_its_bytes_go(self) -> None:
        """The body held for a request whose client went away is no longer counted."""
        for daemon in self.daemons.values():
            channel, transport = daemon.connect()
            data = post(rpc(1, "tools/list"))
            channel.dataReceived(data[:-5])
            self.assertGreater(daemon.site.admission.body_bytes, 0)
            channel.connectionLost(connectionDone)
            self.assertEqual(daemon.site.admission.body_bytes, 0)
            self.assertEqual(daemon.site.admission.total, 0)
            self.assertEqual(transport.value(), b"")

    def test_a_lost_connection_cancels_its_call(self) -> None:
        """A 2026-07-28 call whose client goes away is cancelled, on both paths."""
        for daemon in self.daemons.values():
            daemon.pool.hold = True
            channel, transport = daemon.connect()
            channel.dataReceived(modern(1, "tools/call", CALL))
            [held] = daemon.pool.held
            self.assertFalse(held.result.called)
            channel.connectionLost(connectionDone)
            self.assertTrue(held.result.called)
            self.assertEqual(transport.value(), b"")
            self.assertEqual(daemon.site.admission.total, 0)

    def test_a_held_call_is_answered_when_it_ends(self) -> None:
        """A call answered later is written then; the next request waits its turn."""
        answers = {}
        for lean, daemon in self.daemons.items():
            daemon.pool.hold = True
            channel, transport = daemon.connect()
            channel.dataReceived(modern(1, "tools/call", CALL) + modern(2, "tools/list"))
            self.assertEqual(transport.value(), b"")
            daemon.pool.held[0].result.callback({"content": [], "isError": False})
            answers[lean] = list(responses(transport.value()))
            self.assertEqual(isinstance(channel, LeanChannel) and not channel.slow, lean)
        self.assertEqual(answers[True], answers[False])
        self.assertEqual([answer[0] for answer in answers[True]], [200, 200])

    def test_large_and_non_ascii_answers(self) -> None:
        """
        A large answer, and one in UTF-8 beyond ASCII, are the same bytes on both
        paths, framed by their length, in both eras.
        """
        texts = [
            'caf\u00e9 \u20ac \U0001f600 \u0000 \\ "',
            "x" * 300_000,
            "\u00e9\U0001f600" * 40_000,
        ]

        def answer_with(text: str) -> Callable[[HeldCall], None]:
            return lambda held: held.result.callback(text_result(text))

        for text in texts:
            for request in (modern(1, "tools/call", CALL), modern(2, "tools/call", PASS_THROUGH)):
                sent = self.held_exchange(request, answer_with(text))
                [(status, headers, body)] = responses(sent)
                self.assertEqual(status, 200)
                self.assertIn((b"Content-Length", b"%d" % len(body)), headers)
                self.assertEqual(json.loads(body)["result"]["content"][0]["text"], text, text[:20])
        # And in a 2025-06-18 session, whose answers carry its Mcp-Session-Id.
        for lean, daemon in self.daemons.items():
            self.patch(session_ids, "secrets", self.tokens[lean])
            daemon.connect()[0].dataReceived(INITIALIZE)
        sent = self.held_exchange(
            legacy(3, "tools/call", CALL),
            lambda held: held.result.callback(text_result(texts[2])),
        )
        [(status, headers, body)] = responses(sent)
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body)["result"]["content"][0]["text"], texts[2])

    def test_an_event_stream_answer(self) -> None:
        """
        A call that reports progress to a client that accepts an event stream is
        answered as a chunked event stream, the same bytes on both paths.
        """

        def progress_then_result(held: HeldCall) -> None:
            assert held.on_progress is not None
            held.on_progress({"progress": 1, "total": 2, "message": "h\u00e4lfte"})
            held.on_progress({"progress": 2, "total": 2})
            held.result.callback(text_result("done \u00e9"))

        params = {**CALL, "_meta": {**META, "progressToken": "p-1"}}
        request = post(
            rpc(1, "tools/call", params),
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "mcpx_call"),
        )
        for split in (0, 9):
            sent = self.held_exchange(request, progress_then_result, split=split)
            [(status, headers, body)] = responses(sent)
            self.assertEqual(status, 200)
            self.assertIn((b"Transfer-Encoding", b"chunked"), headers)
            self.assertIn((b"Content-Type", b"text/event-stream"), headers)
            self.assertEqual(body.count(b"data: "), 3)
            self.assertIn("h\u00e4lfte".encode(), body)

    def test_errors(self) -> None:
        """
        The JSON-RPC errors of /mcp (-32700, -32600, -32601, -32602, -32020) and the
        gate's refusals are the same bytes on both paths.
        """
        answers = self.exchange(
            [
                post(None, raw=b"{not json"),
                post(rpc(1, "tools/list", {"_meta": META}), ("MCP-Protocol-Version", MODERN)),
                modern(2, "no/such/method"),
                modern(3, "tools/call", {"name": "no_such_tool", "arguments": {}}),
                post([rpc(4, "ping")], ("MCP-Protocol-Version", MODERN)),
                post(rpc(5, "ping"), ("Origin", "https://evil.example")),
            ]
        )
        self.assertLean()
        codes = [json.loads(body).get("error", {}).get("code") for _, _, body in answers]
        self.assertIn(-32700, codes)
        self.assertIn(-32601, codes)
        self.assertIn(-32600, codes)
        self.assertEqual(answers[-1][0], 403)

    def test_deadlines(self) -> None:
        """A head or a body that does not arrive in time is 408 on both paths."""
        for cut in (20, -5):
            answers = {}
            for lean, daemon in self.daemons.items():
                channel, transport = daemon.connect()
                channel.dataReceived(post(rpc(1, "ping"))[:cut])
                daemon.clock.advance(LIMITS.body_timeout + LIMITS.header_timeout)
                answers[lean] = transport.value()
                self.assertTrue(transport.disconnecting)
            self.assertEqual(answers[True], answers[False])
            self.assertIn(b"408", answers[True].split(b"\r\n")[0])


def _keep_alive_timers(clock: Clock) -> list[Any]:
    """The keep-alive timers pending on C{clock} (L{KeepAlive}'s)."""
    return [
        call
        for call in clock.getDelayedCalls()
        if isinstance(getattr(cast(Any, call).func, "__self__", None), KeepAlive)
    ]


def _keep_alive_over(case: SynchronousTestCase, clock: Clock) -> None:
    """
    No response is kept alive any more: the shared timer, left armed when the last
    ended (L{KeepAlive.forget}), fires once an interval on with nothing due, and is
    not armed again.
    """
    clock.advance(15)
    case.assertEqual(_keep_alive_timers(clock), [])


class WaitingTests(SameBytesCase):
    """
    A request that waits for its upstream: its keep-alive (one timer for every waiting
    response), the client going away, its answer or error, and the socket read again
    after it, the same bytes on both paths.
    """

    def test_keep_alives_of_calls_that_wait(self) -> None:
        """
        Two calls that wait, started 10 s apart on two connections, each become an
        event stream after 15 s of its own silence and get a keep-alive each 15 s
        after; one timer serves both while they wait, none is left when they end.
        Their answers (a large non-ASCII text, and an upstream's failure) are the same
        bytes on both paths.
        """
        text = "\u00e9\U0001f600" * 20_000
        sent: dict[bool, list[bytes]] = {}
        for lean, daemon in self.daemons.items():
            clock = daemon.clock
            daemon.pool.hold = True
            first, first_sent = daemon.connect()
            first.dataReceived(modern(1, "tools/call", PASS_THROUGH))
            clock.advance(10)
            second, second_sent = daemon.connect()
            second.dataReceived(modern(2, "tools/call", CALL))
            self.assertEqual(len(_keep_alive_timers(clock)), 1)
            clock.advance(5)
            self.assertEqual(first_sent.value().count(b": keepalive"), 1)
            self.assertEqual(second_sent.value(), b"")
            clock.advance(9.9)
            self.assertEqual(second_sent.value(), b"")
            clock.advance(0.1)
            self.assertEqual(second_sent.value().count(b": keepalive"), 1)
            self.assertEqual(first_sent.value().count(b": keepalive"), 1)
            clock.advance(5)
            self.assertEqual(first_sent.value().count(b": keepalive"), 2)
            self.assertEqual(len(_keep_alive_timers(clock)), 1)
            held_first, held_second = daemon.pool.held
            held_first.result.callback(text_result(text))
            self.assertEqual(len(_keep_alive_timers(clock)), 1)
            held_second.result.errback(RuntimeError("the upstream broke"))
            _keep_alive_over(self, clock)
            clock.advance(60)
            sent[lean] = [
                _DATE.sub(b"", transport.value()) for transport in (first_sent, second_sent)
            ]
            self.assertEqual(isinstance(first, LeanChannel) and not first.slow, lean)
        self.flushLoggedErrors(RuntimeError)
        self.assertEqual(sent[True], sent[False])
        for stream in sent[True]:
            self.assertIn(b"Transfer-Encoding: chunked", stream)
            self.assertIn(b"Content-Type: text/event-stream", stream)
        self.assertIn(text.encode(), sent[True][0])
        self.assertIn(b'"isError":true', sent[True][1])

    def test_a_legacy_call_that_waits(self) -> None:
        """
        A call in a 2025-06-18 session that waits gets its keep-alive after 15 s of
        silence and its answer on the stream, the same bytes on both paths, with no
        keep-alive timer left after it.
        """
        sent = {}
        for lean, daemon in self.daemons.items():
            self.patch(session_ids, "secrets", self.tokens[lean])
            daemon.connect()[0].dataReceived(INITIALIZE)
            daemon.pool.hold = True
            channel, transport = daemon.connect()
            channel.dataReceived(legacy(3, "tools/call", CALL))
            daemon.clock.advance(14.9)
            self.assertEqual(transport.value(), b"")
            daemon.clock.advance(0.1)
            daemon.pool.held.pop().result.callback(text_result("caf\u00e9"))
            _keep_alive_over(self, daemon.clock)
            sent[lean] = _DATE.sub(b"", transport.value())
            self.assertEqual(isinstance(channel, LeanChannel) and not channel.slow, lean)
        self.assertEqual(sent[True], sent[False])
        [(status, headers, body)] = responses(sent[True])
        self.assertEqual(status, 200)
        self.assertIn((b"Content-Type", b"text/event-stream"), headers)
        self.assertTrue(body.startswith(b": keepalive\n"), body)
        self.assertIn("caf\u00e9".encode(), body)

    def test_a_legacy_call_outlives_its_post(self) -> None:
        """
        In a 2025-06-18 session a client gone is not a cancellation: the waiting call
        runs on, and the session answers its next call; notifications/cancelled is, and
        the cancelled call's POST ends with 202.  Alike on both paths.
        """
        sent = {}
        for lean, daemon in self.daemons.items():
            self.patch(session_ids, "secrets", self.tokens[lean])
            daemon.connect()[0].dataReceived(INITIALIZE)
            daemon.pool.hold = True
            channel, transport = daemon.connect()
            channel.dataReceived(legacy(3, "tools/call", CALL))
            [held] = daemon.pool.held
            channel.connectionLost(connectionDone)
            self.assertFalse(held.result.called)
            _keep_alive_over(self, daemon.clock)
            held.result.callback(text_result("answered to no one"))
            self.assertEqual(transport.value(), b"")
            daemon.pool.held.clear()
            channel, transport = daemon.connect()
            channel.dataReceived(legacy(4, "tools/call", CALL))
            [held] = daemon.pool.held
            other, _ = daemon.connect()
            other.dataReceived(
                legacy(None, "notifications/cancelled", {"requestId": 4, "reason": "no"})
            )
            self.assertTrue(held.result.called)
            sent[lean] = _DATE.sub(b"", transport.value())
            self.assertEqual(isinstance(channel, LeanChannel) and not channel.slow, lean)
        self.assertEqual(sent[True], sent[False])
        [(status, _, body)] = responses(sent[True])
        self.assertEqual((status, body), (202, b""))

    def test_a_client_gone_stops_its_keep_alive(self) -> None:
        """
        A call whose client goes away while it waits (before its keep-alive, and on
        its event stream) is cancelled, and its keep-alive stops with it, on both paths.
        """
        for daemon in self.daemons.values():
            daemon.pool.hold = True
            for silence in (5, 20):
                channel, transport = daemon.connect()
                channel.dataReceived(modern(1, "tools/call", CALL))
                daemon.clock.advance(silence)
                self.assertEqual(len(_keep_alive_timers(daemon.clock)), 1)
                channel.connectionLost(connectionDone)
                _keep_alive_over(self, daemon.clock)
                self.assertTrue(daemon.pool.held.pop().result.called)
                self.assertEqual(transport.value().count(b": keepalive"), silence // 15)

    def test_errors_after_waiting(self) -> None:
        """
        A call that fails after waiting is answered with its error (a JSON-RPC error
        of a pass-through upstream's, or a failure of the daemon's), alike on both paths.
        """
        failures: list[Exception] = [
            RpcError.invalid_params("no such path"),
            RuntimeError("the upstream broke"),
        ]

        def failing(failure: Exception) -> Callable[[HeldCall], None]:
            return lambda held: held.result.errback(failure)

        bodies = []
        for failure in failures:
            for request in (modern(1, "tools/call", PASS_THROUGH), modern(2, "tools/call", CALL)):
                sent = self.held_exchange(request, failing(failure))
                [(status, headers, body)] = responses(sent)
                self.assertIn((b"Content-Length", b"%d" % len(body)), headers)
                bodies.append((status, json.loads(body)))
        self.flushLoggedErrors(RuntimeError)
        self.assertEqual([status for status, _ in bodies], [400, 200, 500, 200])
        self.assertEqual(bodies[0][1]["error"]["code"], -32602)
        self.assertEqual(bodies[2][1]["error"]["code"], -32603)
        self.assertTrue(bodies[1][1]["result"]["isError"])
        self.assertTrue(bodies[3][1]["result"]["isError"])

    def test_reading_resumes_after_a_held_back_request(self) -> None:
        """
        The socket is not read while more than a request's worth of the next ones is
        held, nor when the transport could not send while a request was answered; it is
        read again once that answer is written.
        """
        for daemon in self.daemons.values():
            daemon.pool.hold = True
            channel, transport = daemon.connect()
            channel.dataReceived(modern(1, "tools/call", CALL))
            channel.dataReceived(modern(2, "tools/list") * 80)
            self.assertEqual(transport.producerState, "paused")
            daemon.pool.held.pop().result.callback(text_result("one"))
            self.assertEqual(transport.producerState, "producing")
            self.assertEqual(transport.value().count(b"HTTP/1.1 200"), 81)
            # The transport full between requests, drained while the next one waits.
            channel.pauseProducing()
            self.assertEqual(transport.producerState, "paused")
            channel.dataReceived(modern(3, "tools/call", CALL))
            channel.resumeProducing()
            self.assertEqual(transport.producerState, "paused")
            daemon.pool.held.pop().result.callback(text_result("three"))
            self.assertEqual(transport.producerState, "producing")
            channel.pauseProducing()
            self.assertEqual(transport.producerState, "paused")
            channel.resumeProducing()
            self.assertEqual(transport.producerState, "producing")


def _mutated(rng: random.Random, data: bytes) -> bytes:
    """C{data} with one to three of the changes a broken or hostile client makes."""
    for _ in range(rng.randint(1, 3)):
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        kind = rng.randrange(10)
        at = rng.randrange(1, len(lines)) if len(lines) > 1 else 0
        if kind == 0:
            lines.insert(at, rng.choice(lines[1:] or [b"X: y"]))  # a header twice
        elif kind == 1 and len(lines) > 1:
            del lines[at]
        elif kind == 2:
            lines[at] = lines[at].swapcase()
        elif kind == 3:
            lines.insert(at, rng.choice([b" folded", b"\tfolded", b"No-Colon", b"Bad Name: v"]))
        elif kind == 4:
            lines.insert(
                at,
                rng.choice(
                    [
                        b"Transfer-Encoding: chunked",
                        b"Connection: close",
                        b"Connection: keep-alive",
                        b"Expect: 100-continue",
                        b"Upgrade: h2c",
                        b"Content-Length: 99999999",
                        b"Content-Length: -1",
                        b"Origin: https://evil.example",
                        b"Host: evil.example",
                        b"X: caf\xc3\xa9",
                        b"X: a\x00b",
                    ]
                ),
            )
        elif kind == 5:
            lines[0] = rng.choice(
                [
                    b"POST /mcp HTTP/1.0",
                    b"post /mcp HTTP/1.1",
                    b"POST /mcp?x=1 HTTP/1.1",
                    b"POST /mcp/ HTTP/1.1",
                    b"POST  /mcp HTTP/1.1",
                    b"GET /mcp HTTP/1.1",
                    b"POST /mcp HTTP/1.1 x",
                ]
            )
        elif kind == 6:
            body = body[: rng.randrange(len(body) + 1)] + body[len(body) // 2 :]
        elif kind == 7:
            i = rng.randrange(len(body) + 1)
            body = body[:i] + bytes([rng.randrange(256)]) + body[i + 1 :]
        elif kind == 8:
            data = data[: rng.randrange(len(data) + 1)]
            continue
        else:
            data = data + data  # pipelined twice
            continue
        data = b"\r\n".join(lines) + b"\r\n\r\n" + body
    return data


class _Scripted:
    """
    An C{/mcp} endpoint that answers every request by a script (see
    L{AnswerWritingTests}); a script may be a coroutine function, awaited.
    """

    def __init__(self, script: Callable[[Any], Any]) -> None:
        self.script = script

    async def render(self, request: Any) -> bytes | None:
        answer = self.script(request)
        if inspect.iscoroutine(answer):
            answer = await answer
        return cast("bytes | None", answer)

    def respond(self, request: Any) -> Any:
        """L{render}'s answer by its script's first wait (the lean path's way in)."""
        return self.script(request)

    def framed(self, request: Any, body: bytes | None) -> bytes | None:
        """Nothing: a script frames its answer itself, as L{render} leaves it."""
        return body


def _json(request: Any) -> bytes:
    request.setResponseCode(200)
    request.setHeader(b"content-type", b"application/json")
    request.setHeader(b"content-length", b"2")
    return b"{}"


def _no_content_type(request: Any) -> bytes:
    request.setHeader(b"content-length", b"5")
    return b"hello"


def _empty_accepted(request: Any) -> bytes:
    request.setResponseCode(202)
    request.setHeader(b"content-length", b"0")
    return b""


def _text_names_and_values(request: Any) -> bytes:
    request.setHeader("X-Text", "caf\u00e9")
    request.setHeader(b"x-bytes-value", "\u20ac")
    request.setHeader("content-length", b"2")
    return b"ok"


def _line_breaks_and_repeats(request: Any) -> bytes:
    request.setHeader(b"x-folded", b"a\r\nb\nc")
    request.setHeader(b"X-Twice", b"1")
    request.setHeader(b"x-other", b"o")
    request.setHeader(b"x-TWICE", b"2")
    request.setHeader(b"www-authenticate", b"Bearer")
    request.setHeader(b"content-md5", b"m")
    request.setResponseCode(401)
    request.setHeader(b"content-length", b"0")
    return b""


def _line_break(value: bytes) -> Callable[[Any], bytes]:
    def script(request: Any) -> bytes:
        # The first header set: a value with a line break of its own goes to
        # twisted.web's Headers, which turns it to a space.
        request.setHeader(b"x-line-break", value)
        request.setHeader(b"content-length", b"0")
        return b""

    return script


def _headers_read_midway(request: Any) -> bytes:
    request.setHeader(b"mcp-session-id", b"s-1")
    request.setHeader(b"content-type", b"application/json")
    if request.responseHeaders.hasHeader(b"Mcp-Session-Id"):
        request.responseHeaders.removeHeader(b"mcp-session-id")
    request.responseHeaders.addRawHeader(b"x-added", b"1")
    request.responseHeaders.addRawHeader(b"x-added", b"2")
    request.setHeader(b"x-after", b"3")
    request.setHeader(b"content-length", b"2")
    return b"{}"


def _cookie(request: Any) -> bytes:
    request.addCookie(b"k", b"v", path=b"/", httpOnly=True)
    request.setHeader(b"content-length", b"1")
    return b"c"


def _no_body_codes(code: int) -> Callable[[Any], bytes]:
    def script(request: Any) -> bytes:
        request.setResponseCode(code)
        request.setHeader(b"content-length", b"4")
        return b"body"

    return script


def _streamed(request: Any) -> None:
    request.setHeader(b"content-type", b"text/event-stream")
    request.write(b"data: 1\n\n")
    request.write(b"")
    request.write(b"data: \xc3\xa9\n\n")
    request.finish()
    return None


def _length_in_pieces(request: Any) -> None:
    request.setHeader(b"content-length", b"10")
    request.write(b"")
    request.write(b"hello")
    request.write(b"world")
    request.finish()
    return None


def _finished_unwritten(request: Any) -> None:
    request.setResponseCode(204)
    request.finish()
    return None


def _odd_length(request: Any) -> bytes:
    request.setHeader(b"content-length", b"+3")
    return b"odd"


def _longer_than_said(request: Any) -> bytes:
    request.setHeader(b"content-length", b"2")
    request.setHeader(b"content-type", b"application/json")
    return b"{}{}"


def _notified(request: Any) -> bytes:
    finished = request.notifyFinish()
    finished.addCallback(lambda _: request.setHeader(b"x-late", b"1"))
    request.setHeader(b"content-length", b"2")
    return b"{}"


def _reason(code: int, reason: bytes | None) -> Callable[[Any], bytes]:
    def script(request: Any) -> bytes:
        request.setResponseCode(code, reason)
        request.setHeader(b"content-length", b"2")
        return b"{}"

    script.__name__ = f"_reason({code}, {reason!r})"
    return script


_SCRIPTS: list[Callable[[Any], bytes | None]] = [
    _json,
    _reason(200, b"Fine"),
    _reason(200, b"OK "),
    _reason(201, None),
    _reason(201, b"OK"),
    _reason(599, None),
    _no_content_type,
    _empty_accepted,
    _text_names_and_values,
    _line_breaks_and_repeats,
    _line_break(b"a\rb"),
    _line_break(b"a\nb"),
    _headers_read_midway,
    _cookie,
    _no_body_codes(204),
    _no_body_codes(304),
    _streamed,
    _length_in_pieces,
    _finished_unwritten,
    _odd_length,
    _longer_than_said,
    _notified,
]


class AnswerWritingTests(SameBytesCase):
    """
    However the C{/mcp} endpoint makes its answer (headers as bytes or text, with line
    breaks, set twice, read and changed through C{responseHeaders}, a cookie, a status
    without a body, a stream, a length written in pieces, or a length that is not
    digits), the lean path sends the bytes twisted.web's sends, and then answers the
    next request on the same connection alike.
    """

    def test_scripted_answers(self) -> None:
        for script in _SCRIPTS:
            sent = {}
            for lean, daemon in self.daemons.items():
                endpoint = _Scripted(script)
                daemon.http.mcp = endpoint  # type: ignore[assignment]
                lean_mcp = daemon.site.lean
                if lean_mcp is not None:
                    lean_mcp._mcp = endpoint  # type: ignore[assignment]
                channel, transport = daemon.connect()
                channel.dataReceived(post(rpc(1, "ping")))
                endpoint.script = _json
                channel.dataReceived(post(rpc(2, "ping")))
                sent[lean] = (_DATE.sub(b"", transport.value()), transport.disconnecting)
                self.assertEqual(isinstance(channel, LeanChannel) and not channel.slow, lean)
            self.assertEqual(sent[True], sent[False], script.__name__)
            self.assertEqual(sent[True][0].count(b"HTTP/1.1 "), 2, script.__name__)


class AddressTests(SameBytesCase):
    """A lean request's addresses are its connection's, request after request."""

    def test_host_and_client(self) -> None:
        for lean, daemon in self.daemons.items():
            seen: list[tuple[Any, Any]] = []

            def script(request: Any, seen: list[tuple[Any, Any]] = seen) -> bytes:
                seen.append((request.getHost(), request.getClientAddress()))
                return _json(request)

            endpoint = _Scripted(script)
            daemon.http.mcp = endpoint  # type: ignore[assignment]
            if daemon.site.lean is not None:
                daemon.site.lean._mcp = endpoint  # type: ignore[assignment]
            channel, _ = daemon.connect(TCP, TCP_CLIENT)
            for n in range(2):
                channel.dataReceived(post(rpc(n, "ping")))
            self.assertEqual(seen, [(TCP, TCP_CLIENT)] * 2, lean)


_VAR: ContextVar[str] = ContextVar("test_lean_path", default="unset")


class RouteTests(SameBytesCase):
    """
    The lean path runs the C{/mcp} endpoint's coroutine as Klein's route does: an
    answer made at once, or after waiting on Deferreds that succeed or fail, a
    failure (processingFailed's 500), a cancellation when the client goes, and the
    coroutine's own context, alike on both paths.
    """

    def run_script(
        self,
        script: Callable[[Any, list[Deferred[Any]], list[str]], Any],
        fire: Callable[..., None],
    ) -> dict[bool, tuple[bytes, list[str]]]:
        """
        Answer one request on each daemon by C{script}, which may wait on Deferreds it
        puts in its list; C{fire} then fires them.  Both paths must have sent the same
        bytes (but C{Date}) and noted the same things.
        """
        seen = {}
        for lean, daemon in self.daemons.items():
            pending: list[Deferred[Any]] = []
            notes: list[str] = []
            endpoint = _Scripted(functools.partial(script, pending=pending, notes=notes))  # type: ignore[call-arg]
            daemon.http.mcp = endpoint  # type: ignore[assignment]
            if daemon.site.lean is not None:
                daemon.site.lean._mcp = endpoint  # type: ignore[assignment]
            channel, transport = daemon.connect()
            channel.dataReceived(post(rpc(1, "ping")))
            notes.append(f"caller's context: {_VAR.get()}")
            fire(pending, channel)
            notes.append(f"caller's context: {_VAR.get()}")
            seen[lean] = (_DATE.sub(b"", transport.value()), notes)
            self.assertEqual(isinstance(channel, LeanChannel) and not channel.slow, lean)
        self.assertEqual(seen[True], seen[False])
        return seen

    def test_answers_at_once_and_after_waiting(self) -> None:
        async def script(request: Any, pending: list[Deferred[Any]], notes: list[str]) -> bytes:
            _VAR.set("the coroutine's")
            notes.append(str(await succeed("fired already")))
            for _ in range(2):
                waiting: Deferred[str] = Deferred()
                pending.append(waiting)
                notes.append(await waiting)
                notes.append(f"own context: {_VAR.get()}")
            try:
                await fail(ValueError("failed already"))
            except ValueError as e:
                notes.append(str(e))
            waiting = Deferred()
            pending.append(waiting)
            try:
                await waiting
            except KeyError as e:
                notes.append(f"caught {e}")
            return _json(request)

        def fire(pending: list[Deferred[Any]], channel: Any) -> None:
            pending.pop(0).callback("first")
            pending.pop(0).callback("second")
            pending.pop(0).errback(KeyError("third"))

        seen = self.run_script(script, fire)
        [(status, _, body)] = responses(seen[True][0])
        self.assertEqual((status, body), (200, b"{}"))
        self.assertEqual(
            seen[True][1],
            [
                "fired already",
                "caller's context: unset",
                "first",
                "own context: the coroutine's",
                "second",
                "own context: the coroutine's",
                "failed already",
                "caught 'third'",
                "caller's context: unset",
            ],
        )

    def test_failures_are_processing_failed(self) -> None:
        """A coroutine that raises, at once or after waiting, is answered 500 alike."""

        def at_once(request: Any, pending: list[Deferred[Any]], notes: list[str]) -> bytes:
            raise ValueError("at once")

        async def later(request: Any, pending: list[Deferred[Any]], notes: list[str]) -> bytes:
            waiting: Deferred[None] = Deferred()
            pending.append(waiting)
            await waiting
            raise ValueError("later")

        async def thrown(request: Any, pending: list[Deferred[Any]], notes: list[str]) -> bytes:
            waiting: Deferred[None] = Deferred()
            pending.append(waiting)
            await waiting
            return b"never"

        def fire(pending: list[Deferred[Any]], channel: Any) -> None:
            for waiting in pending:
                waiting.callback(None)

        def fire_failure(pending: list[Deferred[Any]], channel: Any) -> None:
            for waiting in pending:
                waiting.errback(ValueError("thrown in"))

        for script, firing in ((at_once, fire), (later, fire), (thrown, fire_failure)):
            seen = self.run_script(script, firing)
            [(status, _, body)] = responses(seen[True][0])
            self.assertEqual(status, 500, script.__name__)
            self.assertIn(b"Processing Failed", body)
            self.assertEqual(len(self.flushLoggedErrors(ValueError)), 2)

    def test_a_waiting_coroutine_is_cancelled_when_the_client_goes(self) -> None:
        async def script(request: Any, pending: list[Deferred[Any]], notes: list[str]) -> bytes:
            waiting: Deferred[None] = Deferred(lambda _: notes.append("cancelled"))
            pending.append(waiting)
            try:
                await waiting
            except CancelledError:
                notes.append("saw CancelledError")
                raise
            return b"never"

        def lose(pending: list[Deferred[Any]], channel: Any) -> None:
            channel.connectionLost(connectionDone)

        seen = self.run_script(script, lose)
        self.assertEqual(seen[True][0], b"")
        self.assertIn("saw CancelledError", seen[True][1])


class HostileInputTests(SameBytesCase):
    def test_a_refused_head_is_not_answered_as_well(self) -> None:
        """
        A header twisted.web refuses is answered 400 and nothing more, however the bytes
        are cut into reads (twisted.web alone went on to answer the request when the rest
        came in a later read).
        """
        data = modern(1, "tools/list").replace(b"\r\nAccept", b"\r\nBad Name: v\r\nAccept")
        for split in (1, 7, 64):
            answers = self.exchange([data], split=split)
            self.assertEqual([answer[0] for answer in answers], [400])

    def test_mutated_requests_get_the_same_bytes(self) -> None:
        """
        Valid requests of both eras, broken a few ways at random (headers twice, dropped,
        folded, a framing or protocol header, another request line, a body cut or
        changed, bytes cut off, pipelined, sent in pieces): each is answered with the
        same bytes (but C{Date}) by both paths, and leaves the connection open or
        closing alike.
        """
        rng = random.Random()
        seed = rng.randrange(1 << 32)
        rng.seed(seed)
        valid = [
            modern(1, "tools/list"),
            modern(2, "tools/call", CALL),
            modern(None, "notifications/roots/list_changed"),
            INITIALIZE,
            legacy(3, "tools/list"),
            legacy(4, "tools/call", PASS_THROUGH),
        ]
        for daemon_lean in (True, False):
            self.patch(session_ids, "secrets", self.tokens[daemon_lean])
            channel, _ = self.daemons[daemon_lean].connect()
            channel.dataReceived(INITIALIZE)
        for case in range(300):
            data = _mutated(rng, rng.choice(valid))
            split = rng.choice([0, 0, 1, 7, 64])
            seen = {}
            for lean, daemon in self.daemons.items():
                self.patch(session_ids, "secrets", self.tokens[lean])
                channel, transport = daemon.connect()
                pieces = (
                    [data[i : i + split] for i in range(0, len(data), split)] if split else [data]
                )
                raised = None
                for piece in pieces:
                    try:
                        channel.dataReceived(piece)
                    except Exception as e:
                        # The reactor drops a connection whose protocol raised.
                        raised = type(e)
                        break
                seen[lean] = (
                    _DATE.sub(b"", transport.value()),
                    transport.disconnecting,
                    raised,
                )
                channel.connectionLost(connectionDone)
            self.assertEqual(seen[True], seen[False], f"seed {seed}, case {case}: {data!r}")


class ReadHeadTests(SynchronousTestCase):
    def test_lean_heads(self) -> None:
        head = read_head(post(rpc(1, "ping")))
        assert isinstance(head, Head)
        self.assertEqual(head.length, len(json.dumps(rpc(1, "ping"))))

    def test_too_little_to_tell(self) -> None:
        for data in (b"", b"POST /m", b"POST /mcp HTTP/1.1\r\nHost: x\r\n"):
            self.assertIsNone(read_head(data))

    def test_slow_heads(self) -> None:
        """Whatever is not a plain keep-alive POST /mcp with a length is twisted.web's."""
        good = post(rpc(1, "ping"))
        cases = [
            b"GET /mcp HTTP/1.1\r\nHost: x\r\n\r\n",
            b"POST /mcp?x=1 HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
            b"POST /mcp HTTP/1.0\r\nContent-Length: 0\r\n\r\n",
            b"POST /mcp/ HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
            b"\r\nPOST /mcp HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
            b"POST /mcp HTTP/1.1\r\n\r\n",
            b"POST /mcp HTTP/1.1\r\nHost: x\r\n\r\n",
            b"POST /mcp HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
            b"POST /mcp HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
            b"POST /mcp HTTP/1.1\r\nContent-Length: 5\r\ncontent-length: 5\r\n\r\n",
            b"POST /mcp HTTP/1.1\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST /mcp HTTP/1.1\r\nContent-Length: 0\r\nExpect: 100-continue\r\n\r\n",
            b"POST /mcp HTTP/1.1\r\nContent-Length: 0\r\nUpgrade: h2c\r\n\r\n",
            b"POST /mcp HTTP/1.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            b"POST /mcp HTTP/1.1\r\nContent-Length: 0\r\nX: a\r\n folded\r\n\r\n",
            b"POST /mcp HTTP/1.1\r\nContent-Length: 0\r\nBad Name: a\r\n\r\n",
            b"POST /mcp HTTP/1.1\r\nContent-Length: 0\r\nX: a\x00b\r\n\r\n",
            b"POST /mcp HTTP/1.1\r\nContent-Length: 0\r\nX: caf\xc3\xa9\r\n\r\n",
            b"POST /mcp HTTP/1.1\r\nContent-Length: 0\r\nX: a\nb\r\n\r\n",
            b"POST /mcp HTTP/1.1\r\nContent-Length: 0\r\nnocolon\r\n\r\n",
            b"POST /mcp HTTP/1.1\r\nContent-Length: 0\r\nX: a\rb\r\n\r\n",
            b"POST /mcp HTTP/1.1\r\nContent-Length: 0\r\nX: a\r\r\n\r\n",
            b"POST /mcp HTTP/1.1\r\nContent-Length: 0\r\n: a\r\n\r\n",
            b"POST /mcp HTTP/1.1\r\nContent-Length: 0\r\nX(y): a\r\n\r\n",
            b"POST /mcp HTTP/1.1\r\nContent-Length: 0\r\nX: a\x7f\r\n\r\n",
            b"POST /mcp HTTP/1.1\r\nContent-Length: 0\r\nX\t: a\r\n\r\n",
            b"POST /mcp HTTP/1.1\r\nContent-Length: 0\r\nX: " + b"a" * 9000 + b"\r\n\r\n",
            b"POST /mcp HTTP/1.1\r\n" + b"X: a\r\n" * 2000,
            b"POST /mcp HTTP/1.1\r\nContent-Length: 0\r\n"
            + b"X%d: a\r\n" * 0
            + b"".join(b"X%d: a\r\n" % i for i in range(70))
            + b"\r\n",
        ]
        self.assertIsNot(read_head(good), SLOW)
        for data in cases:
            self.assertIs(read_head(data), SLOW, data[:80])

    def test_the_last_head_again(self) -> None:
        """
        A head that begins with the same bytes as the connection's last, its blank line
        included, is that head again; any other is read afresh.
        """
        first = post(rpc(1, "ping"))
        last = read_head(first)
        assert isinstance(last, Head)
        self.assertEqual(last.raw, first[: last.size])
        self.assertIs(read_head(first, last), last)
        self.assertIs(read_head(last.raw + b"other body", last), last)
        longer = post(rpc(10, "ping"))
        again = read_head(longer, last)
        assert isinstance(again, Head)
        self.assertIsNot(again, last)
        self.assertEqual(again.length, last.length + 1)
        # The same lines, but not yet the blank one: not the same head (yet).
        self.assertIsNone(read_head(last.raw[:-2], last))
        # The same lines and more of them: another head.
        more = last.raw[:-2] + b"X-More: 1\r\n\r\n"
        found = read_head(more, last)
        assert isinstance(found, Head)
        self.assertEqual(found.by_name[b"x-more"], b"1")
        self.assertIs(read_head(last.raw[:-2] + b"Bad Name: 1\r\n\r\n", last), SLOW)
        # A head of MAX_HEAD bytes, then the same with a length one digit longer: too long.
        short = post(rpc(1, "ping"))
        pad = MAX_HEAD - (short.index(b"\r\n\r\n") + 4) - len(b"X-Pad: \r\n")
        at_most = post(rpc(1, "ping"), ("X-Pad", "p" * pad))
        full = read_head(at_most)
        assert isinstance(full, Head)
        self.assertEqual(full.size, MAX_HEAD)
        over = at_most.replace(b"Length: %d" % full.length, b"Length: 1%d" % full.length)
        self.assertIs(read_head(over), SLOW)
        self.assertIs(read_head(over, full), SLOW)

    def test_a_head_known_again_is_the_head_read(self) -> None:
        """
        Whatever follows a lean head on a connection (the same head, one with another
        length, or one broken a few ways at random, whole or cut), L{read_head} given
        the last head says what it says of the bytes alone.
        """
        rng = random.Random()
        seed = rng.randrange(1 << 32)
        rng.seed(seed)
        makers: list[Callable[[int], bytes]] = [
            lambda n: modern(n, "tools/list"),
            lambda n: modern(n, "tools/call", CALL),
            lambda n: legacy(n, "tools/call", PASS_THROUGH),
            lambda n: post(rpc(n, "ping"), ("X-Odd", " a:b ")).replace(b"Length: ", b"Length:"),
            lambda n: post(rpc(n, "ping")).replace(b"Length: ", b"Length:  "),
            lambda n: post(rpc(n, "ping")).replace(b"Length: ", b"Length: 0"),
        ]

        def described(head: object) -> object:
            if isinstance(head, Head):
                return (list(head.fields), dict(head.by_name), head.length, head.size, head.raw)
            return head

        another_length = 0
        for case in range(1000):
            make = rng.choice(makers)
            first = make(rng.randrange(10**4))
            last = read_head(first)
            assert isinstance(last, Head)
            data = rng.choice(
                [
                    first,
                    make(rng.randrange(10 ** rng.randrange(1, 12))),
                    _mutated(rng, first),
                    _mutated(rng, first)[: rng.randrange(len(first) + 1)],
                ]
            )
            found = read_head(data, last)
            before = last.before_length
            if isinstance(found, Head) and found is not last and before is not None:
                # Known again but for its length (Head.with_length).
                another_length += data.startswith(before)
            self.assertEqual(
                described(found),
                described(read_head(data)),
                f"seed {seed}, case {case}: {first!r} then {data!r}",
            )
        self.assertGreater(another_length, 100)

    def test_fields_are_the_lines(self) -> None:
        """
        Each header line is one field, named up to its first colon, its value without
        the spaces and tabs around it (colons, inner spaces and an empty value kept),
        in the order sent; up to L{MAX_HEADERS} lines are lean.
        """
        lines = [
            b"Host: 127.0.0.1:8899",
            b"X-Colons:a:b: c ",
            b"X-Spaces: \t a  b \t",
            b"Empty:",
            b"Blank:   ",
            b"Content-Length: 0",
        ]
        head = read_head(b"POST /mcp HTTP/1.1\r\n" + b"\r\n".join(lines) + b"\r\n\r\n")
        assert isinstance(head, Head)
        self.assertEqual(
            list(head.fields),
            [
                (b"Host", b"127.0.0.1:8899"),
                (b"X-Colons", b"a:b: c"),
                (b"X-Spaces", b"a  b"),
                (b"Empty", b""),
                (b"Blank", b""),
                (b"Content-Length", b"0"),
            ],
        )
        self.assertEqual(head.by_name[b"x-colons"], b"a:b: c")
        for count, lean in ((MAX_HEADERS, True), (MAX_HEADERS + 1, False)):
            data = (
                b"POST /mcp HTTP/1.1\r\nContent-Length: 0\r\n"
                + b"".join(b"X%d: a\r\n" % i for i in range(count - 1))
                + b"\r\n"
            )
            self.assertEqual(isinstance(read_head(data), Head), lean, count)


class _Kept(Request):
    """A request twisted.web's parser made, kept rather than answered."""

    kept: list[Request] = []

    def process(self) -> None:
        self.kept.append(self)


class LeanRequestTests(SynchronousTestCase):
    """The lean path's own request reads what twisted.web's parser would have given."""

    def parsed(self, data: bytes) -> Request:
        channel = HTTPChannel()
        channel.requestFactory = _Kept
        channel.makeConnection(StringTransport())
        _Kept.kept = []
        channel.dataReceived(data)
        [request] = _Kept.kept
        return request

    def test_headers_are_twisted_webs(self) -> None:
        """
        C{getHeader} (names in bytes or text, in any case, present, empty or absent),
        C{requestHeaders} and the body are what twisted.web parses from the same bytes.
        """
        data = post(
            rpc(1, "ping"),
            ("MCP-Protocol-Version", MODERN),
            ("X-Mixed-CASE", " \tspaced  value\t "),
            ("Authorization", "Bearer abc"),
            ("Empty", ""),
        )
        head = read_head(data)
        assert isinstance(head, Head)
        channel = HTTPChannel()
        channel.makeConnection(StringTransport())
        lean = LeanRequest(channel, head, data[head.size :])
        parsed = self.parsed(data)
        names: list[Any] = [
            b"host",
            b"HOST",
            b"x-mixed-case",
            b"X-Mixed-Case",
            b"authorization",
            b"empty",
            b"absent",
            b"ABSENT",
            b"mcp-protocol-version",
            b"Mcp-Protocol-Version",
            "Content-Type",
            "x-mixed-case",
            "absent",
        ]
        for name in names:
            self.assertEqual(lean.getHeader(name), parsed.getHeader(name), name)
        self.assertEqual(lean.getHeader(b"x-mixed-case"), b"spaced  value")
        self.assertEqual(
            list(lean.requestHeaders.getAllRawHeaders()),
            list(parsed.requestHeaders.getAllRawHeaders()),
        )
        # Once requestHeaders is in use, getHeader reads it, with the same answers.
        for name in names:
            self.assertEqual(lean.getHeader(name), parsed.getHeader(name), name)
        assert lean.content is not None and parsed.content is not None
        self.assertEqual(lean.content.read(), parsed.content.read())
        self.assertEqual(
            (lean.method, lean.uri, lean.path, lean.clientproto, lean.args),
            (parsed.method, parsed.uri, parsed.path, parsed.clientproto, parsed.args),
        )

    def test_the_request_is_twisted_webs(self) -> None:
        """
        A lean request is made without twisted.web's C{Request.__init__}: it has every
        attribute that gives the site's own request, with the same values, and its
        C{responseHeaders}, once asked for, hold what C{setHeader} stored, as
        twisted.web's would.  (A Twisted that sets one more attribute fails here.)
        """
        data = post(rpc(1, "ping"))
        head = read_head(data)
        assert isinstance(head, Head)
        channel = HTTPChannel()
        channel.makeConnection(StringTransport())
        lean = LeanRequest(channel, head, data[head.size :])
        own = JSONRequest(channel)
        for request in (lean, own):
            request.setHeader(b"content-type", b"application/json")
            request.setHeader("X-Text", "caf\u00e9")
            request.setHeader(b"x-folded", b"a\r\nb")
            request.setHeader(b"Content-Type", b"text/plain")
            request.setHeader(b"www-authenticate", b"Bearer")
        self.assertEqual(
            list(lean.responseHeaders.getAllRawHeaders()),
            list(own.responseHeaders.getAllRawHeaders()),
        )
        made = vars(lean)
        for name, value in vars(own).items():
            if name in ("requestHeaders", "responseHeaders"):
                continue
            self.assertIn(name, made)
            if name not in ("content",):
                self.assertEqual(made[name], value, name)


class HeadWritingTests(SynchronousTestCase):
    """The lean path's shortcuts in writing a response head give twisted.web's bytes."""

    def test_the_date_is_twisted_webs(self) -> None:
        """Formatted once a second, the Date is what datetimeToString() says at that time."""
        now = [1_700_000_000.25]
        date = HttpDate(lambda: now[0])
        for instant in (1_700_000_000.25, 1_700_000_000.999, 1_700_000_001.0, 1_700_000_061.5):
            now[0] = instant
            self.assertEqual(date(), datetimeToString(instant))
        # Back in time too (the wall clock was set back).
        now[0] = 1_600_000_000.5
        self.assertEqual(date(), datetimeToString(1_600_000_000.5))

    def test_the_head_is_twisted_webs(self) -> None:
        """LeanChannel.writeHeaders writes the bytes HTTPChannel.writeHeaders does, in one write."""
        headers = Headers()
        headers.addRawHeader(b"content-type", b"application/json")
        headers.addRawHeader(b"mcp-session-id", b"session-1")
        headers.addRawHeader(b"set-cookie", b"a=1")
        headers.addRawHeader(b"set-cookie", b"b=2")
        headers.addRawHeader(b"X-Odd", b"spaced  value")
        pairs = [(b"Content-Type", b"text/plain"), (b"X-Folded", b"a\r\nb")]
        for given in (headers, pairs, Headers()):
            daemon = Daemon(True, Path(tempfile.mkdtemp()))
            lean, lean_transport = daemon.connect()
            plain = HTTPChannel()
            plain_transport = StringTransport()
            plain.makeConnection(plain_transport)
            lean.writeHeaders(b"HTTP/1.1", b"200", b"OK", given)
            plain.writeHeaders(b"HTTP/1.1", b"200", b"OK", given)
            self.assertIsInstance(lean, LeanChannel)
            self.assertEqual(lean_transport.value(), plain_transport.value())

    def test_an_answer_is_one_write(self) -> None:
        """
        A lean answer of known length reaches the transport as one write, head and body
        together, so that it can be sent at once (L{mcpx.wire.prompt_write}).
        """
        daemon = Daemon(True, Path(tempfile.mkdtemp()))
        channel, transport = daemon.connect()
        writes: list[bytes] = []
        write = transport.write

        def recorded(data: bytes) -> None:
            writes.append(data)
            write(data)

        transport.write = recorded  # type: ignore[method-assign]
        channel.dataReceived(modern(1, "tools/list") + modern(2, "tools/call", CALL))
        answers = list(responses(transport.value()))
        self.assertEqual([status for status, _, _ in answers], [200, 200])
        self.assertEqual(len(writes), 2)
        self.assertTrue(writes[0].endswith(answers[0][2]))
        self.assertEqual(b"".join(writes), transport.value())

    def test_the_addresses_are_asked_once(self) -> None:
        """Each request gets the connection's addresses; the transport is asked once."""
        daemon = Daemon(True, Path(tempfile.mkdtemp()))
        channel, transport = daemon.connect(UNIX, UNIXAddress(None))
        asked: list[str] = []
        host, peer = transport.getHost, transport.getPeer

        def get_host() -> Any:
            asked.append("host")
            return host()

        def get_peer() -> Any:
            asked.append("peer")
            return peer()

        transport.getHost = get_host  # type: ignore[method-assign]
        transport.getPeer = get_peer  # type: ignore[method-assign]
        for _ in range(3):
            self.assertEqual(channel.getHost(), UNIX)
            self.assertEqual(channel.getPeer(), UNIXAddress(None))
        channel.dataReceived(modern(1, "tools/list") + modern(2, "tools/list"))
        self.assertEqual([status for status, _, _ in responses(transport.value())], [200, 200])
        self.assertEqual(sorted(asked), ["host", "peer"])
