"""
The daemon's parts as one record (L{mcpx.ops.host.OpHost}): a reload puts the new
settings and servers in place together and keeps every other part; and the parts built
after the pool are told what the pool's upstream servers send (L{mcpx.daemon.parts}).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from mcpx.daemon.parts import UpstreamNotices, connect_upward
from mcpx.policy.sampling import SamplingGuard
from mcpx.pool.status import ReloadReport
from mcpx.questions.broker import Broker
from mcpx.questions.caller import Asker
from mcpx.questions.relay import Relay
from mcpx.settings.errors import SettingsError
from mcpx.settings.server_policy import DEFAULT_POLICY, SamplingMode, ServerPolicy
from mcpx.settings.servers import ServersConfig
from tests.daemon.fake_pool import Harness, servers_config


class ReloadRecordTests(SynchronousTestCase):
    def test_reload_puts_the_new_servers_in_place(self) -> None:
        """
        After a reload the daemon answers with the file's servers; every other part is
        carried over, not rebuilt.
        """
        harness = Harness()
        host = harness.http.host
        pool, tasks = host.pool, host.tasks
        harness.read = servers_config("files", "xnew")
        self.assertEqual(harness.post("/v1/reload").code, 200)
        self.assertIs(host.servers, harness.read)
        self.assertIs(host.pool, pool)
        self.assertIs(host.tasks, tasks)
        self.assertIn("xnew", harness.get("/v1/settings").json["servers"])

    def test_refused_reload_keeps_the_configuration(self) -> None:
        """A file that cannot be read is refused, and the running settings and servers stay."""
        harness = Harness()
        host = harness.http.host
        settings, servers = host.settings, host.servers

        def missing() -> Any:
            raise SettingsError("/etc/mcpx.json: no such file")

        host.reloads.read = missing
        self.assertEqual(harness.post("/v1/reload").code, 400)
        self.assertIs(host.settings, settings)
        self.assertIs(host.servers, servers)


class FakeMcp:
    """The MCP server as the parts below it reach it."""

    def __init__(self) -> None:
        self.heard: list[tuple[str, str, Mapping[str, Any] | None]] = []

    def roots_source(self, server: str, scope_key: str) -> Asker | None:
        return None

    def configuration_changed(self, report: ReloadReport) -> object:
        return None

    def upstream_notification(
        self, server: str, method: str, params: Mapping[str, Any] | None
    ) -> None:
        self.heard.append((server, method, params))


class FakePool:
    """The pool as the relay and the sampling guard read it."""

    def __init__(self, servers: ServersConfig) -> None:
        self.servers = servers
        self.asked: list[tuple[str, str]] = []

    def owner(self, server: str, scope_key: str) -> object:
        self.asked.append((server, scope_key))
        return None

    def lone_request(self, server: str, scope_key: str) -> None:
        return None

    def callers(self, server: str, scope_key: str) -> list[object]:
        return []

    def hold_deadlines(self, server: str, scope_key: str) -> Any:
        return lambda: None


async def never(*args: Any) -> bool:
    return False


class ConnectUpwardTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.notices = UpstreamNotices()
        self.relay = Relay(Broker(Clock()), Clock())
        self.sampling = SamplingGuard(lambda server: DEFAULT_POLICY, never, lambda *a, **k: None)
        self.pool = FakePool(servers_config("files"))
        self.mcp = FakeMcp()
        connect_upward(
            relay=self.relay,
            sampling=self.sampling,
            pool=self.pool,
            servers_of=self.pool,
            mcp=self.mcp,
        )
        # As the MCP server does when it is built (McpServer's upstream_notices).
        self.notices.listen(self.mcp.upstream_notification)

    def test_notifications_reach_the_mcp_server(self) -> None:
        """What an upstream server notifies reaches its listener, named after it."""
        self.notices.sink("files")("notifications/resources/updated", {"uri": "file:///a"})
        self.assertEqual(
            self.mcp.heard, [("files", "notifications/resources/updated", {"uri": "file:///a"})]
        )

    def test_relay_asks_the_pool_and_the_mcp_server(self) -> None:
        """The relay asks the pool whose a question is, and the MCP server for roots."""
        self.assertEqual(self.relay._owner("files", ""), None)
        self.assertEqual(self.pool.asked, [("files", "")])
        self.assertEqual(self.relay.roots_source, self.mcp.roots_source)

    def test_sampling_reads_the_pool_servers_of_the_moment(self) -> None:
        """A server's sampling policy is read from the pool's servers after a reload too."""
        self.assertEqual(self.sampling._policy_of("files"), DEFAULT_POLICY)
        denying = ServerPolicy(sampling_mode=SamplingMode.DENY)
        reloaded = servers_config("files")
        self.pool.servers = ServersConfig(reloaded.servers, "reloaded", policies={"files": denying})
        self.assertEqual(self.sampling._policy_of("files"), denying)
