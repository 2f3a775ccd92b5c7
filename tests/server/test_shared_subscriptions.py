"""
One resource of a shared server watched by two hosts of different eras, with clients
mcpx did not write: the MCP Python SDK's client as a legacy host over C{/mcp}
(C{resources/subscribe}) and as a 2026-07-28 host over C{mcpx serve}
(C{subscriptions/listen}).  One leaving does not end the other's updates, and neither
does the server being restarted; for a legacy and a modern upstream each (the SDK's
fixture server).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import urllib.request
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from twisted.trial.unittest import TestCase

from mcpx.ops import uris
from tests.server.test_peers import in_thread, texts
from tests.support.peers import Era, fixture_argv
from tests.support.processes import REPO, free_tcp_port, kill_on_cleanup, spawn

WATCHED = uris.to_mcpx("sdk", "fixture://watched")
#: Seconds to wait for one update to arrive.
UPDATE_WAIT = 10.0


class SharedSubscriptionTests(TestCase):
    timeout = 120

    async def start_daemon(self, era: Era) -> tuple[str, dict[str, str], int]:
        state = tempfile.mkdtemp(prefix="mcpx-shared-")
        config_home = tempfile.mkdtemp(prefix="mcpx-shared-cfg-")
        for directory in (state, config_home):
            self.addCleanup(shutil.rmtree, directory, ignore_errors=True)
        config = os.path.join(config_home, "servers.json")
        argv = fixture_argv("stdio", era)
        with open(config, "w") as f:
            json.dump({"servers": {"sdk": {"command": argv[0], "args": argv[1:]}}}, f)
        env = {k: v for k, v in os.environ.items() if not k.startswith("MCPX_")}
        env.update(MCPX_STATE_DIR=state, XDG_CONFIG_HOME=config_home, MCPX_CONFIG=config)
        port = free_tcp_port()
        child = spawn(
            [
                sys.executable,
                "-m",
                "mcpx",
                "daemon",
                "--daemon-listen",
                f"tcp:{port}:interface=127.0.0.1",
            ],
            env=env,
        )
        self.addCleanup(kill_on_cleanup, child)

        async def stop() -> None:
            child.signal("TERM")
            await child.ended()

        self.addCleanup(stop)
        await child.wait_for(rb"daemon is running")
        return f"http://127.0.0.1:{port}/mcp", env, port

    async def shared(self, era: Era) -> None:
        url, env, port = await self.start_daemon(era)
        serve = StdioServerParameters(
            command=sys.executable, args=["-m", "mcpx", "serve"], env=env, cwd=str(REPO)
        )
        seen: dict[str, Any] = {}

        async def conversation() -> None:
            legacy_updates: list[str] = []

            async def legacy_heard(message: Any) -> None:
                root = getattr(message, "root", message)
                if getattr(root, "method", None) == "notifications/resources/updated":
                    legacy_updates.append(str(root.params.uri))

            async def touch(client: Client) -> str:
                result = await client.call_tool(
                    "mcpx_call", {"server": "sdk", "tool": "touch", "arguments": {}}
                )
                return texts(result)

            async with (
                Client(url, mode="legacy", message_handler=legacy_heard) as legacy,
                Client(serve, mode="2026-07-28") as modern,
            ):
                seen["legacy_version"] = legacy.protocol_version
                seen["modern_version"] = modern.protocol_version
                await legacy.subscribe_resource(WATCHED)
                async with modern.listen(resource_subscriptions=[WATCHED]) as listening:
                    seen["honoured"] = list(listening.honored.resource_subscriptions or [])
                    events = listening.__aiter__()

                    async def next_update() -> str:
                        with anyio.fail_after(UPDATE_WAIT):
                            event = await events.__anext__()
                        return repr(event)

                    seen["touch_both"] = await touch(legacy)
                    seen["modern_1"] = await next_update()
                    with anyio.fail_after(UPDATE_WAIT):
                        while not legacy_updates:
                            await anyio.sleep(0.02)
                    seen["legacy_1"] = list(legacy_updates)

                    # The legacy host leaves: the modern one keeps hearing.
                    await legacy.unsubscribe_resource(WATCHED)
                    seen["touch_after_leave"] = await touch(modern)
                    seen["modern_2"] = await next_update()

                    # The server restarted: both stay subscribed through it.
                    await anyio.to_thread.run_sync(_restart, port)
                    seen["touch_after_restart"] = await touch(modern)
                    seen["modern_3"] = await next_update()
                    seen["legacy_after_leave"] = list(legacy_updates)

        async def unwrapped() -> None:
            try:
                await conversation()
            except BaseExceptionGroup as group:
                # The SDK's task groups wrap what went wrong: the first error is the story.
                first: BaseException = group
                while isinstance(first, BaseExceptionGroup):
                    first = first.exceptions[0]
                raise first from None

        await in_thread(unwrapped)
        self.assertEqual(seen["legacy_version"], "2025-11-25")
        self.assertEqual(seen["modern_version"], "2026-07-28")
        self.assertEqual(seen["honoured"], [WATCHED])
        for key in ("touch_both", "touch_after_leave", "touch_after_restart"):
            self.assertNotIn("nobody subscribed", seen[key], key)
        for key in ("modern_1", "modern_2", "modern_3"):
            self.assertIn("watched", seen[key], key)
        self.assertEqual(seen["legacy_1"], [WATCHED])
        self.assertEqual(seen["legacy_after_leave"], [WATCHED])

    async def test_legacy_upstream(self) -> None:
        """A legacy upstream, which mcpx subscribes with resources/subscribe."""
        await self.shared("legacy")

    async def test_modern_upstream(self) -> None:
        """A 2026-07-28 upstream, which mcpx subscribes on its subscriptions/listen."""
        await self.shared("modern")


def _restart(port: int) -> None:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/servers/sdk/restart",
        data=b"{}",
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=20) as response:
        response.read()
