# -*- test-case-name: tests.daemon.test_exposition -*-
"""
Counters, histograms and gauges in Prometheus's text exposition format, for C{/metrics}.

The few kinds of metric the daemon keeps, written as the Prometheus Python client writes
them (its C{generate_latest}, text format 1.0.0): a counter C{x} as C{x_total} with a
C{x_created} gauge, a histogram's cumulative C{_bucket}s, C{_count}, C{_sum} and
C{_created}, labels sorted by name, the same escaping and number spelling.  The client
itself is not used because importing it imports C{ssl} and C{urllib.request}'s HTTPS
handler (for its push gateway and TLS exporter, which mcpx has no use for), and with them
the system's libcrypto and libssl: about 5 MB of an idle daemon
(L{mcpx.daemon.lean_start}).  C{tests.daemon.test_exposition} checks the bytes against the
client's.
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol

#: The content type of a scrape's answer.
CONTENT_TYPE = "text/plain; version=1.0.0; charset=utf-8"

#: One sample: its name, its labels (name and value, in the family's order) and value.
Sample = tuple[str, Sequence[tuple[str, str]], float]


class Family(Protocol):
    """What a registry writes: a metric's name, help, type and samples."""

    name: str
    documentation: str
    type: str

    def samples(self) -> Iterable[Sample]: ...


class Collector(Protocol):
    """Something read at each scrape (what the daemon holds now)."""

    def collect(self) -> Iterator[Family]: ...


def number(value: float) -> str:
    """A value as Prometheus's Python client spells it (Go's way with large numbers)."""
    value = float(value)
    if value == math.inf:
        return "+Inf"
    if value == -math.inf:
        return "-Inf"
    if math.isnan(value):
        return "NaN"
    text = repr(value)
    dot = text.find(".")
    if value > 0 and dot > 6:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


def _help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _label_value(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _line(name: str, labels: Sequence[tuple[str, str]], value: float) -> str:
    if not labels:
        return f"{name} {number(value)}\n"
    spelled = ",".join(f'{key}="{_label_value(text)}"' for key, text in sorted(labels))
    return f"{name}{{{spelled}}} {number(value)}\n"


class Registry:
    """The metrics and collectors of one scrape, in the order they were made."""

    def __init__(self) -> None:
        self._collectors: list[Collector] = []

    def register(self, collector: Collector) -> None:
        self._collectors.append(collector)

    def collect(self) -> Iterator[Family]:
        for collector in self._collectors:
            yield from collector.collect()

    def render(self) -> bytes:
        """Every family, in the text format (as the client's C{generate_latest} writes it)."""
        out: list[str] = []
        for family in self.collect():
            name = family.name + "_total" if family.type == "counter" else family.name
            out.append(f"# HELP {name} {_help(family.documentation)}\n")
            out.append(f"# TYPE {name} {family.type}\n")
            created: list[str] = []
            for sample_name, labels, value in family.samples():
                if sample_name == family.name + "_created":
                    created.append(_line(sample_name, labels, value))
                else:
                    out.append(_line(sample_name, labels, value))
            if created:
                out.append(f"# HELP {family.name}_created {_help(family.documentation)}\n")
                out.append(f"# TYPE {family.name}_created gauge\n")
                out.extend(created)
        return "".join(out).encode("utf-8")


class _Labelled:
    """A metric with labels: one child per tuple of label values, made at first use."""

    type = ""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        registry: Registry,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self._labelnames = tuple(labelnames)
        self._clock = clock
        self._children: dict[tuple[str, ...], _Child] = {}
        registry.register(self)

    def labels(self, *values: str) -> _Child:
        if len(values) != len(self._labelnames):
            raise ValueError(f"{self.name} takes labels {self._labelnames}, not {values}")
        key = tuple(str(value) for value in values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self._child(self._clock())
        return child

    def _child(self, created: float) -> _Child:
        raise NotImplementedError

    def collect(self) -> Iterator[Family]:
        yield self

    def samples(self) -> Iterator[Sample]:
        for values, child in list(self._children.items()):
            labels = tuple(zip(self._labelnames, values, strict=True))
            for suffix, extra, value in child.samples():
                yield self.name + suffix, labels + extra, value


class _Child(Protocol):
    def samples(self) -> Iterable[tuple[str, tuple[tuple[str, str], ...], float]]: ...


class _Count:
    __slots__ = ("created", "value")

    def __init__(self, created: float) -> None:
        self.value = 0.0
        self.created = created

    def inc(self, amount: float = 1) -> None:
        self.value += amount

    def samples(self) -> Iterable[tuple[str, tuple[tuple[str, str], ...], float]]:
        return (("_total", (), self.value), ("_created", (), self.created))


class Counter(_Labelled):
    """A count by label values: C{counter.labels(a, b).inc()}."""

    type = "counter"

    def labels(self, *values: str) -> _Count:
        child = super().labels(*values)
        assert isinstance(child, _Count)
        return child

    def _child(self, created: float) -> _Count:
        return _Count(created)


class _Observed:
    __slots__ = ("_bounds", "_counts", "_sum", "created")

    def __init__(self, bounds: tuple[float, ...], created: float) -> None:
        self._bounds = bounds
        self._counts = [0.0] * len(bounds)
        self._sum = 0.0
        self.created = created

    def observe(self, value: float) -> None:
        self._sum += value
        # The first bucket whose bound is at least the value (none for NaN): the last
        # bound is +Inf, so bisect_left finds one within the bounds for any value.
        bounds = self._bounds
        i = bisect_left(bounds, value)
        if value <= bounds[i]:
            self._counts[i] += 1

    def samples(self) -> Iterable[tuple[str, tuple[tuple[str, str], ...], float]]:
        found: list[tuple[str, tuple[tuple[str, str], ...], float]] = []
        running = 0.0
        for bound, count in zip(self._bounds, self._counts, strict=True):
            running += count
            found.append(("_bucket", (("le", number(bound)),), running))
        found += [("_count", (), running), ("_sum", (), self._sum)]
        found.append(("_created", (), self.created))
        return found


class Histogram(_Labelled):
    """Observations by label values, counted in C{buckets} (and C{+Inf})."""

    type = "histogram"

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        registry: Registry,
        *,
        buckets: Sequence[float],
        clock: Callable[[], float] = time.time,
    ) -> None:
        bounds = sorted(float(bound) for bound in buckets)
        if bounds[-1] != math.inf:
            bounds.append(math.inf)
        self._bounds = tuple(bounds)
        super().__init__(name, documentation, labelnames, registry, clock)

    def labels(self, *values: str) -> _Observed:
        child = super().labels(*values)
        assert isinstance(child, _Observed)
        return child

    def _child(self, created: float) -> _Observed:
        return _Observed(self._bounds, created)


class Gauges:
    """A gauge family read at a scrape: C{add(["demo"], 1)} per label values."""

    type = "gauge"

    def __init__(self, name: str, documentation: str, labels: Sequence[str] = ()) -> None:
        self.name = name
        self.documentation = documentation
        self._labelnames = tuple(labels)
        self._samples: list[Sample] = []

    def add(self, values: Sequence[str], value: float) -> None:
        labels = tuple(zip(self._labelnames, values, strict=True))
        self._samples.append((self.name, labels, value))

    def samples(self) -> Iterable[Sample]:
        return self._samples
