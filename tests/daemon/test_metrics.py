"""
C{/metrics}: a real pool on scripted upstreams and the daemon's site, scraped over raw
HTTP and read back with Prometheus's own text-format parser.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase, TestCase

from mcpx.daemon.metrics import OTHER_TOOLS, Metrics, RouteTemplates
from mcpx.daemon.site import DaemonSite, SiteOptions
from mcpx.ops.events import EventBus
from mcpx.ops.table import OPS
from mcpx.pool.pool import Pool
from mcpx.tasks.task import TaskStatus
from mcpx.wire.errors import RpcError
from tests.daemon.fake_pool import daemon_http
from tests.daemon.test_gate import Answer
from tests.pool.fakes import FakeConnector, FakeUpstream, servers, stdio
from tests.support.daemons import daemon_environ, probe, start_daemon
from tests.support.processes import REPO, free_tcp_port

LOOPBACK = IPv4Address("TCP", "127.0.0.1", 8899)
CLIENT = IPv4Address("TCP", "127.0.0.1", 40000)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    """Every sample of a scrape, keyed by name and sorted labels; fails on malformed text."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def labels(**given: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(given.items()))


class MetricsCase(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1000)
        self.connector = FakeConnector(self.clock)
        self.events = EventBus(self.clock)
        self.metrics = Metrics(
            RouteTemplates((op.path for op in OPS), exact=("/", "/mcp", "/metrics"))
        )
        self.pool = Pool(
            servers=servers(stdio("notes"), stdio("files")),
            connector=self.connector,
            clock=self.clock,
            call_timeout=30,
            idle_timeout=60,
            publish=self.metrics.published(self.events.publish),
        )
        self.pool.on_call = lambda server, tool, seconds, outcome, principal: (
            self.metrics.call_finished(server, tool, seconds, outcome)
        )
        self.pool.startService()
        self.addCleanup(self.pool.stopService)
        self.http = daemon_http(
            clock=self.clock, pid=1, pool=self.pool, events=self.events, metrics=self.metrics
        )
        self.metrics.watch(self.http)
        self.site = DaemonSite(self.http.resource(), self.clock, SiteOptions(metrics=self.metrics))

    def get(self, path: str) -> Answer:
        channel = self.site.buildProtocol(CLIENT)
        transport = StringTransport(hostAddress=LOOPBACK, peerAddress=CLIENT)
        channel.makeConnection(transport)
        self.addCleanup(channel.connectionLost, None)
        request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:8899\r\n\r\n"
        channel.dataReceived(request.encode("ascii"))
        return Answer(transport.value())

    def scrape(self) -> Samples:
        answer = self.get("/metrics")
        self.assertEqual(answer.status, 200)
        self.assertTrue(answer.headers["content-type"].startswith("text/plain; version="))
        return parse(answer.body.decode("utf-8"))

    def call(self, server: str, tool: str, **arguments: Any) -> Deferred[dict[str, Any]]:
        return Deferred.fromCoroutine(self.pool.call_tool(server, tool, arguments))

    def answer_with(self, answer: Any) -> None:
        self.connector.answers["tools/call"] = answer


class CallMetricsTests(MetricsCase):
    def test_calls_errors_and_latency_per_server_and_tool(self) -> None:
        """
        Two answered calls, one answered with isError and one refused by the server are
        counted by outcome; errors and the latency histogram are per server and tool.
        """
        self.successResultOf(self.call("notes", "echo", text="a"))
        self.successResultOf(self.call("notes", "echo", text="b"))

        def is_error(upstream: FakeUpstream, params: Mapping[str, Any]) -> Any:
            return {"content": [], "isError": True}

        self.answer_with(is_error)
        self.successResultOf(self.call("notes", "echo"))

        def refuse(upstream: FakeUpstream, params: Mapping[str, Any]) -> Any:
            raise RpcError.invalid_params("no such tool")

        self.answer_with(refuse)
        self.failureResultOf(self.call("files", "read"), RpcError)
        samples = self.scrape()
        self.assertEqual(
            samples[("mcpx_calls_total", labels(server="notes", tool="echo", outcome="ok"))], 2
        )
        self.assertEqual(
            samples[
                ("mcpx_calls_total", labels(server="notes", tool="echo", outcome="tool_error"))
            ],
            1,
        )
        self.assertEqual(
            samples[("mcpx_calls_total", labels(server="files", tool="read", outcome="error"))], 1
        )
        self.assertEqual(
            samples[("mcpx_call_errors_total", labels(server="notes", tool="echo"))], 1
        )
        self.assertEqual(
            samples[("mcpx_call_errors_total", labels(server="files", tool="read"))], 1
        )
        self.assertEqual(
            samples[("mcpx_call_duration_seconds_count", labels(server="notes", tool="echo"))], 3
        )
        self.assertEqual(
            samples[
                (
                    "mcpx_call_duration_seconds_bucket",
                    labels(server="notes", tool="echo", le="+Inf"),
                )
            ],
            3,
        )

    def test_latency_buckets_on_and_between_bounds(self) -> None:
        """
        A call's duration is counted in the first bucket whose bound is at least it (a
        duration on a bound in that bound's bucket), past the last bound in +Inf alone;
        the exposition's lines are these, in this order.
        """
        for seconds in (0.0005, 0.001, 0.0012, 0.0025, 7.0, 60, 61.5, 1000):
            self.metrics.call_finished("notes", "echo", seconds, "ok")
        text = self.get("/metrics").body.decode("utf-8")
        shown = [
            line
            for line in text.splitlines()
            if line.startswith("mcpx_call_duration_seconds") and "_created" not in line
        ]
        series = 'server="notes",tool="echo"'
        counts = (2, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 6)
        bounds = ["0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5"]
        bounds += ["1.0", "2.5", "5.0", "10.0", "30.0", "60.0"]
        self.assertEqual(
            shown,
            [
                *(
                    f'mcpx_call_duration_seconds_bucket{{le="{bound}",{series}}} {count}.0'
                    for bound, count in zip(bounds, counts, strict=True)
                ),
                f'mcpx_call_duration_seconds_bucket{{le="+Inf",{series}}} 8.0',
                f"mcpx_call_duration_seconds_count{{{series}}} 8.0",
                f"mcpx_call_duration_seconds_sum{{{series}}} 1128.5052",
            ],
        )

    def test_unknown_server_makes_no_series(self) -> None:
        """A call to a server nobody configured is refused without adding a series."""
        self.failureResultOf(self.call("nobody", "echo"))
        self.assertFalse([key for key in self.scrape() if ("server", "nobody") in key[1]])

    def test_tool_names_are_bounded(self) -> None:
        """Past the bound on (server, tool) pairs, further tools are counted as _other."""
        self.metrics.max_tools = 2
        for tool in ("one", "two", "three", "four"):
            self.successResultOf(self.call("notes", tool))
        samples = self.scrape()
        tools = {dict(key[1]).get("tool") for key in samples if key[0] == "mcpx_calls_total"}
        self.assertEqual(tools, {"one", "two", OTHER_TOOLS})
        other = labels(server="notes", tool=OTHER_TOOLS, outcome="ok")
        self.assertEqual(samples[("mcpx_calls_total", other)], 2)

    def test_in_flight_and_instances(self) -> None:
        """A held call shows as one in flight on one instance; when it ends, none in flight."""
        self.connector.holding.add("tools/call")
        held = self.call("notes", "echo")
        samples = self.scrape()
        self.assertEqual(samples[("mcpx_calls_in_flight", labels(server="notes"))], 1)
        self.assertEqual(samples[("mcpx_server_instances", labels(server="notes"))], 1)
        self.assertEqual(samples[("mcpx_server_instances", labels(server="files"))], 0)
        self.assertEqual(samples[("mcpx_server_ready", labels(server="notes"))], 1)
        self.connector.started("notes")[0].release("tools/call", {"content": []})
        self.successResultOf(held)
        self.assertEqual(self.scrape()[("mcpx_calls_in_flight", labels(server="notes"))], 0)


class ServerMetricsTests(MetricsCase):
    def test_starts_and_crashes_per_server(self) -> None:
        """A start, a crash and the start after its back-off are counted for that server."""
        self.successResultOf(self.call("notes", "echo"))
        self.connector.started("notes")[0].crash()
        self.clock.advance(5)
        self.successResultOf(self.call("notes", "echo"))
        samples = self.scrape()
        self.assertEqual(samples[("mcpx_server_starts_total", labels(server="notes"))], 2)
        self.assertEqual(samples[("mcpx_server_crashes_total", labels(server="notes"))], 1)

    def test_restart_is_counted(self) -> None:
        """A restart asked for is counted for its server."""
        self.successResultOf(self.call("files", "echo"))
        self.successResultOf(Deferred.fromCoroutine(self.pool.restart("files")))
        samples = self.scrape()
        self.assertEqual(samples[("mcpx_server_restarts_total", labels(server="files"))], 1)

    def test_sampling_outcomes_per_server(self) -> None:
        """Sampling requests are counted by server and by how each ended."""
        publish = self.metrics.published(self.events.publish)
        publish("sampling.requested", "notes", mode="allow")
        publish("sampling.answered", "notes", max_tokens=10)
        publish("sampling.answered", "notes", max_tokens=10)
        publish("sampling.refused", "notes", outcome="sampling.includeContext")
        publish("sampling.failed", "files", reason="RpcError")
        samples = self.scrape()
        count = "mcpx_sampling_requests_total"
        self.assertEqual(samples[(count, labels(outcome="answered", server="notes"))], 2)
        self.assertEqual(
            samples[(count, labels(outcome="sampling.includeContext", server="notes"))], 1
        )
        self.assertEqual(samples[(count, labels(outcome="failed", server="files"))], 1)


class HoldingsTests(MetricsCase):
    def test_tasks_by_state_and_event_streams(self) -> None:
        """Tasks are counted by state; event subscribers and the events they queue show."""
        task = self.http.host.tasks.open(None, server="notes", tool="echo")
        self.http.host.tasks.mark(task, TaskStatus.INPUT_REQUIRED)
        self.http.host.tasks.open(None, server="notes", tool="echo")
        slow = self.events.subscribe(lambda event: None)
        slow.pause()
        self.events.publish("warning", None, message="one")
        self.events.publish("warning", None, message="two")
        samples = self.scrape()
        self.assertEqual(samples[("mcpx_tasks", labels(state="input_required"))], 1)
        self.assertEqual(samples[("mcpx_tasks", labels(state="working"))], 1)
        self.assertEqual(samples[("mcpx_event_subscribers", ())], 1)
        self.assertEqual(samples[("mcpx_event_queue", ())], 2)
        self.assertEqual(samples[("mcpx_questions_pending", ())], 0)
        self.assertEqual(samples[("mcpx_mcp_http_sessions", ())], 0)


class HttpMetricsTests(MetricsCase):
    def test_requests_by_route_template_and_status(self) -> None:
        """
        Requests are counted by route template, not by the path asked, so made-up paths
        share one label value.
        """
        self.get("/health")
        self.get("/health")
        self.get("/v1/tools/notes/echo")
        self.get("/v1/tools/files/read")
        self.get("/made/up/1")
        self.get("/made/up/2")
        samples = self.scrape()
        count = "mcpx_http_requests_total"
        self.assertEqual(samples[(count, labels(route="/health", status="200"))], 2)
        template = "/v1/tools/{server}/{tool}"
        by_template = [key for key in samples if key[0] == count and ("route", template) in key[1]]
        self.assertEqual(sum(samples[key] for key in by_template), 2)
        self.assertEqual(samples[(count, labels(route="other", status="404"))], 2)
        routes = {dict(key[1])["route"] for key in samples if key[0] == count}
        self.assertFalse({"/made/up/1", "/v1/tools/notes/echo"} & routes)

    def test_requests_counted_alike_however_often(self) -> None:
        """
        A route's own path, a path with values in it, a made-up one and one whose bytes
        are not UTF-8 are counted by template and status however often they come: the
        exposition's lines are these.
        """
        for _ in range(3):
            for path, status in (
                (b"/mcp", 200),
                (b"/mcp", 400),
                (b"/v1/tools/notes/echo", 200),
                (b"/v1/tools/files/read", 404),
                (b"/made/up", 404),
                (b"/mcp\xff", 404),
                (b"other", 404),
            ):
                self.metrics.request_finished(SimpleNamespace(path=path, code=status))
        text = self.metrics.render().decode("utf-8")
        shown = [line for line in text.splitlines() if line.startswith("mcpx_http_requests_total")]
        self.assertEqual(
            shown,
            [
                'mcpx_http_requests_total{route="/mcp",status="200"} 3.0',
                'mcpx_http_requests_total{route="/mcp",status="400"} 3.0',
                'mcpx_http_requests_total{route="/v1/tools/{server}/{tool}",status="200"} 3.0',
                'mcpx_http_requests_total{route="/v1/tools/{server}/{tool}",status="404"} 3.0',
                'mcpx_http_requests_total{route="other",status="404"} 9.0',
            ],
        )


class DaemonCallBooksTests(TestCase):
    """
    A real C{mcpx daemon}: each call it makes to a server is counted in C{/metrics} and
    listed at C{/v1/calls} alike, by what the daemon wires its pool's C{on_call} to.
    """

    timeout = 90

    async def test_each_call_is_counted_and_listed(self) -> None:
        """
        Two answered calls and one answered with isError, made over C{/v1/call}: their
        series in C{/metrics} (calls by outcome, errors, latency) and C{/v1/calls}, newest
        first, say so.
        """
        state_dir = tempfile.mkdtemp(prefix="mcpx-books-")
        self.addCleanup(shutil.rmtree, state_dir, True)
        config_home = tempfile.mkdtemp(prefix="mcpx-cfg-")
        self.addCleanup(shutil.rmtree, config_home, True)
        config = Path(config_home) / "servers.json"
        demo = {"command": sys.executable, "args": ["-m", "mcpx.demo"]}
        config.write_text(json.dumps({"servers": {"demo": demo}}))
        env = daemon_environ(state_dir, config_home)
        env["MCPX_CONFIG"] = str(config)
        port = free_tcp_port()
        child = await start_daemon(
            self, env, port, ready=rb"listening on unix socket", cwd=str(REPO)
        )
        await child.wait_for(rb"listening on http://")

        def request(method: str, path: str, body: Any = None) -> dict[str, Any]:
            sent = {"port": port, "method": method, "path": path}
            headers = {"Host": f"127.0.0.1:{port}", "Content-Type": "application/json"}
            return {**sent, "headers": headers, "body": body}

        def call(tool: str, **arguments: Any) -> dict[str, Any]:
            return request("POST", "/v1/call", {"server": "demo", "tool": tool, **arguments})

        *called, scraped, listed = await probe(
            self,
            env,
            [
                call("echo", arguments={"text": "a"}),
                call("echo", arguments={"text": "b"}),
                call("fail"),
                request("GET", "/metrics"),
                request("GET", "/v1/calls"),
            ],
        )
        self.assertEqual([answer["status"] for answer in called], [200, 200, 200], called)
        self.assertEqual(scraped["status"], 200, scraped)
        samples = parse(scraped["body"])
        echo, fail = labels(server="demo", tool="echo"), labels(server="demo", tool="fail")
        self.assertEqual(
            samples[("mcpx_calls_total", labels(server="demo", tool="echo", outcome="ok"))], 2
        )
        self.assertEqual(
            samples[("mcpx_calls_total", labels(server="demo", tool="fail", outcome="tool_error"))],
            1,
        )
        self.assertNotIn(("mcpx_call_errors_total", echo), samples)
        self.assertEqual(samples[("mcpx_call_errors_total", fail)], 1)
        self.assertEqual(samples[("mcpx_call_duration_seconds_count", echo)], 2)
        self.assertEqual(samples[("mcpx_call_duration_seconds_count", fail)], 1)
        self.assertEqual(listed["status"], 200, listed)
        calls = json.loads(listed["body"])["calls"]
        self.assertEqual(
            [(c["server"], c["tool"], c["outcome"]) for c in calls],
            [("demo", "fail", "tool_error"), ("demo", "echo", "ok"), ("demo", "echo", "ok")],
        )
