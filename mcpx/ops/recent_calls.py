# -*- test-case-name: tests.daemon.test_status_page -*-
"""
The last tool calls that reached a configured server, newest first: C{GET /v1/calls},
and the status page's list of recent calls.

A bounded ring (L{DEFAULT_LIMIT} calls): the daemon keeps what a person glancing at it
wants to see, not a history.  Only the server, the tool, when it ended, how long it took
and how it ended are kept; never the arguments or the result.  Each call that ends is also
a C{call.finished} event, which costs nothing while nobody listens to C{/v1/events}.

Each call is kept with the principal it was made for (an access token's subject,
L{mcpx.auth.caller.principal_of}): such a subject lists its own calls only; the owner
lists them all.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Final

from attrs import define, field
from twisted.internet.interfaces import IReactorTime

from mcpx.auth.caller import attributed_to

__all__ = ["DEFAULT_LIMIT", "RecentCalls"]

#: How many ended calls are kept.
DEFAULT_LIMIT: Final = 100


@define
class RecentCalls:
    """
    The ring of the last L{DEFAULT_LIMIT} calls.

    @ivar publish: the event bus's C{publish}, told C{call.finished} for each call.
    @ivar unheard: the event bus's L{mcpx.ops.events.EventBus.unheard}: while nobody
        listens, the event is not spelled out (its fields cost a call more than the rest
        of its keeping).
    """

    clock: IReactorTime
    limit: int = DEFAULT_LIMIT
    publish: Callable[..., None] | None = None
    unheard: Callable[[], bool] | None = None
    #: Each call as (principal, server, tool, finished, seconds, outcome): a tuple, made
    #: for every call that ends, and spelled as a dict only when listed (L{newest_first}).
    _ring: deque[tuple[str | None, str, str, float, float, str]] = field(init=False)

    def __attrs_post_init__(self) -> None:
        self._ring = deque(maxlen=self.limit)

    def call_finished(
        self, server: str, tool: str, seconds: float, outcome: str, principal: str | None = None
    ) -> None:
        """
        The pool's C{on_call}: a call to C{tool} of C{server} ended after C{seconds}.

        @param principal: the subject identity it was made for, if any.
        """
        self._ring.append((principal, server, tool, self.clock.seconds(), seconds, outcome))
        if self.publish is not None and (self.unheard is None or not self.unheard()):
            self.publish(
                "call.finished",
                server,
                **attributed_to(principal),
                tool=tool,
                seconds=round(seconds, 6),
                outcome=outcome,
            )

    def newest_first(
        self, server: str | None = None, sees: Callable[[str | None], bool] | None = None
    ) -> list[dict[str, Any]]:
        """
        The kept calls, the last to end first (only C{server}'s when given).

        @param sees: whose calls may be listed (an access token's subject: its own);
            C{None}, everyone's.
        """
        return [
            {
                "server": named,
                "tool": tool,
                "finished": finished,
                "seconds": round(seconds, 6),
                "outcome": outcome,
            }
            for principal, named, tool, finished, seconds, outcome in reversed(self._ring)
            if (server is None or named == server) and (sees is None or sees(principal))
        ]
