# mypy: ignore-errors
# (It runs under the Python SDK 1.x, 2.x and fastmcp alike, none of them the test venv's
# alone, so its imports are checked by running it, in tests/upstream/test_host_matrix.py.)
"""
A host of the cross-implementation matrix (tests/upstream/test_host_matrix.py): one MCP client
SDK, walking every target of a plan and printing what it saw as one JSON document.

    python matrix_host.py SDK PLAN.json

SDK is C{mcp1} (the Python SDK 1.x's C{ClientSession}, run by the interpreter of a
Makefile venv holding that version), C{mcp2} (the Python SDK 2.x's C{Client}) or
C{fastmcp} (the fastmcp C{Client}). The plan is C{{"lanes": [[{"id", "stdio": {command,
args, env, cwd} | "url": URL, "steps": [...]}, ...], ...]}}: the targets of a lane are
walked one after the other, each in a session of its own, and the lanes side by side (a
target that waits, such as a host's own probe timing out, holds up its lane alone). A
step is C{{"key", "op"}} with C{op} one of C{tools}, C{prompts}, C{resources},
C{templates}, C{call} (C{name}, C{arguments}), C{prompt} (C{name}, C{arguments}) or
C{read} (C{uri}). Each step's outcome is its
result as JSON, C{{"error": {code, message}}} for a JSON-RPC error, or C{{"failed":
TEXT}} for anything else. Where the SDK can, the host accepts an elicitation with a value
for every property asked (L{answer}), lists one root and answers sampling with a fixed text.

Written to run unchanged on every SDK version named; it imports only what that SDK has.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio

ROOT = {"uri": "file:///tmp/matrix-root", "name": "matrix root"}
SAMPLED = "sampled by the matrix host"
STEP_TIMEOUT = 20.0


def answer(params: Any) -> dict[str, Any]:
    """
    An accepted elicitation's content: every property of the requested schema, "Ada" for
    a string (an address for an email), 1 for a number, true for a boolean, an enum's first.
    """
    schema = getattr(params, "requestedSchema", None) or getattr(params, "requested_schema", None)
    if hasattr(schema, "model_dump"):
        schema = schema.model_dump(by_alias=True, exclude_none=True)
    properties = (schema or {}).get("properties") or {"name": {"type": "string"}}
    content: dict[str, Any] = {}
    for name, prop in properties.items():
        kind = prop.get("type")
        choices = prop.get("enum") or [
            c.get("const") for c in prop.get("oneOf", []) if "const" in c
        ]
        if kind == "array":
            items = prop.get("items", {})
            options = items.get("enum") or [c.get("const") for c in items.get("anyOf", [])]
            content[name] = options[:1]
        elif choices:
            content[name] = choices[0]
        elif kind in ("number", "integer"):
            content[name] = 1
        elif kind == "boolean":
            content[name] = True
        elif prop.get("format") == "email":
            content[name] = "ada@example.com"
        else:
            content[name] = "Ada"
    return content


def dumped(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", by_alias=True, exclude_none=True)
    if isinstance(value, list):
        return [dumped(item) for item in value]
    return value


def leaf(e: BaseException) -> BaseException:
    """The first exception an exception group holds (itself if it is none)."""
    while isinstance(getattr(e, "exceptions", None), (list, tuple)) and e.exceptions:  # type: ignore[attr-defined]
        e = e.exceptions[0]  # type: ignore[attr-defined]
    return e


def failed(e: BaseException) -> dict[str, Any]:
    e = leaf(e)
    return jsonrpc_error(e) or {"failed": f"{type(e).__name__}: {e}"[:300]}


def jsonrpc_error(e: BaseException) -> dict[str, Any] | None:
    error = getattr(e, "error", None)
    code = getattr(error, "code", None)
    if isinstance(code, int):
        return {"error": {"code": code, "message": getattr(error, "message", "")}}
    return None


class Mcp1:
    """The Python SDK 1.x: C{ClientSession} on C{stdio_client} or C{streamablehttp_client}."""

    def __init__(self) -> None:
        import mcp.types as types
        from mcp.client.session import ClientSession

        self.types = types
        self.session_class = ClientSession

    def callbacks(self) -> dict[str, Any]:
        import inspect

        types = self.types
        accepted = inspect.signature(self.session_class.__init__).parameters
        found: dict[str, Any] = {}

        async def elicit(context: Any, params: Any) -> Any:
            return types.ElicitResult(action="accept", content=answer(params))

        async def roots(context: Any) -> Any:
            return types.ListRootsResult(roots=[types.Root(**ROOT)])

        async def sample(context: Any, params: Any) -> Any:
            return types.CreateMessageResult(
                role="assistant",
                content=types.TextContent(type="text", text=SAMPLED),
                model="matrix",
            )

        for name, callback in (
            ("elicitation_callback", elicit),
            ("list_roots_callback", roots),
            ("sampling_callback", sample),
        ):
            if name in accepted:
                found[name] = callback
        return found

    async def run(self, target: dict[str, Any]) -> dict[str, Any]:
        from contextlib import AsyncExitStack

        async with AsyncExitStack() as stack:
            if "url" in target:
                from mcp.client.streamable_http import streamablehttp_client

                streams = await stack.enter_async_context(streamablehttp_client(target["url"]))
            else:
                from mcp.client.stdio import StdioServerParameters, stdio_client

                params = StdioServerParameters(**target["stdio"])
                with open(os.devnull, "w") as quiet:
                    try:
                        streams = await stack.enter_async_context(stdio_client(params, quiet))
                    except TypeError:
                        streams = await stack.enter_async_context(stdio_client(params))
            session = await stack.enter_async_context(
                self.session_class(streams[0], streams[1], **self.callbacks())
            )
            with anyio.fail_after(STEP_TIMEOUT):
                initialized = await session.initialize()
            version = str(initialized.protocolVersion)
            return {"version": version, "steps": await walk(target["steps"], self.step(session))}

    def step(self, session: Any) -> Any:
        async def one(step: dict[str, Any]) -> Any:
            op = step["op"]
            if op == "tools":
                return [dumped(t) for t in (await session.list_tools()).tools]
            if op == "prompts":
                return [dumped(p) for p in (await session.list_prompts()).prompts]
            if op == "resources":
                return [dumped(r) for r in (await session.list_resources()).resources]
            if op == "templates":
                listed = await session.list_resource_templates()
                return [dumped(t) for t in listed.resourceTemplates]
            if op == "call":
                return dumped(await session.call_tool(step["name"], step["arguments"]))
            if op == "prompt":
                return dumped(await session.get_prompt(step["name"], step["arguments"]))
            if op == "read":
                from pydantic import AnyUrl

                return dumped(await session.read_resource(AnyUrl(step["uri"])))
            raise ValueError(op)

        return one


class Mcp2:
    """The Python SDK 2.x's C{Client}, in its default (auto) mode."""

    async def run(self, target: dict[str, Any]) -> dict[str, Any]:
        import mcp_types as types
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client

        async def elicit(context: Any, params: Any) -> Any:
            return types.ElicitResult(action="accept", content=answer(params))

        async def roots(context: Any) -> Any:
            return types.ListRootsResult(roots=[types.Root(**ROOT)])

        async def sample(context: Any, params: Any) -> Any:
            return types.CreateMessageResult(
                role="assistant",
                content=types.TextContent(type="text", text=SAMPLED),
                model="matrix",
            )

        if "url" in target:
            server: Any = target["url"]
        else:
            quiet = open(os.devnull, "w")  # noqa: SIM115 (closed with the process)
            server = stdio_client(StdioServerParameters(**target["stdio"]), errlog=quiet)
        async with Client(
            server, elicitation_callback=elicit, list_roots_callback=roots, sampling_callback=sample
        ) as client:

            async def one(step: dict[str, Any]) -> Any:
                op = step["op"]
                if op == "tools":
                    return [dumped(t) for t in (await client.list_tools()).tools]
                if op == "prompts":
                    return [dumped(p) for p in (await client.list_prompts()).prompts]
                if op == "resources":
                    return [dumped(r) for r in (await client.list_resources()).resources]
                if op == "templates":
                    listed = await client.list_resource_templates()
                    return [dumped(t) for t in listed.resource_templates]
                if op == "call":
                    return dumped(await client.call_tool(step["name"], step["arguments"]))
                if op == "prompt":
                    return dumped(await client.get_prompt(step["name"], step["arguments"]))
                if op == "read":
                    return dumped(await client.read_resource(step["uri"]))
                raise ValueError(op)

            return {
                "version": str(client.protocol_version),
                "steps": await walk(target["steps"], one),
            }


class FastMcp:
    """The fastmcp C{Client}, answering with raw MCP results (its C{*_mcp} methods)."""

    async def run(self, target: dict[str, Any]) -> dict[str, Any]:
        import mcp_types as types
        from fastmcp import Client
        from fastmcp.client.transports import StdioTransport

        async def elicit(message: str, response_type: Any, params: Any, context: Any) -> Any:
            return answer(params)

        async def sample(messages: Any, params: Any, context: Any) -> Any:
            return SAMPLED

        # Not kept alive (fastmcp's default): the server ends with the session, as with
        # every other host, rather than outliving this process holding its stderr.
        transport: Any = target.get("url") or StdioTransport(**target["stdio"], keep_alive=False)
        async with Client(
            transport,
            roots=[ROOT["uri"]],
            elicitation_handler=elicit,
            sampling_handler=sample,
        ) as client:

            async def one(step: dict[str, Any]) -> Any:
                op = step["op"]
                if op == "tools":
                    return [dumped(t) for t in (await client.list_tools_mcp()).tools]
                if op == "prompts":
                    return [dumped(p) for p in (await client.list_prompts_mcp()).prompts]
                if op == "resources":
                    return [dumped(r) for r in (await client.list_resources_mcp()).resources]
                if op == "templates":
                    listed = await client.list_resource_templates_mcp()
                    return [dumped(t) for t in listed.resource_templates]
                if op == "call":
                    return dumped(await client.call_tool_mcp(step["name"], step["arguments"]))
                if op == "prompt":
                    return dumped(await client.get_prompt_mcp(step["name"], step["arguments"]))
                if op == "read":
                    return dumped(await client.read_resource_mcp(step["uri"]))
                raise ValueError(op)

            del types
            return {
                "version": str(client.protocol_version),
                "steps": await walk(target["steps"], one),
            }


async def walk(steps: list[dict[str, Any]], one: Any) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for step in steps:
        try:
            with anyio.fail_after(STEP_TIMEOUT):
                seen[step["key"]] = await one(step)
        except Exception as e:
            seen[step["key"]] = failed(e)
    return seen


async def main(sdk: str, plan: dict[str, Any]) -> dict[str, Any]:
    host = {"mcp1": Mcp1, "mcp2": Mcp2, "fastmcp": FastMcp}[sdk]()
    seen: dict[str, Any] = {}

    async def lane(targets: list[dict[str, Any]]) -> None:
        for target in targets:
            try:
                with anyio.fail_after(STEP_TIMEOUT * (1 + len(target["steps"]))):
                    seen[target["id"]] = await host.run(target)
            except BaseException as e:  # an exception group from the transport's tasks included
                if not isinstance(e, Exception):
                    raise
                seen[target["id"]] = failed(e)

    async with anyio.create_task_group() as lanes:
        for targets in plan["lanes"]:
            lanes.start_soon(lane, targets)
    # In the plan's order, whatever order the lanes ended in.
    return {t["id"]: seen[t["id"]] for targets in plan["lanes"] for t in targets}


if __name__ == "__main__":
    with open(sys.argv[2], encoding="utf-8") as f:
        plan = json.load(f)
    print(json.dumps(anyio.run(main, sys.argv[1], plan)))
