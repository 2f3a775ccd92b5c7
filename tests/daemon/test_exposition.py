"""
L{mcpx.daemon.exposition} writes what the Prometheus Python client writes for the same
counters, histograms and gauges, byte for byte.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import prometheus_client.metrics as client_metrics
from prometheus_client import CollectorRegistry
from prometheus_client import Counter as ClientCounter
from prometheus_client import Histogram as ClientHistogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import GaugeMetricFamily
from twisted.trial.unittest import SynchronousTestCase

from mcpx.daemon.exposition import CONTENT_TYPE, Counter, Family, Gauges, Histogram, Registry
from mcpx.daemon.exposition import number as spelled

#: The Python client stamps each child with time.time() when it is made: both sides are
#: given this one, so that their _created samples agree.
CREATED = 1796195820.185655

BUCKETS = (0.001, 0.0025, 0.5, 1, 2.5, 60)

#: Label values and help texts that need escaping, non-ASCII text, and plain ones.
AWKWARD = ("plain", 'quote "q"', "back\\slash", "new\nline", "héllo ✓")


class SameBytesTests(SynchronousTestCase):
    def setUp(self) -> None:
        # The client reads time.time() for _created: give it the fixed moment.
        self.patch(client_metrics, "time", SimpleNamespace(time=lambda: CREATED))

    def test_counters_histograms_and_gauges(self) -> None:
        """
        Counters with and without children, a histogram observed on and between its
        bounds, and gauge families with and without labels come out as the client
        writes them, in the same order.
        """
        ours = Registry()
        theirs = CollectorRegistry(auto_describe=False)
        for name, text in (("calls", "Calls, by server.\nSecond line \\ here."), ("idle", "x")):
            mine = Counter(name, text, ["server", "outcome"], ours, clock=lambda: CREATED)
            client = ClientCounter(name, text, ["server", "outcome"], registry=theirs)
            if name == "calls":
                for i, value in enumerate(AWKWARD):
                    for _ in range(i + 1):
                        mine.labels(value, "ok").inc()
                        client.labels(value, "ok").inc()
                mine.labels("x", "error").inc(2.5)
                client.labels("x", "error").inc(2.5)
        mine_h = Histogram("took", "Took.", ["tool"], ours, buckets=BUCKETS, clock=lambda: CREATED)
        client_h = ClientHistogram("took", "Took.", ["tool"], buckets=BUCKETS, registry=theirs)
        for seconds in (0.0005, 0.001, 0.3, 1, 59.9, 60, 61, 1e6):
            for tool in ("a", "b"):
                mine_h.labels(tool).observe(seconds)
                client_h.labels(tool).observe(seconds)

        class Ours:
            def collect(self) -> Iterator[Family]:
                held = Gauges("held", "Held, by server.", labels=["server"])
                for i, value in enumerate(AWKWARD):
                    held.add([value], i)
                yield held
                alone = Gauges("alone", "No labels.")
                alone.add([], 0)
                yield alone
                yield Gauges("empty", "Nothing added.", labels=["state"])

        class Theirs:
            def collect(self) -> Iterator[Any]:
                held = GaugeMetricFamily("held", "Held, by server.", labels=["server"])
                for i, value in enumerate(AWKWARD):
                    held.add_metric([value], i)
                yield held
                alone = GaugeMetricFamily("alone", "No labels.")
                alone.add_metric([], 0)
                yield alone
                yield GaugeMetricFamily("empty", "Nothing added.", labels=["state"])

        ours.register(Ours())
        theirs.register(Theirs())
        self.assertEqual(ours.render().decode(), generate_latest(theirs).decode())
        self.assertEqual(CONTENT_TYPE, CONTENT_TYPE_LATEST)

    def test_numbers(self) -> None:
        """Numbers are spelled as the client spells them, Go's exponents included."""
        from prometheus_client.utils import floatToGoString

        for value in (0, 1, 2.5, 0.001, 1e-9, 123456.0, 1234567.0, 1.7e9, 1e21, math.inf, -1.5):
            self.assertEqual(spelled(value), floatToGoString(value), value)
        self.assertEqual(spelled(-math.inf), "-Inf")
        self.assertEqual(spelled(math.nan), "NaN")
