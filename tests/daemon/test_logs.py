"""Tests for L{mcpx.daemon.logs}: where the daemon's log goes and who may read it."""

from __future__ import annotations

import os
import stat
import sys

from twisted.trial.unittest import SynchronousTestCase

from mcpx.daemon.logs import open_log_stream


class OpenLogStreamTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.path = self.mktemp()

    def mode_under_umask(self, umask: int) -> int:
        previous = os.umask(umask)
        try:
            stream = open_log_stream(self.path)
        finally:
            os.umask(previous)
        stream.close()
        return stat.S_IMODE(os.stat(self.path).st_mode)

    def test_new_file_is_owner_only_under_open_umask(self) -> None:
        """Under umask 000 a new C{daemon.logFile} is created 0600, not 0666."""
        self.assertEqual(oct(self.mode_under_umask(0o000)), oct(0o600))

    def test_new_file_is_owner_only_under_usual_umask(self) -> None:
        """Under the usual umask 022 a new log file is 0600 too, not 0644."""
        self.assertEqual(oct(self.mode_under_umask(0o022)), oct(0o600))

    def test_existing_file_keeps_its_mode_and_is_appended(self) -> None:
        """A log file that exists keeps its owner's chosen mode, and new lines go at its end."""
        with open(self.path, "w", encoding="utf-8") as f:
            f.write("earlier\n")
        os.chmod(self.path, 0o640)
        stream = open_log_stream(self.path)
        stream.write("later\n")
        stream.close()
        self.assertEqual(stat.S_IMODE(os.stat(self.path).st_mode), 0o640)
        with open(self.path, encoding="utf-8") as f:
            self.assertEqual(f.read(), "earlier\nlater\n")

    def test_empty_or_dash_is_stderr(self) -> None:
        """An empty C{daemon.logFile} or C{-} logs to stderr."""
        self.assertIs(open_log_stream(""), sys.stderr)
        self.assertIs(open_log_stream("-"), sys.stderr)
