"""
Tests for L{mcpx.spec.downgrade}: newest-shape results spelled for every revision.

The core is a strict schema sweep: rich results with every optional field set
are spelled down for each revision and checked against that revision's
official schema with undefined properties refused.
"""

from __future__ import annotations

import base64
import copy
import json
import random
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from mcpx.spec.downgrade import CACHE_SCOPES, SERVER_INFO_KEY, downgrade, envelope
from mcpx.spec.matrix import capability_in, content_type_in, field_in
from mcpx.spec.revision import ALL_REVISIONS, LEGACY_REVISIONS, Revision
from mcpx.spec.schemas import violations

V1 = Revision.V2024_11_05
V2 = Revision.V2025_03_26
V3 = Revision.V2025_06_18
V4 = Revision.V2025_11_25
V5 = Revision.V2026_07_28

MCPX_INFO: dict[str, Any] = {"name": "mcpx", "version": "1.0.0"}
LIST_MAX_AGE = 60.0
READ_MAX_AGE = 0.25

AUDIO_BYTES = bytes(range(256)) * 4 + b"tail"
AUDIO_DATA = base64.b64encode(AUDIO_BYTES).decode("ascii")
STRUCTURED: dict[str, Any] = {"temperature": 21, "conditions": "sunny", "wind": [3, 4]}


# -- rich newest-shape results ---------------------------------------------------


def icons() -> list[dict[str, Any]]:
    return [
        {
            "src": "https://example.com/icon.png",
            "mimeType": "image/png",
            "sizes": ["48x48"],
            "theme": "light",
        }
    ]


def content_annotations() -> dict[str, Any]:
    return {
        "audience": ["user", "assistant"],
        "priority": 0.5,
        "lastModified": "2025-05-01T12:00:00Z",
    }


def meta() -> dict[str, Any]:
    return {"dev.mcpx/upstream": "weather"}


def implementation() -> dict[str, Any]:
    return {
        "name": "mcpx",
        "title": "mcpx gateway",
        "version": "1.0.0",
        "description": "An MCP gateway",
        "websiteUrl": "https://example.com/mcpx",
        "icons": icons(),
    }


def result_meta() -> dict[str, Any]:
    return {SERVER_INFO_KEY: implementation(), "dev.mcpx/trace": "abc"}


def text_block(text: str = "It is 21 degrees in Lisbon.") -> dict[str, Any]:
    return {"type": "text", "text": text, "annotations": content_annotations(), "_meta": meta()}


def image_block() -> dict[str, Any]:
    return {
        "type": "image",
        "data": "aGVsbG8=",
        "mimeType": "image/png",
        "annotations": content_annotations(),
        "_meta": meta(),
    }


def audio_block() -> dict[str, Any]:
    return {
        "type": "audio",
        "data": AUDIO_DATA,
        "mimeType": "audio/wav",
        "annotations": content_annotations(),
        "_meta": meta(),
    }


def link_block() -> dict[str, Any]:
    return {
        "type": "resource_link",
        "uri": "mcpx://weather/file%3A%2F%2F%2Flisbon.json",
        "name": "lisbon",
        "title": "Lisbon weather",
        "description": "Today's observations for Lisbon",
        "mimeType": "application/json",
        "size": 2048,
        "icons": icons(),
        "annotations": content_annotations(),
        "_meta": meta(),
    }


def text_contents() -> dict[str, Any]:
    return {
        "uri": "mcpx://weather/notes",
        "mimeType": "text/plain",
        "text": "notes",
        "_meta": meta(),
    }


def blob_contents() -> dict[str, Any]:
    return {
        "uri": "mcpx://weather/radar",
        "mimeType": "image/png",
        "blob": "aGVsbG8=",
        "_meta": meta(),
    }


def embedded_block(contents: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "type": "resource",
        "resource": contents if contents is not None else text_contents(),
        "annotations": content_annotations(),
        "_meta": meta(),
    }


def blocks() -> list[dict[str, Any]]:
    return [
        text_block(),
        image_block(),
        audio_block(),
        link_block(),
        embedded_block(),
        embedded_block(blob_contents()),
    ]


def capabilities() -> dict[str, Any]:
    return {
        "experimental": {"dev.mcpx/replay": {}},
        "logging": {},
        "completions": {},
        "prompts": {"listChanged": True},
        "resources": {"subscribe": True, "listChanged": True},
        "tools": {"listChanged": False},
        "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}},
        "extensions": {"io.modelcontextprotocol/tasks": {}},
    }


def tool() -> dict[str, Any]:
    return {
        "name": "weather",
        "title": "Weather",
        "description": "Current weather for a city",
        "inputSchema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
        "outputSchema": {
            "type": "object",
            "properties": {"temperature": {"type": "number"}},
            "required": ["temperature"],
        },
        "annotations": {
            "title": "Weather lookup",
            "readOnlyHint": True,
            "destructiveHint": False,
            "idempotentHint": True,
            "openWorldHint": True,
        },
        "icons": icons(),
        "execution": {"taskSupport": "optional"},
        "_meta": meta(),
    }


def cache_hints() -> dict[str, Any]:
    return {"resultType": "complete", "ttlMs": 1234, "cacheScope": "public"}


def initialize_result() -> dict[str, Any]:
    return {
        "protocolVersion": "2025-06-18",
        "capabilities": capabilities(),
        "serverInfo": implementation(),
        "instructions": "Call mcpx_call to reach any configured server.",
        "resultType": "complete",
        "_meta": result_meta(),
    }


def discover_result() -> dict[str, Any]:
    return {
        "supportedVersions": [rev.value for rev in ALL_REVISIONS],
        "capabilities": capabilities(),
        "instructions": "Call mcpx_call to reach any configured server.",
        **cache_hints(),
        "_meta": result_meta(),
    }


def tools_list_result() -> dict[str, Any]:
    bare = {"name": "ping", "inputSchema": {"type": "object"}}
    return {"tools": [tool(), bare], "nextCursor": "c2", **cache_hints(), "_meta": result_meta()}


def call_result() -> dict[str, Any]:
    return {
        "content": blocks(),
        "structuredContent": copy.deepcopy(STRUCTURED),
        "isError": False,
        "resultType": "complete",
        "_meta": result_meta(),
    }


def prompts_list_result() -> dict[str, Any]:
    prompt = {
        "name": "weather_report",
        "title": "Weather report",
        "description": "Write a weather report",
        "arguments": [
            {"name": "city", "title": "City", "description": "Which city", "required": True},
            {"name": "style"},
        ],
        "icons": icons(),
        "_meta": meta(),
    }
    return {
        "prompts": [prompt, {"name": "bare"}],
        "nextCursor": "p2",
        **cache_hints(),
        "_meta": result_meta(),
    }


def prompt_result() -> dict[str, Any]:
    roles = ("user", "assistant")
    return {
        "description": "A weather report",
        "messages": [
            {"role": roles[index % 2], "content": block} for index, block in enumerate(blocks())
        ],
        "resultType": "complete",
        "_meta": result_meta(),
    }


def resources_list_result() -> dict[str, Any]:
    resource = {
        "uri": "mcpx://weather/notes",
        "name": "notes",
        "title": "Notes",
        "description": "Field notes",
        "mimeType": "text/plain",
        "size": 5,
        "annotations": content_annotations(),
        "icons": icons(),
        "_meta": meta(),
    }
    return {
        "resources": [resource, {"uri": "mcpx://weather/bare", "name": "bare"}],
        "nextCursor": "r2",
        **cache_hints(),
        "_meta": result_meta(),
    }


def templates_list_result() -> dict[str, Any]:
    template = {
        "uriTemplate": "mcpx://weather/city%2F{city}",
        "name": "city",
        "title": "City",
        "description": "A city's page",
        "mimeType": "text/html",
        "annotations": content_annotations(),
        "icons": icons(),
        "_meta": meta(),
    }
    return {
        "resourceTemplates": [template],
        "nextCursor": "t2",
        **cache_hints(),
        "_meta": result_meta(),
    }


def read_result() -> dict[str, Any]:
    return {
        "contents": [text_contents(), blob_contents()],
        **cache_hints(),
        "_meta": result_meta(),
    }


def complete_result() -> dict[str, Any]:
    return {
        "completion": {"values": ["Lisbon", "Lima"], "total": 2, "hasMore": False},
        "resultType": "complete",
        "_meta": result_meta(),
    }


def empty_result() -> dict[str, Any]:
    return {"resultType": "complete", "_meta": result_meta()}


#: Every method swept: how to build its rich result, and the schema definition
#: of its result.  Result definitions are open at the top (any field is
#: allowed beside the declared ones), so L{generic_leftovers} checks the
#: top-level fields separately.
METHODS: dict[str, tuple[Callable[[], dict[str, Any]], str]] = {
    "initialize": (initialize_result, "InitializeResult"),
    "server/discover": (discover_result, "DiscoverResult"),
    "tools/list": (tools_list_result, "ListToolsResult"),
    "tools/call": (call_result, "CallToolResult"),
    "prompts/list": (prompts_list_result, "ListPromptsResult"),
    "prompts/get": (prompt_result, "GetPromptResult"),
    "resources/list": (resources_list_result, "ListResourcesResult"),
    "resources/templates/list": (templates_list_result, "ListResourceTemplatesResult"),
    "resources/read": (read_result, "ReadResourceResult"),
    "completion/complete": (complete_result, "CompleteResult"),
    "ping": (empty_result, "EmptyResult"),
    "dev.mcpx/unknown": (empty_result, "EmptyResult"),
}


def served(method: str, revision: Revision) -> bool:
    """Whether mcpx answers C{method} to a peer on C{revision} at all."""
    if revision is V5:
        return method not in ("initialize", "ping")
    return True


def spelled(result: Mapping[str, Any], method: str, revision: Revision) -> Mapping[str, Any]:
    """What the edge sends: downgraded, and for 2026-07-28 enveloped too."""
    down = downgrade(result, method, revision)
    if revision is V5:
        return envelope(
            down,
            method,
            server_info=MCPX_INFO,
            list_max_age=LIST_MAX_AGE,
            read_max_age=READ_MAX_AGE,
        )
    return down


def schema_problems(instance: Mapping[str, Any], method: str, revision: Revision) -> list[str]:
    """Every strict-schema problem of C{instance} as C{method}'s result on C{revision}."""
    definition = METHODS[method][1]
    if method == "server/discover" and revision is not V5:
        # Older revisions answer it liberally but have no definition for it:
        # the result must still be a result, and its capabilities theirs.
        problems = violations(instance, revision, "Result", strict=True)
        problems += violations(
            instance.get("capabilities"), revision, "ServerCapabilities", strict=True
        )
        return problems
    return violations(instance, revision, definition, strict=True)


def generic_leftovers(instance: Mapping[str, Any], revision: Revision) -> list[str]:
    """Top-level fields C{revision} lacks, which open result definitions would not catch."""
    found = [
        key
        for key, row in (
            ("resultType", "Result.resultType"),
            ("ttlMs", "CacheableResult.ttlMs"),
            ("cacheScope", "CacheableResult.cacheScope"),
        )
        if key in instance and not field_in(row, revision)
    ]
    if SERVER_INFO_KEY in instance.get("_meta", {}) and not field_in(
        f'_meta["{SERVER_INFO_KEY}"]', revision
    ):
        found.append(f"_meta.{SERVER_INFO_KEY}")
    return found


def texts(result: Mapping[str, Any]) -> list[str]:
    """The text of every text block of a C{CallToolResult}."""
    return [
        block["text"]
        for block in result.get("content", ())
        if isinstance(block, Mapping) and block.get("type") == "text"
    ]


def walk(value: object) -> Iterator[object]:
    """C{value} and everything nested in it."""
    yield value
    if isinstance(value, Mapping):
        for item in value.values():
            yield from walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from walk(item)


class StrictSweepTests(SynchronousTestCase):
    """
    Rich newest-shape results of every method are valid, strictly, for every
    revision once spelled for it.
    """

    def test_every_method_every_revision(self) -> None:
        """
        Each rich result, spelled for each revision, has zero strict-schema
        violations against that revision's definition of the method's result.
        """
        failures = []
        for revision in ALL_REVISIONS:
            for method, (build, _) in METHODS.items():
                if not served(method, revision):
                    continue
                out = spelled(build(), method, revision)
                problems = schema_problems(out, method, revision)
                problems += generic_leftovers(out, revision)
                failures += [f"{revision} {method}: {line}" for line in problems]
        self.assertEqual(failures, [])

    def test_rich_results_need_spelling(self) -> None:
        """
        The rich results are not already valid for the oldest revision: the
        sweep really exercises the spelling (the test can fail).
        """
        for method in ("tools/list", "tools/call", "prompts/get", "resources/list"):
            build, _ = METHODS[method]
            self.assertNotEqual(schema_problems(build(), method, V1), [], method)

    def test_input_required_envelope(self) -> None:
        """
        A 2026-07-28 C{input_required} answer, enveloped, is a valid
        C{InputRequiredResult}: no cache hints, even for C{resources/read}.
        """
        question = {
            "resultType": "input_required",
            "inputRequests": {
                "city": {
                    "method": "elicitation/create",
                    "params": {
                        "mode": "form",
                        "message": "Which city?",
                        "requestedSchema": {
                            "type": "object",
                            "properties": {"city": {"type": "string"}},
                        },
                    },
                }
            },
            "requestState": "opaque",
            "ttlMs": 5,
            "cacheScope": "public",
        }
        for method in ("tools/call", "prompts/get", "resources/read"):
            out = spelled(question, method, V5)
            self.assertEqual(violations(out, V5, "InputRequiredResult", strict=True), [])
            self.assertEqual(out["resultType"], "input_required")
            self.assertNotIn("ttlMs", out)
            self.assertNotIn("cacheScope", out)


class NoEditTests(SynchronousTestCase):
    """The original result is never modified, and fast paths cost nothing."""

    def test_original_untouched(self) -> None:
        """
        Spelling a result for any revision leaves the original, nested
        objects included, exactly as it was.
        """
        for revision in ALL_REVISIONS:
            for method, (build, _) in METHODS.items():
                original = build()
                before = copy.deepcopy(original)
                spelled(original, method, revision)
                self.assertEqual(original, before, f"{method} on {revision}")

    def test_fast_path_same_object(self) -> None:
        """
        When 2026-07-28 has every field a method's result could carry, the
        result itself is returned, not a copy.
        """
        for method in (
            "tools/call",
            "prompts/get",
            "prompts/list",
            "resources/list",
            "resources/templates/list",
            "resources/read",
            "completion/complete",
            "dev.mcpx/unknown",
        ):
            result = METHODS[method][0]()
            self.assertIs(downgrade(result, method, V5), result, method)

    def test_older_revisions_get_a_copy(self) -> None:
        """
        A revision that lacks fields gets a new top-level object, even when
        this particular result held none of them.
        """
        for revision in LEGACY_REVISIONS:
            plain = {"content": [{"type": "text", "text": "hi"}]}
            out = downgrade(plain, "tools/call", revision)
            self.assertIsNot(out, plain)
            self.assertEqual(out, plain)

    def test_untouched_parts_are_shared(self) -> None:
        """
        Nested objects nothing was taken from are the original objects, not
        copies: on 2025-06-18 only the resource link loses its icons.
        """
        original = call_result()
        out = downgrade(original, "tools/call", V3)
        self.assertIsNot(out["content"], original["content"])
        for index in (0, 1, 2, 4, 5):
            self.assertIs(out["content"][index], original["content"][index])
        self.assertIsNot(out["content"][3], original["content"][3])
        self.assertIs(out["structuredContent"], original["structuredContent"])
        self.assertIs(out["content"][3]["annotations"], original["content"][3]["annotations"])

    def test_unchanged_list_is_shared(self) -> None:
        """
        A list none of whose items change is handed on as it is: 2026-07-28
        tools without C{execution} keep their list.
        """
        original = tools_list_result()
        for each in original["tools"]:
            each.pop("execution", None)
        out = downgrade(original, "tools/list", V5)
        self.assertIs(out["tools"], original["tools"])

    def test_stored_result_served_twice(self) -> None:
        """
        A stored result handed to an old peer and then to a new one reaches
        the new one in full.
        """
        stored = call_result()
        downgrade(stored, "tools/call", V1)
        again = downgrade(stored, "tools/call", V5)
        self.assertEqual(again["structuredContent"], STRUCTURED)
        self.assertEqual(
            [block["type"] for block in again["content"]][2:4], ["audio", "resource_link"]
        )


class FallbackTests(SynchronousTestCase):
    """What a revision cannot carry leaves a faithful trace."""

    def test_structured_content_as_text(self) -> None:
        """
        Before 2025-06-18 C{structuredContent} goes, and a text block holding
        the same JSON is added.
        """
        for revision in (V1, V2):
            out = downgrade(call_result(), "tools/call", revision)
            self.assertNotIn("structuredContent", out)
            self.assertIn(STRUCTURED, [json.loads(text) for text in texts(out)[-1:]])

    def test_structured_text_not_repeated(self) -> None:
        """
        When a text block already holds the structured content's JSON, in
        any layout, no second copy is added.
        """
        original = {
            "content": [{"type": "text", "text": json.dumps(STRUCTURED, indent=2)}],
            "structuredContent": STRUCTURED,
        }
        out = downgrade(original, "tools/call", V2)
        self.assertEqual(out["content"], original["content"])
        self.assertNotIn("structuredContent", out)

    def test_structured_text_repeated_when_different(self) -> None:
        """
        Text that is JSON but not the same value does not count as carrying
        the structured content.
        """
        original = {
            "content": [
                {"type": "text", "text": '{"temperature": 20}'},
                {"type": "text", "text": "true"},
            ],
            "structuredContent": {"temperature": 21},
        }
        out = downgrade(original, "tools/call", V1)
        self.assertEqual(len(out["content"]), 3)
        self.assertEqual(json.loads(out["content"][2]["text"]), {"temperature": 21})

    def test_structured_copy_of_a_payload_not_repeated(self) -> None:
        """
        Structured content that only repeats a block's payload (a file's text, a media
        block's base64) is not added as text for a client without structured content,
        even where the media block itself is left out (audio at 2024-11-05).
        """
        text = "a line of a file that is read back in full\n" * 40
        audio = {"type": "audio", "data": "UklGRg" * 200, "mimeType": "audio/wav"}
        image = {"type": "image", "data": "iVBORw0K" * 200, "mimeType": "image/png"}
        cases = [
            {"content": [{"type": "text", "text": text}], "structuredContent": {"content": text}},
            {"content": [image], "structuredContent": {"content": [image]}},
            {"content": [audio], "structuredContent": {"content": [audio]}},
        ]
        for original in cases:
            for revision in (V1, V2):
                out = downgrade(original, "tools/call", revision)
                self.assertNotIn("structuredContent", out)
                payloads = [b.get("text", b.get("data")) for b in out["content"]]
                self.assertLessEqual(len(payloads), 1, (revision, payloads[:1]))
                self.assertFalse(any(p.startswith("{") for p in payloads))
                self.assertEqual(violations(out, revision, "CallToolResult"), [])

    def test_structured_with_more_than_a_payload_is_kept(self) -> None:
        """Structured content holding a payload and other data of weight still becomes text."""
        text = "x" * 80
        extra = {"content": text, "lines": list(range(40)), "encoding": "utf-8"}
        original = {"content": [{"type": "text", "text": text}], "structuredContent": extra}
        out = downgrade(original, "tools/call", V1)
        self.assertEqual(json.loads(out["content"][-1]["text"]), extra)

    def test_non_object_structured_content(self) -> None:
        """
        A structured result that is not a JSON object stays for 2026-07-28,
        and becomes text for 2025-06-18 and 2025-11-25, whose schemas ask
        for an object.
        """
        for value in ([1, 2, 3], "sunny", 21, None, True):
            original = {"content": [], "structuredContent": value}
            self.assertIs(downgrade(original, "tools/call", V5), original)
            for revision in (V3, V4):
                out = downgrade(original, "tools/call", revision)
                self.assertNotIn("structuredContent", out)
                self.assertEqual(json.loads(out["content"][-1]["text"]), value)
                self.assertEqual(violations(out, revision, "CallToolResult"), [])

    def test_non_object_output_schema(self) -> None:
        """
        An output schema whose root is not an object is kept for 2026-07-28
        and left out for 2025-06-18 and 2025-11-25.
        """
        original = {
            "tools": [
                {
                    "name": "list",
                    "inputSchema": {"type": "object"},
                    "outputSchema": {"type": "array", "items": {"type": "string"}},
                }
            ]
        }
        self.assertIn("outputSchema", downgrade(original, "tools/list", V5)["tools"][0])
        for revision in (V3, V4):
            out = downgrade(original, "tools/list", revision)
            self.assertNotIn("outputSchema", out["tools"][0])
            self.assertEqual(violations(out, revision, "ListToolsResult", strict=False), [])

    def test_audio_leaves_text_trace(self) -> None:
        """
        2024-11-05 has no audio: the block becomes text naming its MIME type
        and its size in bytes, keeping the annotations the revision has.
        """
        out = downgrade(call_result(), "tools/call", V1)
        trace = out["content"][2]
        self.assertEqual(trace["type"], "text")
        self.assertIn("audio/wav", trace["text"])
        self.assertIn(f"{len(AUDIO_BYTES)} bytes", trace["text"])
        self.assertEqual(trace["annotations"], {"audience": ["user", "assistant"], "priority": 0.5})

    def test_audio_kept_from_2025_03_26(self) -> None:
        """2025-03-26 and later carry the audio block itself."""
        for revision in (V2, V3, V4, V5):
            out = downgrade(call_result(), "tools/call", revision)
            self.assertEqual(out["content"][2]["type"], "audio")
            self.assertEqual(out["content"][2]["data"], AUDIO_DATA)

    def test_resource_link_leaves_uri(self) -> None:
        """
        Before 2025-06-18 a resource link becomes text with its URI, name,
        title and description.
        """
        link = link_block()
        for revision in (V1, V2):
            trace = downgrade(call_result(), "tools/call", revision)["content"][3]
            self.assertEqual(trace["type"], "text")
            for part in (link["uri"], link["name"], link["title"], link["description"]):
                self.assertIn(part, trace["text"])

    def test_prompt_messages_fall_back(self) -> None:
        """
        Prompt messages get the same fallbacks: on 2024-11-05 the audio and
        link messages are text, and embedded resources lose their C{_meta}.
        """
        out = downgrade(prompt_result(), "prompts/get", V1)
        kinds = [message["content"]["type"] for message in out["messages"]]
        self.assertEqual(kinds, ["text", "image", "text", "text", "resource", "resource"])
        self.assertIn("audio/wav", out["messages"][2]["content"]["text"])
        self.assertIn(link_block()["uri"], out["messages"][3]["content"]["text"])
        self.assertNotIn("_meta", out["messages"][4]["content"]["resource"])

    def test_content_never_vanishes(self) -> None:
        """Every block of the original has a counterpart, on every revision."""
        for revision in ALL_REVISIONS:
            out = downgrade(call_result(), "tools/call", revision)
            self.assertGreaterEqual(len(out["content"]), len(blocks()), str(revision))


class FieldTests(SynchronousTestCase):
    """Each field is kept exactly where the revision matrix says it exists."""

    def test_tool_fields_follow_matrix(self) -> None:
        """
        A tool keeps C{title}, C{icons}, C{annotations}, C{execution},
        C{outputSchema} and C{_meta} exactly in the revisions that have them.
        """
        for revision in ALL_REVISIONS:
            spelled_tool = downgrade(tools_list_result(), "tools/list", revision)["tools"][0]
            for key in ("title", "icons", "annotations", "execution", "outputSchema", "_meta"):
                self.assertEqual(
                    key in spelled_tool, field_in(f"Tool.{key}", revision), f"{key} {revision}"
                )

    def test_execution_only_2025_11_25(self) -> None:
        """C{Tool.execution} reaches 2025-11-25 peers only."""
        kept = [
            rev
            for rev in ALL_REVISIONS
            if "execution" in downgrade(tools_list_result(), "tools/list", rev)["tools"][0]
        ]
        self.assertEqual(kept, [V4])

    def test_capabilities_follow_matrix(self) -> None:
        """
        C{completions} from 2025-03-26, C{tasks} only to 2025-11-25,
        C{extensions} only to 2026-07-28; capabilities no revision defines
        are not sent.
        """
        for revision in ALL_REVISIONS:
            caps = dict(capabilities(), **{"dev.mcpx/made-up": {}})
            out = downgrade({"capabilities": caps}, "initialize", revision)
            for key in caps:
                self.assertEqual(
                    key in out["capabilities"],
                    capability_in("server", key, revision),
                    f"{key} {revision}",
                )
        self.assertEqual(
            downgrade({"capabilities": capabilities()}, "server/discover", V5)["capabilities"][
                "extensions"
            ],
            {"io.modelcontextprotocol/tasks": {}},
        )

    def test_server_info_fields(self) -> None:
        """
        C{serverInfo} keeps C{title} from 2025-06-18 and C{description},
        C{websiteUrl} and C{icons} from 2025-11-25.
        """
        expected = {
            V1: {"name", "version"},
            V2: {"name", "version"},
            V3: {"name", "version", "title"},
            V4: set(implementation()),
        }
        for revision, keys in expected.items():
            out = downgrade(initialize_result(), "initialize", revision)
            self.assertEqual(set(out["serverInfo"]), keys, str(revision))

    def test_generic_fields_legacy(self) -> None:
        """
        Any result, even of a method without rules of its own, loses
        C{resultType}, the cache hints and the server identity in C{_meta}
        for legacy peers, and keeps its other C{_meta} keys.
        """
        original = {**cache_hints(), "_meta": result_meta(), "value": 1}
        for revision in LEGACY_REVISIONS:
            out = downgrade(original, "dev.mcpx/unknown", revision)
            self.assertEqual(out, {"_meta": {"dev.mcpx/trace": "abc"}, "value": 1})

    def test_meta_only_server_info(self) -> None:
        """A C{_meta} that held only the server identity goes altogether."""
        original = {"resultType": "complete", "_meta": {SERVER_INFO_KEY: MCPX_INFO}}
        self.assertEqual(downgrade(original, "ping", V4), {})

    def test_content_meta_and_last_modified(self) -> None:
        """
        Content blocks lose C{_meta} and C{annotations.lastModified} before
        2025-06-18 and keep both from then on.
        """
        for revision in ALL_REVISIONS:
            block = downgrade(call_result(), "tools/call", revision)["content"][0]
            self.assertEqual("_meta" in block, field_in("content._meta", revision))
            self.assertEqual(
                "lastModified" in block["annotations"],
                field_in("Annotations.lastModified", revision),
            )

    def test_prompt_argument_title(self) -> None:
        """Prompt arguments keep their C{title} from 2025-06-18."""
        for revision in ALL_REVISIONS:
            out = downgrade(prompts_list_result(), "prompts/list", revision)
            argument = out["prompts"][0]["arguments"][0]
            self.assertEqual("title" in argument, revision >= V3, str(revision))

    def test_read_contents_meta(self) -> None:
        """Read contents keep C{_meta} from 2025-06-18."""
        for revision in ALL_REVISIONS:
            out = downgrade(read_result(), "resources/read", revision)
            self.assertEqual(
                ["_meta" in each for each in out["contents"]], [revision >= V3] * 2, str(revision)
            )

    def test_tasks_result_spelled_as_call(self) -> None:
        """
        The answer to 2025-11-25 C{tasks/result} is a tool's result and is
        spelled like one.
        """
        original = {"content": [], "structuredContent": [1, 2]}
        out = downgrade(original, "tasks/result", V4)
        self.assertEqual(out, {"content": [{"type": "text", "text": "[1, 2]"}]})


class EnvelopeTests(SynchronousTestCase):
    """The 2026-07-28 envelope."""

    def wrap(self, result: Mapping[str, Any], method: str) -> dict[str, Any]:
        return envelope(
            result,
            method,
            server_info=MCPX_INFO,
            list_max_age=LIST_MAX_AGE,
            read_max_age=READ_MAX_AGE,
        )

    def test_cache_hints(self) -> None:
        """
        Lists that follow configuration and C{server/discover} are public
        with the list age; C{resources/list} and C{resources/read} are
        private with the read age; both in whole milliseconds.
        """
        for method in CACHE_SCOPES:
            out = self.wrap({}, method)
            public = method in (
                "server/discover",
                "tools/list",
                "prompts/list",
                "resources/templates/list",
            )
            self.assertEqual(out["cacheScope"], "public" if public else "private", method)
            self.assertEqual(out["ttlMs"], 60000 if public else 250, method)
            self.assertIsInstance(out["ttlMs"], int)

    def test_cacheable_methods_match_schema(self) -> None:
        """
        The methods given cache hints are exactly those whose 2026-07-28
        result definition requires them.
        """
        required = {
            method
            for method, (_, definition) in METHODS.items()
            if served(method, V5)
            and any(
                "'ttlMs' is a required property" in line
                for line in violations({"resultType": "complete"}, V5, definition, strict=False)
            )
        }
        self.assertEqual(required, set(CACHE_SCOPES))

    def test_not_cacheable(self) -> None:
        """Other results get C{resultType} and the server identity, and no hints."""
        out = self.wrap({"content": []}, "tools/call")
        self.assertEqual(
            out,
            {"content": [], "resultType": "complete", "_meta": {SERVER_INFO_KEY: MCPX_INFO}},
        )

    def test_keeps_interim_result_types(self) -> None:
        """
        C{input_required} and C{task} stay; a task's own C{ttlMs} (its
        lifetime) is left alone; anything else becomes C{complete}.
        """
        task = {"resultType": "task", "taskId": "t1", "status": "working", "ttlMs": 90000}
        out = self.wrap(task, "tools/call")
        self.assertEqual(out["resultType"], "task")
        self.assertEqual(out["ttlMs"], 90000)
        self.assertNotIn("cacheScope", out)
        self.assertEqual(self.wrap({"resultType": "odd"}, "ping")["resultType"], "complete")

    def test_meta_merged_not_edited(self) -> None:
        """
        Existing C{_meta} keys stay beside the server identity, and the
        original result and its C{_meta} are not modified.
        """
        original = {"contents": [], "_meta": {"dev.mcpx/trace": "abc"}}
        before = copy.deepcopy(original)
        out = self.wrap(original, "resources/read")
        self.assertEqual(out["_meta"], {"dev.mcpx/trace": "abc", SERVER_INFO_KEY: MCPX_INFO})
        self.assertEqual(original, before)

    def test_envelope_spells_2026(self) -> None:
        """
        The envelope alone gives 2026-07-28 what it defines: tools lose
        C{execution} and capabilities lose core C{tasks}, without a separate
        L{downgrade} call, and the original keeps both.
        """
        tools = tools_list_result()
        out = self.wrap(tools, "tools/list")
        self.assertNotIn("execution", out["tools"][0])
        self.assertIn("execution", tools["tools"][0])
        self.assertEqual(violations(out, V5, "ListToolsResult"), [])
        discover = discover_result()
        out = self.wrap(discover, "server/discover")
        self.assertNotIn("tasks", out["capabilities"])
        self.assertIn("tasks", discover["capabilities"])
        self.assertEqual(violations(out, V5, "DiscoverResult"), [])

    def test_negative_age(self) -> None:
        """A negative age is sent as 0, which the schema allows."""
        out = envelope({}, "tools/list", server_info=MCPX_INFO, list_max_age=-1.0, read_max_age=0.0)
        self.assertEqual(out["ttlMs"], 0)


# -- property-style loops ---------------------------------------------------------

#: Keys that are optional wherever they appear in the rich results.
OPTIONAL_KEYS = frozenset(
    {
        "title",
        "icons",
        "annotations",
        "_meta",
        "execution",
        "outputSchema",
        "description",
        "nextCursor",
        "lastModified",
        "size",
        "isError",
        "instructions",
        "websiteUrl",
        "ttlMs",
        "cacheScope",
        "resultType",
        "audience",
        "priority",
    }
)

#: Structured results that are not objects, with an output schema for each.
NON_OBJECTS: list[tuple[Any, dict[str, Any]]] = [
    ([1, 2], {"type": "array", "items": {"type": "integer"}}),
    ("sunny", {"type": "string"}),
    (None, {"type": "null"}),
    (False, {"type": "boolean"}),
]


def thinned(value: Any, rng: random.Random) -> Any:
    """A copy of C{value} with a random choice of optional keys left out at every depth."""
    if isinstance(value, dict):
        return {
            key: thinned(item, rng)
            for key, item in value.items()
            if key not in OPTIONAL_KEYS or rng.random() < 0.6
        }
    if isinstance(value, list):
        return [thinned(item, rng) for item in value]
    return value


def sample(method: str, rng: random.Random) -> dict[str, Any]:
    """A random newest-shape result of C{method}."""
    result: dict[str, Any] = thinned(METHODS[method][0](), rng)
    if method == "tools/call":
        content = [block for block in result["content"] if rng.random() < 0.7]
        rng.shuffle(content)
        choice = rng.random()
        if choice < 0.3:
            result["structuredContent"], _ = rng.choice(NON_OBJECTS)
        elif choice < 0.5:
            result.pop("structuredContent", None)
        if "structuredContent" in result and rng.random() < 0.4:
            layout = rng.choice([None, 2])
            content.insert(
                0, {"type": "text", "text": json.dumps(result["structuredContent"], indent=layout)}
            )
        result["content"] = content
    elif method == "tools/list" and rng.random() < 0.4:
        _, schema = rng.choice(NON_OBJECTS)
        result["tools"][0]["outputSchema"] = schema
    elif method == "prompts/get":
        rng.shuffle(result["messages"])
    return result


class PropertyTests(SynchronousTestCase):
    """Random newest-shape results, every revision and method, a fixed seed."""

    ROUNDS = 12

    def test_random_results(self) -> None:
        """
        For random results of every method on every revision: strictly
        valid, the original unmodified, spelling twice changes nothing more,
        nothing the matrix says is missing remains, structured content and
        every block leave a trace, and fast paths return the argument itself.
        """
        rng = random.Random(20260728)
        failures: list[str] = []
        for round_ in range(self.ROUNDS):
            for method in METHODS:
                original = sample(method, rng)
                before = copy.deepcopy(original)
                for revision in ALL_REVISIONS:
                    if not served(method, revision):
                        continue
                    where = f"round {round_} {method} {revision}"
                    down = downgrade(original, method, revision)
                    out = spelled(original, method, revision)
                    failures += [
                        f"{where}: {line}" for line in schema_problems(out, method, revision)
                    ]
                    failures += [f"{where}: left {key}" for key in generic_leftovers(out, revision)]
                    if original != before:
                        failures.append(f"{where}: original modified")
                        original = copy.deepcopy(before)
                    if downgrade(down, method, revision) != down:
                        failures.append(f"{where}: not idempotent")
                    failures += [
                        f"{where}: {line}" for line in self.traces(original, down, method, revision)
                    ]
        self.assertEqual(failures, [])

    def traces(
        self, original: Mapping[str, Any], down: Mapping[str, Any], method: str, revision: Revision
    ) -> Iterator[str]:
        """What was lost without a trace in C{down}."""
        types = {node.get("type") for node in walk(down) if isinstance(node, Mapping)}
        for kind in ("audio", "resource_link"):
            if not content_type_in(kind, revision) and kind in types:
                yield f"{kind} block remains"
        if method != "tools/call":
            return
        if len(down.get("content", ())) < len(original.get("content", ())):
            yield "content block vanished"
        if "structuredContent" in original and "structuredContent" not in down:
            value = original["structuredContent"]
            if not any(
                text.lstrip()[:1] in '{["-0123456789tfn' and json.loads(text) == value
                for text in texts(down)
                if not text.startswith(("[audio", "Linked resource"))
            ):
                yield "structured content left no text"
        if (
            "structuredContent" in down
            and revision < V5
            and not isinstance(down["structuredContent"], Mapping)
        ):
            yield "non-object structured content kept"
