"""Capturing log events in tests."""

from __future__ import annotations

from twisted.internet.testing import EventLoggingObserver
from twisted.logger import globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase


def observe_log(case: SynchronousTestCase) -> EventLoggingObserver:
    """Collect every log event emitted until C{case} ends."""
    events = EventLoggingObserver()
    globalLogPublisher.addObserver(events)
    case.addCleanup(globalLogPublisher.removeObserver, events)
    return events
