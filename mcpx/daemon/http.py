# -*- test-case-name: tests.daemon.test_http -*-
"""
The daemon's one HTTP server.

Every surface (C{/health} now; C{/v1}, C{/mcp} and C{/openapi.json} as they land) is
a route of one Klein app, served on the unix socket and the TCP listeners alike.
Errors are JSON with a stable C{code} and a message that says what to do.
"""

from __future__ import annotations

import json
from typing import Any

from attrs import define, field
from klein import Klein
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure
from twisted.web.iweb import IRequest
from twisted.web.resource import IResource
from werkzeug.exceptions import HTTPException

from mcpx._version import __version__


def json_body(request: IRequest, payload: Any, status: int = 200) -> bytes:
    """Set the status and content type and encode C{payload}."""
    request.setResponseCode(status)
    request.setHeader(b"content-type", b"application/json")
    return json.dumps(payload, separators=(",", ":")).encode("utf-8")


def error_body(request: IRequest, status: int, code: str, message: str) -> bytes:
    return json_body(request, {"error": {"code": code, "message": message}}, status)


@define
class DaemonHTTP:
    """
    The Klein routes of the daemon.

    @ivar clock: the reactor's clock, for uptime.
    @ivar pid: the daemon's process id, reported by C{/health}.
    """

    app = Klein()

    clock: IReactorTime
    pid: int
    started_at: float = field(init=False)

    def __attrs_post_init__(self) -> None:
        self.started_at = self.clock.seconds()

    def resource(self) -> IResource:
        return self.app.resource()

    @app.route("/health", methods=["GET"])
    def health(self, request: IRequest) -> bytes:
        return json_body(
            request,
            {
                "status": "ok",
                "version": __version__,
                "pid": self.pid,
                "uptime": round(self.clock.seconds() - self.started_at, 3),
            },
        )

    @app.handle_errors(HTTPException)
    def http_error(self, request: IRequest, failure: Failure) -> bytes:
        error = failure.value
        assert isinstance(error, HTTPException)
        status = error.code or 500
        if status == 404:
            path = request.path.decode("utf-8", "replace")
            return error_body(
                request, 404, "not_found", f"nothing at {path}; GET /health shows the daemon is up"
            )
        if status == 405:
            return error_body(
                request,
                405,
                "method_not_allowed",
                f"{request.method.decode('ascii', 'replace')} is not allowed here",
            )
        return error_body(request, status, "http_error", error.description or error.name)
