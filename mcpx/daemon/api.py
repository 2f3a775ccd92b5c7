# -*- test-case-name: tests.daemon.test_api -*-
"""
The C{/v1} routes, generated from the operation table (L{mcpx.ops.table.OPS}).

One Klein route per op: its input is gathered from the path, then the query (C{GET}) or
the JSON body, checked against the op's input schema, and handed to the op's handler.
The answer is JSON; an op that can stream progress answers NDJSON when asked to, and
the events op answers an event stream.  Every error is JSON with a stable C{code} and a
message that says what to do.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Final, Protocol

from klein import Klein
from twisted.internet.defer import CancelledError, Deferred
from twisted.logger import Logger
from twisted.web.iweb import IRequest

from mcpx import tracing
from mcpx.auth.caller import request_subject, subject_identity
from mcpx.daemon.event_stream import serve_events
from mcpx.ops.errors import OpError, error_from
from mcpx.ops.host import DEFAULT_CLIENT, EventFeed, Invocation, OpHost, Reply
from mcpx.ops.op import NDJSON, Op
from mcpx.server.http_exchange import CLIENT
from mcpx.settings.secrets import SecretMasker
from mcpx.wire import jsontext
from mcpx.wire.jsontext import JSONRefused
from mcpx.wire.messages import encode_json

_log = Logger()

#: The run a CPython-mode program's call belongs to, and that run's secret key.
RUN_HEADER = b"x-mcpx-run"
RUN_KEY_HEADER = b"x-mcpx-run-key"


def json_body(request: IRequest, payload: Any, status: int = 200) -> bytes:
    """
    Set the status and content type and encode C{payload}.

    A payload that is not JSON (which strict reading of every input should make impossible)
    is answered as the daemon's own failure, in JSON, and logged.
    """
    try:
        encoded = encode_json(payload)
    except (TypeError, ValueError, RecursionError):
        _log.failure("an answer could not be encoded as JSON")
        status = 500
        encoded = encode_json(
            {
                "error": {
                    "code": "internal_error",
                    "message": "the daemon could not encode its answer as JSON; "
                    "its log has the details",
                }
            }
        )
    request.setResponseCode(status)
    request.setHeader(b"content-type", b"application/json")
    return encoded


def error_response(request: IRequest, error: OpError, masker: SecretMasker | None = None) -> bytes:
    """
    An error answer: C{{"error": {...}}} with the error's status (and C{Retry-After}).

    @param masker: hides the configured credentials; an error can quote an upstream.
    """
    if error.retry_in is not None:
        request.setHeader(b"retry-after", str(max(1, round(error.retry_in))).encode("ascii"))
    shown = error.to_json()
    if masker:
        shown = masker.mask_json(shown)
    return json_body(request, {"error": shown}, error.status)


def klein_path(path: str) -> str:
    """An OpenAPI path template as a werkzeug rule: C{{server}} becomes C{<server>}."""
    return re.sub(r"{(\w+)}", r"<\1>", path)


def _max_body(host: OpHost) -> int:
    return host.settings.integer("transport.maxMessageSize")


def _query(request: IRequest, op: Op) -> dict[str, Any]:
    args: dict[str, Any] = {}
    given: Mapping[bytes, Sequence[bytes]] = request.args or {}
    for name in op.query_params:
        values = given.get(name.encode("ascii"))
        if not values:
            continue
        decoded = [value.decode("utf-8", "replace") for value in values]
        if op.properties[name].get("type") == "array":
            args[name] = decoded
        else:
            # A repeated single-valued parameter: the last one wins, as in most servers.
            args[name] = decoded[-1]
    return args


def _body(host: OpHost, request: IRequest, op: Op) -> dict[str, Any]:
    limit = _max_body(host)
    content = request.content
    raw = content.read(limit + 1) if content is not None else b""
    if len(raw) > limit:
        raise OpError(
            413,
            "body_too_large",
            f"the request body is larger than {limit} bytes (transport.maxMessageSize)",
        )
    if not raw.strip():
        return {}
    try:
        body = jsontext.loads(raw)
    except JSONRefused as e:
        raise OpError(
            400,
            "invalid_json",
            f"the request body is not JSON mcpx accepts ({e}); send a JSON object",
        ) from None
    if not isinstance(body, dict):
        raise OpError(
            400,
            "invalid_input",
            f"the request body must be a JSON object, not {type(body).__name__}; "
            f"GET /openapi.json has the schema of {op.method} {op.path}",
        )
    return body


def read_input(
    host: OpHost, op: Op, request: IRequest, path_params: Mapping[str, str]
) -> dict[str, Any]:
    """
    The op's input: path parameters, then the query or the body; checked against its schema.

    @raise OpError: for a body that is not a JSON object, or input the schema refuses.
    """
    args = _query(request, op) if op.method == "GET" else _body(host, request, op)
    # The path names the resource; a body cannot redirect the call elsewhere.
    args.update(path_params)
    op.check(args)
    return args


def client_of(request: IRequest) -> str:
    """
    The caller's identity: its access token's subject's (L{subject_identity}), which the
    header cannot override; else the C{Mcpx-Client} header, or C{cli}.
    """
    subject = request_subject(request)
    if subject is not None:
        return subject_identity(subject)
    raw = request.getHeader(CLIENT)
    if not raw:
        return DEFAULT_CLIENT
    return raw.decode("utf-8", "replace").strip() or DEFAULT_CLIENT


def invocation_of(
    request: IRequest,
    args: Mapping[str, Any],
    on_progress: Callable[[dict[str, Any]], None] | None = None,
) -> Invocation:
    """The call of an op C{request} makes with C{args}, as its caller."""
    subject = request_subject(request)
    return Invocation(
        args,
        client_of(request),
        on_progress,
        run=run_of(request),
        holder=subject_identity(subject) if subject is not None else None,
    )


def run_of(request: IRequest) -> tuple[str, str] | None:
    """The run a CPython-mode program's call is made for (C{X-Mcpx-Run}), with its key."""
    run = request.getHeader(RUN_HEADER)
    if not run:
        return None
    key = request.getHeader(RUN_KEY_HEADER) or b""
    return run.decode("ascii", "replace").strip(), key.decode("ascii", "replace").strip()


async def answer(
    host: OpHost, op: Op, request: IRequest, path_params: Mapping[str, str]
) -> bytes | None:
    """Run C{op} for C{request}; the bytes to send, or C{None} when already streamed."""
    try:
        args = read_input(host, op, request, path_params)
    except OpError as e:
        return error_response(request, e)
    if op.progress_schema is not None and args.get("progress") is True and not args.get("task"):
        await _stream_progress(host, op, request, args)
        return None
    call = invocation_of(request, args)
    try:
        result = await op.run(host, call)
    except CancelledError:
        raise
    except Exception as e:
        return error_response(request, _logged(error_from(e), op), host.masker)
    if isinstance(result, EventFeed):
        try:
            await serve_events(
                request,
                host.events,
                host.clock,
                servers=result.servers,
                kinds=result.kinds,
                keep_alive=result.keep_alive,
                resources=result.resources,
                first=result.watching,
                # An access token's subject sees the events of its own calls only.
                sees=None if call.holder is None else call.holds,
            )
        finally:
            if result.release is not None:
                result.release()
        return None
    if isinstance(result, Reply):
        for name, value in result.headers.items():
            request.setHeader(name.encode("ascii"), value.encode("utf-8"))
        return json_body(request, result.body, result.status)
    return json_body(request, result)


def _logged(error: OpError, op: Op) -> OpError:
    if error.status == 500:
        _log.failure("operation {op} failed unexpectedly", op=op.name)
    return error


async def _stream_progress(
    host: OpHost, op: Op, request: IRequest, args: Mapping[str, Any]
) -> None:
    """
    Answer in NDJSON: a line per progress notification, then the result or the error.

    The status is C{200} once streaming starts, so a failure is the last line rather
    than a status.
    """
    request.setResponseCode(200)
    request.setHeader(b"content-type", NDJSON.encode("ascii"))
    request.setHeader(b"cache-control", b"no-cache")

    def progress(params: Mapping[str, Any]) -> None:
        # The token is the pool's own, meaningless to an HTTP caller.
        shown = {key: value for key, value in params.items() if key != "progressToken"}
        request.write(encode_json({"progress": shown}) + b"\n")

    try:
        result = await op.run(host, invocation_of(request, args, progress))
    except CancelledError:
        raise
    except Exception as e:
        line = {"error": host.masker.mask_json(_logged(error_from(e), op).to_json())}
    else:
        line = {"result": result}
    request.write(encode_json(line) + b"\n")


class HostsOps(Protocol):
    """The object a Klein app's routes are methods of: it holds the ops' host."""

    @property
    def host(self) -> OpHost: ...


#: The C{/v1} routes a host's request is traced on: those that reach a server.
TRACED_OPS: Final = frozenset(("call_tool", "exec", "get_prompt", "read_resource", "complete"))


async def _traced(
    op: Op, request: IRequest, work: Coroutine[Any, Any, bytes | None]
) -> bytes | None:
    """C{work} in the span of C{request}, its parent the C{traceparent} header's trace."""
    headers = {
        key: value
        for key in ("traceparent", "tracestate")
        if (value := request.getHeader(key)) is not None
    }
    attributes = {"mcpx.op": op.name, "http.route": op.path}
    with tracing.span(
        f"{op.method} {op.path}", attributes, parent=tracing.parent_of(headers), server=True
    ) as span:
        sent = await work
        code: int = getattr(request, "code", 200)
        tracing.ended(span, "http.response.status_code", code)
        tracing.ended(span, "mcpx.outcome", "ok" if code < 400 else "error")
        return sent


def _route(op: Op) -> Callable[..., Deferred[bytes | None]]:
    traced = op.name in TRACED_OPS

    def route(app: HostsOps, request: IRequest, **path_params: str) -> Deferred[bytes | None]:
        work = answer(app.host, op, request, path_params)
        if traced and tracing.on():
            return Deferred.fromCoroutine(_traced(op, request, work))
        return Deferred.fromCoroutine(work)

    route.__name__ = op.name
    route.__qualname__ = f"route_{op.name}"
    return route


def mount(app: Klein, ops: Sequence[Op]) -> None:
    """
    Add one route per op to C{app}.

    The app must be a class attribute of a L{HostsOps} (the daemon's C{DaemonHTTP}):
    Klein passes the instance to each route, which runs its op against its C{host}.
    """
    for op in ops:
        app.route(klein_path(op.path), methods=[op.method], endpoint=op.name)(_route(op))
