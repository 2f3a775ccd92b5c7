# -*- test-case-name: tests.cli.test_quick -*-
"""
The C{mcpx} entry point, and the part of the commands that needs no click.

C{mcpx call} on a warm daemon is a round trip of about a millisecond, so its cost is
starting Python and importing code, and click alone takes several times the rest.  L{main}
therefore looks at the command line first: when it is exactly

    mcpx call SERVER TOOL [JSON | key=value ...] [--json] [--timeout DURATION]

it makes the call here, through the same functions the click command uses
(L{mcpx.cli.failures.ask}, L{mcpx.cli.calling.call_tool},
L{mcpx.cli.arguments.parse_arguments} and the renderers), and prints with
L{mcpx.cli.terminal.echo}, which behaves as C{click.echo} does.  Anything else (another
command, C{--help}, C{--start}, C{--progress}, standard input, a line click would refuse)
goes to the click group in L{mcpx.cli.main}, which says everything click says.

A plain call to the local daemon then ends its process at once (L{main}, L{Finished}):
its output is written and flushed, nothing waits for the exit, and the interpreter's own
tear-down (every module's dictionary emptied, the garbage collected again and again) would
cost more than the request.

Nothing imported here at module level may import click, attrs, Twisted or C{http.client}:
C{tests.cli.test_quick} watches that.
"""

from __future__ import annotations

import os
import sys

from mcpx.cli.terminal import echo

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, NoReturn

    #: A plain C{mcpx call}: server, tool, arguments, C{--json}, C{--timeout} in seconds.
    PlainCall = tuple[str, str, dict[str, Any], bool, float | None]


def _streams_fit() -> bool:
    """
    Whether stdout and stderr can be written as they are.  click replaces a stream whose
    encoding is ASCII (a misconfigured locale) with a UTF-8 one; rather than copy that,
    such a process takes the click path.
    """
    import codecs

    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None) or "ascii"
        try:
            if codecs.lookup(encoding).name == "ascii":
                return False
        except LookupError:
            return False
    return True


def plain_call(words: Sequence[str]) -> PlainCall | None:
    """
    The call C{words} (the command line after C{mcpx}) ask for, when it is a plain
    C{mcpx call}: C{SERVER TOOL}, then a JSON object or C{key=value} words, with
    C{--json} and C{--timeout DURATION} (or C{--timeout=DURATION}) at most once each,
    anywhere after C{call}.  C{None} for everything else, the click command's to run
    (including whatever it would refuse, so that it says why).
    """
    if not words or words[0] != "call":
        return None
    positional: list[str] = []
    as_json = False
    timeout_text: str | None = None
    rest = iter(words[1:])
    for word in rest:
        if not word.startswith("-"):
            positional.append(word)
        elif word == "--json" and not as_json:
            as_json = True
        elif word == "--timeout" and timeout_text is None:
            timeout_text = next(rest, None)
            if timeout_text is None:
                return None
        elif word.startswith("--timeout=") and timeout_text is None:
            timeout_text = word.removeprefix("--timeout=")
        else:
            return None
    if len(positional) < 2:
        return None
    timeout = None
    if timeout_text is not None:
        # Deferred for start-up time: most calls give no --timeout.
        from mcpx.settings.durations import parse_duration
        from mcpx.settings.errors import SettingsError

        try:
            timeout = parse_duration(timeout_text)
        except SettingsError:
            return None
    server, tool, *words_left = positional
    # Deferred for start-up memory: only a plain call needs them, not C{mcpx daemon}.
    from mcpx.cli.arguments import ArgumentError, parse_arguments

    try:
        arguments = parse_arguments(words_left)
    except ArgumentError:
        return None
    return server, tool, arguments, as_json, timeout


class Finished(SystemExit):
    """
    The end of a plain call to the local daemon, with its exit status: its output is
    written and flushed, and nothing is left to run at exit (no thread is waited for; a
    remote daemon's ssh processes, reaped at exit, are not in it), so L{main} may end the
    process at once.  Code running L{run} in-process sees the C{SystemExit} it is.
    """


def main() -> NoReturn:
    """
    The C{mcpx} command (the console script and C{python -m mcpx}): L{run}, after which a
    plain call's process (L{Finished}) ends at once, without the interpreter's tear-down.
    """
    try:
        run()
    except Finished as finished:
        status = finished.code
        try:
            for stream in (sys.stdout, sys.stderr):
                if stream is not None:
                    stream.flush()
        except (OSError, ValueError):
            # What cannot be written is the interpreter's to report, as it would have.
            raise SystemExit(status) from None
        if status is None or isinstance(status, int):
            os._exit(status or 0)
        # A message for its status, which SystemExit prints as the interpreter would.
        raise SystemExit(status) from None


def run() -> NoReturn:
    """
    The C{mcpx} command: a plain C{mcpx call} runs here, anything else through click.

    Like click's, it never returns: it ends in C{SystemExit}, with status 0 when all went
    well, so that code running it in-process sees the same exit either way.
    """
    if sys.argv[1:2] == ["daemon"] and _streams_fit():
        # Deferred for start-up memory: the daemon's settings machinery, only for it.
        from mcpx.cli import daemon_start

        flags = daemon_start.daemon_flags(sys.argv[2:])
        if flags is not None:
            daemon_start.main(flags)
        # Deferred for start-up memory: the daemon command alone, without the click group
        # and the commands that ask a daemon (their modules stay out of the daemon's memory).
        from mcpx.cli.daemon_command import daemon

        daemon.main(sys.argv[2:], prog_name="mcpx daemon")
        raise SystemExit(0)  # click exits itself; this is for the type checker
    plain = plain_call(sys.argv[1:]) if _streams_fit() else None
    if plain is None:
        # Deferred for start-up time: click costs more than a plain call itself.
        from mcpx.cli.main import main as click_main

        click_main()
        raise SystemExit(0)  # click exits itself; this is for the type checker
    server, tool, arguments, as_json, timeout = plain
    # Deferred for start-up memory: only a plain call needs them, not C{mcpx daemon}.
    from mcpx.cli.calling import call_tool
    from mcpx.cli.client import BadEndpoint
    from mcpx.cli.connect import connect
    from mcpx.cli.failures import EXIT_FAILED, EXIT_USAGE, ask

    try:
        client = connect()
    except BadEndpoint as e:
        echo(f"mcpx: {e}", err=True)
        raise SystemExit(EXIT_USAGE) from None
    try:
        ask(
            client,
            as_json,
            lambda: call_tool(
                client,
                as_json,
                server,
                tool,
                arguments,
                timeout=timeout,
                progress=None,
                echo=echo,
            ),
            echo,
        )
    except (KeyboardInterrupt, EOFError):
        # What click does on ^C: close the terminal's echo of it, say so, exit 1.
        echo("", err=True)
        echo("Aborted!", err=True)
        raise SystemExit(EXIT_FAILED) from None
    except SystemExit as e:
        if client.needs_exit_handlers:
            raise
        raise Finished(e.code) from None
    raise SystemExit(0) if client.needs_exit_handlers else Finished(0)
