"""
The host's roots reach a server that takes its allowed directories from them, with two
servers passed through: C{@modelcontextprotocol/server-filesystem} started with no
directory asks its client for roots at start (outside any call), and mcpx must put that
question to the host whose instance it is (C{scope: client}) rather than answer it
itself.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.context import ClientRequestContext
from twisted.trial.unittest import SynchronousTestCase

from tests.support.peers import node22
from tests.support.real_servers import Data, _npm, in_worker, make_data, start_daemon


class FilesystemRootsTests(SynchronousTestCase):
    """A roots-driven filesystem server beside the memory server, both passed through."""

    def setUp(self) -> None:
        self.data: Data = make_data(Path(tempfile.mkdtemp(prefix="mcpx-roots-")))
        node = node22()
        servers: dict[str, dict[str, Any]] = {
            "memory": {
                "command": node,
                "args": [_npm("server-memory")],
                "env": {"MEMORY_FILE_PATH": str(self.data.memory_file)},
            },
            # No directory on the command line: it takes them from its client's roots,
            # asked at its start, outside any call: a host's roots only reach an instance
            # of its own (a shared one would get the configured roots, proto.roots).
            "fsroots": {"command": node, "args": [_npm("server-filesystem")], "scope": "client"},
        }
        self.daemon = start_daemon(self.data, servers=servers)
        self.addCleanup(self.daemon.stop)

    def test_host_roots_reach_the_server(self) -> None:
        """
        Through C{mcpx serve --passthrough memory,fsroots} an SDK host whose roots callback
        names a directory is asked, and the server reads a file inside it on the first call
        (before the fix nobody asked the host, mcpx answered no roots, and every read was
        refused).
        """
        tree = self.data.tree
        # A small file: the 30 MB one beside it is test_real_matrix's large answer, and
        # read through serve it only measures how the host's SDK gathers a long line.
        inside = tree / "notes.txt"
        asked: list[int] = []

        async def list_roots(context: ClientRequestContext) -> types.ListRootsResult:
            asked.append(1)
            return types.ListRootsResult(
                roots=[types.Root.model_validate({"uri": tree.as_uri(), "name": "tree"})]
            )

        async def conversation() -> tuple[Any, Any]:
            params = self.daemon.serve_params("--passthrough", "memory,fsroots")
            async with Client(
                params, mode="legacy", list_roots_callback=list_roots, cache=None
            ) as client:
                names = {tool.name for tool in (await client.list_tools()).tools}
                assert {"read_text_file", "read_graph"} <= names, names
                # The server applies the roots it is answered on its own time (its
                # roots/list goes out when it starts, the answer is handled later), so
                # a call racing that answer may still see none: look until they arrive.
                for _ in range(50):
                    allowed = await client.call_tool("list_allowed_directories", {})
                    if str(tree) in " ".join(getattr(b, "text", "") for b in allowed.content):
                        break
                    await anyio.sleep(0.1)
                read = await client.call_tool("read_text_file", {"path": str(inside)})
                return allowed, read

        allowed, read = in_worker(conversation)
        self.assertTrue(asked, "the host's roots callback was never asked")
        allowed_text = " ".join(getattr(block, "text", "") for block in allowed.content)
        self.assertIn(str(tree), allowed_text)
        self.assertFalse(read.is_error, read)
        text = " ".join(getattr(block, "text", "") for block in read.content)
        self.assertEqual(text, inside.read_text())
