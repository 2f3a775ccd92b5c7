# -*- test-case-name: tests.server.test_surface -*-
"""
mcpx's own tools, as a host lists them: C{mcpx_call}, then one tool per gateway op of
the operation table (L{mcpx.ops.table.OPS}, the ops marked C{gateway}), so the CLI,
C{/v1} and MCP take the same input.  How they answer is L{mcpx.server.surface}'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from attrs import frozen

from mcpx.ops.op import Op
from mcpx.ops.table import OPS

#: What every name of mcpx's own tools starts with: reserved for the gateway, present
#: tools and future ones alike; no pass-through server's tool is offered under such a
#: name (L{mcpx.server.passthrough_names.PassedThrough.reserved_tool}).
RESERVED_PREFIX: Final = "mcpx_"

CALL_TOOL: Final = "mcpx_call"
EXEC_TOOL: Final = "mcpx_exec"

#: What a model is told about C{mcpx_exec}: enough to write a working program.
EXEC_DESCRIPTION: Final = (
    "Run a short Python program that calls the configured servers' tools and returns only "
    "what matters, instead of calling them one by one. Each server is a name and each "
    "tool an async function with keyword arguments: `r = await demo.add(a=2, b=40)`. "
    "Results are plain values (structured content, else text); a failed call raises "
    "RuntimeError with the server's message. Run calls in parallel with "
    "`await asyncio.gather(...)` (import asyncio). SERVERS lists the servers; "
    '`print(await stubs("demo"))` shows one server\'s tools as Python signatures. The '
    "last expression is the result, print() is the output; files written under /out "
    "become resources. No other files, network or processes."
)

#: The MCP tool name of each gateway op; an op not named here is C{mcpx_<op name>}.
TOOL_NAMES: Final[Mapping[str, str]] = {
    "call_tool": CALL_TOOL,
    "exec": EXEC_TOOL,
    "list_servers": "mcpx_servers",
    "list_tools": "mcpx_tools",
    "describe_tool": "mcpx_describe",
    "get_task": "mcpx_task",
    "get_prompt": "mcpx_prompt",
    "read_resource": "mcpx_read",
    "complete": "mcpx_complete",
    "restart_server": "mcpx_restart",
    "reload": "mcpx_reload",
    "get_settings": "mcpx_settings",
    "get_protocol": "mcpx_protocol",
}

#: Ops whose work only reads (besides every GET).
_READ_ONLY_POSTS: Final = frozenset(("get_prompt", "read_resource", "complete"))

#: What the C{call_tool} op takes that C{mcpx_call} does not: MCP has its own ways
#: (C{_meta.progressToken}, and tasks where the revision has them), and an MCP call is
#: named by mcpx itself (C{call_id}).
_NOT_IN_MCPX_CALL: Final = frozenset(("task", "progress", "call_id"))

_DESCRIPTIONS: Final[Mapping[str, str]] = {
    "server": "The configured server to call (mcpx_servers lists them).",
    "tool": "The tool's name on that server (mcpx_tools lists them, mcpx_describe shows "
    "one's input schema).",
    "arguments": "The tool's arguments, as its input schema describes them.",
    "timeout": "Seconds to wait at most; clamped to pool.callTimeout.",
}


@frozen
class GatewayTool:
    """
    One of mcpx's own tools.

    @ivar definition: the C{Tool}, in the newest shape.
    @ivar op: the operation it runs, or C{None} for C{mcpx_call}.
    """

    name: str
    definition: Mapping[str, Any]
    op: Op | None


def _mcpx_call_schema(op: Op) -> dict[str, Any]:
    properties = {
        name: {**schema, "description": _DESCRIPTIONS[name]} if name in _DESCRIPTIONS else schema
        for name, schema in op.properties.items()
        if name not in _NOT_IN_MCPX_CALL
    }
    return {
        "type": "object",
        "properties": properties,
        "required": [name for name in op.required if name in properties],
        "additionalProperties": False,
    }


def _op_tool(op: Op) -> GatewayTool:
    name = TOOL_NAMES.get(op.name, f"{RESERVED_PREFIX}{op.name}")
    description = op.summary + "." + (f" {op.description}" if op.description else "")
    definition: dict[str, Any] = {"name": name, "title": op.summary, "description": description}
    if op.name == "call_tool":
        definition["description"] = (
            "Call a tool of one of the configured MCP servers and get its result exactly as "
            "the server gave it. Progress is relayed when the call asks for it."
        )
        definition["title"] = "Call a tool of a configured server"
        definition["inputSchema"] = _mcpx_call_schema(op)
        definition["annotations"] = {"openWorldHint": True}
        # A call may be made as a 2025-11-25 task (mcpx.server.tasks); the field is
        # dropped for every revision without Tool.execution.
        definition["execution"] = {"taskSupport": "optional"}
        return GatewayTool(name, definition, None)
    if op.name == "exec":
        definition["description"] = EXEC_DESCRIPTION
        definition["title"] = "Run a program that calls tools"
        # "task" is /v1's way; over MCP a long program runs as a 2025-11-25 task instead.
        definition["inputSchema"] = {
            **op.input_schema,
            "properties": {k: v for k, v in op.properties.items() if k != "task"},
        }
        definition["annotations"] = {"openWorldHint": True}
        # A long program may run as a 2025-11-25 task, as mcpx_call may.
        definition["execution"] = {"taskSupport": "optional"}
        return GatewayTool(name, definition, op)
    definition["inputSchema"] = dict(op.input_schema)
    definition["outputSchema"] = dict(op.output_schema)
    if op.method == "GET" or op.name in _READ_ONLY_POSTS:
        definition["annotations"] = {"readOnlyHint": True}
    else:
        definition["annotations"] = {"readOnlyHint": False, "destructiveHint": False}
    return GatewayTool(name, definition, op)


def gateway_tools(ops: Sequence[Op] = OPS) -> tuple[GatewayTool, ...]:
    """mcpx's own tools: C{mcpx_call} first, then one per other gateway op, in table order."""
    tools = [_op_tool(op) for op in ops if op.gateway]
    tools.sort(key=lambda tool: tool.name != CALL_TOOL)
    return tuple(tools)
