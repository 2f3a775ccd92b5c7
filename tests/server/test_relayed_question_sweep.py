"""
The strict schema sweep over questions mcpx relays: an upstream on 2025-11-25 asks its
question in its own revision's spelling (a form elicitation with C{mode}, sampling,
roots), and the frame mcpx puts to the asking client over C{mcpx serve} must be valid
in the client's revision, whichever legacy revision that is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from mcpx.call import Call
from mcpx.pool import Pool
from mcpx.questions.broker import Broker
from mcpx.questions.relay import Relay
from mcpx.server.dispatch import McpServer
from mcpx.server.http import McpHTTP
from mcpx.spec.matrix import capability_in
from mcpx.spec.revision import LEGACY_REVISIONS, Revision
from mcpx.upstream.handlers import UpstreamHandlers
from tests.daemon.fake_pool import daemon_http, default_settings
from tests.pool.fakes import Events, FakeConnector, servers, stdio
from tests.server import servers_config
from tests.server.test_transport_sweep import CALL, StdioDriver, Sweep, upstream_of

#: The questions a 2025-11-25 upstream asks, as it spells them.
QUESTIONS: dict[str, dict[str, Any]] = {
    "elicitation/create": {
        "mode": "form",
        "message": "Your name?",
        "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
    },
    "sampling/createMessage": {
        "messages": [{"role": "user", "content": {"type": "text", "text": "Hi"}}],
        "maxTokens": 5,
    },
    "roots/list": {},
}
ANSWERS: dict[str, dict[str, Any]] = {
    "elicitation/create": {"action": "accept", "content": {"name": "ada"}},
    "sampling/createMessage": {
        "role": "assistant",
        "content": {"type": "text", "text": "Hello"},
        "model": "m",
    },
    "roots/list": {"roots": [{"uri": "file:///sweep"}]},
}
CAPABILITY = {"elicitation/create": "elicitation", "sampling/createMessage": "sampling"}


def relaying_daemon(clock: Clock) -> tuple[McpServer, FakeConnector]:
    """The real pool and question relay over a scripted upstream that can ask."""
    connector = FakeConnector(clock)
    # The relay is made before the pool it asks about, as the daemon does.
    pools: list[Pool] = []

    def owner(server: str, key: str) -> Call | None:
        return pools[0].owner(server, key)

    def hold(server: str, key: str) -> Callable[[], None]:
        return pools[0].hold_deadlines(server, key)

    relay = Relay(
        Broker(clock, store=None),
        clock,
        owner=owner,
        hold=hold,
        native=True,
        client_wait=300.0,
        roots=(),
    )

    def handlers(server: str, key: str) -> UpstreamHandlers:
        return relay.handlers(server, key, lambda method, params: None)

    pool = Pool(
        servers=servers(stdio("demo")),
        connector=connector,
        clock=clock,
        call_timeout=60.0,
        idle_timeout=300.0,
        publish=Events(),
        handlers=handlers,
    )
    pools.append(pool)
    daemon = daemon_http(
        clock=clock,
        pid=4242,
        pool=pool,
        settings=default_settings(),
        servers=servers_config("demo"),
    )
    core = McpServer(daemon.host, clock)
    daemon.mcp = McpHTTP(core, clock, keep_alive=15.0)
    return core, connector


class RelayedQuestionSweepTests(SynchronousTestCase):
    def relay_to(self, sweep: Sweep, revision: Revision) -> list[str]:
        """Relay every question this revision has to a client on it; the methods asked."""
        clock = Clock()
        core, connector = relaying_daemon(clock)
        client = StdioDriver(sweep, revision, core, clock)
        declared: dict[str, Any] = {
            name: {}
            for name in ("elicitation", "sampling", "roots")
            if capability_in("client", name, revision)
        }
        client.ask(
            "initialize",
            {
                "protocolVersion": revision.value,
                "capabilities": declared,
                "clientInfo": {"name": "sweep", "version": "1"},
            },
        )
        client.notify("notifications/initialized")
        connector.holding.add("tools/call")
        calling = client.send("tools/call", CALL)
        held = upstream_of(connector)
        asked = []
        for method, params in QUESTIONS.items():
            if CAPABILITY.get(method, "roots") not in declared:
                continue
            answered = held.peer.request(method, params)
            (question,) = [f for f in client.read() if f.get("method") == method]
            asked.append(method)
            client.write({"jsonrpc": "2.0", "id": question["id"], "result": ANSWERS[method]})
            self.assertTrue(answered.called, f"{revision}: {method} was not answered")
        held.release("tools/call", {"content": [{"type": "text", "text": "done"}]})
        client.read()
        self.assertIn("result", client.answer_to(calling))
        return asked

    def test_relayed_questions_are_valid_in_the_asked_clients_revision(self) -> None:
        """
        On every legacy revision, each question the client's revision has reaches it
        spelled for that revision: strictly valid, C{mode} gone before 2025-11-25.
        """
        sweep = Sweep()
        asked = {revision: self.relay_to(sweep, revision) for revision in LEGACY_REVISIONS}
        self.assertEqual(sweep.problems, [])
        self.assertEqual(asked[Revision.V2025_06_18], list(QUESTIONS))
        self.assertEqual(asked[Revision.V2025_03_26], ["sampling/createMessage", "roots/list"])
        checked = sweep.definitions_checked()
        for definition in ("ElicitRequest", "CreateMessageRequest", "ListRootsRequest"):
            self.assertIn(definition, checked)
