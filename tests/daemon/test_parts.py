"""
The daemon's parts as one record (L{mcpx.ops.host.OpHost}): a reload puts the new
settings and servers in place together and keeps every other part; and the parts built
after the pool hear what the pool's upstream servers send (L{mcpx.daemon.parts}).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from mcpx.daemon.parts import UpstreamNotices
from mcpx.settings.errors import SettingsError
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


class UpstreamNoticesTests(SynchronousTestCase):
    def test_notifications_reach_the_listeners(self) -> None:
        """What an upstream server notifies reaches each listener, named after it."""
        notices = UpstreamNotices()
        heard: list[tuple[str, str, Mapping[str, Any] | None]] = []
        notices.listen(lambda *notice: heard.append(notice))
        notices.sink("files")("notifications/resources/updated", {"uri": "file:///a"})
        self.assertEqual(
            heard, [("files", "notifications/resources/updated", {"uri": "file:///a"})]
        )
