# -*- test-case-name: tests.questions.test_end_to_end -*-
"""
Real daemons, real upstream servers and real clients for the question relay's
end-to-end tests.

A L{Daemon} is C{python -m mcpx daemon} in a temporary state directory, on its unix
socket and a loopback TCP port it picks itself (port 0; the banner says which), with a
configuration file naming the upstreams the test needs.  The MCP Python SDK's client
runs in a worker thread on its own event loop (L{in_thread}); the C{mcpx} commands run
as subprocesses (L{Daemon.mcpx}); the daemon's own HTTP API is reached with treq
(L{Daemon.api}).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import traceback
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

import anyio
import treq
from mcp import StdioServerParameters
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThread
from twisted.trial.unittest import TestCase
from twisted.web.http_headers import Headers

from tests.support.http import TestClient
from tests.support.peers import everything_stdio_argv, fixture_argv
from tests.support.processes import REPO, ChildProcess, kill_on_cleanup, reactor, spawn

T = TypeVar("T")

#: The revision of a modern client.
MODERN: Final = "2026-07-28"

#: Bound on one SDK-client conversation, so a hang fails the test instead of a thread.
CONVERSATION_TIMEOUT: Final = 30.0

#: How long a daemon gets to start listening, and to exit after C{TERM}.
DAEMON_TIMEOUT: Final = 20.0

_BANNER: Final = rb"listening on http://127\.0\.0\.1:(\d+)"


def demo_server() -> dict[str, Any]:
    """The in-project demo (dual era: mcpx reaches it as a 2026-07-28 upstream)."""
    return {"command": sys.executable, "args": ["-m", "mcpx.demo"]}


def modern_demo_server() -> dict[str, Any]:
    """
    The demo held to 2026-07-28 by its entry's C{protocol}: a single-era upstream, to
    which a handshake-era host is bridged rather than met in its own era
    (spec/era-mirroring.md).
    """
    return {**demo_server(), "protocol": "modern"}


def legacy_fixture_server() -> dict[str, Any]:
    """The SDK fixture server refusing anything but the handshake revisions, over stdio."""
    argv = fixture_argv("stdio", "legacy")
    return {"command": argv[0], "args": argv[1:]}


def everything_server() -> dict[str, Any]:
    """
    C{@modelcontextprotocol/server-everything} over stdio (a handshake-era server).

    @raise PeersMissing: the npm peers are not installed (C{make test} installs them).
    """
    argv = everything_stdio_argv()
    return {"command": argv[0], "args": argv[1:]}


class Done:
    """A finished command: its exit status and what it wrote."""

    def __init__(self, code: int, child: ChildProcess) -> None:
        self.code = code
        self.out = child.text(1)
        self.err = child.text(2)

    def __repr__(self) -> str:
        return f"<exit {self.code}; stdout {self.out!r}; stderr {self.err!r}>"

    def json(self) -> Any:
        return json.loads(self.out)


class Daemon:
    """
    One C{mcpx daemon} process of a test, and what it takes to start it again on the
    same state directory.

    @ivar env: the environment of the daemon and of every command run against it.
    @ivar port: the loopback TCP port it listens on (a new one after each start).
    """

    def __init__(
        self,
        test: TestCase,
        servers: Mapping[str, Mapping[str, Any]],
        *,
        passthrough: Sequence[str] = (),
        settings: Mapping[str, str] | None = None,
        program: Sequence[str] = ("-m", "mcpx"),
    ) -> None:
        """
        @param servers: the configuration's C{servers}.
        @param passthrough: the daemon's C{--passthrough}.
        @param settings: extra C{MCPX_*} variables (C{MCPX_PROTO_STATE_TTL}, ...).
        @param program: what Python runs, given C{daemon} and its flags.
        """
        self._test = test
        # Short paths: the unix sockets under the state folder must fit in 108 bytes.
        self.state_dir = Path(tempfile.mkdtemp(prefix="mcpx-q-"))
        config_home = tempfile.mkdtemp(prefix="mcpx-qc-")
        test.addCleanup(shutil.rmtree, str(self.state_dir), True)
        test.addCleanup(shutil.rmtree, config_home, True)
        config = Path(config_home) / "config.json"
        config.write_text(json.dumps({"servers": dict(servers)}), encoding="utf-8")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("MCPX_")}
        self.env.update(
            MCPX_CONFIG=str(config),
            MCPX_STATE_DIR=str(self.state_dir),
            XDG_CONFIG_HOME=config_home,
            **(settings or {}),
        )
        self._argv = [
            sys.executable,
            *program,
            "daemon",
            "--daemon-listen",
            "tcp:0:interface=127.0.0.1",
        ]
        if passthrough:
            self._argv += ["--passthrough", ",".join(passthrough)]
        self.child: ChildProcess | None = None
        self.port = 0
        self._runs: list[ChildProcess] = []

    @property
    def mcp_url(self) -> str:
        """Its Streamable HTTP endpoint."""
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def socket(self) -> str:
        """Its unix socket (the HTTP API)."""
        return str(self.state_dir / "mcpx.sock")

    def serve(self, passthrough: str) -> StdioServerParameters:
        """C{mcpx serve --passthrough C{passthrough}} against it, as a stdio host runs it."""
        return StdioServerParameters(
            command=sys.executable,
            args=["-m", "mcpx", "serve", "--passthrough", passthrough],
            env=self.env,
            cwd=str(REPO),
        )

    async def start(self) -> Daemon:
        """Start the daemon and return once it listens."""
        child = spawn(self._argv, env=self.env, cwd=str(REPO))
        self._test.addCleanup(kill_on_cleanup, child)
        self._test.addCleanup(self._stop_quietly, child)
        self.child = child
        self._runs.append(child)
        try:
            banner = await child.wait_for(_BANNER, timeout=DAEMON_TIMEOUT)
        except Exception:
            self._test.fail(f"the daemon did not start:\n{child.text()}")
        match = re.search(_BANNER, banner)
        assert match is not None
        self.port = int(match.group(1))
        return self

    async def stop(self) -> int:
        """C{SIGTERM}; the daemon's exit status."""
        child = self.child
        assert child is not None
        await self._stop_quietly(child)
        assert child.exit_code is not None
        return child.exit_code

    async def _stop_quietly(self, child: ChildProcess) -> None:
        if child.exit_code is None:
            child.signal("TERM")
            await child.ended(DAEMON_TIMEOUT)

    def log(self) -> str:
        """What every run of the daemon wrote on stderr (its log), oldest first."""
        return "\n".join(run.text(2) for run in self._runs)

    def log_lines(self, level: str) -> list[str]:
        """The log events at C{level} (C{error}, C{critical}, ...), as their JSON lines."""
        found = []
        for line in self.log().splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if not isinstance(event, dict):
                continue
            # The daemon's JSON lines say "level"; Twisted's own JSON format "log_level".
            named = event.get("level", event.get("log_level", {}).get("name"))
            if named == level:
                found.append(line)
        return found

    async def mcpx(self, *args: str) -> Done:
        """Run C{python -m mcpx args} against this daemon, to its end."""
        child = spawn([sys.executable, "-m", "mcpx", *args], env=self.env, cwd=str(REPO))
        self._test.addCleanup(kill_on_cleanup, child)
        assert child.transport is not None
        child.transport.closeStdin()
        code = await child.ended(timeout=30)
        return Done(code, child)

    async def api(self, path: str) -> Any:
        """C{GET} C{path} of the daemon's HTTP API over its unix socket; the JSON body."""
        client = TestClient(reactor, unix_socket=self.socket)
        try:
            code, body = await client.get_json(f"http://mcpx{path}")
        finally:
            await client.close()
        if code != 200:
            self._test.fail(f"GET {path}: {code} {body}")
        return body

    async def wait_for_question(
        self, server: str, *, state: str = "pending", timeout: float = 20.0
    ) -> dict[str, Any]:
        """The first question C{server} asked that is in C{state}, once there is one."""
        deadline = reactor.seconds() + timeout
        while True:
            listed = await self.api("/v1/questions?all=true")
            for question in listed["questions"]:
                if question["server"] == server and question["state"] == state:
                    found: dict[str, Any] = question
                    return found
            if reactor.seconds() > deadline:
                self._test.fail(
                    f"no {state} question from {server} within {timeout}s: {listed}\n"
                    f"daemon log:\n{self.log()[-4000:]}"
                )
            await deferLater(reactor, 0.05, lambda: None)


async def modern_post(
    daemon: Daemon, request_id: int, name: str, params: Mapping[str, Any]
) -> tuple[int, dict[str, Any]]:
    """
    One 2026-07-28 C{tools/call} POSTed to the daemon's C{/mcp} as raw HTTP, with the
    headers that era requires and C{_meta} declaring elicitation.

    @param params: the call's params besides C{name} and C{_meta}.
    @return: the HTTP status and the JSON-RPC response.
    """
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {
            "name": name,
            **params,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
            },
        },
    }
    client = TestClient(reactor)
    try:
        response = await client.http.post(
            daemon.mcp_url,
            data=json.dumps(body).encode(),
            headers=Headers(
                {
                    "Content-Type": ["application/json"],
                    "Accept": ["application/json"],
                    "MCP-Protocol-Version": [MODERN],
                    "Mcp-Method": ["tools/call"],
                    "Mcp-Name": [name],
                }
            ),
        )
        text = await treq.content(response)
    finally:
        await client.close()
    answer: dict[str, Any] = json.loads(text)
    return response.code, answer


def _describe_group(group: BaseExceptionGroup[BaseException]) -> str:
    """The leaf exceptions of C{group}, each with its traceback, as text."""
    return "".join(traceback.format_exception(group))


def in_thread(conversation: Callable[[], Awaitable[T]]) -> Any:
    """Run an SDK-client C{conversation} on its own event loop in a worker thread."""

    async def bounded() -> T:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with anyio.fail_after(CONVERSATION_TIMEOUT):
                try:
                    return await conversation()
                except BaseExceptionGroup as group:
                    # The SDK wraps the real failure in task groups; name it, so a
                    # failure report says what went wrong rather than "1 sub-exception".
                    raise RuntimeError(_describe_group(group)) from group

    return deferToThread(anyio.run, bounded)
