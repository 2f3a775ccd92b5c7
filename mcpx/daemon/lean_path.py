# -*- test-case-name: tests.daemon.test_lean_path -*-
"""
A lean path for C{POST /mcp}: the daemon's one hot route, answered without
twisted.web's line parser, its resource traversal, or Klein and werkzeug's routing.

Why it exists: profiled (C{bench/bench_mcp.py --profile}), a C{tools/list} whose answer
is already cached as bytes (L{mcpx.server.list_cache}) spent about four fifths of the
daemon's time in the HTTP stack: twisted.web parsing each header line and building the
request, then Klein binding a werkzeug map, matching it and running the route through
three Deferreds.  MCP clients send one kind of request, over and over: a keep-alive
C{POST /mcp} with a C{Content-Length} body.  L{LeanChannel} recognises exactly that and
hands everything else, byte for byte, to the unchanged twisted.web channel it is.

What stays the same, because it is the same code:

  - the request is twisted.web's, as the site's own (L{LeanRequest}), so a lost
    connection reaches it the same way, and an answer is logged and counted as on the
    slow path; the answers the lean path frames itself (a whole answer of known length:
    its head made from a plain table of the headers set, not twisted.web's C{Headers})
    are the bytes twisted.web would send, and every other answer (a stream, a cookie,
    a status without a body) is framed by twisted.web's own C{write};
  - every rule of the gate (Origin, Host, authentication, the stop) is applied by
    L{Gate.guard}, the function the Klein app's requests go through;
  - the limits are L{LimitedChannel}'s: the admission of the connection, the header,
    body and idle deadlines, the body size refused before it is read, the bodies held
    at once (L{LimitedChannel.body_allowed}), C{TCP_NODELAY};
  - the route is L{McpHTTP.render}'s: L{McpHTTP.respond}, and what remains of it
    when it waits run as C{Deferred.fromCoroutine} and Klein run it (without their
    Deferreds, L{_Answering}): cancelled when the client goes away,
    a failure answered by twisted.web's C{processingFailed}.

A request is lean only when its head arrives whole and is plainly well formed: the
request line C{POST /mcp HTTP/1.1}, at most L{MAX_HEADERS} header lines of token names
and printable ASCII values, none repeated, within L{MAX_HEAD} bytes (below twisted.web's
own bound), a C{Content-Length} of digits, no C{Transfer-Encoding}, C{Expect} or
C{Upgrade}, and no C{Connection} but C{keep-alive}.  Anything else (another path or
method, a query, a chunked body, HTTP/1.0, a header twisted.web would refuse) goes to
twisted.web with the bytes received so far, and the connection stays there: twisted.web
answers it, refusals included, exactly as it would have.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from io import BytesIO
from typing import Any, Final, cast

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IAddress, IReactorTime
from twisted.logger import Logger
from twisted.python.components import Componentized
from twisted.python.failure import Failure
from twisted.web.http import NO_BODY_CODES, datetimeToString
from twisted.web.http_headers import Headers
from twisted.web.server import NOT_DONE_YET, Request, version

from mcpx.daemon.gate import Gate
from mcpx.daemon.limits import Admission, BoundedRequest, LimitedChannel
from mcpx.server.http import McpHTTP
from mcpx.server.http_exchange import EVENT_STREAM, JSON, Later, Started, Stepping
from mcpx.wire.prompt_write import write_now
from mcpx.wire.twisted_private import (
    frames_plainly,
    handling_request,
    network_producer,
    parses_no_forms,
    waiting_for_transport,
)

__all__ = ["MAX_HEAD", "MAX_HEADERS", "Head", "HttpDate", "LeanChannel", "LeanMcp", "read_head"]

log = Logger()

MCP_PATH: Final = b"/mcp"
_REQUEST_LINE: Final = b"POST /mcp HTTP/1.1\r\n"
_END: Final = b"\r\n\r\n"
#: Values of answer headers the endpoint sets as they are (no line break in them).
_PLAIN_VALUES: Final = frozenset({EVENT_STREAM, JSON, b"no-cache", b"no"})
#: The status line of most answers, as twisted.web spells it (its code and reason),
#: not formatted again for each.
_STATUS_OK: Final = b"HTTP/1.1 200 OK\r\n"

#: The largest head the lean path reads; a longer one is twisted.web's to judge (its
#: own bound, C{totalHeadersSize}, is 16,384 bytes of lines).
MAX_HEAD: Final = 8192
#: The most header lines the lean path reads (twisted.web's own bound is 500).
MAX_HEADERS: Final = 64
#: Bytes of a next request held while one is answered, before the socket is no longer
#: read (twisted.web's C{_optimisticEagerReadSize}).
MAX_PENDING: Final = 0x4000

#: The bytes of a header line's value: printable ASCII and tab.
_VALUE_BYTES: Final = bytes(range(0x20, 0x7F)) + b"\t"
#: The line ends of as many header lines as the lean path reads, by their count.
_LINE_ENDS: Final = tuple(b"\r\n" * count for count in range(MAX_HEADERS + 1))
#: The bytes of a header's name (RFC 9110's token).
_TOKEN_BYTES: Final = (
    b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
)
#: Headers that make a request twisted.web's: other framing, other protocols.
_NOT_LEAN: Final = frozenset({b"transfer-encoding", b"expect", b"upgrade"})


class Head:
    """
    A lean request's head.

    @ivar fields: the header lines as sent, C{(name, value)}, values trimmed.
    @ivar length: the body's C{Content-Length}.
    @ivar size: the head's bytes, its blank line included.
    @ivar by_name: each header's value by its lowercased name (none is repeated).
    @ivar raw: the head's bytes, its blank line included.  Nothing changes a head once
        read: the next request of a connection that sends the same bytes gets it again
        (L{read_head}'s C{last}).
    @ivar before_length: C{raw} up to the C{Content-Length} value, when that value is
        plain digits after the colon and at most one space; else C{None}.
    @ivar after_length: C{raw} from the end of that value.
    """

    __slots__ = ("after_length", "before_length", "by_name", "fields", "length", "raw", "size")

    def __init__(
        self,
        fields: Sequence[tuple[bytes, bytes]],
        length: int,
        size: int,
        by_name: Mapping[bytes, bytes],
        raw: bytes,
    ) -> None:
        self.fields = fields
        self.length = length
        self.size = size
        self.by_name = by_name
        self.raw = raw
        self.before_length: bytes | None = None
        self.after_length = b""
        at = raw.lower().find(b"\r\ncontent-length:")
        if at >= 0:
            start = at + len(b"\r\ncontent-length:")
            if raw.startswith(b" ", start):
                start += 1
            end = raw.find(b"\r\n", start)
            if raw[start:end].isdigit():
                self.before_length = raw[:start]
                self.after_length = raw[end:]

    def with_length(self, data: bytes | bytearray) -> Head | None:
        """
        The head at the start of C{data} if it is this one's bytes but for the digits
        of its C{Content-Length} (a request of another size): those lines, read again.
        """
        before = self.before_length
        if before is None or not data.startswith(before):
            return None
        start = len(before)
        end = data.find(b"\r\n", start)
        if end < 0:
            return None
        digits = bytes(data[start:end])
        if not digits.isdigit() or not data.startswith(self.after_length, end):
            return None
        size = end + len(self.after_length)
        if size > MAX_HEAD:
            return None
        fields = [
            (name, digits) if name.lower() == b"content-length" else (name, value)
            for name, value in self.fields
        ]
        by_name = dict(self.by_name)
        by_name[b"content-length"] = digits
        head = Head.__new__(Head)
        head.fields = fields
        head.length = int(digits)
        head.size = size
        head.by_name = by_name
        head.raw = bytes(data[:size])
        head.before_length = before
        head.after_length = self.after_length
        return head

    def __repr__(self) -> str:
        return f"Head(fields={self.fields!r}, length={self.length}, size={self.size})"


class _Slow:
    """What L{read_head} says of a request the lean path leaves to twisted.web."""


SLOW: Final = _Slow()


def read_head(data: bytes | bytearray, last: Head | None = None) -> Head | _Slow | None:
    """
    The head at the start of C{data} if the request is lean, L{SLOW} if it is not, or
    C{None} while too little has arrived to tell.

    A head still arriving is judged by its whole lines so far, so one that twisted.web
    would refuse goes to it at once, as it would have without the lean path.

    @param last: the connection's last lean head: when C{data} begins with the same
        bytes, it is this head again (a client sends the same head, its
        C{Content-Length} included, request after request), read once.
    """
    if last is not None:
        if data.startswith(last.raw):
            # The first blank line is where it was in the last head: the same head.
            return last
        # The same lines but for the Content-Length's digits: the same head but for its
        # length (the first blank line is again at the end of the same last lines).
        again = last.with_length(data)
        if again is not None:
            return again
    if not data.startswith(_REQUEST_LINE):
        return None if _REQUEST_LINE.startswith(data) else SLOW
    end = data.find(_END, len(_REQUEST_LINE) - 2)
    if end < 0:
        if len(data) > MAX_HEAD:
            return SLOW
        whole = data.rfind(b"\r\n") + 2
        if whole > len(_REQUEST_LINE):
            so_far = _fields(bytes(data[len(_REQUEST_LINE) : whole]))
            if isinstance(so_far, _Slow) or _refused(so_far[1]):
                return SLOW
        return None
    size = end + len(_END)
    if size > MAX_HEAD or end < len(_REQUEST_LINE):
        return SLOW
    found = _fields(bytes(data[len(_REQUEST_LINE) : end + 2]))
    if isinstance(found, _Slow):
        return SLOW
    fields, seen = found
    length = seen.get(b"content-length")
    if length is None or _refused(seen):
        return SLOW
    return Head(fields, int(length), size, seen, bytes(data[:size]))


def _refused(seen: dict[bytes, bytes]) -> bool:
    """Whether headers seen so far make the request twisted.web's."""
    length = seen.get(b"content-length")
    connection = seen.get(b"connection")
    return (length is not None and not length.isdigit()) or (
        connection is not None and connection.lower() != b"keep-alive"
    )


def _fields(
    block: bytes,
) -> tuple[list[tuple[bytes, bytes]], dict[bytes, bytes]] | _Slow:
    """
    Header lines, each ending in CRLF: in order, and by lowercased name; or L{SLOW}.

    Each line is a token name, a colon and a value of printable ASCII and tabs; told by
    C{bytes} methods over the block, the names' bytes at once (two regular expressions
    over it, and a check of each name, cost more).
    """
    lines = block.split(b"\r\n")
    if lines.pop() or not lines:
        # Not whole lines (after the last CR LF, more), or none.
        return SLOW
    count = len(lines)
    if count > MAX_HEADERS or block.translate(None, _VALUE_BYTES) != _LINE_ENDS[count]:
        # Too many, or a byte no line holds, or a CR or LF of its own within a line:
        # what is left of the block without the bytes of values is its line ends alone
        # (one translate, rather than one for the bytes and a count each of CR and LF).
        return SLOW
    fields = []
    for line in lines:
        name, colon, value = line.partition(b":")
        if not name or not colon:
            return SLOW
        fields.append((name, value.strip(b" \t")))
    if b"".join([name for name, _ in fields]).translate(None, _TOKEN_BYTES):
        # A name of more than a token's bytes (told of all the names at once).
        return SLOW
    seen = {name.lower(): value for name, value in fields}
    if len(seen) != len(fields) or not _NOT_LEAN.isdisjoint(seen):
        # A header repeated (in any case), or one that makes it twisted.web's.
        return SLOW
    return fields, seen


#: The most header names L{spelled_name} remembers (twisted.web's own cache holds 10,000).
MAX_SPELLED: Final = 256
_spelled: dict[bytes, bytes] = {}


def spelled_name(name: object) -> bytes | None:
    """
    A response header's name in bytes as twisted.web's C{Headers} spells it on the
    wire (C{content-type}: C{Content-Type}), asked of C{Headers} once per name and
    remembered; C{None} for a name that is not bytes, or once L{MAX_SPELLED} are
    remembered (the caller then uses C{Headers} itself).

    @raise InvalidHeaderName: as C{Headers} does, for a name that is not a token.
    """
    spelled = _spelled.get(name)  # type: ignore[call-overload]
    if spelled is None and type(name) is bytes and len(_spelled) < MAX_SPELLED:
        headers = Headers()
        headers.setRawHeaders(name, [b""])
        [(found, _)] = headers.getAllRawHeaders()
        _spelled[name] = found
        return found
    return cast("bytes | None", spelled)


class HttpDate:
    """
    The C{Date} header's value now, as twisted.web's C{datetimeToString()} spells it,
    formatted once per second of the wall clock rather than once per request: the
    value names whole seconds, so it is the same bytes.
    """

    def __init__(self, now: Callable[[], float] = time.time) -> None:
        self._now = now
        self._second: int | None = None
        self._value = b""

    def __call__(self) -> bytes:
        second = int(self._now())
        if second != self._second:
            self._value = datetimeToString(second)
            self._second = second
        return self._value


class LeanRequest(BoundedRequest):
    """
    mcpx's own request for a lean C{POST /mcp}: twisted.web's, as the site's
    (L{mcpx.daemon.site.JSONRequest}: no form parsing, the body in memory), made from
    the lean head at once rather than a header line at a time.

    Every request header mcpx reads, it reads with C{getHeader} and a name in bytes:
    that is a lookup in the head's own table (L{Head.by_name}), and
    C{requestHeaders} is filled from the head only if something asks for it.  The
    values are the same bytes: the lean head holds token names, each once, and
    printable ASCII values without line breaks, which twisted.web's C{Headers} stores
    as they are.

    The answer's headers are kept the same way: C{setHeader} with a name and a value
    in bytes (no line break in it) stores the value under the name as twisted.web's
    C{Headers} spells it (L{spelled_name}), in a plain table in the order first set,
    and C{responseHeaders} is filled from that table only if something asks for it.
    The first write of an answer of known length (a JSON answer, a refusal) makes
    its head from the table, the bytes twisted.web's C{Request.write} and
    C{HTTPChannel.writeHeaders} make, and hands head and body to the channel
    together; any other answer (a stream, a cookie, a status without a body) is
    written by twisted.web's own C{write}, as are the writes after the first.
    """

    #: The answer being made (L{LeanMcp}), cancelled if the client goes away first.
    answering: _Answering | None = None
    #: Whether the client went away before the answer was finished.
    lost = False
    #: Told when the request is over (L{when_over}), if anything asked.
    _over: list[Callable[[object], object]] | None = None

    def __init__(
        self,
        channel: Any,
        head: Head,
        body: bytes,
        addresses: tuple[IAddress, IAddress] | None = None,
    ) -> None:
        """
        twisted.web's C{Request.__init__} (server's, then http's) for a channel whose
        site parses no forms, without making its two Headers: the request's are the
        head's and the answer's a table, each until something asks for them.

        @param addresses: the channel's C{getPeer()} and C{getHost()}, if it keeps
            them (a L{LeanChannel} does); else they are asked of it.
        """
        self.notifications: list[Deferred[None]] = []
        self.channel = channel
        if addresses is None:
            addresses = (channel.getPeer(), channel.getHost())
        self.client, self.host = addresses
        self._head_unread: Head | None = head
        self._request_headers: Headers | None = None
        self._answer_unset: dict[bytes, bytes] | None = {}
        self._response_headers: Headers | None = None
        self.received_cookies: dict[bytes, bytes] = {}
        self.cookies: list[bytes] = []
        self.transport = channel.transport
        self.queued = False
        parses_no_forms(self)
        Componentized.__init__(self)  # type: ignore[no-untyped-call]
        self.content = BytesIO(body)
        self.args = {}
        self.method = b"POST"
        self.uri = self.path = MCP_PATH
        self.clientproto = b"HTTP/1.1"

    def begin(self, date: bytes) -> None:
        """
        twisted.web's C{Request.process} defaults: the site, the C{Server} and C{Date}
        headers (C{date} is now's, L{HttpDate}), the path as traversed to C{/mcp}.
        """
        channel: Any = self.channel
        self.site = channel.site
        self._answer_unset = {b"Server": version, b"Date": date}
        self._response_headers = None
        self.prepath = []
        self.postpath = [MCP_PATH[1:]]

    @property
    def requestHeaders(self) -> Headers:
        """twisted.web's request headers, filled from the lean head at the first use."""
        headers = self._request_headers
        if headers is None:
            self._request_headers = headers = Headers()
            head = self._head_unread
            if head is not None:
                self._head_unread = None
                for name, value in head.fields:
                    headers.addRawHeader(name, value)
        return headers

    @requestHeaders.setter
    def requestHeaders(self, headers: Headers) -> None:
        self._head_unread = None
        self._request_headers = headers

    def getHeader(self, key: Any) -> Any:
        """twisted.web's C{getHeader}: for a name in bytes, read from the lean head."""
        head = self._head_unread
        if head is not None and type(key) is bytes:
            # Read as given first: mcpx asks by lowercase names, found without making
            # (and hashing) a lowercased copy.
            by_name = head.by_name
            value = by_name.get(key)
            if value is None and not key.islower():
                value = by_name.get(key.lower())
            return value
        return BoundedRequest.getHeader(self, key)

    @property
    def responseHeaders(self) -> Headers:
        """twisted.web's response headers, filled from the answer's table at the first use."""
        headers = self._response_headers
        if headers is None:
            self._response_headers = headers = Headers()
            fields = self._answer_unset
            if fields is not None:
                self._answer_unset = None
                for name, value in fields.items():
                    headers.setRawHeaders(name, [value])
        return headers

    @responseHeaders.setter
    def responseHeaders(self, headers: Headers) -> None:
        self._answer_unset = None
        self._response_headers = headers

    def setHeader(self, name: Any, value: Any) -> None:
        """twisted.web's C{setHeader}: a name and a value in bytes go to the answer's table."""
        fields = self._answer_unset
        if (
            fields is not None
            and type(value) is bytes
            # No line break in it: digits (a Content-Length), a value the endpoint sets
            # as it is (a Content-Type), or else looked for.  Told by isdigit and a set
            # first, as bytes.find parses its arguments (in C) at each call.  Not
            # `b"\r" not in value`: bytes' `in` first tries its operand as an integer,
            # and raises and drops a TypeError with a formatted message (about 1,500
            # instructions) before it looks for the bytes.
            and (
                value.isdigit()
                or value in _PLAIN_VALUES
                or (value.find(b"\r") < 0 and value.find(b"\n") < 0)
            )
        ):
            # spelled_name's table, read here first: a name the answer sets is there.
            spelled = _spelled.get(name)
            if spelled is None:
                spelled = spelled_name(name)
            if spelled is not None:
                fields[spelled] = value
                return
        self.responseHeaders.setRawHeaders(name, [value])

    def write(self, data: bytes) -> None:
        """
        twisted.web's C{Request.write}; the first write of an answer of known length
        makes its head from the answer's table and hands it to the channel with C{data}.
        """
        fields = self._answer_unset
        channel = self.channel
        if (
            fields is None
            or self.startedWriting
            or self.finished
            or type(data) is not bytes
            or self.code in NO_BODY_CODES
            or self.cookies
            or self.etag is not None
            or self.lastModified is not None
            or not frames_plainly(self)
            or type(channel) is not LeanChannel
            or channel._answering is not self
        ):
            BoundedRequest.write(self, data)  # type: ignore[no-untyped-call]
            return
        length = fields.get(b"Content-Length")
        if length is None or not length.isdigit():
            BoundedRequest.write(self, data)  # type: ignore[no-untyped-call]
            return
        # twisted.web's server.Request.write: the default Content-Type, unless the
        # body is empty by its length.
        if b"Content-Type" not in fields and length != b"0":
            default = self.defaultContentType
            if default is not None:
                fields[b"Content-Type"] = default
        # twisted.web's http.Request.write and HTTPChannel.writeHeaders.
        self.startedWriting = 1
        code = self.code
        message = self.code_message
        head = [
            _STATUS_OK
            if code == 200 and message == b"OK"
            else b"HTTP/1.1 %d %s\r\n" % (code, message)
        ]
        for name, value in fields.items():
            head += (name, b": ", value, b"\r\n")
        head.append(b"\r\n")
        self.sentLength = size = len(data)
        whole = int(length)
        if size >= whole:
            # The whole answer (most are): head and body joined once, sent now.
            head.append(data)
            write_now(channel.transport, b"".join(head))
            return
        channel.write_answer(b"".join(head), whole, data)

    def finish(self) -> None:
        """
        twisted.web's C{Request.finish} and C{_cleanup} for an answer written whole:
        logged by the site, the channel told, the body let go, C{notifyFinish} told.
        """
        channel = self.channel
        if (
            self.finished
            or not self.startedWriting
            or self.chunked
            or self.producer is not None
            or not frames_plainly(self)
            or type(channel) is not LeanChannel
        ):
            BoundedRequest.finish(self)  # type: ignore[no-untyped-call]
            if self.finished:
                self._tell_over(None)
            return
        factory = channel.factory
        if factory is not None:
            factory.log(self)
        self.finished = 1
        channel.requestDone(self)
        del self.channel
        content = self.content
        if content is not None:
            content.close()
            del self.content
        notifications = self.notifications
        if notifications:
            for finished in notifications:
                finished.callback(None)
            self.notifications = []
        if self._over is not None:
            self._tell_over(None)

    def when_over(self, callback: Callable[[object], object]) -> None:
        """
        Call C{callback} once the request is over, as a C{notifyFinish} Deferred's
        callbacks would be called but without the Deferred (L{mcpx.server.http_exchange}
        asks this of a request that says it can): with C{None} once it is finished, or
        the reason the client went away first.
        """
        over = self._over
        if over is None:
            self._over = [callback]
        else:
            over.append(callback)

    def _tell_over(self, outcome: object) -> None:
        over = self._over
        if over is not None:
            self._over = None
            for callback in over:
                try:
                    callback(outcome)
                except Exception:
                    log.failure("/mcp: a request's end was not taken")

    def connectionLost(self, reason: Failure) -> None:
        """
        The client went away: its answer is cancelled (as Klein cancels a route's
        Deferred), then twisted.web's request is told, and tells whoever waits on
        C{notifyFinish}.
        """
        self.lost = True
        answering, self.answering = self.answering, None
        if answering is not None:
            answering.cancel()
        BoundedRequest.connectionLost(self, reason)  # type: ignore[no-untyped-call]
        self._tell_over(reason)


class LeanMcp:
    """
    Answers a lean C{POST /mcp}: what twisted.web's C{Request.process} and Klein would
    do for it, without the traversal and the routing.
    """

    def __init__(self, gate: Gate, mcp: McpHTTP, date: HttpDate | None = None) -> None:
        self._gate = gate
        self._mcp = mcp
        self._date = date if date is not None else HttpDate()

    def answer(self, request: LeanRequest) -> None:
        """Answer C{request}, whose head and body are in place."""
        # Request.process's defaults, then Request.render's handling of what came back.
        request.begin(self._date())
        try:
            body = self._gate.guard(request, self._route)
        except BaseException:
            request.processingFailed(Failure())  # type: ignore[no-untyped-call]
            return
        if body is NOT_DONE_YET:
            return
        request.setHeader(b"content-length", b"%d" % len(body))
        request.write(body)
        request.finish()

    def _route(self, request: Any) -> Any:
        """
        The C{/mcp} route as Klein runs it (klein.resource's C{render}): an answer ready
        at once (L{McpHTTP.respond}) is returned; the rest of one that waits is run by
        L{_Answering}, as C{Deferred.fromCoroutine} would run it, without the Deferreds,
        and cancelled if the client goes away first (L{LeanRequest.connectionLost}).
        """
        mcp = self._mcp
        answer = mcp.respond(request)
        if answer is None or isinstance(answer, bytes):
            _answered(_written, mcp.framed(request, answer), request)
        else:
            _Answering(request, answer, mcp.framed)
        return NOT_DONE_YET


class _Answering(Stepping):
    """
    The rest of the C{/mcp} endpoint's answer to one request that waits, run as
    C{Deferred.fromCoroutine} would run it, without a Deferred of its own: a
    L{Started} coroutine (the endpoint's coroutine, or the handling of a L{Later},
    driven here directly, L{Stepping}) resumed with the result of each L{Deferred} it
    waits on (its failure thrown in), then its answer written (L{_written}) or its
    failure answered (L{_failed}).

    Made, it runs: from where a L{Later}'s handling waits, or from the coroutine's start.
    Until it ends, it is the request's C{answering}: L{cancel} (the client went away)
    cancels the Deferred it waits on, if it does, as cancelling C{fromCoroutine}'s
    Deferred would.
    """

    __slots__ = ("_args", "_framed", "_request", "_then")

    def __init__(
        self,
        request: LeanRequest,
        answer: Later | Coroutine[Any, Any, bytes | None],
        framed: Callable[[LeanRequest, bytes | None], bytes | None],
    ) -> None:
        self._request = request
        self._framed = framed
        self._waiting: Deferred[Any] | None = None
        #: What is driven: a coroutine, or none for a L{Later}'s Deferred, waited on.
        self._running: Started | None
        # Set once rather than at each wait: it is let go when the answer is written
        # or failed (_written, _failed) or the client goes away (connectionLost), and
        # cancel does nothing while no Deferred is waited on.
        if not request.lost:
            request.answering = self
        if isinstance(answer, Later):
            # Later.finish's parts, called without its call (_ended).
            self._then: Callable[..., bytes | None] | None = answer.then
            self._args = answer.args
            handling = answer.handling
            if isinstance(handling, Started):
                self._running = handling
                self._wait(handling.waiting)
            else:
                self._running = None
                self._wait(handling)
        else:
            self._running = Started(answer)
            self._then = None
            self.step(None)

    def _ended(self, outcome: object) -> None:
        """The coroutine ended with C{outcome}: the answer (a L{Later}'s), written."""
        request = self._request
        then = self._then
        if then is not None:
            try:
                outcome = then(outcome, *self._args)
            except BaseException:
                _answered(_failed, Failure(), request)
                return
        elif isinstance(outcome, Failure):
            _answered(_failed, outcome, request)
            return
        # The route's bytes (or None, streamed), typed as such without a typing.cast call.
        body: bytes | None = outcome  # type: ignore[assignment]
        _answered(_written, self._framed(request, body), request)

    def cancel(self) -> None:
        """Cancel the Deferred the coroutine waits on: it is resumed with the outcome."""
        waiting = self._waiting
        if waiting is not None:
            waiting.cancel()


def _answered(
    outcome: Callable[[Any, LeanRequest], None], result: object, request: LeanRequest
) -> None:
    """C{outcome(result, request)}; if writing the answer fails, that is logged."""
    try:
        outcome(result, request)
    except BaseException:
        log.failure("/mcp: writing an answer failed")


def _written(body: bytes | None, request: LeanRequest) -> None:
    """The route's answer is made: write it (unless streamed) and finish."""
    request.answering = None
    if request.lost:
        # As on twisted.web's path, where the request is already disconnected when
        # Klein cancels its route: nothing is written to a client gone.
        return
    if body is not None:
        request.write(body)
    if not request.finished:
        request.finish()


def _failed(failure: Failure, request: LeanRequest) -> None:
    """The route failed: twisted.web's C{processingFailed}, unless the answer is over."""
    request.answering = None
    if request.finished or request.lost:
        if not failure.check(CancelledError):
            log.failure("/mcp: answering a request failed", failure)
        return
    request.processingFailed(failure)  # type: ignore[no-untyped-call]


class LeanChannel(LimitedChannel):
    """
    The daemon's HTTP channel with the lean path in front: a lean C{POST /mcp} is
    answered by L{LeanMcp}; at the first request that is not, the connection becomes
    the plain L{LimitedChannel} it also is, for good.
    """

    def __init__(
        self, admission: Admission, peer: str | None, clock: IReactorTime, lean: LeanMcp
    ) -> None:
        LimitedChannel.__init__(self, admission, peer, clock)
        self._lean = lean
        #: What arrived of the next requests: the bytes as received, or a bytearray once
        #: more is appended or requests sent together are taken off it.
        self._pending: bytes | bytearray = b""
        self._head: Head | None = None
        #: The last lean head read, to know it again (L{read_head}).
        self._last_head: Head | None = None
        self._answering: Request | None = None
        self._slow = False
        self._own_address: IAddress | None = None
        self._peer_address: IAddress | None = None
        #: The peer's and the own address, for each request (asked once, L{_start}).
        self._addresses: tuple[IAddress, IAddress] | None = None
        #: The lean answer being written, head first, until its C{Content-Length} is
        #: all there: then it is sent in one piece, now if nothing is queued
        #: (L{write_now}), rather than as a head and a body buffered for the reactor's
        #: next pass.  Streams (chunked) are written as they come.
        self._held: list[bytes] | None = None
        self._held_left = 0
        #: The socket is not read because too much of a next request is held (see
        #: L{dataReceived}): the answer being made resumes it.
        self._held_back = False

    @property
    def slow(self) -> bool:
        """Whether the connection went to twisted.web (it stays there)."""
        return self._slow

    def dataReceived(self, data: bytes) -> None:
        # _closing, not the closing property: read twice a request, without a call.
        if self._slow or self._closing:
            LimitedChannel.dataReceived(self, data)
            return
        pending = self._pending
        if type(pending) is bytearray:
            pending += data
        elif not pending and type(data) is bytes:
            # Most often a whole request: read as it came, not copied.
            self._pending = data
        else:
            self._pending = bytearray(pending) + data
        if self._answering is not None:
            # A next request, held until this one is answered (as twisted.web does).
            if len(self._pending) > MAX_PENDING and not waiting_for_transport(self):
                self._held_back = True
                network_producer(self).pauseProducing()
            return
        self._next()

    def _next(self) -> None:
        """Answer the lean requests held, until one is incomplete or not lean."""
        while self._pending and self._answering is None and not self._slow and not self._closing:
            # The header and body deadlines are set only when the request is still
            # arriving: one that is whole in the same call could not miss them.
            head = self._head
            if head is None:
                last = self._last_head
                if last is not None and self._pending.startswith(last.raw):
                    # read_head's first look, without its call: the same head again.
                    found: Head | _Slow | None = last
                else:
                    found = read_head(self._pending, last)
                if found is None:
                    self.headers_begun()
                    return
                if isinstance(found, _Slow):
                    self.headers_begun()
                    self._become_slow()
                    return
                if not self.body_allowed(found.length):
                    return
                self._head = self._last_head = head = found
                if len(self._pending) < head.size + head.length:
                    self.body_awaited()
            end = head.size + head.length
            if len(self._pending) < end:
                return
            pending = self._pending
            body = bytes(pending[head.size : end])
            if end == len(pending):
                self._pending = b""
            elif isinstance(pending, bytes):
                # Requests sent together: the rest is taken off a request at a time.
                self._pending = bytearray(pending[end:])
            else:
                del pending[:end]
            self._head = None
            self._start(head, body)

    def _become_slow(self) -> None:
        """Hand the connection, with what it sent so far, to twisted.web."""
        self._slow = True
        data = bytes(self._pending)
        self._pending = b""
        LimitedChannel.dataReceived(self, data)

    def _start(self, head: Head, body: bytes) -> None:
        addresses = self._addresses
        if addresses is None:
            addresses = self._addresses = (self.getPeer(), self.getHost())
        request = LeanRequest(self, head, body, addresses)
        self.requests.append(request)
        self._answering = request
        handling_request(self, True)
        self.request_whole()
        self._lean.answer(request)

    def resumeProducing(self) -> None:
        """
        HTTPChannel.resumeProducing: the transport can send again.  It leaves the
        socket paused while a request is answered; a lean one resumes it when answered.
        """
        LimitedChannel.resumeProducing(self)  # type: ignore[no-untyped-call]
        if self._answering is not None:
            self._held_back = True

    def getHost(self) -> IAddress:
        """
        The connection's own address, asked of the transport once: each request asks
        for it (twisted.web's C{Request.__init__}), and a unix socket's transport makes
        a new address from a C{getsockname} call every time.  A connected socket's
        addresses do not change.
        """
        if self._own_address is None:
            transport: Any = self.transport
            self._own_address = transport.getHost()
        return self._own_address

    def getPeer(self) -> IAddress:
        """The peer's address, asked of the transport once (see L{getHost})."""
        if self._peer_address is None:
            transport: Any = self.transport
            self._peer_address = transport.getPeer()
        return self._peer_address

    def writeHeaders(self, version: bytes, code: bytes, reason: bytes, headers: Any) -> None:
        """
        HTTPChannel.writeHeaders, the head joined here and written once: the transport's
        C{writeSequence} would check each of its two dozen pieces on the way.  A lean
        answer with a C{Content-Length} is held until its body is written too, then
        sent with it in one piece.
        """
        if not isinstance(headers, Headers):
            # The backward-compatible form, which twisted.web sanitizes first.
            LimitedChannel.writeHeaders(self, version, code, reason, headers)  # type: ignore[no-untyped-call]
            return
        head = [version, b" ", code, b" ", reason, b"\r\n"]
        for name, values in headers.getAllRawHeaders():
            for value in values:
                head += (name, b": ", value, b"\r\n")
        head.append(b"\r\n")
        joined = b"".join(head)
        answering = self._answering
        length = headers.getRawHeaders(b"content-length")
        if answering is not None and not answering.chunked and length and length[0].isdigit():
            # A lean answer of known length: its head waits for its body, and both go
            # out in one send (see L{_held}).
            self._held = [joined]
            self._held_left = int(length[0])
            if self._held_left == 0:
                self._send_held()
            return
        transport: Any = self.transport
        transport.write(joined)

    def write_answer(self, head: bytes, length: int, data: bytes) -> None:
        """
        A lean answer's head, made by L{LeanRequest.write}, with the first C{data} of a
        body of C{length} bytes: sent with it in one piece once the body is all there
        (see L{_held}).
        """
        if len(data) >= length:
            write_now(self.transport, head + data)
            return
        self._held = [head, data]
        self._held_left = length - len(data)

    def write(self, data: bytes) -> None:
        """HTTPChannel.write, or a held answer's body, sent once it is all there."""
        if self._held is None:
            transport: Any = self.transport
            transport.write(data)
            return
        self._held.append(data)
        self._held_left -= len(data)
        if self._held_left <= 0:
            self._send_held()

    def writeSequence(self, iovec: Any) -> None:
        """HTTPChannel.writeSequence, or more of a held answer's body."""
        if self._held is None:
            transport: Any = self.transport
            transport.writeSequence(iovec)
            return
        for data in iovec:
            self.write(data)

    def _send_held(self) -> None:
        """The held answer, head and body, in one L{write_now}."""
        held = self._held
        if held is None:
            return
        self._held = None
        write_now(self.transport, b"".join(held))

    def requestDone(self, request: Any) -> None:
        if request is not self._answering:
            LimitedChannel.requestDone(self, request)
            return
        # HTTPChannel.requestDone, for a request it did not parse.
        if self._held is not None:
            self._send_held()
        self._answering = None
        del self.requests[0]
        handling_request(self, False)
        self.request_answered()
        if self._held_back and not waiting_for_transport(self):
            # Only the lean path pauses the socket while a request is answered (a
            # twisted.web channel pauses it for every request); the transport's own
            # pause, while it cannot send, is resumed by the transport.
            self._held_back = False
            network_producer(self).resumeProducing()
        if not self.persistent:
            self.loseConnection()  # type: ignore[no-untyped-call]
            return
        if self._pending:
            self._next()
