"""
What the CLI prints of a hostile upstream (L{tests.fixtures.hostile_text}), with a real
daemon: its tool's description, title and arguments, its results, the question it asks
(message, field, choices) and what it said as it died reach the terminal shown, never
acted on: no escape sequence, C1 control, carriage return or bidi override gets through.
"""

from __future__ import annotations

import sys

from twisted.trial.unittest import TestCase

from tests.questions.support import Daemon, Done
from tests.support.processes import REPO, kill_on_cleanup, spawn

#: What a terminal would act on, which none of the CLI's output may hold.
ACTED_ON = ("\x1b", "\x07", "\x9b", "\r", "\u202e", "\u202c")


class HostileTextTests(TestCase):
    timeout = 120

    def inert(self, done: Done, *shown: str) -> None:
        """C{done} succeeded, printed C{shown} and nothing a terminal would act on."""
        self.assertEqual(done.code, 0, done)
        printed = done.out + done.err
        for character in ACTED_ON:
            self.assertNotIn(character, printed)
        for text in shown:
            self.assertIn(text, printed)

    async def test_upstream_text_is_shown_not_acted_on(self) -> None:
        """
        C{mcpx tools}, C{describe}, C{call}, C{elicit} (the list and the form, answered
        at the prompts) and C{servers} print the server's escapes as C{\\u001b...}.
        """
        hostile = {"command": sys.executable, "args": ["-m", "tests.fixtures.hostile_text"]}
        daemon = await Daemon(self, {"hostile": hostile}).start()
        self.inert(await daemon.mcpx("tools"), "Ask before deleting\\u001b[2J")
        self.inert(
            await daemon.mcpx("describe", "hostile", "confirm"),
            "Confirm\\u001b[2J",
            "\\u001b]52;c;ZXZpbA==\\u0007",
            "why\\u001b[2J",
        )
        self.inert(await daemon.mcpx("call", "hostile", "echo"), "result\\u001b[2J")

        call = spawn(
            [sys.executable, "-m", "mcpx", "call", "hostile", "confirm"],
            env=daemon.env,
            cwd=str(REPO),
        )
        self.addCleanup(kill_on_cleanup, call)
        assert call.transport is not None
        call.transport.closeStdin()
        question = await daemon.wait_for_question("hostile")
        self.inert(await daemon.mcpx("elicit"), "Delete all files?\\u001b[2J")
        answering = spawn(
            [sys.executable, "-m", "mcpx", "elicit", question["id"]],
            env=daemon.env,
            cwd=str(REPO),
        )
        self.addCleanup(kill_on_cleanup, answering)
        assert answering.transport is not None
        answering.transport.write(b"a\n1\n")
        answering.transport.closeStdin()
        self.inert(
            Done(await answering.ended(timeout=30), answering),
            "Delete all files?\\u001b[2J\\u001b[H\\u001b]0;pwned title\\u0007",
            "\\u009b2J\\u202eevil\\u202c\\u000dover",
            "Pick\\u001b[2J",
            "1) Keep\\u001b[2J",
            "Choice\\u001b[2J",
        )
        self.inert(Done(await call.ended(timeout=30), call), "you chose accept")

        died = await daemon.mcpx("call", "hostile", "die")
        self.assertNotEqual(died.code, 0, died)
        servers = await daemon.mcpx("servers")
        self.inert(servers, "dying\\u001b[2J")
        for character in ACTED_ON:
            self.assertNotIn(character, died.out + died.err)
