"""
Tests for L{mcpx.cli.watch}: what C{mcpx call} does about the questions the server asks
during the call: on a terminal it answers them, elsewhere it says how to.  The watch runs
here against a fake client, without a thread or real time.
"""

from __future__ import annotations

import io
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from mcpx.cli import watch as watch_module
from mcpx.cli.client import ApiError, DaemonClient, DaemonNotRunning
from mcpx.cli.failures import CommandFailed
from mcpx.cli.watch import QuestionWatch, failure_text, new_call_id, pointer_line, triage

CALL_ID = "cli-0123456789ab"
BEGAN = 1000.0


def question(
    question_id: str,
    *,
    call_id: str | None = CALL_ID,
    server: str = "github",
    state: str = "pending",
    created: float = BEGAN + 1,
) -> dict[str, Any]:
    return {
        "id": question_id,
        "server": server,
        "call_id": call_id,
        "state": state,
        "created": created,
        "kind": "elicitation",
    }


class FakeClient:
    """
    Lists, at each look, the next of the scripted listings (the last one again once
    they run out), or raises it when it is an exception.
    """

    def __init__(self, *listings: list[dict[str, Any]] | Exception) -> None:
        self.listings = list(listings)
        self.looks = 0

    def get(self, target: str, *, timeout: float | None = 5.0) -> Any:
        assert target == "/v1/questions", target
        self.looks += 1
        listing = self.listings.pop(0) if len(self.listings) > 1 else self.listings[0]
        if isinstance(listing, Exception):
            raise listing
        return {"questions": listing}


class Printed:
    """What the watch printed, as (err, line)."""

    def __init__(self) -> None:
        self.lines: list[tuple[bool, str]] = []

    def __call__(self, message: str, *, err: bool = False) -> None:
        self.lines.append((err, message))


class TriageTests(SynchronousTestCase):
    """Which questions are the call's to answer, and which to point out."""

    def decide(self, *questions: dict[str, Any], seen: set[str] | None = None) -> Any:
        return triage(questions, call_id=CALL_ID, server="github", began=BEGAN, seen=seen or set())

    def test_own_pending_questions(self) -> None:
        """The call's own pending questions are answered, in the order listed."""
        self.assertEqual(self.decide(question("q1"), question("q2")), (["q1", "q2"], []))

    def test_not_anothers(self) -> None:
        """Another call's question is never taken, not even from the same server."""
        self.assertEqual(self.decide(question("q1", call_id="cli-ffffffffffff")), ([], []))

    def test_not_finished(self) -> None:
        """A question no longer pending is left alone."""
        self.assertEqual(self.decide(question("q1", state="answered")), ([], []))

    def test_not_seen(self) -> None:
        """A question already dealt with is left alone."""
        self.assertEqual(
            self.decide(question("q1"), question("q2", call_id=None), seen={"q1", "q2"}),
            ([], []),
        )

    def test_unclaimed_from_this_server_since_the_call(self) -> None:
        """A question no call could claim is pointed out when it is from the server
        called and was asked since the call began; not one from another server, nor one
        asked before."""
        self.assertEqual(
            self.decide(
                question("mine", call_id=None),
                question("other", call_id=None, server="files"),
                question("older", call_id=None, created=BEGAN - 5),
            ),
            ([], ["mine"]),
        )


class WatchTests(SynchronousTestCase):
    """The watch at work: each look, and the loop that repeats them."""

    def setUp(self) -> None:
        self.printed = Printed()
        self.answered: list[str] = []
        self.failures: dict[str, Exception] = {}
        self.waits: list[float] = []

    def answer(self, client: Any, question_id: str) -> None:
        self.answered.append(question_id)
        failure = self.failures.get(question_id)
        if failure is not None:
            raise failure

    def watch(
        self, client: FakeClient, *, wait: Callable[[float], bool] | None = None
    ) -> QuestionWatch:
        return QuestionWatch(
            CALL_ID,
            "github",
            connect=lambda: client,
            echo=self.printed,
            answer=self.answer,
            clock=lambda: BEGAN,
            wait=wait,
        )

    def test_answers_its_own_once(self) -> None:
        """Each of the call's questions is put to the person once, after a blank line,
        however often it is still listed; another call's never."""
        listing = [question("q1"), question("q2", call_id="cli-ffffffffffff")]
        client = FakeClient(listing, [*listing, question("q3")])
        watch = self.watch(client)
        self.assertTrue(watch.poll(client))
        self.assertTrue(watch.poll(client))
        self.assertTrue(watch.poll(client))
        self.assertEqual(self.answered, ["q1", "q3"])
        self.assertEqual(self.printed.lines, [(True, ""), (True, "")])

    def test_points_out_unclaimed_once(self) -> None:
        """A question from the same server that no call could claim is pointed out once,
        on stderr, with the command that answers it; it is not answered here."""
        client = FakeClient([question("q9", call_id=None)])
        watch = self.watch(client)
        watch.poll(client)
        watch.poll(client)
        self.assertEqual(self.answered, [])
        self.assertEqual(
            self.printed.lines,
            [
                (
                    True,
                    "mcpx: github asked a question no single call could claim; "
                    "answer it with: mcpx elicit q9",
                )
            ],
        )

    def test_survives_a_failed_answer(self) -> None:
        """When answering one question fails, the reason is printed as mcpx: ... and the
        next question is still asked."""
        self.failures["q1"] = CommandFailed("question q1 is no longer pending: it was expired")
        client = FakeClient([question("q1"), question("q2")])
        watch = self.watch(client)
        self.assertTrue(watch.poll(client))
        self.assertEqual(self.answered, ["q1", "q2"])
        self.assertIn(
            (True, "mcpx: question q1 is no longer pending: it was expired"), self.printed.lines
        )

    def test_stops_when_told(self) -> None:
        """The loop looks, waits the interval, and ends once it is stopped; a stopped
        watch asks nothing more."""
        client = FakeClient([])

        def wait(seconds: float) -> bool:
            self.waits.append(seconds)
            if len(self.waits) == 3:
                watch.stop()
            return watch.stopped.is_set()

        watch = self.watch(client, wait=wait)
        watch.run()
        self.assertEqual((client.looks, self.waits), (3, [0.25, 0.25, 0.25]))
        client.listings = [[question("q1")]]
        watch.poll(client)
        self.assertEqual(self.answered, [])

    def test_stops_without_a_broker(self) -> None:
        """A daemon that keeps no questions (503) or predates them (404) ends the watch;
        a daemon that cannot be reached this time does not."""
        client = FakeClient(
            DaemonNotRunning(Path("/nowhere/mcpx.sock"), "no socket"),
            ApiError(503, "no_broker", "no broker", {}),
        )
        watch = self.watch(client, wait=lambda seconds: False)
        watch.run()
        self.assertEqual(client.looks, 2)
        self.assertEqual(self.printed.lines, [])

    def test_runs_in_a_daemon_thread(self) -> None:
        """
        start runs the watch in a thread of its own that nothing waits for at exit
        (not one threading would join), which stop ends.
        """
        looked = threading.Event()
        idents: list[int] = []
        client = FakeClient([])
        original = client.get

        def get(target: str, *, timeout: float | None = 5.0) -> Any:
            idents.append(threading.get_ident())
            looked.set()
            return original(target, timeout=timeout)

        client.get = get  # type: ignore[method-assign]
        watch = self.watch(client)
        watch.start()
        self.assertTrue(looked.wait(10))
        self.assertNotEqual(idents[0], threading.get_ident())
        waited_for = [t for t in threading.enumerate() if t.ident == idents[0] and not t.daemon]
        self.assertEqual(waited_for, [])
        watch.stop()
        running = watch._running
        self.assertTrue(running.acquire(timeout=10), "the thread ended")
        running.release()


class FlagTests(SynchronousTestCase):
    """The watch's stop flag behaves as the C{threading.Event} it stands for."""

    def test_set_from_another_thread_ends_a_wait(self) -> None:
        """A wait ends when another thread sets the flag, and says so; setting twice is harmless."""
        flag = watch_module.Flag()
        self.assertFalse(flag.is_set())
        self.assertFalse(flag.wait(0.01))
        setter = threading.Timer(0.05, flag.set)
        setter.start()
        self.addCleanup(setter.join)
        self.assertTrue(flag.wait(10))
        flag.set()
        self.assertTrue(flag.is_set())
        self.assertTrue(flag.wait(0))
        self.assertTrue(flag.wait(10))


class PointingTests(SynchronousTestCase):
    """
    Off a terminal nobody can be asked: the watch names each question the call waits
    on, once, on stderr, with the command that answers it.
    """

    def test_points_once_per_question(self) -> None:
        """Each of the call's questions gets one line on stderr, however often it is
        still listed; another call's gets none; nothing is answered."""
        asked = {**question("q1"), "params": {"message": "Run it?"}}
        listing = [asked, question("q2", call_id="cli-ffffffffffff")]
        client = FakeClient(listing, listing, [*listing, question("q3")])
        printed = Printed()
        watch = QuestionWatch(
            CALL_ID,
            "github",
            connect=lambda: client,
            echo=printed,
            answer=None,
            clock=lambda: BEGAN,
        )
        for _ in range(3):
            self.assertTrue(watch.poll(client))
        self.assertTrue(watch.points)
        self.assertEqual(
            printed.lines,
            [
                (
                    True,
                    "mcpx: the call waits for an answer to elicitation q1 from github "
                    "(Run it?); answer it with: mcpx elicit q1",
                ),
                (
                    True,
                    "mcpx: the call waits for an answer to elicitation q3 from github; "
                    "answer it with: mcpx elicit q3",
                ),
            ],
        )

    def test_line_is_one_line(self) -> None:
        """A long message on several lines is folded onto one and cut short."""
        line = pointer_line(
            {**question("q1"), "params": {"message": "first\n\nsecond   " + "x" * 500}}
        )
        self.assertNotIn("\n", line)
        self.assertIn("(first second xxx", line)
        self.assertIn("…); answer it with: mcpx elicit q1", line)
        self.assertLess(len(line), 300)

    def test_first_look_waits(self) -> None:
        """With a delay the first look waits for it, so a call that ends first costs the
        daemon no look at all."""
        client = FakeClient([])
        waits: list[float] = []

        def stopped_while_waiting(seconds: float) -> bool:
            waits.append(seconds)
            return True

        watch = QuestionWatch(
            CALL_ID,
            "github",
            connect=lambda: client,
            echo=Printed(),
            answer=None,
            wait=stopped_while_waiting,
            delay=0.25,
        )
        watch.run()
        self.assertEqual((waits, client.looks), ([0.25], 0))


class FailureTextTests(SynchronousTestCase):
    """What is said when a question could not be answered here."""

    def test_api_error(self) -> None:
        """The daemon's refusal is said in its own words."""
        error = ApiError(400, "invalid_answer", "repo: too short", {"message": "repo: too short"})
        self.assertEqual(failure_text(error, "q1"), "repo: too short")

    def test_abort(self) -> None:
        """An error that says nothing (click's Abort) says where the question is left."""
        self.assertEqual(
            failure_text(Exception(), "q1"),
            "question q1 was left unanswered; answer it with: mcpx elicit q1",
        )


class CallIdTests(SynchronousTestCase):
    """The name each call is sent with."""

    def test_fresh_and_valid(self) -> None:
        """Each call gets a new id the daemon's call_id pattern accepts."""
        from mcpx.ops.schemas import CALL_ID_PATTERN

        ids = {new_call_id() for _ in range(20)}
        self.assertEqual(len(ids), 20)
        for call_id in ids:
            self.assertRegex(call_id, r"^cli-[0-9a-f]{12}$")
            self.assertRegex(call_id, CALL_ID_PATTERN)


class TerminalOutputTests(SynchronousTestCase):
    """Where a question is shown when the call's output is redirected."""

    def test_questions_on_stderr_result_on_stdout(self) -> None:
        """While a question is answered, what the answering thread prints goes to
        stderr, and what any other thread prints still goes to stdout."""
        out, err = io.StringIO(), io.StringIO()
        self.patch(sys, "stdout", out)
        self.patch(sys, "stderr", err)

        def other() -> None:
            print("result")

        def answer(client: Any, question_id: str) -> None:
            print("the question")
            thread = threading.Thread(target=other)
            thread.start()
            thread.join()

        with watch_module._stdout_on_stderr():
            answer(None, "q1")
        self.assertIs(sys.stdout, out)
        self.assertEqual((out.getvalue(), err.getvalue()), ("result\n", "the question\n"))


class RecordingDaemon:
    """A client whose daemon answers every call with a greeting, or first refuses one."""

    def __init__(self, refuse_call_id: bool = False) -> None:
        self.path = Path("/nonexistent/mcpx.sock")
        self.client = "cli"
        self.bodies: list[dict[str, Any]] = []
        self.refuse_call_id = refuse_call_id

    def again(self) -> DaemonClient:
        """The watch's own client: of a daemon that is not there."""
        return DaemonClient(self.path, self.client)

    def post(self, target: str, body: dict[str, Any], *, timeout: float | None = 5.0) -> Any:
        self.bodies.append(body)
        if self.refuse_call_id and "call_id" in body:
            error = {"code": "invalid_input", "message": "call_id: unexpected", "field": "call_id"}
            raise ApiError(400, "invalid_input", error["message"], error)
        return {"content": [{"type": "text", "text": "Hello"}], "isError": False}


class CallToolTests(SynchronousTestCase):
    """What C{mcpx call} sends, depending on whether it answers questions."""

    def call(self, daemon: RecordingDaemon, answer_questions: bool) -> list[tuple[bool, str]]:
        from mcpx.cli.calling import call_tool

        printed = Printed()
        call_tool(
            daemon,  # type: ignore[arg-type]
            False,
            "github",
            "pick",
            {},
            timeout=None,
            progress=False,
            echo=printed,
            answer_questions=answer_questions,
        )
        return printed.lines

    def test_named_on_a_terminal(self) -> None:
        """On a terminal the call is sent with a fresh cli- call_id."""
        daemon = RecordingDaemon()
        self.assertEqual(self.call(daemon, True), [(False, "Hello")])
        [body] = daemon.bodies
        self.assertRegex(body["call_id"], r"^cli-[0-9a-f]{12}$")

    def test_named_otherwise(self) -> None:
        """Off a terminal the call is named too, so that the question it waits on can be
        pointed out (L{PointingTests}); its result is printed as ever."""
        daemon = RecordingDaemon()
        self.assertEqual(self.call(daemon, False), [(False, "Hello")])
        [body] = daemon.bodies
        self.assertRegex(body.pop("call_id"), r"^cli-[0-9a-f]{12}$")
        self.assertEqual(body, {"server": "github", "tool": "pick", "arguments": {}})

    def test_older_daemon(self) -> None:
        """A daemon that does not know call_id refuses it; the call is made again without
        it, and its result printed."""
        daemon = RecordingDaemon(refuse_call_id=True)
        self.assertEqual(self.call(daemon, True), [(False, "Hello")])
        self.assertEqual(["call_id" in body for body in daemon.bodies], [True, False])
