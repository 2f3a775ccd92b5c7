"""Tests for L{mcpx.cli.render}: what the commands print for a person."""

from __future__ import annotations

import base64
import io
import shutil
from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase

from mcpx.cli.render import (
    MediaDirectory,
    ProgressBar,
    content_text,
    describe_text,
    error_text,
    event_line,
    servers_text,
    table,
)
from mcpx.cli.terminal import printable


class ContentTests(SynchronousTestCase):
    def media(self) -> MediaDirectory:
        media = MediaDirectory()
        self.addCleanup(lambda: shutil.rmtree(media.get(), True))
        return media

    def test_structured_without_repeated_text(self) -> None:
        """Structured content is printed as JSON; a text block that only repeats it is left
        out, while other text is kept."""
        result = {
            "content": [{"type": "text", "text": '{"sum": 5}'}, {"type": "text", "text": "done"}],
            "structuredContent": {"sum": 5},
        }
        self.assertEqual(content_text(result, self.media()), ['{\n  "sum": 5\n}', "done"])

    def test_text_printed_once_when_structured_only_restates_it(self) -> None:
        """
        A file-reading tool answers the text in C{content} and again inside
        C{structuredContent}: the text is printed once, as it is, so C{> out.txt} is the
        file; a calculator's C{{"result": "7"}} beside the text C{7} prints C{7}.
        """
        text = "line one\nline two\n"
        result = {
            "content": [{"type": "text", "text": text}],
            "structuredContent": {"content": text},
        }
        self.assertEqual(content_text(result, self.media()), [text])
        calc = {"content": [{"type": "text", "text": "7"}], "structuredContent": {"result": "7"}}
        self.assertEqual(content_text(calc, self.media()), ["7"])

    def test_structured_said_once_beside_its_value(self) -> None:
        """
        C{{"result": 42}} with the content C{42} and C{{"result": 42}} (a server that
        repeats the answer both ways, in either order) prints C{42} once; two copies of
        the serialisation print the JSON once.
        """
        value = {"type": "text", "text": "42"}
        serialised = {"type": "text", "text": '{"result": 42}'}
        for blocks in ([serialised, value], [value, serialised]):
            result = {"content": blocks, "structuredContent": {"result": 42}}
            self.assertEqual(content_text(result, self.media()), ["42"], blocks)
        twice = {"content": [serialised, serialised], "structuredContent": {"result": 42}}
        self.assertEqual(content_text(twice, self.media()), ['{\n  "result": 42\n}'])

    def test_media_with_structured_copy_prints_only_the_path(self) -> None:
        """An image repeated in structured content is saved, and its base64 not printed."""
        data = base64.b64encode(b"\x89PNG fake").decode()
        block = {"type": "image", "data": data, "mimeType": "image/png"}
        [line] = content_text(
            {"content": [block], "structuredContent": {"content": [block]}},
            self.media(),
            stem="read",
        )
        self.assertIn("saved to", line)
        self.assertNotIn(data, line)

    def test_structured_falsy_value(self) -> None:
        """A structured value that is empty or null is still printed."""
        self.assertEqual(
            content_text({"content": [], "structuredContent": None}, self.media()), ["null"]
        )

    def test_bad_media_is_reported(self) -> None:
        """An image whose data is not base64 is reported on its line instead of crashing."""
        [line] = content_text(
            {"content": [{"type": "image", "data": "%%%", "mimeType": "image/png"}]}, self.media()
        )
        self.assertIn("not saved", line)

    def test_media_directory_made_once(self) -> None:
        """Several files from one result land in one new directory, nothing is overwritten."""
        media = self.media()
        block = {
            "type": "image",
            "data": base64.b64encode(b"x").decode(),
            "mimeType": "image/x-odd",
        }
        lines = content_text({"content": [block, block]}, media, stem="t")
        self.assertEqual(len(lines), 2)
        files = sorted(p.name for p in media.get().iterdir())
        self.assertEqual(len(files), 2)
        self.assertTrue(all(Path(media.get(), f).read_bytes() == b"x" for f in files))

    def test_unknown_block(self) -> None:
        """A content type this version does not know is shown, not dropped."""
        [line] = content_text({"content": [{"type": "hologram"}]}, self.media())
        self.assertIn("hologram", line)


class TextTests(SynchronousTestCase):
    def test_table(self) -> None:
        """Columns line up, the last is not padded."""
        self.assertEqual(
            table(("A", "BB"), [("long", "x"), ("s", "y")]), "A     BB\nlong  x\ns     y\n"
        )

    def test_table_of_control_characters(self) -> None:
        """A cell's control characters are shown escaped, and the columns still line up."""
        self.assertEqual(
            table(("A", "B"), [("x\x1b[2J", "y"), ("long-name", "z")]),
            "A           B\nx\\u001b[2J  y\nlong-name   z\n",
        )

    def test_invisible_characters_shown(self) -> None:
        """
        A tool named mcpx_call and a zero-width space is not listed as mcpx_call: every
        Unicode format character (zero-width space and joiners, word joiner, byte order
        mark, soft hyphen, a tag character, an emoji's joiner) is shown as its JSON
        escape, and the columns still line up; letters of any script are shown as they are.
        """
        self.assertEqual(
            table(("TOOL", "SERVER"), [("mcpx_call\u200b", "evil"), ("mcpx_call", "mcpx")]),
            "TOOL             SERVER\nmcpx_call\\u200b  evil\nmcpx_call        mcpx\n",
        )
        self.assertEqual(
            printable("a\u200cb\u200dc\u2060d\ufeffe\u00adf\U000e0041g\U0001f44d\u200d\U0001f44d"),
            "a\\u200cb\\u200dc\\u2060d\\ufeffe\\u00adf\\udb40\\udc41g\U0001f44d\\u200d\U0001f44d",
        )
        self.assertEqual(
            printable("d\u00e9j\u00e0 \u65e5\u672c \u0645\u0631\u062d\u0628\u0627"),
            "d\u00e9j\u00e0 \u65e5\u672c \u0645\u0631\u062d\u0628\u0627",
        )

    def test_describe_shows_the_tool_in_full(self) -> None:
        """
        C{mcpx describe} prints long argument descriptions whole, and the fields of
        nested objects (and arrays of objects) beneath their argument.
        """
        long = "The path of the file to edit. " * 8
        tool = {
            "name": "edit_file",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": long.strip()},
                    "edits": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "oldText": {"type": "string", "description": "Text to find"},
                                "newText": {"type": "string"},
                            },
                            "required": ["oldText"],
                        },
                    },
                },
                "required": ["path", "edits"],
            },
        }
        text = describe_text({"server": "fs", "tool": tool})
        self.assertIn(long.strip(), text)
        self.assertIn("  edits (array of object, required)\n", text)
        self.assertIn("      oldText (string, required): Text to find\n", text)
        self.assertIn("      newText (string, optional)\n", text)
        self.assertIn("Call it: mcpx call fs edit_file path=… edits=…", text)

    def test_hints_are_named_as_the_servers_claims(self) -> None:
        """
        A tool's annotations are shown as what its server states, not as facts mcpx
        checked: a server may call a tool that deletes files read-only.
        """
        tool = {
            "name": "drop_table",
            "inputSchema": {"type": "object"},
            "annotations": {"destructiveHint": True, "idempotentHint": True},
        }
        text = describe_text({"server": "db", "tool": tool})
        self.assertIn(
            "\nHints (as the server states them; unverified): destructive, idempotent\n", text
        )

    def test_no_servers(self) -> None:
        """An empty server list says so and where to configure servers."""
        self.assertIn("No servers", servers_text({"servers": []}))

    def test_servers_last_error_in_full(self) -> None:
        """
        A last error too long for its column, ending with what the upstream wrote on
        stderr, is said in full beneath the table; a short one only in the table.
        """
        error = (
            'could not start: upstream "crashy" exited with status 3; its stderr ended with: oops'
        )
        answer = {
            "servers": [
                {"name": "crashy", "state": "failed", "last_error": error},
                {"name": "ok", "state": "running", "last_error": "it exited"},
            ]
        }
        text = servers_text(answer)
        table_part, _, full = text.partition("\nLast errors in full:\n")
        self.assertNotIn("oops", table_part)
        self.assertIn("it exited", table_part)
        self.assertEqual(full, f"crashy: {error}\n")

    def test_error_text(self) -> None:
        """An API error shows its message, the upstream error and when a retry comes."""
        text = error_text(
            {
                "message": "failed",
                "rpc": {"code": -32602, "message": "bad", "data": {"x": 1}},
                "retry_in": 2,
            }
        )
        self.assertIn("failed", text)
        self.assertIn('upstream error -32602: bad (data: {"x": 1})', text)
        self.assertIn("retry in 2s", text)

    def test_event_line(self) -> None:
        """An event without a time of its own gets the time it was received; strings with
        spaces and other values are shown as JSON."""
        line = event_line("warning", {"message": "two words", "n": 1}, received=0.5)
        self.assertRegex(line, r"^\d\d:\d\d:\d\d\.500 warning message=\"two words\" n=1$")


class ProgressBarTests(SynchronousTestCase):
    def test_bar(self) -> None:
        """With a total, a bar and a percentage; without, the count; a shorter line blanks
        out the longer one before it; finishing ends the line."""
        stream = io.StringIO()
        bar = ProgressBar(stream)
        bar.update({"progress": 1, "total": 2, "message": "half way there"})
        bar.update({"progress": 3})
        bar.finish()
        first, second = stream.getvalue().split("\r")[1:]
        self.assertIn(" 50% 1/2 half way there", first)
        self.assertTrue(second.startswith("[3]"))
        self.assertEqual(len(second.rstrip("\n")), len(first))
        self.assertTrue(stream.getvalue().endswith("\n"))

    def test_message_shown_not_acted_on(self) -> None:
        """The upstream's message cannot move the cursor or clear the screen."""
        stream = io.StringIO()
        ProgressBar(stream).update({"progress": 1, "message": "go\x1b[2J\x1b]0;t\x07\rhi"})
        drawn = stream.getvalue()
        self.assertEqual(drawn.count("\r"), 1)
        self.assertNotIn("\x1b", drawn)
        self.assertIn("go\\u001b[2J\\u001b]0;t\\u0007\\u000dhi", drawn)

    def test_nothing_drawn(self) -> None:
        """Finishing a bar that drew nothing writes nothing."""
        stream = io.StringIO()
        ProgressBar(stream).finish()
        self.assertEqual(stream.getvalue(), "")
