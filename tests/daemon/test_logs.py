"""Tests for L{mcpx.daemon.logs}: where the daemon's log goes, how it reads, who may read it."""

from __future__ import annotations

import io
import json
import os
import stat
import sys

from twisted.logger import Logger, LogPublisher
from twisted.trial.unittest import SynchronousTestCase

from mcpx.daemon.logs import choose_format, log_observer, open_log_stream
from mcpx.settings.secrets import SecretMasker
from tests.settings.test_secrets import servers

SECRET = "s3cret-token-value"
SECRET_AUTH = {"type": "bearer", "token": SECRET}


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


def _lines(log_format: str, masker: SecretMasker | None = None) -> list[str]:
    """What a component's info line and a failure look like in C{log_format}."""
    stream = io.StringIO()
    log = Logger(
        namespace="mcpx.pool.pool",
        observer=LogPublisher(log_observer(stream, "info", masker, log_format)),
    )
    log.info("server {server} started", server="notes", pid=41, peer=object())
    try:
        raise ConnectionError("the upstream hung up")
    except ConnectionError:
        log.failure("call to {tool} failed", tool="add_note")
    log.debug("not shown at info")
    return stream.getvalue().splitlines()


class TextFormatTests(SynchronousTestCase):
    def test_line_has_time_level_component_message(self) -> None:
        """A text line reads: local date and time, INFO, the component, the message."""
        first = _lines("text")[0]
        self.assertRegex(
            first, r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} INFO  pool\.pool: server notes started$"
        )

    def test_failure_shows_message_and_traceback(self) -> None:
        """A failure's line says what failed; its traceback follows, indented, error last."""
        lines = _lines("text")
        failed = next(i for i, line in enumerate(lines) if "call to add_note failed" in line)
        self.assertIn("CRITICAL pool.pool:", lines[failed])
        trace = lines[failed + 1 :]
        self.assertTrue(trace[0].startswith("    Traceback"))
        self.assertIn("ConnectionError: the upstream hung up", trace[-1])
        self.assertNotIn("not shown at info", "\n".join(lines))

    def test_no_twisted_bookkeeping(self) -> None:
        """Nothing of Twisted's event plumbing (log_flattened, __class_uuid__) reaches the line."""
        text = "\n".join(_lines("text"))
        for noise in ("log_", "__class_uuid__", "{server}"):
            self.assertNotIn(noise, text)

    def test_text_lines_are_masked(self) -> None:
        """A credential quoted in a text line is written as ***."""
        stream = io.StringIO()
        masker = SecretMasker(servers(a={"url": "http://h/mcp", "auth": SECRET_AUTH}))
        publisher = LogPublisher(log_observer(stream, "info", masker, "text"))
        Logger(observer=publisher).warn("upstream said {why}", why=f"no {SECRET}")
        self.assertNotIn(SECRET, stream.getvalue())
        self.assertIn("no ***", stream.getvalue())


class JsonFormatTests(SynchronousTestCase):
    def test_plain_fields_first_then_the_event_fields(self) -> None:
        """A JSON line has time (UTC), level, component, message, then the event's fields."""
        line = json.loads(_lines("json")[0])
        self.assertEqual(list(line)[:4], ["time", "level", "component", "message"])
        self.assertRegex(line["time"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
        self.assertEqual(
            (line["level"], line["component"], line["message"]),
            ("info", "pool.pool", "server notes started"),
        )
        self.assertEqual((line["server"], line["pid"]), ("notes", 41))
        self.assertTrue(line["peer"].startswith("<object object"), "unencodable values as text")
        self.assertFalse([key for key in line if key.startswith("log_")])
        self.assertNotIn("__class_uuid__", _lines("json")[0])

    def test_failure_has_type_message_and_traceback(self) -> None:
        """A failure's JSON line carries the error's type, its text and the traceback."""
        line = json.loads(_lines("json")[1])
        self.assertEqual(line["error"], "ConnectionError: the upstream hung up")
        self.assertEqual(line["error_type"], "ConnectionError")
        self.assertIn("Traceback", line["traceback"])
        self.assertEqual(line["tool"], "add_note")


class ChooseFormatTests(SynchronousTestCase):
    def test_auto_is_text_on_a_terminal(self) -> None:
        """daemon.logFormat auto writes text to a terminal."""
        main, other = os.openpty()
        self.addCleanup(os.close, main)
        with open(other, "w", encoding="utf-8") as tty:
            self.assertEqual(choose_format("auto", tty), "text")

    def test_auto_is_json_to_a_file_or_pipe(self) -> None:
        """daemon.logFormat auto writes JSON to a file, a pipe or journald's socket."""
        path = self.mktemp()
        with open(path, "w", encoding="utf-8") as file:
            self.assertEqual(choose_format("auto", file), "json")
        self.assertEqual(choose_format("auto", io.StringIO()), "json")

    def test_explicit_choice_wins(self) -> None:
        """text and json are taken as said, terminal or not."""
        self.assertEqual(choose_format("text", io.StringIO()), "text")
        self.assertEqual(choose_format("json", sys.stderr), "json")
