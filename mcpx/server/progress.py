# -*- test-case-name: tests.server.test_progress_flow -*-
"""
The progress of one call, passed on to the client that made it.

An upstream's reports go out in order, never backwards and nothing once the total is
reached (the spec forbids both), under the token the client chose.  While the
client's stream keeps up nothing is held back; only while it is backed up (its
L{mcpx.server.flow.Flow} paused by Twisted) does a report wait, and then only the
latest one.
"""

from __future__ import annotations

from typing import Any

from mcpx.server.conn import Conn, Context
from mcpx.server.flow import Flow
from mcpx.spec.matrix import field_in


class ProgressRelay:
    """
    Passes one call's progress on, every report in order.  A report held while the
    stream was backed up goes out when it drains, or before the answer if that comes
    first (L{flush}), so a host is never left on stale progress and never misses the
    last report.
    """

    def __init__(
        self, conn: Conn, token: str | int, flow: Flow | None, *, with_message: bool
    ) -> None:
        self._conn = conn
        self._token = token
        self._flow = flow
        self._with_message = with_message
        self._last: float | None = None
        self._finished = False
        self._held: dict[str, Any] | None = None
        self._waiting = False

    @classmethod
    def for_request(cls, conn: Conn, context: Context) -> ProgressRelay:
        """The upstream's progress, passed on to C{conn} with the client's token."""
        assert context.progress_token is not None
        return cls(
            conn,
            context.progress_token,
            conn.flow_for(context.progress_token),
            with_message=field_in("ProgressNotification.message", context.revision),
        )

    def __call__(self, given: dict[str, Any]) -> None:
        progress = given.get("progress")
        if type(progress) is not int and type(progress) is not float:
            return
        if self._finished or (self._last is not None and progress <= self._last):
            return
        total = given.get("total")
        has_total = type(total) is int or type(total) is float
        final = has_total and progress >= float(total)  # type: ignore[arg-type]
        report: dict[str, Any] = {"progressToken": self._token, "progress": progress}
        if has_total:
            report["total"] = total
        message = given.get("message")
        if self._with_message and isinstance(message, str):
            report["message"] = message
        self._last = progress
        self._finished = final
        flow = self._flow
        if not final and flow is not None and flow.paused and not flow.stopped:
            self._held = report
            if not self._waiting:
                self._waiting = True
                flow.when_resumed(self._resumed)
            return
        self._send(report)

    def _resumed(self) -> None:
        self._waiting = False
        self.flush()

    def flush(self) -> None:
        """Send the report held while the stream was backed up, if any."""
        held, self._held = self._held, None
        if held is not None:
            self._send(held)

    def drop(self) -> None:
        """The call ended without an answer worth reporting on: send nothing more."""
        self._held = None
        self._finished = True

    def _send(self, report: dict[str, Any]) -> None:
        # A report sent now supersedes whatever was held.
        self._held = None
        conn = self._conn
        if conn.push is not None and not conn.closed:
            conn.push("notifications/progress", report)
