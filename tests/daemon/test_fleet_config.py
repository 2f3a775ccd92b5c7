"""
A configuration change made on one daemon of a fleet reaches the others
(L{mcpx.daemon.fleet_config}), on a throw-away PostgreSQL cluster
(L{tests.support.postgres}).

In process: two daemons' notices on one database, each with its own reload; a reload
announced by one makes the other reload once, and nobody reload for its own notice or
for a notice older than itself.  As processes: two C{mcpx daemon}s started with one
config file and one database; C{mcpx add} run against the second, and the 2026-07-28
listen and the legacy session of a host connected to the first each hear their lists
changed, and the first daemon lists the server added.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from twisted.internet import reactor
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock, deferLater
from twisted.logger import ILogObserver, LogLevel, globalLogPublisher
from twisted.trial.unittest import TestCase

from mcpx.daemon.fleet_config import ConfigNotices
from mcpx.store.postgres import PostgresRecords
from tests.daemon.test_lifecycle import PROMPTS_CHANGED, RESOURCES_CHANGED, Host, run_host
from tests.questions.support import Daemon, demo_server
from tests.support.postgres import PASSWORD, PostgresCluster, shared_cluster


async def until(condition: Callable[[], bool], what: str, seconds: float = 10.0) -> None:
    for _ in range(int(seconds / 0.05)):
        if condition():
            return
        await deferLater(reactor, 0.05, lambda: None)
    raise AssertionError("never happened: " + what)


class NoticeTests(TestCase):
    timeout = 60

    def setUp(self) -> None:
        self.cluster: PostgresCluster = shared_cluster()
        self.url = self.cluster.url(self.cluster.database())
        self.config = Path(self.mktemp())
        self.config.write_text('{"servers": {}}\n')

    async def daemon(self, name: str, path: Path | None = None) -> tuple[ConfigNotices, list[str]]:
        """A daemon's notices, started; the list its reloads are counted in."""
        records = PostgresRecords(self.url, reactor, password=PASSWORD, threads=1)
        await records.open()
        self.addCleanup(records.close)
        reloads: list[str] = []

        def reload() -> Deferred[Any]:
            reloads.append(name)
            return succeed(None)

        notices = ConfigNotices(records, name, Clock(), str(path or self.config), reload)
        self.addCleanup(notices.stop)
        notices.start()
        # Started listening (its first read of the notice row is done).
        await until(lambda: notices._started, f"{name} listens")
        return notices, reloads

    async def test_announced_reload_reaches_the_others_once(self) -> None:
        """
        A reload announced by daemon a makes b and c reload once each, a not at all; a
        daemon started after it does not reload for that older notice.
        """
        a, a_reloads = await self.daemon("d_a")
        b, b_reloads = await self.daemon("d_b")
        _, c_reloads = await self.daemon("d_c")
        a.announce()
        await until(lambda: bool(b_reloads and c_reloads), "b and c reload")
        _, late_reloads = await self.daemon("d_late")
        b.announce()
        await until(lambda: len(a_reloads) == 1 and len(c_reloads) == 2, "a and c reload")
        await until(lambda: late_reloads == ["d_late"], "the late daemon hears b's")
        await deferLater(reactor, 0.3, lambda: None)
        self.assertEqual(
            (a_reloads, b_reloads, c_reloads, late_reloads),
            (["d_a"], ["d_b"], ["d_c", "d_c"], ["d_late"]),
        )

    async def test_other_file_warned(self) -> None:
        """A daemon whose config file is not the announcer's still reloads, and warns."""
        events: list[Any] = []
        observer: ILogObserver = events.append  # type: ignore[assignment]
        globalLogPublisher.addObserver(observer)
        self.addCleanup(globalLogPublisher.removeObserver, observer)
        other = Path(self.mktemp())
        other.write_text('{"servers": {"x": {"command": "true"}}}\n')
        a, _ = await self.daemon("d_a")
        _, b_reloads = await self.daemon("d_b", other)
        a.announce()
        await until(lambda: bool(b_reloads), "b reloads")
        warned = [
            e for e in events if e.get("log_level") == LogLevel.warn and e.get("other") == "d_a"
        ]
        self.assertEqual(len(warned), 1)
        self.assertEqual(warned[0]["path"], str(other))


class FleetDaemonsConfigTests(TestCase):
    timeout = 150

    async def test_listener_on_one_hears_a_change_on_another(self) -> None:
        """
        Two daemons on one config file and one database: a server added with C{mcpx add}
        through the second reaches the first, whose 2026-07-28 listener and legacy
        session hear their lists changed, and which lists and calls the new server.
        """
        cluster = shared_cluster()
        settings = {
            "MCPX_STORE_URL": cluster.url(cluster.database()),
            "MCPX_STORE_PASSWORD_FILE": str(cluster.password_file),
        }
        first = Daemon(self, {"demo": demo_server()}, settings=settings)
        second = Daemon(self, {"demo": demo_server()}, settings=settings)
        # One config file for both, as mcpx@.service instances on one host have.
        second.env["MCPX_CONFIG"] = first.env["MCPX_CONFIG"]
        await first.start()
        await second.start()
        modern, legacy = Host("modern"), Host("legacy")
        lives = [
            run_host(lambda: modern.modern(first.mcp_url)),
            run_host(lambda: legacy.legacy(first.mcp_url)),
        ]

        async def disconnect() -> None:
            for host in (modern, legacy):
                host.done.set()
            for life in lives:
                with contextlib.suppress(Exception):
                    await life

        self.addCleanup(disconnect)
        for host in (modern, legacy):
            await until(host.ready.is_set, f"the {host.name} host connected", 40)
        workdir = tempfile.mkdtemp(prefix="mcpx-fc-")
        self.addCleanup(shutil.rmtree, workdir, True)
        added = await second.mcpx(
            "add", "other", "--cwd", workdir, "--", sys.executable, "-m", "mcpx.demo"
        )
        self.assertEqual(added.code, 0, added)
        for host in (modern, legacy):
            await until(
                lambda host=host: (
                    host.heard_count(PROMPTS_CHANGED) >= 1  # type: ignore[misc]
                    and host.heard_count(RESOURCES_CHANGED) >= 1
                ),
                f"the {host.name} host on the first daemon hears the lists changed",
                20,
            )
        listed = await first.api("/v1/servers")
        self.assertIn("other", [server["name"] for server in listed["servers"]])
        call = legacy.call("mcpx_call", server="other", tool="echo", arguments={"text": "hi"})
        await until(lambda: bool(call.outcome), "the call of the added server", 30)
        self.assertIn("hi", call.outcome[0])
        await disconnect()
        for daemon in (second, first):
            self.assertEqual(await daemon.stop(), 0, daemon.log()[-4000:])
            self.assertEqual(daemon.log_lines("error") + daemon.log_lines("critical"), [])
