# -*- test-case-name: tests.daemon.test_tracing -*-
"""
OpenTelemetry traces of the daemon's requests: off unless C{trace.endpoint} is set.

When it is off nothing of OpenTelemetry is imported, and each place that would make a
span pays one check: L{span} hands back the same do-nothing context manager, and the
steps every pass-through call takes (the pool's wait and upstream request) read L{ON}
and make no span at all. When the
daemon starts with C{trace.endpoint} set, L{start} imports the SDK and the OTLP/HTTP
exporter (the C{mcpx[trace]} extra) and every host request gets a span, with children
for what its time went on:

  - the host's request (C{/mcp}, C{mcpx serve}, the C{/v1} routes that reach a server),
    its parent the host's own W3C C{traceparent} (C{params._meta} or the HTTP header);
  - C{mcpx.policy}: the policy's checks before a tool call (L{mcpx.policy.guard});
  - C{mcpx.pool.wait}: the wait for an instance of the server (L{mcpx.pool.pool});
  - C{mcpx.upstream <method>}: the request to the server, whose C{_meta.traceparent}
    names this span instead of the host's;
  - C{mcpx.question <method>}: each question the server asks, from when it is asked to
    when it is answered, so its length is how long the person took (L{mcpx.questions});
  - C{mcpx.task.promotion}: a call made a task (L{mcpx.server.promotion}).

Attributes name what was done, never what it carried: the method, server, tool name,
revision, outcome and error code. Never arguments, results, messages, headers, tokens
or anything else a secret could be in.

This module sits on the lowest floor with L{mcpx.once}: anything may import it, it
imports nothing of mcpx but the version.
"""

from __future__ import annotations

import contextlib
import contextvars
import weakref
from collections.abc import Mapping, MutableMapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Final

from mcpx._version import __version__

if TYPE_CHECKING:
    from opentelemetry.context import Context as TraceContext
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer

__all__ = [
    "ON",
    "Attributes",
    "ended",
    "failed",
    "fresh_context",
    "inject",
    "on",
    "outcome",
    "parent_of",
    "recall",
    "remember",
    "span",
    "start",
    "stop",
]

#: What a span may be told: names, numbers and flags, nothing a caller sent.
Attributes = Mapping[str, str | int | bool]

#: The W3C trace context keys read from a host and written for an upstream.
_CONTEXT_KEYS: Final = ("traceparent", "tracestate")

_NOTHING: Final[AbstractContextManager[None]] = contextlib.nullcontext(None)


class _Now:
    """The tracer spans are made with, and its provider; both C{None} when off."""

    __slots__ = (
        "attach",
        "detach",
        "in_context",
        "internal_kind",
        "propagator",
        "provider",
        "server_kind",
        "tracer",
    )

    def __init__(self) -> None:
        self.tracer: Tracer | None = None
        self.provider: TracerProvider | None = None
        # What each span uses of OpenTelemetry, found once by L{start}.
        self.attach: Any = None
        self.detach: Any = None
        self.in_context: Any = None
        self.server_kind: Any = None
        self.internal_kind: Any = None
        self.propagator: Any = None


_now: Final = _Now()
#: Whether spans are being made (L{on}), read as a module attribute where a call's every
#: step would otherwise pay for a span that does nothing: the caller skips the span.
ON = False
#: The context each call's questions are children of, by the call (L{mcpx.call.Call}).
_calls: weakref.WeakKeyDictionary[object, TraceContext] = weakref.WeakKeyDictionary()


def on() -> bool:
    """Whether spans are being made."""
    return _now.tracer is not None


def start(
    *,
    endpoint: str = "",
    service_name: str = "mcpx",
    exporter: SpanExporter | None = None,
) -> None:
    """
    Start making spans: sent in batches, from a thread of the SDK's own, to the OTLP/HTTP
    C{endpoint}, or handed one by one to C{exporter} (tests give an in-memory one).

    The sampler is the SDK's default (every trace, or as the host's C{traceparent}
    says), which C{OTEL_TRACES_SAMPLER} changes; C{OTEL_EXPORTER_OTLP_HEADERS} gives the
    collector's credentials without putting them in mcpx's settings.
    """
    from opentelemetry.context import attach, detach
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.trace import SpanKind, set_span_in_context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    processor: SpanProcessor
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        processor = BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint))
    else:
        processor = SimpleSpanProcessor(exporter)
    provider = TracerProvider(
        resource=Resource.create({"service.name": service_name, "service.version": __version__})
    )
    provider.add_span_processor(processor)
    _now.attach, _now.detach, _now.in_context = attach, detach, set_span_in_context
    _now.server_kind, _now.internal_kind = SpanKind.SERVER, SpanKind.INTERNAL
    _now.propagator = TraceContextTextMapPropagator()
    _now.provider = provider
    _now.tracer = provider.get_tracer("mcpx", __version__)
    global ON  # noqa: PLW0603 (a module attribute, read by each call as tracing.ON)
    ON = True


def stop() -> None:
    """
    Send what is still queued and stop making spans. It blocks until the exporter is
    done (a bounded wait): the daemon calls it in a thread as it stops.
    """
    global ON  # noqa: PLW0603 (a module attribute, read by each call as tracing.ON)
    ON = False
    provider = _now.provider
    _now.tracer = None
    _now.provider = None
    _calls.clear()
    if provider is not None:
        provider.shutdown()


def span(
    name: str,
    attributes: Attributes | None = None,
    *,
    parent: TraceContext | None = None,
    server: bool = False,
) -> AbstractContextManager[Span | None]:
    """
    A context manager around the work of one span, the current one inside it; it gives
    C{None}, and does nothing, when tracing is off.

    @param parent: the span's parent (L{parent_of}, L{recall}); else the current span.
    @param server: the span of a host's request (kind C{SERVER}), else an inner one.
    """
    tracer = _now.tracer
    if tracer is None:
        return _NOTHING
    return _Live(
        tracer.start_span(
            name,
            context=parent,
            kind=_now.server_kind if server else _now.internal_kind,
            attributes=attributes,
            # An exception's message and traceback may quote what a caller sent: a span
            # records its type and code alone (L{failed}).
            record_exception=False,
            set_status_on_exception=False,
        )
    )


class _Live:
    """The work of one span: the span is current inside it, and ended after it."""

    __slots__ = ("_made", "_token")

    def __init__(self, made: Span) -> None:
        self._made = made
        self._token: object = None

    def __enter__(self) -> Span:
        self._token = _now.attach(_now.in_context(self._made))
        return self._made

    def __exit__(self, kind: object, error: BaseException | None, traceback: object) -> None:
        try:
            if error is not None:
                failed(self._made, error)
            self._made.end()
        finally:
            _now.detach(self._token)


def failed(made: Span | None, error: BaseException) -> None:
    """
    Mark C{made} failed by C{error}: its type, and its stable code (a JSON-RPC error's
    number, an op's or the pool's snake_case code); never its message.
    """
    if made is None:
        return
    from opentelemetry.trace import StatusCode

    made.set_attribute("error.type", type(error).__name__)
    made.set_attribute("mcpx.outcome", "error")
    code = getattr(error, "code", None)
    if type(code) is int:
        made.set_attribute("rpc.jsonrpc.error_code", code)
    elif type(code) is str:
        made.set_attribute("mcpx.error_code", code)
    made.set_status(StatusCode.ERROR)


def outcome(made: Span | None, result: object) -> None:
    """Mark C{made} with how a call ended: C{tool_error} for a result with C{isError}."""
    if made is None:
        return
    tool_error = isinstance(result, dict) and result.get("isError") is True
    made.set_attribute("mcpx.outcome", "tool_error" if tool_error else "ok")


def ended(made: Span | None, key: str, value: str | int | bool) -> None:
    """Add one attribute to C{made} learnt as its work ended (a question's action)."""
    if made is not None:
        made.set_attribute(key, value)


def parent_of(carrier: object) -> TraceContext | None:
    """
    The host's span context in C{carrier} (a request's C{_meta}, or a mapping of its
    HTTP headers), or C{None} when it carries none or tracing is off.
    """
    if _now.tracer is None or not isinstance(carrier, Mapping):
        return None
    found = {key: carrier[key] for key in _CONTEXT_KEYS if type(carrier.get(key)) is str}
    if not found:
        return None
    context: TraceContext = _now.propagator.extract(found)
    return context


def inject(meta: MutableMapping[str, Any]) -> None:
    """
    Put the current span's context into C{meta} as C{traceparent} (and C{tracestate}),
    in place of any the host sent, so the upstream's spans are children of mcpx's.
    """
    if _now.tracer is None:
        return
    for key in _CONTEXT_KEYS:
        meta.pop(key, None)
    _now.propagator.inject(meta)


def remember(call: object) -> None:
    """
    Take the current span as the parent of the questions asked for C{call} (a
    L{mcpx.call.Call}, L{recall}); forgotten with the call.
    """
    if _now.tracer is None or call is None:
        return
    from opentelemetry.context import get_current

    with contextlib.suppress(TypeError):
        _calls[call] = get_current()


def recall(call: object) -> TraceContext | None:
    """The span context L{remember} took for C{call}, if any."""
    if _now.tracer is None or call is None:
        return None
    try:
        return _calls.get(call)
    except TypeError:
        return None


def fresh_context() -> contextvars.Context:
    """
    An empty C{contextvars} context, for work that must not carry the request's, but
    with the current span, so that the spans of that work are still its children.
    """
    fresh = contextvars.Context()
    if _now.tracer is not None:
        from opentelemetry.context import attach, get_current

        fresh.run(attach, get_current())
    return fresh
