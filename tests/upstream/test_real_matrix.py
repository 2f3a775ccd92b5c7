"""
The real-server matrix: six MCP servers nobody here wrote, each asked directly with the
MCP Python SDK (the baseline) and through every path of mcpx, which must answer the same.

The servers (L{tests.support.real_servers}): C{@modelcontextprotocol/server-filesystem},
C{server-memory}, C{server-sequential-thinking} (npm), C{mcp-server-time},
C{mcp-server-git} and C{mcp-server-calculator} (PyPI; the calculator in its own venv, as
it needs C{mcp<2}), over the data the test makes: a directory tree with text, a PNG, a
WAV and a 30 MB file; a git repository with history and an uncommitted change; a memory
file.

The paths: C{mcpx call --json} and C{POST /v1/call}; C{/mcp} as the gateway (C{mcpx_call})
and passing all six through, each at 2025-11-25 (the C{initialize} handshake) and
2026-07-28; C{mcpx serve} as the gateway and passing all six through.  Every tool
definition (every field), the memory server's resource, and the answer of every call in
L{CALLS} (content, C{structuredContent}, C{isError}, or the JSON-RPC error's code and
message) must equal the baseline, except for the differences in L{DIFFERENCES}, the one
place they are listed.

Two daemons serve every test of L{MatrixTests}, started once for the module (the gateway
one and the pass-through one) and stopped when the test process exits; the robustness
tests (L{RobustnessTests}) start their own, since they kill its servers, and check that
nothing of it is left running when it stops.

The tests are synchronous: the daemons are plain child processes, and each SDK
conversation runs on its own event loop in a worker thread.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
from attrs import define, field, frozen
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from twisted.trial.unittest import SynchronousTestCase

from mcpx._version import __version__ as mcpx_version
from mcpx.spec.matrix import field_in
from mcpx.spec.revision import Revision
from tests.support.real_servers import (
    BIG_FILE_SIZE,
    NAMES,
    Daemon,
    Data,
    alive,
    dumped,
    in_worker,
    make_data,
    server_configs,
    start_daemon,
    wire_env,
)

LEGACY = "2025-11-25"
MODERN = "2026-07-28"
GATEWAY_TOOLS = {"mcpx_call", "mcpx_servers", "mcpx_tools", "mcpx_describe"}


@frozen
class Call:
    """One test call: a key, the server and tool, and its arguments (given the data)."""

    key: str
    server: str
    tool: str
    arguments: Callable[[Data], dict[str, Any]]


def _in_tree(relative: str, **more: Any) -> Callable[[Data], dict[str, Any]]:
    return lambda data: {"path": str(data.tree / relative), **more}


def _in_repo(**more: Any) -> Callable[[Data], dict[str, Any]]:
    return lambda data: {"repo_path": str(data.repository), **more}


def _given(**arguments: Any) -> Callable[[Data], dict[str, Any]]:
    return lambda data: dict(arguments)


#: The calls every path makes; none of them changes what a later call answers.
CALLS: tuple[Call, ...] = (
    Call("fs-text", "filesystem", "read_text_file", _in_tree("notes.txt")),
    Call("fs-head", "filesystem", "read_text_file", _in_tree("notes.txt", head=1)),
    Call("fs-png", "filesystem", "read_media_file", _in_tree("pixel.png")),
    Call("fs-wav", "filesystem", "read_media_file", _in_tree("tone.wav")),
    Call("fs-list", "filesystem", "list_directory", _in_tree(".")),
    Call("fs-search", "filesystem", "search_files", _in_tree(".", pattern="*.md")),
    Call("fs-allowed", "filesystem", "list_allowed_directories", _given()),
    Call("fs-missing", "filesystem", "read_text_file", _in_tree("missing.txt")),
    Call("fs-denied", "filesystem", "read_text_file", _given(path="/etc/hostname")),
    Call("fs-unknown-tool", "filesystem", "no_such_tool", _given()),
    Call("memory-graph", "memory", "read_graph", _given()),
    Call("memory-search", "memory", "search_nodes", _given(query="Ada")),
    Call("memory-open", "memory", "open_nodes", _given(names=["Engine"])),
    Call("thinking-invalid", "thinking", "sequentialthinking", _given(thought="half")),
    Call(
        "time-convert",
        "time",
        "convert_time",
        _given(source_timezone="UTC", time="12:00", target_timezone="Asia/Tokyo"),
    ),
    Call("time-bad-zone", "time", "get_current_time", _given(timezone="Not/A_Zone")),
    Call("git-status", "git", "git_status", _in_repo()),
    Call("git-log", "git", "git_log", _in_repo(max_count=5)),
    Call("git-show", "git", "git_show", _in_repo(revision="HEAD~1")),
    Call("git-diff", "git", "git_diff_unstaged", _in_repo()),
    Call("git-branch", "git", "git_branch", _in_repo(branch_type="local")),
    Call("calc", "calculator", "calculate", _given(expression="2*3+1")),
    Call("calc-error", "calculator", "calculate", _given(expression="1/0")),
)

#: The one place the paths' documented differences from the baseline are listed, each
#: applied where its key is named (L{expected_tools}, L{expected_read},
#: L{expected_outcome}, L{MatrixTests.check_gateway}); everything else must be equal.
DIFFERENCES: Mapping[str, str] = {
    "tool-execution": (
        "2026-07-28 has no Tool.execution (spec/messages.md, the revision matrix): the "
        "TypeScript servers' execution.taskSupport is left out of their tools there."
    ),
    "result-server-info": (
        "At 2026-07-28 a result's _meta names the server that answered: through mcpx, mcpx "
        "(io.modelcontextprotocol/serverInfo)."
    ),
    "passthrough-gateway-tools": (
        "Passing servers through, tools/list carries the gateway's own tools after theirs "
        "(mcpx/server/passthrough.py)."
    ),
    "passthrough-unknown-tool": (
        "Passing several servers through, a tool none of them lists is refused by mcpx "
        "(-32602 naming them) instead of being handed to one of them to refuse."
    ),
    "policy-off": (
        "The daemon's serverDefaults turn the input and output schema checks off "
        "(validate: off), which by default answer a call with invalid arguments in the "
        "server's place (400 invalid_arguments on /v1, an isError result over MCP); "
        "tests/policy and tests/server/test_passthrough prove those."
    ),
    "gateway-resources": (
        "Through the gateway a server's resources are listed and read under "
        "mcpx://<server>/<uri>; every other field is the server's."
    ),
}


def outcome_of(call: Callable[[], Any]) -> dict[str, Any]:
    """A call's result as JSON, or its JSON-RPC error as C{{"error": {code, message}}}."""
    try:
        result = call()
    except MCPError as e:
        return {"error": {"code": e.error.code, "message": e.error.message}}
    return result_json(result)


def result_json(result: Any) -> dict[str, Any]:
    """The parts of a CallToolResult the matrix compares."""
    data = result if isinstance(result, dict) else dumped(result)
    kept = {"content": data.get("content", []), "isError": bool(data.get("isError", False))}
    if data.get("structuredContent") is not None:
        kept["structuredContent"] = data["structuredContent"]
    return kept


# Hosts: the SDK's client on a target (a URL or a stdio command).


async def _session_outcome(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    try:
        result = await client.call_tool(name, arguments)
    except MCPError as e:
        return {"error": {"code": e.error.code, "message": e.error.message}}
    return result_json(result)


@define
class Seen:
    """What one host saw on one path."""

    version: str = ""
    tools: list[dict[str, Any]] = field(factory=list)
    resources: list[dict[str, Any]] = field(factory=list)
    templates: list[dict[str, Any]] = field(factory=list)
    prompts: list[dict[str, Any]] = field(factory=list)
    outcomes: dict[str, dict[str, Any]] = field(factory=dict)
    read: dict[str, Any] = field(factory=dict)


async def _all_tools(client: Client) -> list[dict[str, Any]]:
    page = await client.list_tools()
    tools = [dumped(tool) for tool in page.tools]
    while page.next_cursor is not None:
        page = await client.list_tools(cursor=page.next_cursor)
        tools.extend(dumped(tool) for tool in page.tools)
    return tools


def host_conversation(
    target: Any, mode: str, data: Data, *, gateway: bool, resource_uri: str
) -> Seen:
    """
    List everything and make every call in L{CALLS} through C{target}, by the tool's
    own name when passed through, else through the gateway's C{mcpx_call}.
    """

    async def conversation() -> Seen:
        seen = Seen()
        async with Client(target, mode=mode) as client:
            seen.version = client.protocol_version
            seen.tools = await _all_tools(client)
            seen.resources = [dumped(r) for r in (await client.list_resources()).resources]
            listed = await client.list_resource_templates()
            seen.templates = [dumped(t) for t in listed.resource_templates]
            seen.prompts = [dumped(p) for p in (await client.list_prompts()).prompts]
            seen.read = dumped(await client.read_resource(resource_uri))
            for call in CALLS:
                arguments = call.arguments(data)
                if gateway:
                    outcome = await _session_outcome(
                        client,
                        "mcpx_call",
                        {"server": call.server, "tool": call.tool, "arguments": arguments},
                    )
                else:
                    outcome = await _session_outcome(client, call.tool, arguments)
                seen.outcomes[call.key] = outcome
        return seen

    return in_worker(conversation)


#: Where the servers asked directly write their stderr (their start-up banners would
#: fill the test run's output otherwise).
_SERVER_STDERR = open(os.devnull, "w")  # noqa: SIM115 (open for the whole run)


def stdio_params(config: Mapping[str, Any]) -> StdioServerParameters:
    return StdioServerParameters(
        command=config["command"],
        args=list(config["args"]),
        env={**wire_env(os.environ), **config.get("env", {})},
    )


@frozen
class Baseline:
    """Every server asked directly: its tools, resources and templates, and every call."""

    tools: Mapping[str, list[dict[str, Any]]]
    resources: Mapping[str, list[dict[str, Any]]]
    templates: Mapping[str, list[dict[str, Any]]]
    prompts: Mapping[str, list[dict[str, Any]]]
    outcomes: Mapping[str, dict[str, Any]]
    read: dict[str, Any]


def direct_baseline(data: Data) -> Baseline:
    configs = server_configs(data)

    async def one(server: str) -> tuple[Seen, dict[str, Any]]:
        seen = Seen()
        quiet = stdio_client(stdio_params(configs[server]), errlog=_SERVER_STDERR)
        async with Client(quiet, mode="legacy") as client:
            seen.tools = await _all_tools(client)
            capabilities = client.server_capabilities
            if capabilities is not None and capabilities.resources is not None:
                seen.resources = [dumped(r) for r in (await client.list_resources()).resources]
                listed = await client.list_resource_templates()
                seen.templates = [dumped(t) for t in listed.resource_templates]
            if capabilities is not None and capabilities.prompts is not None:
                seen.prompts = [dumped(p) for p in (await client.list_prompts()).prompts]
            read: dict[str, Any] = {}
            if server == "memory":
                read = dumped(await client.read_resource(MEMORY_RESOURCE))
            for call in CALLS:
                if call.server == server:
                    seen.outcomes[call.key] = await _session_outcome(
                        client, call.tool, call.arguments(data)
                    )
        return seen, read

    async def every() -> dict[str, tuple[Seen, dict[str, Any]]]:
        found: dict[str, tuple[Seen, dict[str, Any]]] = {}

        async def into(server: str) -> None:
            found[server] = await one(server)

        async with anyio.create_task_group() as group:
            for server in NAMES:
                group.start_soon(into, server)
        return found

    found = in_worker(every)
    return Baseline(
        tools={server: found[server][0].tools for server in NAMES},
        resources={server: found[server][0].resources for server in NAMES},
        templates={server: found[server][0].templates for server in NAMES},
        prompts={server: found[server][0].prompts for server in NAMES},
        outcomes={key: o for server in NAMES for key, o in found[server][0].outcomes.items()},
        read=found["memory"][1],
    )


MEMORY_RESOURCE = "memory://knowledge-graph"


# The module's shared world: data, baseline and the two daemons, made on first use.


@define
class World:
    data: Data
    baseline: Baseline
    gateway: Daemon
    passing: Daemon


_world: list[World] = []


def world() -> World:
    if not _world:
        root = Path(tempfile.mkdtemp(prefix="mcpx-matrix-data-"))
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        data = make_data(root)
        with ThreadPoolExecutor(3) as starting:
            baseline = starting.submit(direct_baseline, data)
            gateway = starting.submit(start_daemon, data)
            passing = starting.submit(start_daemon, data, passthrough=NAMES)
            _world.append(World(data, baseline.result(), gateway.result(), passing.result()))
    return _world[0]


def everything(listed: Mapping[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One list of the six servers' items, in the order they are passed through."""
    return [item for server in NAMES for item in listed[server]]


def baseline_tools(baseline: Baseline) -> list[dict[str, Any]]:
    return [tool for server in NAMES for tool in baseline.tools[server]]


def expected_tools(baseline: Baseline, version: str) -> list[dict[str, Any]]:
    """The six servers' tools as a pass-through host of C{version} must see them."""
    tools = baseline_tools(baseline)
    if not field_in("Tool.execution", Revision(version)):
        # DIFFERENCES["tool-execution"]
        tools = [{k: v for k, v in tool.items() if k != "execution"} for tool in tools]
    return tools


def expected_read(read: Mapping[str, Any], version: str) -> dict[str, Any]:
    """The baseline's C{resources/read} result as a host of C{version} gets it."""
    if version != MODERN:
        return dict(read)
    # DIFFERENCES["result-server-info"]
    server_info = {"name": "mcpx", "version": mcpx_version}
    return {**read, "_meta": {"io.modelcontextprotocol/serverInfo": server_info}}


def expected_outcome(call: Call, baseline: Baseline, *, gateway: bool) -> dict[str, Any] | None:
    """
    The baseline's outcome of C{call} as the path must give it, or C{None} where
    L{DIFFERENCES} says the path answers otherwise (checked on its own).
    """
    if not gateway and call.key == "fs-unknown-tool":
        return None  # DIFFERENCES["passthrough-unknown-tool"]
    return baseline.outcomes[call.key]


class MatrixTests(SynchronousTestCase):
    """Every path answers as the servers do directly."""

    def check_outcomes(self, path: str, outcomes: Mapping[str, Any], *, gateway: bool) -> None:
        baseline = world().baseline
        for call in CALLS:
            expected = expected_outcome(call, baseline, gateway=gateway)
            if expected is not None:
                self.assertEqual(outcomes[call.key], expected, f"{path}: {call.key}")

    def check_passed_through(self, path: str, seen: Seen) -> None:
        baseline = world().baseline
        self.assertEqual(seen.tools[:39], expected_tools(baseline, seen.version), path)
        # DIFFERENCES["passthrough-gateway-tools"]
        self.assertTrue({tool["name"] for tool in seen.tools[39:]} >= GATEWAY_TOOLS)
        self.assertEqual(seen.resources, baseline.resources["memory"], path)
        self.assertEqual(seen.templates, everything(baseline.templates), path)
        self.assertEqual(seen.prompts, everything(baseline.prompts), path)
        self.assertEqual(seen.read, expected_read(baseline.read, seen.version), path)
        self.check_outcomes(path, seen.outcomes, gateway=False)
        # DIFFERENCES["passthrough-unknown-tool"]
        self.assertEqual(seen.outcomes["fs-unknown-tool"]["error"]["code"], -32602)
        self.assertIn(", ".join(NAMES), seen.outcomes["fs-unknown-tool"]["error"]["message"])

    def check_gateway(self, path: str, seen: Seen) -> None:
        baseline = world().baseline
        self.assertTrue({tool["name"] for tool in seen.tools} >= GATEWAY_TOOLS, path)
        # DIFFERENCES["gateway-resources"]
        [resource] = seen.resources
        uri = f"mcpx://memory/{MEMORY_RESOURCE}"
        self.assertEqual(resource, {**baseline.resources["memory"][0], "uri": uri})
        # No server has templates or prompts to rename.
        self.assertEqual((seen.templates, seen.prompts), ([], []), path)
        self.assertEqual((everything(baseline.templates), everything(baseline.prompts)), ([], []))
        read = expected_read(baseline.read, seen.version)
        read["contents"] = [{**read["contents"][0], "uri": uri}]
        self.assertEqual(seen.read, read, path)
        self.check_outcomes(path, seen.outcomes, gateway=True)

    def test_baseline_sanity(self) -> None:
        """The direct answers are what the data says (so matching them means something)."""
        baseline = world().baseline
        self.assertEqual(sum(len(tools) for tools in baseline.tools.values()), 39)
        text = baseline.outcomes["fs-text"]
        self.assertEqual(text["content"][0]["text"], "first line\nsecond line\n")
        self.assertEqual(baseline.outcomes["fs-png"]["content"][0]["mimeType"], "image/png")
        self.assertEqual(baseline.outcomes["fs-wav"]["content"][0]["type"], "audio")
        self.assertIs(baseline.outcomes["fs-missing"]["isError"], True)
        self.assertIn("Ada", json.dumps(baseline.outcomes["memory-graph"]))
        self.assertIn("Second commit", json.dumps(baseline.outcomes["git-log"]))
        self.assertIn("three", json.dumps(baseline.outcomes["git-diff"]))
        self.assertIn("7", json.dumps(baseline.outcomes["calc"]))

    def test_mcp_passthrough_legacy(self) -> None:
        """/mcp passing all six through, to a 2025-11-25 host."""
        w = world()
        seen = host_conversation(
            w.passing.mcp_url, "legacy", w.data, gateway=False, resource_uri=MEMORY_RESOURCE
        )
        self.assertEqual(seen.version, LEGACY)
        self.check_passed_through("/mcp pass-through 2025-11-25", seen)

    def test_mcp_passthrough_modern(self) -> None:
        """/mcp passing all six through, to a 2026-07-28 host."""
        w = world()
        seen = host_conversation(
            w.passing.mcp_url, "auto", w.data, gateway=False, resource_uri=MEMORY_RESOURCE
        )
        self.assertEqual(seen.version, MODERN)
        self.check_passed_through("/mcp pass-through 2026-07-28", seen)

    def test_serve_passthrough(self) -> None:
        """mcpx serve --passthrough of all six, to hosts of both eras."""
        w = world()
        params = w.gateway.serve_params("--passthrough", ",".join(NAMES))
        for mode, version in (("legacy", LEGACY), ("auto", MODERN)):
            seen = host_conversation(
                params, mode, w.data, gateway=False, resource_uri=MEMORY_RESOURCE
            )
            self.assertEqual(seen.version, version)
            self.check_passed_through(f"mcpx serve --passthrough {version}", seen)

    def test_mcp_gateway(self) -> None:
        """/mcp as the gateway (mcpx_call), to hosts of both eras."""
        w = world()
        uri = f"mcpx://memory/{MEMORY_RESOURCE}"
        for mode, version in (("legacy", LEGACY), ("auto", MODERN)):
            seen = host_conversation(
                w.gateway.mcp_url, mode, w.data, gateway=True, resource_uri=uri
            )
            self.assertEqual(seen.version, version)
            self.check_gateway(f"/mcp gateway {version}", seen)

    def test_serve_gateway(self) -> None:
        """mcpx serve as the gateway, to a 2026-07-28 host."""
        w = world()
        uri = f"mcpx://memory/{MEMORY_RESOURCE}"
        seen = host_conversation(
            w.gateway.serve_params(), "auto", w.data, gateway=True, resource_uri=uri
        )
        self.assertEqual(seen.version, MODERN)
        self.check_gateway("mcpx serve gateway", seen)

    def test_v1(self) -> None:
        """POST /v1/call answers as the server did; GET /v1/tools/... gives each definition."""
        w = world()
        outcomes: dict[str, Any] = {}
        for call in CALLS:
            status, body = w.gateway.post(
                "/v1/call",
                {"server": call.server, "tool": call.tool, "arguments": call.arguments(w.data)},
            )
            outcomes[call.key] = result_json(body) if status == 200 else {"status": status, **body}
        self.check_outcomes("/v1/call", outcomes, gateway=True)
        for server in NAMES:
            for tool in w.baseline.tools[server]:
                described = w.gateway.get(f"/v1/tools/{server}/{tool['name']}")
                self.assertEqual(described["tool"], tool, f"/v1/tools/{server}/{tool['name']}")

    def test_cli(self) -> None:
        """mcpx call --json answers every call as /v1 does, so as the server did."""
        w = world()

        def run(call: Call) -> tuple[str, Any]:
            done = w.gateway.cli(
                "call", "--json", call.server, call.tool, json.dumps(call.arguments(w.data))
            )
            return call.key, (done.returncode, json.loads(done.stdout))

        with ThreadPoolExecutor(4) as calling:
            ran = dict(calling.map(run, CALLS))
        outcomes = {
            key: result_json(body) if "error" not in body else body
            for key, (_, body) in ran.items()
        }
        self.check_outcomes("mcpx call", outcomes, gateway=True)
        self.assertEqual((ran["fs-text"][0], ran["fs-missing"][0]), (0, 1))


#: The call each robustness test makes of each server (a key of L{CALLS}).
REFERENCE = {
    "filesystem": "fs-text",
    "memory": "memory-graph",
    "thinking": "thinking-invalid",
    "time": "time-convert",
    "git": "git-status",
    "calculator": "calc",
}
#: Concurrent calls in L{RobustnessTests.test_sixty_concurrent_calls}.
CONCURRENT = 60
#: How soon after the daemon saw a server die a call is sure to meet its back-off
#: (the pool's first restart delay is 1 s).
BACK_OFF_WINDOW = 0.5
#: How long a killed server may take to be answering again.
RESTART_DEADLINE = 20.0


async def _collect(
    client: Client, tool: str, arguments: dict[str, Any], into: list[dict[str, Any]]
) -> None:
    into.append(await _session_outcome(client, tool, arguments))


def _call_named(key: str) -> Call:
    return next(call for call in CALLS if call.key == key)


class RobustnessTests(SynchronousTestCase):
    """
    The same servers passed through a daemon of each test's own, then killed, restarted,
    asked for big answers and many at once: no call reaches a server it was not meant
    for, and nothing is left running when the daemon stops.
    """

    def setUp(self) -> None:
        self.world = world()
        self.daemon = start_daemon(self.world.data, passthrough=NAMES)
        self.addCleanup(self.daemon.stop)
        #: Every upstream process seen during the test.
        self.seen_pids: set[int] = set()

    def pids(self) -> dict[str, int]:
        pids = self.daemon.server_pids()
        self.seen_pids.update(pids.values())
        return pids

    def state(self, server: str) -> str:
        servers = self.daemon.get("/v1/servers")["servers"]
        return str(next(s["state"] for s in servers if s["name"] == server))

    def kill(self, server: str) -> int:
        """kill -9 the server's process; return once the daemon has seen it die."""
        pid = self.pids()[server]
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while self.state(server) != "failed":
            if time.monotonic() > deadline:
                raise AssertionError(f"the daemon did not notice {server} die")
            time.sleep(0.02)
        return pid

    def stop_leaving_nothing(self) -> None:
        """Stop the daemon: its exit status is 0 and no upstream process outlives it."""
        self.pids()
        self.assertEqual(self.daemon.stop(), 0)
        deadline = time.monotonic() + 10
        while any(alive(pid) for pid in self.seen_pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual({pid for pid in self.seen_pids if alive(pid)}, set())

    def assert_own(self, server: str, key: str, outcome: Mapping[str, Any]) -> None:
        """C{outcome} is the server's own answer to C{key}, or an error naming that server."""
        if outcome == self.world.baseline.outcomes[key]:
            return
        error = outcome.get("error")
        self.assertIsNotNone(error, f"{key} answered by someone else: {outcome}")
        assert error is not None
        self.assertIn(f"'{server}'", error["message"], outcome)

    def test_kill_each_idle_server(self) -> None:
        """
        kill -9 of each server's idle process: right after, tools/list still has all 39
        tools; a call of its tool during the back-off fails naming it and when it
        starts again (not answered by another server); then a call restarts it.
        """
        data, baseline = self.world.data, self.world.baseline

        async def conversation() -> None:
            async with Client(self.daemon.mcp_url, mode="auto") as client:
                for server in NAMES:
                    call = _call_named(REFERENCE[server])
                    arguments = call.arguments(data)
                    first = await _session_outcome(client, call.tool, arguments)
                    self.assertEqual(first, baseline.outcomes[call.key], server)
                    killed = self.kill(server)
                    seen_dead = time.monotonic()
                    during = await _session_outcome(client, call.tool, arguments)
                    if time.monotonic() - seen_dead < BACK_OFF_WINDOW:
                        self.assertIn("error", during, f"{server}: {during}")
                        message = during["error"]["message"]
                        self.assertIn(f"server '{server}' is unavailable", message)
                        self.assertIn("next start in", message)
                    else:
                        # Too slow a machine to be sure the back-off had not passed.
                        self.assert_own(server, call.key, during)
                    tools = await _all_tools(client)
                    self.assertEqual(tools[:39], expected_tools(baseline, MODERN), server)
                    deadline = time.monotonic() + RESTART_DEADLINE
                    again = during
                    while again != baseline.outcomes[call.key] and time.monotonic() < deadline:
                        self.assert_own(server, call.key, again)
                        await anyio.sleep(0.2)
                        again = await _session_outcome(client, call.tool, arguments)
                    self.assertEqual(again, baseline.outcomes[call.key], server)
                    self.assertNotEqual(self.pids()[server], killed)

        in_worker(conversation)
        self.stop_leaving_nothing()

    def test_kill_each_server_mid_call(self) -> None:
        """
        kill -9 of each server while calls of its tool are in flight: each call gets the
        server's answer or an error naming it, and the server serves again afterwards.
        """
        data, baseline = self.world.data, self.world.baseline

        async def conversation() -> None:
            async with Client(self.daemon.mcp_url, mode="auto") as client:
                for server in NAMES:
                    call = _call_named(REFERENCE[server])
                    arguments = call.arguments(data)
                    await _session_outcome(client, call.tool, arguments)
                    pid = self.pids()[server]
                    outcomes: list[dict[str, Any]] = []
                    async with anyio.create_task_group() as group:
                        for _ in range(4):
                            group.start_soon(_collect, client, call.tool, arguments, outcomes)
                        await anyio.sleep(0.01)
                        os.kill(pid, signal.SIGKILL)
                    self.assertEqual(len(outcomes), 4)
                    for outcome in outcomes:
                        self.assert_own(server, call.key, outcome)
                    deadline = time.monotonic() + RESTART_DEADLINE
                    again = await _session_outcome(client, call.tool, arguments)
                    while again != baseline.outcomes[call.key] and time.monotonic() < deadline:
                        self.assert_own(server, call.key, again)
                        await anyio.sleep(0.2)
                        again = await _session_outcome(client, call.tool, arguments)
                    self.assertEqual(again, baseline.outcomes[call.key], server)

        in_worker(conversation)
        self.stop_leaving_nothing()

    def test_large_answer(self) -> None:
        """
        read_text_file of the 30 MB file answers in full through /mcp (both eras) and
        /v1/call, and the server keeps serving.
        """
        data = self.world.data
        arguments = {"path": str(data.tree / "big.txt")}
        expected = (data.tree / "big.txt").read_text()
        self.assertEqual(len(expected), BIG_FILE_SIZE)

        async def conversation(mode: str) -> dict[str, Any]:
            async with Client(self.daemon.mcp_url, mode=mode) as client:
                big = await _session_outcome(client, "read_text_file", arguments)
                small = await _session_outcome(
                    client, "read_text_file", {"path": str(data.tree / "notes.txt")}
                )
                return {"big": big, "small": small}

        for mode in ("legacy", "auto"):
            seen = in_worker(functools.partial(conversation, mode))
            self.assertEqual(seen["big"]["content"][0]["text"], expected, mode)
            self.assertEqual(seen["small"], self.world.baseline.outcomes["fs-text"])
        status, body = self.daemon.post(
            "/v1/call", {"server": "filesystem", "tool": "read_text_file", "arguments": arguments}
        )
        self.assertEqual(status, 200)
        self.assertEqual(body["content"][0]["text"], expected)
        self.stop_leaving_nothing()

    def test_sixty_concurrent_calls(self) -> None:
        """
        60 calls at once over one /mcp session, spread over the six servers: each gets
        the answer of the server it named, as that server gives it directly.
        """
        data, baseline = self.world.data, self.world.baseline
        calls = [CALLS[i % len(CALLS)] for i in range(CONCURRENT)]
        calls = [call for call in calls if call.key != "fs-unknown-tool"]

        async def conversation() -> list[dict[str, Any]]:
            outcomes: list[dict[str, Any]] = [{} for _ in calls]
            async with Client(self.daemon.mcp_url, mode="auto") as client:

                async def one(index: int, call: Call) -> None:
                    outcomes[index] = await _session_outcome(
                        client, call.tool, call.arguments(data)
                    )

                async with anyio.create_task_group() as group:
                    for index, call in enumerate(calls):
                        group.start_soon(one, index, call)
            return outcomes

        outcomes = in_worker(conversation)
        self.assertGreaterEqual(len(calls), 57)
        for call, outcome in zip(calls, outcomes, strict=True):
            self.assertEqual(outcome, baseline.outcomes[call.key], call.key)
        self.assertEqual(set(self.pids()), set(NAMES))
        self.stop_leaving_nothing()
