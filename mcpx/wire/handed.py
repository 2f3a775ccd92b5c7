"""
What a host's stdin and stdout must be for C{mcpx serve} to hand them to the daemon
(C{SCM_RIGHTS}), asked by the bridge before it hands them and by the daemon when it takes
them (L{mcpx.server.mcp_socket}).  The standard library only: the CLI imports it without
Twisted.
"""

from __future__ import annotations

import os
import stat


def handable(fd: int) -> bool:
    """Whether C{fd} is a pipe or a socket, as a host gives: what the daemon reads and writes."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)
