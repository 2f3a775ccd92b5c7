"""
Tests for L{mcpx.spec.schemas}: the bundled official schemas and the strict validator.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from mcpx.spec.open_places import OPEN_PLACES
from mcpx.spec.revision import Revision
from mcpx.spec.safe_schema import dialect
from mcpx.spec.schemas import (
    ALL_SOURCES,
    TASKS_EXTENSION,
    SchemaSource,
    SchemaViolation,
    UnknownDefinition,
    definitions,
    load_schema,
    strict_schema,
    validate,
    validator,
    violations,
)

V2024 = Revision.V2024_11_05
V2025_03 = Revision.V2025_03_26
V2025_06 = Revision.V2025_06_18
V2025_11 = Revision.V2025_11_25
V2026 = Revision.V2026_07_28


def shared_schemas() -> Path:
    """
    The read-only copy of the official schemas and examples.

    C{$MCPX_SHARED_DIR} names the C{shared} folder when set; otherwise it sits
    beside the checkout, as it does here and in CI.
    """
    given = os.environ.get("MCPX_SHARED_DIR")
    shared = Path(given) if given else Path(__file__).parents[3] / "shared"
    return shared / "mcp-schemas"


#: Published examples that disagree with the published schema itself, with the
#: problem they are expected to show.  Each is still checked: if upstream fixes
#: the example, the test fails and the entry must go.
KNOWN_BAD_EXAMPLES: dict[str, tuple[str, str]] = {
    "ListRootsRequest/list-roots-request.json": (
        "id: additional property not allowed in 2026-07-28 ListRootsRequest",
        "roots/list is only an input request in 2026-07-28 and its schema has no id",
    ),
    "ReadResourceResultResponse/read-resource-result-response.json": (
        "closest as ReadResourceResult: result: 'cacheScope' is a required property",
        "ReadResourceResult requires cacheScope and ttlMs, which this example lacks; lax mode"
        " lets it pass only as the open InputRequiredResult alternative",
    ),
}


def _definition(source: SchemaSource, name: str) -> Any:
    document = load_schema(source)
    key = "$defs" if "$defs" in document else "definitions"
    return document[key][name]


def _resolve(source: SchemaSource, schema: Any) -> Any:
    while isinstance(schema, dict) and "$ref" in schema:
        schema = _definition(source, schema["$ref"].rsplit("/", 1)[1])
    return schema


def _sample(source: SchemaSource, schema: Any) -> Any:
    """
    A small instance built from C{schema}: required properties only, the first
    alternative of each C{anyOf}, C{allOf} branches merged.
    """
    schema = _resolve(source, schema)
    if not isinstance(schema, dict):
        return {}
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    if "allOf" in schema:
        merged: dict[str, Any] = {}
        for branch in schema["allOf"]:
            merged.update(_sample(source, branch))
        return merged
    for keyword in ("anyOf", "oneOf"):
        if keyword in schema:
            return _sample(source, schema[keyword][0])
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = kind[0]
    if kind == "object":
        properties = schema.get("properties", {})
        return {
            name: _sample(source, properties.get(name, {})) for name in schema.get("required", [])
        }
    simple: dict[str, Any] = {
        "string": "x",
        "integer": 0,
        "number": 0,
        "boolean": False,
        "array": [],
        "null": None,
    }
    return simple[kind]


class BundledSchemaTests(SynchronousTestCase):
    """
    The schemas ship inside the package and are read through it.
    """

    def test_same_as_official_copy(self) -> None:
        """
        Every bundled C{schema.json} is identical to the official copy it was taken from.
        """
        folder = shared_schemas()
        self.assertTrue(folder.is_dir(), f"official schemas not found at {folder}")
        for source in ALL_SOURCES:
            official = json.loads((folder / source.value / "schema.json").read_text("utf-8"))
            self.assertEqual(load_schema(source), official, f"bundled {source} differs")

    def test_definitions(self) -> None:
        """
        L{definitions} names what each revision defines, and only that.
        """
        self.assertIn("InitializeResult", definitions(V2024))
        self.assertNotIn("DiscoverResult", definitions(V2025_11))
        self.assertIn("DiscoverResult", definitions(V2026))
        self.assertNotIn("InitializeResult", definitions(V2026))
        self.assertIn("CreateTaskResult", definitions(TASKS_EXTENSION))
        self.assertIsInstance(definitions(V2026), frozenset)

    def test_dialect_follows_schema(self) -> None:
        """
        The three oldest revisions are checked as draft-07, the rest as 2020-12.
        """
        expected: dict[SchemaSource, type[Any]] = {
            V2024: dialect("draft-07"),
            V2025_03: dialect("draft-07"),
            V2025_06: dialect("draft-07"),
            V2025_11: dialect("2020-12"),
            V2026: dialect("2020-12"),
            TASKS_EXTENSION: dialect("2020-12"),
        }
        for source, cls in expected.items():
            for strict in (True, False):
                built = validator(source, "TextContent", strict=strict)
                self.assertIs(type(built), cls, f"{source} strict={strict}")

    def test_strict_copy_leaves_published_alone(self) -> None:
        """
        Building the strict variant does not change the published document.
        """
        strict_schema(V2026)
        published = _definition(V2026, "CallToolResult")
        self.assertNotIn("additionalProperties", published)
        self.assertFalse(strict_schema(V2026)["$defs"]["CallToolResult"]["additionalProperties"])


class ExampleTests(SynchronousTestCase):
    """
    The official 2026-07-28 examples pass the strict validator.
    """

    def test_every_example(self) -> None:
        """
        Each C{examples/<Definition>/*.json} file validates strictly against
        C{<Definition>}; the failure lists every file that does not.
        """
        folder = shared_schemas() / "2026-07-28" / "examples"
        self.assertTrue(
            folder.is_dir(),
            f"the 2026-07-28 examples are missing: expected them at {folder}"
            " (set MCPX_SHARED_DIR to the folder holding mcp-schemas/)",
        )
        files = sorted(folder.glob("*/*.json"))
        self.assertGreater(len(files), 100)
        failures = []
        for path in files:
            name = f"{path.parent.name}/{path.name}"
            problems = violations(json.loads(path.read_text("utf-8")), V2026, path.parent.name)
            if name in KNOWN_BAD_EXAMPLES:
                expected, _ = KNOWN_BAD_EXAMPLES[name]
                if not any(expected in line for line in problems):
                    failures.append(f"{name}: expected {expected!r}, got {problems}")
            elif problems:
                failures.append(f"{name}: " + "; ".join(problems))
        self.assertEqual(failures, [], "\n".join(failures))


class StrictRefusalTests(SynchronousTestCase):
    """
    Strict mode refuses fields a revision never defined; lax mode lets them through.
    """

    def assert_refused(self, instance: Any, source: SchemaSource, name: str, line: str) -> None:
        self.assertEqual(violations(instance, source, name, strict=False), [])
        self.assertIn(line, violations(instance, source, name))

    def test_structured_content_2025_03_26(self) -> None:
        """
        C{structuredContent} arrived in 2025-06-18, so a 2025-03-26 result with it is refused.
        """
        self.assert_refused(
            {"content": [], "structuredContent": {"a": 1}},
            V2025_03,
            "CallToolResult",
            "structuredContent: additional property not allowed in 2025-03-26 CallToolResult",
        )

    def test_result_type_2025_11_25(self) -> None:
        """
        C{resultType} is a 2026-07-28 field; 2025-11-25 results with it are refused.
        """
        self.assert_refused(
            {"content": [], "resultType": "complete"},
            V2025_11,
            "CallToolResult",
            "resultType: additional property not allowed in 2025-11-25 CallToolResult",
        )
        self.assert_refused(
            {"tools": [], "resultType": "complete"},
            V2025_11,
            "ListToolsResult",
            "resultType: additional property not allowed in 2025-11-25 ListToolsResult",
        )

    def test_extensions_capability_2025_11_25(self) -> None:
        """
        The C{extensions} capability is refused in 2025-11-25 on both sides.
        """
        for side in ("ServerCapabilities", "ClientCapabilities"):
            self.assert_refused(
                {"extensions": {"io.modelcontextprotocol/tasks": {}}},
                V2025_11,
                side,
                f"extensions: additional property not allowed in 2025-11-25 {side}",
            )

    def test_tool_title_2025_03_26(self) -> None:
        """
        A tool C{title} (new in 2025-06-18) is refused in 2025-03-26.
        """
        self.assert_refused(
            {"name": "t", "title": "T", "inputSchema": {"type": "object"}},
            V2025_03,
            "Tool",
            "title: additional property not allowed in 2025-03-26 Tool",
        )

    def test_tool_execution_2026_07_28(self) -> None:
        """
        C{Tool.execution} (2025-11-25 tasks) is gone in 2026-07-28 and refused there.
        """
        tool = {"name": "t", "inputSchema": {"type": "object"}, "execution": {}}
        self.assertEqual(violations(tool, V2025_11, "Tool"), [])
        self.assert_refused(
            tool, V2026, "Tool", "execution: additional property not allowed in 2026-07-28 Tool"
        )

    def test_nested_and_alternatives(self) -> None:
        """
        An unknown field deep inside a content block is refused, and the
        problem names the alternative that came closest.
        """
        result = {"content": [{"type": "text", "text": "x", "bogus": 1}], "resultType": "complete"}
        problems = violations(result, V2026, "CallToolResult")
        self.assertEqual(len(problems), 1)
        self.assertIn("content[0]: matches none of the 5 alternatives", problems[0])
        self.assertIn("as TextContent: content[0].bogus: additional property", problems[0])

    def test_params_of_concrete_request(self) -> None:
        """
        A concrete request's params are closed: an unknown parameter is refused.
        """
        request = {"method": "tools/call", "params": {"name": "x", "bogus": 1}}
        self.assert_refused(
            request,
            V2024,
            "CallToolRequest",
            "params.bogus: additional property not allowed in 2024-11-05 CallToolRequest",
        )


class CompositionTests(SynchronousTestCase):
    """
    Objects built from several C{allOf} branches accept each branch's fields, and only those.
    """

    task_2025 = {"taskId": "t", "status": "working", "createdAt": "a", "lastUpdatedAt": "b"}

    def test_result_and_task(self) -> None:
        """
        A 2025-11-25 C{CancelTaskResult} (C{Result} plus C{Task}) takes C{_meta}
        and the task fields, but not C{resultType}.
        """
        result = {**self.task_2025, "ttl": None, "_meta": {"k": 1}}
        self.assertEqual(violations(result, V2025_11, "CancelTaskResult"), [])
        self.assertEqual(
            violations({**result, "resultType": "complete"}, V2025_11, "CancelTaskResult"),
            ["resultType: additional property not allowed in 2025-11-25 CancelTaskResult"],
        )

    def test_error_with_code(self) -> None:
        """
        A 2026-07-28 typed error (C{Error} plus a fixed code) accepts C{data}
        but refuses unknown members of C{error}.
        """
        response = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32020, "message": "m"}}
        self.assertEqual(violations(response, V2026, "HeaderMismatchError"), [])
        bad = {**response, "error": {"code": -32020, "message": "m", "bogus": 1}}
        self.assertEqual(
            violations(bad, V2026, "HeaderMismatchError"),
            ["error.bogus: additional property not allowed in 2026-07-28 HeaderMismatchError"],
        )

    def test_known_definition_inside_open_data(self) -> None:
        """
        C{data} of an error is open, yet a capability object inside it is still checked.
        """
        response = {
            "jsonrpc": "2.0",
            "id": 1,
            "error": {
                "code": -32021,
                "message": "m",
                "data": {"requiredCapabilities": {"bogus": {}}, "extra": True},
            },
        }
        self.assertEqual(
            violations(response, V2026, "MissingRequiredClientCapabilityError"),
            [
                "error.data.requiredCapabilities.bogus: additional property not allowed"
                " in 2026-07-28 ClientCapabilities"
            ],
        )


class OpenPlaceTests(SynchronousTestCase):
    """
    The open maps stay open in strict mode, while their known keys are still checked.
    """

    def test_places_have_reasons(self) -> None:
        """
        Every open place says where it is and why it is open.
        """
        for place in OPEN_PLACES:
            self.assertTrue(place.property or place.definition, place)
            self.assertTrue(place.reason, place)

    def test_meta_keys(self) -> None:
        """
        Arbitrary C{_meta} keys pass on requests, results and tools of every era.
        """
        request = {
            "method": "tools/call",
            "params": {"name": "x", "_meta": {"progressToken": 1, "com.example/anything": [1]}},
        }
        for revision in (V2024, V2025_03, V2025_06):
            self.assertEqual(violations(request, revision, "CallToolRequest"), [], revision)
        task_request = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tasks/get",
            "params": {"taskId": "t", "_meta": {"progressToken": "p", "com.example/x": 1}},
        }
        self.assertEqual(violations(task_request, V2025_11, "GetTaskRequest"), [])
        result = {
            "content": [],
            "resultType": "complete",
            "_meta": {"com.example/trace": {"deep": {"er": 1}}},
        }
        self.assertEqual(violations(result, V2026, "CallToolResult"), [])

    def test_known_meta_key_checked(self) -> None:
        """
        A known key inside an open C{_meta} still has to have its published type.
        """
        request = {"method": "tools/call", "params": {"name": "x", "_meta": {"progressToken": []}}}
        self.assertEqual(
            violations(request, V2024, "CallToolRequest"),
            [
                "params._meta.progressToken: [] is not of type 'string', 'integer' in 2024-11-05"
                " ProgressToken"
            ],
        )
        result = {
            "content": [],
            "resultType": "complete",
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "s"}},
        }
        problems = violations(result, V2026, "CallToolResult")
        self.assertEqual(len(problems), 1)
        self.assertIn(
            "_meta[\"io.modelcontextprotocol/serverInfo\"]: 'version' is a required property",
            problems[0],
        )

    def test_tool_arguments(self) -> None:
        """
        Tool arguments may have any keys and values.
        """
        params = {
            "name": "x",
            "arguments": {"anything": {"nested": [1, {"x": None}]}},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        }
        self.assertEqual(violations(params, V2026, "CallToolRequestParams"), [])
        request = {"method": "tools/call", "params": {"name": "x", "arguments": params}}
        self.assertEqual(violations(request, V2024, "CallToolRequest"), [])

    def test_input_schema_keywords(self) -> None:
        """
        A tool's input and output schemas may use any JSON Schema keyword, at any depth.
        """
        schema = {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "additionalProperties": False,
            "properties": {"a": {"type": "string", "x-mcp-header": "A", "$comment": "c"}},
            "$defs": {"b": {"oneOf": [{"const": 1}]}},
            "if": {"required": ["a"]},
        }
        for revision in (V2024, V2025_06, V2025_11, V2026):
            tool: dict[str, Any] = {"name": "t", "inputSchema": schema}
            if revision >= V2025_06:
                tool["outputSchema"] = schema
            self.assertEqual(violations(tool, revision, "Tool"), [], revision)

    def test_experimental(self) -> None:
        """
        Experimental capabilities are open in every revision.
        """
        capabilities = {"experimental": {"com.example/x": {"deep": {"k": 1}}}}
        for revision in Revision:
            self.assertEqual(violations(capabilities, revision, "ServerCapabilities"), [], revision)
            self.assertEqual(violations(capabilities, revision, "ClientCapabilities"), [], revision)

    def test_extensions_from_2026(self) -> None:
        """
        The C{extensions} capability map accepts any extension id in 2026-07-28.
        """
        capabilities = {"extensions": {"com.example/ext": {"setting": 1}}}
        self.assertEqual(violations(capabilities, V2026, "ServerCapabilities"), [])

    def test_structured_content(self) -> None:
        """
        From 2025-06-18, C{structuredContent} takes any keys.
        """
        result: dict[str, Any] = {"content": [], "structuredContent": {"any": {"x": [1]}}}
        self.assertEqual(violations(result, V2025_06, "CallToolResult"), [])
        self.assertEqual(violations(result, V2025_11, "CallToolResult"), [])
        result["resultType"] = "complete"
        self.assertEqual(violations(result, V2026, "CallToolResult"), [])


class DefinitionTests(SynchronousTestCase):
    """
    Whole messages validate, and a definition is looked up in its own revision only.
    """

    def test_initialize_result_2024(self) -> None:
        """
        A complete 2024-11-05 C{InitializeResult} validates strictly.
        """
        result = {
            "protocolVersion": "2024-11-05",
            "capabilities": {"tools": {"listChanged": True}, "logging": {}},
            "serverInfo": {"name": "s", "version": "1"},
            "instructions": "use it",
            "_meta": {"k": "v"},
        }
        validate(result, V2024, "InitializeResult")
        self.assertIn(
            "serverInfo.title: additional property not allowed in 2024-11-05 Implementation",
            violations(
                {**result, "serverInfo": {"name": "s", "version": "1", "title": "S"}},
                V2024,
                "InitializeResult",
            ),
        )

    def test_discover_result(self) -> None:
        """
        A 2026-07-28 C{DiscoverResult} validates strictly; 2025-11-25 has no such definition.
        """
        result = {
            "resultType": "complete",
            "supportedVersions": ["2026-07-28"],
            "capabilities": {"tools": {}},
            "cacheScope": "public",
            "ttlMs": 0,
        }
        validate(result, V2026, "DiscoverResult")
        with self.assertRaises(UnknownDefinition) as caught:
            validate(result, V2025_11, "DiscoverResult")
        self.assertEqual(
            str(caught.exception), "'DiscoverResult' is not defined in the 2025-11-25 schema"
        )
        self.assertIsInstance(caught.exception, KeyError)

    def test_internal_twins_hidden(self) -> None:
        """
        The open twins the strict variant adds for composition are not definitions one may ask for.
        """
        twins = [n for n in strict_schema(V2025_11)["$defs"] if n.startswith("mcpx-fragment-")]
        self.assertNotEqual(twins, [])
        for twin in twins:
            self.assertRaises(UnknownDefinition, validator, V2025_11, twin)


class TasksExtensionTests(SynchronousTestCase):
    """
    The tasks extension's schema is usable on its own, without the network.
    """

    def test_create_task_result(self) -> None:
        """
        A C{CreateTaskResult} built from the schema's own required fields validates
        strictly; one extra field is refused.
        """
        result = _sample(TASKS_EXTENSION, _definition(TASKS_EXTENSION, "CreateTaskResult"))
        self.assertEqual(result["resultType"], "task")
        self.assertIn("taskId", result)
        validate(result, TASKS_EXTENSION, "CreateTaskResult")
        self.assertEqual(
            violations({**result, "bogus": 1}, TASKS_EXTENSION, "CreateTaskResult"),
            ["bogus: additional property not allowed in ext-tasks CreateTaskResult"],
        )

    def test_detailed_task(self) -> None:
        """
        Each kind of C{DetailedTask} validates; a field of another kind is refused.
        """
        working = {
            "taskId": "t",
            "status": "working",
            "createdAt": "2026-01-01T00:00:00Z",
            "lastUpdatedAt": "2026-01-01T00:00:00Z",
            "ttlMs": None,
        }
        validate(working, TASKS_EXTENSION, "DetailedTask")
        failed = {**working, "status": "failed", "error": {"code": 1, "message": "m"}}
        validate(failed, TASKS_EXTENSION, "DetailedTask")
        problems = violations({**working, "result": {}}, TASKS_EXTENSION, "DetailedTask")
        self.assertEqual(len(problems), 1)
        self.assertIn("result: additional property not allowed", problems[0])

    def test_request_params_keep_meta(self) -> None:
        """
        A C{tasks/get} request may carry C{_meta} in its params, as every 2026 request does.
        """
        request = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tasks/get",
            "params": {"taskId": "t", "_meta": {"io.modelcontextprotocol/protocolVersion": "x"}},
        }
        validate(request, TASKS_EXTENSION, "GetTaskRequest")
        self.assertEqual(
            violations({**request, "bogus": 1}, TASKS_EXTENSION, "GetTaskRequest"),
            ["bogus: additional property not allowed in ext-tasks GetTaskRequest"],
        )


class SampleAuditTests(SynchronousTestCase):
    """
    Strictness costs nothing that the published schema allows by design.
    """

    def test_every_definition(self) -> None:
        """
        For every definition of every bundled schema, an instance built from the
        schema that lax mode accepts is accepted by strict mode too.
        """
        failures = []
        checked = 0
        for source in ALL_SOURCES:
            for name in sorted(definitions(source)):
                instance = _sample(source, _definition(source, name))
                if violations(instance, source, name, strict=False):
                    continue
                checked += 1
                problems = violations(instance, source, name)
                if problems:
                    failures.append(f"{source} {name}: {problems}")
        self.assertGreater(checked, 400)
        self.assertEqual(failures, [], "\n".join(failures))

    def test_every_object_closed(self) -> None:
        """
        Every object definition refuses an unknown top-level field in strict
        mode, unless it is open by design: listed in C{OPEN_PLACES}, published
        as open (C{additionalProperties: {}}), or a union or alias that includes one.
        """
        open_definitions = {p.definition for p in OPEN_PLACES if p.property is None}

        def open_by_design(source: SchemaSource, schema: Any) -> bool:
            if "$ref" in schema:
                name = schema["$ref"].rsplit("/", 1)[1]
                return name in open_definitions or open_by_design(source, _definition(source, name))
            if schema.get("additionalProperties", False) in ({}, True):
                return True
            return any(open_by_design(source, b) for b in schema.get("anyOf", ()))

        failures = []
        closed = 0
        for source in ALL_SOURCES:
            for name in sorted(definitions(source)):
                schema = _definition(source, name)
                instance = _sample(source, schema)
                if not isinstance(instance, dict) or schema.get("additionalProperties") not in (
                    None,
                    {},
                    True,
                ):
                    # Not an object, or a typed map whose published schema
                    # already decides what another key may hold.
                    continue
                refused = violations({**instance, "mcpx-unknown": 1}, source, name)
                expected_open = name in open_definitions or open_by_design(source, schema)
                if bool(refused) == expected_open:
                    failures.append(f"{source} {name}: open={expected_open}, got {refused}")
                closed += bool(refused)
        self.assertGreater(closed, 500)
        self.assertEqual(failures, [], "\n".join(failures))


class ValidatorCacheTests(SynchronousTestCase):
    """
    Validators are compiled once and reused.
    """

    def test_same_object(self) -> None:
        """
        Asking twice gives the same validator; the default is the strict one.
        """
        first = validator(V2026, "CallToolResult")
        self.assertIs(validator(V2026, "CallToolResult"), first)
        self.assertIs(validator(V2026, "CallToolResult", strict=True), first)
        lax = validator(V2026, "CallToolResult", strict=False)
        self.assertIsNot(lax, first)
        self.assertIs(validator(V2026, "CallToolResult", strict=False), lax)


class SchemaViolationTests(SynchronousTestCase):
    """
    L{validate} reports every problem at once.
    """

    def test_lists_every_problem(self) -> None:
        """
        The exception is a C{ValueError} whose message names each offending path.
        """
        result = {"content": "nope", "structuredContent": {}, "isError": 1}
        with self.assertRaises(SchemaViolation) as caught:
            validate(result, V2025_03, "CallToolResult")
        error = caught.exception
        self.assertIsInstance(error, ValueError)
        self.assertEqual(len(error.problems), 3)
        message = str(error)
        self.assertTrue(message.startswith("not a valid 2025-03-26 CallToolResult (strict):"))
        for part in (
            "structuredContent: additional property not allowed",
            "content: 'nope' is not of type 'array'",
            "isError: 1 is not of type 'boolean'",
        ):
            self.assertIn(part, message)

    def test_valid_is_silent(self) -> None:
        """
        A valid instance gives no violations and C{validate} does not raise.
        """
        self.assertEqual(violations({"content": []}, V2025_03, "CallToolResult"), [])
        validate({"content": []}, V2025_03, "CallToolResult")

    def test_long_values_clipped(self) -> None:
        """
        A huge offending value does not make a huge problem line.
        """
        (line,) = violations({"content": "x" * 10_000}, V2025_03, "CallToolResult")
        self.assertLessEqual(len(line), 400)
        self.assertTrue(line.endswith("..."))
