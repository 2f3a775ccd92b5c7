# -*- test-case-name: tests.upstream.test_http -*-
"""
The standalone GET stream of a legacy Streamable HTTP session, on which the server
sends what it starts on its own.
"""

from __future__ import annotations

from typing import Any, Protocol

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.iweb import IResponse

from mcpx.once import Once
from mcpx.upstream.http_client import (
    EVENT_STREAM,
    BodyReader,
    ChannelParts,
    deliver,
    discard_body,
    explain,
    media_type,
)
from mcpx.wire.sse import MESSAGE, SSEDecoder

log = Logger()


class ListenChannel(ChannelParts, Protocol):
    """What a L{ListenStream} needs of its channel (L{mcpx.upstream.http.StreamableHTTPChannel})."""

    reconnect_attempts: int
    reconnect_delay: float


class ListenStream:
    """
    The standalone GET stream of a legacy session, for what the server starts on its
    own: reopened when it ends (from the last event id it gave), with a growing delay,
    until too many attempts in a row bring nothing.
    """

    def __init__(self, channel: ListenChannel) -> None:
        self.channel = channel
        self.stopped = False
        self.failures = 0
        self.last_event_id = ""
        self.retry: int | None = None
        self.pending: Deferred[Any] | None = None
        self.reader: BodyReader | None = None
        self.decoder: SSEDecoder | None = None
        self.timer: IDelayedCall | None = None
        #: Fires once the server has answered the first C{GET}.
        self._answered: Once[None] = Once()

    def when_answered(self) -> Deferred[None]:
        """
        A fresh Deferred that fires once the server has answered the first C{GET} (a
        stream, a 405, a refusal or no connection at all): from then on, what the
        server starts on its own has somewhere to go.
        """
        return self._answered.wait()

    def open(self) -> None:
        self.timer = None
        if self.stopped:
            return
        self.pending = self.channel.open_stream(self.last_event_id)
        self.pending.addCallbacks(self._response, self._unreachable).addErrback(self._bug)

    def _bug(self, failure: Failure) -> None:
        log.failure("{url}: the GET stream failed", failure, url=self.channel.shown_url)

    def _response(self, response: IResponse) -> None:
        self.pending = None
        self._answered.fire(None)
        channel = self.channel
        if self.stopped:
            discard_body(response, self.channel.reactor)
            return
        if response.code == 405:
            log.debug("{url} offers no GET stream (HTTP 405)", url=channel.shown_url)
            discard_body(response, self.channel.reactor)
            self.stopped = True
            return
        if not (200 <= response.code < 300 and media_type(response) == EVENT_STREAM):
            log.warn(
                "{url} refused the GET stream with HTTP {code}",
                url=channel.shown_url,
                code=response.code,
            )
            discard_body(response, self.channel.reactor)
            self._reopen_later()
            return
        decoder = SSEDecoder(channel.max_message_size)
        decoder.last_event_id, decoder.retry = self.last_event_id, self.retry
        self.decoder = decoder
        self.reader = BodyReader(self._data, self.channel.reactor)
        response.deliverBody(self.reader)
        self.reader.done.addBoth(self._ended).addErrback(self._bug)

    def _unreachable(self, failure: Failure) -> None:
        self.pending = None
        self._answered.fire(None)
        if self.stopped:
            return
        log.warn(
            "the GET stream to {url} failed: {reason}",
            url=self.channel.shown_url,
            reason=explain(failure),
        )
        self._reopen_later()

    def _data(self, data: bytes) -> None:
        assert self.decoder is not None
        channel = self.channel
        for event in self.decoder.feed(data):
            self.failures = 0
            if event.event == MESSAGE and event.data and not self.stopped and not channel.closed:
                deliver(channel.peer, event.data)

    def _ended(self, result: object) -> None:
        self.reader = None
        if self.decoder is not None:
            self.last_event_id, self.retry = self.decoder.last_event_id, self.decoder.retry
        if self.stopped:
            return
        if isinstance(result, Failure):
            log.info(
                "the GET stream from {url} broke: {reason}",
                url=self.channel.shown_url,
                reason=explain(result),
            )
        self._reopen_later()

    def _reopen_later(self) -> None:
        channel = self.channel
        self.failures += 1
        if self.failures > channel.reconnect_attempts:
            log.warn(
                "giving up on the GET stream from {url} after {n} attempts",
                url=channel.shown_url,
                n=self.failures - 1,
            )
            self.stopped = True
            return
        if self.retry is not None:
            delay = self.retry / 1000
        else:
            delay = min(channel.reconnect_delay * 2 ** (self.failures - 1), 30.0)
        self.timer = channel.clock.callLater(delay, self.open)

    def stop(self) -> Deferred[None]:
        """Close the stream and stop reopening it; fires once its connection is closed."""
        self._answered.fire(None)
        self.stopped = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.pending is not None:
            pending, self.pending = self.pending, None
            pending.cancel()
        if self.reader is not None:
            done: Deferred[None] = Deferred()
            self.reader.done.addBoth(lambda _: done.callback(None))
            self.reader.abort()
            return done
        return succeed(None)
