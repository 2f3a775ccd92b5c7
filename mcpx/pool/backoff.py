# -*- test-case-name: tests.pool.test_pool -*-
"""
How long the pool waits before starting a server again after it crashed or failed to
start: doubling with each failure in a row, up to a cap, so a server that dies at once
is not respawned in a tight loop.
"""

from __future__ import annotations

from attrs import frozen

#: Past this many failures in a row the delay is the cap, whatever the factor.
_DOUBLINGS = 64


@frozen
class Backoff:
    """
    The restart delay after C{n} failures in a row: C{first * factor ** (n - 1)},
    at most C{cap}.  The defaults give 1s, 2s, 4s, ... 60s.
    """

    first: float = 1.0
    factor: float = 2.0
    cap: float = 60.0

    def delay(self, failures: int) -> float:
        """Seconds to wait before the next start; none before the first failure."""
        if failures <= 0:
            return 0.0
        if failures > _DOUBLINGS:
            return self.cap
        return float(min(self.cap, self.first * self.factor ** (failures - 1)))
