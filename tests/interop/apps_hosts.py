"""
Raw JSON hosts for the MCP Apps leg (C{tests/interop/test_apps.py}): what a host of
either era sends and receives, byte for byte as JSON, with no SDK model in between that
could drop or reshape a field (C{_meta.ui} above all).

A transport carries one JSON-RPC request and returns its answer: L{StdioWire} over a
process's pipes (an official server's C{--stdio}, or C{mcpx serve}), L{HttpWire} over
Streamable HTTP (an official server's C{/mcp}, or mcpx's).  A host spells each request
for its era: L{LegacyHost} initializes once (2025-11-25), L{ModernHost} states its
revision, capabilities and identity in every request's C{_meta} (2026-07-28).  Both
declare MCP Apps (C{io.modelcontextprotocol/ui}) as a host that renders apps does.

Blocking I/O: the tests run these in a worker thread.
"""

from __future__ import annotations

import itertools
import json
import queue
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from mcpx.spec.apps import APP_MIME_TYPE, UI_EXTENSION

#: Seconds any one answer may take (generous: CI is loaded, and a server starts on first use).
ANSWER_TIMEOUT = 120.0
MODERN = "2026-07-28"
LEGACY = "2025-11-25"
#: What a host that renders apps declares.
UI_DECLARED: Mapping[str, Any] = {"extensions": {UI_EXTENSION: {"mimeTypes": [APP_MIME_TYPE]}}}
CLIENT_INFO = {"name": "mcpx-apps-test-host", "version": "1.0.0"}


class HostError(AssertionError):
    """A request answered with a JSON-RPC error, or not answered."""

    def __init__(self, method: str, answer: Any) -> None:
        super().__init__(f"{method} failed: {answer!r}")
        self.answer = answer


class Wire(Protocol):
    def exchange(
        self, message: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> Any: ...

    def notify(
        self, message: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> None: ...

    def close(self) -> None: ...


class StdioWire:
    """Newline-delimited JSON-RPC over a child process's stdin and stdout."""

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        *,
        answer: Callable[[Mapping[str, Any]], Any] | None = None,
    ) -> None:
        """
        @param answer: gives the result of each request the other side sends (an
            elicitation), which is answered with it; without it such requests are ignored.
        """
        self._answer = answer
        #: The requests the other side sent.
        self.asked: list[dict[str, Any]] = []
        self._process = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=None if env is None else dict(env),
        )
        self._lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self._lines.put(line)
        self._lines.put(b"")

    def _send(self, message: Mapping[str, Any]) -> None:
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(message).encode() + b"\n")
        self._process.stdin.flush()

    def exchange(self, message: Mapping[str, Any], headers: Mapping[str, str] | None = None) -> Any:
        self._send(message)
        while True:
            try:
                line = self._lines.get(timeout=ANSWER_TIMEOUT)
            except queue.Empty:
                raise HostError(str(message.get("method")), "no answer") from None
            if not line:
                raise HostError(str(message.get("method")), "the process closed its output")
            received = json.loads(line)
            if "method" in received and "id" in received:
                self.asked.append(received)
                if self._answer is not None:
                    result = self._answer(received)
                    self._send({"jsonrpc": "2.0", "id": received["id"], "result": result})
                continue
            if received.get("id") == message["id"] and "method" not in received:
                return received

    def notify(self, message: Mapping[str, Any], headers: Mapping[str, str] | None = None) -> None:
        self._send(message)

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


class HttpWire:
    """Streamable HTTP: each message one POST, answered as JSON or as an event stream."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.session: str | None = None

    def _post(self, message: Mapping[str, Any], headers: Mapping[str, str] | None) -> Any:
        sent = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        sent.update(headers or {})
        if self.session is not None:
            sent["Mcp-Session-Id"] = self.session
        request = urllib.request.Request(
            self.url, data=json.dumps(message).encode(), headers=sent, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=ANSWER_TIMEOUT) as response:
                session = response.headers.get("Mcp-Session-Id")
                if session:
                    self.session = session
                kind = response.headers.get("Content-Type", "")
                body = response.read()
        except urllib.error.HTTPError as e:
            return json.loads(e.read() or b"null")
        if not body:
            return None
        if kind.startswith("text/event-stream"):
            for line in body.decode().splitlines():
                if line.startswith("data:"):
                    data = json.loads(line[5:])
                    if data.get("id") == message.get("id") and "method" not in data:
                        return data
            return None
        return json.loads(body)

    def exchange(self, message: Mapping[str, Any], headers: Mapping[str, str] | None = None) -> Any:
        return self._post(message, headers)

    def notify(self, message: Mapping[str, Any], headers: Mapping[str, str] | None = None) -> None:
        self._post(message, headers)

    def close(self) -> None:
        pass


class Host:
    """A host of one era over one wire: lists, reads and calls, answers as JSON."""

    era = ""

    def __init__(self, wire: Wire) -> None:
        self.wire = wire
        self._ids = itertools.count(1)

    def request(self, method: str, params: Mapping[str, Any] | None = None) -> Any:
        """The result of C{method}; L{HostError} for an error."""
        answer = self.answer(method, params)
        if not isinstance(answer, dict) or "result" not in answer:
            raise HostError(method, answer)
        return answer["result"]

    def answer(self, method: str, params: Mapping[str, Any] | None = None) -> Any:
        raise NotImplementedError

    def listed(self, method: str, key: str) -> list[dict[str, Any]]:
        """Every item of a paginated list."""
        items: list[dict[str, Any]] = []
        cursor = None
        while True:
            result = self.request(method, {} if cursor is None else {"cursor": cursor})
            items += result[key]
            cursor = result.get("nextCursor")
            if cursor is None:
                return items

    def call(self, name: str, arguments: Mapping[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = self.request(
            "tools/call", {"name": name, "arguments": dict(arguments or {})}
        )
        return result

    def read(self, uri: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("resources/read", {"uri": uri})
        return result

    def close(self) -> None:
        self.wire.close()


class LegacyHost(Host):
    """A 2025-11-25 host: one C{initialize}, then plain requests."""

    era = LEGACY

    def __init__(self, wire: Wire, capabilities: Mapping[str, Any] = UI_DECLARED) -> None:
        super().__init__(wire)
        self.initialized = self.request(
            "initialize",
            {
                "protocolVersion": LEGACY,
                "capabilities": dict(capabilities),
                "clientInfo": CLIENT_INFO,
            },
        )
        self.wire.notify(
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"MCP-Protocol-Version": LEGACY},
        )

    def answer(self, method: str, params: Mapping[str, Any] | None = None) -> Any:
        message = {"jsonrpc": "2.0", "id": next(self._ids), "method": method}
        if params is not None:
            message["params"] = dict(params)
        headers = {} if method == "initialize" else {"MCP-Protocol-Version": LEGACY}
        return self.wire.exchange(message, headers)


class ModernHost(Host):
    """A 2026-07-28 host: no handshake; its revision and capabilities in every request."""

    era = MODERN

    def __init__(self, wire: Wire, capabilities: Mapping[str, Any] = UI_DECLARED) -> None:
        super().__init__(wire)
        self.capabilities = dict(capabilities)

    def answer(self, method: str, params: Mapping[str, Any] | None = None) -> Any:
        spelled = dict(params or {})
        spelled["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": self.capabilities,
            "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
        }
        message = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": spelled}
        headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
        name = spelled.get("name", spelled.get("uri"))
        if isinstance(name, str) and method in ("tools/call", "resources/read", "prompts/get"):
            headers["Mcp-Name"] = name
        return self.wire.exchange(message, headers)
