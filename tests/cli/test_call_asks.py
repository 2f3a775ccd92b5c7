"""
End to end: C{mcpx call} at a terminal answers its own call's questions.

A real daemon calls the SDK fixture server's C{ask_name}, which elicits a name; the
daemon's caller (C{mcpx call}) declared nothing, so the question waits in the broker, named
after the call.  The command runs as a child process on a pseudo-terminal: it shows the
form there, the test types the answer, and the call ends with the server's greeting.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

from twisted.internet.threads import deferToThread
from twisted.trial.unittest import TestCase

from tests.questions.support import Daemon, legacy_fixture_server
from tests.support.processes import REPO

#: Bound on one conversation with the command.
CONVERSATION: float = 40.0


class Conversation:
    """What a command run on a pseudo-terminal showed there and wrote on stdout."""

    def __init__(self, code: int, terminal: str, out: str) -> None:
        self.code = code
        self.terminal = terminal
        self.out = out

    def __repr__(self) -> str:
        return f"<exit {self.code}; terminal {self.terminal!r}; stdout {self.out!r}>"


def _read_until(master: int, seen: bytearray, wanted: bytes, deadline: float) -> bool:
    """Read the terminal into C{seen} until C{wanted} appears (C{True}) or it ends."""
    while wanted not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        ready, _, _ = select.select([master], [], [], left)
        if not ready:
            continue
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO: every process holding the terminal has closed it
            return False
        if not data:
            return False
        seen.extend(data)
    return True


def converse(
    argv: Sequence[str],
    env: Mapping[str, str],
    script: Sequence[tuple[bytes, bytes]],
    *,
    stdout_on_terminal: bool,
) -> Conversation:
    """
    Run C{argv} with its stdin and stderr (and stdout, if asked) on a new pseudo-terminal;
    for each (C{wanted}, C{typed}) of C{script}, wait until the terminal shows C{wanted},
    then type C{typed}.  Blocking: run it in a thread.

    @raise AssertionError: the terminal never showed what was wanted.
    """
    master, slave = os.openpty()
    try:
        child = subprocess.Popen(
            list(argv),
            stdin=slave,
            stdout=slave if stdout_on_terminal else subprocess.PIPE,
            stderr=slave,
            env=dict(env),
            cwd=str(REPO),
            start_new_session=True,
        )
    finally:
        os.close(slave)
    deadline = time.monotonic() + CONVERSATION
    seen = bytearray()
    try:
        for wanted, typed in script:
            if not _read_until(master, seen, wanted, deadline):
                raise AssertionError(f"the terminal never showed {wanted!r}: {bytes(seen)!r}")
            os.write(master, typed)
        _read_until(master, seen, b"\0never\0", deadline)
        code = child.wait(max(deadline - time.monotonic(), 1))
        out = child.stdout.read() if child.stdout is not None else b""
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()
        os.close(master)
    return Conversation(
        code, bytes(seen).decode("utf-8", "replace"), out.decode("utf-8", "replace")
    )


#: Choose to fill in the form, then give the one field.
ANSWER_GRACE = ((b"Fill in the form", b"a\n"), (b"required", b"Grace\n"))


class CallAsksTests(TestCase):
    """C{mcpx call} on a terminal puts its call's question to the person there."""

    timeout = 90

    async def ask_name(self, *, stdout_on_terminal: bool) -> Conversation:
        daemon = await Daemon(self, {"legacy": legacy_fixture_server()}).start()
        argv = [sys.executable, "-m", "mcpx", "call", "legacy", "ask_name"]
        env = {**daemon.env, "TERM": "dumb"}
        done: Conversation = await deferToThread(
            converse, argv, env, ANSWER_GRACE, stdout_on_terminal=stdout_on_terminal
        )
        # The question was the call's own: answered here, by the command line.
        listed = await daemon.api("/v1/questions?all=true")
        [question] = listed["questions"]
        self.assertEqual(
            (question["state"], question["answered_by"], question["call_id"][:4]),
            ("answered", "cli", "cli-"),
            question,
        )
        return done

    async def test_form_answered_on_the_terminal(self) -> None:
        """
        The command shows who asks and what, takes the answer typed on the terminal,
        and prints the result the server made of it.
        """
        done = await self.ask_name(stdout_on_terminal=True)
        self.assertEqual(done.code, 0, done)
        self.assertIn("legacy (via mcpx) asks: What is your name?", done.terminal)
        self.assertIn("Hello, Grace", done.terminal)

    async def test_redirected_output_keeps_only_the_result(self) -> None:
        """
        With its output redirected, the command still asks on the terminal, and its
        output holds the result alone.
        """
        done = await self.ask_name(stdout_on_terminal=False)
        self.assertEqual(done.code, 0, done)
        self.assertIn("What is your name?", done.terminal)
        self.assertEqual(done.out, "Hello, Grace\n")
