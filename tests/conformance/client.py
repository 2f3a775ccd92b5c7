# -*- test-case-name: tests.conformance.test_client_leg -*-
"""
The command the MCP conformance suite runs for its client leg: mcpx's upstream client
(L{make_connector}, L{UpstreamSession}) doing what each scenario asks of a client.

The suite starts a mock server per scenario and runs C{client.py <server-url>} with the
scenario in C{MCP_CONFORMANCE_SCENARIO}, the revision it speaks in
C{MCP_CONFORMANCE_PROTOCOL_VERSION}, and sometimes a JSON C{MCP_CONFORMANCE_CONTEXT}.
The revision is not handed to mcpx: its own era probe finds out what the server speaks,
which is part of what is under test.  The handlers here play the host (the person and
the model behind mcpx): they answer elicitations, sampling and roots.

Exit status 0 and a last line C{conformance client: <scenario> ok} on stdout when the
interaction went as the scenario expects; otherwise status 1 and the reason on stderr.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.task import react
from twisted.logger import (
    FilteringLogObserver,
    LogLevel,
    LogLevelFilterPredicate,
    globalLogBeginner,
    textFileLogObserver,
)

from mcpx.settings.servers import RemoteServer
from mcpx.upstream.connect import make_connector
from mcpx.upstream.handlers import UpstreamHandlers
from mcpx.upstream.records import is_input_required
from mcpx.upstream.session import UpstreamSession

SCENARIO_VARIABLE = "MCP_CONFORMANCE_SCENARIO"
VERSION_VARIABLE = "MCP_CONFORMANCE_PROTOCOL_VERSION"
CONTEXT_VARIABLE = "MCP_CONFORMANCE_CONTEXT"

#: Printed last on stdout after a scenario went as expected (the suite keeps stdout).
OK_MARK = "conformance client: {scenario} ok"


class ScenarioFailed(Exception):
    """What the server answered is not what the scenario leads a client to expect."""


# The host: what a person and a model would answer.


def _placeholder(definition: Mapping[str, Any]) -> Any:
    """A plausible value for a schema property nobody gave a default for."""
    enum = definition.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    kind = definition.get("type")
    return {
        "string": "us-west1",
        "integer": 1,
        "number": 1.5,
        "boolean": True,
        "object": {},
        "array": [],
        "null": None,
    }.get(kind if isinstance(kind, str) else "string", "us-west1")


async def elicit(params: Mapping[str, Any]) -> Mapping[str, Any]:
    """
    Accept every form, filled in as a person who only confirms would: each field with a
    default keeps it (SEP-1034), required fields without one get a plausible value.
    """
    schema = params.get("requestedSchema")
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    required = schema.get("required") if isinstance(schema, Mapping) else None
    content: dict[str, Any] = {}
    if isinstance(properties, Mapping):
        for name, definition in properties.items():
            if not isinstance(definition, Mapping):
                continue
            if "default" in definition:
                content[name] = definition["default"]
            elif isinstance(required, list) and name in required:
                content[name] = _placeholder(definition)
            elif definition.get("type") == "boolean":
                content[name] = True
    return {"action": "accept", "content": content}


async def sample(params: Mapping[str, Any]) -> Mapping[str, Any]:
    """A model's answer to a sampling request."""
    return {
        "role": "assistant",
        "content": {"type": "text", "text": "This is a sampled answer."},
        "model": "conformance-host",
        "stopReason": "endTurn",
    }


async def roots(params: Mapping[str, Any]) -> Mapping[str, Any]:
    """The host shares no roots."""
    return {"roots": []}


def host_handlers() -> UpstreamHandlers:
    return UpstreamHandlers(elicitation=elicit, sampling=sample, roots=roots)


# What each scenario does.


def _text(result: Mapping[str, Any]) -> str:
    content = result.get("content")
    if not isinstance(content, list):
        return ""
    return "".join(
        block.get("text", "")
        for block in content
        if isinstance(block, Mapping) and block.get("type") == "text"
    )


def _expect_text(result: Mapping[str, Any], wanted: str, what: str) -> None:
    if result.get("isError"):
        raise ScenarioFailed(f"{what} answered with a tool error: {result!r}")
    if wanted not in _text(result):
        raise ScenarioFailed(f"{what} answered {result!r}, without {wanted!r}")


def _tool(tools: list[dict[str, Any]], name: str) -> dict[str, Any]:
    for tool in tools:
        if tool.get("name") == name:
            return tool
    raise ScenarioFailed(f"tools/list does not offer {name!r}: {[t.get('name') for t in tools]}")


def _arguments_for(tool: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments a model would fill in: a value for every required property."""
    schema = tool.get("inputSchema")
    if not isinstance(schema, Mapping):
        return {}
    properties = schema.get("properties")
    required = schema.get("required")
    if not isinstance(properties, Mapping) or not isinstance(required, list):
        return {}
    return {
        name: _placeholder(properties[name])
        for name in required
        if isinstance(name, str) and isinstance(properties.get(name), Mapping)
    }


async def list_only(session: UpstreamSession, context: Mapping[str, Any]) -> None:
    """Open the session and list the tools: all a bare connection does."""
    await session.list_tools()


async def tools_call(session: UpstreamSession, context: Mapping[str, Any]) -> None:
    _tool(await session.list_tools(), "add_numbers")
    result = await session.call_tool("add_numbers", {"a": 5, "b": 3})
    _expect_text(result, "8", "add_numbers")


async def elicitation_defaults(session: UpstreamSession, context: Mapping[str, Any]) -> None:
    name = "test_client_elicitation_defaults"
    _tool(await session.list_tools(), name)
    result = await session.call_tool(name, {})
    _expect_text(result, "Elicitation completed", name)


async def sse_retry(session: UpstreamSession, context: Mapping[str, Any]) -> None:
    _tool(await session.list_tools(), "test_reconnection")
    result = await session.call_tool("test_reconnection", {})
    _expect_text(result, "Reconnection test completed", "test_reconnection")


async def request_state(session: UpstreamSession, context: Mapping[str, Any]) -> None:
    tools = await session.list_tools()
    for name in (
        "test_mrtr_echo_state",
        "test_mrtr_no_state",
        "test_mrtr_unrelated",
        "test_mrtr_no_result_type",
    ):
        _tool(tools, name)
    # One round held open while another call goes out: the other call must carry
    # nothing of the round, and the round resumes with its exact requestState.
    first = await session.call_tool("test_mrtr_echo_state", {}, resolve_inputs=False)
    if not is_input_required(first):
        raise ScenarioFailed(f"test_mrtr_echo_state did not ask for input: {first!r}")
    round_ = session.input_round("tools/call", {"name": "test_mrtr_echo_state"}, first)
    if round_.request_state is None:
        raise ScenarioFailed("test_mrtr_echo_state asked for input without a requestState")
    _expect_text(
        await session.call_tool("test_mrtr_unrelated", {}), "unrelated-ok", "test_mrtr_unrelated"
    )
    answers = await session.answer_inputs(round_)
    _expect_text(await session.resume(round_, answers), "echo-state-ok", "test_mrtr_echo_state")
    _expect_text(await session.call_tool("test_mrtr_no_state", {}), "no-state-ok", "no_state")
    _expect_text(
        await session.call_tool("test_mrtr_no_result_type", {}),
        "no-result-type-test-ok",
        "test_mrtr_no_result_type",
    )


async def standard_headers(session: UpstreamSession, context: Mapping[str, Any]) -> None:
    for tool in await session.list_tools():
        await session.call_tool(tool["name"], _arguments_for(tool))
    for resource in await session.list_resources():
        await session.read_resource(resource["uri"])
    for prompt in await session.list_prompts():
        await session.get_prompt(prompt["name"])


async def custom_headers(session: UpstreamSession, context: Mapping[str, Any]) -> None:
    calls = context.get("toolCalls")
    if not isinstance(calls, list) or not calls:
        raise ScenarioFailed(f"{CONTEXT_VARIABLE} names no toolCalls: {context!r}")
    tools = await session.list_tools()
    for call in calls:
        _tool(tools, call["name"])
        result = await session.call_tool(call["name"], call.get("arguments") or {})
        _expect_text(result, "Custom headers test completed", call["name"])


async def call_every_tool(session: UpstreamSession, context: Mapping[str, Any]) -> None:
    """Call each tool mcpx lists, as a model might: invalid ones must not be among them."""
    tools = await session.list_tools()
    if not tools:
        raise ScenarioFailed("tools/list offered no tool at all")
    for tool in tools:
        await session.call_tool(tool["name"], _arguments_for(tool))


async def schema_echo(session: UpstreamSession, context: Mapping[str, Any]) -> None:
    tools = await session.list_tools()
    focal = _tool(tools, "json_schema_2020_12_tool")
    _tool(tools, "json_schema_echo")
    result = await session.call_tool("json_schema_echo", {"schema": focal["inputSchema"]})
    _expect_text(result, "echoed", "json_schema_echo")


Scenario = Callable[[UpstreamSession, Mapping[str, Any]], Awaitable[None]]

SCENARIOS: Mapping[str, Scenario] = {
    "initialize": list_only,
    "tools_call": tools_call,
    "elicitation-sep1034-client-defaults": elicitation_defaults,
    "sse-retry": sse_retry,
    "request-metadata": list_only,
    "sep-2322-client-request-state": request_state,
    "http-standard-headers": standard_headers,
    "http-custom-headers": custom_headers,
    "http-invalid-tool-headers": call_every_tool,
    "json-schema-ref-no-deref": list_only,
    "json-schema-2020-12-preservation": schema_echo,
}


def _context(environ: Mapping[str, str]) -> Mapping[str, Any]:
    raw = environ.get(CONTEXT_VARIABLE)
    if not raw:
        return {}
    decoded = json.loads(raw)
    return decoded if isinstance(decoded, Mapping) else {}


async def run(reactor: Any, url: str, environ: Mapping[str, str]) -> None:
    """
    Connect to C{url} the way mcpx connects to any upstream, play the scenario, close.

    A scenario this client has no interaction for (the OAuth ones) gets a bare
    connection: mcpx has no upstream OAuth, and that is what the suite should see.
    """
    scenario = environ.get(SCENARIO_VARIABLE, "")
    play = SCENARIOS.get(scenario, list_only)
    connector = make_connector(reactor, environ, None)
    session = await connector.connect(
        "conformance", RemoteServer(name="conformance", url=url), host_handlers()
    )
    print(
        f"conformance client: {session.era.value} session at {session.revision.value}",
        file=sys.stderr,
    )
    try:
        await play(session, _context(environ))
    finally:
        await session.close()


def main(reactor: Any, *argv: str) -> Deferred[None]:
    environ = dict(os.environ)
    scenario = environ.get(SCENARIO_VARIABLE, "")
    if not argv:
        raise SystemExit("usage: client.py <server-url>")
    url = argv[-1]
    if scenario.startswith("auth/"):
        # Run as a script by the suite: the driver is found beside this file.
        import importlib.util

        spec = importlib.util.spec_from_file_location(
            "auth_client",
            os.path.join(os.path.dirname(os.path.abspath(__file__)), "auth_client.py"),
        )
        assert spec is not None and spec.loader is not None
        driver = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(driver)
        raise SystemExit(driver.main(url, scenario))
    print(
        f"conformance client: scenario {scenario!r} at {environ.get(VERSION_VARIABLE)!r}, {url}",
        file=sys.stderr,
    )
    # mcpx's own log (the era probe's verdict, warnings) goes to stderr, which the suite
    # keeps; Twisted's per-connection chatter does not help anyone reading it.
    levels = LogLevelFilterPredicate(defaultLogLevel=LogLevel.info)
    levels.setLogLevelForNamespace("twisted", LogLevel.warn)
    observer = FilteringLogObserver(textFileLogObserver(sys.stderr), [levels])
    globalLogBeginner.beginLoggingTo([observer], redirectStandardIO=False)

    async def scenario_run() -> None:
        try:
            await run(reactor, url, environ)
        except Exception as e:
            print(
                f"conformance client: {scenario} failed: {type(e).__name__}: {e}", file=sys.stderr
            )
            raise SystemExit(1) from e
        print(OK_MARK.format(scenario=scenario), flush=True)

    return Deferred.fromCoroutine(scenario_run())


if __name__ == "__main__":
    react(main, sys.argv[1:])
