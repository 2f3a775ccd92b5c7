"""
The official MCP conformance suite's whole server leg, run through mcpx in pass-through.

Each test starts a real daemon (C{python -m mcpx daemon --passthrough conformance}, a
configuration file naming one server, C{conformance}, and a temporary state folder) in
front of our fixture (C{tests/conformance/fixture_server.py}), reached over stdio (the
daemon starts it) or over Streamable HTTP (the test starts it on a free loopback port).
The suite's client then probes mcpx's own C{/mcp}; it never sees the fixture.

L{PassThroughLegTests} runs the suite four times per transport, as
C{scripts/conformance.sh} does: C{--requirements 2025-11-25}, C{--requirements
2026-07-28}, C{--suite all --spec-version 2025-06-18} and C{--suite all --spec-version
2025-03-26}, each with C{-o} and C{passthrough-expected-failures.yml}.  Verdict: the
suite exits 0; each check in its C{checks.json} files is a C{SUCCESS}, a named C{INFO}
or C{SKIPPED} (L{EXPECTED_INFO}, L{EXPECTED_SKIPS}), or a C{FAILURE}/C{WARNING} the
baseline lists, and every listed check of a scenario that ran does fail (the suite
only judges scored scenarios under C{--requirements}; this judges all of them); and the
run's summary (scenarios and checks passed and failed, scored scenarios passed) is the
one in L{EXPECTED}, so a change in what passes is noticed either way.  Before the
runs, a call through each upstream instance the suite's timed checks reach starts it
(L{warm}): those checks time mcpx's answers, not an upstream process's start.

The suite's tool checks are lax (an C{isError} result saying "tool not found" passes
C{tools-call-simple-text}), so L{ForwardedContentTests} holds mcpx to more: with the
MCP Python SDK's client, in each era, it lists, calls, gets and reads everything the
fixture offers (apart from what needs the question relay) both through mcpx's C{/mcp}
and directly from the fixture, and requires the same answers: tool definitions,
content blocks, C{isError}, progress and log messages, JSON-RPC errors, prompts and
resource contents, apart from C{_meta} (which names the server that answered).

Like the other conformance legs, these tests refuse to run outside a private network
namespace (C{make test} runs trial under C{tests/isolated}).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import warnings
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

import anyio
import mcp_types as types
from attrs import define, field, frozen
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel
from twisted.internet.threads import deferToThread
from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial.unittest import TestCase

from tests.support.http import TestClient, exchange
from tests.support.peers import (
    NODE_MODULES,
    conformance_cli,
    conformance_fixture_argv,
    in_private_netns,
    start_conformance_fixture,
)
from tests.support.processes import REPO, free_tcp_port, kill_on_cleanup, reactor, spawn

T = TypeVar("T")
Transport = Literal["stdio", "http"]

HERE = Path(__file__).resolve().parent
BASELINE = HERE / "passthrough-expected-failures.yml"
REQUIREMENTS = NODE_MODULES / "@modelcontextprotocol" / "conformance" / "requirements"

#: The name of the pass-through upstream in the daemon's configuration.
UPSTREAM = "conformance"

#: The suite's arguments for each run, and the requirement set it scores, if any.
RUNS: Mapping[str, tuple[list[str], str | None]] = {
    "req-2025-11-25": (["--requirements", "2025-11-25"], "2025-11-25"),
    "req-2026-07-28": (["--requirements", "2026-07-28"], "2026-07-28"),
    "all-2025-06-18": (["--suite", "all", "--spec-version", "2025-06-18"], None),
    "all-2025-03-26": (["--suite", "all", "--spec-version", "2025-03-26"], None),
}


@frozen
class Summary:
    """
    One run, counted from its C{checks.json} files.  A scenario fails when one of its
    checks is a C{FAILURE} or a C{WARNING} (the suite counts a WARNING as a failure
    under a baseline); checks passed are C{SUCCESS}es, checks failed those two.
    """

    scenarios_passed: int
    scenarios_failed: int
    checks_passed: int
    checks_failed: int
    #: Scored scenarios passed and scored scenarios run (C{--requirements} only).
    scored_passed: int | None = None
    scored_total: int | None = None

    def line(self) -> str:
        scored = (
            f"; scored {self.scored_passed}/{self.scored_total}"
            if self.scored_total is not None
            else ""
        )
        return (
            f"scenarios {self.scenarios_passed} passed, {self.scenarios_failed} failed{scored};"
            f" checks {self.checks_passed} passed, {self.checks_failed} failed"
        )


#: What each run yields through mcpx, over either transport (measured 2026-12-01;
#: spec/official-suite.md).  Every failure is one the baseline lists.
EXPECTED: Mapping[str, Summary] = {
    "req-2025-11-25": Summary(33, 0, 80, 0, 30, 30),
    "req-2026-07-28": Summary(50, 0, 196, 0, 37, 37),
    "all-2025-06-18": Summary(27, 0, 56, 0),
    "all-2025-03-26": Summary(1, 0, 3, 0),
}

#: Checks the suite reports C{SKIPPED} through mcpx, by (scenario, check id): the suite
#: itself skips its status-notification scenario (its harness still waits for a rewrite
#: against the listen stream that carries C{notifications/tasks}).
EXPECTED_SKIPS = frozenset({("tasks-status-notifications", "tasks-status-notifications")})

#: C{INFO} checks, by (scenario, check id): mcpx answers these POSTs with JSON rather
#: than an event stream, which the specification allows; the suite notes it and, for
#: polling, records the exchange.
EXPECTED_INFO = frozenset(
    {
        ("server-sse-multiple-streams", "server-sse-streams-functional"),
        ("server-sse-polling", "outgoing-request"),
        ("server-sse-polling", "incoming-response"),
        ("server-sse-polling", "server-sse-content-type"),
    }
)

#: The sets of client capabilities the suite's C{server-stateless} scenario (2026-07-28)
#: declares in its requests' C{_meta}: none, and elicitation.  mcpx gives each set of
#: questions a host declares an upstream instance of its own, declaring no more upstream
#: (issue 43, item 8), started by the first request declaring that set: over stdio, a
#: cold start of the fixture's process, a second or more on a loaded machine.  That
#: scenario allows its first call declaring elicitation 600 ms for its first frame
#: (C{sep-2575-http-server-no-independent-requests-on-stream}), which measures what mcpx
#: answers on that stream, not how fast a Python process starts, so L{warm} starts both
#: instances before the suite runs (they stay up: C{pool.idleTimeout} outlasts a test).
WARMED_CAPABILITIES: tuple[dict[str, Any], ...] = ({}, {"elicitation": {}})

#: The tool each warming call calls: answered at once, asking nothing.
WARMING_TOOL = "test_simple_text"

_FAILED = frozenset({"FAILURE", "WARNING"})
_RESULT_DIR = re.compile(r"server-(?P<scenario>.+)-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z")
_LIST_ENTRY = re.compile(r"^  - (?P<entry>\S+)\s*$")


def baseline() -> tuple[frozenset[tuple[str, str]], frozenset[str]]:
    """The per-check entries and the whole-scenario entries of the baseline."""
    checks, whole = set(), set()
    for line in BASELINE.read_text(encoding="utf-8").splitlines():
        match = _LIST_ENTRY.match(line)
        if match is None:
            continue
        scenario, colon, check = match["entry"].partition(":")
        if colon:
            checks.add((scenario, check))
        else:
            whole.add(scenario)
    return frozenset(checks), frozenset(whole)


def scored(revision: str) -> frozenset[str]:
    """The server scenarios the suite's requirement set for C{revision} scores."""
    names, inside = set(), False
    for line in (REQUIREMENTS / f"{revision}.yaml").read_text(encoding="utf-8").splitlines():
        if not line.startswith(" "):
            inside = line.rstrip() == "server:"
            continue
        match = _LIST_ENTRY.match(line)
        if inside and match is not None:
            names.add(match["entry"])
    return frozenset(names)


def read_results(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """Each scenario a run wrote under C{folder}, by name, to its checks."""
    found: dict[str, list[dict[str, Any]]] = {}
    for path in folder.glob("server-*/checks.json"):
        match = _RESULT_DIR.fullmatch(path.parent.name)
        if match is None:
            raise AssertionError(f"unexpected result folder {path.parent}")
        if match["scenario"] in found:
            raise AssertionError(f"{match['scenario']} ran twice in {folder}")
        found[match["scenario"]] = json.loads(path.read_text(encoding="utf-8"))
    return found


def summarize(results: Mapping[str, list[dict[str, Any]]], revision: str | None) -> Summary:
    """The counts of one run's results; scored ones against C{revision}'s set."""
    failing = {s for s, checks in results.items() if any(c["status"] in _FAILED for c in checks)}
    statuses = [check["status"] for checks in results.values() for check in checks]
    scored_passed = scored_total = None
    if revision is not None:
        ran = scored(revision) & results.keys()
        scored_total = len(ran)
        scored_passed = len(ran - failing)
    return Summary(
        scenarios_passed=len(results) - len(failing),
        scenarios_failed=len(failing),
        checks_passed=statuses.count("SUCCESS"),
        checks_failed=sum(status in _FAILED for status in statuses),
        scored_passed=scored_passed,
        scored_total=scored_total,
    )


def objections(results: Mapping[str, list[dict[str, Any]]]) -> list[str]:
    """Every check that is neither a success, an expected note, nor a listed failure;
    and every listed failure that did not fail."""
    listed, whole = baseline()
    lines = []
    for scenario, checks in sorted(results.items()):
        if scenario in whole:
            if not any(check["status"] in _FAILED for check in checks):
                lines.append(f"{scenario}: listed as failing, but no check failed")
            continue
        # A check id can occur several times in a scenario (one per case it tries); a
        # listed one must fail at least once, and then its other cases may pass.
        failed_ids = {check["id"] for check in checks if check["status"] in _FAILED}
        for check in checks:
            status, ident = check["status"], check["id"]
            key = (scenario, ident)
            if key in listed and ident in failed_ids and status in _FAILED | {"SUCCESS"}:
                continue
            if status == "SUCCESS" and key not in listed:
                continue
            if (status == "SKIPPED" and key in EXPECTED_SKIPS) or (
                status == "INFO" and key in EXPECTED_INFO
            ):
                continue
            message = check.get("errorMessage") or ""
            stale = " (listed as failing, and no case of it failed)" if key in listed else ""
            lines.append(
                f"{scenario}: {ident} {status}{stale}" + (f": {message[:300]}" if message else "")
            )
        ran = {check["id"] for check in checks}
        lines.extend(
            f"{scenario}: {check} is listed as failing but did not run"
            for s, check in sorted(listed)
            if s == scenario and check not in ran
        )
    return lines


def daemon_environ(config: Path, state_dir: str, config_home: str) -> dict[str, str]:
    """The environment of a daemon with only the given configuration and state."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPX_")}
    env["MCPX_CONFIG"] = str(config)
    env["MCPX_STATE_DIR"] = state_dir
    env["XDG_CONFIG_HOME"] = config_home
    return env


async def start_daemon(test: TestCase, transport: Transport) -> str:
    """
    Start the fixture as C{transport} (over HTTP, now; over stdio, the daemon starts
    it on first use) and a daemon passing it through; return the daemon's C{/mcp} URL.
    """
    if not in_private_netns():
        test.fail(
            "run the conformance legs in a private network namespace (`make test` does, "
            "through tests/isolated; by hand: scripts/conformance.sh, or unshare -n sh -c "
            "'ip link set lo up && exec .venv/bin/trial tests.conformance')"
        )
    server: dict[str, Any]
    if transport == "http":
        fixture = await start_conformance_fixture(reactor, add_cleanup=test.addCleanup)
        server = {"url": fixture.url}
    else:
        argv = conformance_fixture_argv("stdio")
        server = {"command": argv[0], "args": argv[1:]}
    # Short paths: the unix sockets under the state folder must fit in 108 bytes.
    state_dir = tempfile.mkdtemp(prefix="mcpx-pt-")
    config_home = tempfile.mkdtemp(prefix="mcpx-ptc-")
    test.addCleanup(shutil.rmtree, state_dir, True)
    test.addCleanup(shutil.rmtree, config_home, True)
    config = Path(config_home) / "config.json"
    config.write_text(json.dumps({"servers": {UPSTREAM: server}}), encoding="utf-8")
    port = free_tcp_port()
    argv = [
        sys.executable,
        "-m",
        "mcpx",
        "daemon",
        "--passthrough",
        UPSTREAM,
        "--daemon-listen",
        f"tcp:{port}:interface=127.0.0.1",
    ]
    child = spawn(argv, env=daemon_environ(config, state_dir, config_home), cwd=str(REPO))
    test.addCleanup(kill_on_cleanup, child)

    async def stop() -> None:
        child.signal("TERM")
        await child.ended()

    test.addCleanup(stop)
    await child.wait_for(rb"listening on http://127\.0\.0\.1:\d+")
    return f"http://127.0.0.1:{port}/mcp"


def first_message(content_type: str, body: bytes) -> Any:
    """The JSON-RPC message of an answer to a POST, as JSON or as an event stream."""
    if "text/event-stream" not in content_type:
        return json.loads(body)
    for line in body.decode("utf-8").splitlines():
        if line.startswith("data:"):
            return json.loads(line.removeprefix("data:"))
    raise AssertionError(f"an event stream with no message: {body!r}")


async def warm(test: TestCase, url: str) -> None:
    """
    Have the daemon at C{url} start, and answer a call through, the upstream instance
    of each set of capabilities in L{WARMED_CAPABILITIES}, as a 2026-07-28 host reaches
    it, before the suite probes it (see L{WARMED_CAPABILITIES}).  A call, not a listing:
    a call waits for its instance however long it takes to start.
    """
    client = TestClient(reactor)
    test.addCleanup(client.close)
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": WARMING_TOOL,
    }
    for number, capabilities in enumerate(WARMED_CAPABILITIES, 1):
        meta = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientInfo": {"name": "warming", "version": "1.0.0"},
            "io.modelcontextprotocol/clientCapabilities": capabilities,
        }
        request = {
            "jsonrpc": "2.0",
            "id": number,
            "method": "tools/call",
            "params": {"name": WARMING_TOOL, "arguments": {}, "_meta": meta},
        }
        status, found, body = await exchange(client.http, "POST", url, headers, request)
        answer = first_message(found.get("content-type", [""])[0], body) if status == 200 else {}
        if answer.get("result", {}).get("content") is None or answer["result"].get("isError"):
            test.fail(f"warming the instance declared {capabilities}: {status} {body[:500]!r}")


class PassThroughLegTests(TestCase):
    """The suite's server leg through mcpx, one transport to the fixture per test."""

    timeout = 150

    async def run_suite(self, url: str, run: str) -> list[str]:
        """One run of the suite; what is wrong with it, one line each."""
        arguments, revision = RUNS[run]
        output = Path(self.mktemp()).resolve()
        output.mkdir(parents=True)
        cli = conformance_cli()
        out, err, code = await getProcessOutputAndValue(
            cli[0],
            [
                *cli[1:],
                "server",
                "--url",
                url,
                *arguments,
                "--expected-failures",
                str(BASELINE),
                "-o",
                str(output),
            ],
            env=dict(os.environ),
            path=str(REPO),
            reactor=reactor,
        )
        text = (out + err).decode("utf-8", "replace")
        results = read_results(output)
        summary = summarize(results, revision)
        problems = [f"{run}: {line}" for line in objections(results)]
        if code != 0:
            problems.append(f"{run}: the suite exited {code}:\n{text[text.rfind('=== SUMMARY') :]}")
        if summary != EXPECTED[run]:
            problems.append(f"{run}: {summary.line()}, expected {EXPECTED[run].line()}")
        return problems

    async def run_leg(self, transport: Transport) -> None:
        url = await start_daemon(self, transport)
        await warm(self, url)
        problems = []
        # One run at a time: each already runs its scenarios in parallel.
        for run in RUNS:
            problems += await self.run_suite(url, run)
        if problems:
            self.fail(
                f"server leg through mcpx ({transport} upstream):\n  " + "\n  ".join(problems)
            )

    async def test_stdio(self) -> None:
        """
        With the fixture as a stdio upstream, mcpx passes every scenario of both
        requirement sets and of the 2025-06-18 and 2025-03-26 suites but those the
        baseline lists (tasks), with the counts of L{EXPECTED}.
        """
        await self.run_leg("stdio")

    async def test_http(self) -> None:
        """
        With the fixture as a Streamable HTTP upstream, mcpx scores as it does over
        stdio: the same passes, the same listed failures, the same counts.
        """
        await self.run_leg("http")


# Forwarded content, checked against the fixture itself.

MODERN = "2026-07-28"
#: Bound on one SDK-client conversation, so a hang fails the test instead of a thread.
CONVERSATION_TIMEOUT = 60.0

#: Tools that ask the client something (elicitation, sampling, roots): their answers
#: need the question relay, another issue's work.  The suite's scenarios for them are
#: in the baseline; here they are only compared as listed.
NEEDS_QUESTIONS = frozenset(
    {
        "test_sampling",
        "test_elicitation",
        "test_elicitation_sep1034_defaults",
        "test_elicitation_sep1330_enums",
        "test_missing_capability",
        "test_streaming_elicitation",
        "confirm_delete",
        "multi_input",
        # Declared taskSupport "required": to this client, which does not declare the
        # tasks extension, mcpx answers -32021 as the extension says, where the
        # fixture, which leaves tasks to mcpx, runs it.
        "failing_job",
        "test_tool_with_task",
    }
)
_NEEDS_QUESTIONS_PREFIX = "test_input_required_result"

#: Arguments for the tools that take some.
ARGUMENTS: Mapping[str, dict[str, Any]] = {
    "greet": {"name": "Ada"},
    "slow_compute": {"seconds": 0, "label": "forwarded"},
    "json_schema_2020_12_tool": {
        "name": "Ada",
        "address": {"street": "1 Loop Road", "city": "Localhost"},
        "contactMethod": "email",
        "email": "ada@example.com",
    },
    "test_mcp_param_header": {"region": "eu-west-1"},
}

#: What each fixture tool's content blocks are, by type, and whether it is an error:
#: so that the fixture's own answers are known good before mcpx's are compared to them.
CONTENT_TYPES: Mapping[str, tuple[list[str], bool]] = {
    "test_simple_text": (["text"], False),
    "test_image_content": (["image"], False),
    "test_audio_content": (["audio"], False),
    "test_embedded_resource": (["resource"], False),
    "test_multiple_content_types": (["text", "image", "resource"], False),
    "test_tool_with_logging": (["text"], False),
    "test_tool_with_progress": (["text"], False),
    "test_error_handling": (["text"], True),
    "test_reconnection": (["text"], False),
    "json_schema_2020_12_tool": (["text"], False),
    "test_logging_tool": (["text"], False),
    "test_trigger_tool_change": (["text"], False),
    "test_trigger_prompt_change": (["text"], False),
    "test_mcp_param_header": (["text"], False),
    "greet": (["text"], False),
    "slow_compute": (["text"], False),
}

#: The tools that answer a JSON-RPC error, and its code.
PROTOCOL_ERRORS: Mapping[str, int] = {"protocol_error_job": types.INTERNAL_ERROR}

#: A name no server offers: the fixture's error must come back as it is.
UNKNOWN_TOOL = "no_such_tool"


def needs_questions(name: str) -> bool:
    return name in NEEDS_QUESTIONS or name.startswith(_NEEDS_QUESTIONS_PREFIX)


def wire(model: BaseModel) -> dict[str, Any]:
    """A result or definition as it travels, without C{_meta}."""
    dumped: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    dumped.pop("_meta", None)
    return dumped


def differences(what: str, mine: Any, theirs: Any) -> list[str]:
    """
    How a result mcpx forwarded differs from the fixture's: any field, apart from the
    cache hints (C{ttlMs}, C{cacheScope}), which are mcpx's own, from its settings, but
    may not allow more than the fixture's: no longer, and not shared when it said
    C{private}.
    """
    if isinstance(mine, dict) and isinstance(theirs, dict):
        mine, theirs = dict(mine), dict(theirs)
        mine_ttl, their_ttl = mine.pop("ttlMs", None), theirs.pop("ttlMs", None)
        mine_scope, their_scope = mine.pop("cacheScope", None), theirs.pop("cacheScope", None)
        if their_ttl is not None and (mine_ttl is None or mine_ttl > their_ttl):
            return [f"{what}: mcpx allows caching for {mine_ttl} ms, the fixture {their_ttl}"]
        if their_scope == "private" and mine_scope != "private":
            return [f"{what}: mcpx says cacheScope {mine_scope!r}, the fixture 'private'"]
    if mine != theirs:
        return [f"{what}: mcpx answered {mine!r}, the fixture {theirs!r}"]
    return []


def in_thread(conversation: Callable[[], Awaitable[T]]) -> Any:
    """Run an SDK-client C{conversation} on its own event loop in a worker thread."""

    async def bounded() -> T:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with anyio.fail_after(CONVERSATION_TIMEOUT):
                return await conversation()

    return deferToThread(anyio.run, bounded)


@define
class Observed:
    """What one SDK client saw of the fixture's surface, directly or through mcpx."""

    version: str = ""
    tools: dict[str, Any] = field(factory=dict)
    calls: dict[str, Any] = field(factory=dict)
    progress: list[tuple[float, float | None]] = field(factory=list)
    logs: list[tuple[str, Any]] = field(factory=list)
    prompts: dict[str, Any] = field(factory=dict)
    prompt_results: dict[str, Any] = field(factory=dict)
    resources: dict[str, Any] = field(factory=dict)
    templates: dict[str, Any] = field(factory=dict)
    reads: dict[str, Any] = field(factory=dict)
    _calling: str = ""

    async def on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append((self._calling, wire(params)))

    async def on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.progress.append((progress, total))

    async def conversation(self, target: Any, mode: str, offered: Observed | None) -> Observed:
        """
        List everything, then call, get and read what C{offered} (the fixture's own
        surface, when this runs through mcpx) or this listing offers.
        """
        modern = mode == MODERN
        client = Client(
            target,
            mode=mode,
            logging_callback=self.on_log,
            log_level="debug" if modern else None,
            cache=None,
        )
        async with client:
            self.version = client.protocol_version
            if not modern:
                await client.set_logging_level("debug")
            for tool in (await client.list_tools()).tools:
                self.tools[tool.name] = wire(tool)
            for prompt in (await client.list_prompts()).prompts:
                self.prompts[prompt.name] = wire(prompt)
            for resource in (await client.list_resources()).resources:
                self.resources[str(resource.uri)] = wire(resource)
            for template in (await client.list_resource_templates()).resource_templates:
                self.templates[template.uri_template] = wire(template)
            source = offered if offered is not None else self
            for name in [*source.tools, UNKNOWN_TOOL]:
                if needs_questions(name):
                    continue
                self._calling = name
                progress = self.on_progress if name == "test_tool_with_progress" else None
                try:
                    result = await client.call_tool(
                        name, ARGUMENTS.get(name, {}), progress_callback=progress
                    )
                except MCPError as e:
                    self.calls[name] = {"error": e.error.code, "message": e.error.message}
                else:
                    self.calls[name] = wire(result)
            self._calling = ""
            for name, prompt in source.prompts.items():
                if needs_questions(name):
                    continue
                arguments = {
                    argument["name"]: (
                        "test://static-text" if argument["name"] == "resourceUri" else "value"
                    )
                    for argument in prompt.get("arguments", [])
                }
                self.prompt_results[name] = wire(await client.get_prompt(name, arguments))
            for uri in [*source.resources, "test://template/42/data"]:
                self.reads[uri] = wire(await client.read_resource(uri))
        return self


class ForwardedContentTests(TestCase):
    """
    Everything the fixture answers, compared through mcpx and directly, in each era
    and over each upstream transport.
    """

    timeout = 120

    async def compare(self, transport: Transport, mode: str) -> None:
        url = await start_daemon(self, transport)
        direct_target: Any
        if transport == "http":
            # A fixture of its own, so the daemon's upstream and this client share nothing.
            fixture = await start_conformance_fixture(reactor, add_cleanup=self.addCleanup)
            direct_target = fixture.url
        else:
            argv = conformance_fixture_argv("stdio")
            direct_target = StdioServerParameters(command=argv[0], args=argv[1:])
        direct = await in_thread(lambda: Observed().conversation(direct_target, mode, None))
        through = await in_thread(lambda: Observed().conversation(url, mode, direct))
        expected_version = MODERN if mode == MODERN else "2025-11-25"
        self.assertEqual((direct.version, through.version), (expected_version, expected_version))
        self.check_fixture(direct)

        problems: list[str] = []
        # Every definition the fixture lists is listed by mcpx as it is.
        for kind in ("tools", "prompts", "resources", "templates"):
            mine, theirs = getattr(through, kind), getattr(direct, kind)
            self.assertTrue(theirs, f"the fixture listed no {kind}")
            problems += [
                f"{kind}: {name}: mcpx listed {mine.get(name)!r}, the fixture {definition!r}"
                for name, definition in theirs.items()
                if mine.get(name) != definition
            ]
        # Every answer mcpx forwarded is the fixture's own, but for how long it may be
        # cached: that is mcpx's to say, never for longer than the fixture allows.
        for kind in ("calls", "prompt_results", "reads"):
            mine, theirs = getattr(through, kind), getattr(direct, kind)
            self.assertEqual(sorted(mine), sorted(theirs), kind)
            for name, answer in theirs.items():
                problems += differences(f"{kind}: {name}", mine[name], answer)
        if through.progress != direct.progress:
            problems.append(f"progress: mcpx {through.progress}, the fixture {direct.progress}")
        if through.logs != direct.logs:
            problems.append(f"logs: mcpx {through.logs}, the fixture {direct.logs}")
        if problems:
            self.fail(f"through mcpx ({transport} upstream, {mode}):\n  " + "\n  ".join(problems))

    def check_fixture(self, direct: Observed) -> None:
        """The fixture's own answers are the ones its scenarios describe."""
        called = [
            name for name in direct.calls if name != UNKNOWN_TOOL and name not in PROTOCOL_ERRORS
        ]
        self.assertEqual(set(called), set(CONTENT_TYPES) & set(direct.tools))
        for name, code in PROTOCOL_ERRORS.items():
            if name in direct.tools:
                self.assertEqual(direct.calls[name]["error"], code, name)
        for name in called:
            kinds, is_error = CONTENT_TYPES[name]
            result = direct.calls[name]
            self.assertEqual(
                ([block["type"] for block in result["content"]], result.get("isError", False)),
                (kinds, is_error),
                name,
            )
        self.assertEqual(direct.calls[UNKNOWN_TOOL]["error"], types.INVALID_PARAMS)
        self.assertEqual(direct.progress, [(0, 100), (50, 100), (100, 100)])
        logged = [name for name, _ in direct.logs]
        self.assertEqual(logged.count("test_tool_with_logging"), 3, direct.logs)
        self.assertIn("test://template/42/data", direct.reads)
        self.assertGreaterEqual(len(direct.prompt_results), 4)

    async def test_stdio_legacy(self) -> None:
        """
        A 2025-11-25 client gets, through mcpx and a stdio upstream, exactly the
        fixture's tool definitions, content blocks (text, image, audio, embedded
        resource), error results and errors, progress, log messages, prompts and
        resources.
        """
        await self.compare("stdio", "legacy")

    async def test_stdio_modern(self) -> None:
        """
        A 2026-07-28 client gets, through mcpx and a stdio upstream, exactly what the
        fixture answers it directly, the 2026-07-28 tools included.
        """
        await self.compare("stdio", MODERN)

    async def test_http_legacy(self) -> None:
        """
        A 2025-11-25 client gets, through mcpx and a Streamable HTTP upstream, exactly
        what the fixture answers it directly.
        """
        await self.compare("http", "legacy")

    async def test_http_modern(self) -> None:
        """
        A 2026-07-28 client gets, through mcpx and a Streamable HTTP upstream, exactly
        what the fixture answers it directly.
        """
        await self.compare("http", MODERN)
