# -*- test-case-name: tests.daemon.test_http -*-
"""
The daemon's one HTTP server.

Every surface is a route of one Klein app, served on the unix socket and the TCP
listeners alike: C{/health}, C{/v1} and C{/openapi.json} are generated from the operation
table (L{mcpx.ops.table.OPS}); C{/mcp} is the MCP endpoint (L{mcpx.server.http}); C{/}
is the status page (L{mcpx.daemon.status_page}).
Errors are JSON with a stable C{code} and a message that says what to do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from attrs import Factory, define, field
from klein import Klein
from klein._resource import URLDecodeError, extractURLparts
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure
from twisted.web.iweb import IRequest
from twisted.web.resource import IResource, Resource
from werkzeug.exceptions import HTTPException

from mcpx.daemon.api import json_body, mount
from mcpx.daemon.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from mcpx.daemon.metrics import Metrics
from mcpx.daemon.status_page import StatusPage
from mcpx.ops.clashes import Clashes
from mcpx.ops.events import EventBus
from mcpx.ops.host import PoolInterface
from mcpx.ops.recent_calls import RecentCalls
from mcpx.ops.reloading import Reloads
from mcpx.ops.table import OPS
from mcpx.questions.broker import Broker
from mcpx.settings.resolve import Settings
from mcpx.settings.secrets import SecretMasker
from mcpx.settings.servers import ServersConfig
from mcpx.tasks.store import DEFAULT_TTL, Task, TaskStore

if TYPE_CHECKING:
    from mcpx.auth.host_signin import HostSignIns
    from mcpx.auth.signin import SignIns
    from mcpx.scripts.runner import Scripts
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
        if not all(part.isascii() for part in parts):
            try:
                extractURLparts(request)
            except URLDecodeError:
                return error_body(
                    request,
                    400,
                    "invalid_url",
                    "the URL's path or host is not UTF-8 once percent-decoded",
                )
        rendered: bytes | int = self._app.render(request)  # type: ignore[no-untyped-call]
        return rendered


def _task_store(http: DaemonHTTP) -> TaskStore:
    if http.settings is None:
        return TaskStore(http.clock, ttl=DEFAULT_TTL)
    return TaskStore(
        http.clock,
        ttl=http.settings.duration("proto.askTTL"),
        per_client=http.settings.integer("tasks.maxPerClient"),
    )


@define
class DaemonHTTP:
    """
    The Klein routes of the daemon, and the parts the operations run against.

    @ivar clock: the reactor's clock: uptime, keep-alives, task expiry.
    @ivar pid: the daemon's process id, reported by C{/health}.
    @ivar pool: the warm pool; C{None} until it is wired in, when every route but
        C{/health}, C{/openapi.json} and C{/v1/events} answers C{503 pool_unavailable}.
    @ivar events: the event bus; the pool is given its C{publish}.
    @ivar settings: the resolved settings (C{/v1/settings}, C{/v1/protocol}, limits).
    @ivar servers: the configured servers, replaced by each reload.
    @ivar state_dir: the state directory, shown by C{/v1/settings}.
    @ivar reloads: runs C{POST /v1/reload} and C{SIGHUP} one at a time, reading the
        config file afresh; remembers the last outcome for C{/health}.
    @ivar tasks: calls made with C{"task": true}, kept C{proto.askTTL} after they finish.
    @ivar mcp: the MCP endpoint C{/mcp}; C{None} until the daemon wires it in.
    @ivar broker: the questions upstream servers asked, answered through
        C{/v1/questions}; C{None} until the daemon wires it in, when those routes answer
        C{503 questions_unavailable}.  The daemon starts and stops it, not this.
    @ivar masker: hides the configured credentials in error answers; the pool and the
        event bus share it.
    @ivar sign_ins: the OAuth sign-ins to remote servers (C{/v1/auth}); C{None} until
        the daemon wires them in.
    @ivar host_sign_ins: the sign-ins offered to hosts through URL elicitation
        (L{mcpx.auth.host_signin}); C{None} until the daemon wires them in.
    @ivar scripts: runs C{mcpx_exec} programs (C{/v1/exec}); C{None} until the daemon
        wires it in, when those routes answer C{503 exec_unavailable}.
    @ivar metrics: what C{/metrics} shows; C{None} until the daemon wires it in.
    @ivar calls: the last tool calls that reached a server (C{/v1/calls}, the status
        page); the daemon makes it the pool's C{on_call}.
    """

    app = Klein()
    # Werkzeug answers a path with doubled slashes (also what an escaped slash in a server or
    # tool name decodes to) with a redirect whose Location the error handler below would drop;
    # such a path names no route, so it is a 404 like any other.
    app.url_map.merge_slashes = False

    clock: IReactorTime
    pid: int
    pool: PoolInterface | None = None
    events: EventBus = field(default=Factory(lambda self: EventBus(self.clock), takes_self=True))
    clashes: Clashes = field(factory=Clashes)
    settings: Settings | None = None
    servers: ServersConfig | None = None
    state_dir: str = ""
    reloads: Reloads = field(default=Factory(lambda self: Reloads(self.clock), takes_self=True))
    tasks: TaskStore = field(default=Factory(_task_store, takes_self=True))
    mcp: McpHTTP | None = None
    broker: Broker | None = None
    masker: SecretMasker = Factory(SecretMasker)
    scripts: Scripts | None = None
    metrics: Metrics | None = None
    sign_ins: SignIns | None = None
    host_sign_ins: HostSignIns | None = None
    calls: RecentCalls = field(
        default=Factory(lambda self: RecentCalls(self.clock), takes_self=True)
    )
    page: StatusPage = Factory(StatusPage)
    started_at: float = field(init=False)

    def __attrs_post_init__(self) -> None:
        self.started_at = self.clock.seconds()
        self.tasks.on_change.append(self._task_changed)

    def _task_changed(self, task: Task) -> None:
        """Each task made and each change of its state is a C{task.*} event."""
        kind = "task.created" if task.changes == 1 else f"task.{task.status.value}"
        shown = task.summary()
        shown.pop("server", None)
        self.events.publish(kind, task.server, **shown)

    def resource(self) -> IResource:
        return Utf8Urls(self.app.resource())

    def close(self) -> None:
        """End every event stream and forget every task: the daemon is stopping."""
        self.events.close()
        self.tasks.close()
        if self.mcp is not None:
            self.mcp.close()
        if self.host_sign_ins is not None:
            self.host_sign_ins.close()

    mount(app, OPS)

    @app.route("/metrics", methods=["GET"])
    def metrics_endpoint(self, request: IRequest) -> bytes:
        # Behind the gate like every route but /health: it names servers and tools.
        if self.metrics is None:
            return error_body(request, 503, "metrics_unavailable", "this daemon keeps no metrics")
        request.setHeader(b"content-type", METRICS_CONTENT_TYPE.encode("ascii"))
        return self.metrics.render()

    # The status page (docs/status-page.md), behind the gate like every route.
    @app.route("/", methods=["GET"])
    def status_page(self, request: IRequest) -> bytes:
        return self.page.render(request, "/")

    @app.route("/status.js", methods=["GET"])
    def status_script(self, request: IRequest) -> bytes:
        return self.page.render(request, "/status.js")

    @app.route("/status.css", methods=["GET"])
    def status_style(self, request: IRequest) -> bytes:
        return self.page.render(request, "/status.css")

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
