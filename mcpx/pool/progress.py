# -*- test-case-name: tests.pool.test_pool -*-
"""
Progress routing: each C{tools/call} the pool makes carries a progress token of the
pool's own (C{mcpx-<n>}); a report under it reaches that call's listener and gives
the call its idle bound again (L{mcpx.pool.budget.Deadline.extend}).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

from mcpx.pool.budget import Deadline
from mcpx.pool.instance import POOL_LOG

ProgressSink: TypeAlias = Callable[[dict[str, Any]], None]


class ProgressRoutes:
    """The progress tokens of the calls in flight, and whom each one's reports reach."""

    log = POOL_LOG

    def __init__(self) -> None:
        #: The deadline of each call in flight by its token, the idle bound each report
        #: grants it again, and who hears its reports, if anyone.
        self._watches: dict[str, tuple[Deadline, float, ProgressSink | None]] = {}
        self._tokens = itertools.count(1)

    def token(self) -> str:
        """A fresh token for one call, sent with it (its C{_meta.progressToken})."""
        return f"mcpx-{next(self._tokens)}"

    def open(self, token: str, sink: ProgressSink | None, bound: float, deadline: Deadline) -> None:
        """
        The call under C{token} is in flight, bounded by C{deadline}: until L{close},
        each report under it gives it C{bound} again and reaches C{sink}.
        """
        self._watches[token] = (deadline, bound, sink)

    def close(self, token: str) -> None:
        """The call under C{token} ended: reports about it go nowhere from now on."""
        del self._watches[token]

    def heard(self, given: Mapping[str, Any]) -> None:
        """One C{notifications/progress}: extend its call's deadline and tell its listener."""
        token = given.get("progressToken")
        watch = self._watches.get(token) if isinstance(token, str) else None
        if watch is None:
            return
        deadline, bound, sink = watch
        deadline.extend(bound)
        if sink is not None:
            try:
                sink(dict(given))
            except Exception:
                self.log.failure("a progress callback failed")
