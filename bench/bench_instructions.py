"""
The instructions the daemon executes per C{/mcp} request, counted by valgrind (callgrind).

Instruction counts do not move with the machine's load, so two trees are compared by them
back to back (to about 1%) where calls per second on a shared machine move by a fifth:
bench/README.md's table of what each change of 2026-12-07 took off was made with this.

    .venv/bin/python bench/bench_instructions.py KIND [--repo DIR] [--requests N] [--vary]

A real C{mcpx daemon} of the checkout C{--repo} (its own C{.venv}; this one's by default),
on its unix socket in a state directory of its own, is run under
C{valgrind --tool=callgrind} with counting off; it gets one checked request and 300 more to
warm it, then counting is switched on (C{callgrind_control -i on}) for N more (1,000), all
one after another on one keep-alive connection, and off again.  The daemon's instructions
over those N, divided by N, are printed; the demo upstream (C{python -m mcpx.demo}) is
another process and not counted.

KIND:
  - C{list}: C{tools/list}, 2026-07-28 (a cached listing);
  - C{call}: C{tools/call} of C{mcpx_call} (the demo's C{echo}), 2026-07-28;
  - C{pass}: C{tools/call echo} passed through (C{MCPX_MCP_PASSTHROUGH=demo}), 2026-07-28;
  - C{passlegacy}: the same in a 2025-06-18 session;
  - C{serve}: C{tools/call echo} on the daemon's MCP socket (C{mcpx-mcp.sock}) as C{mcpx serve}
    speaks it: its hello (C{"passthrough": ["demo"]}), C{initialize} 2025-11-25, then one line
    a call (C{--vary} does not apply).

With C{--vary}, every request's head carries a header of its own (C{X-Vary: <id>}), as a
client whose heads differ each time: the lean path's memory of a connection's last head
(L{mcpx.daemon.lean_path.read_head}) never applies.  Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import bench_mcp
from bench_mcp import LEGACY, MODERN, open_legacy_session

REPO = Path(__file__).resolve().parent.parent
KINDS = ("list", "call", "pass", "passlegacy", "serve")
WARM = 300


class Connection:
    """One keep-alive HTTP/1.1 connection to the daemon's unix socket, one request at a time."""

    def __init__(self, path: str, deadline: float) -> None:
        while True:
            self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                self.socket.connect(path)
                break
            except OSError:
                self.socket.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        self._buffer = b""

    def exchange(self, data: bytes) -> bytes:
        """Send one request; its whole answer (a C{Content-Length} one), head included."""
        self.socket.sendall(data)
        while True:
            end = self._buffer.find(b"\r\n\r\n")
            if end >= 0:
                found = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", self._buffer[:end])
                if found is None:
                    raise SystemExit(f"an answer without Content-Length: {self._buffer[:300]!r}")
                total = end + 4 + int(found.group(1))
                if len(self._buffer) >= total:
                    answer, self._buffer = self._buffer[:total], self._buffer[total:]
                    return answer
            chunk = self.socket.recv(65536)
            if not chunk:
                raise SystemExit(f"the daemon closed the connection: {self._buffer[:300]!r}")
            self._buffer += chunk


class LineConnection(Connection):
    """One connection to the daemon's MCP socket, speaking newline-delimited JSON-RPC."""

    def exchange(self, data: bytes) -> bytes:
        """Send one line; the next line the daemon writes."""
        self.socket.sendall(data)
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line, self._buffer = self._buffer[: end + 1], self._buffer[end + 1 :]
                return line
            chunk = self.socket.recv(65536)
            if not chunk:
                raise SystemExit(f"the daemon closed the connection: {self._buffer[:300]!r}")
            self._buffer += chunk

    def open(self, state: Path) -> LineConnection:
        """The bridge's hello, C{initialize} and C{notifications/initialized}."""
        hello = {"mcpx": "serve", "pid": os.getpid(), "cwd": str(state), "version": "0"}
        hello["passthrough"] = ["demo"]
        self.socket.sendall(json.dumps(hello).encode() + b"\n")
        client = {"name": "bench_instructions", "version": "0"}
        params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client}
        initialize = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}
        answer = self.exchange(json.dumps(initialize).encode() + b"\n")
        if b'"result"' not in answer:
            raise SystemExit(f"initialize failed: {answer[:600]!r}")
        self.socket.sendall(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        return self


def line_request(request_id: int) -> bytes:
    """One C{tools/call echo} line, as a host sends it through C{mcpx serve}."""
    return (
        b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo",'
        b'"arguments":{"text":"x"}}}\n' % request_id
    )


def post(body: dict[str, Any], headers: dict[str, str], vary: bool) -> bytes:
    """The bytes of one C{POST /mcp} (L{bench_mcp.post}), with C{X-Vary} if C{vary}."""
    if vary:
        headers = {**headers, "X-Vary": str(body.get("id"))}
    return bench_mcp.post(body, headers)


def request(kind: str, request_id: int, session: str | None, vary: bool) -> bytes:
    """The C{kind} request numbered C{request_id}."""
    params: dict[str, Any]
    if kind == "list":
        method, params = "tools/list", {}
    elif kind == "call":
        arguments = {"server": "demo", "tool": "echo", "arguments": {"text": "x"}}
        method, params = "tools/call", {"name": "mcpx_call", "arguments": arguments}
    else:
        method, params = "tools/call", {"name": "echo", "arguments": {"text": "x"}}
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    if session is not None:
        return post(body, {"MCP-Protocol-Version": LEGACY, "Mcp-Session-Id": session}, vary)
    params["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "bench_instructions", "version": "0"},
    }
    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    if method == "tools/call":
        headers["Mcp-Name"] = params["name"]
    return post(body, headers, vary)


def counted(repo: Path, kind: str, count: int, vary: bool) -> float:
    """The daemon's instructions per request, over C{count} requests of C{kind}."""
    python = str(repo / ".venv" / "bin" / "python")
    state = Path(tempfile.mkdtemp(prefix="mcpx-instructions-"))
    try:
        config = state / "config.json"
        demo = {"command": python, "args": ["-m", "mcpx.demo"]}
        config.write_text(json.dumps({"servers": {"demo": demo}}))
        env = {k: v for k, v in os.environ.items() if not k.startswith("MCPX_")}
        env.update(MCPX_STATE_DIR=str(state), MCPX_CONFIG=str(config))
        if kind.startswith("pass"):
            env["MCPX_MCP_PASSTHROUGH"] = "demo"
        out = state / "callgrind.out"
        argv = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out}",
            python,
            "-m",
            "mcpx",
            "daemon",
            "--daemon-listen",
            "",
        ]
        with open(state / "daemon.log", "wb") as log:
            daemon = subprocess.Popen(
                argv, env=env, cwd=state, stdin=subprocess.DEVNULL, stdout=log, stderr=log
            )
            try:
                socket_path = str(state / "mcpx.sock")
                connection = Connection(socket_path, time.monotonic() + 300)
                session = open_legacy_session(socket_path) if kind == "passlegacy" else None

                def send(request_id: int) -> bytes:
                    return connection.exchange(request(kind, request_id, session, vary))

                if kind == "serve":
                    connection.socket.close()
                    lines = LineConnection(str(state / "mcpx-mcp.sock"), time.monotonic() + 60)
                    connection = lines.open(state)

                    def send(request_id: int) -> bytes:
                        return connection.exchange(line_request(request_id))

                first = send(1)
                status = first.split(b"\r\n", 1)[0]
                good = kind == "serve" or b" 200 " in status
                if not good or b'"result"' not in first or b'"isError":true' in first:
                    raise SystemExit(f"{kind}: not a result: {first[:600]!r}")
                for n in range(WARM):
                    send(2 + n)
                control = ["callgrind_control", "-i"]
                subprocess.run([*control, "on", str(daemon.pid)], check=True, capture_output=True)
                for n in range(count):
                    send(2 + WARM + n)
                subprocess.run([*control, "off", str(daemon.pid)], check=True, capture_output=True)
                connection.socket.close()
            finally:
                daemon.terminate()
                daemon.wait(timeout=60)
        total = 0
        for written in state.glob("callgrind.out*"):
            for line in written.read_text().splitlines():
                if line.startswith(("totals:", "summary:")):
                    total = max(total, int(line.split()[1]))
        if total == 0:
            raise SystemExit(f"no count from callgrind; the daemon's log:\n{log_text(state)}")
        return total / count
    finally:
        shutil.rmtree(state, ignore_errors=True)


def log_text(state: Path) -> str:
    return (state / "daemon.log").read_text("utf-8", "replace")[-3000:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout (this one)")
    parser.add_argument("--requests", type=int, default=1000, help="requests counted (1000)")
    parser.add_argument("--vary", action="store_true", help="a head of its own each request")
    options = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    per = counted(options.repo.resolve(), options.kind, options.requests, options.vary)
    vary = ", a head of its own each" if options.vary else ""
    print(
        f"{options.repo} {options.kind}: {per:,.0f} daemon instructions per request "
        f"({options.requests} requests{vary})"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
