"""
A scripted stand-in for L{mcpx.server.dispatch.McpServer}, for the transport tests.

It opens real L{Conn}s and answers a few made-up methods whose behaviour a test can
steer, so that what is checked is the transport: framing, routing, cancellation, statuses.

  - C{initialize}: agrees on C{params.protocolVersion} when it is a legacy revision,
    otherwise 2025-11-25; -32602 when it is not a string.
  - C{echo}: answers its params.
  - C{fail}: raises C{RpcError(params.code, params.message)}.
  - C{crash}: raises C{ValueError} (an internal error).
  - C{wait}: waits until the test fires L{FakeCore.waiting}C{[id]}.
  - C{notify}: pushes C{params.method} with C{params.params} to the connection (on the
    stream the request is answered on, where the transport handed one over), then
    waits like C{wait}.
  - C{ask}: asks the client C{elicitation/create} with its params (the same way) and
    answers C{{"answer": <the client's result>}}.
  - C{answer}: after waiting like C{wait} when C{params.wait} is true (else at once),
    pushes C{params.push} (a notification's method and params) when there is one, then
    raises C{RpcError(params.error.code, params.error.message)} for an C{error}, or
    C{ValueError} for C{crash}, or answers C{params.result} (an L{EncodedResult} of it
    when C{params.encoded} is true).
  - anything else: C{-32601}.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred

from mcpx.server.conn import Conn, Reply
from mcpx.spec.revision import NEWEST_LEGACY, Revision
from mcpx.wire.errors import RpcError
from mcpx.wire.messages import EncodedResult, Notification, Request, RequestId


class FakeCore:
    """
    @ivar opened: every connection opened, in order.
    @ivar closed: every connection closed, in order.
    @ivar handled: every request, with its connection.
    @ivar notifications: every notification, with its connection.
    @ivar waiting: the C{wait}/C{notify} requests still waiting, by id.
    @ivar cancelled: the ids of the requests whose waiting was cancelled.
    """

    def __init__(self) -> None:
        self.opened: list[Conn] = []
        self.closed: list[Conn] = []
        self.handled: list[tuple[Conn, Request]] = []
        self.notifications: list[tuple[Conn, Notification]] = []
        self.waiting: dict[RequestId, Deferred[Any]] = {}
        self.cancelled: list[RequestId] = []

    def open(self, conn: Conn) -> Conn:
        self.opened.append(conn)
        return conn

    def close(self, conn: Conn) -> None:
        conn.closed = True
        self.closed.append(conn)

    def notification(self, conn: Conn, notification: Notification) -> None:
        self.notifications.append((conn, notification))

    async def handle(self, conn: Conn, request: Request, reply: Reply | None = None) -> Any:
        self.handled.append((conn, request))
        params = request.params if isinstance(request.params, dict) else {}
        method = request.method
        if method == "initialize":
            if not isinstance(params.get("protocolVersion"), str):
                raise RpcError.invalid_params("params.protocolVersion must be a string")
            found = Revision.find(params.get("protocolVersion"))
            conn.revision = found if found is not None and not found.is_modern else NEWEST_LEGACY
            return {"protocolVersion": conn.revision.value, "capabilities": {}}
        if method == "echo":
            return params
        if method == "fail":
            raise RpcError(params["code"], params.get("message", "failed"))
        if method == "crash":
            raise ValueError("a bug")
        if method == "notify":
            assert conn.push is not None
            push = conn.push if reply is None else reply.push
            push(params["method"], params.get("params"))
            return await self._wait(request.id)
        if method == "wait":
            return await self._wait(request.id)
        if method == "answer":
            return await self._answer(conn, request, params, reply)
        if method == "ask":
            assert conn.ask is not None
            ask = conn.ask if reply is None else reply.ask
            answer = await ask("elicitation/create", params)
            return {"answer": answer}
        raise RpcError.method_not_found(method)

    async def _answer(
        self, conn: Conn, request: Request, params: dict[str, Any], reply: Reply | None
    ) -> Any:
        if params.get("wait"):
            await self._wait(request.id)
        pushed = params.get("push")
        if pushed is not None:
            assert conn.push is not None
            (conn.push if reply is None else reply.push)(pushed["method"], pushed.get("params"))
        error = params.get("error")
        if error is not None:
            raise RpcError(error["code"], error["message"])
        if params.get("crash"):
            raise ValueError("a bug")
        return EncodedResult(params["result"]) if params.get("encoded") else params["result"]

    def _wait(self, request_id: RequestId) -> Deferred[Any]:
        def cancelled(deferred: Deferred[Any]) -> None:
            self.cancelled.append(request_id)
            self.waiting.pop(request_id, None)

        waiting: Deferred[Any] = Deferred(cancelled)
        self.waiting[request_id] = waiting
        return waiting

    def release(self, request_id: RequestId, result: Any) -> None:
        """Let the waiting request C{request_id} answer C{result}."""
        self.waiting.pop(request_id).callback(result)
