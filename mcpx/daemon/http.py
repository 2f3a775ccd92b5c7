# -*- test-case-name: tests.daemon.test_http -*-
"""
The daemon's one HTTP server.

Every surface is a route of one Klein app, served on the unix socket and the TCP
listeners alike: C{/health}, C{/v1} and C{/openapi.json} are generated from the operation
table (L{mcpx.ops.table.OPS}); C{/mcp} is the MCP endpoint (L{mcpx.server.http}).
Errors are JSON with a stable C{code} and a message that says what to do.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from attrs import Factory, define
from klein import Klein
from twisted.python.failure import Failure
from twisted.web.iweb import IRequest
from twisted.web.resource import IResource, Resource
from werkzeug.exceptions import HTTPException

from mcpx.auth.caller import request_subject
from mcpx.daemon.api import json_body, mount
from mcpx.daemon.browser_login import CODE_LIFETIME, COOKIE, SESSION_LIFETIME, BrowserLogins
from mcpx.daemon.exposition import CONTENT_TYPE as METRICS_CONTENT_TYPE
from mcpx.daemon.gate import owners_unix_socket
from mcpx.daemon.metrics import Metrics
from mcpx.daemon.status_page import ASSETS, StatusPage
from mcpx.ops.host import OpHost
from mcpx.ops.table import OPS
from mcpx.wire.twisted_private import url_refused_by_klein

if TYPE_CHECKING:
    from mcpx.server.http import McpHTTP

__all__ = ["DaemonHTTP", "error_body", "json_body"]


def error_body(request: IRequest, status: int, code: str, message: str) -> bytes:
    return json_body(request, {"error": {"code": code, "message": message}}, status)


class Utf8Urls(Resource):
    """
    The Klein app behind a check that the path and host decode as UTF-8.

    Klein answers one that does not with a C{text/html} 400 and logs it as an error, so any
    client could fill the log; this answers a JSON 400 and logs nothing.  A URL that is all
    ASCII, as every real client's is, costs one C{isascii} per part.
    """

    isLeaf = True

    def __init__(self, app: IResource) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self._app = app

    def render(self, request: IRequest) -> bytes | int:
        parts = [*request.prepath, *request.postpath, request.getRequestHostname()]
        if not all(part.isascii() for part in parts) and url_refused_by_klein(request):
            return error_body(
                request,
                400,
                "invalid_url",
                "the URL's path or host is not UTF-8 once percent-decoded",
            )
        rendered: bytes | int = self._app.render(request)  # type: ignore[no-untyped-call]
        return rendered


def _page_file(path: str) -> Callable[[DaemonHTTP, IRequest], bytes]:
    return lambda http, request: http.page.render(request, path)


@define
class DaemonHTTP:
    """
    The Klein routes of the daemon, over the ops' host and the MCP endpoint.

    @ivar host: what the operations run against: the daemon's parts.
    @ivar mcp: the MCP endpoint C{/mcp}; C{None} in a daemon that does not serve MCP.
    @ivar metrics: what C{/metrics} shows, reading what this app's parts hold at each
        scrape; C{None} in a daemon that keeps none.
    @ivar page: the status page's files (L{mcpx.daemon.status_page}).
    @ivar logins: the browsers signed in to the page with a one-time link, and the
        links waiting; C{None} in a daemon that offers none.
    @ivar page_urls: where the page is, one URL per TCP listener (set once they listen).
    """

    app = Klein()
    # Werkzeug answers a path with doubled slashes (also what an escaped slash in a server or
    # tool name decodes to) with a redirect whose Location the error handler below would drop;
    # such a path names no route, so it is a 404 like any other.
    app.url_map.merge_slashes = False

    host: OpHost
    mcp: McpHTTP | None = None
    metrics: Metrics | None = None
    page: StatusPage = Factory(StatusPage)
    logins: BrowserLogins | None = None
    page_urls: list[str] = Factory(list)

    def __attrs_post_init__(self) -> None:
        if self.metrics is not None:
            self.metrics.watch(self)

    def resource(self) -> IResource:
        return Utf8Urls(self.app.resource())

    def close(self) -> None:
        """End every event stream, task and MCP session: the daemon is stopping."""
        self.host.close()
        if self.mcp is not None:
            self.mcp.close()
        host_sign_ins = self.host.host_sign_ins
        if host_sign_ins is not None:
            host_sign_ins.close()

    mount(app, OPS)

    @app.route("/metrics", methods=["GET"])
    def metrics_endpoint(self, request: IRequest) -> bytes:
        # Behind the gate like every route but /health: it names servers and tools.
        if request_subject(request) is not None:
            # Counts of everyone's calls belong to no one subject: the owner's alone.
            return error_body(
                request,
                403,
                "owner_only",
                "/metrics counts every caller's calls: only the daemon's owner may read "
                "it (through its unix socket), not an access token's subject",
            )
        metrics = self.metrics
        if metrics is None:
            return error_body(request, 503, "metrics_unavailable", "this daemon keeps no metrics")
        request.setHeader(b"content-type", METRICS_CONTENT_TYPE.encode("ascii"))
        return metrics.render()

    # The status page (docs/status-page.md) and the page that signs a browser in to it
    # (mcpx.daemon.browser_login), behind the gate like every route: a route per file.
    for _path in ASSETS:
        app.route(_path, methods=["GET"], endpoint=_path)(_page_file(_path))
    del _path

    @app.route("/v1/status/login", methods=["POST"])
    def login_link(self, request: IRequest) -> bytes:
        """A one-time link into the page, for the owner on the unix socket only."""
        if not owners_unix_socket(request):
            return error_body(
                request,
                403,
                "owner_only",
                "a link into the status page is given to the daemon's own user on its "
                "unix socket only: run `mcpx status --open` as that user",
            )
        if self.logins is None or not self.page_urls:
            return error_body(
                request,
                409,
                "no_status_page",
                "this daemon listens on no TCP address, so it serves no status page: set "
                "daemon.listen (docs/status-page.md)",
            )
        url = f"{self.page_urls[0]}/login#{self.logins.new_code()}"
        request.setHeader(b"cache-control", b"no-store")
        return json_body(request, {"url": url, "expires_in": CODE_LIFETIME}, 200)

    @app.route("/login", methods=["POST"])
    def login(self, request: IRequest) -> bytes:
        """
        Exchange a one-time code (C{{"code": ...}}) for a session cookie, and send the
        browser on to the page; the gate let only the page's own origin this far.
        """
        request.setHeader(b"cache-control", b"no-store")
        code = None
        try:
            assert request.content is not None
            body = json.loads(request.content.read())
            code = body.get("code") if isinstance(body, dict) else None
        except ValueError:
            pass
        session = (
            self.logins.exchange(code)
            if self.logins is not None and isinstance(code, str)
            else None
        )
        if session is None:
            return error_body(
                request,
                400,
                "link_used_or_expired",
                "this link was used already or has expired: run `mcpx status --open` again",
            )
        cookie = b"%s=%s; Path=/; Max-Age=%d; HttpOnly; SameSite=Strict" % (
            COOKIE,
            session.encode("ascii"),
            int(SESSION_LIFETIME),
        )
        request.responseHeaders.addRawHeader(
            b"set-cookie", cookie + (b"; Secure" if request.isSecure() else b"")
        )
        request.setResponseCode(303)
        request.setHeader(b"location", b"/")
        return b""

    @app.route("/mcp", branch=False)
    def mcp_endpoint(self, request: IRequest) -> Any:
        # Every method: /mcp answers GET, POST and DELETE itself, per protocol revision.
        if self.mcp is None:
            return error_body(request, 503, "mcp_unavailable", "this daemon does not serve MCP")
        return self.mcp.render(request)

    @app.handle_errors(HTTPException)
    def http_error(self, request: IRequest, failure: Failure) -> bytes:
        error = failure.value
        assert isinstance(error, HTTPException)
        status = error.code or 500
        if status == 404:
            path = request.path.decode("utf-8", "replace")
            return error_body(
                request,
                404,
                "not_found",
                f"nothing at {path}; GET /openapi.json lists every route",
            )
        if status == 405:
            allowed = getattr(error, "valid_methods", None)
            if allowed:
                request.setHeader(b"allow", ", ".join(sorted(allowed)).encode("ascii"))
            return error_body(
                request,
                405,
                "method_not_allowed",
                f"{request.method.decode('ascii', 'replace')} is not allowed here; "
                "GET /openapi.json lists every route and its method",
            )
        return error_body(request, status, "http_error", error.description or error.name)
