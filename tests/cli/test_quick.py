"""
Tests for L{mcpx.cli.quick}: C{mcpx call} without click.

The plain form of C{mcpx call} runs without importing click; the tests check which command
lines take that path, that it prints, exits and sends exactly what the click command does
(both run as processes against L{FakeDaemon}), and that it imports none of the heavy
packages.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from twisted.trial.unittest import SynchronousTestCase, TestCase
from twisted.web.server import Site

from mcpx.cli.daemon_start import daemon_flags
from mcpx.cli.quick import plain_call
from mcpx.cli.terminal import echo
from tests.cli.fake_daemon import FakeDaemon
from tests.support.processes import REPO, VENV_BIN, kill_on_cleanup, reactor, spawn

#: Runs C{mcpx} through one entry point (C{quick} or C{click}, the first argument), then
#: writes the names of the modules it imported to C{$MODULES_FILE}.  The fast path runs as
#: L{mcpx.cli.quick.run}, which ends in C{SystemExit} as click does (the console script's
#: L{mcpx.cli.quick.main} ends a plain call's process at once: L{ENDING}).
DRIVER = """\
import os, sys
path, entry = os.environ["MODULES_FILE"], sys.argv[1]
sys.argv = ["mcpx", *sys.argv[2:]]
try:
    if entry == "quick":
        from mcpx.cli.quick import run as main
    else:
        from mcpx.cli.main import main
    main()
finally:
    with open(path, "w") as out:
        out.write("\\n".join(sorted(sys.modules)))
"""

#: Runs C{mcpx} as the console script does (L{mcpx.cli.quick.main}), with something to do
#: at exit that says so on stderr.
ENDING = """\
import atexit, os, sys
atexit.register(os.write, 2, b"torn down\\n")
sys.argv = ["mcpx", *sys.argv[1:]]
from mcpx.cli.quick import main
main()
"""

#: What the fast path must not import, with their submodules.
#: The name the CLI gives each call it makes (mcpx.cli.watch.new_call_id).
CALL_ID = r"cli-[0-9a-f]{12}"

HEAVY = (
    *("click", "attr", "attrs", "twisted", "treq", "klein", "jsonschema", "msgspec"),
    *("http.client", "email", "ssl", "_ssl", "pathlib", "typing"),
)

#: What a plain call (no C{--json}, no C{--timeout}) does without as well: the json package
#: imports re and enum (mcpx.cli.fastjson calls _json instead), and so does shlex; math and
#: unicodedata are libraries to load (an ASCII answer is shown without a character class),
#: the ssh machinery is for a remote daemon, the hints for an error.
PLAIN_CALL_SPARES = (
    *("json", "re", "enum", "shlex", "math", "unicodedata"),
    *("mcpx.cli.remote", "mcpx.cli.hints"),
)

#: What the installed script's plain call spares as well (C{python -m} imports them for
#: runpy, C{--timeout} for re): with them, it executed a fifth more, for the question
#: watch's thread and a context manager.
SCRIPT_CALL_SPARES = ("threading", "contextlib", "functools", "collections")


class StringStream(io.StringIO):
    """A text stream that says whether it is a terminal."""

    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty
        self.flushed = False

    def isatty(self) -> bool:
        return self.tty

    def flush(self) -> None:
        self.flushed = True


class PlainCallTests(SynchronousTestCase):
    """Which command lines are run without click."""

    def test_key_value(self) -> None:
        """C{call SERVER TOOL key=value ...} is a plain call, its values read as the
        click command reads them."""
        self.assertEqual(
            plain_call(["call", "demo", "add", "a=2", "s=hi", "l=[1]"]),
            ("demo", "add", {"a": 2, "s": "hi", "l": [1]}, False, None),
        )

    def test_json_object_or_nothing(self) -> None:
        """One JSON object, or no arguments at all, are plain calls too."""
        self.assertEqual(
            plain_call(["call", "demo", "add", '{"a": {"b": 1}}']),
            ("demo", "add", {"a": {"b": 1}}, False, None),
        )
        self.assertEqual(plain_call(["call", "demo", "now"]), ("demo", "now", {}, False, None))

    def test_options_anywhere(self) -> None:
        """C{--json} and C{--timeout} (spaced or with C{=}) may come anywhere after
        C{call}, as click allows."""
        self.assertEqual(
            plain_call(["call", "--json", "demo", "--timeout", "1m30s", "echo", "text=x"]),
            ("demo", "echo", {"text": "x"}, True, 90.0),
        )
        self.assertEqual(
            plain_call(["call", "demo", "echo", "--timeout=250ms"]),
            ("demo", "echo", {}, False, 0.25),
        )

    def test_everything_else_goes_to_click(self) -> None:
        """Other commands, other options, standard input, help, and anything click would
        refuse are left to click, which explains itself."""
        for words in (
            [],
            ["servers"],
            ["--version"],
            ["call"],
            ["call", "demo"],
            ["call", "demo", "echo", "--help"],
            ["call", "demo", "echo", "-h"],
            ["call", "demo", "echo", "--start"],
            ["call", "demo", "echo", "--progress"],
            ["call", "demo", "echo", "--no-progress"],
            ["call", "demo", "echo", "-"],
            ["call", "demo", "echo", "--", "a=1"],
            ["call", "demo", "echo", "--json", "--json"],
            ["call", "demo", "echo", "--json=yes"],
            ["call", "demo", "echo", "--timeout"],
            ["call", "demo", "echo", "--timeout", "1s", "--timeout", "2s"],
            ["call", "demo", "echo", "--timeout", "30"],
            ["call", "demo", "echo", "--timeout="],
            ["call", "demo", "echo", "oops"],
            ["call", "demo", "echo", "a=1", "a=2"],
            ["call", "demo", "echo", "{not json"],
            ["call", "demo", "echo", "-x=1"],
        ):
            self.assertIsNone(plain_call(words), words)


class EchoTests(SynchronousTestCase):
    """L{echo} prints text as C{click.echo} does."""

    def test_line_flushed(self) -> None:
        """A line goes to stdout, or stderr with C{err}, with a newline, and is flushed."""
        out, err = StringStream(tty=False), StringStream(tty=False)
        self.patch(sys, "stdout", out)
        self.patch(sys, "stderr", err)
        echo("h\u00e9llo")
        echo("oops", err=True)
        self.assertEqual((out.getvalue(), err.getvalue()), ("h\u00e9llo\n", "oops\n"))
        self.assertTrue(out.flushed and err.flushed)

    def test_controls_shown_not_acted_on(self) -> None:
        """
        What a terminal would act on (escape sequences, a carriage return, DEL, C1
        controls, bidi overrides) is shown as its escape, on a terminal or not; newlines
        and tabs stay, and a Windows line end is a newline.
        """
        text = "\x1b[1;31mred\x1b[0m\tplain\r\nnext\rover\x7f\x9b\u202eevil\u2066"
        shown = (
            "\\u001b[1;31mred\\u001b[0m\tplain\nnext\\u000dover\\u007f\\u009b\\u202eevil\\u2066\n"
        )
        for tty in (False, True):
            stream = StringStream(tty=tty)
            self.patch(sys, "stdout", stream)
            echo(text)
            self.assertEqual(stream.getvalue(), shown)


def environ(state_dir: str, modules_file: str) -> dict[str, str]:
    """This environment without C{MCPX_} variables, with the state dir and module list."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPX_")}
    env.update(MCPX_STATE_DIR=state_dir, MODULES_FILE=modules_file)
    env.pop("PYTHONPROFILEIMPORTTIME", None)
    return env


def heavy_modules(modules: set[str], heavy: tuple[str, ...] = HEAVY) -> list[str]:
    return sorted(
        m for m in modules if any(m == name or m.startswith(name + ".") for name in heavy)
    )


def named_calls(requests: list[tuple[str, str, str | None, Any]]) -> list[object]:
    """C{requests}, each C{call_id} a CLI names its call with checked and then blanked."""
    shown: list[object] = []
    for method, uri, client, sent in requests:
        named = isinstance(sent, dict) and "call_id" in sent
        if named:
            assert re.fullmatch(CALL_ID, sent["call_id"]), sent
        shown.append((method, uri, client, {**sent, "call_id": "cli-…"} if named else sent))
    return shown


def imported(stderr: str) -> set[str]:
    """The modules C{-X importtime} reported on C{stderr}."""
    return {
        line.split("|")[-1].strip()
        for line in stderr.splitlines()
        if line.startswith("import time:")
    }


class Run:
    """A finished command: exit status, output, and the modules it imported."""

    def __init__(self, code: int, out: str, err: str, modules: set[str]) -> None:
        self.code = code
        self.out = out
        self.err = err
        self.modules = modules

    def __repr__(self) -> str:
        return f"<exit {self.code}; stdout {self.out!r}; stderr {self.err!r}>"


class SamePathTests(TestCase):
    """The fast path and the click command, run as processes on the same command lines."""

    timeout = 120

    def setUp(self) -> None:
        # Short paths: a unix socket path must fit in 108 bytes.
        self.state_dir = tempfile.mkdtemp(prefix="mcpx-q-")
        self.addCleanup(shutil.rmtree, self.state_dir, True)
        self.modules_file = str(Path(self.state_dir) / "modules")
        self.env = environ(self.state_dir, self.modules_file)

    def serve(self) -> FakeDaemon:
        fake = FakeDaemon()
        port = reactor.listenUNIX(str(Path(self.state_dir) / "mcpx.sock"), Site(fake.resource()))
        self.addCleanup(port.stopListening)
        return fake

    async def run_mcpx(self, entry: str, words: list[str], env: dict[str, str]) -> Run:
        """Run C{mcpx words} through C{entry} (C{quick} or C{click}) to the end."""
        child = spawn([sys.executable, "-c", DRIVER, entry, *words], env=env, cwd=str(REPO))
        self.addCleanup(kill_on_cleanup, child)
        assert child.transport is not None
        child.transport.closeStdin()
        code = await child.ended(timeout=30)
        modules = set(Path(env["MODULES_FILE"]).read_text().split("\n"))
        return Run(code, child.text(1), child.text(2), modules)

    async def assert_same(self, words: list[str], fake: FakeDaemon | None = None) -> None:
        """Both paths print the same, exit the same and send the daemon the same."""
        quick = await self.run_mcpx("quick", words, self.env)
        sent_by_quick = list(fake.requests) if fake is not None else []
        full = await self.run_mcpx("click", words, self.env)
        self.assertIn("click", full.modules, (words, full))
        self.assertEqual(heavy_modules(quick.modules), [], (words, quick))
        self.assertEqual((quick.code, quick.out, quick.err), (full.code, full.out, full.err))
        if fake is not None:
            # Each run sent one request, the same one but for its call's own random name.
            self.assertEqual(named_calls(fake.requests), named_calls(sent_by_quick) * 2)
            fake.requests.clear()

    async def test_same_results(self) -> None:
        """Results, text and JSON, plain and with escapes or non-ASCII text, in every
        argument spelling, print the same on both paths."""
        fake = self.serve()
        for words in (
            ["call", "demo", "echo", "text=hello world"],
            ["call", "demo", "echo", "text=\x1b[31mred\x1b[0m h\u00e9llo \u2713"],
            ["call", "demo", "args", "n=3", "s=hello", "on=true", 'q="3"', "--json"],
            ["call", "demo", "args", '{"a": {"b": [1]}}'],
            ["call", "demo", "args"],
            ["call", "--timeout=250ms", "demo", "links"],
            ["call", "demo", "countdown", "steps=3"],
        ):
            await self.assert_same(words, fake)

    async def test_same_failures(self) -> None:
        """Tool errors, upstream errors, timeouts, refused input and unknown names print
        the same messages and exit with the same status on both paths."""
        fake = self.serve()
        for words in (
            ["call", "demo", "fail"],
            ["call", "demo", "broken"],
            ["call", "demo", "broken", "--json"],
            ["call", "demo", "slow", "--timeout", "1s"],
            ["call", "demo", "bad", "a=x"],
            ["call", "nowhere", "echo"],
            ["call", "demo", "nope", "--json"],
        ):
            await self.assert_same(words, fake)

    async def test_plain_call_ends_at_once(self) -> None:
        """
        The console script's entry point ends a plain call's process once its output is
        out, without the interpreter's tear-down (what is registered to run at exit does
        not run), printing and exiting as through L{mcpx.cli.quick.run}: a result, one
        larger than a pipe holds, JSON, a tool's error and the daemon's.  Without a daemon
        to ask, the process ends as usual.
        """
        fake = self.serve()
        big = "x" * 100_000
        for words in (
            ["call", "demo", "echo", "text=hello"],
            ["call", "demo", "echo", f"text={big}"],
            ["call", "demo", "args", "n=3", "--json"],
            ["call", "demo", "fail"],
            ["call", "demo", "broken"],
        ):
            quick = await self.run_mcpx("quick", words, self.env)
            ended = await self.run_ending(words, self.env)
            self.assertEqual(
                (ended.code, ended.out, ended.err), (quick.code, quick.out, quick.err), words
            )
            if big in words[-1]:
                self.assertEqual(ended.out, big + "\n")
        self.assertEqual(len(fake.requests), 10)
        # A line click runs ends as any Python program does.
        usage = await self.run_ending(["call", "demo", "echo", "oops"], self.env)
        self.assertEqual(usage.code, 2, usage)
        self.assertTrue(usage.err.endswith("torn down\n"), usage)

    async def run_ending(self, words: list[str], env: dict[str, str]) -> Run:
        """Run C{mcpx words} as the console script does (L{ENDING}), to its end."""
        child = spawn([sys.executable, "-c", ENDING, *words], env=env, cwd=str(REPO))
        self.addCleanup(kill_on_cleanup, child)
        assert child.transport is not None
        child.transport.closeStdin()
        code = await child.ended(timeout=30)
        return Run(code, child.text(1), child.text(2), set())

    async def test_same_without_daemon(self) -> None:
        """With no daemon, both paths say so the same way and exit 1."""
        await self.assert_same(["call", "demo", "echo", "text=x"])
        run = await self.run_mcpx("quick", ["call", "demo", "echo"], self.env)
        self.assertEqual(run.code, 1, run)
        self.assertIn("no daemon is running", run.err)

    async def test_other_lines_use_click(self) -> None:
        """A line the fast path leaves alone is click's: its usage errors and help."""
        self.serve()
        run = await self.run_mcpx("quick", ["call", "demo", "echo", "oops"], self.env)
        self.assertEqual(run.code, 2, run)
        self.assertIn("Usage:", run.err)
        self.assertIn("click", run.modules)

    async def test_daemon_without_the_group(self) -> None:
        """
        C{mcpx daemon} runs without the click group: its help and its usage errors are
        the same as through the group, and it imports neither the group nor the
        commands that ask a daemon, whose modules would stay in the daemon's memory.
        """
        for words in (["daemon", "--help"], ["daemon", "--bogus"], ["daemon", "extra"]):
            quick = await self.run_mcpx("quick", words, self.env)
            full = await self.run_mcpx("click", words, self.env)
            self.assertEqual(
                (quick.code, quick.out, quick.err), (full.code, full.out, full.err), words
            )
            self.assertNotIn("mcpx.cli.commands", quick.modules, words)
            self.assertIn("mcpx.cli.commands", full.modules, words)
        self.assertIn("Usage: mcpx daemon [OPTIONS]", quick.err)

    async def test_daemon_flags_without_click(self) -> None:
        """
        A C{mcpx daemon} line of setting flags, each with its value, is read without
        click (L{mcpx.cli.daemon_start}); a settings problem in it is printed and exits
        as through the click group.  A flag twice, or without its value, is click's.
        """
        bad = "--transport-max-message-size"
        for words in (
            ["daemon", bad, "abc"],
            ["daemon", f"{bad}=abc"],
            ["daemon", "--daemon-listen", "", f"{bad}=abc", "--pool-call-timeout", "1s"],
            ["daemon", f"{bad}=abc", "--pool-call-timeout", "forever"],
        ):
            quick = await self.run_mcpx("quick", words, self.env)
            full = await self.run_mcpx("click", words, self.env)
            self.assertEqual(
                (quick.code, quick.out, quick.err), (full.code, full.out, full.err), words
            )
            self.assertEqual(quick.code, 2, quick)
            self.assertTrue(quick.err.startswith("mcpx: --"), quick)
            self.assertNotIn("click", quick.modules, words)
        for words in (["daemon", f"{bad}=1", f"{bad}=abc"], ["daemon", bad]):
            quick = await self.run_mcpx("quick", words, self.env)
            full = await self.run_mcpx("click", words, self.env)
            self.assertEqual(
                (quick.code, quick.out, quick.err), (full.code, full.out, full.err), words
            )
            self.assertIn("click", quick.modules, words)


class DaemonFlagsTests(SynchronousTestCase):
    """L{daemon_flags}: which command lines the daemon reads without click."""

    def test_setting_flags(self) -> None:
        """Setting flags with values, either spelling, come back by setting name in
        the order of the settings' declarations."""
        self.assertEqual(daemon_flags([]), {})
        flags = daemon_flags(["--daemon-listen", "", "--pool-call-timeout=2s"])
        assert flags is not None
        self.assertEqual(list(flags.items()), [("pool.callTimeout", "2s"), ("daemon.listen", "")])

    def test_other_lines(self) -> None:
        """Anything else is click's: help, unknown words, a flag twice or without its
        value, a value that starts with C{-}."""
        for words in (
            ["--help"],
            ["--bogus", "1"],
            ["extra"],
            ["--daemon-listen"],
            ["--daemon-listen", "--help"],
            ["--daemon-listen", "-x"],
            ["--daemon-listen=", "--daemon-listen="],
            ["--"],
        ):
            self.assertIsNone(daemon_flags(words), words)


class EntryPointTests(TestCase):
    """The console script and C{python -m mcpx} both take the fast path, importing none
    of click, attrs, Twisted, treq, Klein, jsonschema, C{http.client}, C{email} or
    C{ssl}."""

    timeout = 60

    def setUp(self) -> None:
        self.state_dir = tempfile.mkdtemp(prefix="mcpx-q-")
        self.addCleanup(shutil.rmtree, self.state_dir, True)
        self.env = environ(self.state_dir, os.devnull)
        self.fake = FakeDaemon()
        port = reactor.listenUNIX(
            str(Path(self.state_dir) / "mcpx.sock"), Site(self.fake.resource())
        )
        self.addCleanup(port.stopListening)

    async def check(self, argv: list[str], env: dict[str, str]) -> None:
        child = spawn(argv, env=env, cwd=str(REPO))
        self.addCleanup(kill_on_cleanup, child)
        assert child.transport is not None
        child.transport.closeStdin()
        code = await child.ended(timeout=30)
        err = child.text(2)
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(child.text(1))["structuredContent"], {"n": 3})
        self.assertEqual(self.fake.last_body("/v1/call")["timeout"], 5.0)
        modules = imported(err)
        self.assertIn("mcpx.cli.quick", modules)
        self.assertEqual(heavy_modules(modules), [])

    async def test_python_m(self) -> None:
        """C{python -m mcpx call ...}."""
        words = ["call", "demo", "args", "n=3", "--json", "--timeout", "5s"]
        await self.check([sys.executable, "-X", "importtime", "-m", "mcpx", *words], self.env)

    async def test_plain_call_without_json_package(self) -> None:
        """
        C{mcpx call SERVER TOOL key=value} imports neither the json package nor re: the
        request and the answer go through the C{_json} accelerator alone.
        """
        argv = [sys.executable, "-X", "importtime", "-m", "mcpx", "call", "demo", "args", "n=3"]
        child = spawn(argv, env=self.env, cwd=str(REPO))
        self.addCleanup(kill_on_cleanup, child)
        assert child.transport is not None
        child.transport.closeStdin()
        code = await child.ended(timeout=30)
        err = child.text(2)
        self.assertEqual(code, 0, err)
        self.assertEqual(self.fake.last_body("/v1/call")["arguments"], {"n": 3})
        self.assertIn("n", child.text(1))
        modules = imported(err)
        self.assertIn("mcpx.cli.quick", modules)
        self.assertIn("_json", modules)
        self.assertEqual(heavy_modules(modules, (*HEAVY, *PLAIN_CALL_SPARES)), [])

    async def test_console_script_plain_call(self) -> None:
        """
        The installed C{mcpx} script's C{mcpx call SERVER TOOL key=value} imports none of
        L{SCRIPT_CALL_SPARES} either.
        """
        env = dict(self.env, PYTHONPROFILEIMPORTTIME="1")
        child = spawn([str(VENV_BIN / "mcpx"), "call", "demo", "args", "n=3"], env=env)
        self.addCleanup(kill_on_cleanup, child)
        assert child.transport is not None
        child.transport.closeStdin()
        code = await child.ended(timeout=30)
        err = child.text(2)
        self.assertEqual(code, 0, err)
        self.assertEqual(self.fake.last_body("/v1/call")["arguments"], {"n": 3})
        modules = imported(err)
        self.assertIn("mcpx.cli.watch", modules)
        spares = (*HEAVY, *PLAIN_CALL_SPARES, *SCRIPT_CALL_SPARES)
        self.assertEqual(heavy_modules(modules, spares), [])

    async def test_console_script(self) -> None:
        """The installed C{mcpx} script."""
        script = VENV_BIN / "mcpx"
        self.assertTrue(script.exists(), f"no console script at {script}: run `make test`")
        env = dict(self.env, PYTHONPROFILEIMPORTTIME="1")
        words = ["call", "demo", "args", "n=3", "--json", "--timeout", "5s"]
        await self.check([str(script), *words], env)
