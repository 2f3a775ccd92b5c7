"""
The private Twisted and Klein names of L{mcpx.wire.twisted_private}: read in the versions
it pins, and still there.
"""

from __future__ import annotations

from importlib.metadata import version

from twisted.internet.abstract import FileDescriptor
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.http import HTTPChannel
from twisted.web.server import Request
from twisted.web.test.requesthelper import DummyChannel

import twisted
from mcpx.wire import twisted_private
from mcpx.wire.twisted_private import (
    PINNED,
    handling_request,
    http11_client_factory,
    network_producer,
    nothing_queued,
    request_not_sent,
    url_refused_by_klein,
    waiting_for_transport,
)


class PinnedTests(SynchronousTestCase):
    def test_installed_versions_are_the_pinned_ones(self) -> None:
        """
        Another Twisted or Klein than the one whose source the private names were read
        in fails here, loudly, before anything relies on them.
        """
        installed = {"twisted": twisted.__version__, "klein": version("klein")}
        self.assertEqual(
            installed,
            PINNED,
            "Twisted or Klein changed: read each private name of "
            f"{twisted_private.__file__} in the new source, check it still means what its "
            "docstring says (or stop using it), then update PINNED",
        )


class NamesTests(SynchronousTestCase):
    def test_file_descriptor_write_state(self) -> None:
        """A descriptor's write state reads as nothing queued, and something once queued."""
        descriptor = FileDescriptor()
        self.assertTrue(nothing_queued(descriptor))
        descriptor._tempDataBuffer.append(b"x")
        self.assertFalse(nothing_queued(descriptor))

    def test_http_channel_state(self) -> None:
        """An HTTP channel's request state is where the lean path reads and sets it."""
        channel = HTTPChannel()
        channel.makeConnection(StringTransport())
        self.assertFalse(waiting_for_transport(channel))
        self.assertIsNotNone(network_producer(channel))
        handling_request(channel, True)
        self.assertTrue(channel._handlingRequest)
        handling_request(channel, False)
        self.assertFalse(channel._handlingRequest)

    def test_klein_url_check(self) -> None:
        """A path that is not UTF-8 (once percent-decoded) is refused as Klein would."""
        for path, refused in ((b"mcp", False), (b"\xff", True)):
            request = Request(DummyChannel())
            request.prepath, request.postpath = [], [path]
            request.setHost(b"localhost", 80)
            self.assertEqual(url_refused_by_klein(request), refused, path)

    def test_client_names(self) -> None:
        """The HTTP/1.1 client's connection factory and its not-sent error are classes."""
        self.assertIsInstance(http11_client_factory(), type)
        self.assertTrue(issubclass(request_not_sent(), Exception))
