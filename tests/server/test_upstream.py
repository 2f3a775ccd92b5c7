"""
Tests of the server over the real L{Pool} (with the scripted upstreams of
L{tests.pool.fakes}): cancellation reaching the upstream call, progress relayed,
resource subscriptions made upstream and their updates pushed.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from mcpx.ops import uris
from mcpx.pool import Pool
from mcpx.server.flow import Flow
from mcpx.spec.revision import LEGACY_REVISIONS, NEWEST, Revision
from mcpx.wire.errors import METHOD_NOT_FOUND
from tests.pool.fakes import Events, FakeConnector, FakeUpstream, servers, stdio
from tests.server import Harness, Session

CALL = {"server": "demo", "tool": "echo", "arguments": {"text": "hi"}}


def pooled(*, can_push: bool = True, transport: str = "stdio") -> tuple[Harness, FakeConnector]:
    clock = Clock()
    connector = FakeConnector(clock)
    pool = Pool(
        servers=servers(stdio("demo")),
        connector=connector,
        clock=clock,
        call_timeout=60.0,
        idle_timeout=300.0,
        publish=Events(),
    )
    return Harness(pool, clock=clock, can_push=can_push, transport=transport), connector


def upstream(connector: FakeConnector) -> FakeUpstream:
    return connector.started("demo")[-1]


def upstream_token(held: FakeUpstream) -> Any:
    """The progress token mcpx put on the upstream call (its own, not the client's)."""
    params = held.last("tools/call").params
    assert isinstance(params, dict)
    meta = params.get("_meta") or {}
    return meta.get("progressToken")


def report(token: Any, progress: float, **more: Any) -> dict[str, Any]:
    return {"progressToken": token, "progress": progress, **more}


class CancellationTests(SynchronousTestCase):
    def test_notification_cancels_upstream(self) -> None:
        """
        notifications/cancelled for an mcpx_call in flight cancels the upstream call
        (the upstream is sent its own notifications/cancelled), on every legacy revision.
        """
        for revision in LEGACY_REVISIONS:
            harness, connector = pooled()
            connector.holding.add("tools/call")
            session = Session(revision, harness)
            calling = session.request("tools/call", {"name": "mcpx_call", "arguments": CALL})
            held = upstream(connector)
            self.assertEqual(len(held.held["tools/call"]), 1)
            calling.addErrback(lambda f: f.trap(CancelledError))
            calling.cancel()
            self.assertEqual(held.cancelled, [held.last("tools/call").id], revision)

    def test_cancelling_handle_cancels_upstream(self) -> None:
        """Cancelling handle()'s Deferred (a closed modern stream) reaches the upstream."""
        harness, connector = pooled(can_push=False, transport="http-modern")
        connector.holding.add("tools/call")
        session = Session(NEWEST, harness)
        from mcpx.wire.messages import Request

        request = Request(1, "tools/call", session.params({"name": "mcpx_call", "arguments": CALL}))
        handling = Deferred.fromCoroutine(harness.server.handle(harness.conn, request))
        held = upstream(connector)
        handling.addErrback(lambda f: f.trap(CancelledError))
        handling.cancel()
        self.assertEqual(held.cancelled, [held.last("tools/call").id])

    def test_answer_after_hold(self) -> None:
        """A held call answers once the upstream does, with the upstream's result."""
        harness, connector = pooled()
        connector.holding.add("tools/call")
        session = Session(Revision.V2025_06_18, harness)
        calling = session.request("tools/call", {"name": "mcpx_call", "arguments": CALL})
        upstream(connector).release("tools/call", {"content": [{"type": "text", "text": "late"}]})
        results: list[Any] = []
        calling.addCallback(results.append)
        self.assertEqual(results[0]["content"], [{"type": "text", "text": "late"}])


class ProgressTests(SynchronousTestCase):
    def start(
        self, revision: Revision, flow: Flow | None = None, **kwargs: Any
    ) -> tuple[Harness, FakeUpstream, Deferred[Any]]:
        harness, connector = pooled(**kwargs)
        if flow is not None:
            harness.conn.flow_for = lambda token: flow
        connector.holding.add("tools/call")
        session = Session(revision, harness)
        calling = session.request(
            "tools/call", {"name": "mcpx_call", "arguments": CALL}, progressToken="tok-1"
        )
        return harness, upstream(connector), calling

    def progress(self, harness: Harness) -> list[dict[str, Any]]:
        return [
            dict(n.params or {})
            for n in harness.notifications
            if n.method == "notifications/progress"
        ]

    def test_relayed_with_the_clients_token(self) -> None:
        """The upstream's progress reaches the client under the client's own token."""
        for revision in (Revision.V2025_06_18, NEWEST):
            harness, held, _ = self.start(revision)
            token = upstream_token(held)
            self.assertNotEqual(token, "tok-1")
            held.notify(
                "notifications/progress",
                {"progressToken": token, "progress": 1, "total": 3, "message": "one"},
            )
            harness.clock.advance(1)
            held.notify(
                "notifications/progress", {"progressToken": token, "progress": 2, "total": 3}
            )
            self.assertEqual(
                self.progress(harness),
                [
                    {"progressToken": "tok-1", "progress": 1, "total": 3, "message": "one"},
                    {"progressToken": "tok-1", "progress": 2, "total": 3},
                ],
            )
            held.release("tools/call", {"content": []})

    def test_never_backwards(self) -> None:
        """Reports that go backwards, or come after the total, are dropped."""
        harness, held, _ = self.start(Revision.V2025_06_18)
        token = upstream_token(held)
        for progress in (1, 0.5, 1, 1.5, 3, 4):
            held.notify(
                "notifications/progress", {"progressToken": token, "progress": progress, "total": 3}
            )
        self.assertEqual([p["progress"] for p in self.progress(harness)], [1, 1.5, 3])

    def burst(self, count: int) -> None:
        harness, held, calling = self.start(Revision.V2025_06_18)
        token = upstream_token(held)
        for progress in range(1, count + 1):
            held.notify(
                "notifications/progress",
                {"progressToken": token, "progress": progress, "total": count},
            )
        held.release("tools/call", {"content": []})
        self.successResultOf(calling)
        self.assertEqual(
            [(p["progressToken"], p["progress"]) for p in self.progress(harness)],
            [("tok-1", n) for n in range(1, count + 1)],
        )

    def test_a_burst_of_three_arrives_whole(self) -> None:
        """Three reports at the same instant all reach the client, in order."""
        self.burst(3)

    def test_a_burst_of_a_thousand_arrives_whole(self) -> None:
        """A thousand reports at the same instant all reach the client, in order."""
        self.burst(1000)

    def paused(self) -> tuple[Harness, FakeUpstream, Deferred[Any], Flow]:
        flow = Flow()
        flow.pauseProducing()
        harness, held, calling = self.start(Revision.V2025_06_18, flow)
        return harness, held, calling, flow

    def test_a_backed_up_stream_gets_the_latest_report_when_it_drains(self) -> None:
        """
        While the client's stream is paused only the latest report is kept, and it
        goes out when Twisted resumes the stream.
        """
        harness, held, calling, flow = self.paused()
        token = upstream_token(held)
        for progress in (1, 2, 3):
            held.notify("notifications/progress", {"progressToken": token, "progress": progress})
        self.assertEqual(self.progress(harness), [])
        flow.resumeProducing()
        self.assertEqual([p["progress"] for p in self.progress(harness)], [3])
        held.notify("notifications/progress", {"progressToken": token, "progress": 4})
        self.assertEqual([p["progress"] for p in self.progress(harness)], [3, 4])
        held.release("tools/call", {"content": []})
        self.successResultOf(calling)

    def test_the_report_held_by_a_backed_up_stream_goes_before_the_answer(self) -> None:
        """The call answering while the stream is paused sends the held report first."""
        harness, held, calling, flow = self.paused()
        token = upstream_token(held)
        for progress in (1, 2):
            held.notify("notifications/progress", {"progressToken": token, "progress": progress})
        held.release("tools/call", {"content": []})
        self.successResultOf(calling)
        self.assertEqual([p["progress"] for p in self.progress(harness)], [2])
        flow.resumeProducing()
        self.assertEqual([p["progress"] for p in self.progress(harness)], [2])

    def test_the_final_report_is_never_held(self) -> None:
        """The report that reaches the total goes out even on a paused stream."""
        harness, held, _, _ = self.paused()
        token = upstream_token(held)
        for progress in (1, 2):
            held.notify(
                "notifications/progress", {"progressToken": token, "progress": progress, "total": 2}
            )
        self.assertEqual([p["progress"] for p in self.progress(harness)], [2])

    def test_message_dropped_for_2024_11_05(self) -> None:
        """2024-11-05 progress has no message field."""
        harness, held, _ = self.start(Revision.V2024_11_05)
        token = upstream_token(held)
        held.notify(
            "notifications/progress", {"progressToken": token, "progress": 1, "message": "x"}
        )
        self.assertEqual(self.progress(harness), [{"progressToken": "tok-1", "progress": 1}])

    def test_not_without_push(self) -> None:
        """
        A connection that cannot push gets no progress; the upstream is asked for it
        under the pool's own token all the same, whose reports keep the call alive.
        """
        harness, held, _ = self.start(Revision.V2025_06_18, can_push=False)
        token = upstream_token(held)
        self.assertTrue(str(token).startswith("mcpx-"), token)
        held.notify("notifications/progress", {"progressToken": token, "progress": 1})
        self.assertEqual(self.progress(harness), [])


class SubscriptionTests(SynchronousTestCase):
    def test_subscribe_reaches_upstream_and_updates_arrive(self) -> None:
        """
        resources/subscribe on an mcpx:// URI subscribes upstream to the upstream URI;
        an update is pushed with the mcpx:// URI; unsubscribing (or closing) releases it.
        """
        harness, connector = pooled()
        session = Session(Revision.V2025_06_18, harness)
        name = uris.to_mcpx("demo", "demo://a")
        self.assertEqual(session.result("resources/subscribe", {"uri": name}), {})
        held = upstream(connector)
        self.assertEqual(held.last("resources/subscribe").params, {"uri": "demo://a"})
        self.assertEqual(harness.server.subscriptions.resource_updated("demo", "demo://a"), 1)
        updates = [
            n for n in harness.notifications if n.method == "notifications/resources/updated"
        ]
        self.assertEqual([n.params for n in updates], [{"uri": name}])
        self.assertEqual(session.result("resources/unsubscribe", {"uri": name}), {})
        self.assertEqual(held.last("resources/unsubscribe").params, {"uri": "demo://a"})
        self.assertEqual(harness.server.subscriptions.resource_updated("demo", "demo://a"), 0)

    def test_close_releases(self) -> None:
        """A connection that ends gives up its subscriptions upstream."""
        harness, connector = pooled()
        session = Session(Revision.V2025_11_25, harness)
        session.result("resources/subscribe", {"uri": uris.to_mcpx("demo", "demo://a")})
        harness.server.close(harness.conn)
        self.assertIn("resources/unsubscribe", upstream(connector).methods())
        self.assertEqual(harness.server.subscriptions.watching("demo", "demo://a"), [])

    def test_unknown_uri_is_accepted(self) -> None:
        """A subscription to a URI no server owns succeeds and delivers nothing."""
        session = Session(Revision.V2025_06_18, pooled()[0])
        self.assertEqual(session.result("resources/subscribe", {"uri": "test://x"}), {})

    def test_not_without_push(self) -> None:
        """Where the connection cannot push, subscribing is -32601 (not declared)."""
        session = Session(Revision.V2025_06_18, pooled(can_push=False, transport="http-post")[0])
        error = session.error("resources/subscribe", {"uri": uris.to_mcpx("demo", "demo://a")})
        self.assertEqual(error.code, METHOD_NOT_FOUND)
