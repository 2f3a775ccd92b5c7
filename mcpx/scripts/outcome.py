# -*- test-case-name: tests.scripts.test_runner -*-
"""How a run ends: its outcome, or why it did not finish."""

from __future__ import annotations

from typing import Any, Final

from attrs import frozen

#: The most printed text repeated in an error (the rest is in the run's output).
SHOWN_OUTPUT: Final = 4000


class RunFailed(Exception):
    """
    A run that did not finish: why (a stable code), and what it printed until then.
    """

    def __init__(self, code: str, message: str, output: str = "", run: str = "") -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message
        self.output = output
        self.run = run

    def __str__(self) -> str:
        if not self.output:
            return f"{self.message} (it printed nothing)"
        shown = self.output
        if len(shown) > SHOWN_OUTPUT:
            shown = "…" + shown[-SHOWN_OUTPUT:]
        return f"{self.message}; what it printed until then:\n{shown}"


class TooManyRuns(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.limit = limit


@frozen
class RunOutcome:
    """
    A finished run.

    @ivar value: the program's last expression, when it is JSON (C{has_value}).
    @ivar shown: its text otherwise (a repr), or C{None}.
    """

    run: str
    output: str
    has_value: bool
    value: Any
    shown: str | None
    artifacts: list[dict[str, Any]]


class UnknownRun(Exception):
    """A call claims a run (C{X-Mcpx-Run}) that is not running, or with the wrong key."""

    def __init__(self, run: str) -> None:
        super().__init__(run)
        self.run = run


class RunRefusedCall(Exception):
    """A call of a running program that its run's bounds do not allow."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message
