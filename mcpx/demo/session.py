# -*- test-case-name: tests.demo.test_demo -*-
"""
One connection to the demo: the revision each request is served in (agreed by
C{initialize}, or restated by a 2026-07-28 request), and the requests that reach the
client back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from mcpx.demo.server import (
    SUPPORTED_VERSIONS,
    Answer,
    DemoClient,
    DemoServer,
    no_notifications,
    request_params,
)
from mcpx.spec.meta_keys import CLIENT_CAPABILITIES_KEY, PROTOCOL_VERSION_KEY
from mcpx.spec.revision import (
    Revision,
)
from mcpx.wire.errors import RpcError
from mcpx.wire.messages import Notification, Request


class DemoSession:
    """
    One connection to the demo: which revision each request is served in.

    @ivar revision: the legacy revision agreed by C{initialize}, or C{None} before it.
    @ivar initialized: the client confirmed with C{notifications/initialized}.  Requests do
        not wait for it: a client that skips it loses nothing by being answered.
    @ivar capabilities: the client capabilities C{initialize} declared.
    """

    log = Logger()

    def __init__(
        self,
        server: DemoServer,
        on_negotiated: Callable[[Revision], None] | None = None,
        *,
        notify: Callable[[str, dict[str, Any]], None] = no_notifications,
        request: Callable[[str, dict[str, Any]], Deferred[Any]] | None = None,
    ) -> None:
        """
        @param on_negotiated: told the revision C{initialize} agreed on, before the answer
            is sent (the transport may need to know, to accept batches for example).
        @param notify: sends the client a notification (progress).
        @param request: sends the client a request (legacy elicitation); C{None} when
            nothing can.
        """
        self._server = server
        self._on_negotiated = on_negotiated
        self._notify = notify
        self._request = request
        self.revision: Revision | None = None
        self.initialized = False
        self.capabilities: Mapping[str, Any] = {}

    def answer(self, request: Request) -> Answer:
        """
        Answer one request; an L{mcpx.wire.peer.RpcPeer}'s C{on_request}.

        @raise RpcError: -32022 for a C{_meta} version the demo does not speak; otherwise
            as L{DemoServer.answer}, plus -32600 for a legacy request before C{initialize}.
        """
        params = request_params(request)
        revision = self._requested(params)
        if revision is not None:
            # Each 2026-07-28 request states its own capabilities; none carry over.
            meta = params["_meta"]
            declared = meta.get(CLIENT_CAPABILITIES_KEY)
            capabilities = declared if isinstance(declared, dict) else {}
            caller = DemoClient(capabilities, self._notify)
            return self._server.answer(request.method, params, revision, caller)
        return self._legacy(request.method, params)

    def notice(self, notification: Notification) -> None:
        """Take one notification; an L{mcpx.wire.peer.RpcPeer}'s C{on_notification}."""
        if notification.method == "notifications/initialized" and self.revision is not None:
            self.initialized = True

    def _requested(self, params: Mapping[str, Any]) -> Revision | None:
        """
        The modern revision a request names in C{_meta}, or C{None} for a legacy request.

        A legacy revision named there changes nothing: those are agreed through
        C{initialize}, so the request is handled as any other legacy one.
        """
        meta = params.get("_meta")
        if not isinstance(meta, dict) or PROTOCOL_VERSION_KEY not in meta:
            return None
        requested = meta[PROTOCOL_VERSION_KEY]
        if not isinstance(requested, str):
            raise RpcError.invalid_params(f'_meta["{PROTOCOL_VERSION_KEY}"] must be a string')
        revision = Revision.find(requested)
        if revision is None:
            raise RpcError.unsupported_version(requested, SUPPORTED_VERSIONS)
        return revision if revision.is_modern else None

    def _legacy(self, method: str, params: dict[str, Any]) -> Answer:
        if method not in self._server.legacy_methods:
            raise RpcError.method_not_found(method)
        if method == "initialize":
            return self._initialize(params)
        if self.revision is None:
            if method == "ping":
                # The lifecycle pages allow a ping before initialization completes.
                return {}
            raise RpcError.invalid_request(
                f"{method} before initialize: send initialize first, or name "
                f'{Revision.V2026_07_28.value} in params._meta["{PROTOCOL_VERSION_KEY}"]'
            )
        caller = DemoClient(self.capabilities, self._notify, self._request)
        return self._server.answer(method, params, self.revision, caller)

    def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.revision is not None:
            raise RpcError.invalid_request(f"already initialized at {self.revision.value}")
        revision, result = self._server.initialize(params)
        self.revision = revision
        declared = params.get("capabilities")
        self.capabilities = declared if isinstance(declared, dict) else {}
        client = params.get("clientInfo")
        self.log.info(
            "client {client} initialized at {revision}",
            client=client.get("name") if isinstance(client, dict) else None,
            revision=revision.value,
        )
        if self._on_negotiated is not None:
            self._on_negotiated(revision)
        return result
