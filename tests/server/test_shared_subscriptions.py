"""
One resource of a shared server watched by two hosts of different eras, with clients
mcpx did not write: the MCP Python SDK's client as a legacy host over C{/mcp}
(C{resources/subscribe}) and the TypeScript client SDK v2 as a 2026-07-28 host over
C{mcpx serve} (C{subscriptions/listen}, C{tests/peers/client2-host.mjs --watch}).
Both keep hearing through a restart of the server; either leaving does not end the
other's updates; for a legacy and a modern upstream each (the SDK's fixture server).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import urllib.request
from collections.abc import Callable
from typing import Any

import anyio
from anyio.abc import Process
from mcp import Client
from twisted.trial.unittest import TestCase

from mcpx.ops import uris
from tests.server.test_peers import in_thread, texts
from tests.support.peers import NODE_MODULES, Era, fixture_argv, node22
from tests.support.processes import REPO, free_tcp_port, kill_on_cleanup, spawn

WATCHED = uris.to_mcpx("sdk", "fixture://watched")
#: Seconds to wait for one update to arrive.
UPDATE_WAIT = 10.0
#: Seconds a host that should hear nothing more is given to prove it.
QUIET_WAIT = 1.0
TS_HOST = NODE_MODULES.parent / "client2-host.mjs"


class Watcher:
    """
    The TypeScript host in its watching mode, as a child process: what it printed
    (one JSON object a line) and the commands it takes on its standard input.
    """

    def __init__(self, process: Process) -> None:
        self.process = process
        self.events: list[dict[str, Any]] = []

    async def read(self) -> None:
        """Collect the host's lines until it exits."""
        assert self.process.stdout is not None
        pending = b""
        async for chunk in self.process.stdout:
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line.strip():
                    self.events.append(json.loads(line))

    def updates(self) -> list[str]:
        return [e["uri"] for e in self.events if e.get("event") == "updated"]

    async def wait_for(self, test: Callable[[], bool], what: str) -> None:
        with anyio.fail_after(UPDATE_WAIT):
            while not test():
                await anyio.sleep(0.02)
        if any(e.get("event") == "error" for e in self.events):
            raise AssertionError(f"the TS host failed while waiting for {what}: {self.events}")

    async def send(self, command: str) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(command.encode() + b"\n")


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
        node = node22()
        seen: dict[str, Any] = {}

        async def conversation() -> None:
            legacy_updates: list[str] = []

            async def legacy_heard(message: Any) -> None:
                root = getattr(message, "root", message)
                if getattr(root, "method", None) == "notifications/resources/updated":
                    legacy_updates.append(str(root.params.uri))

            async def until(test: Callable[[], bool]) -> None:
                with anyio.fail_after(UPDATE_WAIT):
                    while not test():
                        await anyio.sleep(0.02)

            ts_argv = [
                node,
                str(TS_HOST),
                "--era",
                "2026-07-28",
                "--command",
                sys.executable,
                "--args",
                json.dumps(["-m", "mcpx", "serve"]),
                "--watch",
                WATCHED,
            ]
            async with (
                Client(url, mode="legacy", message_handler=legacy_heard) as legacy,
                await anyio.open_process(ts_argv, env=env, cwd=str(REPO), stderr=None) as process,
                anyio.create_task_group() as group,
            ):
                modern = Watcher(process)
                group.start_soon(modern.read)

                async def touch() -> str:
                    result = await legacy.call_tool(
                        "mcpx_call", {"server": "sdk", "tool": "touch", "arguments": {}}
                    )
                    return texts(result)

                async def step(name: str, legacy_count: int, modern_count: int) -> None:
                    """Touch the resource; each host then has heard so many updates."""
                    seen[f"touch_{name}"] = await touch()
                    if modern_count > len(modern.updates()):
                        await modern.wait_for(lambda: len(modern.updates()) >= modern_count, name)
                    if legacy_count > len(legacy_updates):
                        await until(lambda: len(legacy_updates) >= legacy_count)
                    # The host that should not hear is given time to (wrongly) hear.
                    await anyio.sleep(QUIET_WAIT)
                    seen[f"legacy_{name}"] = list(legacy_updates)
                    seen[f"modern_{name}"] = modern.updates()

                seen["legacy_version"] = legacy.protocol_version
                await legacy.subscribe_resource(WATCHED)
                await modern.wait_for(
                    lambda: any(e.get("event") == "watching" for e in modern.events), "listen"
                )
                seen["honoured"] = next(
                    e["honoured"] for e in modern.events if e.get("event") == "watching"
                )
                await step("both", 1, 1)

                # The server restarted: both stay subscribed through it.
                await anyio.to_thread.run_sync(_restart, port)
                await step("after_restart", 2, 2)

                # The legacy host leaves: the modern one keeps hearing.
                await legacy.unsubscribe_resource(WATCHED)
                await step("legacy_left", 2, 3)

                # The legacy host is back and the modern one leaves: the legacy one hears.
                await legacy.subscribe_resource(WATCHED)
                await modern.send("unwatch")
                await modern.wait_for(
                    lambda: any(e.get("event") == "unwatched" for e in modern.events), "unwatch"
                )
                await step("modern_left", 3, 3)
                await modern.send("close")
                await process.wait()
                seen["modern_events"] = list(modern.events)

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
        self.assertEqual(seen["honoured"], [WATCHED])
        for name in ("both", "after_restart", "legacy_left", "modern_left"):
            self.assertNotIn("nobody subscribed", seen[f"touch_{name}"], name)
        self.assertEqual(
            [(seen[f"legacy_{n}"], seen[f"modern_{n}"]) for n in ("both", "after_restart")],
            [([WATCHED], [WATCHED]), ([WATCHED] * 2, [WATCHED] * 2)],
        )
        self.assertEqual(seen["legacy_legacy_left"], [WATCHED] * 2, "the host that left heard")
        self.assertEqual(seen["modern_legacy_left"], [WATCHED] * 3)
        self.assertEqual(seen["legacy_modern_left"], [WATCHED] * 3)
        self.assertEqual(seen["modern_modern_left"], [WATCHED] * 3, "the host that left heard")
        self.assertNotIn(
            "error", [e.get("event") for e in seen["modern_events"]], seen["modern_events"]
        )

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
