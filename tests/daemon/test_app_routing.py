"""
An app's own C{tools/call} through the gateway, with a real daemon and a real hostile
upstream (L{tests.fixtures.app_shadow}) that lists the same app tool as the server whose
app it is: the call never goes to the impostor on a guess (issue 44, and issue 41's
hostile upstreams).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from mcpx.server.surface import MAX_APP_MIME_TYPE_CHARS, MAX_APP_MIME_TYPES
from mcpx.spec.apps import APP_MIME_TYPE, UI_EXTENSION
from tests.daemon.test_reserved_names import MODERN_META, answer_to, calls_of, text_of
from tests.server.test_passthrough import PassThroughDaemonCase
from tests.server.test_resource_updates import Host
from tests.support.processes import REPO

FIXTURE = str(REPO / "tests" / "fixtures" / "app_shadow.py")
#: What the app hands its own server's tool, and must reach nobody else.
SECRET = "sk-apps-0123456789"


class AppCallRoutingTests(PassThroughDaemonCase):
    """C{apps} (the app's own server) and C{evil} (listing the same app tool) configured."""

    async def start(
        self,
        *,
        apps_listable: bool,
        names: tuple[str, ...] = ("apps", "evil"),
        evil_mime_types: int = 0,
        evil_junk: bool = False,
    ) -> None:
        home = Path(self.config_home)
        self.records = {name: home / f"{name}.jsonl" for name in names}
        entries: dict[str, dict[str, Any]] = {
            name: {
                "command": sys.executable,
                "args": [FIXTURE, "--record", str(record), "--name", name],
            }
            for name, record in self.records.items()
        }
        if not apps_listable:
            entries["apps"]["args"].append("--fail-list")
        if evil_junk:
            entries["evil"]["args"].append("--junk")
        if evil_mime_types:
            entries["evil"]["args"] += ["--mime-types", str(evil_mime_types)]
        config = home / "servers.json"
        config.write_text(json.dumps({"servers": entries}))
        self.env["MCPX_CONFIG"] = str(config)
        await self._start()
        self.host = Host(self)
        await self._initialize(self.host)

    async def app_call(self) -> dict[str, Any]:
        return await answer_to(
            self.host, "tools/call", {"name": "get-time", "arguments": {"token": SECRET}}
        )

    async def test_an_unlistable_server_leaves_the_owner_unknown(self) -> None:
        """
        While the app's own server cannot be listed, the impostor is the only server
        seen listing C{get-time}: the app's call is refused (-32602, naming the server
        that could not be listed and C{mcpx_call}), and nothing reaches the impostor.
        """
        await self.start(apps_listable=False)
        answered = await self.app_call()
        self.assertIn("error", answered, answered)
        self.assertEqual(answered["error"]["code"], -32602, answered)
        self.assertIn("server(s) apps could not be listed", answered["error"]["message"])
        self.assertIn("mcpx_call", answered["error"]["message"])
        self.assertEqual(calls_of(self.records["evil"]), [])

    async def test_a_name_two_servers_list_is_never_guessed(self) -> None:
        """
        Both list C{get-time}: the app's call is refused (-32602, naming both) and
        reaches neither; C{mcpx_call} naming the server reaches that one alone.
        """
        await self.start(apps_listable=True)
        answered = await self.app_call()
        self.assertEqual(answered["error"]["code"], -32602, answered)
        self.assertIn("apps, evil", answered["error"]["message"])
        self.assertEqual(calls_of(self.records["evil"]), [])
        self.assertEqual(calls_of(self.records["apps"]), [])
        arguments = {"server": "apps", "tool": "get-time", "arguments": {"token": SECRET}}
        called = await self.host.request(
            "tools/call", {"name": "mcpx_call", "arguments": arguments}
        )
        self.assertIn("apps got get-time", text_of(called))
        self.assertEqual(calls_of(self.records["evil"]), [])

    async def test_an_app_call_result_names_the_app_as_mcpx_serves_it(self) -> None:
        """
        With C{apps} alone, the app's call reaches it, and the result's own
        C{_meta.ui.resourceUri} is the gateway's name of the app (the one a host can
        read through mcpx), as C{mcpx_call}'s is.
        """
        await self.start(apps_listable=True, names=("apps",))
        answered = await self.app_call()
        result = answered["result"]
        self.assertIn("apps got get-time", text_of(result))
        served = "ui://mcpx/apps/apps/app.html"
        self.assertEqual(result["_meta"]["ui"]["resourceUri"], served)
        arguments = {"server": "apps", "tool": "get-time", "arguments": {}}
        called = await self.host.request(
            "tools/call", {"name": "mcpx_call", "arguments": arguments}
        )
        self.assertEqual(called["_meta"]["ui"]["resourceUri"], served)

    async def test_the_types_a_server_lists_declare_no_more_than_the_bound(self) -> None:
        """
        A server listing thousands of C{ui://} resources, each with a MIME type of its
        own (half of them a thousand characters long), gets no more than
        L{MAX_APP_MIME_TYPES} types, none longer than L{MAX_APP_MIME_TYPE_CHARS}, into
        the declaration every 2026-07-28 host is given, the app's own type first.
        """
        await self.start(apps_listable=True, evil_mime_types=5000)
        arguments = {"server": "evil"}
        listed = await self.host.request(
            "tools/call", {"name": "mcpx_tools", "arguments": arguments}
        )
        self.assertIn("get-time", text_of(listed))
        resources = (await self.host.request("resources/list", {}))["resources"]
        self.assertGreater(len(resources), MAX_APP_MIME_TYPES)
        modern = Host(self)
        found = await answer_to(modern, "server/discover", {"_meta": MODERN_META})
        declared = found["result"]["capabilities"]["extensions"][UI_EXTENSION]["mimeTypes"]
        self.assertEqual(declared[0], APP_MIME_TYPE)
        self.assertEqual(len(declared), MAX_APP_MIME_TYPES, declared)
        for kind in declared:
            self.assertLessEqual(len(kind), MAX_APP_MIME_TYPE_CHARS)

    async def test_items_that_are_not_tools_break_no_app(self) -> None:
        """
        A server listing items that are not tools (strings, numbers, null, a list)
        beside an app tool of its own breaks no other server's app: the app's call
        reaches its own server.
        """
        await self.start(apps_listable=True, evil_junk=True)
        answered = await self.app_call()
        self.assertIn("result", answered, answered)
        self.assertIn("apps got get-time", text_of(answered["result"]))
        self.assertEqual(calls_of(self.records["evil"]), [])
        listed = await self.host.request("tools/call", {"name": "mcpx_tools", "arguments": {}})
        self.assertIs(listed.get("isError"), False, listed)
        self.assertIn("other-tool", text_of(listed))
        arguments = {"server": "evil", "tool": "other-tool"}
        described = await self.host.request(
            "tools/call", {"name": "mcpx_describe", "arguments": arguments}
        )
        self.assertIs(described.get("isError", False), False, described)
        self.assertIn("ui://mcpx/evil/evil/app.html", text_of(described))
