# -*- test-case-name: tests.test_lasting -*-
"""
The keys in a lasting condition (L{Lasting}): a client at its cap of sessions or tasks,
a server whose instances are all busy, a kind of refusal already logged.

Such a condition is met again at each request for as long as it lasts. The daemon
warns when a key enters it and stays quiet while it lasts, so a client hammering a
full pool writes one line to the log, not one a request, and the next time the key
enters it, after it cleared, is worth a line again.

Like L{mcpx.once}, this module sits below every other floor: it imports nothing of mcpx.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

__all__ = ["Lasting"]


class Lasting(Generic[K]):
    """
    Which keys are in the condition now.

    @param most: how many keys it holds at the most; a key met beyond that is not
        counted in, so a condition keyed by what a peer sends cannot grow without end.
    """

    __slots__ = ("_keys", "_most")

    def __init__(self, most: int | None = None) -> None:
        self._keys: set[K] = set()
        self._most = most

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def begins(self, key: K) -> bool:
        """
        Whether C{key} enters the condition now (the time to say so): C{False} while it
        is in it already, or when C{most} keys are.
        """
        if key in self._keys or (self._most is not None and len(self._keys) >= self._most):
            return False
        self._keys.add(key)
        return True

    def ends(self, key: K) -> None:
        """C{key} is out of the condition: entering it again is news again."""
        self._keys.discard(key)

    def clear(self) -> None:
        """No key is in the condition any more."""
        self._keys.clear()
