"""
Resource subscriptions shared across clients, end to end, against a real daemon and the
SDK fixture server (legacy and modern): a host on C{mcpx serve} and C{mcpx watch} (the
REST stream C{GET /v1/events?uri=}) watch one resource of a shared server; the host
leaving does not end the watcher's updates, and neither does C{mcpx restart}.
"""

from __future__ import annotations

import json
import sys

from twisted.internet.task import deferLater

from mcpx.ops import uris
from tests.cli.test_real_daemon import RealDaemonCase
from tests.server.test_resource_updates import Host
from tests.support.peers import Era, fixture_argv
from tests.support.processes import REPO, ChildProcess, kill_on_cleanup, reactor, spawn

WATCHED = uris.to_mcpx("sdk", "fixture://watched")


class WatchTests(RealDaemonCase):
    timeout = 120

    def watch(self, *args: str) -> ChildProcess:
        child = spawn([sys.executable, "-m", "mcpx", "watch", *args], env=self.env, cwd=str(REPO))
        self.addCleanup(kill_on_cleanup, child)
        return child

    async def updates(self, child: ChildProcess, count: int) -> list[str]:
        """Wait until C{child} has printed C{count} update lines; they are returned."""
        for _ in range(300):
            lines = [line for line in child.text(1).splitlines() if "resource.updated" in line]
            if len(lines) >= count:
                return lines
            await deferLater(reactor, 0.05, lambda: None)
        raise AssertionError(f"not {count} updates: {child.text()}")

    async def touch(self) -> str:
        return (await self.ok("call", "sdk", "touch")).out

    async def host_watching(self) -> Host:
        host = Host(self)
        await host.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "legacy-host", "version": "1"},
            },
        )
        host.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        await host.request("resources/subscribe", {"uri": WATCHED})
        return host

    async def shared_watch(self, era: Era) -> None:
        await self.start_daemon({"sdk": fixture_argv("stdio", era)})
        host = await self.host_watching()
        watcher = self.watch(WATCHED)
        await watcher.wait_for(b"watching " + WATCHED.encode(), fd=2, timeout=30)
        self.assertNotIn("nobody subscribed", await self.touch())
        await host.message(lambda m: m.get("method") == "notifications/resources/updated")
        [line] = await self.updates(watcher, 1)
        self.assertIn("uri=fixture://watched", line)
        self.assertIn(" sdk ", line)

        # The host leaves: the watcher's interest keeps the upstream subscription.
        await host.request("resources/unsubscribe", {"uri": WATCHED})
        self.assertNotIn("nobody subscribed", await self.touch())
        await self.updates(watcher, 2)

        # The server restarted: it is started again at once and subscribed again.
        await self.ok("restart", "sdk")
        servers = (await self.ok("servers", "--json")).json()["servers"]
        self.assertEqual(servers[0]["instances"], 1, servers)
        self.assertNotIn("nobody subscribed", await self.touch())
        await self.updates(watcher, 3)

        # The last watcher gone, nobody is subscribed any more.
        watcher.signal("INT")
        await watcher.ended(timeout=15)
        for _ in range(100):
            if "nobody subscribed" in await self.touch() or era == "modern":
                break
            await deferLater(reactor, 0.1, lambda: None)
        else:
            raise AssertionError("the subscription outlived its last watcher")

    async def test_shared_watch_legacy_upstream(self) -> None:
        """Two clients of different transports watch a legacy upstream's resource."""
        await self.shared_watch("legacy")

    async def test_shared_watch_modern_upstream(self) -> None:
        """... and a 2026-07-28 upstream's, which mcpx watches on a subscriptions/listen."""
        await self.shared_watch("modern")

    async def test_first_event_says_what_was_not_watched(self) -> None:
        """A URI nobody owns, or a bare one without --server, is refused, saying why."""
        await self.start_daemon({"sdk": fixture_argv("stdio", "legacy")})
        done = await self.mcpx("watch", "fixture://watched", "--json")
        self.assertEqual(done.code, 1, done)
        [first] = [json.loads(line) for line in done.out.splitlines()]
        self.assertEqual(first["kind"], "watching")
        [refused] = first["refused"]
        self.assertIn("server=", refused["reason"])
        self.assertIn("none of the resources could be watched", done.err)
        bare = self.watch("fixture://watched", "--server", "sdk")
        await bare.wait_for(b"watching fixture://watched", fd=2, timeout=30)
        await self.touch()
        await self.updates(bare, 1)
