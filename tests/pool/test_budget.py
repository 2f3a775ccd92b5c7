"""
The timeout rules: the per-call clamp, a call inside a script run, the table of bounds
kept true to the settings, and the pausable deadline.
"""

from __future__ import annotations

import math

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from mcpx.pool import budget
from mcpx.pool.budget import (
    BOUNDS,
    QUESTION_TTL,
    Deadline,
    Deadlines,
    call_timeout_in_run,
    effective_call_timeout,
)
from mcpx.settings.declarations import BY_NAME


class EffectiveCallTimeoutTests(SynchronousTestCase):
    def test_configured_by_default(self) -> None:
        """A call that asks for nothing gets pool.callTimeout."""
        self.assertEqual(effective_call_timeout(60.0, None), 60.0)

    def test_shorter_honoured(self) -> None:
        """A call may lower its own bound."""
        self.assertEqual(effective_call_timeout(60.0, 5.0), 5.0)
        self.assertEqual(effective_call_timeout(60.0, 0.25), 0.25)

    def test_longer_clamped(self) -> None:
        """A call asking for more than pool.callTimeout gets pool.callTimeout."""
        self.assertEqual(effective_call_timeout(60.0, 600.0), 60.0)
        self.assertEqual(effective_call_timeout(60.0, 60.0), 60.0)

    def test_integers_accepted(self) -> None:
        """Whole seconds work as well as fractions, and come back as floats."""
        result = effective_call_timeout(30, 10)
        self.assertEqual((result, type(result)), (10.0, float))

    def test_nonsense_requests_refused(self) -> None:
        """A requested bound that is not a positive, finite number of seconds is an error."""
        for requested in (0, 0.0, -1.0, math.nan, math.inf, True):
            with self.assertRaises(ValueError, msg=repr(requested)) as raised:
                effective_call_timeout(60.0, requested)
            self.assertIn("a call timeout", str(raised.exception))

    def test_nonsense_configuration_refused(self) -> None:
        """A configured bound that bounds nothing is an error naming the setting."""
        for configured in (0.0, -5.0, math.inf):
            with self.assertRaises(ValueError) as raised:
                effective_call_timeout(configured, None)
            self.assertIn("pool.callTimeout", str(raised.exception))


class CallTimeoutInRunTests(SynchronousTestCase):
    def test_outside_a_run(self) -> None:
        """A call outside any script run is bounded by its own timeout alone."""
        self.assertEqual(call_timeout_in_run(60.0, 5.0, None), 5.0)

    def test_run_tighter(self) -> None:
        """Near the end of a run, what is left of exec.timeout bounds the call."""
        self.assertEqual(call_timeout_in_run(60.0, None, 12.5), 12.5)

    def test_call_tighter(self) -> None:
        """Early in a run, the call's own bound is the tighter one."""
        self.assertEqual(call_timeout_in_run(60.0, 20.0, 100.0), 20.0)
        self.assertEqual(call_timeout_in_run(60.0, 600.0, 100.0), 60.0)

    def test_run_over(self) -> None:
        """A run with no time left gives its calls none."""
        self.assertEqual(call_timeout_in_run(60.0, None, -3.0), 0.0)


class TableTests(SynchronousTestCase):
    def test_defaults_match_settings(self) -> None:
        """Each bound that is a user setting states that setting's real default."""
        for bound in BOUNDS:
            if bound.setting in BY_NAME:
                self.assertEqual(bound.default, BY_NAME[bound.setting].default, bound.setting)

    def test_question_ttl_is_a_setting(self) -> None:
        """A question's deadline in the broker is 120s unless proto.brokerTimeout says."""
        self.assertEqual(QUESTION_TTL, 120.0)
        self.assertEqual(BY_NAME["proto.brokerTimeout"].default, QUESTION_TTL)

    def test_every_bound_documented(self) -> None:
        """The module's table names every bound's setting, and says which are not enforced."""
        doc = budget.__doc__ or ""
        for bound in BOUNDS:
            self.assertIn(f"C{{{bound.setting}}}", doc)
        self.assertEqual([b.name for b in BOUNDS if b.enforced], ["progress", "call", "question"])
        self.assertIn("not enforced yet", doc)


class DeadlineTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.expired: list[float] = []

    def deadline(self, seconds: float) -> Deadline:
        return Deadline(
            Deadlines(self.clock), seconds, lambda: self.expired.append(self.clock.seconds())
        )

    def test_expires(self) -> None:
        """The deadline fires once, when its time is up."""
        deadline = self.deadline(5)
        self.clock.advance(4.9)
        self.assertEqual((self.expired, deadline.expired), ([], False))
        self.assertAlmostEqual(deadline.remaining(), 0.1)
        self.clock.advance(0.1)
        self.assertEqual((self.expired, deadline.expired), ([5.0], True))
        self.assertEqual(deadline.remaining(), 0.0)

    def test_cancel(self) -> None:
        """A cancelled deadline never fires and leaves no timer."""
        deadline = self.deadline(5)
        deadline.cancel()
        self.clock.advance(10)
        self.assertEqual((self.expired, deadline.expired), ([], False))
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_pause_stops_the_clock(self) -> None:
        """Time spent paused (a question pending) does not count."""
        deadline = self.deadline(5)
        self.clock.advance(2)
        deadline.pause()
        self.clock.advance(100)
        self.assertEqual(self.expired, [])
        self.assertEqual(deadline.remaining(), 3.0)
        deadline.resume()
        self.clock.advance(2.9)
        self.assertEqual(self.expired, [])
        self.clock.advance(0.1)
        self.assertEqual(self.expired, [105.0])

    def test_pauses_nest(self) -> None:
        """With two questions pending, the clock runs again only after both are answered."""
        deadline = self.deadline(5)
        deadline.pause()
        deadline.pause()
        deadline.resume()
        self.clock.advance(10)
        self.assertEqual(self.expired, [])
        deadline.resume()
        self.clock.advance(5)
        self.assertEqual(self.expired, [15.0])

    def test_resume_without_pause(self) -> None:
        """Resuming a deadline that is not paused is a programming error."""
        with self.assertRaises(RuntimeError):
            self.deadline(5).resume()

    def test_no_restart_after_cancel(self) -> None:
        """Pausing and resuming a deadline that was cancelled does not bring it back."""
        deadline = self.deadline(5)
        deadline.pause()
        deadline.cancel()
        deadline.resume()
        self.clock.advance(10)
        self.assertEqual(self.expired, [])

    def test_no_restart_after_expiry(self) -> None:
        """A deadline that fired stays fired through a pause and resume."""
        deadline = self.deadline(1)
        self.clock.advance(1)
        deadline.pause()
        deadline.resume()
        self.clock.advance(10)
        self.assertEqual(self.expired, [1.0])


class SharedTimerTests(SynchronousTestCase):
    """L{Deadlines}: deadlines under one timer each expire at their own time."""

    def test_each_at_its_time(self) -> None:
        """
        Deadlines started in any order, paused, extended or cancelled expire at their
        own times, never early, and leave no timer once none runs.
        """
        clock = Clock()
        deadlines = Deadlines(clock)
        expired: list[tuple[str, float]] = []

        def start(name: str, seconds: float, ceiling: float | None = None) -> Deadline:
            return Deadline(
                deadlines,
                seconds,
                lambda: expired.append((name, clock.seconds())),
                ceiling=ceiling,
            )

        long, cancelled = start("long", 10), start("cancelled", 1)
        short, extended, paused = start("short", 2), start("extended", 3, 100), start("paused", 4)
        cancelled.cancel()
        clock.advance(1)
        paused.pause()
        clock.advance(1)
        self.assertEqual(expired, [("short", 2.0)])
        extended.extend(5)  # due at 7 now
        clock.advance(2)
        paused.resume()  # 3 seconds left: due at 7
        clock.advance(3)
        self.assertEqual(expired, [("short", 2.0), ("extended", 7.0), ("paused", 7.0)])
        clock.advance(2.9)
        self.assertEqual(len(expired), 3)
        clock.advance(0.1)
        self.assertEqual(expired[3:], [("long", 10.0)])
        self.assertEqual((short.expired, long.expired, cancelled.expired), (True, True, False))
        self.assertEqual(clock.getDelayedCalls(), [])

    def test_expiry_starting_another(self) -> None:
        """A deadline started by another's expiry still lets an earlier one expire on time."""
        clock = Clock()
        deadlines = Deadlines(clock)
        expired: list[tuple[str, float]] = []

        def start(name: str, seconds: float) -> Deadline:
            return Deadline(deadlines, seconds, lambda: on_expire(name))

        def on_expire(name: str) -> None:
            expired.append((name, clock.seconds()))
            if name == "first":
                start("started", 10)

        start("first", 1)
        start("second", 3)
        clock.advance(1)
        clock.advance(2)
        clock.advance(8)
        self.assertEqual(expired, [("first", 1.0), ("second", 3.0), ("started", 11.0)])

    def test_stop(self) -> None:
        """Stopping leaves no timer."""
        clock = Clock()
        deadlines = Deadlines(clock)
        Deadline(deadlines, 5, lambda: None)
        deadlines.stop()
        self.assertEqual(clock.getDelayedCalls(), [])


class ExtendTests(SynchronousTestCase):
    """L{Deadline.extend}: work that shows it is alive gets its bound again, to a ceiling."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.expired: list[float] = []

    def deadline(self, seconds: float, ceiling: float | None) -> Deadline:
        return Deadline(
            Deadlines(self.clock),
            seconds,
            lambda: self.expired.append(self.clock.seconds()),
            ceiling=ceiling,
        )

    def test_extend_restarts_the_bound(self) -> None:
        """Each extension gives the full bound again from that moment."""
        deadline = self.deadline(1, 100)
        for _ in range(5):
            self.clock.advance(0.9)
            deadline.extend(1)
        self.assertEqual(self.expired, [])
        self.clock.advance(1)
        [when] = self.expired
        self.assertAlmostEqual(when, 5.5)
        self.assertTrue(deadline.extended)
        self.assertAlmostEqual(deadline.running(), 5.5)

    def test_never_past_the_ceiling(self) -> None:
        """However often it is extended, it ends at its ceiling."""
        deadline = self.deadline(2, 5)
        for _ in range(10):
            self.clock.advance(1)
            deadline.extend(2)
        self.assertEqual(self.expired, [5.0])

    def test_never_shortened(self) -> None:
        """An extension shorter than what is left changes nothing."""
        deadline = self.deadline(10, 100)
        deadline.extend(1)
        self.assertFalse(deadline.extended)
        self.clock.advance(9.9)
        self.assertEqual(self.expired, [])

    def test_no_ceiling_no_extension(self) -> None:
        """A deadline made without a ceiling cannot be extended."""
        deadline = self.deadline(1, None)
        self.clock.advance(0.5)
        deadline.extend(10)
        self.clock.advance(0.5)
        self.assertEqual(self.expired, [1.0])

    def test_paused_time_not_counted(self) -> None:
        """Time paused for a question counts against neither the bound nor the ceiling."""
        deadline = self.deadline(2, 4)
        self.clock.advance(1)
        deadline.pause()
        self.clock.advance(50)
        deadline.extend(2)
        deadline.resume()
        self.clock.advance(1.9)
        self.assertEqual(self.expired, [])
        self.clock.advance(0.1)
        self.assertEqual(self.expired, [53.0])

    def test_over_is_over(self) -> None:
        """An expired or cancelled deadline is not brought back."""
        expired = self.deadline(1, 10)
        self.clock.advance(1)
        expired.extend(5)
        cancelled = self.deadline(1, 10)
        cancelled.cancel()
        cancelled.extend(5)
        self.clock.advance(10)
        self.assertEqual(self.expired, [1.0])
