"""
What OpenTelemetry tracing (L{mcpx.tracing}, C{trace.endpoint}) costs a pass-through
C{tools/call}.

Daemons of the same configuration (the bundled demo upstream passed through, tool
C{echo}) are started on loopback TCP one after another, alternately without tracing and
with C{trace.endpoint} pointed at a small OTLP/HTTP receiver this script runs on a
thread (it decodes each export with opentelemetry-proto and counts its spans, as a
collector would). Each daemon gets a 2025-06-18 session and C{--calls} calls one after
another on one keep-alive connection, after C{--warmup} calls not counted.

For each run: the p50 and mean latency of a call, and the daemon's CPU time per call
(its utime and stime from C{/proc/<pid>/stat}, which includes the SDK's export thread);
then the difference, on minus off, of the medians over the runs. The spans received
are counted so that "on" is seen to be on (four a call: the request, the policy, the
pool's wait and the upstream call; one more for the initialize).

    .venv/bin/python bench/bench_tracing.py [--calls N] [--runs R]

The figures are printed; nothing is asserted (this is not a timed test). Needs
mcpx[trace].
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

REPO = Path(__file__).resolve().parent.parent
REVISION = "2025-06-18"
_BANNER = re.compile(rb"listening on http://127\.0\.0\.1:(\d+)")


class Receiver(BaseHTTPRequestHandler):
    """C{POST /v1/traces}: decoded, its spans counted, answered as a collector does."""

    #: Keep-alive, as a collector's receiver does: the exporter sends on one connection.
    protocol_version = "HTTP/1.1"
    spans = 0
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        exported = ExportTraceServiceRequest()
        exported.ParseFromString(body)
        count = sum(
            len(scope.spans) for spans in exported.resource_spans for scope in spans.scope_spans
        )
        with Receiver.lock:
            Receiver.spans += count
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_daemon(endpoint: str | None) -> tuple[subprocess.Popen[bytes], int]:
    home = Path(tempfile.mkdtemp(prefix="mcpx-bench-trace-"))
    config = home / "config.json"
    demo = {"command": sys.executable, "args": ["-m", "mcpx.demo"]}
    config.write_text(json.dumps({"servers": {"demo": demo}}))
    env = {key: value for key, value in os.environ.items() if not key.startswith("MCPX_")}
    env.update(
        MCPX_CONFIG=str(config),
        MCPX_STATE_DIR=str(home / "state"),
        XDG_CONFIG_HOME=str(home),
        MCPX_MCP_PASSTHROUGH="demo",
    )
    if endpoint is not None:
        env["MCPX_TRACE_ENDPOINT"] = endpoint
    process = subprocess.Popen(
        [sys.executable, "-m", "mcpx", "daemon", "--daemon-listen", "tcp:0:interface=127.0.0.1"],
        env=env,
        cwd=str(REPO),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    seen = b""
    while (found := _BANNER.search(seen)) is None:
        line = process.stderr.readline()
        if not line:
            raise RuntimeError(f"the daemon did not start: {seen.decode()}")
        seen += line
    # Keep its stderr drained; say what the SDK complains of (a failed export).
    threading.Thread(target=_complaints, args=(process.stderr,), daemon=True).start()
    return process, int(found.group(1))


def _complaints(stream: Any) -> None:
    for line in stream:
        if b"export" in line.lower() and b"opentelemetry" in line.lower():
            print(f"  daemon: {line.decode(errors='replace').strip()[:200]}", flush=True)


def post(
    connection: http.client.HTTPConnection, body: dict[str, Any], headers: dict[str, str]
) -> http.client.HTTPResponse:
    connection.request("POST", "/mcp", json.dumps(body), headers)
    answer = connection.getresponse()
    answer.read()
    return answer


def one_run(endpoint: str | None, calls: int, warmup: int) -> dict[str, float]:
    process, port = start_daemon(endpoint)
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        headers = {
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        }
        answer = post(
            connection,
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": REVISION,
                    "capabilities": {},
                    "clientInfo": {"name": "bench_tracing", "version": "0"},
                },
            },
            headers,
        )
        session = answer.getheader("Mcp-Session-Id")
        assert session is not None, answer.status
        headers.update({"Mcp-Session-Id": session, "MCP-Protocol-Version": REVISION})
        post(connection, {"jsonrpc": "2.0", "method": "notifications/initialized"}, headers)
        bodies = [
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": n,
                    "method": "tools/call",
                    "params": {"name": "echo", "arguments": {"text": "hello"}},
                }
            )
            for n in range(1, warmup + calls + 1)
        ]
        for body in bodies[:warmup]:
            connection.request("POST", "/mcp", body, headers)
            connection.getresponse().read()
        latencies = []
        cpu_before = cpu_seconds(process.pid)
        for body in bodies[warmup:]:
            began = time.perf_counter()
            connection.request("POST", "/mcp", body, headers)
            answer = connection.getresponse()
            answer.read()
            latencies.append(time.perf_counter() - began)
            if answer.status != 200:
                raise RuntimeError(f"tools/call answered {answer.status}")
        # The export thread's share of the last calls comes within its schedule (5 s).
        time.sleep(6 if endpoint is not None else 0)
        cpu = cpu_seconds(process.pid) - cpu_before
        connection.close()
    finally:
        process.terminate()
        process.wait(30)
    return {
        "p50_ms": statistics.median(latencies) * 1000,
        "mean_ms": statistics.fmean(latencies) * 1000,
        "cpu_us": cpu / calls * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    receiver = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{receiver.server_address[1]}/v1/traces"
    found: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    print(f"{options.calls} sequential pass-through tools/call per run, {options.runs} runs each")
    print(f"{'tracing':<8} {'p50 ms':>8} {'mean ms':>8} {'daemon CPU µs/call':>19}")
    for _ in range(options.runs):
        for label, target in (("off", None), ("on", endpoint)):
            spans_before = Receiver.spans
            figures = one_run(target, options.calls, options.warmup)
            found[label].append(figures)
            spans = Receiver.spans - spans_before
            print(
                f"{label:<8} {figures['p50_ms']:>8.3f} {figures['mean_ms']:>8.3f} "
                f"{figures['cpu_us']:>19.1f}" + (f"   ({spans} spans received)" if target else "")
            )
    receiver.shutdown()
    print()
    for key, name in (("p50_ms", "p50 latency, ms"), ("cpu_us", "daemon CPU per call, µs")):
        off = statistics.median(run[key] for run in found["off"])
        on = statistics.median(run[key] for run in found["on"])
        print(f"{name}: off {off:.3f}, on {on:.3f}, on - off {on - off:+.3f}")


if __name__ == "__main__":
    main()
