"""Results many may wait for, and calls to make once: L{mcpx.once}."""

from __future__ import annotations

from twisted.internet.defer import CancelledError, Deferred
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from mcpx.once import Calls, Once, Waiters


class OnceTests(SynchronousTestCase):
    def test_every_waiter_gets_the_outcome(self) -> None:
        """Waiters before and after the event each get it, on a Deferred of their own."""
        once: Once[str] = Once()
        early = once.wait()
        self.assertNoResult(early)
        once.fire("ready")
        self.assertEqual(self.successResultOf(early), "ready")
        self.assertEqual(self.successResultOf(once.wait()), "ready")
        self.assertTrue(once.done)

    def test_first_fire_decides(self) -> None:
        """A second report of the event changes nothing."""
        once: Once[str] = Once()
        once.fire("first")
        once.fire("second")
        self.assertEqual(self.successResultOf(once.wait()), "first")

    def test_a_failure_reaches_errbacks_and_is_not_unhandled(self) -> None:
        """A failure goes to each waiter's errbacks; with none waiting, nothing is logged."""
        once: Once[None] = Once()
        once.fire(Failure(ValueError("lost")))
        self.assertIsInstance(once.failure, Failure)
        self.failureResultOf(once.wait(), ValueError)
        self.failureResultOf(once.wait(), ValueError)

    def test_one_waiter_cancelling_touches_nobody_else(self) -> None:
        """A cancelled waiter is dropped; the others still get the outcome."""
        once: Once[int] = Once()
        leaving, staying = once.wait(), once.wait()
        leaving.cancel()
        self.failureResultOf(leaving, CancelledError)
        once.fire(7)
        self.assertEqual(self.successResultOf(staying), 7)

    def test_waiters_do_not_share_callbacks(self) -> None:
        """A callback one waiter adds does not change what another receives."""
        once: Once[int] = Once()
        first, second = once.wait(), once.wait()
        first.addCallback(lambda n: n * 100)
        once.fire(1)
        self.assertEqual(self.successResultOf(first), 100)
        self.assertEqual(self.successResultOf(second), 1)

    def test_feed_takes_the_work_outcome(self) -> None:
        """Fed a Deferred, it ends with that Deferred's result, errors included."""
        once: Once[str] = Once()
        work: Deferred[str] = Deferred()
        once.feed(work)
        waiter = once.wait()
        work.errback(RuntimeError("boom"))
        self.failureResultOf(waiter, RuntimeError)


class WaitersTests(SynchronousTestCase):
    def test_fire_tells_only_those_waiting_then(self) -> None:
        """Each waiter hears the next event once; one that comes later waits for the one after."""
        waiters: Waiters[str] = Waiters()
        first, second = waiters.wait(), waiters.wait()
        self.assertTrue(waiters)
        waiters.fire("one")
        self.assertEqual(self.successResultOf(first), "one")
        self.assertEqual(self.successResultOf(second), "one")
        self.assertFalse(waiters)
        later = waiters.wait()
        self.assertNoResult(later)
        waiters.fire("two")
        self.assertEqual(self.successResultOf(later), "two")

    def test_a_cancelled_waiter_is_forgotten(self) -> None:
        """Cancelling stops that waiter alone, and the next event does not touch it."""
        waiters: Waiters[int] = Waiters()
        gone, kept = waiters.wait(), waiters.wait()
        gone.cancel()
        self.failureResultOf(gone, CancelledError)
        waiters.fire(7)
        self.assertEqual(self.successResultOf(kept), 7)
        self.assertFalse(waiters)


class CallsTests(SynchronousTestCase):
    def test_each_call_made_once_in_order(self) -> None:
        """A run makes the calls added so far, in order; the next run makes only newer ones."""
        made: list[str] = []
        calls = Calls()
        calls.add(lambda: made.append("first"))
        calls.add(lambda: made.append("second"))
        calls.run()
        self.assertEqual(made, ["first", "second"])
        calls.add(lambda: made.append("third"))
        calls.run()
        calls.run()
        self.assertEqual(made, ["first", "second", "third"])
