"""
A resource subscription end to end: a host on `mcpx serve` subscribes to an upstream
resource through its mcpx:// URI, the upstream (the `mcp` SDK's fixture server) says it
changed, and the host hears it under the same mcpx:// URI.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from twisted.internet.task import deferLater

from tests.cli.test_real_daemon import RealDaemonCase
from tests.support.peers import fixture_argv
from tests.support.processes import REPO, kill_on_cleanup, reactor, spawn


class Host:
    """A line-at-a-time JSON-RPC client on a `mcpx serve` process."""

    def __init__(self, case: RealDaemonCase) -> None:
        self.child = spawn([sys.executable, "-m", "mcpx", "serve"], env=case.env, cwd=str(REPO))
        case.addCleanup(kill_on_cleanup, self.child)
        self.next_id = 0
        self.claimed: set[int] = set()

    def send(self, message: dict[str, Any]) -> None:
        assert self.child.transport is not None
        self.child.transport.write(json.dumps(message).encode() + b"\n")

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        answer = await self.message(lambda m: m.get("id") == self.next_id and "method" not in m)
        assert "result" in answer, answer
        return answer["result"]

    async def message(self, wanted: Any, timeout: float = 15.0) -> dict[str, Any]:
        """The first line from now on for which C{wanted} is true, within C{timeout}."""
        for _ in range(int(timeout / 0.02)):
            # Frames arrive in any order (an update may overtake the answer it follows
            # from), so each is searched for until somebody claims it.
            text = self.child.text(1)
            # Only whole lines: a long frame arrives in several reads.
            complete = text[: text.rfind("\n") + 1]
            for number, line in enumerate(complete.splitlines()):
                if number in self.claimed:
                    continue
                frame = json.loads(line)
                if wanted(frame):
                    self.claimed.add(number)
                    return frame  # type: ignore[no-any-return]
            await deferLater(reactor, 0.02, lambda: None)
        raise AssertionError(f"nothing wanted within {timeout}s; the host saw {self.child.text()}")


class ResourceUpdateTests(RealDaemonCase):
    timeout = 60

    async def test_an_upstream_update_reaches_the_subscribed_host(self) -> None:
        """subscribe → upstream resources/updated → the host is told, with the mcpx:// URI."""
        await self.start_daemon({"sdk": fixture_argv("stdio", "legacy")})
        host = Host(self)
        await host.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test-host", "version": "1"},
            },
        )
        host.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        listed = await host.request("resources/list", {})
        watched = [r["uri"] for r in listed["resources"] if "watched" in r["uri"]]
        self.assertEqual(len(watched), 1, listed)
        uri = watched[0]
        self.assertTrue(uri.startswith("mcpx://sdk/"), uri)
        await host.request("resources/subscribe", {"uri": uri})
        touched = await host.request(
            "tools/call", {"name": "mcpx_call", "arguments": {"server": "sdk", "tool": "touch"}}
        )
        self.assertNotIn("nobody subscribed", json.dumps(touched))
        update = await host.message(lambda m: m.get("method") == "notifications/resources/updated")
        self.assertEqual(update["params"]["uri"], uri)
        assert host.child.transport is not None
        host.child.transport.closeStdin()
        self.assertEqual(await host.child.ended(timeout=20), 0)
