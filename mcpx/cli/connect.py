# -*- test-case-name: tests.cli.test_remote,tests.cli.test_quick -*-
"""
The daemon a command asks: the local one, or the one C{MCPX_DAEMON} (or C{--daemon})
names on another machine (L{mcpx.cli.remote}, imported only then: a plain C{mcpx call}
to the local daemon does without ssh's machinery).
"""

from __future__ import annotations

import os

from mcpx.cli.client import DEFAULT_CLIENT, DaemonClient, default_socket_name


def connect(client: str = DEFAULT_CLIENT) -> DaemonClient:
    """
    The client of the daemon this command uses: the one C{MCPX_DAEMON} (or C{--daemon})
    names (L{mcpx.cli.remote}), else the local one of the state directory.

    @raise mcpx.cli.client.BadEndpoint: C{MCPX_DAEMON} is not a daemon mcpx can use.
    """
    if os.environ.get("MCPX_DAEMON", "").strip():
        # Deferred for start-up time: only a remote daemon needs ssh's machinery.
        from mcpx.cli.remote import SshDaemonClient, endpoint_from_environment

        endpoint = endpoint_from_environment()
        if endpoint is not None:
            return SshDaemonClient(endpoint, client)
    # A string path: the fast path of `mcpx call` never imports pathlib.
    return DaemonClient(default_socket_name(), client)
