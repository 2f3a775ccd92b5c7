"""
Tests for L{mcpx.server.listen}: C{subscriptions/listen} for 2026-07-28 clients, from
the filter's rules to whole streams on C{/mcp} in pass-through over the real pool.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IPushProducer, ITransport
from twisted.trial.unittest import SynchronousTestCase

from mcpx.ops import uris
from mcpx.server.flow import Flow
from mcpx.server.http import McpHTTP
from mcpx.server.listen import (
    TASK_STATE,
    Listener,
    SubscriptionFilter,
    offers_any,
)
from mcpx.spec.meta_keys import SUBSCRIPTION_ID_KEY
from mcpx.spec.methods import ACKNOWLEDGED
from mcpx.spec.revision import Revision
from mcpx.wire.errors import INVALID_PARAMS, INVALID_REQUEST, RpcError
from tests.server import Session, result_of
from tests.server.test_http import Client, _Body, header, modern, modern_headers, request
from tests.server.test_passthrough import passed_through, upstream

TOOLS = "notifications/tools/list_changed"
PROMPTS = "notifications/prompts/list_changed"
RESOURCES = "notifications/resources/list_changed"
UPDATED = "notifications/resources/updated"

EVERYTHING = {
    "tools": {"listChanged": True},
    "prompts": {"listChanged": True},
    "resources": {"listChanged": True, "subscribe": True},
}


class FilterTests(SynchronousTestCase):
    def test_parse(self) -> None:
        """
        The filter's flags, URIs and task ids are read; repeats and unknown fields are
        dropped.
        """
        wanted = SubscriptionFilter.parse(
            {
                "notifications": {
                    "toolsListChanged": True,
                    "promptsListChanged": False,
                    "resourceSubscriptions": ["a://1", "a://2", "a://1"],
                    "taskIds": ["t", "t"],
                    "someExtensionsField": ["x"],
                }
            }
        )
        self.assertEqual(wanted.methods, frozenset({TOOLS}))
        self.assertEqual(wanted.uris, ("a://1", "a://2"))
        self.assertEqual(wanted.task_ids, ("t",))
        self.assertEqual(
            wanted.to_json(),
            {
                "toolsListChanged": True,
                "resourceSubscriptions": ["a://1", "a://2"],
                "taskIds": ["t"],
            },
        )

    def test_malformed(self) -> None:
        """A filter that is not an object, a flag that is not a boolean, bad URIs: -32602."""
        cases: tuple[dict[str, Any], ...] = (
            {},
            {"notifications": []},
            {"notifications": {"toolsListChanged": "yes"}},
            {"notifications": {"resourceSubscriptions": "a://1"}},
            {"notifications": {"resourceSubscriptions": [1]}},
            {"notifications": {"taskIds": "t"}},
        )
        for params in cases:
            with self.assertRaises(RpcError) as raised:
                SubscriptionFilter.parse(params)
            self.assertEqual(raised.exception.code, INVALID_PARAMS, params)

    def test_offered(self) -> None:
        """Only what the declaration covers is honoured."""
        wanted = SubscriptionFilter(frozenset({TOOLS, PROMPTS, RESOURCES}), ("a://1",))
        self.assertEqual(wanted.offered(EVERYTHING), wanted)
        narrowed = wanted.offered({"tools": {"listChanged": True}, "resources": {}})
        self.assertEqual(narrowed, SubscriptionFilter(frozenset({TOOLS})))
        self.assertEqual(narrowed.to_json(), {"toolsListChanged": True})
        self.assertTrue(offers_any({"resources": {"subscribe": True}}))
        self.assertFalse(offers_any({"tools": {}, "prompts": {}, "resources": {}}))


class ListenerTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.sent: list[tuple[str, dict[str, Any] | None]] = []
        self.listener = Listener(
            7, lambda method, params: self.sent.append((method, params)), {"alpha"}.__contains__
        )

    def test_nothing_before_the_acknowledgement(self) -> None:
        """What comes before the acknowledgement waits for it, tagged like it."""
        self.listener.deliver(UPDATED, {"uri": "a://1"})
        self.assertEqual(self.sent, [])
        self.listener.acknowledge(SubscriptionFilter(frozenset({TOOLS}), ("a://1",)))
        tag = {SUBSCRIPTION_ID_KEY: 7}
        self.assertEqual(
            self.sent,
            [
                (
                    ACKNOWLEDGED,
                    {
                        "notifications": {
                            "toolsListChanged": True,
                            "resourceSubscriptions": ["a://1"],
                        },
                        "_meta": tag,
                    },
                ),
                (UPDATED, {"uri": "a://1", "_meta": tag}),
            ],
        )

    def test_only_what_was_honoured(self) -> None:
        """
        A list change not granted, a tool change from a server not passed through,
        progress and log messages: none goes out.
        """
        self.listener.acknowledge(SubscriptionFilter(frozenset({TOOLS})))
        del self.sent[:]
        self.assertFalse(self.listener.heard("alpha", PROMPTS))
        self.assertFalse(self.listener.heard("other", TOOLS))
        self.listener.deliver("notifications/progress", {"progressToken": 1, "progress": 1})
        self.listener.deliver("notifications/message", {"level": "info", "data": "x"})
        self.listener.deliver(UPDATED, {"uri": "a://1"})
        self.assertEqual(self.sent, [])
        self.assertTrue(self.listener.heard("alpha", TOOLS))
        self.assertEqual(self.sent, [(TOOLS, {"_meta": {SUBSCRIPTION_ID_KEY: 7}})])

    def test_ended_before_acknowledged(self) -> None:
        """A listen mcpx ends while setting it up sends nothing, not even its acknowledgement."""
        self.listener.deliver(TOOLS, None)
        self.listener.end()
        self.listener.acknowledge(SubscriptionFilter(frozenset({TOOLS})))
        self.assertEqual(self.sent, [])

    def test_closed(self) -> None:
        """Once ended, nothing more goes out, and the listen's end is signalled."""
        self.listener.acknowledge(SubscriptionFilter(frozenset({TOOLS})))
        self.listener.end()
        self.assertIsNone(self.successResultOf(self.listener.ended))
        self.listener.heard("alpha", TOOLS)
        self.assertEqual(len(self.sent), 1)

    def test_coalesced_while_the_stream_is_backed_up(self) -> None:
        """
        While its stream is backed up, a listen keeps the latest of each list change,
        resource update and task state, and sends them when it drains.
        """
        flow = Flow()
        listener = Listener(
            7, lambda method, params: self.sent.append((method, params)), bool, flow
        )
        listener.acknowledge(SubscriptionFilter(frozenset({TOOLS}), ("a://1",), ("t1",)))
        del self.sent[:]
        flow.pauseProducing()
        for n in range(1000):
            listener.heard("alpha", TOOLS)
            listener.deliver(UPDATED, {"uri": "a://1"})
            listener.deliver(TASK_STATE, {"taskId": "t1", "status": f"working {n}"})
        self.assertEqual(self.sent, [])
        flow.resumeProducing()
        self.assertEqual(
            [(method, (params or {}).get("status")) for method, params in self.sent],
            [(TOOLS, None), (UPDATED, None), (TASK_STATE, "working 999")],
        )


def listen(request_id: int, notifications: Mapping[str, Any]) -> dict[str, Any]:
    return modern(request_id, "subscriptions/listen", {"notifications": notifications})


class ListenHTTPTests(SynchronousTestCase):
    """C{subscriptions/listen} on C{/mcp}, with C{alpha} and C{beta} passed through."""

    def setUp(self) -> None:
        self.harness, self.connector = passed_through()
        self.server = self.harness.server
        self.mcp = McpHTTP(self.server, self.harness.clock, keep_alive=15.0)
        self.client = Client(self.mcp, self.harness.clock)
        self.addCleanup(self.client.stub.flush)
        self.addCleanup(self.mcp.close)
        # The upstreams are running, as they are once a client used them.
        response, _ = self.client.post(modern(1, "tools/list"), modern_headers("tools/list"))
        self.assertEqual(response.code, 200)

    def open(self, request_id: int, notifications: Mapping[str, Any]) -> tuple[Any, _Body]:
        response, body = self.client.open(
            "POST", listen(request_id, notifications), modern_headers("subscriptions/listen")
        )
        self.assertEqual(response.code, 200)
        self.assertEqual(header(response, "content-type"), "text/event-stream")
        return response, body

    def drop(self, body: _Body) -> None:
        cast(IPushProducer, cast(ITransport, body.transport)).stopProducing()
        self.client.stub.flush()

    def test_declared_to_modern_clients(self) -> None:
        """In pass-through, server/discover declares what a listen can carry."""
        _, body = self.client.post(modern(2, "server/discover"), modern_headers("server/discover"))
        capabilities = body["result"]["capabilities"]
        self.assertEqual(capabilities["tools"], {"listChanged": True})
        self.assertEqual(capabilities["prompts"], {"listChanged": True})
        self.assertEqual(capabilities["resources"], {"listChanged": True, "subscribe": True})

    def test_acknowledged_then_relayed(self) -> None:
        """
        The acknowledgement comes first, then a pass-through server's tools change,
        both tagged with the listen's id.
        """
        _, body = self.open(5, {"toolsListChanged": True, "taskIds": ["t"]})
        (ack,) = body.events()
        self.assertEqual(
            ack,
            {
                "jsonrpc": "2.0",
                "method": ACKNOWLEDGED,
                "params": {
                    "notifications": {"toolsListChanged": True},
                    "_meta": {SUBSCRIPTION_ID_KEY: 5},
                },
            },
        )
        upstream(self.connector, "beta").notify(TOOLS)
        self.client.stub.flush()
        self.assertEqual(
            body.events()[1:],
            [{"jsonrpc": "2.0", "method": TOOLS, "params": {"_meta": {SUBSCRIPTION_ID_KEY: 5}}}],
        )

    def test_filter_is_honoured(self) -> None:
        """
        A listen for prompt changes hears none of the tools' changes, and hears the
        prompt changes of any server (the gateway lists the others' prompts too); a
        tools change of a server not passed through reaches no listen.
        """
        _, prompts = self.open(5, {"promptsListChanged": True})
        _, tools = self.open(6, {"toolsListChanged": True})
        self.client.post(modern(3, "prompts/list"), modern_headers("prompts/list"))
        upstream(self.connector, "beta").notify(TOOLS)
        upstream(self.connector, "other").notify(TOOLS)
        upstream(self.connector, "other").notify(PROMPTS)
        self.client.stub.flush()
        self.assertEqual([e["method"] for e in prompts.events()], [ACKNOWLEDGED, PROMPTS])
        self.assertEqual([e["method"] for e in tools.events()], [ACKNOWLEDGED, TOOLS])

    def test_keep_alive(self) -> None:
        """A quiet listen carries a keep-alive comment every transport.sseKeepAlive."""
        _, body = self.open(5, {"toolsListChanged": True})
        self.harness.clock.advance(15)
        self.client.stub.flush()
        self.assertEqual(body.data.count(b": keepalive\n"), 1)
        self.harness.clock.advance(15)
        self.client.stub.flush()
        self.assertEqual(body.data.count(b": keepalive\n"), 2)

    def test_resource_subscriptions(self) -> None:
        """
        The URIs a listen names are subscribed upstream; their updates come tagged,
        under the name used; when the client goes away the subscription is released
        and nothing of the listen is left.
        """
        # A subscription is held on the instance mcpx declares every question to, not
        # on the one for what the host declared: started first, so that its idle timer
        # is not counted as the listen's.
        pool = self.harness.host.pool
        assert pool is not None
        result_of(Deferred.fromCoroutine(pool.session("beta")))
        beta = upstream(self.connector, "beta")
        timers = len(self.harness.clock.getDelayedCalls())
        _, body = self.open(5, {"resourceSubscriptions": ["beta://x"]})
        self.assertEqual(beta.last("resources/subscribe").params, {"uri": "beta://x"})
        (ack,) = body.events()
        self.assertEqual(ack["params"]["notifications"], {"resourceSubscriptions": ["beta://x"]})
        beta.notify(UPDATED, {"uri": "beta://x"})
        beta.notify(UPDATED, {"uri": "beta://y"})
        self.client.stub.flush()
        self.assertEqual(
            body.events()[1:],
            [
                {
                    "jsonrpc": "2.0",
                    "method": UPDATED,
                    "params": {"uri": "beta://x", "_meta": {SUBSCRIPTION_ID_KEY: 5}},
                }
            ],
        )
        self.assertNotIn("resources/unsubscribe", beta.methods())
        self.drop(body)
        self.assertEqual(beta.last("resources/unsubscribe").params, {"uri": "beta://x"})
        self.assertEqual(len(self.server.listening), 0)
        self.assertEqual(self.server.subscriptions.watching("beta", "beta://x"), [])
        # The shared keep-alive timer, left armed, fires once more with nothing due.
        self.harness.clock.advance(15)
        self.assertEqual(len(self.harness.clock.getDelayedCalls()), timers)

    def test_client_goes_away(self) -> None:
        """A listen whose client went away hears nothing more and leaves nothing behind."""
        timers = len(self.harness.clock.getDelayedCalls())
        _, body = self.open(5, {"toolsListChanged": True})
        self.assertEqual(len(self.server.listening), 1)
        self.drop(body)
        self.assertEqual(len(self.server.listening), 0)
        self.assertEqual(self.server.listening.heard("beta", TOOLS), 0)
        # The keep-alive is gone with it: the shared timer, left armed, fires once more
        # with nothing due.
        self.harness.clock.advance(15)
        self.assertEqual(len(self.harness.clock.getDelayedCalls()), timers)

    def test_daemon_stops(self) -> None:
        """When the daemon stops, a listen is answered: complete, with its id in _meta."""
        _, body = self.open(5, {"toolsListChanged": True})
        self.mcp.close()
        self.client.stub.flush()
        answer = body.events()[-1]
        self.assertEqual(answer["id"], 5)
        self.assertEqual(answer["result"]["resultType"], "complete")
        self.assertEqual(answer["result"]["_meta"][SUBSCRIPTION_ID_KEY], 5)
        self.assertEqual(len(body.ended), 1)
        self.assertEqual(len(self.server.listening), 0)

    def test_refusals(self) -> None:
        """
        A malformed filter is -32602; a client that does not accept an event stream is
        -32600; so is a legacy client's listen where mcpx cannot push to it (a POST
        outside a session).
        """
        response, body = self.client.post(
            listen(5, {"toolsListChanged": 1}), modern_headers("subscriptions/listen")
        )
        self.assertEqual((response.code, body["error"]["code"]), (400, INVALID_PARAMS))
        response, body = self.client.post(
            listen(6, {"toolsListChanged": True}),
            modern_headers("subscriptions/listen", Accept="application/json"),
        )
        self.assertEqual((response.code, body["error"]["code"]), (400, INVALID_REQUEST))
        response, body = self.client.post(
            request(7, "subscriptions/listen", {"notifications": {"toolsListChanged": True}})
        )
        self.assertEqual(body["error"]["code"], INVALID_REQUEST)
        self.assertIn("Streamable HTTP session", body["error"]["message"])
        self.assertEqual(len(self.server.listening), 0)


class LegacyListenTests(SynchronousTestCase):
    """A legacy client's subscriptions/listen: served, as "accept liberally" asks."""

    def test_served_on_stdio(self) -> None:
        """
        A 2025-06-18 client on stdio that sends a listen naming a resource is
        acknowledged and hears the resource's updates, tagged, on its connection; its
        cancelling the listen releases the upstream subscription.  Nothing declares
        the method to it.
        """
        harness, connector = passed_through()
        session = Session(Revision.V2025_06_18, harness)
        self.assertNotIn("subscriptions", json.dumps(session.initialize_result))
        listening = session.request(
            "subscriptions/listen", {"notifications": {"resourceSubscriptions": ["beta://x"]}}
        )
        beta = upstream(connector, "beta")
        self.assertEqual(beta.last("resources/subscribe").params, {"uri": "beta://x"})
        beta.notify(UPDATED, {"uri": "beta://x"})
        heard = [(n.method, n.params) for n in harness.notifications]
        [(ack, ack_params), (update, update_params)] = heard
        self.assertEqual(ack, ACKNOWLEDGED)
        self.assertEqual(
            dict(ack_params or {})["notifications"], {"resourceSubscriptions": ["beta://x"]}
        )
        self.assertEqual(update, UPDATED)
        self.assertEqual(dict(update_params or {})["uri"], "beta://x")
        self.assertNoResult(listening)
        listening.cancel()
        self.failureResultOf(listening, CancelledError)
        self.assertEqual(beta.last("resources/unsubscribe").params, {"uri": "beta://x"})
        self.assertEqual(len(harness.server.listening), 0)


class GatewayListenTests(SynchronousTestCase):
    def test_gateway_resource_updates(self) -> None:
        """
        Without pass-through the tools never change, so their changes are not offered
        (prompts and resources change with reloads and are); a listen may name mcpx://
        resources, whose upstream updates reach it under those names, and a
        request for list changes is acknowledged as not honoured.
        """
        harness, connector = passed_through()
        server = harness.server
        server.offering.default = None
        mcp = McpHTTP(server, harness.clock, keep_alive=15.0)
        self.addCleanup(mcp.close)
        client = Client(mcp, harness.clock)
        self.addCleanup(client.stub.flush)
        _, body = client.post(modern(1, "server/discover"), modern_headers("server/discover"))
        capabilities = body["result"]["capabilities"]
        self.assertEqual(capabilities["tools"], {})
        self.assertEqual(capabilities["resources"], {"subscribe": True, "listChanged": True})
        client.post(modern(2, "resources/list"), modern_headers("resources/list"))
        named = uris.to_mcpx("beta", "beta://x")
        response, stream = client.open(
            "POST",
            listen(3, {"toolsListChanged": True, "resourceSubscriptions": [named]}),
            modern_headers("subscriptions/listen"),
        )
        self.assertEqual(response.code, 200)
        (ack,) = stream.events()
        self.assertEqual(ack["params"]["notifications"], {"resourceSubscriptions": [named]})
        beta = upstream(connector, "beta")
        self.assertEqual(beta.last("resources/subscribe").params, {"uri": "beta://x"})
        beta.notify(UPDATED, {"uri": "beta://x"})
        beta.notify(TOOLS)
        client.stub.flush()
        self.assertEqual(
            stream.events()[1:],
            [
                {
                    "jsonrpc": "2.0",
                    "method": UPDATED,
                    "params": {"uri": named, "_meta": {SUBSCRIPTION_ID_KEY: 3}},
                }
            ],
        )
