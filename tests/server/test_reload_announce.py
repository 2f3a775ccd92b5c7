"""
What connected hosts see of a reload: each is told its lists changed (legacy clients on
their connection, 2026-07-28 ones on their listens), removed servers leave the
pass-through lists, and a call of a removed server's tool never reaches another server.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from mcpx.ops.reloading import server_changes
from mcpx.server.http import McpHTTP
from mcpx.spec.meta_keys import SUBSCRIPTION_ID_KEY
from mcpx.spec.revision import Revision
from mcpx.wire.errors import INVALID_PARAMS, RpcError
from tests.daemon.fake_pool import swap_part
from tests.pool.fakes import servers, stdio
from tests.server import Harness, Session
from tests.server.test_http import Client, modern, modern_headers
from tests.server.test_listen import listen
from tests.server.test_passthrough import Upstreams, names_of, passed_through, upstream

#: beta's one tool, as it lists it.
ADD = {"name": "add", "inputSchema": {"type": "object"}}
TOOLS = "notifications/tools/list_changed"
PROMPTS = "notifications/prompts/list_changed"
RESOURCES = "notifications/resources/list_changed"


def reload(harness: Harness, *names: str) -> None:
    """Reload as L{mcpx.ops.reloading.Reloads} does: view, pool, then the hosts."""
    new = servers(*(stdio(name) for name in names))
    changes = server_changes(harness.host.servers, new)
    swap_part(harness.host, servers=new)
    applying = Deferred.fromCoroutine(harness.pool.reload(new))
    harness.server.configuration_changed(changes)
    harness.clock.advance(10)
    assert applying.called


def aligned() -> tuple[Harness, Upstreams]:
    """L{passed_through}, the daemon's view of the servers being the pool's."""
    harness, connector = passed_through()
    swap_part(harness.host, servers=harness.pool.servers)
    return harness, connector


def calls_of(connector: Upstreams, name: str) -> int:
    """The tools/call requests every instance of server C{name} was sent."""
    return sum(started.methods().count("tools/call") for started in connector.started(name))


def heard(harness: Harness) -> list[str]:
    return [n.method for n in harness.notifications]


class LegacyReloadTests(SynchronousTestCase):
    def test_removed_server_announced_and_gone(self) -> None:
        """
        Removing a pass-through server tells the legacy client all three lists changed;
        its tools leave tools/list, and a call of one is refused naming that server,
        while no other server is called.
        """
        harness, connector = aligned()
        session = Session(Revision.V2025_06_18, harness)
        self.assertIn("add", names_of(session.result("tools/list")["tools"]))
        reload(harness, "alpha", "other")
        self.assertEqual(heard(harness), [TOOLS, PROMPTS, RESOURCES])
        self.assertNotIn("add", names_of(session.result("tools/list")["tools"]))
        error = session.error("tools/call", {"name": "add", "arguments": {"a": 1}})
        self.assertEqual(error.code, INVALID_PARAMS)
        self.assertIn("'beta'", error.message)
        self.assertNotIn("tools/call", upstream(connector, "alpha").methods())

    def test_gateway_hears_prompt_and_resource_changes(self) -> None:
        """Through the gateway, removing a server changes its prompts and resources lists."""
        harness, _ = aligned()
        harness.server.offering.default = None
        session = Session(Revision.V2025_06_18, harness)
        capabilities = session.initialize_result["capabilities"]
        self.assertEqual(capabilities["prompts"], {"listChanged": True})
        reload(harness, "alpha", "beta")
        self.assertEqual(heard(harness), [PROMPTS, RESOURCES])

    def test_unchanged_reload_is_silent(self) -> None:
        harness, _ = aligned()
        Session(Revision.V2025_06_18, harness)
        reload(harness, "alpha", "beta", "other")
        self.assertEqual(heard(harness), [])

    def test_name_added_later_is_passed_through(self) -> None:
        """
        A connection naming a server not configured yet gets it once a reload adds it
        (mcpx serve --passthrough yy, yy added later).
        """
        harness, _ = aligned()
        swap_part(harness.host, servers=servers(stdio("alpha"), stdio("other")))
        harness.conn.passthrough = ("beta",)
        session = Session(Revision.V2025_06_18, harness)
        self.assertNotIn("add", names_of(session.result("tools/list")["tools"]))
        reload(harness, "alpha", "beta", "other")
        self.assertIn(TOOLS, heard(harness))
        self.assertEqual(names_of(session.result("tools/list")["tools"])[0], "add")
        self.assertEqual(session.call("add", {"a": 1, "b": 2})["structuredContent"], {"sum": 3})

    def test_call_routed_across_a_reload_is_served_as_its_connection_is_then(self) -> None:
        """
        A call whose route waited for a server's listing is forwarded as its connection is
        served once the route is found: the server removed from the daemon's view in the
        while (a reload under way, the pool not reloaded yet), the call never reaches it;
        the same call, nothing removed, does.
        """
        for removed in (False, True):
            harness, connector = aligned()
            harness.conn.passthrough = ("beta",)
            connector.holding.add("tools/list")
            session = Session(Revision.V2025_06_18, harness)
            calling = session.request("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}})
            self.assertFalse(calling.called)
            if removed:
                swap_part(harness.host, servers=servers(stdio("alpha"), stdio("other")))
            connector.holding.clear()
            upstream(connector, "beta").release("tools/list", {"tools": [ADD]})
            if removed:
                self.assertEqual(calls_of(connector, "beta"), 0)
                error = self.failureResultOf(calling, RpcError).value
                self.assertEqual(error.code, INVALID_PARAMS)
                self.assertIn("no tool named 'add'", error.message)
            else:
                self.assertEqual(calls_of(connector, "beta"), 1)
                self.assertEqual(self.successResultOf(calling)["structuredContent"], {"sum": 3})

    def test_each_call_served_by_its_connections_passthrough_now(self) -> None:
        """
        Call after call, a connection's calls go through the pass-through it is served
        now: none once a reload removes its servers (the gateway knows no such tool),
        again once a reload adds one back.
        """
        harness, connector = aligned()
        harness.conn.passthrough = ("beta",)
        session = Session(Revision.V2025_06_18, harness)
        add = {"name": "add", "arguments": {"a": 1, "b": 2}}
        self.assertEqual(session.result("tools/call", add)["structuredContent"], {"sum": 3})
        self.assertEqual(calls_of(connector, "beta"), 1)
        reload(harness, "alpha", "other")
        self.assertEqual(session.error("tools/call", add).code, INVALID_PARAMS)
        self.assertEqual(calls_of(connector, "beta"), 1)
        reload(harness, "alpha", "beta", "other")
        self.assertEqual(session.result("tools/call", add)["structuredContent"], {"sum": 3})
        self.assertEqual(calls_of(connector, "beta"), 2)


class ModernReloadTests(SynchronousTestCase):
    def test_listen_hears_reload(self) -> None:
        """A 2026-07-28 listen that asked for list changes hears a reload's."""
        harness, _ = aligned()
        mcp = McpHTTP(harness.server, harness.clock, keep_alive=15.0)
        self.addCleanup(mcp.close)
        client = Client(mcp, harness.clock)
        self.addCleanup(client.stub.flush)
        wanted = {"toolsListChanged": True, "promptsListChanged": True}
        response, stream = client.open(
            "POST", listen(3, wanted), modern_headers("subscriptions/listen")
        )
        self.assertEqual(response.code, 200)
        reload(harness, "alpha", "other")
        client.stub.flush()
        events = stream.events()
        self.assertEqual(
            [(e["method"], e["params"]["_meta"][SUBSCRIPTION_ID_KEY]) for e in events[1:]],
            [(TOOLS, 3), (PROMPTS, 3)],
        )
        _, body = client.post(modern(4, "tools/list"), modern_headers("tools/list"))
        self.assertNotIn("add", names_of(body["result"]["tools"]))
