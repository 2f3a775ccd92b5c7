"""
The daemon's stop, in memory: what the gate answers once it has begun, what a legacy
session's requests in flight are told, how the connections are drained, and what a
second signal does (L{mcpx.ops.shutdown}).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from mcpx.daemon.gate import Gate, HostRule, OriginRule
from mcpx.daemon.root import DaemonService, race_hurry
from mcpx.daemon.site import DaemonSite, SiteOptions
from mcpx.daemon.token import TokenFile
from mcpx.ops.shutdown import Shutdown
from mcpx.pool.instances import SHUTTING_DOWN
from mcpx.server.mcp_socket import StdioFactory
from mcpx.settings.errors import SettingsError
from mcpx.upstream.groups import ProcessGroups
from mcpx.wire.errors import INTERNAL_ERROR
from tests.daemon.fake_pool import Harness, daemon_http, result_of
from tests.daemon.test_gate import OWNER, Answer, GateCase
from tests.server.fake_core import FakeCore
from tests.server.test_http import BOTH, McpHTTPCase, _Body, request


class _Channel:
    """An HTTP channel as the stop sees one: its requests, whether it is kept alive."""

    def __init__(self, requests: list[object]) -> None:
        self.requests = requests
        self.persistent = True
        self.transport = None


class GateDuringStopTests(GateCase):
    def setUp(self) -> None:
        GateCase.setUp(self)
        self.shutdown = Shutdown(self.clock)
        http = daemon_http(clock=self.clock, pid=4242)
        self.gate = Gate(
            http.resource(),
            origins=OriginRule(self.allowed_origins),
            hosts=HostRule(self.allowed_hosts),
            auth=self.auth,
            token=TokenFile(self.state, self.clock.seconds),
            uid=OWNER,
            lookup_uid=self.lookup,
            lookup_unix_uid=self.lookup_unix,
            shutdown=self.shutdown,
        )
        self.site = DaemonSite(self.gate, self.clock, SiteOptions(shutdown=self.shutdown))

    def assertStopping(self, answer: Answer, path: str) -> None:
        self.assertEqual(answer.status, 503, path)
        self.assertEqual(answer.headers["content-type"], "application/json")
        self.assertEqual(answer.headers["connection"], "close")
        body = answer.json()
        if path == "/mcp":
            self.assertEqual(body["jsonrpc"], "2.0")
            self.assertEqual(body["error"]["code"], INTERNAL_ERROR)
            self.assertEqual(body["error"]["message"], SHUTTING_DOWN)
        else:
            self.assertEqual(body["error"]["code"], "shutting_down")
            self.assertIn(SHUTTING_DOWN, body["error"]["message"])

    def test_keep_alive_connection_refused_once_stop_begins(self) -> None:
        """
        A keep-alive connection served before the stop gets 503 shutting_down for its
        next request, and is closed after that answer.
        """
        connection = self.connect()
        self.uids[("127.0.0.1", 40000)] = OWNER
        self.assertEqual(self.send("GET", "/health", connection=connection).status, 200)
        self.assertFalse(connection[1].disconnecting)
        self.shutdown.begin()
        self.assertStopping(self.send("GET", "/health", connection=connection), "/health")
        self.assertTrue(connection[1].disconnecting, "the connection closes after the 503")

    def test_every_route_refused(self) -> None:
        """Reload, events, /mcp (a JSON-RPC error there) and the rest: all 503 during a stop."""
        self.shutdown.begin()
        for method, path in (
            ("POST", "/v1/reload"),
            ("GET", "/v1/events"),
            ("POST", "/mcp"),
            ("GET", "/mcp"),
            ("GET", "/v1/servers"),
        ):
            self.assertStopping(self.send(method, path), path)

    def test_drain_closes_tracked_connections(self) -> None:
        """
        The stop's drain closes every connection the site opened, idle ones included,
        and fires once they are closed.
        """
        _, transport = self.connect()
        self.shutdown.begin()
        drained = self.shutdown.drain()
        self.assertTrue(transport.disconnecting)
        self.clock.advance(0.05)
        self.assertNoResult(drained)
        transport.disconnected = True
        self.clock.advance(0.01)
        self.assertIsNone(result_of(drained))

    def test_busy_connection_closes_after_its_answer(self) -> None:
        """
        A connection whose response is being written when the stop begins is closed
        once that response ends, so a stream's client sees the connection end.
        """
        busy, idle = _Channel([object()]), _Channel([])
        self.shutdown.track(busy)
        self.shutdown.track(idle)
        self.shutdown.begin()
        self.assertFalse(busy.persistent)
        self.assertTrue(idle.persistent, "an idle one is answered 503 if it asks again")

    def test_drain_is_bounded(self) -> None:
        """A connection that does not close does not hold the stop past the bound."""
        self.connect()
        drained = self.shutdown.drain(bound=0.5)
        self.clock.pump([0.01] * 49)
        self.assertNoResult(drained)
        self.clock.pump([0.01] * 2)
        self.assertIsNone(result_of(drained))


class HurryTests(SynchronousTestCase):
    def test_hurry_kills_and_ends_the_wait(self) -> None:
        """
        A second signal kills the upstreams (once, however many signals follow) and the
        stop no longer waits for what it was waiting for.
        """
        killed: list[int] = []
        shutdown = Shutdown(Clock(), kill=[lambda: killed.append(1)])
        stubborn: Deferred[None] = Deferred()
        stopped = race_hurry(stubborn, shutdown)
        self.assertNoResult(stopped)
        shutdown.hurry()
        shutdown.hurry()
        self.assertEqual(killed, [1])
        self.assertIsNone(self.successResultOf(stopped))
        stubborn.callback(None)

    def test_kill_all_ends_a_recorded_group(self) -> None:
        """L{ProcessGroups.kill_all} SIGKILLs each recorded group still running."""
        groups = ProcessGroups(Path(tempfile.mkdtemp()))
        child = subprocess.Popen(["sleep", "600"], start_new_session=True)
        self.addCleanup(child.kill)
        groups.record("stubborn", child.pid)
        self.assertEqual(groups.kill_all(), 1)
        self.assertEqual(child.wait(timeout=5), -9)
        groups.forget(child.pid)
        self.assertEqual(groups.kill_all(), 0)


class LegacySessionStopTests(McpHTTPCase):
    """
    A legacy session's request in flight when the daemon stops gets the shutting-down
    error, not an empty 202 (the SDK: "server answered a request with 202 Accepted").
    """

    def session(self) -> dict[str, str]:
        return self.session_headers(self.initialize())

    def test_answer_before_the_stream_started(self) -> None:
        started = self.client.start("POST", request(5, "wait"), self.session())
        self.assertNoResult(started)
        self.mcp.close()
        self.client.stub.flush()
        response: Any = result_of(started)
        self.assertEqual(response.code, 200)
        body = result_of(response.json())
        self.assertEqual(body["id"], 5)
        self.assertEqual(body["error"]["message"], SHUTTING_DOWN)
        self.assertEqual(body["error"]["data"], {"code": "shutting_down"})

    def test_answer_on_a_started_stream(self) -> None:
        started = self.client.start("POST", request(6, "wait"), {**self.session(), "Accept": BOTH})
        # The keep-alive turns the answer into an event stream.
        self.clock.advance(15)
        self.client.stub.flush()
        body = _Body()
        result_of(started).deliverBody(body)
        self.client.stub.flush()
        self.mcp.close()
        self.client.stub.flush()
        [answer] = body.events()
        self.assertEqual(answer["id"], 6)
        self.assertEqual(answer["error"]["message"], SHUTTING_DOWN)
        self.assertEqual(len(body.ended), 1, "the stream ended")

    def test_batch_answers(self) -> None:
        """Each request of a 2025-03-26 batch in flight is answered too."""
        headers = self.session_headers(self.initialize("2025-03-26"), "2025-03-26")
        started = self.client.start("POST", [request(7, "wait"), request(8, "wait")], headers)
        self.mcp.close()
        self.client.stub.flush()
        answers = result_of(result_of(started).json())
        self.assertEqual(sorted(a["id"] for a in answers), [7, 8])
        self.assertEqual({a["error"]["message"] for a in answers}, {SHUTTING_DOWN})

    def test_client_delete_still_202(self) -> None:
        """The client ending its own session is not a stop: its POST still ends 202."""
        headers = self.session()
        started = self.client.start("POST", request(5, "wait"), headers)
        self.client.send("DELETE", headers=headers)
        self.client.stub.flush()
        self.assertEqual(result_of(started).code, 202)


class StdioDuringStopTests(SynchronousTestCase):
    def test_new_requests_refused_and_connection_drained(self) -> None:
        """
        Over C{mcpx serve}'s socket, a request made once the stop has begun is answered
        with the shutting-down error and never reaches the core; the drain closes the
        connection.
        """
        clock = Clock()
        core = FakeCore()
        shutdown = Shutdown(clock)
        factory = StdioFactory(core, clock, drain=5.0, shutdown=shutdown)
        protocol = factory.buildProtocol(None)
        transport = StringTransport()
        protocol.makeConnection(transport)
        protocol.dataReceived(b'{"jsonrpc": "2.0", "id": 1, "method": "echo", "params": {}}\n')
        self.assertEqual(json.loads(transport.value())["result"], {})
        transport.clear()
        shutdown.begin()
        protocol.dataReceived(b'{"jsonrpc": "2.0", "id": 2, "method": "echo", "params": {}}\n')
        answer = json.loads(transport.value())
        self.assertEqual((answer["id"], answer["error"]["message"]), (2, SHUTTING_DOWN))
        self.assertEqual(len(core.handled), 1)
        shutdown.drain()
        self.assertTrue(transport.disconnecting)


class SighupDuringStopTests(SynchronousTestCase):
    def test_sighup_reload_not_applied(self) -> None:
        """A SIGHUP that arrives once the stop has begun reads no file and applies nothing."""
        harness = Harness()
        read: list[str] = []

        def reread() -> Any:
            read.append("read")
            raise SettingsError("not to be read")

        harness.http.host.reloads.read = reread
        shutdown = Shutdown(Clock())
        service = DaemonService(harness.http, [], None, shutdown=shutdown)
        self.successResultOf(service.reload())
        self.assertEqual(read, ["read"], "before the stop, SIGHUP reads the file")
        shutdown.begin()
        self.assertIsNone(self.successResultOf(service.reload()))
        self.assertEqual(read, ["read"])
