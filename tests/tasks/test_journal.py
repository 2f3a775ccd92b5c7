"""
Tests for L{mcpx.tasks.journal}: the running tasks named in the state directory, so that
a daemon started after one that stopped under them reports them failed, saying why.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from mcpx.cli.client import ApiError, DaemonClient, socket_path
from mcpx.tasks.journal import RESTARTED, WRITE_DELAY, journal_for
from mcpx.tasks.store import TaskStore
from mcpx.tasks.task import TaskStatus
from tests.cli.test_real_daemon import RealDaemonCase


class JournalTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.state = Path(tempfile.mkdtemp(prefix="mcpx-journal-"))
        self.clock = Clock()

    def store(self) -> TaskStore:
        return TaskStore(self.clock)

    def test_running_tasks_are_named_and_restored_failed(self) -> None:
        """
        A running task is written (owner-only, no result), a finished one leaves the
        file; a new store restores the running one as failed, with the reason, kept
        for the TTL and counted against its caller.
        """
        store = self.store()
        journal = journal_for(self.state, self.clock)
        self.assertEqual(journal.restore(store), 0)
        journal.watch(store)
        never: Deferred[Any] = Deferred()
        running = store.start(lambda: never, _described, client="alice")
        done = store.start(lambda: Deferred.fromCoroutine(_answer()), _described, client="bob")
        self.clock.advance(WRITE_DELAY)
        path = self.state / "tasks.json"
        written = json.loads(path.read_text())
        self.assertEqual([entry["id"] for entry in written], [running.id])
        self.assertEqual(written[0]["client"], "alice")
        self.assertNotIn("result", written[0])
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        self.assertIs(done.status, TaskStatus.COMPLETED)
        journal.close()  # the daemon stops with the task still running

        later = self.store()
        second = journal_for(self.state, self.clock)
        self.assertEqual(second.restore(later), 1)
        second.watch(later)
        restored = later.get(running.id)
        assert restored is not None
        self.assertIs(restored.status, TaskStatus.FAILED)
        self.assertEqual(restored.client, "alice")
        self.assertEqual(
            restored.to_json(),
            {
                "id": running.id,
                "status": "failed",
                "error": {"code": "daemon_restarted", "message": RESTARTED},
            },
        )
        self.assertEqual(json.loads(path.read_text()), [])
        self.clock.advance(later.ttl + 1)
        self.assertIsNone(later.get(running.id))

    def test_unreadable_journal_is_ignored(self) -> None:
        """A journal that is not JSON is left aside with a warning, restoring nothing."""
        (self.state / "tasks.json").write_text("{not json")
        self.assertEqual(journal_for(self.state, self.clock).restore(self.store()), 0)

    def test_a_burst_of_changes_is_one_write(self) -> None:
        """Tasks made together are written once, after the delay."""
        store = self.store()
        journal = journal_for(self.state, self.clock)
        journal.watch(store)
        path = self.state / "tasks.json"
        before = path.stat().st_mtime_ns
        for _ in range(50):
            store.start(Deferred, _described)
        self.assertEqual(path.stat().st_mtime_ns, before)
        self.clock.advance(WRITE_DELAY)
        self.assertEqual(len(json.loads(path.read_text())), 50)


async def _answer() -> dict[str, Any]:
    return {"content": []}


def _described(failure: Failure) -> dict[str, Any]:
    return {"code": "failed", "message": failure.getErrorMessage()}


class RestartTests(RealDaemonCase):
    timeout = 90

    async def test_task_cut_short_by_a_stop_is_failed_after_the_restart(self) -> None:
        """
        A /v1 task running when the daemon stops is, after the next start, reported
        failed with code daemon_restarted (not 404 unknown_task).
        """
        demo = [sys.executable, "-P", "-m", "mcpx.demo"]
        daemon = await self.start_daemon({"demo": demo})
        client = DaemonClient(socket_path(Path(self.state_dir)))
        answer = client.post(
            "/v1/call",
            {"server": "demo", "tool": "countdown", "arguments": {"steps": 60}, "task": True},
        )
        task_id = answer["task"]["id"]
        await self.stop_daemon(daemon)
        await self.start_daemon({"demo": demo})
        try:
            shown = client.get(f"/v1/tasks/{task_id}")
        except ApiError as e:  # pragma: no cover - the failure this test is about
            self.fail(f"the task is unknown after the restart: {e}")
        self.assertEqual(shown["status"], "failed")
        self.assertEqual(shown["error"]["code"], "daemon_restarted")
