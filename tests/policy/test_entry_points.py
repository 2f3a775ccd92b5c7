"""How each entry point spells the policy's refusals: /v1 statuses, MCP errors."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from mcpx.ops.errors import error_from
from mcpx.policy.errors import InvalidArguments, InvalidOutput, ToolHidden
from mcpx.wire.errors import INTERNAL_ERROR, INVALID_PARAMS


class V1Tests(SynchronousTestCase):
    def test_invalid_arguments_400_with_field(self) -> None:
        error = error_from(
            InvalidArguments("bad", {"errors": [{"path": "/item/title", "reason": "x"}]})
        )
        self.assertEqual((error.status, error.code), (400, "invalid_arguments"))
        self.assertEqual(error.field, "arguments.item.title")

    def test_hidden_tool_403(self) -> None:
        error = error_from(ToolHidden("tool 'x' is hidden by its tools.deny pattern 'x'"))
        self.assertEqual((error.status, error.code), (403, "tool_denied"))
        self.assertIn("tools.deny", error.message)

    def test_invalid_output_502(self) -> None:
        self.assertEqual(error_from(InvalidOutput("bad")).status, 502)


class McpTests(SynchronousTestCase):
    def test_codes(self) -> None:
        self.assertEqual(InvalidArguments("bad").rpc_error().code, INVALID_PARAMS)
        self.assertEqual(ToolHidden("bad").rpc_error().code, INVALID_PARAMS)
        self.assertEqual(InvalidOutput("bad").rpc_error().code, INTERNAL_ERROR)
