# -*- test-case-name: tests.cli.test_commands -*-
"""
How a command fails: the documented exit statuses, L{CommandFailed}, and L{ask}, which
turns every way of not getting an answer from the daemon into a message and a status.

Light on purpose (no click, attrs, Twisted or C{http.client}): the plain C{mcpx call} of
L{mcpx.cli.quick} uses it.
"""

from __future__ import annotations

from mcpx.cli import fastjson
from mcpx.cli.client import (
    ApiError,
    DaemonNotRunning,
    DaemonStartFailed,
    DaemonUnreachable,
    ProtocolError,
)
from mcpx.cli.render import error_text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Protocol, TypeVar

    from mcpx.cli.client import DaemonClient

    _Result = TypeVar("_Result")

    class Echo(Protocol):
        """Prints one line, on stderr with C{err}: L{mcpx.cli.terminal.echo}, or C{click.echo}."""

        def __call__(self, message: str, *, err: bool = False) -> None: ...


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
                echo(fastjson.dumps({"error": e.body}, indent=2))
            message = error_text(e.body)
            if e.code == "not_found":
                message += "\n  (the daemon may be older than this command: restart it)"
            raise CommandFailed(message, exit_code_for(e)) from None
        except (OSError, ProtocolError, ValueError) as e:
            raise CommandFailed(f"talking to the daemon at {client.where} failed: {e}") from None
    except CommandFailed as e:
        echo(f"mcpx: {e.message}", err=True)
        raise SystemExit(e.exit_code) from None
