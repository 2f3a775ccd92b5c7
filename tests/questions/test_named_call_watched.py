"""
A C{/v1/call} that names its C{call_id} (as C{mcpx call} does, whose watch lists the
call's questions by that name) is watched from its start: a question its server asks at
once waits in the broker under C{proto.brokerWhenUnwatched: refuse}, even before anyone
listed the questions; a call that names nothing, with nobody watching, has it refused.
"""

from __future__ import annotations

import sys
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase

from tests.questions.support import Daemon
from tests.support.http import TestClient, exchange
from tests.support.processes import reactor

HOSTILE = {"command": sys.executable, "args": ["-m", "tests.fixtures.hostile_text"]}


class NamedCallWatchedTests(TestCase):
    timeout = 120

    async def call(self, daemon: Daemon, body: dict[str, Any]) -> Deferred[Any]:
        client = TestClient(reactor, unix_socket=daemon.socket)
        self.addCleanup(client.close)
        return Deferred.fromCoroutine(
            exchange(
                client.http,
                "POST",
                "http://mcpx/v1/call",
                {"Content-Type": "application/json"},
                {"server": "hostile", "tool": "confirm", "arguments": {}, **body},
            )
        )

    async def pending(self, daemon: Daemon) -> int:
        """The questions pending, from C{/metrics}: reading it is not a look at them."""
        client = TestClient(reactor, unix_socket=daemon.socket)
        try:
            response = await client.http.get("http://mcpx/metrics")
            text = (await response.text()).splitlines()
        finally:
            await client.close()
        [line] = [each for each in text if each.startswith("mcpx_questions_pending ")]
        return int(float(line.split()[1]))

    async def test_a_named_call_is_watched_from_its_start(self) -> None:
        daemon = await Daemon(self, {"hostile": HOSTILE}).start()
        named = await self.call(daemon, {"call_id": "cli-call-1"})
        # Until its question waits, or the call is answered (its question refused):
        # nothing lists the questions meanwhile.
        while not named.called and await self.pending(daemon) == 0:
            await deferLater(reactor, 0.05, lambda: None)
        self.assertFalse(named.called, "the named call's question was refused")
        question = await daemon.wait_for_question("hostile")
        self.assertEqual(question["call_id"], "cli-call-1")
        named.addErrback(lambda _: None)
        named.cancel()

    async def test_an_unnamed_call_with_nobody_watching_is_refused(self) -> None:
        daemon = await Daemon(self, {"hostile": HOSTILE}).start()
        code, _, body = await (await self.call(daemon, {}))
        # The server answered the call itself, having been refused its question.
        self.assertEqual(code, 200, body)
        self.assertNotIn(b"Delete all files", body)
