"""
The list of records whose write to the store failed (L{mcpx.store.unsaved}): what the
broker and the task store keep to write again after the next heartbeat.
"""

from __future__ import annotations

from twisted.logger import LogLevel, capturedLogs, formatEvent
from twisted.trial.unittest import SynchronousTestCase

from mcpx.store.unsaved import Unsaved


class UnsavedTests(SynchronousTestCase):
    def test_a_failed_write_is_said_once(self) -> None:
        """Noting a record twice keeps it once and tells the operator once."""
        unsaved = Unsaved("task", "the shared store")
        with capturedLogs() as events:
            unsaved.note("t-1")
            unsaved.note("t-1")
        self.assertEqual(
            [formatEvent(e) for e in events],
            ["task t-1 is written to the shared store again after the next heartbeat"],
        )
        self.assertIn("t-1", unsaved)
        self.assertEqual(list(unsaved), ["t-1"])

    def test_written_records_leave_the_list(self) -> None:
        unsaved = Unsaved("question", "the store")
        self.assertFalse(unsaved)
        unsaved.note("q-1")
        self.assertTrue(unsaved)
        unsaved.written("q-1")
        self.assertFalse(unsaved)
        self.assertNotIn("q-1", unsaved)

    def test_a_second_failure_keeps_the_record_and_warns(self) -> None:
        unsaved = Unsaved("question", "the store")
        unsaved.note("q-1")
        with capturedLogs() as events:
            unsaved.failed_again("q-1", OSError("connection refused "))
            unsaved.failed_again("q-1", TimeoutError())
        self.assertEqual(
            [(e["log_level"], formatEvent(e)) for e in events],
            [
                (
                    LogLevel.warn,
                    "could not write question q-1 to the store again (connection refused)",
                ),
                (LogLevel.warn, "could not write question q-1 to the store again (TimeoutError)"),
            ],
        )
        self.assertIn("q-1", unsaved)

    def test_writing_one_may_change_the_list(self) -> None:
        """
        Going through the list while writing: a record written or noted meanwhile does
        not break the walk, and one noted during it waits for the next.
        """
        unsaved = Unsaved("task", "the shared store")
        unsaved.note("a")
        unsaved.note("b")
        seen = []
        for record_id in unsaved:
            seen.append(record_id)
            unsaved.written(record_id)
            unsaved.note("c")
        self.assertEqual(sorted(seen), ["a", "b"])
        self.assertEqual(list(unsaved), ["c"])
