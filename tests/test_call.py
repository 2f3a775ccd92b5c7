"""
Tests for L{mcpx.call}: the life of a call (L{CallState}) and what moving through it
does to the questions it awaits.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from mcpx.call import Call, CallState


class LifeTests(SynchronousTestCase):
    def test_runs_then_asks_then_is_withdrawn(self) -> None:
        """
        A call runs until a question is tied to it, then asks; withdrawn, it asks no more
        and a question asked for it later leaves it withdrawn.
        """
        call = Call("call-1", {})
        self.assertIs(call.state, CallState.RUNNING)
        self.assertFalse(call.asked)
        call.question_asked()
        call.question_asked()
        self.assertIs(call.state, CallState.ASKING)
        self.assertTrue(call.asked)
        call.withdraw()
        self.assertIs(call.state, CallState.WITHDRAWN)
        self.assertEqual((call.asked, call.withdrawn), (False, True))
        call.question_asked()
        self.assertIs(call.state, CallState.WITHDRAWN)

    def test_withdrawn_once(self) -> None:
        """
        Withdrawing a call withdraws each question it awaits that can be withdrawn,
        once, however often the call is withdrawn, whether it asked or not.
        """
        for asked in (False, True):
            call = Call("call-1", {})
            if asked:
                call.question_asked()
            withdrawn: list[str] = []
            call.awaiting(Deferred(), partial(withdrawn.append, "q1"))
            call.awaiting(Deferred())
            call.withdraw()
            call.withdraw()
            self.assertEqual(withdrawn, ["q1"], asked)

    def test_withdrawing_reads_withdrawn(self) -> None:
        """
        What a question's withdrawal sets off (the server asking the call again, say)
        finds the call withdrawn already.
        """
        call = Call("call-1", {})
        call.question_asked()
        seen: list[Any] = []

        def withdraw() -> None:
            seen.append(call.state)
            call.question_asked()
            call.withdraw()
            seen.append(call.withdrawn)

        call.awaiting(Deferred(), withdraw)
        call.withdraw()
        self.assertEqual(seen, [CallState.WITHDRAWN, True])
        self.assertIs(call.state, CallState.WITHDRAWN)

    def test_a_request_ending_leaves_the_call(self) -> None:
        """
        An upstream request made for the call ending ends the questions it left waiting
        but not the call: it may make more requests, and still be withdrawn.
        """
        call = Call("call-1", {})
        call.question_asked()
        answer: Deferred[Any] = Deferred()
        call.awaiting(answer, lambda: self.fail("not withdrawn: the request ended"))
        call.call_ended(answered=True)
        self.failureResultOf(answer)
        self.assertIs(call.state, CallState.ASKING)
        call.withdraw()
        self.assertIs(call.state, CallState.WITHDRAWN)

    def test_becomes_a_task(self) -> None:
        """
        A running or asking call may become a task, and stays one while it asks on.
        """
        for asked in (False, True):
            call = Call("call-1", {})
            if asked:
                call.question_asked()
            self.assertFalse(call.is_task)
            call.became_task()
            call.question_asked()
            call.became_task()
            self.assertIs(call.state, CallState.TASK, asked)
            self.assertEqual((call.is_task, call.asked), (True, False))

    def test_ends_once_whatever_comes_after(self) -> None:
        """
        A call ends from running, asking or as a task, and stays ended: withdrawing it
        then withdraws nothing.
        """
        for moves in ([], [Call.question_asked], [Call.became_task]):
            call = Call("call-1", {})
            for move in moves:
                move(call)
            call.awaiting(Deferred(), lambda: self.fail("withdrawn after the call ended"))
            call.ended()
            self.assertIs(call.state, CallState.ENDED, moves)
            for move in (Call.question_asked, Call.became_task, Call.ended, Call.withdraw):
                move(call)
            self.assertIs(call.state, CallState.ENDED, moves)

    def test_a_task_is_withdrawn(self) -> None:
        """
        A task withdrawn withdraws the questions it awaits, and stays withdrawn: it
        neither becomes a task again nor ends.
        """
        call = Call("call-1", {})
        call.became_task()
        withdrawn: list[str] = []
        call.awaiting(Deferred(), partial(withdrawn.append, "q1"))
        call.withdraw()
        self.assertEqual(withdrawn, ["q1"])
        call.became_task()
        call.ended()
        self.assertIs(call.state, CallState.WITHDRAWN)
        self.assertFalse(call.is_task)
