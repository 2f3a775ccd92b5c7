# -*- test-case-name: tests.cli.test_quick -*-
"""
C{mcpx call}'s work, shared by the click command and the plain call of
L{mcpx.cli.quick}: C{POST /v1/call}, with progress drawn on stderr and the server's
questions put to the person at the terminal, and the result printed.
"""

from __future__ import annotations

import sys

from mcpx.cli import fastjson
from mcpx.cli.client import ApiError, error_from
from mcpx.cli.failures import EXIT_FAILED, CommandFailed
from mcpx.cli.render import MediaDirectory, ProgressBar, content_text
from mcpx.cli.terminal import on_terminal
from mcpx.ops import routes

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from mcpx.cli.client import DaemonClient
    from mcpx.cli.failures import Echo


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
        echo(fastjson.dumps(result, indent=2, ensure_ascii=False))
    else:
        for line in content_text(result, MediaDirectory(), stem=file_stem(tool)):
            echo(line, err=failed)
    if failed:
        raise SystemExit(EXIT_FAILED)


def send_call(client: DaemonClient, body: Mapping[str, Any], show_progress: bool) -> Any:
    """C{POST /v1/call} with C{body}; the result, however the answer carried it."""
    if show_progress:
        return call_with_progress(client, body)
    # No socket timeout: the daemon times the call out itself and answers 504.
    return client.post(routes.path("call_tool"), body, timeout=None)


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
    # Deferred for start-up time: only a call being made needs the watch and its threads.
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
        "POST",
        routes.path("call_tool"),
        body,
        timeout=None,
        accept="application/x-ndjson, application/json",
    ) as response:
        if response.content_type != "application/x-ndjson":
            return response.json()
        try:
            for line in response.lines():
                if not line.strip():
                    continue
                message = fastjson.loads(line)
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
