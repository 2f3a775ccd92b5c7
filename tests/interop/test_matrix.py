"""
The interop matrix: real hosts and real upstreams written by others, with mcpx between.

Dimensions: host {Python C{mcp} SDK client, TypeScript client v2} x era {2025-11-25,
2026-07-28, and 2025-06-18 / 2025-03-26 where the host can be pinned} x mcpx transport
{C{mcpx serve}, C{/mcp}} x upstream {our Python SDK fixture, the TS SDK 1.x fixture, the
TS SDK v2 fixture} x upstream transport {stdio, Streamable HTTP}. One daemon per upstream
and upstream transport serves every cell of it.

In each cell the host lists tools, calls a tool that reports progress (every report must
arrive, in order, under the host's own token), calls a tool that elicits (answered by the
host), one that samples (answered by the host), one that lists roots, and reads a
resource.  Every frame mcpx sends, both ways and on every transport (relayed questions
and the answers given to the upstream included), is recorded and checked against the
official schema of the revision in force with the transport sweep's strict validator:
C{tests/interop/tap.py} on the pipes of C{mcpx serve} and of a stdio upstream,
C{tests/interop/relay.py} between mcpx and an HTTP upstream, and on C{/mcp} the host
itself (C{tests/interop/http_tap.py} for the Python host, C{client2-host.mjs --tap}).
Cells a host or fixture cannot express are marked with the reason, never skipped
silently; the table is C{spec/interop.md}, compared with what the run produced. Set
C{MCPX_WRITE_INTEROP=1} to rewrite it.

Each frame check and each row is this run's; the committed rows must equal them.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
from attrs import define, field, frozen
from mcp import Client, StdioServerParameters
from mcp.client.context import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial.unittest import TestCase

from mcpx.spec.revision import Revision
from tests.conformance.test_passthrough_leg import in_thread
from tests.interop.http_tap import RecordingTransport
from tests.interop.peers import (
    PEERS,
    SDK1_SERVER,
    SDK2_SERVER,
    Daemon,
    fixture_argv,
    run_daemon,
    start_fixture,
    start_relay,
)
from tests.server.test_transport_sweep import Sweep
from tests.support.peers import (
    conformance_fixture_argv,
    everything_stdio_argv,
    node22,
    start_conformance_fixture,
    start_everything_http,
)
from tests.support.processes import REPO, reactor

TAP = Path(__file__).resolve().parent / "tap.py"
TS_HOST = PEERS / "client2-host.mjs"
TABLE = REPO / "spec" / "interop.md"

MODERN = "2026-07-28"
ERAS = ("2025-11-25", MODERN, "2025-06-18", "2025-03-26")
PY_ERAS = ("2025-11-25", MODERN)
STEPS = ("tools", "progress", "elicitation", "sampling", "roots", "resource")

ELICITED = {"username": "ada", "email": "ada@example.com"}
SAMPLED = "Paris"
ROOT = "file:///interop"


@frozen
class Upstream:
    """One upstream: which of its tools each step calls, and what the host must see."""

    name: str
    label: str
    tools: Mapping[str, str]
    #: Steps the upstream cannot offer at some eras: (step, legacy?) -> reason.
    lacks: Mapping[tuple[str, bool], str] = {}
    arguments: Mapping[str, Mapping[str, Any]] = {
        "elicitation": {"message": "Who are you?"},
        "sampling": {"prompt": "Capital?"},
    }
    progress: tuple[tuple[float, float], ...] = ((0.0, 100.0), (50.0, 100.0), (100.0, 100.0))
    resource: str = "test://static-text"
    #: How the resource's text begins.
    resource_text: str = "This is the content of the static text resource."


_COMMON = {
    "progress": "test_tool_with_progress",
    "elicitation": "test_elicitation",
    "sampling": "test_sampling",
}
UPSTREAMS = (
    Upstream(
        "python",
        "Python SDK fixture",
        {**_COMMON, "roots": "test_input_required_result_list_roots"},
        {
            ("roots", True): "the Python fixture asks for roots only through its "
            "2026-07-28 input_required tool"
        },
    ),
    Upstream("sdk1", "TS SDK 1.x fixture", {**_COMMON, "roots": "list_roots"}),
    Upstream("sdk2", "TS SDK v2 fixture", {**_COMMON, "roots": "list_roots"}),
    Upstream(
        "everything",
        "server-everything",
        {
            "progress": "trigger-long-running-operation",
            "elicitation": "trigger-elicitation-request",
            "sampling": "trigger-sampling-request",
            "roots": "get-roots-list",
        },
        lacks={
            (step, legacy): "server-everything reports the roots it cached when its "
            "session began; behind mcpx that session is shared by every host, so they are "
            "not this host's"
            for step in ("roots",)
            for legacy in (True, False)
        },
        arguments={
            "progress": {"duration": 0.3, "steps": 3},
            "sampling": {"prompt": "Capital?", "maxTokens": 10},
        },
        progress=((1.0, 3.0), (2.0, 3.0), (3.0, 3.0)),
        resource="demo://resource/static/document/architecture.md",
        resource_text="# Everything Server",
    ),
)

#: Steps a revision cannot carry, with the reason.
ERA_LACKS = {("elicitation", "2025-03-26"): "2025-03-26 has no elicitation"}

#: Steps a host cannot observe in some cells, and how the cell is judged instead.
HOST_BLIND = {
    ("ts", "serve", "progress"): "progress judged on the wire: the TS client v2 on stdio "
    "drops reports that arrive in the same read as the answer (talking to the TS 1.x "
    "fixture directly too)",
}

#: Cells a host cannot express, with the reason.
NOT_EXPRESSIBLE = {
    ("python", "2025-06-18"): "the Python SDK client offers no way to pin an older handshake",
    ("python", "2025-03-26"): "the Python SDK client offers no way to pin an older handshake",
}


@define
class Cell:
    """What one host saw in one cell, step by step: "ok", or what went wrong."""

    verdicts: dict[str, str] = field(factory=dict)
    notes: list[str] = field(factory=list)

    def expect(self, step: str, ok: bool, detail: object) -> None:
        self.verdicts[step] = "ok" if ok else f"FAILED: {str(detail)[:300]}"


def judge(cell: Cell, upstream: Upstream, era: str, seen: Mapping[str, Any]) -> None:
    """Hold what a host reported (see C{client2-host.mjs}'s output) to the expectations."""
    for step in STEPS:
        reason = upstream.lacks.get((step, era != MODERN)) or ERA_LACKS.get((step, era))
        if reason is not None:
            cell.verdicts[step] = f"n/a: {reason}"
            continue
        got = seen.get(step)
        if not isinstance(got, dict) or not got.get("ok"):
            cell.expect(step, False, got)
        elif step == "tools":
            cell.expect(step, upstream.tools["progress"] in got["names"], got["names"])
        elif step == "progress":
            reports = tuple(tuple(map(float, r)) for r in got["reports"])
            cell.expect(step, reports == upstream.progress and not got["isError"], got)
        elif step == "elicitation":
            cell.expect(step, ELICITED["email"] in got["text"] and not got["isError"], got)
        elif step == "sampling":
            cell.expect(step, SAMPLED in got["text"] and not got["isError"], got)
        elif step == "roots":
            cell.expect(step, ROOT in got["text"] and not got["isError"], got)
        else:
            cell.expect(step, got["text"].startswith(upstream.resource_text), got)


def progress_sent(log: Path) -> tuple[tuple[float, float], ...] | str:
    """
    The progress reports mcpx sent the host over C{mcpx serve}, under the token of the
    host's progress request; or what is wrong with them.
    """
    frames = read_tap(log)
    tokens = [
        frame["params"]["_meta"]["progressToken"]
        for direction, frame in frames
        if direction == ">"
        and isinstance(frame, dict)
        and frame.get("method") == "tools/call"
        and "progressToken" in ((frame.get("params") or {}).get("_meta") or {})
    ]
    if len(tokens) != 1:
        return f"expected one call with a progress token, saw {tokens}"
    reports = [
        frame["params"]
        for direction, frame in frames
        if direction == "<"
        and isinstance(frame, dict)
        and frame.get("method") == "notifications/progress"
    ]
    if any(report.get("progressToken") != tokens[0] for report in reports):
        return f"a report under another token than {tokens[0]!r}: {reports}"
    return tuple((float(r["progress"]), float(r.get("total", 0))) for r in reports)


def tapped(log: Path, argv: list[str]) -> list[str]:
    return [sys.executable, str(TAP), str(log), "--", *argv]


def serve_argv() -> list[str]:
    return [sys.executable, "-m", "mcpx", "serve"]


def read_tap(log: Path) -> list[tuple[str, Any]]:
    if not log.exists():
        return []
    frames = []
    for line in log.read_bytes().splitlines():
        direction, _, body = line.partition(b" ")
        try:
            frames.append((direction.decode(), json.loads(body)))
        except ValueError:
            frames.append((direction.decode(), body.decode("utf-8", "replace")))
    return frames


def check_frames(sweep: Sweep, log: Path, sent: str, revision: str | None, where: str) -> None:
    """
    Validate every frame of C{log} going in direction C{sent} (mcpx's), against
    C{revision}, or for an upstream log against the revision its handshake agreed (a
    frame with the 2026-07-28 envelope against 2026-07-28).
    """
    frames = read_tap(log)
    if not any(direction == sent for direction, _ in frames):
        sweep.problems.append(f"{where}: no frame mcpx sent was recorded in {log}")
    agreed = revision
    methods: dict[Any, str] = {}
    for direction, frame in frames:
        if direction != sent and isinstance(frame, dict) and "method" in frame and "id" in frame:
            methods[frame["id"]] = frame["method"]
        if agreed is None and isinstance(frame, dict):
            version = (frame.get("result") or {}).get("protocolVersion")
            if isinstance(version, str) and "serverInfo" in frame.get("result", {}):
                agreed = version
    for number, (direction, frame) in enumerate(frames):
        if direction != sent:
            continue
        meta = (frame.get("params") or {}).get("_meta") if isinstance(frame, dict) else None
        version = (meta or {}).get("io.modelcontextprotocol/protocolVersion") or agreed
        if version is None:
            sweep.problems.append(f"{where} frame {number}: sent before any revision was agreed")
            continue
        result = frame.get("result") if isinstance(frame, dict) else None
        if isinstance(result, dict) and result.get("resultType") == "input_required":
            # The sweep's tables name the complete result of each method.
            sweep.check(
                frame, Revision(version), "JSONRPCResultResponse", f"{where} frame {number}"
            )
            sweep.check(result, Revision(version), "InputRequiredResult", f"{where} frame {number}")
            continue
        sweep.frame(frame, Revision(version), methods, f"{where} frame {number}")


class Answers:
    """The Python host's answers to what mcpx relays."""

    async def elicit(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        wire = params.model_dump(by_alias=True, exclude_none=True)
        return types.ElicitResult(action="accept", content=fill(wire.get("requestedSchema", {})))

    async def sample(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        reply = types.TextContent(type="text", text=SAMPLED)
        return types.CreateMessageResult(role="assistant", content=reply, model="interop-model")

    async def roots(self, context: ClientRequestContext) -> types.ListRootsResult:
        root = types.Root.model_validate({"uri": ROOT, "name": "interop"})
        return types.ListRootsResult(roots=[root])


def fill(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A user's answer to a form, as the TS host gives it (C{client2-host.mjs} C{fill})."""
    content: dict[str, Any] = {}
    required = set(schema.get("required") or ())
    for name, spec in (schema.get("properties") or {}).items():
        if name in ELICITED:
            content[name] = ELICITED[name]
        elif name not in required:
            continue
        elif "enum" in spec:
            content[name] = spec["enum"][0]
        elif spec.get("type") == "boolean":
            content[name] = True
        elif spec.get("type") in ("integer", "number"):
            content[name] = spec.get("default", spec.get("minimum", 1))
        else:
            content[name] = spec.get("default", "ada")
    return content


def python_conversation(target: Any, era: str, upstream: Upstream, log: Path) -> Callable[[], Any]:
    """
    The Python host's side of a cell; over C{/mcp} (C{target} a URL) every frame either
    way is recorded in C{log}.
    """
    answers = Answers()

    async def converse() -> dict[str, Any]:
        if not isinstance(target, str):
            return await talk(target)
        recording = RecordingTransport(log)
        timeout = httpx2.Timeout(30, read=300)
        async with httpx2.AsyncClient(transport=recording, timeout=timeout) as http:
            return await talk(streamable_http_client(target, http_client=http))

    async def talk(server: Any) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        client = Client(
            server,
            mode=MODERN if era == MODERN else "legacy",
            elicitation_callback=answers.elicit,
            sampling_callback=answers.sample,
            list_roots_callback=answers.roots,
            cache=None,
        )

        def text(result: types.CallToolResult) -> str:
            return "".join(b.text for b in result.content if isinstance(b, types.TextContent))

        async with client:
            tools = await client.list_tools()
            seen["tools"] = {"ok": True, "names": sorted(t.name for t in tools.tools)}
            reports: list[tuple[float, float | None]] = []

            async def on_progress(
                progress: float, total: float | None, message: str | None
            ) -> None:
                reports.append((progress, total))

            for step in ("progress", "elicitation", "sampling", "roots"):
                try:
                    result = await client.call_tool(
                        upstream.tools[step],
                        dict(upstream.arguments.get(step, {})),
                        progress_callback=on_progress if step == "progress" else None,
                    )
                except Exception as e:
                    seen[step] = {"ok": False, "error": repr(e)}
                    continue
                seen[step] = {"ok": True, "text": text(result), "isError": result.is_error}
            seen["progress"]["reports"] = reports
            read = await client.read_resource(upstream.resource)
            body = "".join(getattr(c, "text", "") for c in read.contents)
            seen["resource"] = {"ok": True, "text": body}
        return seen

    return converse


class InteropMatrixTests(TestCase):
    """Every cell of the matrix, one test per upstream and upstream transport."""

    timeout = 300

    async def daemon(self, upstream: Upstream, transport: str, log: Path) -> Daemon:
        """
        A daemon passing C{upstream} through. Over stdio the upstream runs under
        C{tap.py}, writing one log per process into the folder C{log}; over HTTP mcpx
        reaches it through C{relay.py}, which writes one log per upstream session there.
        """
        if transport == "http":
            if upstream.name == "everything":
                url = (await start_everything_http(reactor, add_cleanup=self.addCleanup)).url
            elif upstream.name == "python":
                fixture = await start_conformance_fixture(reactor, add_cleanup=self.addCleanup)
                url = fixture.url
            else:
                script = SDK1_SERVER if upstream.name == "sdk1" else SDK2_SERVER
                url = await start_fixture(self, script)
            return await run_daemon(self, {"url": await start_relay(self, url, log)})
        if upstream.name == "everything":
            argv = everything_stdio_argv()
        elif upstream.name == "python":
            argv = conformance_fixture_argv("stdio")
        else:
            script = SDK1_SERVER if upstream.name == "sdk1" else SDK2_SERVER
            argv = fixture_argv(script, "stdio")
        entry = tapped(log, argv)
        return await run_daemon(self, {"command": entry[0], "args": entry[1:], "cwd": str(PEERS)})

    async def ts_cell(
        self, daemon: Daemon, era: str, via: str, upstream: Upstream, log: Path
    ) -> dict[str, Any]:
        steps: dict[str, Any] = {
            step: tool for step, tool in upstream.tools.items() if (step, era) not in ERA_LACKS
        }
        steps["resource"] = upstream.resource
        steps["arguments"] = upstream.arguments
        if via == "mcp":
            where = ["--url", daemon.url, "--tap", str(log)]
        else:
            argv = tapped(log, serve_argv())
            where = ["--command", argv[0], "--args", json.dumps(argv[1:])]
        out, err, code = await getProcessOutputAndValue(
            node22(),
            [str(TS_HOST), "--era", era, *where, "--steps", json.dumps(steps)],
            env=daemon.env,
            path=str(PEERS),
            reactor=reactor,
        )
        try:
            seen: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            return {"error": f"the TS host printed nothing usable (exit {code}): {err!r}"}
        return {**seen.get("steps", {}), "error": seen.get("error")}

    async def py_cell(
        self, daemon: Daemon, era: str, via: str, upstream: Upstream, log: Path
    ) -> dict[str, Any]:
        if via == "mcp":
            target: Any = daemon.url
        else:
            argv = tapped(log, serve_argv())
            target = StdioServerParameters(
                command=argv[0], args=argv[1:], env=daemon.env, cwd=str(REPO)
            )
        try:
            result: dict[str, Any] = await in_thread(
                python_conversation(target, era, upstream, log)
            )
        except Exception as e:
            return {"error": repr(e)}
        return result

    async def run_upstream(self, upstream: Upstream, transport: str) -> None:
        folder = Path(self.mktemp()).resolve()
        folder.mkdir(parents=True)
        # One log per upstream process or session (mcpx may start several instances).
        upstream_log = folder / "upstream"
        upstream_log.mkdir()
        daemon = await self.daemon(upstream, transport, upstream_log)
        sweep = Sweep()
        rows: list[str] = []
        for host in ("python", "ts"):
            for era in ERAS:
                for via in ("serve", "mcp"):
                    label = f"{host} {era} {via}"
                    reason = NOT_EXPRESSIBLE.get((host, era))
                    if reason is not None:
                        rows.append(_row(upstream, transport, host, era, via, None, reason))
                        continue
                    log = folder / f"{host}-{era}-{via}.tap"
                    run = self.py_cell if host == "python" else self.ts_cell
                    seen = await run(daemon, era, via, upstream, log)
                    cell = Cell()
                    judge(cell, upstream, era, seen)
                    blind = HOST_BLIND.get((host, via, "progress"))
                    if blind is not None:
                        # Judged on the wire every time, so the table does not depend
                        # on how the host's reads happened to fall.
                        sent = progress_sent(log)
                        cell.expect("progress", sent == upstream.progress, sent)
                        cell.notes.append(blind)
                    if seen.get("error"):
                        cell.verdicts["host"] = f"FAILED: {seen['error']}"
                    check_frames(sweep, log, "<", era, f"{upstream.name}/{transport} {label}")
                    rows.append(_row(upstream, transport, host, era, via, cell, None))
        logs = sorted(upstream_log.glob("*.tap"))
        if not any(read_tap(each) for each in logs):
            sweep.problems.append(f"nothing was recorded between mcpx and the upstream: {logs}")
        for each in logs:
            check_frames(sweep, each, ">", None, f"{upstream.name} upstream {each.name}")
        failed = [row for row in rows if "FAILED" in row]
        problems = failed + sweep.problems[:40]
        self.assertEqual(problems, [], "\n".join(problems))
        compare_block(self, upstream, transport, rows)

    async def test_python_fixture_stdio(self) -> None:
        """The Python SDK fixture as a stdio upstream."""
        await self.run_upstream(UPSTREAMS[0], "stdio")

    async def test_python_fixture_http(self) -> None:
        """The Python SDK fixture as a Streamable HTTP upstream."""
        await self.run_upstream(UPSTREAMS[0], "http")

    async def test_sdk1_stdio(self) -> None:
        """The TypeScript SDK 1.x fixture as a stdio upstream."""
        await self.run_upstream(UPSTREAMS[1], "stdio")

    async def test_sdk1_http(self) -> None:
        """The TypeScript SDK 1.x fixture as a stateful Streamable HTTP upstream."""
        await self.run_upstream(UPSTREAMS[1], "http")

    async def test_sdk2_stdio(self) -> None:
        """The TypeScript SDK v2 fixture as a stdio upstream."""
        await self.run_upstream(UPSTREAMS[2], "stdio")

    async def test_sdk2_http(self) -> None:
        """The TypeScript SDK v2 fixture as a Streamable HTTP upstream."""
        await self.run_upstream(UPSTREAMS[2], "http")

    async def test_everything_stdio(self) -> None:
        """C{@modelcontextprotocol/server-everything} as a stdio upstream."""
        await self.run_upstream(UPSTREAMS[3], "stdio")

    async def test_everything_http(self) -> None:
        """C{@modelcontextprotocol/server-everything} as a Streamable HTTP upstream."""
        await self.run_upstream(UPSTREAMS[3], "http")


def _row(
    upstream: Upstream,
    transport: str,
    host: str,
    era: str,
    via: str,
    cell: Cell | None,
    reason: str | None,
) -> str:
    hosts = {"python": "Python SDK", "ts": "TS client v2"}
    vias = {"serve": "`mcpx serve`", "mcp": "`/mcp`"}
    first = f"| {upstream.label} | {transport} | {hosts[host]} | {era} | {vias[via]} |"
    if cell is None:
        return f"{first} {' | '.join(['—'] * len(STEPS))} | not expressible: {reason} |"

    def mark(step: str) -> str:
        verdict = cell.verdicts.get(step, "FAILED: not run")
        return "✓" if verdict == "ok" else ("n/a" if verdict.startswith("n/a") else verdict)

    notes = "; ".join([v[5:] for v in cell.verdicts.values() if v.startswith("n/a: ")] + cell.notes)
    host_failure = cell.verdicts.get("host", "")
    return f"{first} {' | '.join(mark(s) for s in STEPS)} | {notes or host_failure} |"


HEADER = (
    "| upstream | upstream transport | host | era | mcpx transport | "
    + " | ".join(STEPS)
    + " | notes |\n|"
    + "---|" * (6 + len(STEPS))
    + "\n"
)


def compare_block(test: TestCase, upstream: Upstream, transport: str, rows: list[str]) -> None:
    """
    C{spec/interop.md}'s rows for this upstream and transport are the ones this run
    produced; C{MCPX_WRITE_INTEROP=1} writes them instead.
    """
    text = TABLE.read_text(encoding="utf-8")
    begin, close = (
        f"<!-- {upstream.name}/{transport} -->\n",
        f"<!-- /{upstream.name}/{transport} -->",
    )
    produced = HEADER + "\n".join(rows) + "\n"
    if begin not in text:
        test.fail(f"{TABLE} has no block {begin.strip()}")
    start = text.index(begin) + len(begin)
    end = text.index(close)
    if os.environ.get("MCPX_WRITE_INTEROP") == "1":
        TABLE.write_text(text[:start] + produced + text[end:], encoding="utf-8")
        return
    test.assertEqual(
        text[start:end], produced, f"{TABLE} is stale: MCPX_WRITE_INTEROP=1 rewrites it"
    )
