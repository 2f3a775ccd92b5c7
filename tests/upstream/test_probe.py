"""The era probe and its cache, over in-memory channels."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attrs import evolve
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from mcpx.settings.servers import RemoteServer, Secret, StdioServer
from mcpx.spec.revision import NEWEST, Era
from mcpx.upstream.legacy_session import LegacySession
from mcpx.upstream.modern_session import ModernSession
from mcpx.upstream.probe import Connector, EraCache, ServerConfig, era_key
from mcpx.upstream.records import UpstreamError
from mcpx.wire.errors import RpcError
from tests.support.logs import observe_log
from tests.upstream.memory import FakeServer, MemoryChannel, discover_result, initialize_result

STDIO = StdioServer(name="s", command="server", args=("--x",))
REMOTE = RemoteServer(name="r", url="http://127.0.0.1:1/mcp")


def legacy_server() -> FakeServer:
    return FakeServer({"initialize": lambda p: initialize_result("2025-06-18")})


def modern_server() -> FakeServer:
    return FakeServer({"server/discover": lambda p: discover_result(tools={})})


class Harness:
    """A connector whose channels lead to fake servers, counting the channels made."""

    def __init__(
        self,
        case: SynchronousTestCase,
        server: FakeServer,
        refuse_with: int | None = None,
        sse_server: FakeServer | None = None,
    ) -> None:
        self.clock = Clock()
        self.path = Path(case.mktemp()) / "upstream-eras.json"
        self.server = server
        self.refuse_with = refuse_with
        self.sse_server = sse_server
        self.channels: list[MemoryChannel] = []
        self.sse_channels: list[MemoryChannel] = []
        self.connector = self.make_connector(EraCache.load(self.path))

    def make_connector(self, cache: EraCache) -> Connector:
        return Connector(
            clock=self.clock,
            cache=cache,
            channels=self._channel,
            http_sse_channels=self._sse_channel,
            probe_timeout=5.0,
        )

    def _channel(self, name: str, server: ServerConfig) -> MemoryChannel:
        channel = MemoryChannel(self.server, refuse_requests_with=self.refuse_with)
        self.channels.append(channel)
        return channel

    def _sse_channel(self, name: str, server: ServerConfig) -> MemoryChannel:
        assert self.sse_server is not None
        channel = MemoryChannel(self.sse_server)
        self.sse_channels.append(channel)
        return channel

    def connect(self, config: ServerConfig = STDIO) -> Deferred[Any]:
        return Deferred.fromCoroutine(self.connector.connect("fake", config))

    def cached(self) -> dict[str, Any]:
        data: dict[str, dict[str, Any]] = json.loads(self.path.read_text())
        return data["eras"]


class ProbeTests(SynchronousTestCase):
    def test_modern_server_is_found_modern_and_remembered(self) -> None:
        """server/discover answered: a modern session, and the era is written to the cache."""
        harness = Harness(self, modern_server())
        session = self.successResultOf(harness.connect())
        self.assertIsInstance(session, ModernSession)
        self.assertEqual(harness.server.methods(), ["server/discover"])
        self.assertEqual(
            harness.cached(), {era_key(STDIO): {"era": "modern", "revision": "2026-07-28"}}
        )

    def test_legacy_server_falls_back_on_the_same_connection(self) -> None:
        """A -32601 to discover means legacy: initialize follows on the same channel."""
        harness = Harness(self, legacy_server())
        session = self.successResultOf(harness.connect())
        self.assertIsInstance(session, LegacySession)
        self.assertEqual(session.revision.value, "2025-06-18")
        self.assertEqual(harness.server.methods(), ["server/discover", "initialize"])
        self.assertEqual(len(harness.channels), 1, "no second process or connection")
        self.assertEqual(harness.cached()[era_key(STDIO)]["era"], "legacy")

    def test_a_server_that_exits_on_the_probe_is_started_again_as_legacy(self) -> None:
        """
        A server that ends the connection on server/discover (the Python SDK up to 1.8
        exits on a method it does not know) is started again on a new channel and
        initialized, never probed again; the cache remembers it is legacy.
        """
        harness = Harness(self, legacy_server())

        def exit_on_probe(params: Mapping[str, Any]) -> Any:
            # The first process dies; the one started after it is a legacy server.
            del harness.server.answers["server/discover"]
            peer = harness.channels[-1].peer
            assert peer is not None
            peer.close(ConnectionError('upstream "fake" exited with status 1'))
            raise RpcError.internal_error("exited")

        harness.server.answers["server/discover"] = exit_on_probe
        session = self.successResultOf(harness.connect())
        self.assertIsInstance(session, LegacySession)
        self.assertEqual(harness.server.methods(), ["server/discover", "initialize"])
        self.assertEqual(len(harness.channels), 2)
        self.assertTrue(harness.channels[0].closed)
        self.assertEqual(harness.cached()[era_key(STDIO)]["era"], "legacy")

        again = Harness(self, legacy_server())
        again.connector = again.make_connector(EraCache.load(harness.path))
        self.assertIsInstance(self.successResultOf(again.connect()), LegacySession)
        self.assertEqual(again.server.methods(), ["initialize"])

    def test_protocol_pins_the_era_or_revision(self) -> None:
        """
        A server entry's protocol opens the session so with no probe and nothing
        remembered: legacy (the newest legacy revision offered), a legacy revision
        (offered as it is), modern or 2026-07-28 (discover).
        """
        for pin, kind, first in (
            ("legacy", LegacySession, ("initialize", "2025-11-25")),
            ("2025-03-26", LegacySession, ("initialize", "2025-03-26")),
            ("modern", ModernSession, ("server/discover", None)),
            ("2026-07-28", ModernSession, ("server/discover", None)),
        ):
            server = legacy_server() if kind is LegacySession else modern_server()
            harness = Harness(self, server)
            session = self.successResultOf(harness.connect(evolve(STDIO, protocol=pin)))
            self.assertIsInstance(session, kind, pin)
            self.assertEqual(server.methods(), [first[0]], pin)
            offered = server.requests[0].params
            if first[1] is not None:
                assert isinstance(offered, Mapping)
                self.assertEqual(offered["protocolVersion"], first[1], pin)
            self.assertFalse(harness.path.exists(), pin)

    def test_silence_until_the_probe_timeout_means_legacy(self) -> None:
        """A server that never answers discover is initialised once the probe times out."""
        server = legacy_server()
        server.answers["server/discover"] = lambda p: Deferred()
        harness = Harness(self, server)
        connecting = harness.connect()
        self.assertNoResult(connecting)
        harness.clock.advance(5.0)
        session = self.successResultOf(connecting)
        self.assertIsInstance(session, LegacySession)
        self.assertEqual(server.methods(), ["server/discover", "initialize"])

    def test_concurrent_starts_probe_once(self) -> None:
        """
        A second start of the same configuration while the first one probes (two hosts'
        instances of a server mcpx has not met) waits for that probe's outcome and
        initializes straight away: the server is sent server/discover once, which the
        Python SDK up to 1.8 answers by exiting, however many instances start at once.
        """
        server = legacy_server()
        server.answers["server/discover"] = lambda p: Deferred()
        harness = Harness(self, server)
        self.assertFalse(harness.connector.era_known(STDIO))
        first, second = harness.connect(), harness.connect()
        self.assertEqual(server.methods(), ["server/discover"])
        harness.clock.advance(5.0)
        self.assertIsInstance(self.successResultOf(first), LegacySession)
        self.assertIsInstance(self.successResultOf(second), LegacySession)
        self.assertEqual(server.methods(), ["server/discover", "initialize", "initialize"])
        self.assertTrue(harness.connector.era_known(STDIO))

    def test_a_start_waiting_on_a_failed_probe_probes_in_turn(self) -> None:
        """
        A probe that finds no era (a modern server refused it) leaves none remembered:
        the start that waited on it probes for itself, and its own outcome stands.
        """
        server = legacy_server()
        refused: Deferred[Any] = Deferred()
        answers = [refused, Deferred()]
        server.answers["server/discover"] = lambda p: answers.pop(0)
        harness = Harness(self, server)
        first, second = harness.connect(), harness.connect()
        self.assertEqual(server.methods(), ["server/discover"])
        refused.errback(RpcError(-32021, "needs roots", {"requiredCapabilities": {"roots": {}}}))
        self.failureResultOf(first, UpstreamError)
        self.assertEqual(server.methods(), ["server/discover", "server/discover"])
        harness.clock.advance(5.0)
        self.assertIsInstance(self.successResultOf(second), LegacySession)

    def test_a_modern_server_slower_than_the_probe_is_opened_again_as_modern(self) -> None:
        """
        A modern server that answers discover only after the probe gave up, and then
        refuses initialize with -32022, is started again and opened as modern (not
        reported as failing to start).
        """
        late: list[Deferred[Any]] = []

        def discover(params: Mapping[str, Any]) -> Any:
            if not late:
                late.append(Deferred())
                return late[0]
            return discover_result(tools={})

        def refuse(params: Mapping[str, Any]) -> Any:
            # By now it has started: the late answer to discover, then the refusal.
            late[0].callback(discover_result(tools={}))
            raise RpcError(-32022, "connection is serving the 2026-07-28 protocol")

        harness = Harness(self, FakeServer({"server/discover": discover, "initialize": refuse}))
        connecting = harness.connect()
        harness.clock.advance(5.0)
        session = self.successResultOf(connecting)
        self.assertIsInstance(session, ModernSession)
        self.assertEqual(len(harness.channels), 2)
        self.assertTrue(harness.channels[0].closed, "the first connection is let go")
        self.assertEqual(harness.cached()[era_key(STDIO)]["era"], "modern")

    def test_a_slow_modern_server_that_takes_initialize_is_opened_again_as_modern(
        self,
    ) -> None:
        """
        A modern server that answers discover too late for the probe and then answers
        initialize with 2026-07-28 (as the conformance suite's servers do) is opened
        again as modern, rather than failing with "cannot use with a handshake".
        """
        late: list[Deferred[Any]] = []

        def discover(params: Mapping[str, Any]) -> Any:
            if not late:
                late.append(Deferred())
                return late[0]
            return discover_result(tools={})

        def initialize(params: Mapping[str, Any]) -> Any:
            # By now it has started: the late answer to discover, then initialize.
            late[0].callback(discover_result(tools={}))
            return initialize_result(NEWEST.value)

        harness = Harness(self, FakeServer({"server/discover": discover, "initialize": initialize}))
        connecting = harness.connect()
        harness.clock.advance(5.0)
        session = self.successResultOf(connecting)
        self.assertIsInstance(session, ModernSession)
        self.assertEqual(len(harness.channels), 2)
        self.assertTrue(harness.channels[0].closed, "the first connection is let go")
        self.assertEqual(harness.cached()[era_key(STDIO)]["era"], "modern")

    def test_a_slow_modern_server_answering_initialize_without_a_revision_is_modern(
        self,
    ) -> None:
        """
        A modern server too slow for the probe that answers initialize with a result of
        its own, naming no revision (one of the conformance suite's 2026-07-28 servers
        does), is opened again as modern rather than failing.
        """
        late: list[Deferred[Any]] = []

        def discover(params: Mapping[str, Any]) -> Any:
            if not late:
                late.append(Deferred())
                return late[0]
            return discover_result(tools={})

        def initialize(params: Mapping[str, Any]) -> Any:
            late[0].callback(discover_result(tools={}))
            return {"resultType": "complete"}

        harness = Harness(self, FakeServer({"server/discover": discover, "initialize": initialize}))
        connecting = harness.connect()
        harness.clock.advance(5.0)
        session = self.successResultOf(connecting)
        self.assertIsInstance(session, ModernSession)
        self.assertTrue(harness.channels[0].closed, "the first connection is let go")

    def test_initialize_without_a_revision_is_an_error_when_modern_fails_too(self) -> None:
        """
        When the second try as modern goes unanswered as well, the error is initialize's
        own (no revision), not the second try's.
        """
        harness = Harness(
            self,
            FakeServer(
                {
                    "server/discover": lambda p: Deferred(),
                    "initialize": lambda p: {"serverInfo": {"name": "odd", "version": "1"}},
                }
            ),
        )
        connecting = harness.connect()
        for _ in range(12):
            harness.clock.advance(5.0)
        failure = self.failureResultOf(connecting, UpstreamError)
        self.assertIn("protocol version None", str(failure.value))
        self.assertEqual(len(harness.channels), 2)

    def test_an_unknown_initialize_revision_is_still_an_error(self) -> None:
        """A revision mcpx does not know at all is reported, not taken for modern."""
        harness = Harness(
            self,
            FakeServer(
                {
                    "server/discover": lambda p: Deferred(),
                    "initialize": lambda p: initialize_result("2099-01-01"),
                }
            ),
        )
        connecting = harness.connect()
        harness.clock.advance(5.0)
        failure = self.failureResultOf(connecting, UpstreamError)
        self.assertIn("cannot use with a handshake", str(failure.value))

    def test_a_modern_refusal_other_than_version_is_an_error(self) -> None:
        """-32021 on discover is a modern server refusing: reported, not taken for legacy."""

        def refuse(params: Mapping[str, Any]) -> Any:
            raise RpcError(-32021, "needs roots", {"requiredCapabilities": {"roots": {}}})

        harness = Harness(self, FakeServer({"server/discover": refuse}))
        failure = self.failureResultOf(harness.connect(), UpstreamError)
        self.assertIn("refused server/discover", str(failure.value))
        self.assertTrue(harness.channels[0].closed)

    def test_http_refusing_initialize_tries_http_sse(self) -> None:
        """Over HTTP, 405 to discover and to initialize leads to the 2024-11-05 HTTP+SSE one."""
        harness = Harness(self, FakeServer(), refuse_with=405, sse_server=legacy_server())
        session = self.successResultOf(harness.connect(REMOTE))
        self.assertIsInstance(session, LegacySession)
        self.assertEqual(len(harness.sse_channels), 1)
        self.assertTrue(harness.channels[0].closed, "the Streamable HTTP channel is let go")
        self.assertEqual(harness.cached()[era_key(REMOTE)]["era"], "http+sse")

    def test_stdio_refusal_is_not_taken_for_http_sse(self) -> None:
        """Only an HTTP server is tried over HTTP+SSE; anything else reports the refusal."""
        harness = Harness(self, FakeServer(), refuse_with=405)
        failure = self.failureResultOf(harness.connect(STDIO), UpstreamError)
        self.assertIn("initialize was refused", str(failure.value))
        self.assertEqual(harness.sse_channels, [])


class MirrorTests(SynchronousTestCase):
    """
    The legacy-era session of a server found modern (era mirroring,
    spec/era-mirroring.md): C{initialize} on a new connection; a server that speaks
    2026-07-28 alone is opened as modern instead; the cache is never touched.
    """

    def test_a_dual_era_server_is_opened_in_the_legacy_era(self) -> None:
        """A server answering both discover and initialize: initialize, no probe."""
        harness = Harness(
            self,
            FakeServer(
                {
                    "server/discover": lambda p: discover_result(tools={}),
                    "initialize": lambda p: initialize_result("2025-11-25"),
                }
            ),
        )
        session = self.successResultOf(
            Deferred.fromCoroutine(harness.connector.connect("fake", STDIO, era=Era.LEGACY))
        )
        self.assertIsInstance(session, LegacySession)
        self.assertEqual(session.revision.value, "2025-11-25")
        self.assertEqual(harness.server.methods(), ["initialize"])
        self.assertFalse(harness.path.exists(), "the server's own era stays remembered as is")

    def test_a_modern_only_server_is_opened_as_modern(self) -> None:
        """
        A server refusing initialize with -32022 (it speaks 2026-07-28 alone) is
        opened again, as modern: its handshake-era callers are bridged.
        """

        def refuse(params: Mapping[str, Any]) -> Any:
            raise RpcError(-32022, "connection is serving the 2026-07-28 protocol")

        harness = Harness(
            self,
            FakeServer(
                {"server/discover": lambda p: discover_result(tools={}), "initialize": refuse}
            ),
        )
        events = observe_log(self)
        session = self.successResultOf(
            Deferred.fromCoroutine(harness.connector.connect("fake", STDIO, era=Era.LEGACY))
        )
        self.assertIsInstance(session, ModernSession)
        self.assertEqual(harness.server.methods(), ["initialize", "server/discover"])
        self.assertEqual(len(harness.channels), 2)
        self.assertTrue(harness.channels[0].closed)
        self.assertTrue(any("bridged" in str(e.get("log_format")) for e in events), list(events))
        self.assertFalse(harness.path.exists())

    def test_a_sessionless_http_server_is_opened_as_modern(self) -> None:
        """
        A Streamable HTTP server that takes initialize without giving a session id (it
        serves each POST on its own, so cannot hear a client's answer to its request)
        is opened as modern: its handshake-era callers are bridged, where its
        input_required rounds work.
        """

        class Sessionless(MemoryChannel):
            session_id: str | None = None

        server = FakeServer(
            {
                "server/discover": lambda p: discover_result(tools={}),
                "initialize": lambda p: initialize_result("2025-11-25"),
            }
        )
        harness = Harness(self, server)
        made: list[MemoryChannel] = []

        def channel(name: str, config: ServerConfig) -> MemoryChannel:
            made.append(Sessionless(server))
            return made[-1]

        connector = evolve(harness.connector, channels=channel)
        session = self.successResultOf(
            Deferred.fromCoroutine(connector.connect("fake", REMOTE, era=Era.LEGACY))
        )
        self.assertIsInstance(session, ModernSession)
        self.assertEqual(server.methods(), ["initialize", "server/discover"])
        self.assertTrue(made[0].closed)


class CacheTests(SynchronousTestCase):
    def test_a_remembered_legacy_era_skips_the_probe(self) -> None:
        """After a restart (a new cache read from the file), a legacy server gets no discover."""
        harness = Harness(self, legacy_server())
        self.successResultOf(harness.connect())
        harness.server.requests.clear()
        harness.connector = harness.make_connector(EraCache.load(harness.path))
        session = self.successResultOf(harness.connect())
        self.assertIsInstance(session, LegacySession)
        self.assertEqual(harness.server.methods(), ["initialize"])

    def test_a_remembered_http_sse_server_skips_the_probe(self) -> None:
        """
        A server the era cache names C{"http+sse"} (as every mcpx has written it) is
        opened over HTTP+SSE after a restart, with no probe on its Streamable HTTP URL.
        """
        sse_server = legacy_server()
        harness = Harness(self, FakeServer(), refuse_with=405, sse_server=sse_server)
        harness.path.parent.mkdir(parents=True, exist_ok=True)
        remembered = {era_key(REMOTE): {"era": "http+sse", "revision": "2025-06-18"}}
        harness.path.write_text(json.dumps({"version": 1, "eras": remembered}))
        harness.connector = harness.make_connector(EraCache.load(harness.path))
        session = self.successResultOf(harness.connect(REMOTE))
        self.assertIsInstance(session, LegacySession)
        self.assertEqual(harness.channels, [])
        self.assertEqual(sse_server.methods(), ["initialize"])
        self.assertEqual(harness.cached(), remembered)

    def test_a_remembered_era_that_fails_is_probed_again_once(self) -> None:
        """A server remembered as modern that has become legacy is re-probed and re-remembered."""
        harness = Harness(self, legacy_server())
        cache = EraCache.load(harness.path)
        cache.put(era_key(STDIO), Era.MODERN, NEWEST)
        harness.connector = harness.make_connector(cache)
        session = self.successResultOf(harness.connect())
        self.assertIsInstance(session, LegacySession)
        self.assertEqual(
            harness.server.methods(), ["server/discover", "server/discover", "initialize"]
        )
        self.assertTrue(harness.channels[0].closed, "the channel of the failed attempt is closed")
        self.assertEqual(harness.cached()[era_key(STDIO)]["era"], "legacy")

    def test_a_corrupt_cache_file_is_ignored_with_a_warning(self) -> None:
        """Garbage in upstream-eras.json costs a probe and a warning, never a failure."""
        path = Path(self.mktemp())
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{not json")
        events = observe_log(self)
        cache = EraCache.load(path)
        self.assertIsNone(cache.get(era_key(STDIO)))
        self.assertTrue(any("ignoring the era cache" in e.get("log_format", "") for e in events))

    def test_the_key_follows_what_decides_the_era(self) -> None:
        """Changing the command, args, env or URL changes the key; the server's name does not."""
        base = era_key(STDIO)
        self.assertEqual(base, era_key(StdioServer(name="other", command="server", args=("--x",))))
        self.assertNotEqual(base, era_key(StdioServer(name="s", command="server")))
        self.assertNotEqual(
            base,
            era_key(StdioServer(name="s", command="server", args=("--x",), env={"K": Secret("v")})),
        )
        self.assertNotEqual(era_key(REMOTE), era_key(RemoteServer(name="r", url="http://h/x")))

    def test_the_cache_file_holds_no_secrets(self) -> None:
        """An env secret decides the key but is never written in clear."""
        harness = Harness(self, modern_server())
        config = StdioServer(name="s", command="server", env={"TOKEN": Secret("hunter2")})
        self.successResultOf(harness.connect(config))
        self.assertNotIn("hunter2", harness.path.read_text())
