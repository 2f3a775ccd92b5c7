"""
End to end: C{mcpx call} without a terminal says which question it waits on.

A real daemon holds a question for the call in its broker — the policy's confirmation of
a destructive tool (the notes fixture), or a form the server itself asks for (the SDK
fixture's C{ask_name}).  The command runs with pipes for its standard streams, so nobody
can be asked there: it prints one line on stderr naming the question and the C{mcpx
elicit} command that answers it, and nothing of that on stdout.  The test answers with
exactly that command, and the call ends with the server's result.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

from twisted.trial.unittest import TestCase

from tests.policy.test_real_hosts import Notes, notes
from tests.questions.support import Daemon, legacy_fixture_server
from tests.support.processes import REPO, ChildProcess, kill_on_cleanup, spawn

#: The line C{mcpx call} prints while its question waits in the broker.
POINTER = rb"mcpx: the call waits for an answer to [^\n]*\n"


class PointsAtElicitTests(TestCase):
    """The waiting call names its question once, on stderr, with the command to answer."""

    timeout = 90

    def call(self, daemon: Daemon, *argv: str) -> ChildProcess:
        child = spawn([sys.executable, "-m", "mcpx", "call", *argv], env=daemon.env, cwd=str(REPO))
        self.addCleanup(kill_on_cleanup, child)
        assert child.transport is not None
        child.transport.closeStdin()
        return child

    async def pointed(self, daemon: Daemon, child: ChildProcess, server: str) -> tuple[str, str]:
        """The line printed, and the command it names; it names the pending question."""
        line = (await child.wait_for(POINTER, fd=2, timeout=30)).decode()
        command = re.search(r"answer it with: (mcpx elicit (\S+))$", line.strip())
        assert command is not None, line
        pending = await daemon.wait_for_question(server)
        self.assertEqual(command.group(2), pending["id"])
        self.assertNotIn("mcpx elicit", child.text(1), "the pointer went to stdout")
        return line, command.group(1)

    async def answer(self, daemon: Daemon, command: str, content: dict[str, Any]) -> None:
        done = await daemon.mcpx(*command.split()[1:], "--answer", json.dumps(content))
        self.assertEqual(done.code, 0, done)

    async def test_confirmation(self) -> None:
        """
        C{mcpx call notes delete_note} waits for the policy's confirmation: the line
        shows what mcpx asks (the tool and server); the call is not sent until the named
        command says yes, then prints the result, and the line was printed once.
        """
        record = Notes(self)
        daemon = await Daemon(self, {"notes": notes(record.path, confirmDestructive=True)}).start()
        child = self.call(daemon, "notes", "delete_note", "name=shopping")
        line, command = await self.pointed(daemon, child, "notes")
        self.assertIn("from notes (mcpx asks before calling tool 'delete_note'", line)
        self.assertEqual(record.seen(), [], "the call ran before it was confirmed")
        await self.answer(daemon, command, {"confirm": True})
        code = await child.ended(timeout=30)
        self.assertEqual((code, child.text(1)), (0, "deleted shopping\n"), child.text())
        self.assertEqual(child.text(2).count("mcpx elicit"), 1, child.text(2))
        self.assertEqual(
            record.seen(), [{"tool": "delete_note", "arguments": {"name": "shopping"}}]
        )

    async def test_server_question(self) -> None:
        """
        The server's own form (C{ask_name}) is pointed out the same way, with its
        message; answered by the named command, the call prints the server's greeting.
        """
        daemon = await Daemon(self, {"legacy": legacy_fixture_server()}).start()
        child = self.call(daemon, "legacy", "ask_name")
        line, command = await self.pointed(daemon, child, "legacy")
        self.assertIn("elicitation", line)
        self.assertIn("What is your name?", line)
        await self.answer(daemon, command, {"name": "Grace"})
        code = await child.ended(timeout=30)
        self.assertEqual((code, child.text(1)), (0, "Hello, Grace\n"), child.text())
        self.assertEqual(child.text(2).count("mcpx elicit"), 1, child.text(2))
