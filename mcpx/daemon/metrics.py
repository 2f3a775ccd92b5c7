# -*- test-case-name: tests.daemon.test_metrics -*-
"""
C{/metrics}: what the daemon has done and holds, in Prometheus's text format.

Counters and histograms are bumped where things happen (a call finishing in the pool,
a server starting or ending, an HTTP request finishing); what the daemon holds now
(instances, calls in flight, pending questions, tasks, sessions, event streams) is
read from its parts when a scraper asks, so it costs nothing between scrapes.

A labelled child is looked up once per label values and kept, so a call pays one
dict lookup, one counter increment and one histogram observation.  The tool label
is bounded (L{Metrics.max_tools}): a client calling made-up tool names cannot make
the daemon keep a series for each.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from mcpx.daemon.exposition import Counter, Family, Gauges, Histogram, Registry

if TYPE_CHECKING:
    from mcpx.ops.host import OpHost
    from mcpx.server.http import McpHTTP


class HeldParts(Protocol):
    """The parts a scrape reads what the daemon holds from (L{mcpx.daemon.http.DaemonHTTP})."""

    @property
    def host(self) -> OpHost: ...
    @property
    def mcp(self) -> McpHTTP | None: ...


#: The tool label of calls past L{Metrics.max_tools} distinct (server, tool) pairs.
OTHER_TOOLS = "_other"

#: Call latency buckets, in seconds: a proxied call is milliseconds, a tool seconds to minutes.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

#: The outcomes of a call: answered, answered with C{isError}, or failed.
OK, TOOL_ERROR, ERROR = "ok", "tool_error", "error"

Publish = Callable[..., None]

# Event kinds that count something per server.
_SERVER_COUNTERS = {
    "server.started": "starts",
    "server.exited": "crashes",
    "server.failed": "start_failures",
    "server.restarted": "restarts",
}

# Sampling events and the outcome each counts as (None: the event's own outcome field,
# one of the few settings that can refuse a request).
_SAMPLING_OUTCOMES: dict[str, str | None] = {
    "sampling.answered": "answered",
    "sampling.failed": "failed",
    "sampling.refused": None,
}


class RouteTemplates:
    """
    The route template a request path belongs to (C{/v1/tools/{server}/{tool}}), so the
    route label has as many values as the daemon has routes, whatever paths are asked.
    """

    def __init__(self, templates: Iterable[str], exact: Iterable[str] = ()) -> None:
        self._exact = {path: path for path in exact}
        patterns = []
        for template in templates:
            if "{" not in template:
                self._exact[template] = template
                continue
            pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template))
            patterns.append((re.compile(pattern + r"\Z"), template))
        # The longest template first, so /v1/servers/{server}/restart wins over /{server}.
        patterns.sort(key=lambda entry: -len(entry[1]))
        self._patterns = patterns

    def of(self, path: str) -> str:
        found = self._exact.get(path)
        if found is not None:
            return found
        for pattern, template in self._patterns:
            if pattern.match(path):
                return template
        return "other"


class Metrics:
    """
    The daemon's counters and histograms, and the collector of what it holds now.

    @ivar max_tools: at most this many (server, tool) pairs get series of their own.
    """

    def __init__(self, routes: RouteTemplates, max_tools: int = 1000) -> None:
        self.routes = routes
        self.max_tools = max_tools
        self.registry = Registry()
        registry = self.registry

        def counter(name: str, text: str, *labels: str) -> Counter:
            return Counter(name, text, list(labels), registry)

        self.calls = counter(
            "mcpx_calls",
            "Tool calls finished, by server, tool and outcome (ok, tool_error, error).",
            "server",
            "tool",
            "outcome",
        )
        self.errors = counter(
            "mcpx_call_errors",
            "Tool calls that failed or answered isError, by server and tool.",
            "server",
            "tool",
        )
        self.latency = Histogram(
            "mcpx_call_duration_seconds",
            "How long tool calls took, start of the server included, by server and tool.",
            ["server", "tool"],
            registry,
            buckets=LATENCY_BUCKETS,
        )
        self.server_counters = {
            key: counter(f"mcpx_server_{key}", text, "server")
            for key, text in (
                ("starts", "Instances started, by server."),
                ("crashes", "Instances that ended unexpectedly, by server."),
                ("start_failures", "Starts that failed, by server."),
                ("restarts", "Restarts asked for or made by a reload, by server."),
            )
        }
        self.http_requests = counter(
            "mcpx_http_requests",
            "HTTP requests answered, by route template and status.",
            "route",
            "status",
        )
        self.questions_closed = counter(
            "mcpx_questions_closed",
            "Questions asked by upstream servers that were closed, by how (answered, ...).",
            "state",
        )
        self.sampling = counter(
            "mcpx_sampling_requests",
            "Sampling requests from upstream servers, by server and outcome (answered, "
            "failed, or the setting that refused it: sampling.mode, sampling.includeContext, "
            "result).",
            "server",
            "outcome",
        )
        self._calls: dict[tuple[str, str, str], tuple[Any, Any, Any]] = {}
        self._tools: set[tuple[str, str]] = set()
        self._http: dict[tuple[str, int], Any] = {}
        #: The child of each (route path, status) whose path is its route's template.
        self._exact: dict[tuple[bytes, int], Any] = {}
        self._holdings: Holdings | None = None

    def watch(self, http: HeldParts) -> None:
        """Read what C{http}'s parts hold at each scrape."""
        if self._holdings is None:
            self._holdings = Holdings(http)
            self.registry.register(self._holdings)

    def call_finished(self, server: str, tool: str, seconds: float, outcome: str) -> None:
        """One tool call ended after C{seconds}; C{outcome} is L{OK}, L{TOOL_ERROR} or L{ERROR}."""
        key = (server, tool, outcome)
        children = self._calls.get(key)
        if children is None:
            children = self._children(server, tool, outcome)
        counted, failed, timed = children
        # The counters' own inc, without a call of its own: this runs for every call.
        counted.value += 1
        if failed is not None:
            failed.value += 1
        timed.observe(seconds)

    def _children(self, server: str, tool: str, outcome: str) -> tuple[Any, Any, Any]:
        if (server, tool) not in self._tools:
            if len(self._tools) >= self.max_tools:
                tool = OTHER_TOOLS
            else:
                self._tools.add((server, tool))
        children = (
            self.calls.labels(server, tool, outcome),
            self.errors.labels(server, tool) if outcome != OK else None,
            self.latency.labels(server, tool),
        )
        if tool != OTHER_TOOLS:
            self._calls[(server, tool, outcome)] = children
        return children

    def published(self, publish: Publish) -> Publish:
        """C{publish}, counting the server and question events that pass through it."""

        def counting(kind: str, server: str | None = None, **data: Any) -> None:
            counter = _SERVER_COUNTERS.get(kind)
            if counter is not None and server is not None:
                self.server_counters[counter].labels(server).inc()
            elif kind == "question.closed":
                self.questions_closed.labels(str(data.get("state"))).inc()
            elif kind in _SAMPLING_OUTCOMES and server is not None:
                outcome = _SAMPLING_OUTCOMES[kind] or str(data.get("outcome"))
                self.sampling.labels(server, outcome).inc()
            publish(kind, server, **data)

        return counting

    def request_finished(self, request: Any) -> None:
        """
        An HTTP request (twisted.web's) was answered: counted by its path and status.
        The daemon's site logs a request with this itself (L{mcpx.daemon.site.DaemonSite}).
        """
        path = request.path
        status = request.code
        child = self._exact.get((path, status))
        if child is None:
            child = self._route_child(path, status)
        # inc without a call of its own, as for a call: this runs for every request.
        child.value += 1

    def _route_child(self, path: bytes, status: int) -> Any:
        text = path.decode("utf-8", "replace")
        route = self.routes.of(text)
        key = (route, status)
        child = self._http.get(key)
        if child is None:
            child = self._http[key] = self.http_requests.labels(route, str(status))
        if route == text:
            # A route's own path (C{/mcp}): kept by its bytes, as many as routes and
            # statuses; a path with values in it is matched each time.
            self._exact[path, status] = child
        return child

    def render(self) -> bytes:
        """Every metric, in the Prometheus text exposition format."""
        return self.registry.render()


class Holdings:
    """What the daemon holds at the moment of a scrape, read from its parts."""

    def __init__(self, http: HeldParts) -> None:
        self._http = http

    def collect(self) -> Iterator[Family]:
        host = self._http.host
        instances = Gauges(
            "mcpx_server_instances", "Instances running, by server.", labels=["server"]
        )
        in_flight = Gauges(
            "mcpx_calls_in_flight",
            "Requests being answered upstream, by server.",
            labels=["server"],
        )
        up = Gauges(
            "mcpx_server_ready", "1 when the server has a ready instance.", labels=["server"]
        )
        if host.pool is not None:
            for status in host.pool.status():
                instances.add([status.name], status.instances)
                in_flight.add([status.name], status.in_flight)
                up.add([status.name], 1 if status.state.value == "ready" else 0)
        yield instances
        yield in_flight
        yield up
        questions = Gauges(
            "mcpx_questions_pending", "Questions from upstream servers waiting for an answer."
        )
        pending = 0
        if host.broker is not None:
            pending = sum(1 for question in host.broker.questions() if question.pending)
        questions.add([], pending)
        yield questions
        tasks = Gauges("mcpx_tasks", "Tasks held, by state.", labels=["state"])
        for state, count in _count(task.status.value for task in host.tasks.tasks()).items():
            tasks.add([state], count)
        yield tasks
        sessions = Gauges(
            "mcpx_mcp_http_sessions", "Legacy (HTTP+SSE era) MCP sessions open on /mcp."
        )
        sessions.add([], len(self._http.mcp.sessions) if self._http.mcp is not None else 0)
        yield sessions
        streams = Gauges("mcpx_event_subscribers", "Event streams and other subscribers.")
        streams.add([], host.events.subscribers)
        yield streams
        queued = Gauges(
            "mcpx_event_queue", "Events waiting for slow event-stream consumers, all streams."
        )
        queued.add([], host.events.queued)
        yield queued


def _count(values: Iterable[str]) -> Mapping[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts
