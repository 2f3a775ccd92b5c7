"""
The MCP Apps leg (C{io.modelcontextprotocol/ui}): three official MCP App servers from
npm behind real daemons, C{@modelcontextprotocol/server-basic-vanillajs} and
C{server-system-monitor} over stdio, C{server-budget-allocator} over Streamable HTTP,
and raw JSON hosts of both eras (C{tests/interop/apps_hosts.py}: a 2025-11-25 host and a
2026-07-28 host) on C{mcpx serve} and on C{/mcp}.

L{PassThroughTests}: what each host sees through mcpx equals, field for field, what a
host sees talking to each server directly: every tool with its C{_meta.ui}, every
resource, each app's HTML and its read result, an app's own call of the
C{["app"]}-only C{poll-system-stats}.  L{GatewayTests}: the same servers reached through
mcpx's gateway tools: the app's resource is readable under the name C{mcpx_call}'s
result and C{mcpx_describe} give it, its HTML the server's own; C{poll-system-stats} is
never offered to a model yet the app calls it.  L{GuardRailTests}: a denied app-only
tool stays denied for its app, and no plain HTTP route serves an app's HTML.

Like the other interop legs, these run only in a private network namespace (the
official servers' HTTP mode binds every interface): C{make test} runs trial under
C{tests/isolated}.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from attrs import frozen
from twisted.internet.threads import deferToThread
from twisted.trial.unittest import TestCase

from mcpx.spec.apps import APP_MIME_TYPE, UI_EXTENSION
from tests.conformance.test_passthrough_leg import daemon_environ
from tests.interop.apps_hosts import (
    UI_DECLARED,
    Host,
    HttpWire,
    LegacyHost,
    ModernHost,
    StdioWire,
)
from tests.interop.peers import start_relay
from tests.support.peers import app_server_argv, in_private_netns, start_app_server_http
from tests.support.processes import REPO, free_tcp_port, kill_on_cleanup, reactor, spawn

T = TypeVar("T")

#: The servers over stdio, by the names the daemons give them, and their npm packages.
STDIO_APPS = {"basic": "server-basic-vanillajs", "monitor": "server-system-monitor"}
#: The server over Streamable HTTP.
HTTP_APP = ("budget", "server-budget-allocator")
NAMES = ("basic", "monitor", "budget")
#: Each server's app resource, and one tool of it whose answer does not change.
UI = {
    "basic": "ui://get-time/mcp-app.html",
    "monitor": "ui://system-monitor/mcp-app.html",
    "budget": "ui://budget-allocator/mcp-app.html",
}
APP_ONLY = "poll-system-stats"
STEADY = ("budget", "get-budget-data")
#: The gateway's name of each app resource.
GATEWAY_UI = {
    "basic": "ui://mcpx/basic/get-time/mcp-app.html",
    "monitor": "ui://mcpx/monitor/system-monitor/mcp-app.html",
    "budget": "ui://mcpx/budget/budget-allocator/mcp-app.html",
}
ERAS: tuple[type[Host], ...] = (LegacyHost, ModernHost)
#: What a 2026-07-28 result has that no earlier one does.
ERA_ONLY = frozenset({"resultType", "ttlMs", "cacheScope"})


@frozen
class Daemon:
    url: str
    port: int
    env: dict[str, str]

    def serve(self, passthrough: str | None) -> StdioWire:
        """C{mcpx serve}, with C{--passthrough passthrough} unless C{None}."""
        argv = [sys.executable, "-m", "mcpx", "serve"]
        if passthrough is not None:
            argv += ["--passthrough", passthrough]
        return StdioWire(argv, self.env)


def plain(result: Mapping[str, Any]) -> dict[str, Any]:
    """
    A result less what only says who answered and in which era: 2026-07-28's
    C{resultType}, its cache hints (C{ttlMs}, C{cacheScope}) and the C{_meta} keys MCP
    reserves (C{serverInfo}), C{_meta} itself when nothing else is in it.
    """
    kept = {k: v for k, v in result.items() if k not in ERA_ONLY}
    meta = kept.pop("_meta", None)
    if isinstance(meta, dict):
        own = {k: v for k, v in meta.items() if not k.startswith("io.modelcontextprotocol/")}
        if own:
            kept["_meta"] = own
    return kept


def shape(value: Any) -> Any:
    """The keys and types of a value whose numbers change from call to call."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [shape(item) for item in value[:1]]
    if isinstance(value, int | float) and not isinstance(value, bool):
        # JSON has numbers: 12.0 is written 12 by one answer and 12.5 by the next.
        return "number"
    return type(value).__name__


def call_shape(result: Mapping[str, Any]) -> dict[str, Any]:
    """A call result whose values change (the system's load): its content's kinds and shape."""
    return {
        "isError": result.get("isError", False),
        "content": [block.get("type") for block in result.get("content", [])],
        "structuredContent": shape(result.get("structuredContent")),
    }


def observe(host: Host, *, app_tool_via: str | None = None) -> dict[str, Any]:
    """What a host sees of the servers: tools, resources, each app's read, app calls."""
    tools = {t["name"]: t for t in host.listed("tools/list", "tools")}
    resources = {r["uri"]: r for r in host.listed("resources/list", "resources")}
    reads = {uri: plain(host.read(uri)) for uri in resources if uri.startswith("ui://")}
    seen: dict[str, Any] = {"tools": tools, "resources": resources, "reads": reads}
    if "get-budget-data" in tools:
        seen["steady"] = plain(host.call("get-budget-data"))
    if APP_ONLY in tools or app_tool_via is not None:
        seen["app_call"] = call_shape(host.call(APP_ONLY))
    return seen


def direct_observations(budget_url: str) -> dict[str, dict[str, Any]]:
    """Each server as a 2025-11-25 host sees it talking to it directly."""
    seen: dict[str, dict[str, Any]] = {}
    for name, package in STDIO_APPS.items():
        host = LegacyHost(StdioWire(app_server_argv(package)))
        try:
            seen[name] = observe(host)
        finally:
            host.close()
    seen[HTTP_APP[0]] = observe(LegacyHost(HttpWire(budget_url)))
    return seen


def merged(direct: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The direct observations of every server as one host would see them passed through."""
    whole: dict[str, Any] = {"tools": {}, "resources": {}, "reads": {}}
    for seen in direct.values():
        for key in ("tools", "resources", "reads"):
            whole[key].update(seen[key])
        for key in ("steady", "app_call"):
            if key in seen:
                whole[key] = seen[key]
    return whole


def in_thread(work: Callable[[], T]) -> Any:
    return deferToThread(work)


class _AppsCase(TestCase):
    timeout = 600

    def setUp(self) -> None:
        if not in_private_netns():
            self.fail("run the MCP Apps leg in a private network namespace (tests/isolated)")

    async def budget_url(self) -> str:
        server = await start_app_server_http(reactor, HTTP_APP[1], add_cleanup=self.addCleanup)
        return server.url

    def servers(self, budget_url: str) -> dict[str, Any]:
        servers: dict[str, Any] = {}
        for name, package in STDIO_APPS.items():
            argv = app_server_argv(package)
            servers[name] = {"command": argv[0], "args": argv[1:]}
        servers[HTTP_APP[0]] = {"url": budget_url}
        return servers

    async def daemon(
        self,
        servers: Mapping[str, Any],
        *,
        passthrough: Sequence[str] = (),
        defaults: Mapping[str, Any] | None = None,
    ) -> Daemon:
        """A real daemon serving C{servers}, passing C{passthrough} through on C{/mcp}."""
        state_dir = tempfile.mkdtemp(prefix="mcpx-apps-")
        config_home = tempfile.mkdtemp(prefix="mcpx-appsc-")
        self.addCleanup(shutil.rmtree, state_dir, True)
        self.addCleanup(shutil.rmtree, config_home, True)
        config = Path(config_home) / "config.json"
        body: dict[str, Any] = {"servers": dict(servers)}
        if defaults is not None:
            body["serverDefaults"] = dict(defaults)
        config.write_text(json.dumps(body), encoding="utf-8")
        port = free_tcp_port()
        argv = [sys.executable, "-m", "mcpx", "daemon"]
        if passthrough:
            argv += ["--passthrough", ",".join(passthrough)]
        argv += ["--daemon-listen", f"tcp:{port}:interface=127.0.0.1"]
        env = daemon_environ(config, state_dir, config_home)
        child = spawn(argv, env=env, cwd=str(REPO))
        self.addCleanup(kill_on_cleanup, child)

        async def stop() -> None:
            child.signal("TERM")
            await child.ended()

        self.addCleanup(stop)
        await child.wait_for(rb"listening on http://127\.0\.0\.1:\d+", timeout=60)
        return Daemon(f"http://127.0.0.1:{port}/mcp", port, env)


class PassThroughTests(_AppsCase):
    """Pass-through is what a host sees directly, field for field."""

    async def test_field_for_field(self) -> None:
        """
        Each era's host, on C{mcpx serve --passthrough} and on C{/mcp}, sees every tool
        (C{_meta.ui} and all), every resource, each app's read result (its HTML byte for
        byte) and an app's call of its C{["app"]}-only tool as a host talking to each
        server directly does.
        """
        budget = await self.budget_url()
        direct = merged(await in_thread(lambda: direct_observations(budget)))
        self.assertEqual(direct["tools"][APP_ONLY]["_meta"], {"ui": {"visibility": ["app"]}})
        daemon = await self.daemon(self.servers(budget), passthrough=NAMES)

        def through(era: type[Host], via: str) -> dict[str, Any]:
            wire = daemon.serve(",".join(NAMES)) if via == "serve" else HttpWire(daemon.url)
            host = era(wire)
            try:
                seen = observe(host)
            finally:
                host.close()
            # The gateway's own tools follow the servers' on every pass-through.
            seen["tools"] = {k: v for k, v in seen["tools"].items() if not k.startswith("mcpx_")}
            return seen

        for era in ERAS:
            for via in ("serve", "mcp"):
                seen = await deferToThread(through, era, via)
                cell = f"{era.era} host on {via}"
                self.assertEqual(seen["tools"], direct["tools"], cell)
                self.assertEqual(seen["resources"], direct["resources"], cell)
                self.assertEqual(seen["reads"], direct["reads"], cell)
                self.assertEqual(seen["steady"], direct["steady"], cell)
                self.assertEqual(seen["app_call"], direct["app_call"], cell)
                self.assertFalse(seen["app_call"]["isError"], cell)


class GatewayTests(_AppsCase):
    """The servers through mcpx's gateway tools."""

    async def test_apps_through_the_gateway(self) -> None:
        """
        On C{mcpx serve} and C{/mcp}, for both eras: C{mcpx_call}'s result names the
        tool's app under a C{ui://mcpx/} name, which reads as the server's own HTML;
        C{mcpx_describe} names the same; the resource is listed under it;
        C{poll-system-stats} is not offered to the model (C{mcpx_tools}, C{tools/list},
        C{mcpx_describe}, C{mcpx_call}) but its app's own C{tools/call} of it is answered.
        """
        budget = await self.budget_url()
        direct = await in_thread(lambda: direct_observations(budget))
        daemon = await self.daemon(self.servers(budget))

        def gateway(era: type[Host], via: str) -> dict[str, Any]:
            wire = daemon.serve(None) if via == "serve" else HttpWire(daemon.url)
            host = era(wire)
            try:
                seen: dict[str, Any] = {}
                seen["listed"] = host.call("mcpx_tools")["structuredContent"]["tools"]
                seen["tools"] = [t["name"] for t in host.listed("tools/list", "tools")]
                seen["resources"] = {
                    r["uri"]: r for r in host.listed("resources/list", "resources")
                }
                seen["calls"] = {
                    name: host.call("mcpx_call", {"server": name, "tool": tool})
                    for name, tool in (
                        ("basic", "get-time"),
                        ("monitor", "get-system-info"),
                        STEADY,
                    )
                }
                seen["reads"] = {name: host.read(uri) for name, uri in GATEWAY_UI.items()}
                seen["described"] = host.call(
                    "mcpx_describe", {"server": "monitor", "tool": "get-system-info"}
                )
                seen["described_app_only"] = host.call(
                    "mcpx_describe", {"server": "monitor", "tool": APP_ONLY}
                )
                seen["model_app_only"] = host.call(
                    "mcpx_call", {"server": "monitor", "tool": APP_ONLY}
                )
                seen["app_call"] = host.call(APP_ONLY)
                if isinstance(host, ModernHost):
                    seen["declared"] = host.request("server/discover")["capabilities"]
                else:
                    assert isinstance(host, LegacyHost)
                    seen["declared"] = host.initialized["capabilities"]
                return seen
            finally:
                host.close()

        for era in ERAS:
            for via in ("serve", "mcp"):
                seen = await deferToThread(gateway, era, via)
                cell = f"{era.era} host on {via}"
                names = {(t["server"], t["name"]) for t in seen["listed"]}
                self.assertIn(("monitor", "get-system-info"), names, cell)
                self.assertIn(STEADY, names, cell)
                self.assertNotIn(("monitor", APP_ONLY), names, cell)
                self.assertNotIn(APP_ONLY, seen["tools"], cell)
                self.assertTrue(all(name.startswith("mcpx_") for name in seen["tools"]), cell)
                for name, result in seen["calls"].items():
                    self.assertFalse(result.get("isError"), (cell, name, result))
                    ui = result["_meta"]["ui"]
                    self.assertEqual(ui, {"resourceUri": GATEWAY_UI[name]}, cell)
                    self.assertEqual(result["_meta"]["ui/resourceUri"], GATEWAY_UI[name], cell)
                steady = plain(seen["calls"][STEADY[0]])
                self.assertEqual(
                    {k: v for k, v in steady.items() if k != "_meta"},
                    {k: v for k, v in direct["budget"]["steady"].items() if k != "_meta"},
                    cell,
                )
                for name, uri in GATEWAY_UI.items():
                    listed = seen["resources"][uri]
                    self.assertEqual(listed["mimeType"], APP_MIME_TYPE, cell)
                    read = plain(seen["reads"][name])
                    upstream = direct[name]["reads"][UI[name]]
                    self.assertEqual(
                        read, {"contents": [{**upstream["contents"][0], "uri": uri}]}, cell
                    )
                described = seen["described"]["structuredContent"]["tool"]
                self.assertEqual(
                    described["_meta"],
                    {
                        "ui": {"resourceUri": GATEWAY_UI["monitor"]},
                        "ui/resourceUri": GATEWAY_UI["monitor"],
                    },
                    cell,
                )
                self.assertTrue(seen["described_app_only"]["isError"], cell)
                self.assertTrue(seen["model_app_only"]["isError"], cell)
                self.assertIn("app", seen["model_app_only"]["content"][0]["text"], cell)
                self.assertFalse(seen["app_call"].get("isError"), cell)
                self.assertEqual(call_shape(seen["app_call"]), direct["monitor"]["app_call"], cell)
                if era is ModernHost:
                    self.assertEqual(
                        seen["declared"]["extensions"][UI_EXTENSION],
                        {"mimeTypes": [APP_MIME_TYPE]},
                        cell,
                    )
                else:
                    # 2025-11-25 has no extensions: nothing is declared there.
                    self.assertNotIn("extensions", seen["declared"], cell)


class CachingTests(_AppsCase):
    """An app's HTML is kept in the pool's catalogue: hosts' repeated reads stay in mcpx."""

    async def test_repeated_reads_do_not_reach_the_server(self) -> None:
        """
        C{server-budget-allocator} over Streamable HTTP behind a recording relay: its
        app's resource read by hosts of both eras, through the gateway and in
        pass-through, eight times, reaches the server once for each instance that served
        them, and each read is its HTML: the gateway's, and the pass-through hosts' (they
        declare no questions, so they have an instance of their own declaring none
        upstream, spec/passthrough.md), each keeping its reads.
        """
        budget = await self.budget_url()
        folder = Path(tempfile.mkdtemp(prefix="mcpx-apps-relay-"))
        self.addCleanup(shutil.rmtree, folder, True)
        relayed = await start_relay(self, budget, folder)
        daemon = await self.daemon({HTTP_APP[0]: {"url": relayed}})
        direct = await in_thread(lambda: LegacyHost(HttpWire(budget)).read(UI["budget"]))

        def reads() -> list[str]:
            texts = []
            for era in ERAS:
                for via, uri in (("gateway", GATEWAY_UI["budget"]), ("passthrough", UI["budget"])):
                    wire = daemon.serve(None if via == "gateway" else "budget")
                    host = era(wire)
                    try:
                        texts += [host.read(uri)["contents"][0]["text"] for _ in range(2)]
                    finally:
                        host.close()
            return texts

        texts = await in_thread(reads)
        self.assertEqual(texts, [direct["contents"][0]["text"]] * 8)
        frames = [
            json.loads(line[2:])
            for tap in folder.glob("*.tap")
            for line in tap.read_text(encoding="utf-8").splitlines()
            if line.startswith("> ")
        ]
        read = [f for f in frames if f.get("method") == "resources/read"]
        self.assertEqual(len(read), 2, read)


class GuardRailTests(_AppsCase):
    """The policy holds for an app's calls; the daemon is no web server for apps."""

    async def test_denied_app_only_tool_stays_denied(self) -> None:
        """
        C{tools.deny} naming C{poll-system-stats}: its app's C{tools/call} is refused
        through the gateway and in pass-through, for both eras, as a model's would be.
        """
        argv = app_server_argv(STDIO_APPS["monitor"])
        servers = {"monitor": {"command": argv[0], "args": argv[1:], "tools": {"deny": [APP_ONLY]}}}
        daemon = await self.daemon(servers)

        def app_calls(era: type[Host], via: str) -> Any:
            wire = daemon.serve("monitor") if via == "passthrough" else HttpWire(daemon.url)
            host = era(wire)
            try:
                listed = [t["name"] for t in host.listed("tools/list", "tools")]
                return (
                    listed,
                    host.answer("tools/call", {"name": APP_ONLY, "arguments": {}}),
                    host.call(
                        "get-system-info" if via == "passthrough" else "mcpx_call",
                        {}
                        if via == "passthrough"
                        else {"server": "monitor", "tool": "get-system-info"},
                    ),
                )
            finally:
                host.close()

        for era in ERAS:
            for via in ("passthrough", "gateway"):
                listed, answer, allowed = await deferToThread(app_calls, era, via)
                cell = f"{era.era} host, {via}"
                self.assertNotIn(APP_ONLY, listed, cell)
                self.assertIn("error", answer, (cell, answer))
                self.assertEqual(answer["error"]["code"], -32602, cell)
                # The tool next to it is not: the policy refused this one call.
                self.assertFalse(allowed.get("isError"), (cell, allowed))

    async def test_confirmation_asked_for_an_apps_call(self) -> None:
        """
        C{tools.confirm} naming C{poll-system-stats}: its app's C{tools/call}, through the
        gateway and in pass-through, is put to the user first, as a model's call would
        be; declined, the tool is not called and the app gets mcpx's tool error;
        accepted, it is called.
        """
        argv = app_server_argv(STDIO_APPS["monitor"])
        entry = {"command": argv[0], "args": argv[1:], "tools": {"confirm": [APP_ONLY]}}
        daemon = await self.daemon({"monitor": entry})
        asking = {**UI_DECLARED, "elicitation": {"form": {}}}

        def app_call(via: str, yes: bool) -> tuple[dict[str, Any], list[dict[str, Any]]]:
            def answer(request: Mapping[str, Any]) -> Any:
                return {"action": "accept", "content": {"confirm": yes}}

            argv = [sys.executable, "-m", "mcpx", "serve", "--passthrough"]
            argv.append("monitor" if via == "passthrough" else "")
            wire = StdioWire(argv, daemon.env, answer=answer)
            host = LegacyHost(wire, asking)
            try:
                return host.call(APP_ONLY), wire.asked
            finally:
                host.close()

        for via in ("passthrough", "gateway"):
            for yes in (False, True):
                result, asked = await deferToThread(app_call, via, yes)
                cell = f"{via}, confirmed: {yes}"
                self.assertEqual([a["method"] for a in asked], ["elicitation/create"], cell)
                self.assertIn(APP_ONLY, json.dumps(asked[0]["params"]), cell)
                if yes:
                    self.assertFalse(result.get("isError"), (cell, result))
                    self.assertIn("cpu", result["structuredContent"], cell)
                else:
                    self.assertTrue(result.get("isError"), (cell, result))
                    self.assertIn("did not call", result["content"][0]["text"], cell)

    async def test_no_plain_http_route_serves_an_app(self) -> None:
        """
        An app's HTML reaches a host only inside MCP: no path of the daemon answers it as
        a page (C{text/html}), the status page included; C{/v1/read} answers JSON.
        """
        argv = app_server_argv(STDIO_APPS["monitor"])
        daemon = await self.daemon({"monitor": {"command": argv[0], "args": argv[1:]}})
        marker = "<title>System Monitor</title>"

        def fetch(method: str, path: str, body: Any = None) -> tuple[int, str, str]:
            request = urllib.request.Request(
                f"http://127.0.0.1:{daemon.port}{path}",
                data=None if body is None else json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
                method=method,
            )
            try:
                with urllib.request.urlopen(request, timeout=120) as response:
                    return (
                        response.status,
                        response.headers.get("Content-Type", ""),
                        response.read().decode(),
                    )
            except urllib.error.HTTPError as e:
                return e.code, e.headers.get("Content-Type", ""), e.read().decode()

        def probe() -> list[tuple[str, int, str, str]]:
            got = []
            read = fetch("POST", "/v1/read", {"server": "monitor", "uri": UI["monitor"]})
            got.append(("/v1/read", *read))
            for path in (
                "/",
                "/status.js",
                "/index.html",
                "/" + GATEWAY_UI["monitor"],
                "/ui/monitor/system-monitor/mcp-app.html",
                "/v1/resources/monitor/" + UI["monitor"],
                "/mcpx://monitor/" + UI["monitor"],
            ):
                got.append((path, *fetch("GET", path)))
            return got

        answers = await in_thread(probe)
        path, status, kind, body = answers[0]
        self.assertEqual((path, status), ("/v1/read", 200))
        self.assertTrue(kind.startswith("application/json"), kind)
        self.assertIn(marker, json.loads(body)["contents"][0]["text"])
        for path, status, kind, body in answers[1:]:
            self.assertFalse(
                marker in body and not kind.startswith("application/json"),
                f"{path} answered {status} {kind} with the app's HTML",
            )
        page = dict((a[0], a) for a in answers)["/"]
        self.assertEqual(page[1], 200)
        self.assertNotIn(marker, page[3])

    def test_status_page_writes_no_markup_it_was_given(self) -> None:
        """
        The status page shows what servers say (names, errors, titles) as text: its
        script builds the page with C{textContent} and elements, never by parsing text
        as HTML, so no upstream's HTML is ever rendered by it.
        """
        status = REPO / "mcpx" / "daemon" / "status"
        for script in status.glob("*.js"):
            text = script.read_text(encoding="utf-8")
            for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write"):
                self.assertNotIn(sink, text, f"{script.name} uses {sink}")
            self.assertNotIn("srcdoc", text, script.name)
