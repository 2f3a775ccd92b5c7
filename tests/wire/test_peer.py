"""
Tests for L{mcpx.wire.peer}: two peers wired back to back, with a L{Clock} for timeouts.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from twisted.internet.defer import CancelledError, Deferred, TimeoutError, succeed
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import EventLoggingObserver
from twisted.logger import LogLevel, globalLogPublisher
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from mcpx.call import Call
from mcpx.wire.errors import RpcError
from mcpx.wire.messages import Notification, Request
from mcpx.wire.peer import (
    CANCELLED,
    ConnectionClosed,
    RequestTimedOut,
    RpcPeer,
)


def observe_log(case: SynchronousTestCase) -> EventLoggingObserver:
    """Collect every log event emitted until C{case} ends."""
    events = EventLoggingObserver()
    globalLogPublisher.addObserver(events)
    case.addCleanup(globalLogPublisher.removeObserver, events)
    return events


class Handler:
    """
    Answers requests as a test arranges, and records what it is given.

    By default each request gets a Deferred the test fires from C{pending}.
    """

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.notifications: list[Notification] = []
        self.pending: dict[Any, Deferred[Any]] = {}
        self.cancelled: list[Any] = []
        self.answer: Callable[[Request], object] | None = None

    def on_request(self, request: Request) -> object:
        self.requests.append(request)
        if self.answer is not None:
            return self.answer(request)
        d: Deferred[Any] = Deferred(lambda _: self.cancelled.append(request.id))
        self.pending[request.id] = d
        return d

    def on_notification(self, notification: Notification) -> None:
        self.notifications.append(notification)


class Link:
    """
    A client peer and a server peer whose bytes are queued until L{flush}, or delivered at
    once when C{synchronous}.
    """

    def __init__(self, synchronous: bool = False, allow_batches: bool = False) -> None:
        self.clock = Clock()
        self.client_handler = Handler()
        self.server_handler = Handler()
        self.to_server: list[bytes] = []
        self.to_client: list[bytes] = []
        self.sent_by_server: list[Any] = []
        self.sent_by_client: list[Any] = []
        self.synchronous = synchronous
        self.client = RpcPeer(
            self._client_send,
            on_request=self.client_handler.on_request,
            on_notification=self.client_handler.on_notification,
            clock=self.clock,
            name="server",
        )
        self.server = RpcPeer(
            self._server_send,
            on_request=self.server_handler.on_request,
            on_notification=self.server_handler.on_notification,
            negative_ids=True,
            clock=self.clock,
            allow_batches=allow_batches,
            name="client",
        )

    def _client_send(self, data: bytes) -> None:
        self.sent_by_client.append(json.loads(data))
        if self.synchronous:
            self.server.receive(data)
        else:
            self.to_server.append(data)

    def _server_send(self, data: bytes) -> None:
        self.sent_by_server.append(json.loads(data))
        if self.synchronous:
            self.client.receive(data)
        else:
            self.to_client.append(data)

    def flush(self) -> None:
        while self.to_server or self.to_client:
            while self.to_server:
                self.server.receive(self.to_server.pop(0))
            while self.to_client:
                self.client.receive(self.to_client.pop(0))


def rpc_error(case: SynchronousTestCase, d: Deferred[Any]) -> RpcError:
    """The L{RpcError} C{d} failed with."""
    error = case.failureResultOf(d, RpcError).value
    assert isinstance(error, RpcError)
    return error


class RoundTripTests(SynchronousTestCase):
    """
    Requests and their answers.
    """

    def test_round_trip(self) -> None:
        """
        A request reaches the other side's handler with its method and params, and its result
        fires the requester's Deferred.
        """
        link = Link()
        link.server_handler.answer = lambda request: {"echo": request.params}
        d = link.client.request("tools/list", {"cursor": "c"})
        self.assertEqual(link.client.in_flight_outgoing, 1)
        self.assertNoResult(d)
        link.flush()
        self.assertEqual(self.successResultOf(d), {"echo": {"cursor": "c"}})
        self.assertEqual(link.server_handler.requests, [Request(1, "tools/list", {"cursor": "c"})])
        self.assertEqual(link.client.in_flight_outgoing, 0)

    def test_synchronous_delivery(self) -> None:
        """
        An answer that arrives before C{request} returns still fires the returned Deferred.
        """
        link = Link(synchronous=True)
        link.server_handler.answer = lambda request: "pong"
        self.assertEqual(self.successResultOf(link.client.request("ping")), "pong")

    def test_deferred_handler(self) -> None:
        """
        A handler's Deferred is answered when it fires; until then the request is in flight.
        """
        link = Link()
        d = link.client.request("slow")
        link.flush()
        self.assertEqual(link.server.in_flight_incoming, 1)
        self.assertNoResult(d)
        link.server_handler.pending[1].callback([1, 2])
        link.flush()
        self.assertEqual(self.successResultOf(d), [1, 2])
        self.assertEqual(link.server.in_flight_incoming, 0)

    def test_already_fired_deferred(self) -> None:
        """
        A handler may return a Deferred that has already fired.
        """
        link = Link(synchronous=True)
        link.server_handler.answer = lambda request: succeed(3)
        self.assertEqual(self.successResultOf(link.client.request("x")), 3)
        self.assertEqual(link.server.in_flight_incoming, 0)

    def test_coroutine_handler(self) -> None:
        """
        A handler may be a coroutine; its return value is the result.
        """
        link = Link()
        gate: Deferred[int] = Deferred()

        async def answer(request: Request) -> dict[str, int]:
            return {"n": await gate}

        link.server_handler.answer = answer
        d = link.client.request("x")
        link.flush()
        self.assertNoResult(d)
        gate.callback(7)
        link.flush()
        self.assertEqual(self.successResultOf(d), {"n": 7})

    def test_both_directions(self) -> None:
        """
        The server side may call the client while the client's own request is in flight, and
        the server's ids are negative while the client's are positive.
        """
        link = Link()
        link.client_handler.answer = lambda request: {"roots": []}
        from_client = link.client.request("tools/call")
        link.flush()
        from_server = link.server.request("roots/list")
        link.flush()
        self.assertEqual(self.successResultOf(from_server), {"roots": []})
        self.assertEqual(link.client_handler.requests[0].id, -1)
        self.assertEqual(link.server_handler.requests[0].id, 1)
        link.server_handler.pending[1].callback({})
        link.flush()
        self.assertEqual(self.successResultOf(from_client), {})

    def test_ids(self) -> None:
        """
        Without C{negative_ids} ids count 1, 2, ...; with it, -1, -2, ...
        """
        link = Link()
        for _ in range(2):
            for d in (link.client.request("a"), link.server.request("b")):
                d.cancel()
                self.failureResultOf(d, CancelledError)
        sent = [m["id"] for m in link.sent_by_client if m.get("method") == "a"]
        self.assertEqual(sent, [1, 2])
        sent = [m["id"] for m in link.sent_by_server if m.get("method") == "b"]
        self.assertEqual(sent, [-1, -2])

    def test_wire_format(self) -> None:
        """
        A request and its response are plain JSON-RPC 2.0 on the wire.
        """
        link = Link()
        link.server_handler.answer = lambda request: {}
        link.client.request("ping")
        link.flush()
        self.assertEqual(link.sent_by_client, [{"jsonrpc": "2.0", "id": 1, "method": "ping"}])
        self.assertEqual(link.sent_by_server, [{"jsonrpc": "2.0", "id": 1, "result": {}}])

    def test_reentrant_request(self) -> None:
        """
        A callback on an answered request may send another request at once.
        """
        link = Link(synchronous=True)
        link.server_handler.answer = lambda request: request.method
        results: list[object] = []

        def again(result: object) -> Deferred[Any]:
            results.append(result)
            return link.client.request("second")

        d = link.client.request("first").addCallback(again)
        self.assertEqual(self.successResultOf(d), "second")
        self.assertEqual(results, ["first"])

    def test_unencodable_params(self) -> None:
        """
        Params JSON cannot represent fail the request without sending anything.
        """
        link = Link()
        self.failureResultOf(link.client.request("x", {"a": object()}), TypeError)
        self.assertEqual((link.sent_by_client, link.client.in_flight_outgoing), ([], 0))

    def test_send_fails(self) -> None:
        """
        If the transport refuses the bytes, the request fails and is not left in flight.
        """

        def refuse(data: bytes) -> None:
            raise OSError("pipe closed")

        peer = RpcPeer(refuse, on_request=Handler().on_request)
        self.failureResultOf(peer.request("x"), OSError)
        self.assertEqual(peer.in_flight_outgoing, 0)


class ErrorRelayTests(SynchronousTestCase):
    """
    Failures on the answering side reach the requester as L{RpcError}s.
    """

    def test_rpc_error_relayed(self) -> None:
        """
        An L{RpcError} raised by the handler arrives with its code, message and data.
        """
        link = Link()

        def answer(request: Request) -> object:
            raise RpcError.invalid_params("unknown tool", {"name": "x"})

        link.server_handler.answer = answer
        d = link.client.request("tools/call")
        link.flush()
        error = rpc_error(self, d)
        self.assertEqual(
            error.to_json(), {"code": -32602, "message": "unknown tool", "data": {"name": "x"}}
        )

    def test_method_not_found(self) -> None:
        """
        Unknown methods are the handler's business; its -32601 is relayed.
        """
        link = Link()

        def answer(request: Request) -> object:
            raise RpcError.method_not_found(request.method)

        link.server_handler.answer = answer
        d = link.client.request("nope")
        link.flush()
        self.assertEqual(rpc_error(self, d).code, -32601)

    def test_deferred_rpc_error(self) -> None:
        """
        An L{RpcError} failing the handler's Deferred is relayed the same way.
        """
        link = Link()
        d = link.client.request("x")
        link.flush()
        link.server_handler.pending[1].errback(RpcError(-32002, "Resource not found"))
        link.flush()
        self.assertEqual(rpc_error(self, d).code, -32002)

    def test_plain_exception(self) -> None:
        """
        Any other exception becomes -32603 with a message that reveals nothing, and is logged.
        """
        link = Link()

        def answer(request: Request) -> object:
            raise ZeroDivisionError("secret detail")

        link.server_handler.answer = answer
        d = link.client.request("x")
        link.flush()
        error = rpc_error(self, d)
        self.assertEqual((error.code, error.message), (-32603, "Internal error"))
        self.assertEqual(len(self.flushLoggedErrors(ZeroDivisionError)), 1)

    def test_deferred_plain_exception(self) -> None:
        """
        A handler Deferred failing with a plain exception becomes -32603 and is logged.
        """
        link = Link()
        d = link.client.request("x")
        link.flush()
        link.server_handler.pending[1].errback(KeyError("k"))
        link.flush()
        self.assertEqual(rpc_error(self, d).code, -32603)
        self.assertEqual(len(self.flushLoggedErrors(KeyError)), 1)

    def test_coroutine_exception(self) -> None:
        """
        A coroutine handler raising is answered the same way.
        """
        link = Link()

        async def answer(request: Request) -> object:
            raise ValueError("x")

        link.server_handler.answer = answer
        d = link.client.request("x")
        link.flush()
        self.assertEqual(rpc_error(self, d).code, -32603)
        self.assertEqual(len(self.flushLoggedErrors(ValueError)), 1)

    def test_unencodable_result(self) -> None:
        """
        A result JSON cannot represent is answered with -32603 instead of nothing.
        """
        link = Link()
        link.server_handler.answer = lambda request: {"x": {1, 2}}
        d = link.client.request("x")
        link.flush()
        self.assertEqual(rpc_error(self, d).code, -32603)
        self.assertEqual(len(self.flushLoggedErrors(TypeError)), 1)

    def test_circular_result(self) -> None:
        """
        A result that refers to itself is answered with -32603 instead of crashing.
        """
        link = Link()
        circular: dict[str, Any] = {}
        circular["self"] = circular
        link.server_handler.answer = lambda request: circular
        d = link.client.request("x")
        link.flush()
        self.assertEqual(rpc_error(self, d).code, -32603)
        self.assertEqual(len(self.flushLoggedErrors(RecursionError)), 1)

    def test_unknown_id_ignored(self) -> None:
        """
        A response naming no request in flight is logged and dropped; other requests are
        unaffected and nothing is sent back.
        """
        events = observe_log(self)
        link = Link()
        d = link.client.request("x")
        link.client.receive(b'{"jsonrpc":"2.0","id":99,"result":{}}')
        link.client.receive(b'{"jsonrpc":"2.0","id":98,"error":{"code":1,"message":"m"}}')
        self.assertNoResult(d)
        self.assertEqual(link.client.in_flight_outgoing, 1)
        self.assertEqual(link.sent_by_client, [{"jsonrpc": "2.0", "id": 1, "method": "x"}])
        self.assertEqual([e["id"] for e in events if e.get("log_level") == LogLevel.info], [99, 98])

    def test_error_without_id(self) -> None:
        """
        An error response with a null id is logged and changes nothing.
        """
        events = observe_log(self)
        link = Link()
        d = link.client.request("x")
        link.client.receive(b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"m"}}')
        self.assertNoResult(d)
        self.assertEqual(len(events), 1)
        self.assertEqual(events[0]["error"].code, -32700)


class ParseErrorTests(SynchronousTestCase):
    """
    Messages that cannot be read are answered with the right error, never a crash.
    """

    def sent_after(self, data: bytes, allow_batches: bool = False) -> list[Any]:
        link = Link(allow_batches=allow_batches)
        link.server.receive(data)
        self.assertEqual(link.server_handler.requests, [])
        return link.sent_by_server

    def test_bad_json(self) -> None:
        """
        Bytes that are not JSON get -32700 with a null id.
        """
        [reply] = self.sent_after(b'{"jsonrpc":"2.0","id":1,"method":')
        self.assertEqual((reply["id"], reply["error"]["code"]), (None, -32700))

    def test_invalid_request_keeps_id(self) -> None:
        """
        JSON that is not JSON-RPC gets -32600 carrying the id when it can be read.
        """
        [reply] = self.sent_after(b'{"jsonrpc":"1.0","id":7,"method":"m"}')
        self.assertEqual((reply["id"], reply["error"]["code"]), (7, -32600))

    def test_bad_id(self) -> None:
        """
        A request with an unusable id gets -32600 with a null id.
        """
        [reply] = self.sent_after(b'{"jsonrpc":"2.0","id":1.5,"method":"m"}')
        self.assertEqual((reply["id"], reply["error"]["code"]), (None, -32600))

    def test_batch_refused(self) -> None:
        """
        Where batches are not allowed, an array gets one -32600 saying so, and none of its
        requests run.
        """
        [reply] = self.sent_after(b'[{"jsonrpc":"2.0","id":1,"method":"m"}]')
        self.assertEqual((reply["id"], reply["error"]["code"]), (None, -32600))
        self.assertIn("batch", reply["error"]["message"])

    def test_empty_batch(self) -> None:
        """
        An empty array is -32600 even where batches are allowed.
        """
        [reply] = self.sent_after(b"[]", allow_batches=True)
        self.assertEqual((reply["id"], reply["error"]["code"]), (None, -32600))

    def test_bad_response_fails_request(self) -> None:
        """
        A malformed response is not answered; the request it names fails with -32600.
        """
        link = Link()
        d = link.client.request("x")
        link.client.receive(b'{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"m"}}')
        self.assertEqual(rpc_error(self, d).code, -32600)
        self.assertEqual(len(link.sent_by_client), 1)

    def test_oversized(self) -> None:
        """
        A message dropped by framing for its size is answered with -32600 and a null id.
        """
        link = Link()
        link.server.reject_oversized(1024)
        [reply] = link.sent_by_server
        self.assertEqual((reply["id"], reply["error"]["code"]), (None, -32600))
        self.assertIn("1024", reply["error"]["message"])

    def test_duplicate_id(self) -> None:
        """
        A request reusing the id of one still in flight is refused; the first is still
        answered.
        """
        link = Link()
        link.server.receive(b'{"jsonrpc":"2.0","id":5,"method":"a"}')
        link.server.receive(b'{"jsonrpc":"2.0","id":5,"method":"b"}')
        self.assertEqual([r.method for r in link.server_handler.requests], ["a"])
        self.assertEqual(link.sent_by_server[0]["error"]["code"], -32600)
        link.server_handler.pending[5].callback("done")
        self.assertEqual(link.sent_by_server[1], {"jsonrpc": "2.0", "id": 5, "result": "done"})


class BatchTests(SynchronousTestCase):
    """
    Batches, where the revision allows them.
    """

    def test_answers_as_one_array(self) -> None:
        """
        The answers to a batch's requests, including errors for its invalid elements, are sent
        together as one array once the last handler finishes; notifications get no answer.
        """
        link = Link(allow_batches=True)
        later: dict[Any, Deferred[Any]] = {}

        def answer(request: Request) -> object:
            if request.method == "now":
                return "now"
            later[request.id] = Deferred()
            return later[request.id]

        link.server_handler.answer = answer
        link.server.receive(
            b'[{"jsonrpc":"2.0","id":1,"method":"now"},'
            b'{"jsonrpc":"2.0","id":2,"method":"later"},'
            b'{"jsonrpc":"2.0","method":"note"},'
            b'{"jsonrpc":"2.0","id":3,"method":4}]'
        )
        self.assertEqual(link.sent_by_server, [])
        self.assertEqual(link.server_handler.notifications, [Notification("note")])
        self.assertEqual(link.server.in_flight_incoming, 1)
        later[2].callback("ok")
        [reply] = link.sent_by_server
        self.assertIsInstance(reply, list)
        self.assertEqual(
            sorted((item["id"], item.get("result"), "error" in item) for item in reply),
            [(1, "now", False), (2, "ok", False), (3, None, True)],
        )

    def test_synchronous_batch(self) -> None:
        """
        A batch whose handlers all answer at once is answered at once.
        """
        link = Link(allow_batches=True)
        link.server_handler.answer = lambda request: request.id
        link.server.receive(
            b'[{"jsonrpc":"2.0","id":"a","method":"m"},{"jsonrpc":"2.0","id":"b","method":"m"}]'
        )
        self.assertEqual(
            link.sent_by_server,
            [
                [
                    {"jsonrpc": "2.0", "id": "a", "result": "a"},
                    {"jsonrpc": "2.0", "id": "b", "result": "b"},
                ]
            ],
        )

    def test_notifications_only(self) -> None:
        """
        A batch of notifications sends nothing back.
        """
        link = Link(allow_batches=True)
        link.server.receive(b'[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","method":"b"}]')
        self.assertEqual(link.sent_by_server, [])
        self.assertEqual([n.method for n in link.server_handler.notifications], ["a", "b"])

    def test_cancelled_member(self) -> None:
        """
        A request in a batch that is cancelled is left out of the batch's answer.
        """
        link = Link(allow_batches=True)
        link.server.receive(
            b'[{"jsonrpc":"2.0","id":1,"method":"m"},{"jsonrpc":"2.0","id":2,"method":"m"}]'
        )
        link.server.receive(
            b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}'
        )
        self.assertEqual(link.sent_by_server, [])
        link.server_handler.pending[2].callback("two")
        self.assertEqual(link.sent_by_server, [[{"jsonrpc": "2.0", "id": 2, "result": "two"}]])

    def test_responses_in_batch(self) -> None:
        """
        Responses inside a batch settle the requests they name.
        """
        link = Link()
        link.server.allow_batches = True
        d = link.server.request("roots/list")
        link.server.receive(b'[{"jsonrpc":"2.0","id":-1,"result":{"roots":[]}}]')
        self.assertEqual(self.successResultOf(d), {"roots": []})


class CancellationTests(SynchronousTestCase):
    """
    C{notifications/cancelled}, in both directions.
    """

    def test_incoming_cancel(self) -> None:
        """
        A cancellation naming a request being handled cancels the handler's Deferred, and no
        response is sent for it, even if the handler later produces one.
        """
        link = Link()
        link.server.receive(b'{"jsonrpc":"2.0","id":4,"method":"slow"}')
        link.server.receive(
            b'{"jsonrpc":"2.0","method":"notifications/cancelled",'
            b'"params":{"requestId":4,"reason":"user stopped"}}'
        )
        self.assertEqual(link.server_handler.cancelled, [4])
        self.assertEqual(link.server.in_flight_incoming, 0)
        self.assertEqual(link.sent_by_server, [])
        self.assertEqual(link.server_handler.notifications, [])

    def test_cancel_for_unknown_request(self) -> None:
        """
        A cancellation naming nothing in flight is passed to the notification handler.
        """
        link = Link()
        link.server.receive(
            b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":9}}'
        )
        self.assertEqual(
            link.server_handler.notifications, [Notification(CANCELLED, {"requestId": 9})]
        )
        self.assertEqual(link.sent_by_server, [])

    def test_cancel_with_wrong_id_type(self) -> None:
        """
        C{true} does not name request 1, nor C{1.0}: only exact integers and strings do.
        """
        link = Link()
        link.server.receive(b'{"jsonrpc":"2.0","id":1,"method":"slow"}')
        for raw in (b"true", b"1.0"):
            link.server.receive(
                b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":'
                + raw
                + b"}}"
            )
        self.assertEqual(link.server_handler.cancelled, [])
        self.assertEqual(link.server.in_flight_incoming, 1)

    def test_outgoing_cancel(self) -> None:
        """
        Cancelling a request's Deferred forgets it, tells the peer, and the peer's handler is
        cancelled in turn; a late answer is dropped.
        """
        link = Link()
        d = link.client.request("slow")
        link.flush()
        d.cancel()
        self.failureResultOf(d, CancelledError)
        self.assertEqual(link.client.in_flight_outgoing, 0)
        self.assertEqual(
            link.sent_by_client[-1],
            {
                "jsonrpc": "2.0",
                "method": CANCELLED,
                "params": {"requestId": 1, "reason": "cancelled by the requester"},
            },
        )
        link.flush()
        self.assertEqual(link.server_handler.cancelled, [1])
        self.assertEqual(link.sent_by_server, [])

    def test_cancel_after_answer(self) -> None:
        """
        Cancelling a Deferred that has already fired sends nothing.
        """
        link = Link(synchronous=True)
        link.server_handler.answer = lambda request: 1
        d = link.client.request("x")
        d.cancel()
        self.assertEqual(self.successResultOf(d), 1)
        self.assertEqual(len(link.sent_by_client), 1)

    def test_no_cancel_notification(self) -> None:
        """
        With C{send_cancel=False}, cancelling sends nothing to the peer.
        """
        link = Link()
        d = link.client.request("initialize", send_cancel=False)
        d.cancel()
        self.failureResultOf(d, CancelledError)
        self.assertEqual([m["method"] for m in link.sent_by_client], ["initialize"])

    def test_timeout(self) -> None:
        """
        A request unanswered within its timeout fails with a timeout error and the peer is
        told it was abandoned.
        """
        link = Link()
        d = link.client.request("slow", timeout=5)
        link.clock.advance(4.9)
        self.assertNoResult(d)
        link.clock.advance(0.1)
        failure = self.failureResultOf(d, RequestTimedOut)
        self.assertIsInstance(failure.value, TimeoutError)
        self.assertEqual(link.client.in_flight_outgoing, 0)
        notice = link.sent_by_client[-1]
        self.assertEqual(notice["method"], CANCELLED)
        self.assertEqual(notice["params"]["requestId"], 1)
        self.assertIn("timed out", notice["params"]["reason"])

    def test_answer_stops_timer(self) -> None:
        """
        An answered request leaves no timer behind.
        """
        link = Link()
        link.server_handler.answer = lambda request: {}
        d = link.client.request("x", timeout=5)
        link.flush()
        self.successResultOf(d)
        self.assertEqual(link.clock.getDelayedCalls(), [])

    def test_cancel_stops_timer(self) -> None:
        """
        A cancelled request leaves no timer behind and sends one cancellation.
        """
        link = Link()
        d = link.client.request("x", timeout=5)
        d.cancel()
        self.failureResultOf(d, CancelledError)
        self.assertEqual(link.clock.getDelayedCalls(), [])
        link.clock.advance(10)
        self.assertEqual(len(link.sent_by_client), 2)

    def test_timeout_needs_clock(self) -> None:
        """
        Asking for a timeout from a peer without a clock is a programming error.
        """
        peer = RpcPeer(lambda data: None, on_request=Handler().on_request)
        self.assertRaises(ValueError, peer.request, "x", timeout=1)


class NotificationTests(SynchronousTestCase):
    """
    Notifications in both directions.
    """

    def test_delivered(self) -> None:
        """
        A notification reaches the other side's notification handler, and nothing answers it.
        """
        link = Link()
        link.client.notify("notifications/initialized", {"a": 1})
        link.flush()
        self.assertEqual(
            link.server_handler.notifications,
            [Notification("notifications/initialized", {"a": 1})],
        )
        self.assertEqual(link.sent_by_server, [])

    def test_without_handler(self) -> None:
        """
        A peer without a notification handler drops notifications quietly.
        """
        sent: list[bytes] = []
        peer = RpcPeer(sent.append, on_request=Handler().on_request)
        peer.receive(b'{"jsonrpc":"2.0","method":"x"}')
        self.assertEqual(sent, [])

    def test_handler_raises(self) -> None:
        """
        An exception in the notification handler is logged, not raised into the transport.
        """

        def explode(notification: Notification) -> None:
            raise RuntimeError("bad")

        peer = RpcPeer(lambda data: None, on_request=Handler().on_request, on_notification=explode)
        peer.receive(b'{"jsonrpc":"2.0","method":"x"}')
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)

    def test_handler_deferred_fails(self) -> None:
        """
        A notification handler's failed Deferred or coroutine is logged.
        """
        gate: Deferred[None] = Deferred()

        async def later(notification: Notification) -> None:
            await gate
            raise LookupError("late")

        peer = RpcPeer(lambda data: None, on_request=Handler().on_request, on_notification=later)
        peer.receive(b'{"jsonrpc":"2.0","method":"x"}')
        gate.callback(None)
        self.assertEqual(len(self.flushLoggedErrors(LookupError)), 1)


class CloseTests(SynchronousTestCase):
    """
    L{RpcPeer.close}: the connection is gone.
    """

    def test_fails_outstanding(self) -> None:
        """
        Every outstanding request fails with L{ConnectionClosed} carrying the reason.
        """
        link = Link()
        first = link.client.request("a", timeout=10)
        second = link.client.request("b")
        reason = ConnectionDone("stdin closed")
        link.client.close(Failure(reason))
        for d in (first, second):
            error = self.failureResultOf(d, ConnectionClosed).value
            assert isinstance(error, ConnectionClosed)
            self.assertIs(error.reason, reason)
        self.assertEqual(link.client.in_flight_outgoing, 0)
        self.assertEqual(link.clock.getDelayedCalls(), [])

    def test_refuses_new_requests(self) -> None:
        """
        After closing, requests fail at once and nothing is sent.
        """
        link = Link()
        link.client.close(ConnectionDone())
        self.failureResultOf(link.client.request("x"), ConnectionClosed)
        link.client.notify("n")
        self.assertEqual(link.sent_by_client, [])
        self.assertTrue(link.client.closed)

    def test_cancels_handlers(self) -> None:
        """
        Running handlers are cancelled and nothing is sent for them.
        """
        link = Link()
        link.server.receive(b'{"jsonrpc":"2.0","id":1,"method":"slow"}')
        link.server.close(ConnectionDone())
        self.assertEqual(link.server_handler.cancelled, [1])
        self.assertEqual(link.server.in_flight_incoming, 0)
        self.assertEqual(link.sent_by_server, [])

    def test_no_cancel_notifications(self) -> None:
        """
        Closing does not try to send cancellations for the requests it fails.
        """
        link = Link()
        d = link.client.request("x")
        link.client.close(ConnectionDone())
        self.failureResultOf(d, ConnectionClosed)
        self.assertEqual(len(link.sent_by_client), 1)

    def test_idempotent(self) -> None:
        """
        Closing twice keeps the first reason.
        """
        link = Link()
        link.client.close(ConnectionDone("first"))
        link.client.close(ConnectionDone("second"))
        error = self.failureResultOf(link.client.request("x"), ConnectionClosed).value
        self.assertIn("first", str(error))

    def test_ignores_later_messages(self) -> None:
        """
        Messages arriving after the close run no handler and get no answer, even later in
        the same batch.
        """
        link = Link(allow_batches=True)

        def answer(request: Request) -> object:
            link.server.close(ConnectionDone())
            return "first"

        link.server_handler.answer = answer
        link.server.receive(
            b'[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","id":2,"method":"b"}]'
        )
        link.server.receive(b'{"jsonrpc":"2.0","id":3,"method":"c"}')
        self.assertEqual([r.id for r in link.server_handler.requests], [1])
        self.assertEqual(link.sent_by_server, [])

    def test_raising_canceller(self) -> None:
        """
        A handler whose canceller raises is logged; closing still completes.
        """
        link = Link()

        def refuse(d: Deferred[Any]) -> None:
            raise RuntimeError("cannot stop")

        link.server_handler.answer = lambda request: Deferred(refuse)
        link.server.receive(b'{"jsonrpc":"2.0","id":1,"method":"x"}')
        link.server.close(ConnectionDone())
        self.assertTrue(link.server.closed)
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)

    def test_late_answer_dropped(self) -> None:
        """
        A handler that finishes after the close sends nothing.
        """
        link = Link()
        # A handler that, asked to stop, finishes with a result anyway.
        link.server_handler.answer = lambda request: Deferred(lambda d: d.callback("late"))
        link.server.receive(b'{"jsonrpc":"2.0","id":1,"method":"x"}')
        link.server.close(ConnectionDone())
        self.assertEqual(link.server.in_flight_incoming, 0)
        self.assertEqual(link.sent_by_server, [])


class TransportHookTests(SynchronousTestCase):
    """The hooks a request/response transport (HTTP) needs on top of a byte pipe."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.bytes_sent: list[bytes] = []
        self.requests_sent: list[tuple[bytes, Request]] = []
        self.abandoned: list[Any] = []
        self.peer = RpcPeer(
            self.bytes_sent.append,
            on_request=lambda request: None,
            clock=self.clock,
            send_request=lambda data, message: self.requests_sent.append((data, message)),
            on_abandon=self.abandoned.append,
        )

    def test_requests_reach_send_request_with_the_message(self) -> None:
        """An outgoing request is handed over with its parsed form; notifications use send."""
        self.peer.request("tools/call", {"name": "echo"})
        self.peer.notify("notifications/initialized")
        [(data, message)] = self.requests_sent
        self.assertEqual((message.method, message.params), ("tools/call", {"name": "echo"}))
        self.assertEqual(json.loads(data)["id"], message.id)
        self.assertEqual(
            [json.loads(b)["method"] for b in self.bytes_sent], ["notifications/initialized"]
        )

    def test_a_request_on_a_reply_stream_names_whom_that_request_was_for(self) -> None:
        """
        The peer's request carried by the reply stream of one of ours tells its handler
        whom ours was for; one arriving on no stream, or on that of a request made for
        nobody, tells nothing, and the name is gone once the handler has been called.
        """
        heard: list[object] = []

        def handle(request: Request) -> dict[str, Any]:
            heard.append(peer.carried_for)
            return {}

        peer = RpcPeer(
            self.bytes_sent.append,
            on_request=handle,
            send_request=lambda data, message: self.requests_sent.append((data, message)),
        )
        call = Call("call-1", {})
        peer.request("tools/call", {"name": "ask"}, for_whom=call)
        peer.request("tools/list")
        [(_, for_call), (_, for_nobody)] = self.requests_sent
        peer.receive_message(Request(900, "elicitation/create", {}), carried_by=for_call.id)
        peer.receive_message(Request(901, "elicitation/create", {}), carried_by=for_nobody.id)
        peer.receive_message(Request(902, "elicitation/create", {}))
        self.assertEqual(heard, [call, None, None])
        self.assertIsNone(peer.carried_for)

    def test_cancel_and_timeout_tell_on_abandon(self) -> None:
        """Cancelling or timing out a request names its id to on_abandon, once each."""
        cancelled = self.peer.request("a", send_cancel=False)
        timed = self.peer.request("b", timeout=5, send_cancel=False)
        cancelled.cancel()
        self.failureResultOf(cancelled, CancelledError)
        self.clock.advance(5)
        self.failureResultOf(timed, RequestTimedOut)
        ids = [message.id for _, message in self.requests_sent]
        self.assertEqual(self.abandoned, ids)
        self.assertEqual(self.bytes_sent, [], "send_cancel=False sends no notifications/cancelled")

    def test_fail_outgoing_fails_only_that_request(self) -> None:
        """A transport can fail one request (say, an HTTP 404) without touching the others."""
        first = self.peer.request("a", timeout=5)
        second = self.peer.request("b")
        first_id = self.requests_sent[0][1].id
        self.assertTrue(self.peer.fail_outgoing(first_id, ConnectionError("HTTP 404")))
        self.failureResultOf(first, ConnectionError)
        self.assertNoResult(second)
        self.assertFalse(self.peer.fail_outgoing(first_id, ConnectionError("again")))
        self.clock.advance(10)
        self.assertEqual(self.abandoned, [], "a failed request's timer is cancelled")

    def test_tracked_request_is_cancelled_by_the_peer(self) -> None:
        """
        A request handled outside the peer (its own HTTP exchange) but tracked in it
        is cancelled by the client's notifications/cancelled, once, the call it is
        handled as withdrawn first, and its id stays in use until it is forgotten.
        """
        stopped: list[bool] = []
        call = Call("call-7", {})
        handling: Deferred[Any] = Deferred(lambda _: stopped.append(call.withdrawn))
        self.peer.track_incoming(7, handling)
        self.peer.calling(7, call)
        self.assertTrue(self.peer.is_handling(7))
        self.peer.receive_message(Notification(CANCELLED, {"requestId": 7}))
        self.assertEqual(stopped, [True])
        self.failureResultOf(handling, CancelledError)
        self.assertFalse(self.peer.is_handling(7))
        self.assertFalse(self.peer.cancel_incoming({"requestId": 7}))

    def test_closing_leaves_the_call(self) -> None:
        """
        Closing the peer cancels a handler without withdrawing the call it is handled as
        (the call decides what its client's going means); a cancel naming a request the
        peer does not handle withdraws no call named for it.
        """
        stopped: list[bool] = []
        call = Call("call-7", {})
        handling: Deferred[Any] = Deferred(lambda _: stopped.append(call.withdrawn))
        self.peer.track_incoming(7, handling)
        self.peer.calling(7, call)
        stranger = Call("call-8", {})
        self.peer.calling(8, stranger)
        self.assertFalse(self.peer.cancel_incoming({"requestId": 8}))
        self.assertFalse(stranger.withdrawn)
        self.peer.close(ConnectionError("gone"))
        self.assertEqual(stopped, [False])
        self.failureResultOf(handling, CancelledError)

    def test_tracked_request_ends_with_the_peer(self) -> None:
        """Closing the peer cancels a tracked request; a forgotten one is left alone."""
        running: Deferred[Any] = Deferred()
        done: Deferred[Any] = Deferred()
        self.peer.track_incoming(1, running)
        self.peer.track_incoming(2, done)
        self.peer.forget_incoming(2, done)
        self.assertEqual(self.peer.in_flight_incoming, 1)
        self.peer.close(ConnectionDone())
        self.failureResultOf(running, CancelledError)
        self.assertNoResult(done)


class NoReplyTests(SynchronousTestCase):
    def test_no_reply_sends_nothing(self) -> None:
        """A handler raising NoReply, at once or later, leaves the request unanswered."""
        from mcpx.wire.peer import NoReply

        sent: list[bytes] = []
        later: Deferred[Any] = Deferred()

        def handle(request: Request) -> object:
            if request.method == "now":
                raise NoReply()
            return later

        peer = RpcPeer(sent.append, on_request=handle)
        peer.receive(b'{"jsonrpc":"2.0","id":1,"method":"now"}')
        peer.receive(b'{"jsonrpc":"2.0","id":2,"method":"later"}')
        later.errback(NoReply())
        self.assertEqual(sent, [])
        self.assertEqual(peer.in_flight_incoming, 0)


class LateAnswerTests(SynchronousTestCase):
    """
    L{RpcPeer.expect_late}: a request given up on with a cancel still counts as running
    at the other side until it answers, or until the grace passes.
    """

    def given_up(self, grace: float = 5.0) -> tuple[Link, int]:
        link = Link()
        link.client.expect_late(grace)
        asked = link.client.request("slow")
        request_id = json.loads(link.to_server[0])["id"]
        asked.cancel()
        self.failureResultOf(asked, CancelledError)
        return link, request_id

    def test_counted_until_answered(self) -> None:
        """The late answer, dropped as ever, ends the wait for it."""
        link, request_id = self.given_up()
        self.assertEqual(link.client.awaiting_late, 1)
        link.client.receive(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": {}}).encode())
        self.assertEqual(link.client.awaiting_late, 0)

    def test_counted_until_grace(self) -> None:
        """A server that never answers is counted for the grace, then forgotten."""
        link, _ = self.given_up(grace=5.0)
        link.clock.advance(4.9)
        self.assertEqual(link.client.awaiting_late, 1)
        link.clock.advance(0.1)
        self.assertEqual(link.client.awaiting_late, 0)

    def test_not_without_cancel(self) -> None:
        """A request abandoned without a cancel (initialize) is not expected to answer."""
        link = Link()
        link.client.expect_late(5.0)
        asked = link.client.request("initialize", send_cancel=False)
        asked.cancel()
        self.failureResultOf(asked, CancelledError)
        self.assertEqual(link.client.awaiting_late, 0)

    def test_close_forgets(self) -> None:
        """Once the connection is closed nothing more can arrive: nothing is awaited."""
        link, _ = self.given_up()
        link.client.close(ConnectionDone())
        self.assertEqual(link.client.awaiting_late, 0)
        self.assertEqual(link.clock.getDelayedCalls(), [])

    def test_not_by_default(self) -> None:
        """Without expect_late nothing is kept."""
        link = Link()
        asked = link.client.request("slow")
        asked.cancel()
        self.failureResultOf(asked, CancelledError)
        self.assertEqual(link.client.awaiting_late, 0)
