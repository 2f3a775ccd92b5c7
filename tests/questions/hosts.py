"""
Hand-driven MCP hosts for the question relay's concurrency tests: each speaks JSON-RPC
itself, so a test decides exactly when it calls, cancels, disconnects and answers, and
sees every message mcpx sends it (the questions it is asked, the cancels that withdraw
them).

A L{SocketHost} is a 2025-11-25 host on the daemon's MCP socket (what C{mcpx serve}
bridges to); an L{HttpSessionHost} a 2025-11-25 Streamable HTTP session on C{/mcp}.
Both are blocking and thread-safe: a test runs their conversations in worker threads.
Each answers every elicitation it is asked with its own name, unless told to hold.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import json
import os
import socket
import threading
from typing import Any

#: How long a host waits for any one answer before the test fails.
WAIT = 30.0


class HostError(AssertionError):
    """A host did not get what it waited for."""


class _Host:
    """What both transports share: the ids, the waiters, what was seen."""

    def __init__(
        self, name: str, capabilities: dict[str, Any] | None, roots: list[dict[str, str]]
    ) -> None:
        self.name = name
        self.capabilities = {"elicitation": {}} if capabilities is None else capabilities
        self.ids = itertools.count(1)
        self.lock = threading.Lock()
        self.responses: dict[Any, dict[str, Any]] = {}
        self.arrived = threading.Condition(self.lock)
        #: Every request mcpx sent this host (its questions), in order.
        self.asked: list[dict[str, Any]] = []
        #: The ids of mcpx's requests that mcpx withdrew (notifications/cancelled).
        self.withdrawn: list[Any] = []
        #: Every notification mcpx sent this host.
        self.notifications: list[dict[str, Any]] = []
        #: Whether to answer questions at once (else they wait for L{answer}).
        self.answering = True
        #: What this host answers a roots/list with.
        self.roots = list(roots)

    def reply_for(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("method") == "roots/list":
            return {"roots": list(self.roots)}
        return {"action": "accept", "content": {"name": self.name}}

    def received(self, message: dict[str, Any]) -> None:
        """One message from mcpx."""
        if "method" in message and "id" in message:
            with self.lock:
                self.asked.append(message)
                self.arrived.notify_all()
            if self.answering:
                self.answer(message)
            return
        if "method" in message:
            with self.lock:
                self.notifications.append(message)
                if message["method"] == "notifications/cancelled":
                    self.withdrawn.append((message.get("params") or {}).get("requestId"))
                self.arrived.notify_all()
            return
        with self.lock:
            self.responses[message.get("id")] = message
            self.arrived.notify_all()

    def answer(self, request: dict[str, Any], result: dict[str, Any] | None = None) -> None:
        self.send(
            {"jsonrpc": "2.0", "id": request["id"], "result": result or self.reply_for(request)}
        )

    def wait_for(self, what: Any, timeout: float = WAIT) -> None:
        """Wait until C{what()} is true (called under the lock)."""
        with self.lock:
            if not self.arrived.wait_for(what, timeout):
                raise HostError(f"{self.name}: waited {timeout}s in vain")

    def response(self, request_id: Any, timeout: float = WAIT) -> dict[str, Any]:
        self.wait_for(lambda: request_id in self.responses, timeout)
        with self.lock:
            return self.responses[request_id]

    def request(self, method: str, params: dict[str, Any]) -> Any:
        request_id = f"{self.name}-{next(self.ids)}"
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return request_id

    def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        """Start a tools/call; its id."""
        return self.request("tools/call", {"name": tool, "arguments": arguments})

    def cancel(self, request_id: Any) -> None:
        self.send(
            {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": request_id, "reason": "the user gave up"},
            }
        )

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self.send(message)

    def initialize(self) -> None:
        first = self.request(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": self.capabilities,
                "clientInfo": {"name": self.name, "version": "1"},
            },
        )
        answer = self.response(first)
        if "result" not in answer:
            raise HostError(f"{self.name}: initialize failed: {answer}")
        self.notify("notifications/initialized")

    def send(self, message: dict[str, Any]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class SocketHost(_Host):
    """A 2025-11-25 host on the daemon's MCP socket, as C{mcpx serve} would bridge it."""

    _pids = itertools.count(4_000_000)

    def __init__(
        self,
        path: str,
        name: str,
        *,
        capabilities: dict[str, Any] | None = None,
        passthrough: list[str] | None = None,
        roots: tuple[dict[str, str], ...] = (),
    ) -> None:
        super().__init__(name, capabilities, list(roots))
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self._send_lock = threading.Lock()
        hello: dict[str, Any] = {
            "mcpx": "serve",
            "pid": next(self._pids),
            "cwd": os.getcwd(),
            "version": "test",
        }
        if passthrough is not None:
            hello["passthrough"] = passthrough
        self.sock.sendall(json.dumps(hello).encode() + b"\n")
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.initialize()

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                return
            if not chunk:
                return
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if line.strip():
                    self.received(json.loads(line))

    def send(self, message: dict[str, Any]) -> None:
        with self._send_lock:
            self.sock.sendall(json.dumps(message).encode() + b"\n")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


class HttpSessionHost(_Host):
    """A 2025-11-25 Streamable HTTP session on C{/mcp}: each POST read on a thread."""

    def __init__(self, port: int, name: str, *, capabilities: dict[str, Any] | None = None) -> None:
        super().__init__(name, capabilities, [])
        self.port = port
        self.session: str | None = None
        self._open: dict[Any, http.client.HTTPConnection] = {}
        self.initialize()

    def _headers(self) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2025-11-25",
        }
        if self.session is not None:
            headers["Mcp-Session-Id"] = self.session
        return headers

    def send(self, message: dict[str, Any]) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=WAIT * 2)
        connection.request("POST", "/mcp", json.dumps(message), self._headers())
        if self.session is None:
            # initialize: its answer names the session every later POST belongs to.
            response = connection.getresponse()
            self.session = response.getheader("Mcp-Session-Id")
            self._read(message.get("id"), connection, response)
        elif "id" in message and "method" in message:
            # A request's answer may take long: it is read on a thread of its own, so
            # that the host can go on (cancel it, answer questions) meanwhile.
            with self.lock:
                self._open[message["id"]] = connection
            threading.Thread(
                target=self._read, args=(message["id"], connection, None), daemon=True
            ).start()
        else:
            connection.getresponse().read()
            connection.close()

    def _read(self, request_id: Any, connection: http.client.HTTPConnection, response: Any) -> None:
        try:
            if response is None:
                response = connection.getresponse()
            if (response.getheader("Content-Type") or "").startswith("text/event-stream"):
                data: list[str] = []
                for raw in response:
                    line = raw.decode().rstrip("\r\n")
                    if line.startswith("data:"):
                        data.append(line[5:].strip())
                    elif not line and data:
                        self.received(json.loads("\n".join(data)))
                        data = []
            else:
                body = response.read()
                if body:
                    self.received(json.loads(body))
                elif response.status == 202:
                    self.received({"id": request_id, "accepted": True})
        except (OSError, http.client.HTTPException, ValueError):
            pass
        finally:
            with self.lock:
                self._open.pop(request_id, None)
            connection.close()

    def disconnect(self, request_id: Any) -> None:
        """Drop the POST of one request (not a cancel, in a session)."""
        with self.lock:
            connection = self._open.pop(request_id, None)
        if connection is not None and connection.sock is not None:
            connection.sock.shutdown(socket.SHUT_RDWR)
            connection.close()

    def close(self) -> None:
        if self.session is None:
            return
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=WAIT)
        try:
            connection.request("DELETE", "/mcp", headers=self._headers())
            connection.getresponse().read()
        except (OSError, http.client.HTTPException):
            pass
        finally:
            connection.close()
        with self.lock:
            for open_connection in self._open.values():
                open_connection.close()


class ModernHost:
    """
    A 2026-07-28 host on C{/mcp}: each request a POST of its own with C{_meta}, declaring
    elicitation (or C{capabilities}).  It gives up on a call by closing that POST's
    connection.
    """

    def __init__(self, port: int, name: str, *, capabilities: dict[str, Any] | None = None) -> None:
        self.port = port
        self.name = name
        self.capabilities = {"elicitation": {}} if capabilities is None else capabilities
        self.ids = itertools.count(1)
        self.connection: http.client.HTTPConnection | None = None

    def call(
        self, tool: str, arguments: dict[str, Any], extra: dict[str, Any] | None = None
    ) -> Any:
        """POST a tools/call and return without reading the answer."""
        body = {
            "jsonrpc": "2.0",
            "id": next(self.ids),
            "method": "tools/call",
            "params": {
                "name": tool,
                "arguments": arguments,
                **(extra or {}),
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": self.capabilities,
                },
            },
        }
        self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=WAIT * 2)
        self.connection.request(
            "POST",
            "/mcp",
            json.dumps(body),
            {
                "Content-Type": "application/json",
                "Accept": "application/json",
                "MCP-Protocol-Version": "2026-07-28",
                "Mcp-Method": "tools/call",
                "Mcp-Name": tool,
            },
        )
        return body["id"]

    def answer(self) -> dict[str, Any]:
        """The answer to the last call (C{input_required} when it was asked something)."""
        assert self.connection is not None
        response = self.connection.getresponse()
        answer: dict[str, Any] = json.loads(response.read())
        self.connection.close()
        return answer

    def give_up(self) -> None:
        """Close the last call's connection: for a 2026-07-28 request, the cancel."""
        connection = self.connection
        if connection is not None and connection.sock is not None:
            with contextlib.suppress(OSError):
                connection.sock.shutdown(socket.SHUT_RDWR)
            connection.close()

    def close(self) -> None:
        self.give_up()
