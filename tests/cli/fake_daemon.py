"""
A stand-in for the daemon's C{/v1} API, for driving the C{mcpx} commands in tests.

It answers the agreed shapes (servers, tools, a tool, calls with and without progress,
restart, events, health, and the agreed error bodies) from fixed data, and records every
request it got, so a test can check what the command sent as well as what it printed.
Serve L{FakeDaemon.resource} on a unix socket with C{twisted.web.server.Site}.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from typing import Any, Final

from klein import Klein
from twisted.web.iweb import IRequest
from twisted.web.resource import IResource


def tiny_png(width: int = 2, height: int = 1) -> bytes:
    """A valid PNG of C{width} x C{height} red pixels, made without any image library."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


PNG: Final = tiny_png()
WAV: Final = b"RIFF\x24\x00\x00\x00WAVEfmt " + b"\x00" * 28

SERVERS: Final[list[dict[str, Any]]] = [
    {
        "name": "demo",
        "state": "ready",
        "last_error": None,
        "instances": 1,
        "era": "legacy",
        "revision": "2025-11-25",
        "transport": "stdio",
    },
    {
        "name": "broken",
        "state": "failed",
        "last_error": "exited with status 1",
        "instances": 0,
        "era": None,
        "revision": None,
        "transport": "stdio",
    },
]

TOOLS: Final[dict[str, list[dict[str, Any]]]] = {
    "demo": [
        {
            "name": "echo",
            "title": "Echo",
            "description": "Returns the given text unchanged.",
            "inputSchema": {
                "type": "object",
                "properties": {"text": {"type": "string", "description": "The text."}},
                "required": ["text"],
            },
            "annotations": {"readOnlyHint": True},
        },
        {
            "name": "add",
            "description": "Adds two numbers.\nSecond line.",
            "inputSchema": {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"],
            },
            "outputSchema": {"type": "object", "properties": {"sum": {"type": "number"}}},
        },
    ],
    "broken": [],
}

EVENTS: Final = [
    ("server.started", {"server": "demo", "era": "legacy", "revision": "2025-11-25"}),
    ("server.log", {"server": "demo", "level": "info", "data": "hello from demo"}),
]


def _error(request: IRequest, status: int, code: str, message: str, **extra: Any) -> bytes:
    return _json(request, {"error": {"code": code, "message": message, **extra}}, status)


def _json(request: IRequest, payload: Any, status: int = 200) -> bytes:
    request.setResponseCode(status)
    request.setHeader(b"content-type", b"application/json")
    return json.dumps(payload).encode()


def _text(text: str, is_error: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}]}
    if is_error:
        result["isError"] = True
    return result


class FakeDaemon:
    """
    The fake API.

    @ivar requests: every request as (method, path with query, Mcpx-Client header, JSON
        body or C{None}).
    """

    app = Klein()

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, str | None, Any]] = []

    def resource(self) -> IResource:
        return self.app.resource()

    def _record(self, request: IRequest) -> Any:
        raw = request.content.read() if request.content is not None else b""
        body = json.loads(raw) if raw else None
        client = request.getHeader(b"mcpx-client")
        self.requests.append(
            (
                request.method.decode(),
                request.uri.decode(),
                client.decode() if client is not None else None,
                body,
            )
        )
        return body

    def last_body(self, path: str) -> Any:
        """The JSON body of the latest request to C{path}."""
        for _method, uri, _client, body in reversed(self.requests):
            if uri.split("?")[0] == path:
                return body
        raise AssertionError(f"no request to {path}: {self.requests}")

    @app.route("/health", methods=["GET"])
    def health(self, request: IRequest) -> bytes:
        self._record(request)
        return _json(request, {"status": "ok", "version": "0-fake", "pid": 4242, "uptime": 1.5})

    @app.route("/v1/servers", methods=["GET"])
    def servers(self, request: IRequest) -> bytes:
        self._record(request)
        return _json(request, {"servers": SERVERS})

    @app.route("/v1/tools", methods=["GET"])
    def tools(self, request: IRequest) -> bytes:
        self._record(request)
        server = request.args.get(b"server", [b""])[0].decode()
        search = request.args.get(b"search", [b""])[0].decode().lower()
        if server and server not in TOOLS:
            return _error(request, 404, "unknown_server", f"no server named {server!r}")
        found = [
            {
                "server": name,
                "name": tool["name"],
                "title": tool.get("title"),
                "description": tool.get("description"),
            }
            for name, tools in TOOLS.items()
            if not server or name == server
            for tool in tools
            if search in (tool["name"] + " " + tool.get("description", "")).lower()
        ]
        return _json(request, {"tools": found})

    @app.route("/v1/tools/<server>/<tool>", methods=["GET"])
    def tool(self, request: IRequest, server: str, tool: str) -> bytes:
        self._record(request)
        if server not in TOOLS:
            return _error(request, 404, "unknown_server", f"no server named {server!r}")
        for entry in TOOLS[server]:
            if entry["name"] == tool:
                return _json(request, {"server": server, "tool": entry})
        return _error(request, 404, "unknown_tool", f"{server} has no tool {tool!r}")

    @app.route("/v1/servers/<server>/restart", methods=["POST"])
    def restart(self, request: IRequest, server: str) -> bytes:
        self._record(request)
        for status in SERVERS:
            if status["name"] == server:
                return _json(request, {"server": status})
        return _error(request, 404, "unknown_server", f"no server named {server!r}")

    @app.route("/v1/prompt", methods=["POST"])
    def prompt(self, request: IRequest) -> bytes:
        body = self._record(request)
        if body["server"] != "demo":
            return _error(request, 404, "unknown_server", f"no server named {body['server']!r}")
        who = body.get("arguments", {}).get("name", "?")
        message = {"role": "user", "content": {"type": "text", "text": f"Greet {who}."}}
        return _json(request, {"description": "A greeting", "messages": [message]})

    @app.route("/v1/read", methods=["POST"])
    def read(self, request: IRequest) -> bytes:
        body = self._record(request)
        if body["server"] != "demo":
            return _error(request, 404, "unknown_server", f"no server named {body['server']!r}")
        contents = [
            {"uri": body["uri"], "mimeType": "text/plain", "text": "hello"},
            {"uri": body["uri"], "mimeType": "image/png", "blob": "AAAA"},
        ]
        return _json(request, {"contents": contents})

    @app.route("/v1/call", methods=["POST"])
    def call(self, request: IRequest) -> bytes:
        body = self._record(request)
        server, tool = body.get("server"), body.get("tool")
        arguments = body.get("arguments", {})
        if server not in TOOLS:
            return _error(request, 404, "unknown_server", f"no server named {server!r}")
        if tool == "echo":
            return _json(request, _text(str(arguments.get("text"))))
        if tool == "args":
            result = _text(json.dumps(arguments))
            result["structuredContent"] = arguments
            return _json(request, result)
        if tool == "media":
            return _json(
                request,
                {
                    "content": [
                        {"type": "text", "text": "a red picture and a sound"},
                        {
                            "type": "image",
                            "mimeType": "image/png",
                            "data": base64.b64encode(PNG).decode(),
                        },
                        {
                            "type": "audio",
                            "mimeType": "audio/wav",
                            "data": base64.b64encode(WAV).decode(),
                        },
                    ]
                },
            )
        if tool == "links":
            return _json(
                request,
                {
                    "content": [
                        {
                            "type": "resource_link",
                            "uri": "file:///project/README.md",
                            "name": "README.md",
                            "mimeType": "text/markdown",
                            "description": "The project's readme.",
                        },
                        {
                            "type": "resource",
                            "resource": {
                                "uri": "demo://readme",
                                "mimeType": "text/markdown",
                                "text": "# Hello\n",
                            },
                        },
                    ]
                },
            )
        if tool == "fail":
            return _json(request, _text("it went wrong", is_error=True))
        if tool == "broken":
            return _error(
                request,
                502,
                "upstream_error",
                "demo answered tools/call with an error",
                rpc={"code": -32603, "message": "Internal error"},
            )
        if tool == "slow":
            return _error(request, 504, "timeout", "demo did not answer within 1s")
        if tool == "bad":
            return _error(request, 400, "invalid_arguments", "argument 'a' must be a number")
        if tool == "countdown":
            steps = int(arguments.get("steps", 3))
            result = _text(f"counted down {steps} steps")
            if not body.get("progress"):
                return _json(request, result)
            request.setHeader(b"content-type", b"application/x-ndjson")
            lines = [
                {"progress": {"progressToken": 1, "progress": i, "total": steps, "message": f"{i}"}}
                for i in range(1, steps + 1)
            ]
            lines.append({"result": result})
            return b"".join(json.dumps(line).encode() + b"\n" for line in lines)
        if tool == "stream_error":
            request.setHeader(b"content-type", b"application/x-ndjson")
            return (
                b'{"progress": {"progressToken": 1, "progress": 1}}\n'
                b'{"error": {"code": "unknown_tool", "message": "no tool stream_error"}}\n'
            )
        return _error(request, 404, "unknown_tool", f"{server} has no tool {tool!r}")

    @app.route("/v1/events", methods=["GET"])
    def events(self, request: IRequest) -> bytes:
        self._record(request)
        servers = {s.decode() for s in request.args.get(b"server", [])}
        kinds = {k.decode() for k in request.args.get(b"kind", [])}
        request.setHeader(b"content-type", b"text/event-stream")
        out = [b": keep-alive\n\n"]
        for kind, data in EVENTS:
            if servers and data["server"] not in servers:
                continue
            if kinds and kind not in kinds:
                continue
            payload = {"kind": kind, "time": 1_767_225_600.25, **data}
            out.append(f"event: {kind}\ndata: {json.dumps(payload)}\n\n".encode())
        # Ending the stream stands for the daemon going away.
        return b"".join(out)
