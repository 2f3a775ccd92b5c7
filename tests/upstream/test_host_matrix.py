"""
The cross-implementation matrix: MCP hosts written by others x MCP servers written by
others (or on others' SDKs) x the paths through mcpx, each cell compared field by field
with the same host talking to the same server directly.

Hosts (L{hosts}): the Python SDK at an early 1.x (C{.venv-mcp18}), a late 1.x
(C{.venv-mcp130}) and 2.x (the test venv's), the fastmcp Client (C{.venv-fastmcp}), the
TypeScript SDK Client at 1.13 and at 1.32 (C{tests/peers}). Each is one driver process
(C{tests/upstream/scripts/matrix_host.py}, C{tests/peers/matrix-host.mjs}) that walks
the targets of a plan and prints what it saw as JSON; each host is run twice, once for
the paths through mcpx (L{paths_plan}) and once for the servers directly
(L{direct_plan}). The paths are walked one host at a time, as the two daemons are
shared; beside them the direct sessions, which share nothing, also one host at a time
(two once the paths are done) but in L{DIRECT_LANES} lanes, so that a host waiting out
its own C{server/discover} timeout on an early server holds up no other cell.

Servers (L{SERVERS}), all over stdio: an C{mcp} 1.8 server
(C{scripts/early_server.py}), a FastMCP 4 server that elicits and lists roots
(C{tests/fixtures/fastmcp_server.py}), the TypeScript SDK low-level fixture
(C{tests/peers/sdk1-server.mjs}), C{mcp-server-sqlite} 2025.4.25 (C{.venv-sqlite}) and
C{@modelcontextprotocol/server-everything}.

Paths: C{direct}; C{serve} (C{mcpx serve --passthrough} all five); C{mcp} (C{/mcp} of a
daemon passing all five through); C{gateway} (C{mcpx serve} as the gateway: calls
through C{mcpx_call}, prompts as C{<server>_<prompt>}, resources as
C{mcpx://<server>/<uri>}).

What is compared and how it is normalised is in C{spec/host-matrix.md}; every remaining
difference from direct must be a row of its table, and every row must be observed, so the
test fails when behaviour changes either way.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

from attrs import frozen
from twisted.trial.unittest import SynchronousTestCase

from tests.support.peers import PeersMissing, node22
from tests.support.processes import REPO
from tests.support.real_servers import Daemon, Data, start_daemon, wire_env

SCRIPTS = Path(__file__).resolve().parent / "scripts"
PEERS = REPO / "tests" / "peers"
TABLE = REPO / "spec" / "host-matrix.md"
#: The gateway's own tools, offered after the servers' when they are passed through.
GATEWAY_PREFIX = "mcpx_"
#: What a driver may take.
DRIVER_TIMEOUT = 300
#: How many sessions a host has open at once with the servers directly.
DIRECT_LANES = 2


@frozen
class Host:
    name: str
    argv: tuple[str, ...]


@frozen
class Step:
    key: str
    op: str
    name: str = ""
    arguments: Mapping[str, Any] = {}
    uri: str = ""

    def plan(self, *, key: str | None = None, **changes: Any) -> dict[str, Any]:
        step: dict[str, Any] = {"key": key or self.key, "op": self.op, "name": self.name}
        step.update(arguments=dict(self.arguments), uri=self.uri)
        step.update(changes)
        return step


def _venv(name: str) -> str:
    python = REPO / name / "bin" / "python"
    if not python.exists():
        raise PeersMissing(f"{python} is missing: run `make test`, which creates {name}")
    return str(python)


def hosts() -> list[Host]:
    host = str(SCRIPTS / "matrix_host.py")
    ts = str(PEERS / "matrix-host.mjs")
    return [
        Host("py-1.8", (_venv(".venv-mcp18"), host, "mcp1")),
        Host("py-1.30", (_venv(".venv-mcp130"), host, "mcp1")),
        Host("py-2.3", (sys.executable, host, "mcp2")),
        Host("fastmcp-4.1", (_venv(".venv-fastmcp"), host, "fastmcp")),
        Host("ts-1.13", (node22(), ts, "@modelcontextprotocol/sdk-1.13")),
        Host("ts-1.32", (node22(), ts, "@modelcontextprotocol/sdk")),
    ]


def _listing() -> list[Step]:
    return [Step(op, op) for op in ("tools", "prompts", "resources", "templates")]


#: Each server's steps beyond the listings: calls, a prompt, a read.
STEPS: Mapping[str, Sequence[Step]] = {
    "early": (
        Step("call:early_add", "call", "early_add", {"a": 2, "b": 3}),
        Step("call:early_add-invalid", "call", "early_add", {"a": "two", "b": 3}),
        Step("call:early_fail", "call", "early_fail"),
        Step("prompt:early_greeting", "prompt", "early_greeting", {"name": "Ada"}),
        Step("read:early://note", "read", uri="early://note"),
    ),
    "fastmcp4": (
        Step("call:ask_name", "call", "ask_name"),
        Step("call:list_roots", "call", "list_roots"),
    ),
    "ts": (
        Step("call:test_simple_text", "call", "test_simple_text"),
        Step("call:test_error_handling", "call", "test_error_handling"),
        Step("call:test_elicitation", "call", "test_elicitation"),
        Step("prompt:test_simple_prompt", "prompt", "test_simple_prompt"),
        Step("read:test://static-text", "read", uri="test://static-text"),
    ),
    "sqlite": (
        Step("call:list_tables", "call", "list_tables"),
        Step("call:read_query", "call", "read_query", {"query": "SELECT 1 AS one"}),
        Step("call:describe_table", "call", "describe_table", {"table_name": "missing"}),
        Step("prompt:mcp-demo", "prompt", "mcp-demo", {"topic": "planets"}),
        Step("read:memo://insights", "read", uri="memo://insights"),
    ),
    "everything": (
        Step("call:echo", "call", "echo", {"message": "hi"}),
        Step("call:get-sum", "call", "get-sum", {"a": 2, "b": 3}),
        Step(
            "call:get-structured-content", "call", "get-structured-content", {"location": "Chicago"}
        ),
        Step("call:trigger-elicitation-request", "call", "trigger-elicitation-request"),
        Step("prompt:simple-prompt", "prompt", "simple-prompt"),
        Step(
            "read:demo://resource/static/document/architecture.md",
            "read",
            uri="demo://resource/static/document/architecture.md",
        ),
    ),
}
SERVERS: tuple[str, ...] = tuple(STEPS)


def server_configs(folder: Path) -> dict[str, dict[str, Any]]:
    node = node22()
    everything = PEERS / "node_modules" / "@modelcontextprotocol" / "server-everything"
    sqlite = REPO / ".venv-sqlite" / "bin" / "mcp-server-sqlite"
    if not sqlite.exists():
        raise PeersMissing(f"{sqlite} is missing: run `make test`, which creates .venv-sqlite")
    return {
        "early": {"command": _venv(".venv-mcp18"), "args": [str(SCRIPTS / "early_server.py")]},
        "fastmcp4": {
            "command": _venv(".venv-fastmcp"),
            "args": [str(REPO / "tests" / "fixtures" / "fastmcp_server.py")],
        },
        "ts": {"command": node, "args": [str(PEERS / "sdk1-server.mjs"), "--transport", "stdio"]},
        "sqlite": {"command": str(sqlite), "args": ["--db-path", str(folder / "matrix.db")]},
        "everything": {"command": node, "args": [str(everything / "dist" / "index.js"), "stdio"]},
    }


def _stdio(config: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    return {
        "command": config["command"],
        "args": list(config["args"]),
        "env": {**env, **config.get("env", {})},
        "cwd": str(REPO),
    }


def direct_plan(configs: Mapping[str, Any]) -> dict[str, Any]:
    """A host's walk of each server directly, in L{DIRECT_LANES} lanes."""
    base = wire_env(dict(os.environ))
    direct: list[dict[str, Any]] = []
    for server in SERVERS:
        steps = [s.plan() for s in (*_listing(), *STEPS[server])]
        direct.append(
            {"id": f"direct/{server}", "stdio": _stdio(configs[server], base), "steps": steps}
        )
    return {"lanes": [direct[lane::DIRECT_LANES] for lane in range(DIRECT_LANES)]}


def paths_plan(passing: Daemon, gateway: Daemon) -> dict[str, Any]:
    """A host's walk of each path through mcpx, one after the other."""
    paths: list[dict[str, Any]] = []
    passed = [s.plan(key=f"{server}/{s.key}") for server in SERVERS for s in STEPS[server]]
    listings = [s.plan() for s in _listing()]
    serve = {
        "command": sys.executable,
        "args": ["-m", "mcpx", "serve", "--passthrough", ",".join(SERVERS)],
    }
    paths.append({"id": "serve", "stdio": _stdio(serve, gateway.env), "steps": listings + passed})
    paths.append({"id": "mcp", "url": passing.mcp_url, "steps": listings + passed})
    through: list[dict[str, Any]] = []
    for server in SERVERS:
        for s in STEPS[server]:
            key = f"{server}/{s.key}"
            if s.op == "call":
                arguments = {"server": server, "tool": s.name, "arguments": dict(s.arguments)}
                through.append(s.plan(key=key, name="mcpx_call", arguments=arguments))
            elif s.op == "prompt":
                through.append(s.plan(key=key, name=f"{server}_{s.name}"))
            else:
                through.append(s.plan(key=key, uri=f"mcpx://{server}/{s.uri}"))
    gw = {"command": sys.executable, "args": ["-m", "mcpx", "serve"]}
    paths.append({"id": "gateway", "stdio": _stdio(gw, gateway.env), "steps": through})
    return {"lanes": [paths]}


def drive(host: Host, the_plan: Mapping[str, Any], folder: Path, part: str) -> dict[str, Any]:
    plan_file = folder / f"plan-{host.name}-{part}.json"
    plan_file.write_text(json.dumps(the_plan), encoding="utf-8")
    # Not the test's own PYTHONPATH (trial -j sets one): each host runs its own SDK.
    env = wire_env(os.environ)
    done = subprocess.run(
        [*host.argv, str(plan_file)],
        capture_output=True,
        env=env,
        timeout=DRIVER_TIMEOUT,
        cwd=str(PEERS if host.name.startswith("ts") else REPO),
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(
            f"{host.name} exited {done.returncode}: {done.stderr.decode()[-3000:]}"
        )
    return cast(dict[str, Any], json.loads(done.stdout))


# Normalising (spec/host-matrix.md, "How cells are compared").

_SERVER_INFO = "io.modelcontextprotocol/serverInfo"


def _normal(value: Any) -> Any:
    """A result without what names the answering party (mcpx, through mcpx)."""
    if isinstance(value, dict):
        meta = value.get("_meta")
        if isinstance(meta, dict) and _SERVER_INFO in meta:
            meta = {k: v for k, v in meta.items() if k != _SERVER_INFO}
            value = (
                {**value, "_meta": meta}
                if meta
                else {k: v for k, v in value.items() if k != "_meta"}
            )
        return {k: _normal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


_ID = {"tools": "name", "prompts": "name", "resources": "uri", "templates": "uriTemplate"}


def _ungateway(server: str, key: str, value: Any) -> Any:
    """A gateway answer as the server's own: its prompt and resource names given back."""
    if key.startswith("read:") and isinstance(value, dict) and "contents" in value:
        prefix = f"mcpx://{server}/"
        contents = [
            {**c, "uri": c["uri"][len(prefix) :]} if str(c.get("uri", "")).startswith(prefix) else c
            for c in value["contents"]
        ]
        return {**value, "contents": contents}
    return value


Cell = tuple[str, str, str, str]


def listed_directly(seen: Mapping[str, Mapping[str, Any]]) -> set[str]:
    """The name (or URI) of every tool, prompt, resource and template any host saw directly."""
    return {
        str(item.get(id_field))
        for targets in seen.values()
        for target, outcome in targets.items()
        if target.startswith("direct/") and "steps" in outcome
        for listing, id_field in _ID.items()
        if isinstance(outcome["steps"].get(listing), list)
        for item in outcome["steps"][listing]
    }


def differences(host: str, seen: Mapping[str, Any], known: set[str]) -> dict[Cell, str]:
    """
    Every (host, server, path, item) where a path answered otherwise than direct; C{known}
    is L{listed_directly}, so that what a path lists beyond every server's own is seen.
    """
    found: dict[Cell, str] = {}

    def compare(server: str, path: str, item: str, direct: Any, other: Any) -> None:
        if _normal(direct) != _normal(other):
            mine, theirs = json.dumps(_normal(direct))[:400], json.dumps(_normal(other))[:400]
            found[(host, server, path, item)] = f"direct {mine} / {path} {theirs}"

    paths = [p for p in ("serve", "mcp", "gateway") if p in seen]
    for path in paths:
        target = seen[path]
        if "steps" not in target:
            found[(host, "*", path, "session")] = json.dumps(target)[:400]
            continue
        steps = target["steps"]
        for server in SERVERS:
            direct = seen[f"direct/{server}"]
            if "steps" not in direct:
                found[(host, server, "direct", "session")] = json.dumps(direct)[:400]
                continue
            if path != "gateway":
                for listing, id_field in _ID.items():
                    mine = direct["steps"][listing]
                    if isinstance(mine, dict) and mine.get("error", {}).get("code") == -32601:
                        mine = []  # a server without the listing lists nothing in a merged one
                    theirs = steps.get(listing)
                    if isinstance(mine, list) and isinstance(theirs, list):
                        names = {item.get(id_field) for item in mine}
                        theirs = [item for item in theirs if item.get(id_field) in names]
                    compare(server, path, listing, mine, theirs)
            for step in STEPS[server]:
                other = steps.get(f"{server}/{step.key}")
                if path == "gateway":
                    other = _ungateway(server, step.key, other)
                compare(server, path, step.key, direct["steps"][step.key], other)
        if path != "gateway":
            for listing, id_field in _ID.items():
                listed = steps.get(listing)
                if isinstance(listed, list):
                    extra = sorted(
                        str(item.get(id_field))
                        for item in listed
                        if str(item.get(id_field)) not in known
                        and not (listing == "tools" and item["name"].startswith(GATEWAY_PREFIX))
                    )
                    if extra:
                        found[(host, "*", path, f"{listing}:extra")] = ", ".join(extra)
    return found


_ROW = re.compile(
    r"^\|\s*`?([^|`]+?)`?\s*\|\s*`?([^|`]+?)`?\s*\|\s*`?([^|`]+?)`?\s*\|\s*`?([^|`]+?)`?\s*\|(.*)\|\s*$"
)
#: How the "why" of a row says it is observed in some runs only.
SOMETIMES = "**Sometimes.**"


def table() -> tuple[set[Cell], set[Cell]]:
    """
    The table of spec/host-matrix.md: each row's (host, server, path, item), C{*}
    expanded; the rows always observed, then those observed in some runs only.
    """
    text = TABLE.read_text(encoding="utf-8")
    section = text[text.index("<!-- differences -->") :]
    always: set[Cell] = set()
    sometimes: set[Cell] = set()
    names = [h.name for h in hosts()]
    for line in section.splitlines():
        match = _ROW.match(line)
        if not match or match.group(1) in ("host", "---"):
            continue
        host, server, path, item = (g.strip() for g in match.groups()[:4])
        rows = sometimes if match.group(5).strip().startswith(SOMETIMES) else always
        for h in names if host == "*" else host.split(","):
            for p in ("serve", "mcp", "gateway") if path == "*" else path.split(","):
                rows.add((h.strip(), server, p.strip(), item))
    return always, sometimes - always


_seen: list[dict[str, dict[str, Any]]] = []


def observed() -> dict[str, dict[str, Any]]:
    """What each host saw on every target, from one run of every driver (made once)."""
    if not _seen:
        folder = Path(tempfile.mkdtemp(prefix="mcpx-hostmatrix-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        configs = server_configs(folder)
        no_data = cast(Data, None)
        with ThreadPoolExecutor(2) as starting:
            passing_f = starting.submit(start_daemon, no_data, servers=configs, passthrough=SERVERS)
            gateway_f = starting.submit(start_daemon, no_data, servers=configs)
            passing, gateway = passing_f.result(), gateway_f.result()
        everyone = hosts()
        direct, paths = direct_plan(configs), paths_plan(passing, gateway)

        def through_mcpx() -> dict[str, dict[str, Any]]:
            try:
                return {h.name: drive(h, paths, folder, "paths") for h in everyone}
            finally:
                # Stopping takes a while (mcp-server-sqlite ignores the end of its
                # stdin): while the last hosts still walk the servers directly.
                with ThreadPoolExecutor(2) as stopping:
                    list(stopping.map(Daemon.stop, (passing, gateway)))

        # The paths through mcpx one host at a time (the daemons are shared), and beside
        # them the direct sessions, which share nothing, also one host at a time; once
        # every path is walked, the hosts left take that place too.
        with ThreadPoolExecutor(2) as driving:
            through = driving.submit(through_mcpx)
            alone = {h.name: driving.submit(drive, h, direct, folder, "direct") for h in everyone}
            _seen.append(
                {h.name: {**alone[h.name].result(), **through.result()[h.name]} for h in everyone}
            )
    return _seen[0]


class HostMatrixTests(SynchronousTestCase):
    def test_differences_are_the_table(self) -> None:
        """
        Every host, server and path answers as the server does directly, apart from the
        rows of spec/host-matrix.md's table; and every row of it is still observed.
        """
        seen = observed()
        found: dict[Cell, str] = {}
        known = listed_directly(seen)
        for host, targets in seen.items():
            found.update(differences(host, targets, known))
        Path("host-matrix.json").write_text(json.dumps(seen, indent=1), encoding="utf-8")
        always, sometimes = table()
        unexpected = {cell: found[cell] for cell in sorted(set(found) - always - sometimes)}
        stale = sorted(always - set(found))
        self.assertEqual(
            (list(unexpected.items()), stale),
            ([], []),
            "differences not in spec/host-matrix.md (first), rows no longer observed (second)",
        )

    def test_direct_works(self) -> None:
        """
        Every host reached every server directly (a matrix of failed baselines would
        compare nothing), except where the table says the host cannot.
        """
        seen = observed()
        broken = sorted(
            (host, target)
            for host, targets in seen.items()
            for target, outcome in targets.items()
            if target.startswith("direct/") and "steps" not in outcome
        )
        always, sometimes = table()

        def direct(rows: set[Cell]) -> set[tuple[str, str]]:
            return {
                (host, f"direct/{server}")
                for host, server, path, item in rows
                if path == "direct" and item == "session"
            }

        # Every row always observed is; a sometimes-row may be.
        missing = sorted(direct(always) - set(broken))
        unlisted = sorted(set(broken) - direct(always | sometimes))
        self.assertEqual((missing, unlisted), ([], []))
