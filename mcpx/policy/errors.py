# -*- test-case-name: tests.policy.test_guard -*-
"""What the policy refuses, each with its HTTP status and JSON-RPC error."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from mcpx.pool.errors import PoolError
from mcpx.wire.errors import INTERNAL_ERROR, INVALID_PARAMS, RpcError


class PolicyRefusal(PoolError):
    """
    A call the policy refused before (or instead of) passing its result on.

    A L{PoolError}, so the entry points that turn pool errors into tool errors (the
    gateway's C{mcpx_call}) show its message as it is.

    @cvar status: the C{/v1} answer's HTTP status.
    @cvar rpc_code: the JSON-RPC error code an MCP request gets.
    """

    code: ClassVar[str] = "policy_refused"
    status: ClassVar[int] = 403
    rpc_code: ClassVar[int] = INVALID_PARAMS

    def __init__(self, message: str, data: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.data: dict[str, Any] = dict(data or {})

    def rpc_error(self) -> RpcError:
        return RpcError(self.rpc_code, self.message, self.data or None)


class ToolHidden(PolicyRefusal):
    """The tool is hidden by C{tools.allow} or C{tools.deny}."""

    code: ClassVar[str] = "tool_denied"
    status: ClassVar[int] = 403


class InvalidArguments(PolicyRefusal):
    """The arguments do not fit the tool's C{inputSchema} (C{validate.input: enforce})."""

    code: ClassVar[str] = "invalid_arguments"
    status: ClassVar[int] = 400


class InvalidOutput(PolicyRefusal):
    """The result's C{structuredContent} does not fit C{outputSchema} (C{validate.output})."""

    code: ClassVar[str] = "invalid_output"
    status: ClassVar[int] = 502
    rpc_code: ClassVar[int] = INTERNAL_ERROR


def problems_text(problems: Sequence[Mapping[str, str]]) -> str:
    """The first problems as one line: C{path: reason; path: reason}."""
    return "; ".join(f"{p['path'] or '(arguments)'}: {p['reason']}" for p in problems)
