"""C{GET /openapi.json}: the API described from the operation table, as valid OpenAPI 3.1."""

from __future__ import annotations

import copy
from typing import Any

from openapi_spec_validator import validate
from openapi_spec_validator.validation.exceptions import OpenAPIValidationError
from twisted.trial.unittest import SynchronousTestCase

from mcpx._version import __version__
from mcpx.ops.op import NDJSON, Media
from mcpx.ops.openapi import openapi_document
from mcpx.ops.table import OPS
from tests.daemon.fake_pool import Harness


class OpenAPIDocumentTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.document = openapi_document(OPS)

    def operation(self, method: str, path: str) -> dict[str, Any]:
        found: dict[str, Any] = self.document["paths"][path][method.lower()]
        return found

    def test_valid_openapi_3_1(self) -> None:
        """The document passes the OpenAPI 3.1 validator."""
        self.assertEqual(self.document["openapi"], "3.1.0")
        self.assertEqual(self.document["info"]["version"], __version__)
        validate(self.document)

    def test_validator_can_refuse(self) -> None:
        """The validator used above does refuse a broken document (a path without its parameter)."""
        broken = copy.deepcopy(self.document)
        del broken["paths"]["/v1/tasks/{id}"]["get"]["parameters"]
        self.assertRaises(OpenAPIValidationError, validate, broken)

    def test_every_op_listed_once(self) -> None:
        """Each op is one operation, under its path and method, with its name as operationId."""
        listed = [
            (method.upper(), path, operation["operationId"])
            for path, item in self.document["paths"].items()
            for method, operation in item.items()
        ]
        self.assertEqual(sorted(listed), sorted((op.method, op.path, op.name) for op in OPS))

    def test_output_schemas(self) -> None:
        """Each op's 200 answer carries its output schema under its media type."""
        for op in OPS:
            success = self.operation(op.method, op.path)["responses"]["200"]
            self.assertEqual(success["content"][op.media.value]["schema"], op.output_schema)
        events = self.operation("GET", "/v1/events")["responses"]["200"]["content"]
        self.assertEqual(list(events), [Media.EVENT_STREAM.value])

    def test_call_answers(self) -> None:
        """The call documents its NDJSON progress stream and its 202 task answer."""
        call = self.operation("POST", "/v1/call")
        op = next(op for op in OPS if op.name == "call_tool")
        self.assertEqual(call["responses"]["200"]["content"][NDJSON]["schema"], op.progress_schema)
        self.assertEqual(
            call["responses"]["202"]["content"]["application/json"]["schema"],
            op.accepted_schema,
        )

    def test_body_schema(self) -> None:
        """A POST op's body schema is its input schema without the path parameters."""
        call = self.operation("POST", "/v1/call")
        body = call["requestBody"]["content"]["application/json"]["schema"]
        self.assertTrue(call["requestBody"]["required"])
        self.assertEqual(body["required"], ["server", "tool"])
        self.assertEqual(
            set(body["properties"]),
            {"server", "tool", "arguments", "timeout", "task", "progress", "call_id"},
        )
        restart = self.operation("POST", "/v1/servers/{name}/restart")
        self.assertNotIn("requestBody", restart)
        self.assertEqual(
            restart["parameters"],
            [
                {
                    "name": "name",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string", "minLength": 1},
                }
            ],
        )

    def test_query_parameters(self) -> None:
        """GET inputs are query parameters; a repeatable one is a form-exploded array."""
        tools = {p["name"]: p for p in self.operation("GET", "/v1/tools")["parameters"]}
        self.assertEqual(tools["search"]["in"], "query")
        self.assertFalse(tools["search"]["required"])
        self.assertEqual(tools["Mcpx-Client"]["in"], "header")
        events = {p["name"]: p for p in self.operation("GET", "/v1/events")["parameters"]}
        self.assertEqual(events["kind"]["schema"]["type"], "array")
        self.assertEqual((events["kind"]["style"], events["kind"]["explode"]), ("form", True))

    def test_errors_documented(self) -> None:
        """Error statuses point at the shared Error schema; inputs imply a 400."""
        call = self.operation("POST", "/v1/call")["responses"]
        for status in ("400", "404", "502", "503", "504", "default"):
            self.assertEqual(
                call[status]["content"]["application/json"]["schema"],
                {"$ref": "#/components/schemas/Error"},
            )
        self.assertIn("Error", self.document["components"]["schemas"])
        self.assertNotIn("400", self.operation("GET", "/health")["responses"])

    def test_gate_refusals_documented(self) -> None:
        """403 everywhere, 401 wherever the token may be asked (not /health), 415 on POSTs."""
        health = self.operation("GET", "/health")["responses"]
        self.assertIn("403", health)
        self.assertNotIn("401", health)
        for method, path in (("GET", "/v1/servers"), ("POST", "/v1/call")):
            responses = self.operation(method, path)["responses"]
            self.assertIn("401", responses)
            self.assertIn("403", responses)
            self.assertEqual("415" in responses, method == "POST")
        scheme = self.document["components"]["securitySchemes"]["bearer"]
        self.assertEqual((scheme["type"], scheme["scheme"]), ("http", "bearer"))


class OpenAPIRouteTests(SynchronousTestCase):
    def test_served(self) -> None:
        """GET /openapi.json serves the document, as JSON."""
        harness = Harness()
        answer = harness.get("/openapi.json")
        self.assertEqual(answer.code, 200)
        self.assertEqual(answer.header("content-type"), "application/json")
        self.assertEqual(answer.json, openapi_document(OPS))

    def test_served_without_a_pool(self) -> None:
        """The document needs no pool."""
        answer = Harness(with_pool=False).get("/openapi.json")
        self.assertEqual(answer.code, 200)
