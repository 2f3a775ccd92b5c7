# -*- test-case-name: tests.cli.test_quick -*-
"""
The C{mcpx} entry point, and the part of the commands that needs no click.

C{mcpx call} on a warm daemon is a round trip of about a millisecond, so its cost is
starting Python and importing code, and click alone takes several times the rest.  L{main}
therefore looks at the command line first: when it is exactly

    mcpx call SERVER TOOL [JSON | key=value ...] [--json] [--timeout DURATION]

it makes the call here, through the same functions the click command uses (L{ask},
L{call_tool}, L{mcpx.cli.arguments.parse_arguments} and the renderers), and prints with
L{echo}, which behaves as C{click.echo} does.  Anything else (another command, C{--help},
C{--start}, C{--progress}, standard input, a line click would refuse) goes to the click
group in L{mcpx.cli.main}, which says everything click says.

Nothing imported here at module level may import click, attrs, Twisted or C{http.client}:
C{tests.cli.test_quick} watches that.
"""

from __future__ import annotations

import json
import sys

from mcpx.cli.client import (
    ApiError,
    DaemonNotRunning,
    DaemonStartFailed,
    DaemonUnreachable,
    ProtocolError,
    error_from,
)
from mcpx.cli.render import MediaDirectory, ProgressBar, content_text, error_text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any, NoReturn, Protocol, TypeVar

    from mcpx.cli.client import DaemonClient

    _Result = TypeVar("_Result")

    class Echo(Protocol):
        """Prints one line, on stderr with C{err}: L{echo}, or C{click.echo}."""

        def __call__(self, message: str, *, err: bool = False) -> None: ...

    #: A plain C{mcpx call}: server, tool, arguments, C{--json}, C{--timeout} in seconds.
    PlainCall = tuple[str, str, dict[str, Any], bool, float | None]


EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_UPSTREAM = 4


class CommandFailed(Exception):
    """A failure with its own exit status; L{ask} prints it as C{mcpx: ...}."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def not_running_message(error: DaemonNotRunning) -> str:
    return (
        f"no daemon is running ({error.reason}: {error.path}).\n"
        "Start one with `mcpx daemon` (or `make run` in a checkout), "
        "or add --start to this command to start one in the background."
    )


def exit_code_for(error: ApiError) -> int:
    """The exit status for an error the daemon answered; see L{mcpx.cli.commands}."""
    if error.status == 404 and error.code != "not_found":
        return EXIT_NOT_FOUND
    if error.status is None and error.code.startswith("unknown_"):
        return EXIT_NOT_FOUND
    if error.status in (502, 503, 504) or "rpc" in error.body:
        return EXIT_UPSTREAM
    if error.status == 400:
        return EXIT_USAGE
    return EXIT_FAILED


def ask(client: DaemonClient, as_json: bool, work: Callable[[], _Result], echo: Echo) -> _Result:
    """
    Run C{work}, which asks the daemon through C{client}, and turn every way of failing
    to get an answer into a message on stderr and the documented exit status.

    @param as_json: also print an API error's JSON on stdout.
    @raise SystemExit: C{work} failed, or decided on an exit status itself.
    """
    try:
        try:
            return work()
        except DaemonNotRunning as e:
            raise CommandFailed(not_running_message(e)) from None
        except DaemonStartFailed as e:
            raise CommandFailed(f"could not start a daemon: {e}") from None
        except DaemonUnreachable as e:
            raise CommandFailed(str(e)) from None
        except ApiError as e:
            if as_json:
                echo(json.dumps({"error": e.body}, indent=2))
            message = error_text(e.body)
            if e.code == "not_found":
                message += "\n  (the daemon may be older than this command: restart it)"
            raise CommandFailed(message, exit_code_for(e)) from None
        except (OSError, ProtocolError, ValueError) as e:
            raise CommandFailed(f"talking to the daemon at {client.where} failed: {e}") from None
    except CommandFailed as e:
        echo(f"mcpx: {e.message}", err=True)
        raise SystemExit(e.exit_code) from None


def call_tool(
    client: DaemonClient,
    as_json: bool,
    server: str,
    tool: str,
    arguments: Mapping[str, Any],
    *,
    timeout: float | None,
    progress: bool | None,
    echo: Echo,
    answer_questions: bool | None = None,
) -> None:
    """
    C{POST /v1/call} and print the result: its JSON with C{as_json}, else as text (on
    stderr when the tool reports an error).

    @param progress: ask for progress and draw it on stderr; C{None} to do so when stderr
        is a terminal.
    @param answer_questions: put the questions the server asks during the call to the
        person at the terminal (L{mcpx.cli.watch}); C{None} to do so when
        L{on_terminal} says there is one.
    @raise SystemExit: with L{EXIT_FAILED} when the tool reported an error (C{isError}).
    @raise CommandFailed: the answer is not a result.
    """
    body: dict[str, Any] = {"server": server, "tool": tool, "arguments": arguments}
    if timeout is not None:
        body["timeout"] = timeout
    show_progress = progress if progress is not None else sys.stderr.isatty()
    if show_progress:
        body["progress"] = True
    in_terminal = answer_questions if answer_questions is not None else on_terminal()
    result = call_answering(client, body, echo, show_progress, in_terminal=in_terminal)
    if not isinstance(result, dict):
        raise CommandFailed(f"the daemon answered something that is not a result: {result!r}")
    failed = result.get("isError") is True
    if as_json:
        echo(json.dumps(result, indent=2, ensure_ascii=False))
    else:
        for line in content_text(result, MediaDirectory(), stem=file_stem(tool)):
            echo(line, err=failed)
    if failed:
        raise SystemExit(EXIT_FAILED)


def on_terminal() -> bool:
    """
    Whether a person can be asked, in the terminal, what the server asks during a call:
    standard input and standard error are both terminals.
    """
    return _isatty(sys.stdin) and _isatty(sys.stderr)


def send_call(client: DaemonClient, body: Mapping[str, Any], show_progress: bool) -> Any:
    """C{POST /v1/call} with C{body}; the result, however the answer carried it."""
    if show_progress:
        return call_with_progress(client, body)
    # No socket timeout: the daemon times the call out itself and answers 504.
    return client.post("/v1/call", body, timeout=None)


def call_answering(
    client: DaemonClient,
    body: Mapping[str, Any],
    echo: Echo,
    show_progress: bool,
    *,
    in_terminal: bool = True,
) -> Any:
    """
    L{send_call}, naming the call, while a L{mcpx.cli.watch.QuestionWatch} answers its
    questions in the terminal, or (not C{in_terminal}) says on stderr which question
    it waits on and how to answer it with C{mcpx elicit}.  A daemon older than
    C{call_id} refuses it: the call is then made as before, without the watch.
    """
    from mcpx.cli.watch import INTERVAL, QuestionWatch, answer_in_terminal, new_call_id

    call_id = new_call_id()
    watch = QuestionWatch(
        call_id,
        body["server"],
        connect=client.again,
        echo=echo,
        answer=answer_in_terminal if in_terminal else None,
        delay=0.0 if in_terminal else INTERVAL,
    )
    watch.start()
    try:
        return send_call(client, {**body, "call_id": call_id}, show_progress)
    except ApiError as e:
        if e.status != 400 or e.body.get("field") != "call_id":
            raise
    finally:
        watch.stop()
    return send_call(client, body, show_progress)


def file_stem(tool: str) -> str:
    """The start of the names of the files a tool's images and audio are saved to."""
    cleaned = "".join(c if c.isalnum() or c in "-_" else "_" for c in tool)
    return cleaned[:40] or "content"


def call_with_progress(client: DaemonClient, body: Mapping[str, Any]) -> Any:
    """
    C{POST /v1/call} asking for progress: NDJSON lines of C{{"progress"}}, then one of
    C{{"result"}} or C{{"error"}}.  Progress is drawn on stderr, never stdout.
    """
    bar = ProgressBar(sys.stderr)
    with client.open(
        "POST", "/v1/call", body, timeout=None, accept="application/x-ndjson, application/json"
    ) as response:
        if response.content_type != "application/x-ndjson":
            return response.json()
        try:
            for line in response.lines():
                if not line.strip():
                    continue
                message = json.loads(line)
                if not isinstance(message, dict):
                    continue
                if isinstance(message.get("progress"), dict):
                    bar.update(message["progress"])
                elif "result" in message:
                    return message["result"]
                elif "error" in message:
                    raise error_from(None, message, "the call failed")
        finally:
            bar.finish()
    raise CommandFailed("the daemon ended its answer without a result")


def echo(message: str, *, err: bool = False) -> None:
    """
    Print C{message} and a newline on stdout (stderr with C{err}) as C{click.echo} prints
    text: ANSI escape sequences removed unless the stream is a terminal, and flushed.
    """
    stream = sys.stderr if err else sys.stdout
    if stream is None:
        return
    out = message + "\n"
    if "\x1b" in out and not _isatty(stream):
        import re

        # click's own pattern for the sequences it removes.
        out = re.sub(r"\033\[[0-?]*[ -/]*[@-~]", "", out)
    stream.write(out)
    stream.flush()


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except Exception:
        return False


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
        from mcpx.settings.durations import parse_duration
        from mcpx.settings.errors import SettingsError

        try:
            timeout = parse_duration(timeout_text)
        except SettingsError:
            return None
    from mcpx.cli.arguments import ArgumentError, parse_arguments

    server, tool, *words_left = positional
    try:
        arguments = parse_arguments(words_left)
    except ArgumentError:
        return None
    return server, tool, arguments, as_json, timeout


def main() -> NoReturn:
    """
    The C{mcpx} command (the console script and C{python -m mcpx}): a plain C{mcpx call}
    runs here, anything else through click.

    Like click's, it never returns: it ends in C{SystemExit}, with status 0 when all went
    well, so that code running it in-process sees the same exit either way.
    """
    plain = plain_call(sys.argv[1:]) if _streams_fit() else None
    if plain is None:
        from mcpx.cli.main import main as click_main

        click_main()
        raise SystemExit(0)  # click exits itself; this is for the type checker
    server, tool, arguments, as_json, timeout = plain
    from mcpx.cli.client import connect
    from mcpx.cli.remote import BadEndpoint

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
    raise SystemExit(0)
