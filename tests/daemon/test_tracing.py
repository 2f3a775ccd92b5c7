"""
OpenTelemetry traces of a real daemon (L{mcpx.tracing}): the span tree of a pass-through
call, of a call whose server asks the host a question and of a call made a task, read
through the SDK's in-memory exporter (C{tests/fixtures/traced_daemon.py}); no span
carrying an argument, a header or a secret; and spans sent by the real OTLP/HTTP
exporter reaching a collector on loopback.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import treq
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThread
from twisted.trial.unittest import SynchronousTestCase, TestCase
from twisted.web.resource import Resource
from twisted.web.server import Request, Site

from tests.questions.hosts import HttpSessionHost, SocketHost
from tests.questions.support import Daemon
from tests.support.daemons import daemon_environ
from tests.support.http import TestClient
from tests.support.processes import REPO, reactor

UPSTREAM = REPO / "tests" / "fixtures" / "traced_upstream.py"
TRACED_DAEMON = REPO / "tests" / "fixtures" / "traced_daemon.py"

#: In the arguments, the host's headers and _meta, and the server's environment: it must
#: never be in a span.
SECRET = "canary-Zq9x7-sekret-4ab1"

#: The host's own trace context (W3C's example): mcpx's spans are in this trace.
HOST_TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
HOST_SPAN_ID = "b7ad6b7169203331"
HOST_TRACEPARENT = f"00-{HOST_TRACE_ID}-{HOST_SPAN_ID}-01"

#: How long the spans of a request may take to be written.
SPANS_WAIT = 30.0


def servers(**policy: Any) -> dict[str, Any]:
    return {
        "traced": {
            "command": sys.executable,
            "args": [str(UPSTREAM)],
            "env": {"TRACED_API_KEY": SECRET},
            **policy,
        }
    }


class SecretHost(HttpSessionHost):
    """A 2025-11-25 host whose every request carries the secret in a header."""

    def _headers(self) -> dict[str, str]:
        headers = super()._headers()
        headers["X-Api-Key"] = SECRET
        return headers


Span = dict[str, Any]


def children(spans: list[Span], parent: Span) -> list[Span]:
    return [span for span in spans if span["parent_id"] == parent["span_id"]]


def named(spans: list[Span], name: str) -> list[Span]:
    return [span for span in spans if span["name"] == name]


def descends(spans: list[Span], span: Span, ancestor: Span) -> bool:
    by_id = {each["span_id"]: each for each in spans}
    parent = by_id.get(span["parent_id"])
    while parent is not None:
        if parent is ancestor:
            return True
        parent = by_id.get(parent["parent_id"])
    return False


def call_params(tool: str, **extra: Any) -> dict[str, Any]:
    """A tools/call's params carrying the secret as an argument and in its _meta."""
    return {
        "name": tool,
        "arguments": {"password": SECRET, "note": f"my key is {SECRET}"},
        "_meta": {"traceparent": HOST_TRACEPARENT, "dev.example/token": SECRET},
        **extra,
    }


class InMemoryTraceTests(TestCase):
    """A daemon whose spans go to the SDK's in-memory exporter."""

    timeout = 120

    async def start(self, **policy: Any) -> Daemon:
        folder = Path(tempfile.mkdtemp(prefix="mcpx-spans-"))
        self.spans_file = folder / "spans.json"
        daemon = Daemon(
            self,
            servers(**policy),
            passthrough=["traced"],
            settings={"MCPX_TEST_SPANS": str(self.spans_file)},
            program=[str(TRACED_DAEMON)],
        )
        await daemon.start()
        self.daemon = daemon
        return daemon

    async def host(self) -> tuple[SecretHost, dict[str, str]]:
        """A host with a session, and the pass-through names of the server's tools."""
        host: SecretHost = await deferToThread(SecretHost, self.daemon.port, "alice")
        self.addCleanup(deferToThread, host.close)
        listed = await deferToThread(lambda: host.response(host.request("tools/list", {})))
        names = {
            tool["name"].rsplit("_", 1)[-1]: tool["name"] for tool in listed["result"]["tools"]
        }
        return host, names

    async def spans_when(self, ready: Callable[[list[Span]], bool]) -> list[Span]:
        """The spans written, once C{ready} says they are all there."""
        deadline = reactor.seconds() + SPANS_WAIT
        spans: list[Span] = []
        while True:
            if self.spans_file.exists():
                spans = json.loads(self.spans_file.read_text())
                if ready(spans):
                    return spans
            if reactor.seconds() > deadline:
                self.fail(f"the spans never came: {json.dumps(spans, indent=1)}")
            await deferLater(reactor, 0.05, lambda: None)

    def assert_nothing_secret(self, spans: list[Span]) -> None:
        """No span's name or attribute holds the secret, an argument's name or a header."""
        for span in spans:
            shown = json.dumps([span["name"], span["attributes"], span["events"]])
            self.assertNotIn(SECRET, shown, span)
            self.assertNotIn("canary", shown, span)
            self.assertNotIn("password", shown, span)
            self.assertNotIn("X-Api-Key", shown, span)

    def root_of(self, spans: list[Span], name: str) -> Span:
        [root] = [span for span in named(spans, name) if span["kind"] == "SERVER"]
        # The host's traceparent is its parent.
        self.assertEqual(root["trace_id"], HOST_TRACE_ID)
        self.assertEqual(root["parent_id"], HOST_SPAN_ID)
        return root

    async def test_passthrough_call(self) -> None:
        """
        A pass-through C{tools/call}: the host's request is a span whose parent is the
        host's C{traceparent}, with the policy's check, the wait for an instance and the
        upstream call as children; the upstream is sent the upstream span's context.
        """
        await self.start()
        host, names = await self.host()
        answer = await deferToThread(
            lambda: host.response(host.request("tools/call", call_params(names["echo"])))
        )
        spans = await self.spans_when(
            lambda spans: bool(named(spans, f"tools/call {names['echo']}"))
        )
        root = self.root_of(spans, f"tools/call {names['echo']}")
        self.assertEqual(root["attributes"]["mcp.method.name"], "tools/call")
        self.assertEqual(root["attributes"]["mcp.protocol.version"], "2025-11-25")
        self.assertEqual(root["attributes"]["mcpx.outcome"], "ok")
        under = {span["name"]: span for span in children(spans, root)}
        self.assertEqual(set(under), {"mcpx.policy", "mcpx.pool.wait", "mcpx.upstream tools/call"})
        upstream = under["mcpx.upstream tools/call"]
        self.assertEqual(upstream["attributes"]["mcpx.server"], "traced")
        self.assertEqual(upstream["attributes"]["gen_ai.tool.name"], "echo")
        self.assertEqual(upstream["attributes"]["mcpx.outcome"], "ok")
        self.assertEqual(under["mcpx.policy"]["attributes"]["mcpx.outcome"], "ok")
        self.assertLessEqual(under["mcpx.pool.wait"]["end"], upstream["start"])
        # The server was told mcpx's upstream span, not the host's.
        seen = json.loads(answer["result"]["content"][0]["text"])
        self.assertEqual(seen["traceparent"], f"00-{HOST_TRACE_ID}-{upstream['span_id']}-01")
        self.assert_nothing_secret(spans)

    async def test_host_text_is_not_a_name(self) -> None:
        """
        What a host writes where a method, tool name or revision goes is recorded only
        when it is one: an unknown method, a tool "name" of free text and a made-up
        revision leave the secret they carry out of every span (on the socket of
        C{mcpx serve}, where every request reaches the server's dispatch).
        """
        await self.start()
        host: SocketHost = await deferToThread(
            SocketHost, str(self.daemon.state_dir / "mcpx-mcp.sock"), "bob", passthrough=["traced"]
        )
        self.addCleanup(deferToThread, host.close)
        refused = await deferToThread(
            lambda: host.response(host.request(f"x/{SECRET}", {"_meta": {"traceparent": "no"}}))
        )
        self.assertEqual(refused["error"]["code"], -32601)
        refused = await deferToThread(
            lambda: host.response(
                host.request(
                    "tools/call",
                    {
                        "name": f"my key is {SECRET}",
                        "arguments": {},
                        "_meta": {"io.modelcontextprotocol/protocolVersion": SECRET},
                    },
                )
            )
        )
        self.assertIn("error", refused)
        spans = await self.spans_when(lambda spans: len(named(spans, "tools/call")) == 1)
        [unknown] = named(spans, "unknown")
        self.assertEqual(unknown["attributes"]["mcp.method.name"], "unknown")
        self.assertEqual(unknown["attributes"]["rpc.jsonrpc.error_code"], -32601)
        [call] = named(spans, "tools/call")
        self.assertNotIn("gen_ai.tool.name", call["attributes"])
        self.assertEqual(call["attributes"]["mcp.protocol.version"], "2025-11-25")
        self.assertEqual(call["status"], "ERROR")
        self.assert_nothing_secret(spans)

    async def test_question(self) -> None:
        """
        A call its policy has confirmed and whose server then asks the host a question:
        the confirmation is a span under the policy's, the server's question one under
        the upstream call, each from the asking to the host's answer, with its action.
        """
        await self.start(tools={"confirm": ["ask"]})
        host, names = await self.host()
        host.answering = False
        call = await deferToThread(host.request, "tools/call", call_params(names["ask"]))
        await deferToThread(host.wait_for, lambda: len(host.asked) == 1)
        host.answer(host.asked[0], {"action": "accept", "content": {"confirm": True}})
        await deferToThread(host.wait_for, lambda: len(host.asked) == 2)
        host.answer(host.asked[1])
        answer = await deferToThread(host.response, call)
        self.assertIn("the user said accept", json.dumps(answer))
        spans = await self.spans_when(
            lambda spans: bool(named(spans, f"tools/call {names['ask']}"))
        )
        root = self.root_of(spans, f"tools/call {names['ask']}")
        [policy] = named(spans, "mcpx.policy")
        self.assertEqual(policy["parent_id"], root["span_id"])
        [confirmation] = named(spans, "mcpx.question confirmation")
        self.assertEqual(confirmation["parent_id"], policy["span_id"])
        self.assertEqual(confirmation["attributes"]["mcpx.question.action"], "accept")
        [upstream] = named(spans, "mcpx.upstream tools/call")
        self.assertEqual(upstream["parent_id"], root["span_id"])
        self.assertLessEqual(confirmation["end"], upstream["start"])
        [question] = named(spans, "mcpx.question elicitation/create")
        self.assertEqual(question["parent_id"], upstream["span_id"])
        self.assertEqual(question["attributes"]["mcpx.server"], "traced")
        self.assertEqual(question["attributes"]["mcpx.question.action"], "accept")
        # Its length is the host's: from the asking to the answer, within the call.
        self.assertLessEqual(upstream["start"], question["start"])
        self.assertLessEqual(question["end"], upstream["end"])
        self.assert_nothing_secret(spans)

    async def test_task(self) -> None:
        """
        A 2025-11-25 call made a task at once: its promotion is a span of the host's
        request, and the upstream call the task goes on to make is under it.
        """
        await self.start()
        host, names = await self.host()
        created = await deferToThread(
            lambda: host.response(
                host.request("tools/call", call_params(names["echo"], task={"ttl": 60000}))
            )
        )
        self.assertIn("task", created["result"], created)

        def upstream_done(spans: list[Span]) -> bool:
            return bool(named(spans, "mcpx.upstream tools/call")) and bool(
                named(spans, f"tools/call {names['echo']}")
            )

        spans = await self.spans_when(upstream_done)
        root = self.root_of(spans, f"tools/call {names['echo']}")
        [promotion] = named(spans, "mcpx.task.promotion")
        self.assertEqual(promotion["parent_id"], root["span_id"])
        self.assertEqual(promotion["attributes"]["mcpx.task.kind"], "core")
        [upstream] = named(spans, "mcpx.upstream tools/call")
        self.assertTrue(descends(spans, upstream, promotion), spans)
        self.assertEqual(upstream["trace_id"], HOST_TRACE_ID)
        self.assert_nothing_secret(spans)

    async def test_serve_socket(self) -> None:
        """
        A call on the MCP socket C{mcpx serve} bridges to is traced as one on C{/mcp}:
        the host's request, then the policy, the wait and the upstream call.
        """
        await self.start()
        host: SocketHost = await deferToThread(
            SocketHost, str(self.daemon.state_dir / "mcpx-mcp.sock"), "bob", passthrough=["traced"]
        )
        self.addCleanup(deferToThread, host.close)
        await deferToThread(lambda: host.response(host.request("tools/call", call_params("echo"))))
        spans = await self.spans_when(lambda spans: bool(named(spans, "tools/call echo")))
        root = self.root_of(spans, "tools/call echo")
        self.assertEqual(
            {span["name"] for span in children(spans, root)},
            {"mcpx.policy", "mcpx.pool.wait", "mcpx.upstream tools/call"},
        )
        self.assert_nothing_secret(spans)

    async def test_v1_call(self) -> None:
        """
        C{POST /v1/call} is a span whose parent is the C{traceparent} header, with the
        same children; a call the server refuses says so in the spans, by code alone.
        """
        await self.start()
        client = TestClient(reactor, unix_socket=self.daemon.socket)
        self.addCleanup(client.close)
        headers: dict[bytes | str, bytes | str] = {
            "Content-Type": "application/json",
            "traceparent": HOST_TRACEPARENT,
            "X-Api-Key": SECRET,
        }
        for tool in ("echo", "missing"):
            body = {"server": "traced", "tool": tool, "arguments": {"password": SECRET}}
            response = await client.http.post(
                "http://mcpx/v1/call", data=json.dumps(body).encode(), headers=headers
            )
            await treq.content(response)
            self.assertEqual(
                response.code,
                200 if tool == "echo" else 502,
                f"{tool}: {self.daemon.log()[-3000:]}",
            )

        def both(spans: list[Span]) -> bool:
            return len(named(spans, "POST /v1/call")) == 2

        spans = await self.spans_when(both)
        ok, refused = sorted(named(spans, "POST /v1/call"), key=lambda span: span["start"])
        for root in (ok, refused):
            self.assertEqual(root["kind"], "SERVER")
            self.assertEqual(root["trace_id"], HOST_TRACE_ID)
            self.assertEqual(root["parent_id"], HOST_SPAN_ID)
            self.assertEqual(root["attributes"]["mcpx.op"], "call_tool")
        self.assertEqual(ok["attributes"]["mcpx.outcome"], "ok")
        self.assertEqual(ok["attributes"]["http.response.status_code"], 200)
        self.assertEqual(
            {span["name"] for span in children(spans, ok)},
            {"mcpx.policy", "mcpx.pool.wait", "mcpx.upstream tools/call"},
        )
        self.assertEqual(refused["attributes"]["mcpx.outcome"], "error")
        [failed] = [
            span for span in children(spans, refused) if span["name"] == "mcpx.upstream tools/call"
        ]
        self.assertEqual(failed["status"], "ERROR")
        self.assertEqual(failed["attributes"]["error.type"], "RpcError")
        self.assertEqual(failed["attributes"]["rpc.jsonrpc.error_code"], -32601)
        self.assert_nothing_secret(spans)


class Collector(Resource):
    """An OTLP/HTTP collector's traces endpoint: each request's spans, decoded, kept."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.received: list[ExportTraceServiceRequest] = []

    def render_POST(self, request: Request) -> bytes:
        assert request.content is not None
        body = request.content.read()
        if request.getHeader("content-encoding") == "gzip":
            body = gzip.decompress(body)
        if request.path != b"/v1/traces":
            request.setResponseCode(404)
            return b""
        exported = ExportTraceServiceRequest()
        exported.ParseFromString(body)
        self.received.append(exported)
        request.setHeader(b"content-type", b"application/x-protobuf")
        return bytes(ExportTraceServiceResponse().SerializeToString())

    def spans(self) -> list[tuple[dict[str, Any], Any]]:
        """Every span received, with its resource's attributes."""
        found = []
        for exported in self.received:
            for resource_spans in exported.resource_spans:
                resource = {
                    attribute.key: attribute.value.string_value
                    for attribute in resource_spans.resource.attributes
                }
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        found.append((resource, span))
        return found


class OtlpCollectorTests(TestCase):
    timeout = 120

    async def test_spans_reach_a_collector(self) -> None:
        """
        A daemon started with C{trace.endpoint} sends its spans with the OTLP/HTTP
        exporter to the collector there: a pass-through call's tree arrives, under the
        host's trace, named by C{trace.serviceName}.
        """
        collector = Collector()
        port = reactor.listenTCP(0, Site(collector), interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        endpoint = f"http://127.0.0.1:{port.getHost().port}/v1/traces"
        daemon = Daemon(
            self,
            servers(),
            passthrough=["traced"],
            settings={
                "MCPX_TRACE_ENDPOINT": endpoint,
                "MCPX_TRACE_SERVICE_NAME": "mcpx-e2e",
                # The batch goes after 100 ms rather than the SDK's 5 s.
                "OTEL_BSP_SCHEDULE_DELAY": "100",
            },
        )
        await daemon.start()
        host: SecretHost = await deferToThread(SecretHost, daemon.port, "alice")
        self.addCleanup(deferToThread, host.close)
        await deferToThread(lambda: host.response(host.request("tools/call", call_params("echo"))))
        deadline = reactor.seconds() + SPANS_WAIT

        def names() -> set[str]:
            return {span.name for _, span in collector.spans()}

        while "mcpx.upstream tools/call" not in names() or "tools/call echo" not in names():
            if reactor.seconds() > deadline:
                self.fail(f"no spans reached the collector: {names()}\n{daemon.log()[-3000:]}")
            await deferLater(reactor, 0.05, lambda: None)
        received = collector.spans()
        self.assertEqual({resource["service.name"] for resource, _ in received}, {"mcpx-e2e"})
        [root] = [span for _, span in received if span.name == "tools/call echo"]
        [upstream] = [span for _, span in received if span.name == "mcpx.upstream tools/call"]
        self.assertEqual(root.trace_id.hex(), HOST_TRACE_ID)
        self.assertEqual(root.parent_span_id.hex(), HOST_SPAN_ID)
        self.assertEqual(upstream.parent_span_id, root.span_id)
        for _, span in received:
            self.assertNotIn(SECRET, str(span))
        # A clean stop still sends what is queued, and the daemon says it traced.
        self.assertEqual(await daemon.stop(), 0)
        self.assertIn("tracing: spans go to", daemon.log())


class EndpointSettingTests(SynchronousTestCase):
    def test_not_a_url(self) -> None:
        """
        C{trace.endpoint} that is not an C{http(s)} URL stops C{mcpx daemon} at once with
        one line that says so, and exit status 2, as any bad setting does.
        """
        env = daemon_environ(tempfile.mkdtemp(prefix="mcpx-s-"), tempfile.mkdtemp(prefix="mcpx-c-"))
        env["MCPX_TRACE_ENDPOINT"] = "collector:4318"
        done = subprocess.run(
            [sys.executable, "-m", "mcpx", "daemon", "--daemon-listen", ""],
            env=env,
            cwd=str(REPO),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertIn("trace.endpoint must be an OTLP/HTTP URL", done.stderr)
        self.assertNotIn("Traceback", done.stderr)
