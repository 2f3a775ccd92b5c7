"""
Tests for L{mcpx.server.mcp_socket} (the daemon's side of C{mcpx serve}) and for the bridge
L{mcpx.cli.serve}: the protocol on a string transport with a scripted core, and the
bridge as a real process against a real daemon.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from twisted.internet.task import Clock, deferLater
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase, TestCase

from mcpx._version import __version__
from mcpx.cli import serve as bridge_module
from mcpx.ops.events import Event
from mcpx.server import mcp_socket
from mcpx.server.mcp_socket import StdioConnection, StdioFactory, read_hello, stdio_endpoint
from mcpx.spec.revision import Revision
from mcpx.wire.errors import INTERNAL_ERROR, INVALID_REQUEST
from tests.server.fake_core import FakeCore
from tests.server.test_passthrough import GATEWAY_NAMES, names_of, passed_through
from tests.support.daemons import daemon_environ
from tests.support.processes import REPO, ChildProcess, kill_on_cleanup, reactor, spawn

HELLO = {"mcpx": "serve", "pid": 4242, "cwd": "/home/me/project", "version": __version__}

#: The byte-for-byte script's big text: 300 KB of non-ASCII, more than a pipe holds.
BIG = "\u00e9\u2713 " * 100_000


def _request(request_id: int | str, method: str, params: Any = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def byte_script_requests(revision: str) -> bytes:
    """
    What the host sends in the byte-for-byte script (after the hello), on C{revision}:
    requests answered at once, with an error, later, and one that asks the host.
    """
    messages: list[Any] = [
        _request(1, "initialize", {"protocolVersion": revision}),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        _request(2, "echo", {"text": "h\u00e9llo \U0001f600", "n": [1, 2.5, None]}),
        _request("s-3", "echo", {"text": BIG}),
        _request(4, "fail", {"code": -32602, "message": "bad \u00e9"}),
        _request(5, "nosuch"),
        _request(
            6,
            "notify",
            {"method": "notifications/progress", "params": {"progressToken": "t", "progress": 1}},
        ),
        _request(7, "ask", {"message": "sure?"}),
        _request(8, "wait"),
    ]
    return b"".join(json.dumps(message).encode("utf-8") + b"\n" for message in messages)


#: The host's answer to mcpx's question in the byte-for-byte script.
BYTE_SCRIPT_ANSWER = b'{"jsonrpc": "2.0", "id": -1, "result": {"action": "accept"}}\n'


def byte_script_written(revision: str) -> bytes:
    """What the host reads in the byte-for-byte script, to the byte."""
    expected = [
        b'{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"'
        + revision.encode()
        + b'","capabilities":{}}}',
        '{"jsonrpc":"2.0","id":2,"result":{"text":"h\u00e9llo \U0001f600",'
        '"n":[1,2.5,null]}}'.encode(),
        b'{"jsonrpc":"2.0","id":"s-3","result":{"text":"' + BIG.encode() + b'"}}',
        '{"jsonrpc":"2.0","id":4,"error":{"code":-32602,"message":"bad \u00e9"}}'.encode(),
        b'{"jsonrpc":"2.0","id":5,"error":{"code":-32601,"message":"Method not found: nosuch"}}',
        b'{"jsonrpc":"2.0","method":"notifications/progress",'
        b'"params":{"progressToken":"t","progress":1}}',
        b'{"jsonrpc":"2.0","id":-1,"method":"elicitation/create","params":{"message":"sure?"}}',
        b'{"jsonrpc":"2.0","id":7,"result":{"answer":{"action":"accept"}}}',
        '{"jsonrpc":"2.0","id":6,"result":{"done":"\u00e9"}}'.encode(),
        b'{"jsonrpc":"2.0","id":8,"result":{"content":[{"type":"text","text":"last"}]}}',
    ]
    return b"".join(line + b"\n" for line in expected)


class StdioConnectionTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.core = FakeCore()
        self.factory = StdioFactory(self.core, self.clock, drain=5.0, max_length=1000)
        self.protocol: StdioConnection = self.factory.buildProtocol(None)
        self.transport = StringTransport()
        self.protocol.makeConnection(self.transport)

    def send(self, *messages: Any) -> None:
        self.protocol.dataReceived(
            b"".join(json.dumps(message).encode("utf-8") + b"\n" for message in messages)
        )

    def received(self) -> list[Any]:
        """What the daemon wrote since the last call, one decoded line each."""
        data = self.transport.value()
        self.transport.clear()
        self.assertTrue(data == b"" or data.endswith(b"\n"), "every message ends its line")
        return [json.loads(line) for line in data.splitlines()]

    def start(self, **hello: Any) -> None:
        self.send({**HELLO, **hello})

    def request(self, request_id: int, method: str, params: Any = None) -> dict[str, Any]:
        return _request(request_id, method, params)

    def test_hello_names_the_host_process(self) -> None:
        """
        The bridge's hello opens a stdio connection whose identity is the host process,
        which can be pushed to; the hello itself is not answered.
        """
        self.start()
        [conn] = self.core.opened
        self.assertEqual((conn.transport, conn.identity), ("stdio", "stdio:4242"))
        self.assertTrue(conn.can_push)
        self.assertEqual(self.received(), [])
        self.assertEqual(self.protocol.hello, HELLO)

    def test_client_without_hello_is_served(self) -> None:
        """A client speaking MCP straight to the socket gets an anonymous identity."""
        self.send(self.request(1, "echo", {"a": 1}))
        [conn] = self.core.opened
        self.assertEqual(conn.identity, "stdio:socket-1")
        self.assertEqual(self.received(), [{"jsonrpc": "2.0", "id": 1, "result": {"a": 1}}])

    def test_read_hello(self) -> None:
        """Only a JSON object marked as mcpx serve's hello is one."""
        self.assertEqual(read_hello(json.dumps(HELLO).encode()), HELLO)
        self.assertIsNone(read_hello(b'{"jsonrpc":"2.0","method":"x"}'))
        self.assertIsNone(read_hello(b'{"mcpx": "other"}'))
        self.assertIsNone(read_hello(b'["mcpx"]'))
        self.assertIsNone(read_hello(b'{"mcpx": "serve"'))

    def test_requests_run_concurrently(self) -> None:
        """A slow request does not hold up the next: answers go out as they finish."""
        self.start()
        self.send(self.request(1, "wait"), self.request(2, "wait"), self.request(3, "echo"))
        self.assertEqual([m["id"] for m in self.received()], [3])
        self.core.release(2, {"second": True})
        self.assertEqual(self.received(), [{"jsonrpc": "2.0", "id": 2, "result": {"second": True}}])
        self.core.release(1, {})
        self.assertEqual([m["id"] for m in self.received()], [1])

    def test_errors_are_answered(self) -> None:
        """An RpcError is answered as it is; anything else as -32603 without details."""
        self.start()
        self.send(self.request(1, "fail", {"code": -32602, "message": "bad"}))
        self.send(self.request(2, "crash"))
        first, second = self.received()
        self.assertEqual(first["error"], {"code": -32602, "message": "bad"})
        self.assertEqual(second["error"]["code"], INTERNAL_ERROR)
        self.assertNotIn("a bug", json.dumps(second))
        self.flushLoggedErrors(ValueError)

    def test_cancelled_notification_cancels_the_request(self) -> None:
        """notifications/cancelled stops the named request's handling and nothing answers it."""
        self.start()
        self.send(self.request(7, "wait"))
        self.send(
            {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": 7, "reason": "user"},
            }
        )
        self.assertEqual(self.core.cancelled, [7])
        self.assertEqual(self.received(), [])
        # Cancellation is the transport's business: the core never sees the notification.
        self.assertEqual(self.core.notifications, [])

    def test_notifications_reach_the_core(self) -> None:
        """Other notifications are handed to the core with the connection."""
        self.start()
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        [(conn, notification)] = self.core.notifications
        self.assertIs(conn, self.core.opened[0])
        self.assertEqual(notification.method, "notifications/initialized")

    def test_server_requests_have_negative_ids(self) -> None:
        """mcpx's own requests use negative ids, and the client's answer reaches the asker."""
        self.start()
        self.send(self.request(1, "ask", {"message": "sure?"}))
        [asked] = self.received()
        self.assertEqual(asked["method"], "elicitation/create")
        self.assertEqual(asked["params"], {"message": "sure?"})
        self.assertEqual(asked["id"], -1)
        self.send({"jsonrpc": "2.0", "id": -1, "result": {"action": "accept"}})
        self.assertEqual(
            self.received(),
            [{"jsonrpc": "2.0", "id": 1, "result": {"answer": {"action": "accept"}}}],
        )

    def test_push_sends_a_notification(self) -> None:
        """The connection's push writes a notification line."""
        self.start()
        conn = self.core.opened[0]
        assert conn.push is not None
        conn.push("notifications/resources/updated", {"uri": "mcpx://a/b"})
        self.assertEqual(
            self.received(),
            [
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/resources/updated",
                    "params": {"uri": "mcpx://a/b"},
                }
            ],
        )

    def test_lines_written_byte_for_byte(self) -> None:
        """
        On every revision a host can agree on, what the host reads is exactly these
        bytes, one line each: answers (integer and string ids, non-ASCII and a 300 KB
        answer), errors, a notification pushed while a request runs, mcpx's own
        request, and after the host closes its input the answers still running, each
        once, before the connection closes.
        """
        for revision in ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"):
            with self.subTest(revision=revision):
                self.core = FakeCore()
                # Room for the big answer's request (setUp's limit is 1000 bytes).
                self.factory = StdioFactory(self.core, self.clock, drain=5.0)
                self.protocol = self.factory.buildProtocol(None)
                self.transport = StringTransport()
                self.protocol.makeConnection(self.transport)
                self.start()
                self.protocol.dataReceived(byte_script_requests(revision))
                self.protocol.dataReceived(BYTE_SCRIPT_ANSWER)
                self.core.release(6, {"done": "\u00e9"})
                self.protocol.readConnectionLost()
                self.assertFalse(self.transport.disconnecting, "request 8 is still running")
                self.core.release(8, {"content": [{"type": "text", "text": "last"}]})
                self.clock.advance(0)
                self.assertTrue(self.transport.disconnecting)
                self.assertEqual(self.transport.value(), byte_script_written(revision))

    def test_eof_with_nothing_running_closes(self) -> None:
        """When the host closes stdin and nothing runs, the connection closes at once."""
        self.start()
        self.protocol.readConnectionLost()
        self.assertTrue(self.transport.disconnecting)

    def test_eof_drains_running_requests(self) -> None:
        """At EOF a running request may still answer; the connection closes after it."""
        self.start()
        self.send(self.request(1, "wait"), self.request(2, "wait"))
        self.protocol.readConnectionLost()
        self.assertFalse(self.transport.disconnecting)
        self.clock.advance(2)
        self.core.release(1, {"done": 1})
        self.clock.advance(0)
        self.assertFalse(self.transport.disconnecting, "request 2 is still running")
        self.core.release(2, {"done": 2})
        self.clock.advance(0)
        self.assertTrue(self.transport.disconnecting)
        self.assertEqual([m["id"] for m in self.received()], [1, 2])
        self.assertEqual(self.core.cancelled, [])

    def test_drain_ends_after_stdio_drain(self) -> None:
        """A request still running transport.stdioDrain after EOF is cancelled."""
        self.start()
        self.send(self.request(1, "wait"))
        self.protocol.readConnectionLost()
        self.clock.advance(4.9)
        self.assertFalse(self.transport.disconnecting)
        self.clock.advance(0.1)
        self.assertTrue(self.transport.disconnecting)
        self.protocol.connectionLost()
        self.assertEqual(self.core.cancelled, [1])
        self.assertEqual(self.core.closed, self.core.opened)
        self.assertEqual(self.received(), [])
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_ask_after_eof_fails(self) -> None:
        """After EOF mcpx asks the client nothing: no answer could come back."""
        self.start()
        self.send(self.request(1, "wait"))
        self.protocol.readConnectionLost()
        conn = self.core.opened[0]
        assert conn.ask is not None
        self.failureResultOf(conn.ask("roots/list", {}))
        self.assertEqual(self.received(), [])

    def test_connection_lost_cancels_everything(self) -> None:
        """A bridge that vanishes cancels its requests and closes its connection."""
        self.start()
        self.send(self.request(1, "wait"))
        self.protocol.connectionLost()
        self.assertEqual(self.core.cancelled, [1])
        self.assertTrue(self.core.opened[0].closed)

    def test_oversized_line(self) -> None:
        """A line over the limit is answered with -32600 and a null id; the next is served."""
        self.start()
        self.protocol.dataReceived(b'{"pad": "' + b"x" * 2000 + b'"}\n')
        self.send(self.request(2, "echo", {}))
        error, answer = self.received()
        self.assertIsNone(error["id"])
        self.assertEqual(error["error"]["code"], INVALID_REQUEST)
        self.assertEqual(answer["id"], 2)

    def test_batches_only_on_2025_03_26(self) -> None:
        """A batch is refused until the connection agrees on 2025-03-26, then answered."""
        self.start()
        batch = [self.request(1, "echo", {"n": 1}), self.request(2, "echo", {"n": 2})]
        self.send(batch)
        [refusal] = self.received()
        self.assertEqual(refusal["error"]["code"], INVALID_REQUEST)
        self.send(self.request(3, "initialize", {"protocolVersion": "2025-03-26"}))
        self.assertEqual(self.core.opened[0].revision, Revision.V2025_03_26)
        self.received()
        self.send(batch)
        [answers] = self.received()
        self.assertEqual(sorted(a["id"] for a in answers), [1, 2])

    def test_batches_refused_on_later_revisions(self) -> None:
        """A connection on 2025-06-18 reads a batch as an invalid request."""
        self.start()
        self.send(self.request(1, "initialize", {"protocolVersion": "2025-06-18"}))
        self.received()
        self.send([self.request(2, "echo", {})])
        [refusal] = self.received()
        self.assertEqual(refusal["error"]["code"], INVALID_REQUEST)


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


class HandedPipesTests(TestCase):
    """
    A hello that hands the host's stdin and stdout over (what C{mcpx serve} sends when
    they are pipes): the daemon reads and writes them itself, on the real reactor, and
    the socket only says how the session ended.
    """

    timeout = 60

    def setUp(self) -> None:
        self.clock = Clock()
        self.core = FakeCore()
        self.factory = StdioFactory(self.core, self.clock, drain=5.0, pipes_reactor=reactor)
        self.protocol: StdioConnection = self.factory.buildProtocol(None)
        self.socket = StringTransport()
        self.protocol.makeConnection(self.socket)
        self.host_out = b""

    def pipes(self) -> tuple[int, int, int, int]:
        """Two pipes: the host's stdin (read end handed over) and stdout (write end)."""
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        os.set_blocking(stdout_r, False)
        os.set_blocking(stdin_w, False)
        # The host's ends, closed at the end unless the test closed them (close_host):
        # a number closed twice may be another's by then.
        self.host_ends = {stdin_w, stdout_r}
        self.addCleanup(self.close_host_ends, self.host_ends)
        return stdin_r, stdin_w, stdout_r, stdout_w

    def close_host_ends(self, ends: set[int]) -> None:
        for fd in ends:
            os.close(fd)

    def close_host(self, fd: int) -> None:
        self.host_ends.remove(fd)
        os.close(fd)

    def hand(self, *descriptors: int, **hello: Any) -> None:
        """The bridge's handing hello, arriving with C{descriptors}."""
        for fd in descriptors:
            self.protocol.fileDescriptorReceived(fd)
        line = json.dumps({**HELLO, "mcpx": mcp_socket.HELLO_HANDING, **hello}).encode()
        self.protocol.dataReceived(line + b"\n")

    async def write_host(self, fd: int, data: bytes) -> None:
        """The host writes C{data} on its stdin, as fast as the daemon reads it."""
        for _ in range(3000):
            with contextlib.suppress(BlockingIOError):
                data = data[os.write(fd, data) :]
            if not data:
                return
            await deferLater(reactor, 0.01, lambda: None)
        self.fail("the daemon did not read the host's stdin")

    async def read_host(self, fd: int, until: bytes | None = None) -> bytes:
        """
        What the daemon wrote on the host's stdout: until C{until} has been read, or
        (C{None}) until the daemon closed it.
        """
        for _ in range(3000):
            try:
                data = os.read(fd, 1 << 20)
            except BlockingIOError:
                data = None
            if data == b"" and until is None:
                return self.host_out
            if data:
                self.host_out += data
            if until is not None and until in self.host_out:
                return self.host_out
            await deferLater(reactor, 0.01, lambda: None)
        self.fail(f"the daemon did not write {until!r}; so far {self.host_out[-300:]!r}")

    async def settled(self, condition: Any) -> None:
        for _ in range(3000):
            if condition():
                return
            await deferLater(reactor, 0.01, lambda: None)
        self.fail("the condition never held")

    async def test_handed_pipes_written_byte_for_byte(self) -> None:
        """
        On every revision a host can agree on, the host reads from its handed stdout
        exactly the bytes the socket carries (the byte-for-byte script: integer and
        string ids, non-ASCII, an answer larger than a pipe holds, errors, a
        notification, mcpx's own request, answers after the host's input ended); then
        the daemon closes its stdout, and tells the bridge the session ended as asked.
        """
        for revision in ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"):
            self.setUp()
            stdin_r, stdin_w, stdout_r, stdout_w = self.pipes()
            self.hand(stdin_r, stdout_w)
            self.assertEqual(self.socket.value(), mcp_socket.PIPES_TAKEN)
            [conn] = self.core.opened
            self.assertEqual(conn.identity, "stdio:4242")
            await self.write_host(stdin_w, byte_script_requests(revision))
            await self.read_host(stdout_r, b'"elicitation/create"')
            await self.write_host(stdin_w, BYTE_SCRIPT_ANSWER)
            await self.read_host(stdout_r, b'"answer"')
            self.core.release(6, {"done": "\u00e9"})
            self.close_host(stdin_w)
            await self.settled(lambda: self.protocol._draining)
            self.assertFalse(self.socket.disconnecting, "request 8 is still running")
            self.core.release(8, {"content": [{"type": "text", "text": "last"}]})
            written = await self.read_host(stdout_r)
            self.assertEqual(written, byte_script_written(revision))
            await self.settled(lambda: self.socket.disconnecting)
            self.assertEqual(self.socket.value(), mcp_socket.PIPES_TAKEN + mcp_socket.PIPES_ENDED)
            self.assertTrue(_closed(stdin_r) and _closed(stdout_w))
            self.protocol.connectionLost()
            self.assertEqual(self.core.closed, self.core.opened)

    async def test_bridge_gone_closes_the_pipes(self) -> None:
        """
        The bridge going away (the host stopped it) cancels what runs and closes the
        host's pipes; nothing more is said on the socket.
        """
        stdin_r, stdin_w, stdout_r, stdout_w = self.pipes()
        self.hand(stdin_r, stdout_w)
        await self.write_host(stdin_w, json.dumps(_request(1, "wait")).encode() + b"\n")
        await self.settled(lambda: 1 in self.core.waiting)
        self.protocol.readConnectionLost()
        self.protocol.connectionLost()
        self.assertEqual(self.core.cancelled, [1])
        self.assertEqual(await self.read_host(stdout_r), b"")
        await self.settled(lambda: _closed(stdin_r) and _closed(stdout_w))
        self.assertEqual(self.socket.value(), mcp_socket.PIPES_TAKEN)

    async def test_host_closing_stdout_is_not_an_end(self) -> None:
        """
        A host that closes its stdout while its input is open ends the session, and the
        bridge is not told it ended as asked (it exits 1).
        """
        stdin_r, _stdin_w, stdout_r, stdout_w = self.pipes()
        self.hand(stdin_r, stdout_w)
        self.close_host(stdout_r)
        await self.settled(lambda: self.socket.disconnecting)
        self.assertEqual(self.socket.value(), mcp_socket.PIPES_TAKEN)
        self.assertTrue(_closed(stdin_r) and _closed(stdout_w))

    def test_unusable_descriptors_are_refused(self) -> None:
        """
        A handing hello with one descriptor, or one that is not a pipe or a
        socket, or to a daemon that takes none: the descriptors are closed and so is the
        connection, unanswered (the bridge connects again and copies).
        """
        stdin_r, _, _, stdout_w = self.pipes()
        regular = os.open(os.devnull, os.O_RDWR)
        cases = {
            "one": [os.dup(stdin_r)],
            "not a pipe": [os.dup(stdin_r), regular],
            "none taken": [os.dup(stdin_r), os.dup(stdout_w)],
        }
        for case, descriptors in cases.items():
            with self.subTest(case=case):
                self.core = FakeCore()
                self.factory = StdioFactory(
                    self.core,
                    self.clock,
                    pipes_reactor=None if case == "none taken" else reactor,
                )
                self.protocol = self.factory.buildProtocol(None)
                self.socket = StringTransport()
                self.protocol.makeConnection(self.socket)
                self.hand(*descriptors)
                self.assertEqual(self.socket.value(), b"")
                self.assertTrue(self.socket.disconnecting)
                self.assertEqual(self.core.opened, [])
                self.assertTrue(all(_closed(fd) for fd in descriptors))
                self.protocol.connectionLost()
        os.close(stdin_r)
        os.close(stdout_w)

    def test_descriptors_with_a_plain_hello_are_closed(self) -> None:
        """
        Descriptors beyond two, those that come with a plain hello, and those after the
        first line are closed, and the connection is served on the socket.
        """
        stdin_r, _, _, stdout_w = self.pipes()
        early = [os.dup(stdin_r), os.dup(stdout_w), os.dup(stdout_w)]
        for fd in early:
            self.protocol.fileDescriptorReceived(fd)
        self.assertEqual([_closed(fd) for fd in early], [False, False, True])
        self.protocol.dataReceived(json.dumps(HELLO).encode() + b"\n")
        self.assertTrue(all(_closed(fd) for fd in early))
        late = os.dup(stdout_w)
        self.protocol.fileDescriptorReceived(late)
        self.assertTrue(_closed(late))
        self.protocol.dataReceived(json.dumps(_request(1, "echo", {"a": 1})).encode() + b"\n")
        self.assertEqual(self.socket.value(), b'{"jsonrpc":"2.0","id":1,"result":{"a":1}}\n')
        self.assertFalse(self.protocol.wants_descriptors)
        os.close(stdin_r)
        os.close(stdout_w)


class HelloPassThroughTests(SynchronousTestCase):
    """A hello naming servers to pass through, served by the real McpServer."""

    def connect(
        self, default: tuple[str, ...] = (), **hello: Any
    ) -> tuple[StdioConnection, StringTransport]:
        """A connection, after C{hello}, to a server passing C{default} through."""
        self.harness, _ = passed_through(default)
        protocol = StdioFactory(self.harness.server, self.harness.clock).buildProtocol(None)
        transport = StringTransport()
        protocol.makeConnection(transport)
        protocol.dataReceived(json.dumps({**HELLO, **hello}).encode() + b"\n")
        return protocol, transport

    def tool_names(self, protocol: StdioConnection, transport: StringTransport) -> list[str]:
        transport.clear()
        request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        protocol.dataReceived(json.dumps(request).encode() + b"\n")
        self.harness.clock.advance(0)
        [answer] = [json.loads(line) for line in transport.value().splitlines()]
        return names_of(answer["result"]["tools"])

    def test_hello_passthrough_leads_with_the_upstreams_tools(self) -> None:
        """
        A hello with passthrough [alpha] makes that connection's tools/list start with
        alpha's own tools (not its mcpx_servers: the name is the gateway's), then the
        gateway's; a connection whose hello names none gets the gateway's.
        """
        protocol, transport = self.connect(passthrough=["alpha"])
        assert protocol.conn is not None
        self.assertEqual(protocol.conn.passthrough, ("alpha",))
        names = self.tool_names(protocol, transport)
        self.assertEqual(names, ["echo", "rich", *GATEWAY_NAMES])
        self.assertNotIn("add", names, "beta is not passed through")
        plain, plain_transport = self.connect()
        assert plain.conn is not None
        self.assertIsNone(plain.conn.passthrough)
        self.assertEqual(self.tool_names(plain, plain_transport), GATEWAY_NAMES)

    def test_unconfigured_names_are_ignored_with_a_warning(self) -> None:
        """
        A name the daemon does not configure is left out and warned about by name; the
        configured ones are still passed through, and a list of unknown names alone
        passes nothing through.
        """
        protocol, transport = self.connect(passthrough=["ghost", "alpha"])
        warned: list[Event] = []
        self.harness.host.events.subscribe(warned.append, kinds=["server.log"])
        names = self.tool_names(protocol, transport)
        self.assertEqual(
            [event.data for event in warned],
            [
                {
                    "level": "warning",
                    "data": "pass-through asked for by a connection ignores servers not "
                    "configured: 'ghost'",
                }
            ],
        )
        self.assertEqual(names[0], "echo")
        ghost_only, ghost_transport = self.connect(passthrough=["ghost"])
        self.assertEqual(self.tool_names(ghost_only, ghost_transport), GATEWAY_NAMES)

    def test_empty_passthrough_passes_nothing_through(self) -> None:
        """
        C{mcpx serve --passthrough ""} sends an empty list: that connection gets the
        gateway's tools only, although the daemon passes alpha through by default.
        """
        default, default_transport = self.connect(("alpha",))
        self.assertEqual(self.tool_names(default, default_transport)[0], "echo")
        empty, empty_transport = self.connect(("alpha",), passthrough=[])
        assert empty.conn is not None
        self.assertEqual(empty.conn.passthrough, ())
        self.assertEqual(self.tool_names(empty, empty_transport), GATEWAY_NAMES)

    def test_malformed_passthrough_is_ignored(self) -> None:
        """A passthrough that is not a list of names leaves the daemon's default."""
        self.assertIsNone(mcp_socket.hello_passthrough({**HELLO, "passthrough": "alpha"}))
        self.assertEqual(mcp_socket.hello_passthrough({**HELLO, "passthrough": []}), ())
        self.assertEqual(
            mcp_socket.hello_passthrough({**HELLO, "passthrough": ["a", 3, "", "b"]}), ("a", "b")
        )
        self.assertIsNone(mcp_socket.hello_passthrough(None))


class SocketTests(SynchronousTestCase):
    def test_same_socket_name(self) -> None:
        """The bridge and the daemon agree on the MCP socket's name."""
        self.assertEqual(bridge_module.MCP_SOCKET_NAME, mcp_socket.SOCKET_NAME)

    def test_endpoint_is_private(self) -> None:
        """The MCP socket is owner-only and locked against a second daemon."""
        endpoint = stdio_endpoint(Path("/tmp/state"))
        self.assertTrue(endpoint.startswith("unix:/tmp/state/mcpx-mcp.sock:"))
        self.assertIn(":mode=600", endpoint)
        self.assertIn(":lockfile=1", endpoint)

    def test_bridge_imports_no_twisted(self) -> None:
        """mcpx serve starts fast: the bridge imports no Twisted, treq, Klein or jsonschema."""
        heavy = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys, mcpx.cli.main, mcpx.cli.serve; "
                "print(sorted({m.split('.')[0] for m in sys.modules} & "
                "{'twisted', 'treq', 'klein', 'jsonschema'}))",
            ],
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO,
        ).stdout.strip()
        self.assertEqual(heavy, "[]")

    def test_hello_line(self) -> None:
        """The hello names the bridge's parent process (the host) and the version."""
        line = bridge_module.hello_line()
        self.assertTrue(line.endswith(b"\n"))
        hello = json.loads(line)
        self.assertEqual(hello["pid"], os.getppid())
        self.assertEqual(hello["version"], __version__)
        self.assertEqual(read_hello(line.rstrip(b"\n")), hello)
        self.assertNotIn("passthrough", hello)

    def test_hello_line_passthrough(self) -> None:
        """--passthrough a,b puts the names, trimmed and in order, in the hello."""
        names = bridge_module.split_names(" demo, ,tasks ")
        self.assertEqual(names, ["demo", "tasks"])
        hello = json.loads(bridge_module.hello_line(names))
        self.assertEqual(hello["passthrough"], ["demo", "tasks"])
        self.assertEqual(mcp_socket.hello_passthrough(hello), ("demo", "tasks"))

    def test_hello_line_empty_passthrough(self) -> None:
        """
        C{--passthrough ""} (or C{MCPX_MCP_PASSTHROUGH=""}) is an empty list, sent as
        such; no option at all leaves the daemon's own list in force.
        """
        self.assertIsNone(bridge_module.split_names(None))
        for given in ("", " , "):
            names = bridge_module.split_names(given)
            self.assertEqual(names, [])
            hello = json.loads(bridge_module.hello_line(names))
            self.assertEqual(hello["passthrough"], [])
            self.assertEqual(mcp_socket.hello_passthrough(hello), ())

    def test_mcp_url(self) -> None:
        """--transport http points at /mcp on each TCP endpoint of daemon.listen."""
        self.assertEqual(
            bridge_module.mcp_url("tcp:8899:interface=127.0.0.1"), "http://127.0.0.1:8899/mcp"
        )
        self.assertEqual(bridge_module.mcp_url("tcp:port=80"), "http://127.0.0.1:80/mcp")
        self.assertEqual(
            bridge_module.mcp_url("tcp6:9000:interface=\\:\\:1"), "http://[::1]:9000/mcp"
        )
        self.assertIsNone(bridge_module.mcp_url("unix:/tmp/x.sock"))
        text = bridge_module.http_instead(["tcp:8899:interface=127.0.0.1"], Path("/s"))
        self.assertIn("http://127.0.0.1:8899/mcp", text)
        self.assertIn("/s/mcpx.sock", text)


#: What a daemon older than the hand-over answers its hello: not a hello to it, so a bad
#: message (read from one, mcpx 195f169).
OLDER_DAEMON_ANSWER = (
    b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,'
    b'"message":"Invalid Request: \\"jsonrpc\\" must be \\"2.0\\""}}\n'
)


class HandOverTests(SynchronousTestCase):
    """The bridge's side of the hand-over, against daemons that do not take the pipes."""

    def test_same_words(self) -> None:
        """The bridge and the daemon spell the handing hello and the two answers alike."""
        self.assertEqual(bridge_module.HELLO_HANDING, mcp_socket.HELLO_HANDING)
        self.assertEqual(bridge_module.PIPES_TAKEN, mcp_socket.PIPES_TAKEN)
        self.assertEqual(bridge_module.PIPES_ENDED, mcp_socket.PIPES_ENDED)

    def test_older_daemon_is_copied_to(self) -> None:
        """
        A daemon that answers the handing hello as a bad message (as one older than the
        hand-over does), or closes the connection (one that cannot take them): the
        bridge connects again, says the plain hello, and copies both ways, byte for
        byte, exiting 0 when the host's input ended.
        """
        request = '{"jsonrpc":"2.0","id":1,"method":"ping","params":{"t":"\u00e9"}}\n'.encode()
        answer = '{"jsonrpc":"2.0","id":1,"result":{"t":"\u00e9"}}\n'.encode()
        for reply in (OLDER_DAEMON_ANSWER, b""):
            with self.subTest(reply=reply):
                state = Path(tempfile.mkdtemp(prefix="mcpx-state-"))
                self.addCleanup(shutil.rmtree, state, True)
                listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                listener.bind(str(bridge_module.mcp_socket_path(state)))
                listener.listen(2)
                stdin_r, stdin_w = os.pipe()
                stdout_r, stdout_w = os.pipe()
                seen: dict[str, Any] = {}

                def daemon(
                    listener: socket.socket = listener,
                    reply: bytes = reply,
                    seen: dict[str, Any] = seen,
                ) -> None:
                    first, _ = listener.accept()
                    line, descriptors, _, _ = socket.recv_fds(first, 4096, 4)
                    seen["handing"] = (json.loads(line), len(descriptors))
                    for fd in descriptors:
                        os.close(fd)
                    first.sendall(reply)
                    first.close()
                    second, _ = listener.accept()
                    received = b""
                    while data := second.recv(4096):
                        received += data
                    seen["copied"] = received
                    second.sendall(answer)
                    second.close()
                    listener.close()

                thread = threading.Thread(target=daemon)
                thread.start()
                os.write(stdin_w, request)
                os.close(stdin_w)
                status = bridge_module.serve_host(
                    state, stdin_r, stdout_w, passthrough=None, start=False, fail=self.fail
                )
                thread.join(30)
                os.close(stdout_w)
                with os.fdopen(stdout_r, "rb") as out:
                    written = out.read()
                os.close(stdin_r)
                self.assertEqual(status, 0)
                hello, handed = seen["handing"]
                self.assertEqual((hello["mcpx"], handed), ("serve-pipes", 2))
                self.assertEqual(seen["copied"], bridge_module.hello_line() + request)
                self.assertEqual(written, answer)


class BridgeProcessTests(TestCase):
    """C{mcpx serve} as a host runs it, against a real daemon."""

    timeout = 60

    def setUp(self) -> None:
        # Short paths: a unix socket path must fit in 108 bytes.
        self.state_dir = tempfile.mkdtemp(prefix="mcpx-state-")
        self.config_home = tempfile.mkdtemp(prefix="mcpx-cfg-")
        self.env = daemon_environ(self.state_dir, self.config_home)

    def start(self, argv: list[str]) -> ChildProcess:
        child = spawn(argv, env=self.env)
        self.addCleanup(kill_on_cleanup, child)
        return child

    async def daemon(self) -> ChildProcess:
        daemon = self.start([sys.executable, "-m", "mcpx", "daemon", "--daemon-listen", ""])
        await daemon.wait_for(rb"mcpx-mcp\.sock")

        async def stop() -> None:
            daemon.signal("TERM")
            await daemon.ended()

        self.addCleanup(stop)
        return daemon

    def lines(self, data: str) -> list[Any]:
        return [json.loads(line) for line in data.splitlines()]

    async def test_initialize_and_list_tools(self) -> None:
        """
        Through mcpx serve a host initializes and lists mcpx's tools; stdout holds
        nothing but JSON lines, and the bridge exits 0 once stdin ends.  Its stdin and
        stdout are pipes, handed to the daemon.
        """
        daemon = await self.daemon()
        bridge = self.start([sys.executable, "-m", "mcpx", "serve"])
        await daemon.wait_for(rb"its stdin and stdout handed over")
        assert bridge.transport is not None
        messages = [
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "test-host", "version": "1"},
                },
            },
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        ]
        for message in messages:
            bridge.transport.write(json.dumps(message).encode() + b"\n")
        await bridge.wait_for(rb'"id":2', fd=1)
        bridge.transport.closeStdin()
        self.assertEqual(await bridge.ended(), 0)
        stdout = bridge.text(1)
        self.assertTrue(stdout.endswith("\n"))
        answers = self.lines(stdout)
        self.assertEqual([a["id"] for a in answers], [1, 2])
        self.assertEqual(answers[0]["result"]["protocolVersion"], "2025-06-18")
        names = [tool["name"] for tool in answers[1]["result"]["tools"]]
        self.assertIn("mcpx_call", names)
        self.assertEqual(bridge.text(2), "")

    async def test_copies_when_stdin_is_a_file(self) -> None:
        """
        A bridge whose stdin is not a pipe (a file here; a terminal alike) keeps it and
        copies: the daemon answers every line, byte for byte as through handed pipes,
        and the bridge exits 0 at the file's end.
        """
        daemon = await self.daemon()
        requests = Path(self.state_dir) / "requests"
        requests.write_bytes(
            b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":'
            b'{"protocolVersion":"2025-11-25","capabilities":{}}}\n'
            b'{"jsonrpc":"2.0","id":"p\xc3\xa9","method":"ping"}\n'
        )
        with requests.open("rb") as stdin:
            bridge = ChildProcess(reactor)
            reactor.spawnProcess(
                bridge,
                sys.executable,
                [sys.executable, "-m", "mcpx", "serve"],
                env=self.env,
                childFDs={0: stdin.fileno(), 1: "r", 2: "r"},
            )
        self.addCleanup(kill_on_cleanup, bridge)
        self.assertEqual(await bridge.ended(), 0)
        answers = self.lines(bridge.text(1))
        self.assertEqual([a["id"] for a in answers], [1, "p\u00e9"])
        self.assertTrue(bridge.text(1).endswith('"id":"p\u00e9","result":{}}\n'))
        self.assertNotIn("handed over", daemon.text())

    async def test_eof_waits_for_answers(self) -> None:
        """A request sent just before stdin closes is still answered before exit."""
        await self.daemon()
        bridge = self.start([sys.executable, "-m", "mcpx", "serve"])
        assert bridge.transport is not None
        bridge.transport.write(
            b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":'
            b'{"protocolVersion":"2025-11-25","capabilities":{}}}\n'
            b'{"jsonrpc":"2.0","id":2,"method":"ping"}\n'
        )
        bridge.transport.closeStdin()
        self.assertEqual(await bridge.ended(), 0)
        self.assertEqual([a["id"] for a in self.lines(bridge.text(1))], [1, 2])

    async def test_daemon_stopping_under_the_host_is_reported(self) -> None:
        """
        When the daemon stops while the host is still connected, mcpx serve says so on
        stderr and exits 1, so the host sees a failed server rather than a clean end.
        """
        daemon = await self.daemon()
        bridge = self.start([sys.executable, "-m", "mcpx", "serve"])
        assert bridge.transport is not None
        bridge.transport.write(b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n')
        await bridge.wait_for(rb'"id":1', fd=1)
        daemon.signal("TERM")
        self.assertEqual(await bridge.ended(), 1)
        self.assertIn("the daemon ended this connection", bridge.text(2))

    async def test_starts_a_daemon_when_none_runs(self) -> None:
        """mcpx serve with no daemon running starts one and serves through it."""
        # The daemon it starts inherits this: no TCP port to collide with.
        self.env["MCPX_DAEMON_LISTEN"] = ""
        bridge = self.start([sys.executable, "-m", "mcpx", "serve"])
        assert bridge.transport is not None
        started = await bridge.wait_for(rb"\(pid \d+\)")
        pid = int(started.strip(b"(pid )"))

        async def stop_daemon() -> None:
            # Not this test's child (the bridge started it in a session of its own):
            # signal it, then watch for it to be gone.
            os.kill(pid, signal.SIGTERM)
            for _ in range(100):
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    return
                await deferLater(reactor, 0.1)
            os.kill(pid, signal.SIGKILL)

        self.addCleanup(stop_daemon)
        bridge.transport.write(b'{"jsonrpc":"2.0","id":"p","method":"server/discover","params":')
        bridge.transport.write(
            b'{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
            b'"io.modelcontextprotocol/clientCapabilities":{}}}}\n'
        )
        bridge.transport.closeStdin()
        self.assertEqual(await bridge.ended(), 0)
        [answer] = self.lines(bridge.text(1))
        self.assertIn("2026-07-28", answer["result"]["supportedVersions"])

    async def test_transport_http_names_the_endpoint(self) -> None:
        """--transport http fails, giving the daemon's /mcp address from daemon.listen."""
        self.env["MCPX_DAEMON_LISTEN"] = "tcp:8123:interface=127.0.0.1"
        bridge = self.start([sys.executable, "-m", "mcpx", "serve", "--transport", "http"])
        self.assertEqual(await bridge.ended(), 2)
        self.assertIn("http://127.0.0.1:8123/mcp", bridge.text(2))
        self.assertEqual(bridge.text(1), "")
