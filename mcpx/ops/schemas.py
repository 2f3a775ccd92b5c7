# -*- test-case-name: tests.daemon.test_openapi -*-
"""
The JSON Schemas the operations share: their errors, servers, tools, tasks, questions
and events, and the small builders the table's own schemas are made with.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from mcpx.pool.status import ServerState
from mcpx.questions.record import ROUTES, QuestionState
from mcpx.settings.servers import Scope
from mcpx.spec.questions import CAPABILITY_FOR
from mcpx.spec.revision import Era
from mcpx.tasks.task import TaskStatus

#: The most values one completion may carry (every revision's limit).
MAX_COMPLETION_VALUES = 100


NAME = {"type": "string", "minLength": 1}
#: What a C{call_id} a caller chooses may be: a short, plain word.
CALL_ID_PATTERN = "^[A-Za-z0-9_.-]{1,64}$"
STRINGS = {"type": "array", "items": {"type": "string"}}
NULLABLE_STRING = {"type": ["string", "null"]}


def object_schema(
    properties: Mapping[str, Any] | None = None,
    required: Iterable[str] = (),
    *,
    closed: bool = True,
    description: str = "",
) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": dict(properties or {})}
    if required:
        schema["required"] = list(required)
    if closed:
        schema["additionalProperties"] = False
    if description:
        schema["description"] = description
    return schema


NO_INPUT = object_schema()

ERROR_OBJECT = object_schema(
    {
        "code": {"type": "string", "pattern": "^[a-z][a-z0-9_]*$"},
        "message": {"type": "string"},
        "field": {"type": "string", "description": "The input field at fault."},
        "rpc": object_schema(
            {"code": {"type": "integer"}, "message": {"type": "string"}, "data": {}},
            ["code", "message"],
            description="The upstream server's JSON-RPC error, as it sent it.",
        ),
        "retry_in": {"type": "number", "description": "Seconds until a retry may succeed."},
    },
    ["code", "message"],
)

ERROR_SCHEMA = object_schema({"error": ERROR_OBJECT}, ["error"])

SERVER_STATUS = object_schema(
    {
        "name": NAME,
        "state": {"type": "string", "enum": [state.value for state in ServerState]},
        "transport": {"type": "string", "enum": ["stdio", "http"]},
        "scope": {"type": "string", "enum": [scope.value for scope in Scope]},
        "instances": {"type": "integer", "minimum": 0},
        "in_flight": {"type": "integer", "minimum": 0},
        "era": {"enum": [*(era.value for era in Era), None]},
        "revision": NULLABLE_STRING,
        "last_error": NULLABLE_STRING,
        "retry_in": {"type": ["number", "null"], "minimum": 0},
        "shadowed": {
            "type": "array",
            "description": "Its tools or prompts hosts are not offered, since a server passed "
            "through before it offers the same name, and its tools, prompts, resources and "
            "templates under a name reserved for mcpx itself (reserved: true, by: mcpx), as "
            "the last listing found them.",
            "items": object_schema(
                {
                    "kind": {"type": "string", "enum": ["tool", "prompt", "resource", "template"]},
                    "name": {"type": "string"},
                    "by": NAME,
                    "message": {"type": "string"},
                    "reserved": {"type": "boolean", "const": True},
                },
                ["kind", "name", "by", "message"],
            ),
        },
    },
    ["name", "state", "last_error", "instances", "era", "revision", "transport"],
)

RECENT_CALL = object_schema(
    {
        "server": NAME,
        "tool": {"type": "string"},
        "finished": {"type": "number", "description": "When it ended (seconds since the epoch)."},
        "seconds": {"type": "number", "minimum": 0, "description": "How long it took."},
        "outcome": {"type": "string", "enum": ["ok", "tool_error", "error"]},
    },
    ["server", "tool", "finished", "seconds", "outcome"],
)

TOOL_SUMMARY = object_schema(
    {
        "server": NAME,
        "name": NAME,
        "title": NULLABLE_STRING,
        "description": NULLABLE_STRING,
    },
    ["server", "name", "title", "description"],
)

CALL_TOOL_RESULT = object_schema(
    {
        "content": {"type": "array", "items": {"type": "object"}},
        "structuredContent": {"type": "object"},
        "isError": {"type": "boolean"},
    },
    closed=False,
    description="The upstream server's CallToolResult, as it sent it.",
)

TASK_STATUS = {"type": "string", "enum": [status.value for status in TaskStatus]}

TASK = object_schema(
    {
        "id": NAME,
        "status": TASK_STATUS,
        "result": CALL_TOOL_RESULT,
        "error": ERROR_OBJECT,
    },
    ["id", "status"],
)

TASK_SUMMARY = object_schema(
    {
        "id": NAME,
        "status": TASK_STATUS,
        "origin": {"type": "string", "enum": ["v1", "mcp", "resumable"]},
        "created": {"type": "number"},
        "updated": {"type": "number"},
        "server": {"type": "string"},
        "tool": {"type": "string"},
        "message": {"type": "string"},
    },
    ["id", "status", "origin", "created", "updated"],
)

COMPLETION = object_schema(
    {
        "values": {
            "type": "array",
            "items": {"type": "string"},
            "maxItems": MAX_COMPLETION_VALUES,
        },
        "total": {"type": "integer", "minimum": 0},
        "hasMore": {"type": "boolean"},
    },
    ["values"],
    closed=False,
)

EVENT = object_schema(
    {
        "kind": {"type": "string"},
        "server": NULLABLE_STRING,
        "time": {"type": "number"},
    },
    ["kind", "server", "time"],
    closed=False,
    description="One SSE event's data; its event type is the kind, its id the sequence.",
)

#: How a question is answered: C{action}, with C{content} (an elicitation) or C{result}
#: (sampling, roots) when it accepts.
ANSWER_ACTIONS = ("accept", "decline", "cancel")

#: Who answered, when the caller of C{POST /v1/questions/{id}/answer} does not say.
DEFAULT_ANSWERER = "api"

QUESTION = object_schema(
    {
        "id": NAME,
        "server": {"type": "string", "description": "The configured server that asked."},
        "scope_key": {"type": "string", "description": "The asking instance's scope key."},
        "method": {"type": "string", "enum": list(CAPABILITY_FOR)},
        "kind": {"type": "string", "enum": list(CAPABILITY_FOR.values())},
        "params": {
            "type": "object",
            "description": "What the server asks: the request's params, as they are shown.",
        },
        "created": {"type": "number"},
        "deadline": {
            "type": "number",
            "description": "When a pending question expires (answered as cancelled).",
        },
        "route": {"type": "string", "enum": list(ROUTES)},
        "call_id": NULLABLE_STRING,
        "state": {"type": "string", "enum": [state.value for state in QuestionState]},
        "answer": {
            "type": ["object", "null"],
            "description": "The result that went, or goes, back to the server.",
        },
        "answered_by": NULLABLE_STRING,
        "finished": {"type": ["number", "null"]},
        "orphaned": {
            "type": "boolean",
            "description": "Asked before the daemon restarted: nothing upstream waits for it.",
        },
        "owner": {
            **NULLABLE_STRING,
            "description": "The caller identity of the access token's subject the call was "
            "made for (daemon.auth oauth), who alone sees and answers it over TCP.",
        },
    },
    ["id", "server", "method", "kind", "params", "created", "deadline", "route", "state"],
    closed=False,
)


REF = {
    "oneOf": [
        object_schema({"type": {"const": "ref/prompt"}, "name": NAME}, ["type", "name"]),
        object_schema({"type": {"const": "ref/resource"}, "uri": NAME}, ["type", "uri"]),
    ]
}

AUTH_STATE = object_schema(
    {
        "server": NAME,
        "state": {"enum": ["signed_in", "signed_out", "needs_sign_in"]},
        "issuer": {"type": "string"},
        "resource": {"type": "string"},
        "scopes": STRINGS,
        "expires_at": {"type": ["number", "null"]},
        "refreshable": {"type": "boolean"},
    },
    ["server", "state"],
)
