"""
The strict schema sweep: every method mcpx serves, on every revision, and every frame
the server sends (results, errors, notifications) validated against that revision's
official schema with undefined properties refused.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import CancelledError
from twisted.trial.unittest import SynchronousTestCase

from mcpx.ops import uris
from mcpx.spec.revision import NEWEST, Revision
from mcpx.spec.schemas import definitions, load_schema, violations
from tests.server import Harness, Session
from tests.server.test_upstream import CALL as POOLED_CALL
from tests.server.test_upstream import pooled, upstream, upstream_token

RESULTS = {
    "initialize": "InitializeResult",
    "server/discover": "DiscoverResult",
    "ping": "EmptyResult",
    "tools/list": "ListToolsResult",
    "tools/call": "CallToolResult",
    "prompts/list": "ListPromptsResult",
    "prompts/get": "GetPromptResult",
    "resources/list": "ListResourcesResult",
    "resources/templates/list": "ListResourceTemplatesResult",
    "resources/read": "ReadResourceResult",
    "resources/subscribe": "EmptyResult",
    "resources/unsubscribe": "EmptyResult",
    "logging/setLevel": "EmptyResult",
    "completion/complete": "CompleteResult",
}

NOTIFICATIONS = {
    "notifications/progress": "ProgressNotification",
    "notifications/resources/updated": "ResourceUpdatedNotification",
}


def drive_gateway(session: Session) -> None:
    """Every method of the gateway surface, with results and errors."""
    legacy = not session.revision.is_modern
    session.result("server/discover")
    if legacy:
        session.result("ping")
        session.result("logging/setLevel", {"level": "warning"})
    first = session.result("tools/list")
    tools = first["tools"] + session.result("tools/list", {"cursor": first["nextCursor"]})["tools"]
    session.call("mcpx_call", {"server": "search", "tool": "web_search"})
    session.call("mcpx_call", {"server": "nowhere", "tool": "x"})
    session.call("mcpx_servers")
    session.call("mcpx_tools", {"search": "file"})
    session.call("mcpx_describe", {"server": "files", "tool": "read_file"})
    session.call("mcpx_describe", {"server": "files", "tool": "nope"})
    session.call("mcpx_prompt", {"server": "files", "name": "review", "arguments": {"path": "a"}})
    assert len(tools) >= 4
    session.result("prompts/list")
    session.result("prompts/get", {"name": "files_review", "arguments": {"path": "a"}})
    resources = session.result("resources/list")["resources"]
    session.result("resources/templates/list")
    session.result("resources/read", {"uri": resources[0]["uri"]})
    session.result(
        "resources/read",
        {"uri": "mcpx://files/!file:///b.txt?rev=2"},
    )
    session.result(
        "completion/complete",
        {
            "ref": {"type": "ref/prompt", "name": "search_query"},
            "argument": {"name": "topic", "value": "py"},
        },
    )
    session.result(
        "completion/complete",
        {
            "ref": {"type": "ref/resource", "uri": "mcpx://files/!file:///{+path}{?rev}"},
            "argument": {"name": "path", "value": ""},
        },
    )
    for method, params in (
        ("tools/call", {"name": "web_search"}),
        ("tools/list", {"cursor": "garbage"}),
        ("resources/read", {"uri": "file:///nowhere"}),
        ("prompts/get", {"name": "nowhere_x"}),
        ("nothing/here", {}),
    ):
        session.error(method, params)
    if not legacy:
        session.error("ping")
        session.harness.error(
            "tools/list",
            {"_meta": {"io.modelcontextprotocol/protocolVersion": "2030-01-01"}},
        )


def drive_pooled(revision: Revision) -> Harness:
    """Progress, cancellation and subscriptions, over the real pool."""
    harness, connector = pooled()
    connector.holding.add("tools/call")
    session = Session(revision, harness)
    calling = session.request(
        "tools/call", {"name": "mcpx_call", "arguments": POOLED_CALL}, progressToken=7
    )
    held = upstream(connector)
    token = upstream_token(held)
    held.notify(
        "notifications/progress",
        {"progressToken": token, "progress": 1, "total": 2, "message": "half"},
    )
    held.release(
        "tools/call",
        {"content": [{"type": "audio", "data": "AAAA", "mimeType": "audio/wav"}]},
    )
    connector.holding.discard("tools/call")
    session.result("tools/call", {"name": "mcpx_call", "arguments": POOLED_CALL})
    connector.holding.add("tools/call")
    cancelled = session.request("tools/call", {"name": "mcpx_call", "arguments": POOLED_CALL})
    cancelled.addErrback(lambda f: f.trap(CancelledError))
    cancelled.cancel()
    calling.addErrback(lambda f: None)
    if not revision.is_modern:
        name = uris.to_mcpx("demo", "demo://a")
        session.result("resources/subscribe", {"uri": name})
        harness.server.subscriptions.resource_updated("demo", "demo://a")
        session.result("resources/unsubscribe", {"uri": name})
    return harness


def _properties(revision: Revision, definition: str) -> dict[str, Any]:
    document = load_schema(revision)
    defs = document.get("$defs") or document["definitions"]
    properties: dict[str, Any] = defs[definition].get("properties", {})
    return properties


def problems(harness: Harness, revision: Revision) -> tuple[list[str], set[str]]:
    """Every violation in what the server sent, and the definitions checked."""
    found: list[str] = []
    checked: set[str] = set()
    known = definitions(revision)
    error_definition = "JSONRPCError" if "JSONRPCError" in known else "JSONRPCErrorResponse"
    for frame in harness.sent:
        if "method" in frame:
            definition = NOTIFICATIONS[frame["method"]]
            instance: Any = frame
            if "jsonrpc" not in _properties(revision, definition):
                # The draft-07 schemas define notifications without the JSON-RPC envelope.
                instance = {key: value for key, value in frame.items() if key != "jsonrpc"}
        elif "error" in frame:
            definition, instance = error_definition, frame
        else:
            method = harness.methods[frame["id"]]
            definition, instance = RESULTS[method], frame["result"]
        if definition not in known:
            # server/discover answered to a legacy client: that revision has no shape for it.
            continue
        checked.add(definition)
        found.extend(
            f"{revision} {definition}: {line}"
            for line in violations(instance, revision, definition, strict=True)
        )
    return found, checked


class SweepTests(SynchronousTestCase):
    def test_every_frame_is_valid(self) -> None:
        """Every result, error and notification mcpx sends is valid, strictly, per revision."""
        everything: list[str] = []
        for revision in Revision:
            gateway = Session(revision, Harness(page_size=5))
            drive_gateway(gateway)
            found, checked = problems(gateway.harness, revision)
            everything.extend(found)
            expected = {"ListToolsResult", "CallToolResult", "CompleteResult", "ReadResourceResult"}
            self.assertTrue(expected <= checked, (revision, checked))
            found, checked = problems(drive_pooled(revision), revision)
            everything.extend(found)
            self.assertIn("ProgressNotification", checked)
            if revision is not NEWEST:
                self.assertIn("ResourceUpdatedNotification", checked)
        self.assertEqual(everything, [])

    def test_sweep_can_fail(self) -> None:
        """The sweep notices a field a revision lacks (structuredContent in 2025-03-26)."""
        harness = Harness()
        harness.methods[1] = "tools/call"
        harness.sent.append(
            {"jsonrpc": "2.0", "id": 1, "result": {"content": [], "structuredContent": {}}}
        )
        found, _ = problems(harness, Revision.V2025_03_26)
        self.assertEqual(len(found), 1)
        self.assertIn("structuredContent", found[0])
