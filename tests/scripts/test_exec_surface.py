"""
C{mcpx_exec} over MCP does not take C{/v1}'s C{"task"} flag: its schema leaves it out,
and a call that passes it is told how to run a program as a task over MCP instead.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from mcpx.ops.table import OPS
from mcpx.server.gateway_tools import gateway_tools
from mcpx.spec.revision import Revision
from tests.server import Harness, Session, result_of


class ExecTaskFlagTests(SynchronousTestCase):
    def test_schema_over_mcp_has_no_task_but_v1_has(self) -> None:
        [tool] = [t for t in gateway_tools() if t.name == "mcpx_exec"]
        self.assertNotIn("task", tool.definition["inputSchema"]["properties"])
        self.assertIn("program", tool.definition["inputSchema"]["properties"])
        [op] = [op for op in OPS if op.name == "exec"]
        self.assertIn("task", op.properties)

    def test_task_argument_refused_with_the_mcp_way(self) -> None:
        session = Session(Revision.V2025_11_25, Harness())
        result = result_of(
            session.harness.request(
                "tools/call",
                {"name": "mcpx_exec", "arguments": {"program": "1", "task": True}},
            )
        )
        self.assertTrue(result["isError"])
        [block] = result["content"]
        self.assertIn('takes no "task" argument', block["text"])
        self.assertIn("make the tools/call itself a task", block["text"])
