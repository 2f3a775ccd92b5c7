"""
Warm servers (C{"warm": 1} in a server entry): started with the pool and kept running,
not reaped when idle, replaced after a crash once the back-off is over, and started or
let go by a reload that turns the option on or off.
"""

from __future__ import annotations

from attrs import evolve

from mcpx.pool import ServerState
from mcpx.settings.servers import StdioServer
from tests.pool.fakes import servers, stdio
from tests.pool.test_pool import IDLE_TIMEOUT, PoolTestCase


def warm(name: str) -> StdioServer:
    return evolve(stdio(name), warm=True)


class WarmTests(PoolTestCase):
    def test_started_with_the_pool(self) -> None:
        """A warm server runs as soon as the pool starts, before any call; a cold one does not."""
        pool = self.make_pool(warm("a"), stdio("b"))
        self.assertEqual([name for name, _, _ in self.connector.connects], ["a"])
        states = {s.name: (s.state, s.instances) for s in pool.status()}
        self.assertEqual(states["a"], (ServerState.READY, 1))
        self.assertEqual(states["b"], (ServerState.CONFIGURED, 0))
        self.assertEqual(self.echoed(self.call(pool)), "1:hi")

    def test_not_reaped_when_idle(self) -> None:
        """An unused warm instance outlives the idle timeout many times over."""
        pool = self.make_pool(warm("a"))
        [upstream] = self.connector.upstreams
        assert upstream.channel is not None
        self.clock.advance(IDLE_TIMEOUT * 10)
        self.assertEqual(upstream.channel.closes, 0)
        self.assertNotIn("server.reaped", self.events.kinds("a"))
        self.assertEqual(self.echoed(self.call(pool)), "1:hi")

    def test_replaced_after_crash_with_back_off(self) -> None:
        """A crashed warm instance is started again once the back-off delay has passed."""
        pool = self.make_pool(warm("a"))
        self.connector.upstreams[0].crash()
        [exited] = self.events.of("server.exited")
        delay = exited["retry_in"]
        self.clock.advance(delay - 0.1)
        self.assertEqual(len(self.connector.started("a")), 1)
        self.clock.advance(0.1)
        self.assertEqual(len(self.connector.started("a")), 2)
        self.assertEqual(self.echoed(self.call(pool)), "2:hi")

    def test_no_restart_after_stop(self) -> None:
        """Stopping the pool cancels a pending warm restart."""
        pool = self.make_pool(warm("a"))
        self.connector.upstreams[0].crash()
        self.stop(pool)
        self.clock.advance(100)
        self.assertEqual(len(self.connector.started("a")), 1)
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_reload_warms_and_cools(self) -> None:
        """A reload that makes a server warm starts it; one that cools it lets it be reaped."""
        pool = self.make_pool(stdio("a"))
        self.assertEqual(self.connector.upstreams, [])
        report = self.successResultOf(pool.reload(servers(warm("a"))))
        self.assertEqual(report.changed, ())
        [upstream] = self.connector.upstreams
        self.clock.advance(IDLE_TIMEOUT * 3)
        assert upstream.channel is not None
        self.assertEqual(upstream.channel.closes, 0)
        self.successResultOf(pool.reload(servers(stdio("a"))))
        self.clock.advance(IDLE_TIMEOUT * 2)
        self.assertEqual(upstream.channel.closes, 1)
        self.assertEqual(self.events.kinds("a")[-1], "server.reaped")
