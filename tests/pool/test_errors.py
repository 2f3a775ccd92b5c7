"""What the pool's errors say, and the codes the API reports them with."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from mcpx.pool.errors import (
    CallTimedOut,
    ServerUnavailable,
    UnknownServer,
    format_seconds,
)


class MessageTests(SynchronousTestCase):
    def test_codes(self) -> None:
        """Each error carries its stable snake_case code."""
        self.assertEqual(UnknownServer("x", ()).code, "unknown_server")
        self.assertEqual(ServerUnavailable("x", "why").code, "server_unavailable")
        self.assertEqual(CallTimedOut("x", "t", 1.0).code, "call_timeout")

    def test_unknown_server_suggests(self) -> None:
        """An unknown name gets the nearest configured one and the full list."""
        error = UnknownServer("fils", ["files", "github"])
        self.assertEqual(
            str(error),
            "no server named 'fils' is configured; did you mean 'files'? "
            "(configured servers: files, github)",
        )
        self.assertEqual(error.message, str(error))

    def test_unknown_server_nothing_configured(self) -> None:
        """With no servers at all, the message says so."""
        self.assertIn("no servers are configured", str(UnknownServer("x", [])))

    def test_unavailable_with_retry(self) -> None:
        """An unavailable server says why and when it will be started again."""
        error = ServerUnavailable("demo", "it crashed 3 times in a row", 4.0)
        self.assertEqual(
            str(error),
            "server 'demo' is unavailable: it crashed 3 times in a row; next start in 4s",
        )
        self.assertEqual(error.retry_in, 4.0)

    def test_unavailable_without_retry(self) -> None:
        """Without a restart delay, the message only says why."""
        self.assertEqual(
            str(ServerUnavailable("demo", "mcpx is shutting down")),
            "server 'demo' is unavailable: mcpx is shutting down",
        )

    def test_timed_out(self) -> None:
        """A timeout names the server, the tool and the bound, and what can be changed."""
        error = CallTimedOut("demo", "slow", 2.5)
        self.assertIn("'demo' did not answer 'slow' within 2.5s", str(error))
        self.assertIn("pool.callTimeout", str(error))

    def test_seconds_rounded_up(self) -> None:
        """Durations are rounded up, so that waiting as long as told is long enough."""
        self.assertEqual(
            [format_seconds(s) for s in (4.0, 3.01, 0.25, 0.01, 59.2, 60.0)],
            ["4s", "3.1s", "0.3s", "0.1s", "60s", "60s"],
        )
