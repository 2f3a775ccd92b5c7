"""
MCP Apps in a real browser: a small host page built on C{@modelcontextprotocol/ext-apps}'s
app bridge (tests/support/apps_host, bundled by esbuild as the test starts), served by
the test on loopback, talks to a real C{mcpx daemon}'s C{/mcp} from Debian's Chromium
(Playwright, tests/support/apps_browser.py), with the official example server
C{@modelcontextprotocol/server-basic-vanillajs} (stdio) behind it.  The page calls the
app's tool, reads the C{ui://} resource the tool names, renders it in a sandboxed iframe,
hands it the call's input and result, and forwards the app's own C{tools/call} through
mcpx; the test asserts what the app shows and that its call reached the server.  It does
so with the server passed through (the host calls C{get-time}) and through the gateway (the
host calls C{mcpx_call} and renders the C{ui://mcpx/...} resource its result names; the
app's own C{get-time} goes by that name through the gateway), for hosts of both eras.

The page's origin is let in the documented way, by listing it in
C{transport.allowedOrigins} (docs/hosts.md "Browsers, Origin and Host").

To refresh the screenshot in the docs: C{MCPX_APPS_SCREENSHOT=docs/mcp-app.png} while
running this module.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from attrs import field, frozen
from twisted.web.server import Site
from twisted.web.static import File

from tests.daemon.test_status_page import RealDaemonPageCase
from tests.support.peers import NODE_MODULES, node22
from tests.support.processes import REPO, kill_on_cleanup, reactor, spawn

HOST_SOURCE = REPO / "tests" / "support" / "apps_host" / "host.js"
BASIC_SERVER = NODE_MODULES / "@modelcontextprotocol" / "server-basic-vanillajs" / "dist"
#: esbuild's own binary for this platform (the C{esbuild} package's launcher needs its
#: install script to have run; this does not).
ESBUILD = NODE_MODULES / "@esbuild" / "linux-x64" / "bin" / "esbuild"
APP_URI = "ui://get-time/mcp-app.html"
APP_MIME = "text/html;profile=mcp-app"
MODERN = "2026-07-28"
#: The older key ext-apps's servers still set beside C{_meta.ui.resourceUri}.
UI_KEY = "ui/resourceUri"

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>mcpx MCP Apps test host</title>
<link rel="icon" href="data:,">
<style>
  body {{ font: 14px system-ui, sans-serif; margin: 16px; background: #f4f4f5; }}
  header {{ margin-bottom: 8px; color: #333; }}
  #frame iframe {{ width: 100%; min-height: 360px; border: 1px solid #ccc;
                   border-radius: 8px; background: #fff; }}
</style>
<script type="application/json" id="config">{config}</script>
</head><body>
<header><strong>Test host</strong> (ext-apps AppBridge) &rarr; mcpx <code>{mcp}</code>:
<span id="status">starting</span></header>
<div id="frame"></div>
<script type="module" src="host.js"></script>
</body></html>
"""


@frozen
class Mode:
    """
    How the host reaches the app's server through mcpx: what the daemon passes through
    (C{mcp.passthrough}), the tool the host calls and its arguments, and how the app's
    own calls are made on the host's connection (by the app's tool name; empty: as the
    app names them).  The host takes the C{ui://} URI from the listed tool's
    C{_meta.ui.resourceUri}, else from the call result's.
    """

    passthrough: str
    tool: str
    #: The revision the host speaks: C{legacy} (2025-11-25, a session) or C{2026-07-28}.
    era: str = "legacy"
    arguments: dict[str, Any] = field(factory=dict)
    app_calls: dict[str, Any] = field(factory=dict)
    #: The URI the host reads the app from, as mcpx names it.
    app_uri: str = APP_URI


#: The server's own tools under their own names, as a host sees them direct.
PASSTHROUGH = Mode(passthrough="apps", tool="get-time")
PASSTHROUGH_MODERN = Mode(passthrough="apps", tool="get-time", era=MODERN)
#: Through the gateway: the host calls C{mcpx_call} naming the server and tool, takes the
#: app's URI from the result's C{_meta.ui.resourceUri} as mcpx names it, and the app's own
#: C{get-time} is a C{tools/call} by the name the app knows (docs/hosts.md "MCP Apps":
#: mcpx routes it to the one server whose app may call it).
GATEWAY_CALL = {"server": "apps", "tool": "get-time"}
GATEWAY_URI = "ui://mcpx/apps/get-time/mcp-app.html"
GATEWAY = Mode(passthrough="", tool="mcpx_call", arguments=GATEWAY_CALL, app_uri=GATEWAY_URI)
GATEWAY_MODERN = Mode(
    passthrough="", tool="mcpx_call", era=MODERN, arguments=GATEWAY_CALL, app_uri=GATEWAY_URI
)


class AppsInBrowserTests(RealDaemonPageCase):
    """An official MCP App rendered and used in Chromium through mcpx's C{/mcp}."""

    timeout = 240

    def setUp(self) -> None:
        super().setUp()
        self.page_dir = Path(tempfile.mkdtemp(prefix="mcpx-apps-"))
        self.addCleanup(shutil.rmtree, str(self.page_dir), True)

    async def bundle_host(self) -> None:
        """The host page's script, bundled with the app bridge and the MCP client."""
        env = {**self.env, "NODE_PATH": str(NODE_MODULES)}
        argv = [str(ESBUILD), str(HOST_SOURCE), "--bundle", "--format=esm"]
        argv += ["--platform=browser", f"--outfile={self.page_dir / 'host.js'}"]
        argv += ["--log-level=warning"]
        child = spawn(argv, env=env, cwd=str(REPO))
        self.addCleanup(kill_on_cleanup, child)
        self.assertEqual(await child.ended(timeout=120), 0, child.text())

    def serve_page(self, mode: Mode) -> str:
        """Serve the host page on loopback; its origin."""
        listening = reactor.listenTCP(0, Site(File(str(self.page_dir))), interface="127.0.0.1")
        self.addCleanup(listening.stopListening)
        origin = f"http://127.0.0.1:{listening.getHost().port}"
        mcp = f"http://127.0.0.1:{self.port}/mcp"
        config = {"mcp": mcp, "era": mode.era, "tool": mode.tool, "arguments": mode.arguments}
        config["appCalls"] = mode.app_calls
        text = json.dumps(config).replace("<", "\\u003c")
        (self.page_dir / "index.html").write_text(PAGE.format(config=text, mcp=mcp))
        return origin

    async def check_app(self, mode: Mode) -> None:
        """
        The app renders in the page's sandboxed iframe, shows the result of the call the
        host made, and shows the result of its own call once that came back through the
        host and mcpx; the server answered both.
        """
        await self.bundle_host()
        origin = self.serve_page(mode)
        self.env["MCPX_TRANSPORT_ALLOWED_ORIGINS"] = origin
        self.env["MCPX_MCP_PASSTHROUGH"] = mode.passthrough
        server = {"command": node22(), "args": [str(BASIC_SERVER / "index.js"), "--stdio"]}
        await self.start_daemon(servers={"apps": server})
        shots = Path(tempfile.mkdtemp(prefix="mcpx-shots-"))
        self.addCleanup(shutil.rmtree, str(shots), True)
        spec = {
            "url": f"{origin}/index.html",
            "show": "#server-time",
            "click": "#get-time-btn",
            "screenshot": str(shots / "mcp-app.png"),
        }
        out = await self.run_to_end(
            [sys.executable, "-m", "tests.support.apps_browser", json.dumps(spec)], timeout=180
        )
        seen = json.loads(out)
        log = seen["host_log"]
        self.assertEqual(log["errors"], [], log)
        self.assertEqual(seen["console_errors"], [])
        self.assertEqual(log["protocolVersion"], "2025-11-25" if mode.era == "legacy" else mode.era)

        listed = {tool["name"]: tool["_meta"] for tool in log["tools"]}
        self.assertIn(mode.tool, listed)
        if mode.passthrough:
            self.assertEqual(listed["get-time"], {"ui": {"resourceUri": APP_URI}, UI_KEY: APP_URI})
        else:
            # The gateway's own tools only; the app's URI is the one mcpx_call's result names.
            self.assertNotIn("get-time", listed)
            self.assertNotIn("ui", listed[mode.tool] or {})
        self.assertEqual(log["resource"]["uri"], mode.app_uri)
        self.assertEqual(log["resource"]["mimeType"], APP_MIME)
        self.assertGreater(log["resource"]["length"], 1000)

        # Rendered as hosts do: scripts only, in an opaque origin of its own.
        self.assertEqual(seen["sandbox"], "allow-scripts")
        self.assertEqual(seen["app_origin"], "null")

        first, mine = log["calls"]
        self.assertEqual((first["origin"], first["name"]), ("host", mode.tool))
        self.assertEqual((mine["origin"], mine["name"]), ("app", "get-time"))
        for call in first, mine:
            self.assertFalse(call["result"].get("isError"), call)
        # The app's call was made as the app named it (through the gateway, mcpx found
        # its server), unless the mode maps it.
        if not mode.app_calls:
            self.assertEqual(mine["sent"], {"name": "get-time", "arguments": {}})
        if not mode.passthrough:
            self.assertEqual(first["result"]["_meta"]["ui"]["resourceUri"], mode.app_uri)
        # The app shows the time the host handed it, then the one its own call got.
        self.assertEqual(seen["shown_first"], first["result"]["content"][0]["text"])
        self.assertEqual(seen["shown_after"], mine["result"]["content"][0]["text"])

        # Both calls reached the server through mcpx.
        (answer,) = await self.probe([self.tcp("/v1/calls?server=apps")])
        self.assertEqual(answer["status"], 200, answer)
        calls = json.loads(answer["body"])["calls"]
        self.assertEqual(
            [(call["tool"], call["outcome"]) for call in calls], [("get-time", "ok")] * 2
        )

        shot = (shots / "mcp-app.png").read_bytes()
        self.assertTrue(shot.startswith(b"\x89PNG"))
        keep = os.environ.get("MCPX_APPS_SCREENSHOT")
        if keep:
            Path(keep).write_bytes(shot)

    async def test_passthrough(self) -> None:
        """The server passed through: the host calls C{get-time} by its own name."""
        await self.check_app(PASSTHROUGH)

    async def test_passthrough_modern(self) -> None:
        """The same, the host speaking 2026-07-28 (stateless, C{Mcp-Method} headers)."""
        await self.check_app(PASSTHROUGH_MODERN)

    async def test_gateway(self) -> None:
        """
        Through the gateway: the host calls C{mcpx_call}, renders the app it names
        (C{ui://mcpx/...}, read through mcpx), and the app's own C{get-time} reaches the
        server through mcpx's gateway.
        """
        await self.check_app(GATEWAY)

    async def test_gateway_modern(self) -> None:
        """The same, the host speaking 2026-07-28."""
        await self.check_app(GATEWAY_MODERN)
