"""
mcpx in pass-through in front of the TypeScript SDK 1.x fixture (C{tests/peers/sdk1-server.mjs}):
the official suite's server leg scores through mcpx what the fixture scores alone, and no
progress report is lost on the way, over stdio and over Streamable HTTP.

Like the conformance legs these refuse to run outside a private network namespace.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from mcp import Client
from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial.unittest import TestCase

from tests.conformance.test_passthrough_leg import in_thread, read_results, warm
from tests.interop.peers import SDK1_SERVER, SDK2_SERVER, Transport, start_daemon
from tests.support.peers import conformance_cli
from tests.support.processes import REPO, reactor

_FAILED = frozenset({"FAILURE", "WARNING"})
#: A scenario the suite runs but does not score for the revision (extensions such as
#: tasks, pending ones), as its summary lists them: "  ✗ name (reason)".
_UNSCORED = re.compile(r"^  [✓✗] (\S+) \(", re.MULTILINE)


async def suite_failures(test: TestCase, url: str, *selection: str) -> list[str]:
    """The failed checks of the suite's run at C{url} with C{selection} (its arguments)."""
    output = Path(test.mktemp()).resolve()
    output.mkdir(parents=True)
    cli = conformance_cli()
    out, err, code = await getProcessOutputAndValue(
        cli[0],
        [*cli[1:], "server", "--url", url, *selection, "-o", str(output)],
        env=dict(os.environ),
        path=str(REPO),
        reactor=reactor,
    )
    text = (out + err).decode("utf-8", "replace")
    unscored = set(_UNSCORED.findall(text[text.rfind("Not scored for") :]))
    lines = [
        f"{scenario}: {check['id']} {check['status']}: {check.get('errorMessage', '')}"[:300]
        for scenario, checks in sorted(read_results(output).items())
        if scenario not in unscored
        for check in checks
        if check["status"] in _FAILED
    ]
    if code != 0:
        lines.append(f"the suite exited {code}:\n{text[text.rfind('=== SUMMARY') :]}")
    return lines


class SDK1ServerLegTests(TestCase):
    """The suite at 2025-11-25 through mcpx, against the TS SDK 1.x fixture."""

    timeout = 120

    async def leg(self, transport: Transport) -> None:
        url = await start_daemon(self, SDK1_SERVER, transport)
        failures = await suite_failures(self, url, "--requirements", "2025-11-25")
        self.assertEqual(failures, [], "\n".join(failures))

    async def test_http(self) -> None:
        """
        Over Streamable HTTP every check passes, as against the fixture alone, among them
        tools-call-with-progress (three reports sent within a millisecond or two) and the
        elicitation and sampling scenarios (questions relayed on the call's stream).
        """
        await self.leg("http")

    async def test_stdio(self) -> None:
        """Over stdio every check passes too."""
        await self.leg("stdio")


class SDK2ServerLegTests(TestCase):
    """
    The suite through mcpx against the TS SDK v2 fixture, which serves 2026-07-28 and
    (through the SDK's stateless fallback) the 2025 revisions: every scored check passes
    at both requirement levels.  Alone, over HTTP, the fixture fails the four 2025-11-25
    scenarios that need a question answered (a stateless 2025 server cannot hear the
    answer); through mcpx, which speaks 2026-07-28 to it, they pass.
    """

    timeout = 240

    async def leg(self, transport: Transport) -> None:
        url = await start_daemon(self, SDK2_SERVER, transport)
        # The upstream instances the suite's declarations need are started first, as
        # in the reference leg: a stdio start within a check's 600 ms window is load.
        await warm(self, url)
        failures = []
        for revision in ("2026-07-28", "2025-11-25"):
            found = await suite_failures(self, url, "--requirements", revision)
            failures += [f"{revision}: {line}" for line in found]
        self.assertEqual(failures, [], "\n".join(failures))

    async def test_http(self) -> None:
        """Over Streamable HTTP."""
        await self.leg("http")

    async def test_stdio(self) -> None:
        """Over stdio."""
        await self.leg("stdio")


class ProgressBurstTests(TestCase):
    """Bursts of progress from a TypeScript upstream reach a Python SDK host whole."""

    timeout = 60

    async def burst(self, transport: Transport, count: int) -> None:
        url = await start_daemon(self, SDK1_SERVER, transport)
        seen: list[tuple[float, float | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append((progress, total))

        async def conversation() -> Any:
            async with Client(url, mode="legacy", cache=None) as client:
                return await client.call_tool(
                    "progress_burst", {"count": count}, progress_callback=on_progress
                )

        result = await in_thread(conversation)
        self.assertFalse(result.is_error)
        self.assertEqual(seen, [(float(n), float(count)) for n in range(1, count + 1)])

    async def test_three_over_http(self) -> None:
        """Three back-to-back reports over Streamable HTTP all arrive, in order."""
        await self.burst("http", 3)

    async def test_a_thousand_over_http(self) -> None:
        """A thousand back-to-back reports over Streamable HTTP all arrive, in order."""
        await self.burst("http", 1000)

    async def test_a_thousand_over_stdio(self) -> None:
        """A thousand back-to-back reports over stdio all arrive, in order."""
        await self.burst("stdio", 1000)


class ModernClientLegacyUpstreamTests(TestCase):
    """
    A 2026-07-28 client in front of the TS SDK 1.x fixture, a 2025-era server that asks
    with server-to-client requests: mcpx turns them into C{input_required} results, and
    refuses with -32021 what the client did not declare the capability for.
    """

    timeout = 90

    async def test_undeclared_capability_is_refused_not_left_waiting(self) -> None:
        """
        The suite's C{server-stateless} scenario passes: among its checks, the call of
        C{test_missing_capability} by a client that declared nothing gets -32021 with
        HTTP 400 (it used to wait in the broker until the scenario timed out), and the
        stream of C{test_streaming_elicitation} holds no independent request.
        """
        for transport in ("http", "stdio"):
            url = await start_daemon(self, SDK1_SERVER, transport)
            failures = await suite_failures(
                self, url, "--spec-version", "2026-07-28", "--scenario", "server-stateless"
            )
            self.assertEqual(failures, [], f"{transport}:\n" + "\n".join(failures))


class CancelledCallTests(TestCase):
    """
    The TypeScript SDK never answers a request it was told to cancel (the specification
    allows that): the cancelled call must not keep the next call's questions from
    their host.
    """

    timeout = 90

    async def test_question_after_a_cancelled_call_reaches_the_host(self) -> None:
        """
        A 2025-11-25 host on C{/mcp} cancels a call of the fixture's C{test_elicitation}
        while its question waits; its next call's question is put to it at once (it
        used to wait in the broker for C{pool.cancelGrace} and more), and the call is
        answered once the host answers.
        """
        from urllib.parse import urlsplit

        from twisted.internet.threads import deferToThread

        from tests.questions.hosts import HttpSessionHost

        url = await start_daemon(self, SDK1_SERVER, "stdio")
        port = urlsplit(url).port
        assert port is not None

        def conversation() -> dict[str, Any]:
            host = HttpSessionHost(port, "ada")
            try:
                host.answering = False
                first = host.call("test_elicitation", {"message": "Who are you?"})
                host.wait_for(lambda: len(host.asked) == 1)
                host.cancel(first)
                host.wait_for(lambda: len(host.withdrawn) == 1)
                second = host.call("test_elicitation", {"message": "Who are you?"})
                host.wait_for(lambda: len(host.asked) == 2)
                content = {"username": "ada", "email": "ada@example.com"}
                host.answer(host.asked[1], {"action": "accept", "content": content})
                return host.response(second)
            finally:
                host.close()

        answer = await deferToThread(conversation)
        self.assertIn("result", answer, answer)
        self.assertIn("accept", json.dumps(answer["result"]))
