# -*- test-case-name: tests.wire.test_prompt_write -*-
"""
Writing a whole message to a Twisted transport in the call that has it, not on the
reactor's next pass.

Twisted's C{FileDescriptor.write} only buffers: it calls C{startWriting()} (an
C{epoll_ctl} to watch the descriptor for writability), the bytes go out on the next
pass of the loop (C{doWrite}, then C{writeSomeData}), and C{stopWriting()} (another
C{epoll_ctl}) follows.  A sequential MCP call pays that twice, for the request down an
upstream's stdin and for the answer up the client's socket: two passes of latency,
four system calls and the loop's bookkeeping.  When nothing is queued on the
descriptor, a send now is what that next pass would do anyway, in the same order.
"""

from __future__ import annotations

import os
from typing import Any

from twisted.internet.abstract import FileDescriptor
from twisted.internet.process import ProcessWriter

from mcpx.wire.twisted_private import nothing_queued, watched_for_reading

__all__ = ["write_now"]


def write_now(transport: Any, data: bytes) -> None:
    """
    Write C{data} to C{transport}: sent at once as far as the kernel takes it when
    C{transport} is a plain, connected descriptor with nothing queued, and the rest (or
    everything, on any other transport) through C{transport.write}.

    Bytes already queued go first: with anything buffered, or a producer paused by a
    full buffer, the data is only queued behind them.  A TLS connection, a wrapper or a
    test's transport is never a plain descriptor here, so it just gets C{write}.
    """
    # Whether a send now keeps the order of everything written to the transport.
    if not (
        isinstance(transport, FileDescriptor)
        and not getattr(transport, "TLS", False)
        and transport.connected
        and not transport.disconnecting
        and not transport.dataBuffer
        and nothing_queued(transport)
        and not transport.producerPaused
    ):
        transport.write(data)
        return
    if type(transport) is ProcessWriter and watched_for_reading(transport):
        # A process's stdin: its writeSomeData asks the reactor to watch it for reading
        # after every whole write (its "read hack": a pipe's write end reads ready only
        # once the child closed it), which changes nothing while it is watched, as it
        # is between writes (only its write stops that, until its buffer is sent).
        # Written as Twisted's writeToFD writes, whose every failure (EAGAIN, EINTR, a
        # closed pipe) ends in the write below.
        sent: Any
        try:
            sent = os.write(transport.fd, data)
        except OSError:
            sent = -1
    else:
        sent = transport.writeSomeData(data)
    if isinstance(sent, Exception) or sent < 0:
        # The connection is gone: Twisted's own path finds that and tells the protocol,
        # as it would have on the next pass (a pipe that could take nothing yet waits).
        transport.write(data)
        return
    if sent < len(data):
        # The kernel's buffer is full (or took part): the rest waits for writability.
        transport.write(data[sent:])
