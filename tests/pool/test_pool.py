"""
The pool on a fake clock, with a connector whose upstreams the tests control: starting,
sharing a start, idle reaping, crashes and backoff, timeouts, scopes, reload, restart,
stopping, the catalogue cache, notifications and events.
"""

from __future__ import annotations

from collections.abc import Coroutine, Mapping
from typing import Any

from attrs import evolve
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from mcpx.call import Call
from mcpx.pool import (
    Backoff,
    CallTimedOut,
    Pool,
    ReloadReport,
    ServerState,
    ServerUnavailable,
    TooManyInstances,
    UnknownServer,
)
from mcpx.pool.catalogue import APP_READ_TTL, MAX_APP_READ_CHARS
from mcpx.settings.server_entry import parse_server
from mcpx.settings.servers import RemoteServer, Server, ServersConfig, StdioServer
from mcpx.spec.revision import Era
from mcpx.upstream.handlers import UpstreamHandlers
from mcpx.upstream.records import UpstreamError
from mcpx.upstream.session import UpstreamSession
from mcpx.wire.errors import RpcError
from tests.pool.fakes import Events, FakeConnector, servers, stdio, text_result
from tests.support.logs import observe_log

CALL_TIMEOUT = 30.0
IDLE_TIMEOUT = 60.0


class PoolTestCase(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.connector = FakeConnector(self.clock)
        self.events = Events()

    def make_pool(self, *configured: StdioServer, **options: Any) -> Pool:
        options.setdefault("call_timeout", CALL_TIMEOUT)
        options.setdefault("idle_timeout", IDLE_TIMEOUT)
        pool = Pool(
            servers=servers(*(configured or (stdio("a"),))),
            connector=self.connector,
            clock=self.clock,
            publish=self.events,
            **options,
        )
        pool.startService()
        return pool

    def call(
        self, pool: Pool, server: str = "a", text: str = "hi", **options: Any
    ) -> Deferred[dict[str, Any]]:
        return Deferred.fromCoroutine(pool.call_tool(server, "echo", {"text": text}, **options))

    def echoed(self, d: Deferred[dict[str, Any]]) -> str:
        result = self.successResultOf(d)
        text: str = result["content"][0]["text"]
        return text

    def unavailable(self, d: Deferred[Any]) -> ServerUnavailable:
        error = self.failureResultOf(d, ServerUnavailable).value
        assert isinstance(error, ServerUnavailable)
        return error

    def stop(self, pool: Pool) -> None:
        self.successResultOf(pool.stopService())


class StartTests(PoolTestCase):
    def test_first_call_starts_instance(self) -> None:
        """The first call starts the server and gets its answer."""
        pool = self.make_pool()
        self.assertEqual(self.echoed(self.call(pool)), "1:hi")
        self.assertEqual([name for name, _, _ in self.connector.connects], ["a"])

    def test_warm_instance_reused(self) -> None:
        """Later calls reuse the running instance: one start for many calls."""
        pool = self.make_pool()
        for text in ("one", "two", "three"):
            self.assertEqual(self.echoed(self.call(pool, text=text)), f"1:{text}")
        self.assertEqual(len(self.connector.connects), 1)

    def test_concurrent_first_calls_share_one_start(self) -> None:
        """Calls that arrive while a server starts all wait for that one start."""
        pool = self.make_pool()
        self.connector.gate = Deferred()
        first, second = self.call(pool, text="x"), self.call(pool, text="y")
        self.assertNoResult(first)
        self.assertNoResult(second)
        self.assertEqual(len(self.connector.connects), 1)
        self.connector.gate.callback(None)
        self.assertEqual(self.echoed(first), "1:x")
        self.assertEqual(self.echoed(second), "1:y")
        self.assertEqual(len(self.connector.connects), 1)

    def test_cancelled_waiter_does_not_cancel_start(self) -> None:
        """A caller that gives up while the server starts leaves the start to the others."""
        pool = self.make_pool()
        self.connector.gate = Deferred()
        impatient, patient = self.call(pool, text="x"), self.call(pool, text="y")
        impatient.cancel()
        self.failureResultOf(impatient, CancelledError)
        self.connector.gate.callback(None)
        self.assertEqual(self.echoed(patient), "1:y")

    def test_unknown_server(self) -> None:
        """A call to a server nobody configured names the ones that are."""
        pool = self.make_pool(stdio("github"), stdio("files"))
        error = self.failureResultOf(self.call(pool, "gihtub"), UnknownServer).value
        assert isinstance(error, UnknownServer)
        self.assertEqual(error.code, "unknown_server")
        self.assertIn("'gihtub'", str(error))
        self.assertIn("did you mean 'github'?", str(error))
        self.assertIn("github, files", str(error))
        self.assertEqual(self.connector.connects, [])

    def test_start_failure_reported(self) -> None:
        """A server that cannot be started fails the call with why, and when it is retried."""
        pool = self.make_pool()
        self.connector.failures.append(UpstreamError("a", "command 'nope' was not found"))
        error = self.unavailable(self.call(pool))
        self.assertEqual(error.code, "server_unavailable")
        self.assertIn("could not start", str(error))
        self.assertIn("command 'nope' was not found", str(error))
        self.assertEqual(error.retry_in, 1.0)
        self.assertIn("next start in 1s", str(error))
        [failed] = self.events.of("server.failed")
        self.assertEqual(failed["retry_in"], 1.0)
        self.assertIn("command 'nope' was not found", failed["error"])

    def test_failed_start_backs_off(self) -> None:
        """After a failed start, calls fail at once until the delay passes; then it starts."""
        pool = self.make_pool()
        self.connector.failures.append(UpstreamError("a", "broken"))
        self.unavailable(self.call(pool))
        self.clock.advance(0.5)
        error = self.unavailable(self.call(pool))
        self.assertEqual(error.retry_in, 0.5)
        self.assertEqual(len(self.connector.connects), 1)
        self.clock.advance(0.5)
        self.assertEqual(self.echoed(self.call(pool)), "1:hi")
        self.assertEqual(len(self.connector.connects), 2)

    def test_connector_raising_at_once(self) -> None:
        """A connector that raises before it can be awaited fails the start like any other."""

        class Refusing:
            probe_timeout = 0.0

            def era_known(self, server: Server) -> bool:
                return True

            def connect(
                self,
                name: str,
                server: Server,
                handlers: UpstreamHandlers,
                *,
                principal: str | None = None,
                era: Era | None = None,
            ) -> Coroutine[Any, Any, UpstreamSession]:
                raise RuntimeError("no transport for this server")

        pool = Pool(
            servers=servers(stdio("a")),
            connector=Refusing(),
            clock=self.clock,
            call_timeout=CALL_TIMEOUT,
            idle_timeout=IDLE_TIMEOUT,
        )
        self.assertIn("no transport for this server", str(self.unavailable(self.call(pool))))
        self.assertEqual(pool.status()[0].state, ServerState.FAILED)

    def test_waiters_share_start_failure(self) -> None:
        """Every call waiting on a start that fails hears the failure."""
        pool = self.make_pool()
        self.connector.gate = Deferred()
        self.connector.failures.append(UpstreamError("a", "broken"))
        first, second = self.call(pool), self.call(pool)
        self.connector.gate.callback(None)
        for d in (first, second):
            self.assertIn("broken", str(self.unavailable(d)))

    def test_session_is_the_warm_one(self) -> None:
        """pool.session hands out the same open session the calls use."""
        pool = self.make_pool()
        session = self.successResultOf(Deferred.fromCoroutine(pool.session("a")))
        self.assertIs(self.successResultOf(Deferred.fromCoroutine(pool.session("a"))), session)
        self.assertEqual(session.server_info["version"], "1")


class IdleTests(PoolTestCase):
    def test_reaped_after_idle_timeout(self) -> None:
        """An instance nobody uses for idle_timeout is stopped, and the next call starts anew."""
        pool = self.make_pool()
        self.echoed(self.call(pool))
        [upstream] = self.connector.upstreams
        assert upstream.channel is not None
        self.clock.advance(IDLE_TIMEOUT - 1)
        self.assertEqual(upstream.channel.closes, 0)
        self.clock.advance(1)
        self.assertEqual(upstream.channel.closes, 1)
        self.assertEqual(self.events.kinds("a")[-1], "server.reaped")
        [status] = pool.status()
        self.assertEqual((status.state, status.instances), (ServerState.CONFIGURED, 0))
        self.assertEqual(self.echoed(self.call(pool)), "2:hi")

    def test_use_postpones_reaping(self) -> None:
        """The idle clock counts from the last call, not from the start."""
        pool = self.make_pool()
        self.echoed(self.call(pool))
        self.clock.advance(40)
        self.echoed(self.call(pool))
        self.clock.advance(40)
        channel = self.connector.upstreams[0].channel
        assert channel is not None
        self.assertEqual(channel.closes, 0)
        self.clock.advance(20)
        self.assertEqual(channel.closes, 1)

    def test_not_reaped_while_call_in_flight(self) -> None:
        """A call that runs longer than idle_timeout keeps its instance alive."""
        pool = self.make_pool(call_timeout=1000.0)
        self.connector.holding.add("tools/call")
        d = self.call(pool)
        self.clock.advance(IDLE_TIMEOUT * 5)
        [upstream] = self.connector.upstreams
        assert upstream.channel is not None
        self.assertEqual(upstream.channel.closes, 0)
        upstream.release("tools/call", text_result("late"))
        self.assertEqual(self.echoed(d), "late")
        self.clock.advance(IDLE_TIMEOUT - 1)
        self.assertEqual(upstream.channel.closes, 0)
        self.clock.advance(1)
        self.assertEqual(upstream.channel.closes, 1)

    def test_not_reaped_with_subscription(self) -> None:
        """An instance with an open resource subscription is kept until it is closed."""
        pool = self.make_pool()
        self.successResultOf(Deferred.fromCoroutine(pool.subscribe("a", "demo://a")))
        self.clock.advance(IDLE_TIMEOUT * 5)
        [upstream] = self.connector.upstreams
        assert upstream.channel is not None
        self.assertEqual(upstream.channel.closes, 0)
        self.assertIn("resources/subscribe", upstream.methods())
        self.successResultOf(Deferred.fromCoroutine(pool.unsubscribe("a", "demo://a")))
        self.assertIn("resources/unsubscribe", upstream.methods())
        self.clock.advance(IDLE_TIMEOUT)
        self.assertEqual(upstream.channel.closes, 1)

    def test_subscribe_through_request(self) -> None:
        """A resources/subscribe sent as a plain request counts as a subscription too."""
        pool = self.make_pool()
        self.successResultOf(
            Deferred.fromCoroutine(pool.request("a", "resources/subscribe", {"uri": "demo://a"}))
        )
        self.clock.advance(IDLE_TIMEOUT * 2)
        channel = self.connector.upstreams[0].channel
        assert channel is not None
        self.assertEqual(channel.closes, 0)

    def test_failed_subscription_does_not_pin(self) -> None:
        """A subscription the server refused does not keep the instance from being reaped."""
        pool = self.make_pool()
        self.connector.answers["resources/subscribe"] = _refuse
        self.failureResultOf(Deferred.fromCoroutine(pool.subscribe("a", "demo://a")), RpcError)
        self.clock.advance(IDLE_TIMEOUT)
        channel = self.connector.upstreams[0].channel
        assert channel is not None
        self.assertEqual(channel.closes, 1)


def _refuse(upstream: Any, params: Mapping[str, Any]) -> Any:
    raise RpcError(-32602, "no such resource")


class CrashTests(PoolTestCase):
    def crash_during_call(self, pool: Pool, status: int = 3) -> ServerUnavailable:
        self.connector.holding.add("tools/call")
        d = self.call(pool)
        self.connector.upstreams[-1].crash(status)
        self.connector.holding.discard("tools/call")
        return self.unavailable(d)

    def test_crash_mid_call_fails_call_clearly(self) -> None:
        """The call running when the server dies fails naming the server and its exit status."""
        pool = self.make_pool()
        error = self.crash_during_call(pool, status=3)
        self.assertEqual(error.name, "a")
        self.assertIn("the call was cut short", str(error))
        self.assertIn('upstream "a" exited with status 3', str(error))
        self.assertEqual(error.retry_in, 1.0)
        [exited] = self.events.of("server.exited")
        self.assertEqual(exited["reason"], 'upstream "a" exited with status 3')
        self.assertEqual(exited["retry_in"], 1.0)

    def test_next_call_gets_fresh_instance(self) -> None:
        """After a crash (and its restart delay) the next call runs on a new instance."""
        pool = self.make_pool()
        self.crash_during_call(pool)
        self.clock.advance(1)
        self.assertEqual(self.echoed(self.call(pool)), "2:hi")
        self.assertEqual(len(self.connector.connects), 2)

    def test_crash_while_idle(self) -> None:
        """A server that dies between calls is replaced on the next call, not before."""
        pool = self.make_pool()
        self.echoed(self.call(pool))
        self.connector.upstreams[0].crash(1)
        [status] = pool.status()
        self.assertEqual(status.state, ServerState.FAILED)
        self.assertEqual(status.last_error, 'upstream "a" exited with status 1')
        self.assertEqual(len(self.connector.connects), 1)
        self.clock.advance(1)
        # The back-off has passed, nothing has started it again: still failed, and
        # ready for its next use at once.
        [status] = pool.status()
        self.assertEqual(status.state, ServerState.FAILED)
        self.assertEqual(status.retry_in, 0.0)
        self.assertEqual(status.last_error, 'upstream "a" exited with status 1')
        self.assertEqual(self.echoed(self.call(pool)), "2:hi")
        self.assertEqual(pool.status()[0].state, ServerState.READY)

    def test_repeated_crashes_back_off(self) -> None:
        """Each crash in a row doubles the restart delay, and the error says how long."""
        pool = self.make_pool(backoff=Backoff(first=1.0, factor=2.0, cap=10.0))
        delays = []
        for _ in range(6):
            error = self.crash_during_call(pool)
            assert error.retry_in is not None
            delays.append(error.retry_in)
            early = self.unavailable(self.call(pool))
            self.assertEqual(early.retry_in, error.retry_in)
            self.clock.advance(error.retry_in)
        self.assertEqual(delays, [1.0, 2.0, 4.0, 8.0, 10.0, 10.0])
        self.assertEqual(len(self.connector.connects), 6)

    def test_error_counts_crashes(self) -> None:
        """The error after the third crash in a row says so, and when the next start is."""
        pool = self.make_pool()
        for _ in range(2):
            self.crash_during_call(pool)
            self.clock.advance(10)
        error = self.crash_during_call(pool)
        self.assertIn("crashed 3 times in a row; next start in 4s", str(error))
        self.clock.advance(1)
        early = self.unavailable(self.call(pool))
        self.assertIn("crashed 3 times in a row; next start in 3s", str(early))

    def test_answering_a_call_does_not_reset_backoff(self) -> None:
        """
        A server that answers a call and dies half a second after each start backs off
        more each time: one answer proves nothing.
        """
        pool = self.make_pool(backoff=Backoff(first=1.0, factor=2.0, cap=60.0))
        delays = []
        for _ in range(4):
            self.echoed(self.call(pool))
            self.clock.advance(0.5)
            error = self.crash_during_call(pool)
            assert error.retry_in is not None
            delays.append(error.retry_in)
            self.clock.advance(error.retry_in)
        self.assertEqual(delays, [1.0, 2.0, 4.0, 8.0])

    def test_staying_up_resets_backoff(self) -> None:
        """An instance that stayed up stable_after has its predecessors' crashes forgotten."""
        pool = self.make_pool(stable_after=10.0)
        self.crash_during_call(pool)
        self.clock.advance(1)
        self.crash_during_call(pool)
        self.clock.advance(2)
        self.echoed(self.call(pool))
        self.clock.advance(10)
        self.assertEqual(self.crash_during_call(pool).retry_in, 1.0)

    def test_crashed_instance_released(self) -> None:
        """The pool closes what is left of a crashed instance."""
        pool = self.make_pool()
        self.crash_during_call(pool)
        channel = self.connector.upstreams[0].channel
        assert channel is not None
        self.assertEqual(channel.closes, 1)

    def test_crash_during_listing(self) -> None:
        """A catalogue listing cut short by a crash fails like a call."""
        pool = self.make_pool()
        self.connector.holding.add("tools/list")
        d = Deferred.fromCoroutine(pool.tools("a"))
        self.connector.upstreams[0].crash(9)
        self.assertIn("exited with status 9", str(self.unavailable(d)))

    def test_subscriptions_lost_warned(self) -> None:
        """A crash that ends subscriptions publishes a warning naming them and their revival."""
        pool = self.make_pool()
        self.successResultOf(Deferred.fromCoroutine(pool.subscribe("a", "demo://a")))
        self.connector.upstreams[0].crash()
        [warning] = self.events.of("warning")
        self.assertIn("demo://a", warning["message"])


class SharedSubscriptionTests(PoolTestCase):
    """Interests in a resource counted across holders, and kept across instances."""

    def subscribe(self, pool: Pool, uri: str = "demo://a", **options: Any) -> None:
        self.successResultOf(Deferred.fromCoroutine(pool.subscribe("a", uri, **options)))

    def unsubscribe(self, pool: Pool, uri: str = "demo://a", **options: Any) -> None:
        self.successResultOf(Deferred.fromCoroutine(pool.unsubscribe("a", uri, **options)))

    def test_first_subscribes_last_unsubscribes(self) -> None:
        """Two holders of one URI: one upstream subscribe, and no unsubscribe until both left."""
        pool = self.make_pool()
        self.subscribe(pool, client="alice")
        self.subscribe(pool, client="bob")
        [upstream] = self.connector.upstreams
        self.assertEqual(upstream.methods().count("resources/subscribe"), 1)
        self.unsubscribe(pool, client="alice")
        self.assertNotIn("resources/unsubscribe", upstream.methods())
        self.clock.advance(IDLE_TIMEOUT * 3)
        assert upstream.channel is not None
        self.assertEqual(upstream.channel.closes, 0)
        self.unsubscribe(pool, client="bob")
        self.assertEqual(upstream.methods().count("resources/unsubscribe"), 1)
        self.clock.advance(IDLE_TIMEOUT)
        self.assertEqual(upstream.channel.closes, 1)

    def test_unbalanced_unsubscribe_is_ignored(self) -> None:
        """Releasing more than was held neither unsubscribes twice nor goes negative."""
        pool = self.make_pool()
        self.subscribe(pool)
        self.unsubscribe(pool)
        self.unsubscribe(pool)
        self.subscribe(pool)
        upstream = self.connector.upstreams[0]
        self.assertEqual(upstream.methods().count("resources/unsubscribe"), 1)
        self.assertEqual(upstream.methods().count("resources/subscribe"), 2)

    def test_crash_replaced_and_resubscribed(self) -> None:
        """An instance that crashes while watched is started again after its back-off."""
        pool = self.make_pool()
        self.subscribe(pool)
        self.subscribe(pool, "demo://b")
        self.connector.upstreams[0].crash()
        [warning] = self.events.of("warning")
        self.assertIn("demo://a, demo://b", warning["message"])
        self.assertEqual(len(self.connector.upstreams), 1)
        self.clock.advance(1)
        [_, fresh] = self.connector.upstreams
        subscribed = [
            r.params["uri"]
            for r in fresh.requests
            if r.method == "resources/subscribe" and isinstance(r.params, dict)
        ]
        self.assertEqual(sorted(subscribed), ["demo://a", "demo://b"])

    def test_failed_replacement_retried_with_backoff(self) -> None:
        """A replacement that cannot start is reported and tried again on the back-off."""
        pool = self.make_pool()
        self.subscribe(pool)
        self.connector.failures.append(RuntimeError("no binary"))
        self.connector.upstreams[0].crash()
        self.clock.advance(1)
        [failed] = self.events.of("server.failed")
        self.assertIn("no binary", failed["error"])
        self.assertEqual(len(self.connector.upstreams), 1)
        self.clock.advance(failed["retry_in"])
        self.assertEqual(len(self.connector.upstreams), 2)
        self.assertIn("resources/subscribe", self.connector.upstreams[1].methods())

    def test_restart_resubscribes(self) -> None:
        """A restarted server that is watched is started at once and subscribed again."""
        pool = self.make_pool()
        self.subscribe(pool)
        self.successResultOf(Deferred.fromCoroutine(pool.restart("a")))
        self.clock.advance(0)
        [old, fresh] = self.connector.upstreams
        assert old.channel is not None
        self.assertEqual(old.channel.closes, 1)
        self.assertIn("resources/subscribe", fresh.methods())
        self.assertEqual(pool.status()[0].state, ServerState.READY)
        # The interest moved with it: releasing it unsubscribes the new instance.
        self.unsubscribe(pool)
        self.assertIn("resources/unsubscribe", fresh.methods())

    def test_reload_resubscribes_changed_server(self) -> None:
        """A watched server whose configuration changed is started with the new one."""
        pool = self.make_pool()
        self.subscribe(pool)
        self.successResultOf(Deferred.fromCoroutine(pool.reload(servers(stdio("a", "--new")))))
        self.clock.advance(0)
        [_, fresh] = self.connector.upstreams
        self.assertIn("resources/subscribe", fresh.methods())

    def test_reload_removing_server_warns(self) -> None:
        """A watched server removed from the configuration is not revived; watchers are told."""
        pool = self.make_pool(stdio("a"), stdio("b"))
        self.subscribe(pool)
        self.successResultOf(Deferred.fromCoroutine(pool.reload(servers(stdio("b")))))
        self.clock.advance(10)
        self.assertEqual(len(self.connector.upstreams), 1)
        [warning] = self.events.of("warning")
        self.assertIn("demo://a", warning["message"])

    def test_stop_cancels_revival(self) -> None:
        """Stopping the pool leaves no pending replacement behind."""
        pool = self.make_pool()
        self.subscribe(pool)
        self.connector.upstreams[0].crash()
        self.stop(pool)
        self.assertEqual(self.clock.getDelayedCalls(), [])


class TimeoutTests(PoolTestCase):
    def held_call(self, pool: Pool, **options: Any) -> Deferred[dict[str, Any]]:
        self.connector.holding.add("tools/call")
        return self.call(pool, **options)

    def timed_out(self, d: Deferred[Any]) -> CallTimedOut:
        error = self.failureResultOf(d, CallTimedOut).value
        assert isinstance(error, CallTimedOut)
        return error

    def test_call_timeout(self) -> None:
        """A call with no answer within pool.callTimeout fails and is cancelled upstream."""
        pool = self.make_pool()
        d = self.held_call(pool)
        self.clock.advance(CALL_TIMEOUT - 0.1)
        self.assertNoResult(d)
        self.clock.advance(0.1)
        error = self.timed_out(d)
        self.assertEqual((error.code, error.server, error.tool), ("call_timeout", "a", "echo"))
        self.assertEqual(error.timeout, CALL_TIMEOUT)
        self.assertIn("within 30s", str(error))
        upstream = self.connector.upstreams[0]
        self.assertEqual(upstream.cancelled, [upstream.last("tools/call").id])
        self.assertEqual(pool.in_flight("a", ""), 0)

    def report(self, fraction: float) -> None:
        """The upstream reports progress on the call it holds, under the pool's token."""
        upstream = self.connector.upstreams[0]
        params = upstream.last("tools/call").params
        assert isinstance(params, dict)
        token = params["_meta"]["progressToken"]
        upstream.notify("notifications/progress", {"progressToken": token, "progress": fraction})

    def test_progress_keeps_the_call_alive(self) -> None:
        """
        Each progress report gives a call its bound again, without anyone listening
        to its progress; once the reports stop, the bound runs out as usual.
        """
        pool = self.make_pool()
        d = self.held_call(pool, timeout=1.0)
        for step in range(5):
            self.clock.advance(0.9)
            self.report(step / 5)
        self.assertNoResult(d)
        self.clock.advance(1)
        error = self.timed_out(d)
        self.assertIn("reported progress", str(error))
        self.assertIn("5.5s in all", str(error))
        upstream = self.connector.upstreams[0]
        self.assertEqual(upstream.cancelled, [upstream.last("tools/call").id])

    def test_progress_stops_at_the_ceiling(self) -> None:
        """A call that never stops reporting ends at pool.callMaxDuration all the same."""
        pool = self.make_pool(call_max_duration=10.0)
        d = self.held_call(pool, timeout=2.0)
        for _ in range(20):
            self.clock.advance(1)
            if d.called:
                break
            self.report(0.5)
        self.assertEqual(self.clock.seconds(), 10.0)
        self.assertIn("pool.callMaxDuration", str(self.timed_out(d)))

    def test_progress_sink_still_hears(self) -> None:
        """A caller listening to progress hears each report of the extended call."""
        pool = self.make_pool()
        heard: list[Any] = []
        self.connector.holding.add("tools/call")
        d = self.call(pool, on_progress=lambda p: heard.append(p["progress"]), timeout=1.0)
        self.clock.advance(0.9)
        self.report(0.25)
        self.clock.advance(0.9)
        self.connector.upstreams[0].release("tools/call", text_result("done"))
        self.assertEqual(self.echoed(d), "done")
        self.assertEqual(heard, [0.25])

    def test_shorter_timeout_honoured(self) -> None:
        """A caller may ask for a shorter bound on its own call."""
        pool = self.make_pool()
        d = self.held_call(pool, timeout=5.0)
        self.clock.advance(5)
        self.assertEqual(self.timed_out(d).timeout, 5.0)

    def test_longer_timeout_clamped(self) -> None:
        """A caller asking for more than pool.callTimeout gets pool.callTimeout."""
        pool = self.make_pool()
        d = self.held_call(pool, timeout=CALL_TIMEOUT * 10)
        self.clock.advance(CALL_TIMEOUT)
        self.assertEqual(self.timed_out(d).timeout, CALL_TIMEOUT)

    def test_timeout_is_per_call(self) -> None:
        """One caller's shorter bound does not shorten another's."""
        pool = self.make_pool()
        short, normal = self.held_call(pool, timeout=1.0), self.held_call(pool)
        self.clock.advance(1)
        self.timed_out(short)
        self.assertNoResult(normal)
        self.connector.upstreams[0].release("tools/call", text_result("ok"))
        self.assertEqual(self.echoed(normal), "ok")

    def test_answer_clears_deadline(self) -> None:
        """
        Calls that answer leave no timer of their own behind: their deadlines share one
        timer, which finds nothing due at the first one's time and is not armed again,
        leaving the idle one alone.
        """
        pool = self.make_pool()
        for _ in range(5):
            self.echoed(self.call(pool))
        self.assertEqual(len(self.clock.getDelayedCalls()), 2)
        self.clock.advance(CALL_TIMEOUT)
        self.assertEqual(len(self.clock.getDelayedCalls()), 1)

    def test_deadlines_under_one_timer_expire_at_their_times(self) -> None:
        """
        Calls in flight together, with bounds of their own, each time out at its own
        bound under the one timer, whichever started first, and no sooner.
        """
        pool = self.make_pool()
        late = self.held_call(pool, timeout=3.0)
        self.clock.advance(1)
        soon = self.held_call(pool, timeout=1.0)
        self.clock.advance(0.5)
        later = self.held_call(pool, timeout=2.0)
        self.clock.advance(0.5)
        self.timed_out(soon)
        self.assertNoResult(late)
        self.assertNoResult(later)
        self.clock.advance(1)
        self.timed_out(late)
        self.assertNoResult(later)
        self.clock.advance(0.5)
        self.timed_out(later)

    def test_invalid_timeout_refused(self) -> None:
        """A call timeout that is not a positive number is refused before anything starts."""
        pool = self.make_pool()
        self.failureResultOf(self.call(pool, timeout=0), ValueError)
        self.failureResultOf(self.call(pool, timeout=-1.0), ValueError)
        self.assertEqual(self.connector.connects, [])

    def test_request_timeout(self) -> None:
        """Any request is bounded the same way, and named in the error."""
        pool = self.make_pool()
        self.connector.holding.add("resources/read")
        d = Deferred.fromCoroutine(
            pool.request("a", "resources/read", {"uri": "demo://a"}, timeout=2.0)
        )
        self.clock.advance(2)
        self.assertEqual(self.timed_out(d).tool, "resources/read")


class OnCallTests(PoolTestCase):
    """
    The pool tells C{on_call} of each tool call that reached a configured server, once,
    when it ends: on the way that waits for a start, and on the one that takes a running
    instance at once (the request's own coroutine, the pool's bookkeeping in it).
    """

    def setUp(self) -> None:
        super().setUp()
        self.told: list[tuple[str, str, float, str, str | None]] = []

    def make_told_pool(self) -> Pool:
        return self.make_pool(
            on_call=lambda *ended: self.told.append(ended), call_timeout=CALL_TIMEOUT
        )

    def test_answered_calls(self) -> None:
        """A result is C{ok} and a tool error C{tool_error}, started first or not."""
        pool = self.make_told_pool()
        self.successResultOf(self.call(pool))
        self.successResultOf(self.call(pool))
        self.connector.answers["tools/call"] = lambda u, p: {"content": [], "isError": True}
        self.successResultOf(self.call(pool))
        self.assertEqual(
            self.told,
            [
                ("a", "echo", 0.0, "ok", ""),
                ("a", "echo", 0.0, "ok", ""),
                ("a", "echo", 0.0, "tool_error", ""),
            ],
        )

    def test_failed_calls(self) -> None:
        """
        A call the server refuses, one that times out and one whose server cannot start
        are each an C{error}, told once with the time they took; one to a server nobody
        configured reached none and is not told.
        """
        pool = self.make_told_pool()
        self.successResultOf(self.call(pool))
        self.told.clear()
        self.connector.answers["tools/call"] = _refused
        self.failureResultOf(self.call(pool), RpcError)
        self.connector.holding.add("tools/call")
        held = self.call(pool)
        self.clock.advance(CALL_TIMEOUT)
        self.failureResultOf(held, CallTimedOut)
        self.failureResultOf(self.call(pool, "nowhere"), UnknownServer)
        self.assertEqual(
            self.told,
            [("a", "echo", 0.0, "error", ""), ("a", "echo", CALL_TIMEOUT, "error", "")],
        )
        self.told.clear()
        self.connector.upstreams[0].crash()
        self.connector.failures.append(UpstreamError("a", "broken"))
        self.clock.advance(1.0)
        self.unavailable(self.call(pool))
        self.assertEqual(self.told, [("a", "echo", 0.0, "error", "")])


def _refused(upstream: Any, params: Mapping[str, Any]) -> Any:
    raise RpcError(-32602, "no such tool")


class InFlightTests(PoolTestCase):
    def test_cancelled_call_withdraws_its_questions(self) -> None:
        """
        A call cancelled by its caller (a task cancelled, a client gone) tells the
        upstream, and ends the questions still waiting for it (Call.call_ended).
        """
        pool = self.make_pool()
        self.connector.holding.add("tools/call")
        caller = Call("call-1", {})
        question: Deferred[Any] = Deferred()
        withdrawn: list[str] = []
        caller.awaiting(question, lambda: withdrawn.append("question"))
        d = self.call(pool, call=caller)
        self.assertNoResult(question)
        d.cancel()
        self.failureResultOf(d, CancelledError)
        self.failureResultOf(question, CancelledError)
        upstream = self.connector.upstreams[0]
        self.assertEqual(upstream.cancelled, [upstream.last("tools/call").id])
        caller.withdraw()  # the call holds nothing of the question any more
        self.assertEqual(withdrawn, [])

    def test_counts_every_caller(self) -> None:
        """Requests in flight on a shared instance are counted whoever made them."""
        pool = self.make_pool()
        self.connector.holding.add("tools/call")
        first = self.call(pool, client="alice")
        second = self.call(pool, client="bob")
        self.assertEqual(pool.in_flight("a", ""), 2)
        [status] = pool.status()
        self.assertEqual(status.in_flight, 2)
        upstream = self.connector.upstreams[0]
        upstream.release("tools/call", text_result("1"))
        self.successResultOf(first)
        self.assertEqual(pool.in_flight("a", ""), 1)
        upstream.release("tools/call", text_result("2"))
        self.successResultOf(second)
        self.assertEqual(pool.in_flight("a", ""), 0)

    def test_counts_requests_and_listings(self) -> None:
        """Plain requests and catalogue listings are upstream requests in flight too."""
        pool = self.make_pool()
        self.connector.holding.update({"tools/list", "ping"})
        listing = Deferred.fromCoroutine(pool.tools("a"))
        ping = Deferred.fromCoroutine(pool.request("a", "ping"))
        self.assertEqual(pool.in_flight("a", ""), 2)
        upstream = self.connector.upstreams[0]
        upstream.release("tools/list", {"tools": []})
        upstream.release("ping", {})
        self.assertEqual(self.successResultOf(listing), [])
        self.successResultOf(ping)
        self.assertEqual(pool.in_flight("a", ""), 0)

    def test_failed_call_not_counted(self) -> None:
        """A request that fails upstream is no longer in flight."""
        pool = self.make_pool()
        self.connector.answers["tools/call"] = _refuse
        self.failureResultOf(self.call(pool), RpcError)
        self.assertEqual(pool.in_flight("a", ""), 0)

    def test_unknown_key(self) -> None:
        """Nothing is in flight on a key nobody has used."""
        pool = self.make_pool()
        self.assertEqual(pool.in_flight("a", "nobody"), 0)
        self.assertEqual(pool.in_flight("missing", ""), 0)


class ClientInstanceCapTests(PoolTestCase):
    """pool.maxClientInstances: a client-scoped server's instances, one per caller, capped."""

    def capped(self, limit: int) -> Pool:
        return self.make_pool(stdio("a", scope="client"), max_client_instances=limit)

    def test_least_recently_used_idle_makes_room(self) -> None:
        """
        A new caller beyond the cap replaces the idle instance used longest ago (not the
        oldest started), which is stopped; the count never exceeds the cap.
        """
        pool = self.capped(3)
        for client in ("alice", "bob", "carol"):
            self.echoed(self.call(pool, client=client))
            self.clock.advance(1)
        self.echoed(self.call(pool, client="alice"))  # alice is now the most recent
        self.assertEqual(self.echoed(self.call(pool, client="dave")), "4:hi")
        closes = [u.channel.closes for u in self.connector.upstreams if u.channel]
        self.assertEqual(closes, [0, 1, 0, 0])  # bob's went
        self.assertEqual(pool.status()[0].instances, 3)
        [reaped] = self.events.of("server.reaped")
        self.assertEqual(reaped["instance"], "bob")
        self.assertIn("pool.maxClientInstances", reaped["reason"])
        # Bob comes back: carol's is now the least recently used.
        self.assertEqual(self.echoed(self.call(pool, client="bob")), "5:hi")
        closes = [u.channel.closes for u in self.connector.upstreams if u.channel]
        self.assertEqual(closes, [0, 1, 1, 0, 0])
        self.assertEqual(pool.status()[0].instances, 3)

    def test_new_process_waits_for_the_old_one(self) -> None:
        """The replacement is spawned only once the replaced process is gone."""
        pool = self.capped(1)
        self.echoed(self.call(pool, client="alice"))
        [alice] = self.connector.upstreams
        assert alice.channel is not None
        alice.channel.closing = Deferred()
        bob = self.call(pool, client="bob")
        self.assertNoResult(bob)
        self.assertEqual(len(self.connector.connects), 1)
        # A third caller meanwhile may not take the place the closing one frees.
        carol = self.call(pool, client="carol")
        self.assertEqual(self.failureResultOf(carol, TooManyInstances).type, TooManyInstances)
        alice.channel.closing.callback(None)
        self.assertEqual(self.echoed(bob), "2:hi")
        self.assertEqual(len(self.connector.connects), 2)

    def test_every_instance_busy_refused_at_once(self) -> None:
        """
        When every instance is busy a new caller fails at once, naming the cap and the
        setting, with a retry hint; nothing is started or stopped.  Once one is idle,
        the caller gets an instance.
        """
        pool = self.capped(2)
        self.connector.holding.add("tools/call")
        alice, bob = self.call(pool, client="alice"), self.call(pool, client="bob")
        error = self.failureResultOf(self.call(pool, client="carol"), TooManyInstances).value
        assert isinstance(error, TooManyInstances)
        self.assertEqual(error.code, "too_many_instances")
        self.assertEqual((error.limit, error.retry_in), (2, 1.0))
        self.assertIn("'a' already runs 2 instances", str(error))
        self.assertIn("pool.maxClientInstances", str(error))
        self.assertEqual(len(self.connector.connects), 2)
        self.assertEqual([u.channel.closes for u in self.connector.upstreams if u.channel], [0, 0])
        self.connector.holding.discard("tools/call")
        self.connector.upstreams[1].release("tools/call", text_result("bob done"))
        self.successResultOf(bob)
        self.assertEqual(self.echoed(self.call(pool, client="carol")), "3:hi")
        self.assertNoResult(alice)

    def test_saturation_logged_once(self) -> None:
        """Refusals are logged once per saturation episode, not once per call."""
        logged = observe_log(self)

        def warnings() -> int:
            return sum(1 for e in logged if "are busy" in str(e.get("log_format", "")))

        pool = self.capped(1)
        self.connector.holding.add("tools/call")
        self.call(pool, client="alice")
        for _ in range(5):
            self.failureResultOf(self.call(pool, client="bob"), TooManyInstances)
        self.assertEqual(warnings(), 1)
        self.connector.upstreams[0].release("tools/call", text_result("done"))
        self.connector.holding.discard("tools/call")
        self.echoed(self.call(pool, client="bob"))  # took alice's place: the episode ended
        self.connector.holding.add("tools/call")
        self.call(pool, client="bob")
        self.failureResultOf(self.call(pool, client="carol"), TooManyInstances)
        self.assertEqual(warnings(), 2)

    def test_subscribed_instance_is_not_idle(self) -> None:
        """An instance holding a subscription is never stopped to make room."""
        pool = self.capped(1)
        self.successResultOf(
            Deferred.fromCoroutine(pool.subscribe("a", "demo://a", client="alice"))
        )
        self.failureResultOf(self.call(pool, client="bob"), TooManyInstances)
        self.assertEqual(self.connector.upstreams[0].channel.closes, 0)  # type: ignore[union-attr]

    def test_shared_servers_are_not_capped(self) -> None:
        """The cap is on client-scoped instances: a shared server keeps its one instance."""
        pool = self.make_pool(stdio("a"), stdio("b"), max_client_instances=1)
        self.echoed(self.call(pool, "a", client="alice"))
        self.echoed(self.call(pool, "b", client="bob"))
        self.assertEqual([s.instances for s in pool.status()], [1, 1])

    def test_cap_must_be_positive(self) -> None:
        """A cap below one is refused when the pool is made."""
        self.assertRaises(ValueError, self.capped, 0)


def legacy_host(legacy: bool = True) -> Call:
    """A call made for a handshake-era host (L{mcpx.call.Call.legacy})."""
    return Call("call-legacy", {}, legacy=legacy)


class EraMirroringTests(PoolTestCase):
    """
    A handshake-era host's call to a dual-era server runs on a legacy-era instance beside
    the server's own, started by the first such call; a server that refuses it is
    bridged from then on (spec/era-mirroring.md).
    """

    def test_a_legacy_hosts_call_gets_a_legacy_era_instance(self) -> None:
        """
        Modern hosts' calls use the server's own instance; the first legacy host's call
        starts the legacy-era one, which later legacy calls share.
        """
        self.connector.modern.add("a")
        pool = self.make_pool()
        self.assertEqual(self.echoed(self.call(pool)), "1:hi")
        self.assertEqual(self.connector.eras, [None])
        self.assertEqual(self.echoed(self.call(pool, call=legacy_host())), "2:hi")
        self.assertEqual(self.echoed(self.call(pool, call=legacy_host())), "2:hi")
        self.assertEqual(self.echoed(self.call(pool, call=legacy_host(legacy=False))), "1:hi")
        self.assertEqual(self.connector.eras, [None, Era.LEGACY])
        self.assertEqual(pool.status()[0].instances, 2)
        # Its status shows the era of its own instance while that runs, and the
        # legacy-era instance's once that alone runs.
        self.assertEqual(pool.status()[0].era, "modern")
        self.connector.started("a")[0].crash()
        self.assertEqual(pool.status()[0].era, "legacy")
        # The legacy-era instance lives like any other: reaped once idle.
        self.clock.advance(IDLE_TIMEOUT + 1)
        self.assertEqual(pool.status()[0].instances, 0)
        self.stop(pool)

    def test_a_legacy_call_needs_no_own_instance_once_mirrored(self) -> None:
        """
        Once the legacy-era instance runs, a legacy host's call goes there even while the
        server's own instance is down (crashed, waiting out its back-off).
        """
        self.connector.modern.add("a")
        pool = self.make_pool()
        self.assertEqual(self.echoed(self.call(pool, call=legacy_host())), "2:hi")
        self.connector.started("a")[0].crash()
        self.assertEqual(self.echoed(self.call(pool, call=legacy_host())), "2:hi")
        self.unavailable(self.call(pool))
        self.stop(pool)

    def test_the_first_legacy_call_starts_the_own_instance_first(self) -> None:
        """With nothing running, the server's own era is learned by starting it."""
        self.connector.modern.add("a")
        pool = self.make_pool()
        self.assertEqual(self.echoed(self.call(pool, call=legacy_host())), "2:hi")
        self.assertEqual(self.connector.eras, [None, Era.LEGACY])
        self.stop(pool)

    def test_legacy_and_pinned_servers_are_not_mirrored(self) -> None:
        """A server found legacy, or pinned to an era, serves every host on one instance."""
        pinned = evolve(stdio("p"), protocol="modern")
        self.connector.modern.add("p")
        pool = self.make_pool(stdio("a"), pinned)
        for server in ("a", "p"):
            self.assertEqual(self.echoed(self.call(pool, server, call=legacy_host()))[2:], "hi")
        self.assertEqual(self.connector.eras, [None, None])
        self.stop(pool)

    def test_a_modern_only_server_is_bridged_from_then_on(self) -> None:
        """
        A server that refuses the legacy-era session serves that call on the instance
        opened in its stead, and every later legacy call on its own instance.
        """
        self.connector.modern.add("a")
        self.connector.modern_only.add("a")
        pool = self.make_pool()
        self.assertEqual(self.echoed(self.call(pool)), "1:hi")
        self.assertEqual(self.echoed(self.call(pool, call=legacy_host())), "2:hi")
        self.assertEqual(self.echoed(self.call(pool, call=legacy_host())), "1:hi")
        self.assertEqual(self.connector.eras, [None, Era.LEGACY])
        self.stop(pool)

    def test_a_warm_modern_only_servers_extra_instance_is_reaped(self) -> None:
        """
        A warm server keeps its own instance, but not the one opened in place of the
        legacy-era instance it refused: that one is reaped once idle.
        """
        self.connector.modern.add("a")
        self.connector.modern_only.add("a")
        pool = self.make_pool(evolve(stdio("a"), warm=True))
        self.assertEqual(self.echoed(self.call(pool, call=legacy_host())), "2:hi")
        self.assertEqual(pool.status()[0].instances, 2)
        self.clock.advance(IDLE_TIMEOUT + 1)
        self.assertEqual(pool.status()[0].instances, 1)
        self.assertEqual(self.echoed(self.call(pool, call=legacy_host())), "1:hi")
        self.stop(pool)

    def test_both_eras_count_against_the_client_cap(self) -> None:
        """
        A client-scoped server's legacy-era instances count against
        pool.maxClientInstances with its own: a third instance replaces the least
        recently used idle one.
        """
        self.connector.modern.add("c")
        pool = self.make_pool(stdio("c", scope="client"), max_client_instances=2)
        self.assertEqual(self.echoed(self.call(pool, "c", client="x")), "1:hi")
        self.clock.advance(1)
        self.assertEqual(self.echoed(self.call(pool, "c", client="x", call=legacy_host())), "2:hi")
        self.clock.advance(1)
        self.assertEqual(self.echoed(self.call(pool, "c", client="y")), "3:hi")
        self.assertEqual(pool.status()[0].instances, 2)
        # The least recently used, x's own (modern) instance, made room.
        self.assertIsNotNone(self.connector.started("c")[0].channel.lost)  # type: ignore[union-attr]
        self.assertEqual(self.echoed(self.call(pool, "c", client="x", call=legacy_host())), "2:hi")
        self.stop(pool)


class ScopeTests(PoolTestCase):
    def test_client_scope_separate_instances(self) -> None:
        """A client-scoped server runs one instance per caller, each reused by its caller."""
        keys = []

        def handlers(server: str, scope: str) -> UpstreamHandlers:
            keys.append((server, scope))
            return UpstreamHandlers()

        pool = self.make_pool(stdio("a", scope="client"), handlers=handlers)
        self.assertEqual(self.echoed(self.call(pool, client="alice")), "1:hi")
        self.assertEqual(self.echoed(self.call(pool, client="bob")), "2:hi")
        self.assertEqual(self.echoed(self.call(pool, client="alice")), "1:hi")
        self.assertEqual(keys, [("a", "alice"), ("a", "bob")])
        self.assertEqual(pool.scope_key("a", "alice"), "alice")
        [status] = pool.status()
        self.assertEqual((status.instances, status.scope), (2, "client"))

    def test_shared_scope_one_instance(self) -> None:
        """A shared server runs one instance whoever calls."""
        pool = self.make_pool(stdio("a"))
        self.assertEqual(self.echoed(self.call(pool, client="alice")), "1:hi")
        self.assertEqual(self.echoed(self.call(pool, client="bob")), "1:hi")
        self.assertEqual(pool.scope_key("a", "alice"), "")
        self.assertEqual(pool.status()[0].instances, 1)

    def test_client_instances_reaped_separately(self) -> None:
        """Each caller's instance has its own idle clock."""
        pool = self.make_pool(stdio("a", scope="client"))
        self.echoed(self.call(pool, client="alice"))
        self.clock.advance(30)
        self.echoed(self.call(pool, client="bob"))
        self.clock.advance(30)
        alice, bob = (u.channel for u in self.connector.upstreams)
        assert alice is not None and bob is not None
        self.assertEqual((alice.closes, bob.closes), (1, 0))
        self.clock.advance(30)
        self.assertEqual(bob.closes, 1)

    def test_crash_affects_only_its_client(self) -> None:
        """One caller's crashed instance does not hold back another caller's."""
        pool = self.make_pool(stdio("a", scope="client"))
        self.echoed(self.call(pool, client="alice"))
        self.connector.upstreams[0].crash()
        self.unavailable(self.call(pool, client="alice"))
        self.assertEqual(self.echoed(self.call(pool, client="bob")), "2:hi")


class ReloadTests(PoolTestCase):
    def test_reload(self) -> None:
        """Reload stops removed and changed servers, keeps unchanged ones warm, adds new ones."""
        pool = self.make_pool(stdio("kept"), stdio("removed"), stdio("changed"))
        for name in ("kept", "removed", "changed"):
            self.echoed(self.call(pool, name))
        kept, removed, changed = (u.channel for u in self.connector.upstreams)
        assert kept is not None and removed is not None and changed is not None
        new = servers(stdio("kept"), stdio("changed", "--verbose"), stdio("added"))
        report = self.successResultOf(Deferred.fromCoroutine(pool.reload(new)))
        self.assertEqual(report, ReloadReport(("removed",), ("added",), ("changed",), ("kept",)))
        self.assertEqual(
            report.to_json(),
            {
                "removed": ["removed"],
                "added": ["added"],
                "changed": ["changed"],
                "unchanged": ["kept"],
            },
        )
        self.assertEqual((kept.closes, removed.closes, changed.closes), (0, 1, 1))
        self.assertEqual(self.echoed(self.call(pool, "kept")), "1:hi")
        self.failureResultOf(self.call(pool, "removed"), UnknownServer)
        self.assertEqual(self.echoed(self.call(pool, "changed")), "4:hi")
        changed_config = self.connector.connects[-1][1]
        assert isinstance(changed_config, StdioServer)
        self.assertEqual(changed_config.args, ("--verbose",))
        self.assertEqual(self.echoed(self.call(pool, "added")), "5:hi")
        self.assertIn(("server.restarted", "changed"), [(k, s) for k, s, _ in self.events.seen])

    def test_reload_waits_for_processes(self) -> None:
        """Reload finishes once the processes it stopped are gone."""
        pool = self.make_pool(stdio("a"))
        self.echoed(self.call(pool))
        channel = self.connector.upstreams[0].channel
        assert channel is not None
        channel.closing = Deferred()
        d = Deferred.fromCoroutine(pool.reload(servers()))
        self.assertNoResult(d)
        channel.closing.callback(None)
        self.assertEqual(self.successResultOf(d).removed, ("a",))

    def test_reload_cuts_calls_short(self) -> None:
        """A call on a server the reload removed fails saying why."""
        pool = self.make_pool(stdio("a"))
        self.connector.holding.add("tools/call")
        d = self.call(pool)
        self.successResultOf(Deferred.fromCoroutine(pool.reload(servers())))
        self.assertIn("removed from the configuration", str(self.unavailable(d)))


class RestartTests(PoolTestCase):
    def test_restart(self) -> None:
        """Restart closes the server's instances; the next use starts it afresh."""
        pool = self.make_pool(stdio("a", scope="client"))
        self.echoed(self.call(pool, client="alice"))
        self.echoed(self.call(pool, client="bob"))
        self.successResultOf(Deferred.fromCoroutine(pool.restart("a")))
        for upstream in self.connector.upstreams:
            assert upstream.channel is not None
            self.assertEqual(upstream.channel.closes, 1)
        self.assertEqual(self.echoed(self.call(pool, client="alice")), "3:hi")
        self.assertIn("server.restarted", self.events.kinds("a"))

    def test_restart_clears_backoff(self) -> None:
        """Restarting a server that keeps crashing lets the next call start it at once."""
        pool = self.make_pool()
        self.echoed(self.call(pool))
        self.connector.upstreams[0].crash()
        self.unavailable(self.call(pool))
        self.successResultOf(Deferred.fromCoroutine(pool.restart("a")))
        self.assertEqual(self.echoed(self.call(pool)), "2:hi")
        self.assertEqual(pool.status()[0].last_error, None)

    def test_restart_while_starting(self) -> None:
        """A start in progress is abandoned by a restart; its callers are told why."""
        pool = self.make_pool()
        self.connector.gate = Deferred()
        d = self.call(pool)
        self.successResultOf(Deferred.fromCoroutine(pool.restart("a")))
        self.assertIn("restarted", str(self.unavailable(d)))
        self.assertEqual(self.connector.upstreams, [])
        self.connector.gate = None
        self.assertEqual(self.echoed(self.call(pool)), "1:hi")

    def test_restart_unknown(self) -> None:
        """Restarting a server that is not configured is an error naming it."""
        pool = self.make_pool()
        self.failureResultOf(Deferred.fromCoroutine(pool.restart("b")), UnknownServer)


class StopTests(PoolTestCase):
    def test_stop_closes_everything(self) -> None:
        """Stopping the pool closes every instance of every server and leaves no timer."""
        pool = self.make_pool(stdio("a"), stdio("b", scope="client"))
        self.echoed(self.call(pool, "a"))
        self.echoed(self.call(pool, "b", client="alice"))
        self.echoed(self.call(pool, "b", client="bob"))
        self.stop(pool)
        self.assertEqual([u.channel.closes for u in self.connector.upstreams if u.channel], [1] * 3)
        self.assertEqual(self.clock.getDelayedCalls(), [])
        self.assertEqual([s.instances for s in pool.status()], [0, 0])

    def test_stop_waits_for_reaping(self) -> None:
        """Stopping finishes only once every process has been reaped."""
        pool = self.make_pool()
        self.echoed(self.call(pool))
        channel = self.connector.upstreams[0].channel
        assert channel is not None
        channel.closing = Deferred()
        d = pool.stopService()
        self.assertNoResult(d)
        channel.closing.callback(None)
        self.successResultOf(d)

    def test_stop_abandons_start(self) -> None:
        """A start in progress when the pool stops is cancelled; its caller is told."""
        pool = self.make_pool()
        self.connector.gate = Deferred()
        d = self.call(pool)
        self.stop(pool)
        self.assertIn("shutting down", str(self.unavailable(d)))
        self.assertEqual(self.connector.upstreams, [])

    def test_stop_cuts_calls_short(self) -> None:
        """Calls in flight when the pool stops fail saying so."""
        pool = self.make_pool()
        self.connector.holding.add("tools/call")
        d = self.call(pool)
        self.stop(pool)
        error = self.unavailable(d)
        self.assertIn("the call was cut short: mcpx is shutting down", str(error))

    def test_no_calls_after_stop(self) -> None:
        """Once stopping, the pool starts nothing new."""
        pool = self.make_pool()
        self.stop(pool)
        self.assertIn("shutting down", str(self.unavailable(self.call(pool))))
        self.assertEqual(self.connector.connects, [])


class CatalogueTests(PoolTestCase):
    def listed(self, pool: Pool, kind: str = "tools", server: str = "a") -> list[dict[str, Any]]:
        lister = getattr(pool, kind)
        result: list[dict[str, Any]] = self.successResultOf(Deferred.fromCoroutine(lister(server)))
        return result

    def lists(self, method: str) -> int:
        return sum(u.methods().count(method) for u in self.connector.upstreams)

    def test_cached(self) -> None:
        """Each catalogue is listed once per instance and then served from the cache."""
        pool = self.make_pool()
        for _ in range(3):
            self.assertEqual(self.listed(pool), [{"name": "echo", "inputSchema": {}}])
            self.assertEqual(self.listed(pool, "prompts"), [{"name": "greet"}])
            self.assertEqual(self.listed(pool, "resources")[0]["uri"], "demo://a")
            self.assertEqual(self.listed(pool, "templates"), [])
        for method in ("tools/list", "prompts/list", "resources/list", "resources/templates/list"):
            self.assertEqual(self.lists(method), 1, method)

    def test_cache_copy(self) -> None:
        """Changing a list a caller got does not change what the next caller gets."""
        pool = self.make_pool()
        self.listed(pool).clear()
        self.assertEqual(len(self.listed(pool)), 1)

    def test_cached_catalogue_taken_without_waiting(self) -> None:
        """
        cached_catalogue hands out a list the pool has cached and lists nothing: none
        before the first listing, for an unknown server or after a list_changed.
        """
        pool = self.make_pool()
        self.assertIsNone(pool.cached_catalogue("a", "tools"))
        self.assertIsNone(pool.cached_catalogue("nope", "tools"))
        self.listed(pool)
        self.assertEqual(pool.cached_catalogue("a", "tools"), [{"name": "echo", "inputSchema": {}}])
        self.assertIsNone(pool.cached_catalogue("a", "prompts"))
        self.connector.upstreams[0].notify("notifications/tools/list_changed")
        self.assertIsNone(pool.cached_catalogue("a", "tools"))
        self.assertEqual(self.lists("tools/list"), 1)

    def test_cached_catalogue_of_the_instance_running_now(self) -> None:
        """
        cached_catalogue, asked again and again, gives the list of the instance serving
        the caller now: each client's own of a client-scoped server, and nothing from an
        instance that crashed, was restarted or whose configuration a reload changed,
        until the next one lists.
        """
        pool = self.make_pool(stdio("a"), stdio("b", scope="client"))

        def listed_for(server: str, client: str = "") -> None:
            self.successResultOf(Deferred.fromCoroutine(pool.tools(server, client=client)))

        listed_for("a")
        tools = [{"name": "echo", "inputSchema": {}}]
        self.assertEqual(pool.cached_catalogue("a", "tools"), tools)
        self.assertEqual(pool.cached_catalogue("a", "tools"), tools)
        listed_for("b", "alice")
        self.assertEqual(pool.cached_catalogue("b", "tools", client="alice"), tools)
        self.assertIsNone(pool.cached_catalogue("b", "tools", client="bob"))
        self.assertEqual(pool.cached_catalogue("b", "tools", client="alice"), tools)
        self.successResultOf(Deferred.fromCoroutine(pool.restart("a")))
        self.assertIsNone(pool.cached_catalogue("a", "tools"))
        listed_for("a")
        self.assertEqual(pool.cached_catalogue("a", "tools"), tools)
        [first, *_, last] = self.connector.started("a")
        self.assertIsNot(first, last)
        last.crash()
        self.assertIsNone(pool.cached_catalogue("a", "tools"))
        self.clock.advance(1)  # the back-off after a crash
        listed_for("a")
        self.assertEqual(pool.cached_catalogue("a", "tools"), tools)
        changed = servers(stdio("a", "--new"), stdio("b", scope="client"))
        self.successResultOf(Deferred.fromCoroutine(pool.reload(changed)))
        self.assertIsNone(pool.cached_catalogue("a", "tools"))
        self.assertEqual(pool.cached_catalogue("b", "tools", client="alice"), tools)

    def test_concurrent_listings_shared(self) -> None:
        """Callers asking while a catalogue is being listed share that one listing."""
        pool = self.make_pool()
        self.connector.holding.add("tools/list")
        first = Deferred.fromCoroutine(pool.tools("a"))
        second = Deferred.fromCoroutine(pool.tools("a"))
        self.connector.upstreams[0].release("tools/list", {"tools": [{"name": "x"}]})
        self.assertEqual(self.successResultOf(first), [{"name": "x"}])
        self.assertEqual(self.successResultOf(second), [{"name": "x"}])
        self.assertEqual(self.lists("tools/list"), 1)

    def test_list_changed_invalidates(self) -> None:
        """tools/list_changed makes the next tools() list again, and nothing else."""
        pool = self.make_pool()
        self.listed(pool)
        self.listed(pool, "prompts")
        self.connector.upstreams[0].notify("notifications/tools/list_changed")
        self.listed(pool)
        self.listed(pool, "prompts")
        self.assertEqual(self.lists("tools/list"), 2)
        self.assertEqual(self.lists("prompts/list"), 1)

    def test_prompts_list_changed(self) -> None:
        """prompts/list_changed makes the next prompts() list again."""
        pool = self.make_pool()
        self.listed(pool, "prompts")
        self.connector.upstreams[0].notify("notifications/prompts/list_changed")
        self.listed(pool, "prompts")
        self.assertEqual(self.lists("prompts/list"), 2)

    def test_resources_list_changed(self) -> None:
        """resources/list_changed makes both resources and templates stale."""
        pool = self.make_pool()
        self.listed(pool, "resources")
        self.listed(pool, "templates")
        self.connector.upstreams[0].notify("notifications/resources/list_changed")
        self.listed(pool, "resources")
        self.listed(pool, "templates")
        self.assertEqual(self.lists("resources/list"), 2)
        self.assertEqual(self.lists("resources/templates/list"), 2)

    def test_change_during_listing_not_cached(self) -> None:
        """A listing the server changed under is returned but not kept."""
        pool = self.make_pool()
        self.connector.holding.add("tools/list")
        d = Deferred.fromCoroutine(pool.tools("a"))
        upstream = self.connector.upstreams[0]
        upstream.notify("notifications/tools/list_changed")
        upstream.release("tools/list", {"tools": [{"name": "old"}]})
        self.assertEqual(self.successResultOf(d), [{"name": "old"}])
        self.connector.holding.discard("tools/list")
        self.assertEqual(self.listed(pool), [{"name": "echo", "inputSchema": {}}])

    def test_undeclared_catalogue_empty(self) -> None:
        """A server that declares no prompts has none, and is not asked."""
        del self.connector.capabilities["prompts"]
        pool = self.make_pool()
        self.assertEqual(self.listed(pool, "prompts"), [])
        self.assertEqual(self.lists("prompts/list"), 0)

    def test_new_instance_lists_again(self) -> None:
        """A fresh instance lists its catalogue afresh."""
        pool = self.make_pool()
        self.listed(pool)
        self.successResultOf(Deferred.fromCoroutine(pool.restart("a")))
        self.listed(pool)
        self.assertEqual(self.lists("tools/list"), 2)

    def test_listing_error_not_cached(self) -> None:
        """A listing that fails is not cached: the next caller asks again."""
        pool = self.make_pool()
        self.connector.answers["tools/list"] = _refuse
        self.failureResultOf(Deferred.fromCoroutine(pool.tools("a")), RpcError)
        self.failureResultOf(Deferred.fromCoroutine(pool.tools("a")), RpcError)
        self.assertEqual(self.lists("tools/list"), 2)


class AppReadTests(PoolTestCase):
    """MCP Apps' ui:// resources are kept in the catalogue: repeated reads stay in mcpx."""

    APP = "ui://app/mcp-app.html"

    def setUp(self) -> None:
        super().setUp()
        self.hints: dict[str, Any] = {}
        self.serial = 0

        def read(upstream: Any, params: Mapping[str, Any]) -> Any:
            self.serial += 1
            text = f"<html>{self.serial}</html>"
            content = {"uri": params["uri"], "mimeType": "text/html;profile=mcp-app", "text": text}
            return {"contents": [content], **self.hints}

        self.connector.answers["resources/read"] = read
        self.connector.capabilities["resources"] = {"subscribe": True}

    def read_result(self, pool: Pool, uri: str = APP) -> dict[str, Any]:
        result: dict[str, Any] = self.successResultOf(
            Deferred.fromCoroutine(pool.request("a", "resources/read", {"uri": uri}))
        )
        return result

    def read(self, pool: Pool, uri: str = APP) -> str:
        text: str = self.read_result(pool, uri)["contents"][0]["text"]
        return text

    def reads(self) -> int:
        return sum(u.methods().count("resources/read") for u in self.connector.upstreams)

    def test_kept_until_they_expire(self) -> None:
        """
        An app's resource is read from the server once and then from the catalogue
        (the same text, a copy a caller may change), for APP_READ_TTL without a hint;
        any other resource is read each time.
        """
        pool = self.make_pool()
        self.assertEqual([self.read(pool) for _ in range(3)], ["<html>1</html>"] * 3)
        self.assertEqual(self.reads(), 1)
        self.read(pool, "demo://a")
        self.read(pool, "demo://a")
        self.assertEqual(self.reads(), 3)
        self.clock.advance(APP_READ_TTL)
        self.assertEqual(self.read(pool), "<html>4</html>")
        self.assertEqual(self.reads(), 4)

    def test_cache_hints_honoured(self) -> None:
        """
        A result's 2026-07-28 C{ttlMs} says how long it is kept when its C{cacheScope}
        is C{"public"}; C{ttlMs: 0}, C{cacheScope: "private"} and a C{ttlMs} with any
        other scope (or none) keep nothing.
        """
        pool = self.make_pool()
        self.hints = {"ttlMs": 2000, "cacheScope": "public"}
        self.read(pool)
        self.clock.advance(1.5)
        self.read(pool)
        self.assertEqual(self.reads(), 1)
        self.clock.advance(0.5)
        self.read(pool)
        self.assertEqual(self.reads(), 2)
        self.clock.advance(2)
        for hints in (
            {"ttlMs": 0},
            {"ttlMs": 60000, "cacheScope": "private"},
            # A hint that does not say the answer may be shared is no leave to share it.
            {"ttlMs": 60000},
            {"ttlMs": 60000, "cacheScope": "Public"},
            {"ttlMs": 60000, "cacheScope": ["public"]},
        ):
            self.hints = hints
            before = self.reads()
            self.read(pool)
            self.read(pool)
            self.assertEqual(self.reads(), before + 2, hints)

    def test_a_kept_read_gives_the_time_that_remains(self) -> None:
        """
        A read answered from the catalogue carries the C{ttlMs} that remains of the
        server's, not the whole of it again, so a host that caches it keeps it no longer
        than the server allowed; a read the server gave no hint keeps having none.
        """
        pool = self.make_pool()
        self.hints = {"ttlMs": 2000, "cacheScope": "public"}
        first = self.read_result(pool)
        self.assertEqual(first["ttlMs"], 2000)
        self.clock.advance(1.5)
        kept = self.read_result(pool)
        self.assertEqual((kept["ttlMs"], kept["cacheScope"]), (500, "public"))
        self.assertEqual(kept["contents"], first["contents"])
        self.clock.advance(0.25)
        self.assertEqual(self.read_result(pool)["ttlMs"], 250)
        self.assertEqual(self.reads(), 1)
        self.clock.advance(0.25)
        self.assertEqual(self.read_result(pool)["ttlMs"], 2000)
        self.assertEqual(self.reads(), 2)
        self.hints = {}
        self.clock.advance(2)
        self.read_result(pool)
        self.clock.advance(1)
        self.assertNotIn("ttlMs", self.read_result(pool))
        self.assertEqual(self.reads(), 3)

    def test_forgotten_when_the_server_says_it_changed(self) -> None:
        """C{resources/updated} for it, or C{resources/list_changed}, and it is read again."""
        pool = self.make_pool()
        self.read(pool)
        upstream = self.connector.upstreams[0]
        upstream.notify("notifications/resources/updated", {"uri": "ui://other/x.html"})
        self.read(pool)
        self.assertEqual(self.reads(), 1)
        upstream.notify("notifications/resources/updated", {"uri": self.APP})
        self.assertEqual(self.read(pool), "<html>2</html>")
        upstream.notify("notifications/resources/list_changed")
        self.assertEqual(self.read(pool), "<html>3</html>")
        self.read(pool)
        self.assertEqual(self.reads(), 3)

    def test_not_kept_past_its_instance(self) -> None:
        """A new instance of the server (a restart) reads it afresh."""
        pool = self.make_pool()
        self.read(pool)
        self.successResultOf(Deferred.fromCoroutine(pool.restart("a")))
        self.assertEqual(self.read(pool), "<html>2</html>")

    def test_a_read_that_asked_its_caller_is_not_kept(self) -> None:
        """
        A server that asks a question while it answers a read (here an elicitation)
        made the answer depend on the caller who answered it: on a server every
        principal shares, it is not kept, so another principal's read reaches the
        server and gets its own answer, never the first one's.
        """
        said = {"alice": "alice-pin", "bob": "bob-pin"}
        answering: list[str] = []

        async def elicit(params: Mapping[str, Any]) -> Mapping[str, Any]:
            return {"action": "accept", "content": {"pin": said[answering[-1]]}}

        def read(upstream: Any, params: Mapping[str, Any]) -> Any:
            asked = upstream.peer.request(
                "elicitation/create",
                {"message": "pin?", "requestedSchema": {"type": "object", "properties": {}}},
            )

            def answered(answer: Mapping[str, Any]) -> Any:
                text = f"<html>{answer['content']['pin']}</html>"
                return {"contents": [{"uri": params["uri"], "text": text}]}

            return asked.addCallback(answered)

        self.connector.answers["resources/read"] = read
        pool = self.make_pool(handlers=lambda server, scope: UpstreamHandlers(elicitation=elicit))
        texts = []
        for who in ("alice", "bob"):
            answering.append(who)
            found = Deferred.fromCoroutine(
                pool.request("a", "resources/read", {"uri": self.APP}, client=who)
            )
            texts.append(self.successResultOf(found)["contents"][0]["text"])
        self.assertEqual(texts, ["<html>alice-pin</html>", "<html>bob-pin</html>"])
        self.assertEqual(self.reads(), 2)

    def test_what_a_read_holds_outside_its_text_counts(self) -> None:
        """
        The bound on what kept reads hold counts the whole result: a server that pads
        an empty text with more than L{MAX_APP_READ_CHARS} characters in C{_meta}, or
        spread over keys, gets nothing kept (each read reaches it again), and one read
        a little under the bound is kept.
        """
        pool = self.make_pool()
        padded: dict[str, Any] = {}

        def read(upstream: Any, params: Mapping[str, Any]) -> Any:
            content = {"uri": params["uri"], "text": "", "_meta": padded}
            return {"contents": [content]}

        self.connector.answers["resources/read"] = read
        for padding in (
            {"pad": "x" * (MAX_APP_READ_CHARS + 1)},
            {f"{n:08}" + "k" * 1000: n for n in range(MAX_APP_READ_CHARS // 1000)},
        ):
            padded.clear()
            padded.update(padding)
            before = self.reads()
            self.read_result(pool)
            self.read_result(pool)
            self.assertEqual(self.reads(), before + 2)
        padded.clear()
        padded["pad"] = "x" * (MAX_APP_READ_CHARS // 2)
        before = self.reads()
        self.read_result(pool)
        self.read_result(pool)
        self.assertEqual(self.reads(), before + 1)


class NotificationTests(PoolTestCase):
    def test_progress_routed_to_its_call(self) -> None:
        """Progress about a call reaches that call's callback and no other."""
        pool = self.make_pool()
        self.connector.holding.add("tools/call")
        heard: dict[str, list[dict[str, Any]]] = {"first": [], "second": []}
        first = self.call(pool, on_progress=heard["first"].append)
        second = self.call(pool, on_progress=heard["second"].append)
        upstream = self.connector.upstreams[0]
        tokens = [
            r.params["_meta"]["progressToken"]
            for r in upstream.requests
            if r.method == "tools/call" and isinstance(r.params, dict)
        ]
        self.assertEqual(tokens, ["mcpx-1", "mcpx-2"])
        upstream.notify("notifications/progress", {"progressToken": "mcpx-2", "progress": 1})
        upstream.notify(
            "notifications/progress",
            {"progressToken": "mcpx-1", "progress": 5, "total": 10, "message": "half"},
        )
        self.assertEqual(
            heard["first"],
            [{"progressToken": "mcpx-1", "progress": 5, "total": 10, "message": "half"}],
        )
        self.assertEqual(heard["second"], [{"progressToken": "mcpx-2", "progress": 1}])
        upstream.release("tools/call", text_result("1"))
        upstream.release("tools/call", text_result("2"))
        self.successResultOf(first)
        self.successResultOf(second)
        self.assertEqual(
            self.events.of("progress")[1],
            {"progressToken": "mcpx-1", "progress": 5, "total": 10, "message": "half"},
        )

    def test_progress_after_call_ignored(self) -> None:
        """Progress that arrives after its call ended reaches no callback."""
        pool = self.make_pool()
        heard: list[dict[str, Any]] = []
        self.echoed(self.call(pool, on_progress=heard.append))
        self.connector.upstreams[0].notify(
            "notifications/progress", {"progressToken": "mcpx-1", "progress": 1}
        )
        self.assertEqual(heard, [])
        self.assertEqual(len(self.events.of("progress")), 1)

    def test_token_without_callback(self) -> None:
        """
        A call that does not ask for progress still carries a progress token of mcpx's
        own beside its own _meta, so that the server's reports can keep it alive.
        """
        pool = self.make_pool()
        self.echoed(self.call(pool, meta={"trace": "x"}))
        self.echoed(self.call(pool))
        first, second = [
            r.params for r in self.connector.upstreams[0].requests if r.method == "tools/call"
        ]
        assert isinstance(first, dict) and isinstance(second, dict)
        self.assertEqual(first["_meta"], {"trace": "x", "progressToken": "mcpx-1"})
        self.assertEqual(second["_meta"], {"progressToken": "mcpx-2"})

    def test_failing_callback_does_not_break_call(self) -> None:
        """A progress callback that raises is logged; the call goes on."""
        pool = self.make_pool()
        self.connector.holding.add("tools/call")

        def broken(params: dict[str, Any]) -> None:
            raise RuntimeError("oops")

        d = self.call(pool, on_progress=broken)
        upstream = self.connector.upstreams[0]
        upstream.notify("notifications/progress", {"progressToken": "mcpx-1", "progress": 1})
        upstream.release("tools/call", text_result("done"))
        self.assertEqual(self.echoed(d), "done")
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)

    def test_log_published(self) -> None:
        """An upstream notifications/message is published as a server.log event."""
        pool = self.make_pool()
        self.echoed(self.call(pool))
        self.connector.upstreams[0].notify(
            "notifications/message", {"level": "warning", "logger": "db", "data": {"x": 1}}
        )
        self.assertIn(
            ("server.log", "a", {"level": "warning", "logger": "db", "data": {"x": 1}}),
            self.events.seen,
        )

    def test_injected_handlers_hear_notifications(self) -> None:
        """The handlers injected for an instance still hear every notification."""
        heard: list[tuple[str, Any]] = []

        def handlers(server: str, scope: str) -> UpstreamHandlers:
            return UpstreamHandlers(notification=lambda m, p: heard.append((m, p)))

        pool = self.make_pool(handlers=handlers)
        self.echoed(self.call(pool))
        self.connector.upstreams[0].notify("notifications/resources/updated", {"uri": "x"})
        self.assertEqual(heard, [("notifications/resources/updated", {"uri": "x"})])


class EventTests(PoolTestCase):
    def test_lifecycle(self) -> None:
        """Starting, starting up, being reaped and restarting are each published."""
        pool = self.make_pool()
        self.echoed(self.call(pool))
        self.clock.advance(IDLE_TIMEOUT)
        self.echoed(self.call(pool))
        self.successResultOf(Deferred.fromCoroutine(pool.restart("a")))
        self.assertEqual(
            self.events.kinds("a"),
            [
                "server.starting",
                "server.started",
                "server.reaped",
                "server.starting",
                "server.started",
                "server.exited",
                "server.restarted",
            ],
        )
        started = self.events.of("server.started")[0]
        self.assertEqual(started, {"instance": "", "era": "legacy", "revision": "2025-11-25"})
        self.assertEqual(self.events.of("server.exited")[0]["reason"], "the server was restarted")

    def test_failing_publisher_does_not_break_pool(self) -> None:
        """A publisher that raises is logged; calls still work."""

        def broken(kind: str, server: str | None = None, **data: Any) -> None:
            raise RuntimeError("bus down")

        pool = Pool(
            servers=servers(stdio("a")),
            connector=self.connector,
            clock=self.clock,
            call_timeout=CALL_TIMEOUT,
            idle_timeout=IDLE_TIMEOUT,
            publish=broken,
        )
        self.assertEqual(self.echoed(self.call(pool)), "1:hi")
        self.assertTrue(self.flushLoggedErrors(RuntimeError))


class StatusTests(PoolTestCase):
    def test_states(self) -> None:
        """A server's status follows it from configured to starting, ready and failed."""
        pool = self.make_pool()
        [status] = pool.status()
        self.assertEqual(status.state, ServerState.CONFIGURED)
        self.connector.gate = Deferred()
        d = self.call(pool)
        self.assertEqual(pool.status()[0].state, ServerState.STARTING)
        self.connector.gate.callback(None)
        self.echoed(d)
        status = pool.status()[0]
        self.assertEqual(
            (status.state, status.era, status.revision, status.instances),
            (ServerState.READY, "legacy", "2025-11-25", 1),
        )
        self.connector.upstreams[0].crash(2)
        self.clock.advance(0.25)
        status = pool.status()[0]
        self.assertEqual(status.state, ServerState.FAILED)
        self.assertEqual(status.retry_in, 0.75)
        self.assertEqual(
            status.to_json(),
            {
                "name": "a",
                "state": "failed",
                "transport": "stdio",
                "scope": "shared",
                "instances": 0,
                "in_flight": 0,
                "era": None,
                "revision": None,
                "last_error": 'upstream "a" exited with status 2',
                "retry_in": 0.75,
            },
        )
        self.clock.advance(1)
        # Past the back-off it stays failed until it is used (or restarted) again.
        self.assertEqual(pool.status()[0].state, ServerState.FAILED)
        self.assertEqual(pool.status()[0].retry_in, 0.0)

    def test_order_follows_configuration(self) -> None:
        """Servers are listed in the order the configuration gives them."""
        pool = self.make_pool(stdio("z"), stdio("a"), stdio("m"))
        self.assertEqual([s.name for s in pool.status()], ["z", "a", "m"])


class ConstructionTests(SynchronousTestCase):
    def test_bounds_must_be_positive(self) -> None:
        """A pool is refused a call or idle timeout that would bound nothing."""
        connector = FakeConnector(Clock())
        for call, idle in ((0.0, 1.0), (1.0, 0.0), (-1.0, 1.0)):
            with self.assertRaises(ValueError):
                Pool(
                    servers=servers(),
                    connector=connector,
                    clock=Clock(),
                    call_timeout=call,
                    idle_timeout=idle,
                )


class BackoffTests(SynchronousTestCase):
    def test_doubles_to_cap(self) -> None:
        """The restart delay doubles with each failure in a row and stops at the cap."""
        backoff = Backoff()
        self.assertEqual(
            [backoff.delay(n) for n in range(9)], [0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]
        )

    def test_many_failures(self) -> None:
        """Any number of failures gives the cap, never an overflow."""
        self.assertEqual(Backoff().delay(10_000), 60.0)


def oauth_remote(name: str, *, shared: bool = False) -> RemoteServer:
    """A remote server someone signs in to (its sign-in shared with everyone, or not)."""
    found = parse_server(
        name,
        {"url": "https://mcp.example/mcp", "auth": {"type": "oauth", "shared": shared}},
        origin="test",
        environ={},
    )
    assert isinstance(found, RemoteServer)
    return found


class PerPersonTests(PoolTestCase):
    """
    A server each principal signs in to for itself: one instance per principal, each
    connected with that principal's credentials, so no caller's call travels on
    another's sign-in.
    """

    def make(self, *configured: RemoteServer) -> Pool:
        pool = Pool(
            servers=ServersConfig({s.name: s for s in configured}, origin="test"),
            connector=self.connector,
            clock=self.clock,
            publish=self.events,
            call_timeout=CALL_TIMEOUT,
            idle_timeout=IDLE_TIMEOUT,
        )
        pool.startService()
        self.addCleanup(self.stop, pool)
        return pool

    def test_one_instance_per_principal(self) -> None:
        """
        The owner's callers share the owner's instance; each subject's identities (its
        own, its sessions and request scopes) share that subject's; each instance is
        connected with its principal's credentials.
        """
        pool = self.make(oauth_remote("r"))
        clients = ["cli", "http-session:1", 'subject:"bob"', 'subject:"bob"/request-7']
        clients.append('subject:"alice"')
        for client in clients:
            self.echoed(self.call(pool, "r", client=client))
        self.assertEqual(self.connector.principals, ["", 'subject:"bob"', 'subject:"alice"'])
        self.assertEqual(pool.scope_key("r", 'subject:"bob"/x'), 'subject:"bob"')
        self.assertEqual(pool.scope_key("r", "cli"), "")

    def test_shared_sign_in_one_instance(self) -> None:
        """A server whose sign-in is shared has one instance, with its own credentials."""
        pool = self.make(oauth_remote("r", shared=True))
        for client in ("cli", 'subject:"bob"', 'subject:"alice"'):
            self.echoed(self.call(pool, "r", client=client))
        self.assertEqual(self.connector.principals, [None])

    def test_restart_one_principal(self) -> None:
        """Restarting one principal's instances (after its sign-in) leaves the others'."""
        pool = self.make(oauth_remote("r"))
        for client in ("cli", 'subject:"bob"'):
            self.echoed(self.call(pool, "r", client=client))
        self.successResultOf(Deferred.fromCoroutine(pool.restart("r", principal='subject:"bob"')))
        for client in ("cli", 'subject:"bob"'):
            self.echoed(self.call(pool, "r", client=client))
        self.assertEqual(self.connector.principals, ["", 'subject:"bob"', 'subject:"bob"'])
