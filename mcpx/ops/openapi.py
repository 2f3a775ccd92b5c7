# -*- test-case-name: tests.daemon.test_openapi -*-
"""
The OpenAPI 3.1 document of the operations (C{GET /openapi.json}).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mcpx._version import __version__
from mcpx.ops.host import DEFAULT_CLIENT
from mcpx.ops.op import NDJSON, Op
from mcpx.ops.schemas import ERROR_SCHEMA, object_schema
from mcpx.wire.http_common import CLIENT_HEADER

_STATUS_TEXT = {
    200: "OK",
    202: "Accepted: a task to collect later",
    400: "Invalid input: the error names the field",
    401: "This connection needs the daemon's token (Authorization: Bearer; mcpx token)",
    403: "A foreign Origin or Host: the request did not come from a page or name of this "
    "daemon; or, for an op that is the owner's alone, a caller let in with an access token "
    "(owner_only)",
    404: "Unknown server, tool, prompt, task or question, or a resource the upstream server "
    "does not have (rpc holds its error)",
    409: "The question is no longer pending: answered, declined, cancelled or expired",
    422: "The upstream server refused the input as invalid, for instance an unknown tool or "
    "wrong arguments (rpc holds its error)",
    415: "The body was not sent as Content-Type: application/json",
    429: "The caller holds as many tasks as it may; Retry-After says when to try again",
    500: "The daemon failed unexpectedly",
    502: "The upstream server answered with an error (under rpc) or failed",
    503: "The server (or the pool) is unavailable; retry_in says when to try again",
    504: "The upstream server did not answer in time",
}

_CLIENT_PARAMETER = {
    "name": CLIENT_HEADER,
    "in": "header",
    "required": False,
    "description": "Who is calling; servers with scope client get one instance per caller.",
    "schema": {"type": "string", "default": DEFAULT_CLIENT},
}


def _error_response(status: int) -> dict[str, Any]:
    return {
        "description": _STATUS_TEXT.get(status, "Error"),
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }


def _operation(op: Op) -> dict[str, Any]:
    parameters: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": op.properties[name]}
        for name in op.path_params
    ]
    for name in op.query_params:
        schema = op.properties[name]
        parameter: dict[str, Any] = {
            "name": name,
            "in": "query",
            "required": name in op.required,
            "schema": schema,
        }
        if schema.get("type") == "array":
            parameter.update(style="form", explode=True)
        parameters.append(parameter)
    if op.uses_client:
        parameters.append(_CLIENT_PARAMETER)
    success: dict[str, Any] = {"description": _STATUS_TEXT[200], "content": {}}
    success["content"][op.media.value] = {"schema": op.output_schema}
    if op.progress_schema is not None:
        success["content"][NDJSON] = {"schema": op.progress_schema}
    responses: dict[str, Any] = {"200": success}
    if op.accepted_schema is not None:
        responses["202"] = {
            "description": _STATUS_TEXT[202],
            "content": {"application/json": {"schema": op.accepted_schema}},
        }
    # Every route is behind the daemon's gate (mcpx.daemon.gate): these come from it.
    gate = {
        403,
        *((415,) if op.method == "POST" else ()),
        *(() if op.path == "/health" else (401,)),
    }
    statuses = sorted({*op.errors, *((400,) if op.properties else ()), *gate})
    for status in statuses:
        responses[str(status)] = _error_response(status)
    responses["default"] = _error_response(500)
    operation: dict[str, Any] = {
        "operationId": op.name,
        "summary": op.summary,
        "tags": [op.tag],
        "responses": responses,
    }
    if op.description:
        operation["description"] = op.description
    if parameters:
        operation["parameters"] = parameters
    if op.body_params:
        body = object_schema(
            {name: op.properties[name] for name in op.body_params},
            [name for name in op.required if name in op.body_params],
        )
        if "not" in op.input_schema:
            # A constraint across body fields (exclusive_flags) belongs to the body.
            body["not"] = op.input_schema["not"]
        operation["requestBody"] = {
            "required": bool(body.get("required")),
            "content": {"application/json": {"schema": body}},
        }
    return operation


def openapi_document(ops: Sequence[Op]) -> dict[str, Any]:
    """The OpenAPI 3.1 document describing C{ops}: one path item entry per op."""
    paths: dict[str, dict[str, Any]] = {}
    for op in ops:
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(op)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "mcpx daemon",
            "version": __version__,
            "description": "The mcpx gateway's HTTP API: the configured MCP servers, kept "
            "warm, offered over REST. Errors are JSON with a stable code and a message "
            "that says what to do.",
        },
        "tags": [{"name": tag} for tag in dict.fromkeys(op.tag for op in ops)],
        "paths": paths,
        "components": {
            "schemas": {"Error": ERROR_SCHEMA},
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "The daemon's token (mcpx token). Not needed on the unix "
                    "socket, nor on loopback from the daemon's own user with daemon.auth peer.",
                }
            },
        },
        # Either no credentials (the owner) or the bearer token.
        "security": [{}, {"bearer": []}],
    }
