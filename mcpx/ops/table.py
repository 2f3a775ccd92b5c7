# -*- test-case-name: tests.daemon.test_ops -*-
"""
The operation table: every operation the daemon offers, declared once (a data table,
longer than a module should be for that reason alone).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from mcpx.ops import auth, calls, programs, questions, servers, tasks, watch
from mcpx.ops.host import Invocation, OpHost
from mcpx.ops.op import Media, Op
from mcpx.ops.openapi import openapi_document
from mcpx.ops.schemas import (
    ANSWER_ACTIONS,
    AUTH_STATE,
    CALL_ID_PATTERN,
    CALL_TOOL_RESULT,
    COMPLETION,
    DEFAULT_ANSWERER,
    ERROR_OBJECT,
    EVENT,
    NAME,
    NO_INPUT,
    NULLABLE_STRING,
    QUESTION,
    RECENT_CALL,
    REF,
    SERVER_STATUS,
    STRINGS,
    TASK,
    TASK_STATUS,
    TASK_SUMMARY,
    TOOL_SUMMARY,
    object_schema,
)
from mcpx.policy.precheck import exclusive_flags
from mcpx.questions.record import QuestionState


async def openapi(host: OpHost, call: Invocation) -> dict[str, Any]:
    return _document()


@functools.cache
def _document() -> dict[str, Any]:
    return openapi_document(OPS)


#: Why servers are missing from a listing of every server's.
LISTING_ERRORS = {
    "type": "array",
    "items": object_schema({"server": NAME, "error": ERROR_OBJECT}, ["server", "error"]),
}


#: What an operation that asks an upstream server may fail with: no such server or
#: item (404), input the server refused (422), the server failed (502), the server or
#: the pool unavailable (503), no answer in time (504).
UPSTREAM_ERRORS = (404, 422, 502, 503, 504)


def _server_filter(description: str) -> dict[str, Any]:
    """The optional C{server} of an operation that lists every server's unless named."""
    return {**NAME, "description": description}


#: The input of a listing of every server's, or of the one named.
ONE_SERVER_OR_ALL = object_schema({"server": _server_filter("Only this server's.")})


def _listed(key: str) -> dict[str, Any]:
    """One item of a server's catalogue as it gave it, with C{server} added."""
    return object_schema({"server": NAME, key: {"type": "string"}}, ["server", key], closed=False)


OPS: tuple[Op, ...] = (
    Op(
        name="list_servers",
        summary="List the configured servers and their state",
        input_schema=NO_INPUT,
        output_schema=object_schema(
            {"servers": {"type": "array", "items": SERVER_STATUS}}, ["servers"]
        ),
        handler=servers.list_servers,
        errors=(503,),
    ),
    Op(
        name="list_tools",
        summary="List tools, of every server or one, optionally searching their text",
        description="search keeps the tools whose name, title and description contain every "
        "word given. A server that cannot be reached is listed under errors. Titles and "
        "descriptions are the servers' own words, passed on unverified.",
        input_schema=object_schema(
            {
                "server": _server_filter("Only this server's tools."),
                "search": {"type": "string", "description": "Words to look for."},
            }
        ),
        output_schema=object_schema(
            {
                "tools": {"type": "array", "items": TOOL_SUMMARY},
                "errors": LISTING_ERRORS,
            },
            ["tools"],
        ),
        handler=servers.list_tools,
        tag="tools",
        errors=UPSTREAM_ERRORS,
        uses_client=True,
    ),
    Op(
        name="describe_tool",
        summary="Describe one tool: its full definition, input schema included",
        description="The definition is the server's own: its annotations (readOnlyHint, "
        "destructiveHint, ...) are the server's claims, passed on unverified.",
        input_schema=object_schema({"server": NAME, "tool": NAME}, ["server", "tool"]),
        output_schema=object_schema(
            {"server": NAME, "tool": {"type": "object", "required": ["name", "inputSchema"]}},
            ["server", "tool"],
        ),
        handler=servers.describe_tool,
        tag="tools",
        errors=UPSTREAM_ERRORS,
        uses_client=True,
    ),
    Op(
        name="call_tool",
        summary="Call a tool",
        description='With "task": true the answer is 202 and a task to collect from '
        'GET /v1/tasks/{id}; with "progress": true it is NDJSON: progress lines, then one '
        "result or error line. The timeout is clamped to pool.callTimeout. A question the "
        "server asks during the call waits in GET /v1/questions with the call's call_id: "
        'the one given, else the task\'s id with "task": true, else one mcpx makes up.',
        input_schema=object_schema(
            {
                "server": NAME,
                "tool": NAME,
                "arguments": {"type": "object"},
                "timeout": {"type": "number", "exclusiveMinimum": 0},
                "task": {"type": "boolean"},
                "progress": {"type": "boolean"},
                "call_id": {
                    "type": "string",
                    "pattern": CALL_ID_PATTERN,
                    "description": "Names the call on the questions its server asks during "
                    "it (their call_id), so the caller can find and answer its own.",
                },
            },
            ["server", "tool"],
        )
        | {
            "not": exclusive_flags(
                "task",
                "progress",
                why='a task cannot stream progress; drop "progress" or "task"',
            )
        },
        output_schema=CALL_TOOL_RESULT,
        accepted_schema=object_schema(
            {"task": object_schema({"id": NAME, "status": TASK_STATUS}, ["id", "status"])}, ["task"]
        ),
        progress_schema={
            "oneOf": [
                object_schema({"progress": {"type": "object"}}, ["progress"]),
                object_schema({"result": CALL_TOOL_RESULT}, ["result"]),
                object_schema({"error": ERROR_OBJECT}, ["error"]),
            ]
        },
        handler=calls.call_tool,
        tag="tools",
        errors=(403, 404, 422, 429, 502, 503, 504),
        uses_client=True,
    ),
    Op(
        name="get_task",
        summary='Collect a task started with "task": true',
        input_schema=object_schema({"id": NAME}, ["id"]),
        output_schema=TASK,
        handler=tasks.get_task,
        tag="tools",
        errors=(404,),
        gateway=False,
    ),
    Op(
        name="list_tasks",
        summary="List the tasks running or kept for collection, oldest first",
        description="Every task of the daemon: /v1/call's, the task-augmented MCP calls of "
        "hosts, and MCP calls kept after their client was asked a question (origin says "
        "which). server, state and client keep only those tasks. The results themselves "
        "are collected from GET /v1/tasks/{id}.",
        input_schema=object_schema(
            {
                "server": _server_filter("Only the tasks calling this server."),
                "state": {**TASK_STATUS, "description": "Only the tasks in this state."},
                "client": {
                    "type": "string",
                    "minLength": 1,
                    "description": "Only the tasks of this caller identity.",
                },
            }
        ),
        output_schema=object_schema({"tasks": {"type": "array", "items": TASK_SUMMARY}}, ["tasks"]),
        handler=tasks.list_tasks,
        tag="tools",
        gateway=False,
    ),
    Op(
        name="cancel_task",
        summary="Cancel a running task",
        description="The task is cancelled at once and its upstream request with it; a task "
        "that already finished answers 409.",
        input_schema=object_schema({"id": NAME}, ["id"]),
        output_schema=TASK,
        handler=tasks.cancel_task,
        tag="tools",
        errors=(404, 409),
        gateway=False,
    ),
    Op(
        name="exec",
        summary="Run a program that calls the configured servers' tools",
        description="The program is Python (the subset a sandboxed interpreter runs: no "
        "files but /out, no network, no processes). Each server is a name and each tool an "
        'async method: `await demo.add(a=2, b=40)`; `await stubs("demo")` shows a '
        "server's tools. Its last expression is the result; what it prints is the output. "
        'exec.timeout bounds the run (timeoutSec may lower it). On /v1, with "task": '
        "true the answer is 202 with the task and the run's id at once: the run's questions "
        "wait in GET /v1/questions?run=<run>, its result in GET /v1/tasks/{id}, and "
        "POST /v1/tasks/{id}/cancel stops it.",
        input_schema=object_schema(
            {
                "program": {"type": "string", "minLength": 1, "maxLength": 1024 * 1024},
                "timeoutSec": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "description": "Seconds the run may take; clamped to exec.timeout.",
                },
                "inputs": {
                    "type": "object",
                    "description": "Variables the program starts with, by name (each name "
                    "an ASCII identifier).",
                    "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
                },
                "task": {
                    "type": "boolean",
                    "description": "Run it as a task to collect later (/v1 only).",
                },
            },
            ["program"],
        ),
        accepted_schema=object_schema(
            {
                "task": object_schema({"id": NAME, "status": TASK_STATUS}, ["id", "status"]),
                "run": NAME,
            },
            ["task", "run"],
        ),
        output_schema=object_schema(
            {
                "run": NAME,
                "output": {"type": "string"},
                "result": {},
                "text": {"type": "string"},
                "artifacts": {"type": "array", "items": {"type": "object"}},
            },
            ["run", "output", "artifacts"],
        ),
        handler=programs.run_program,
        tag="exec",
        errors=(409, 413, 422, 429, 503, 504),
        uses_client=True,
    ),
    Op(
        name="list_artifacts",
        summary="List the files the caller's runs left (mcpx://artifacts/...)",
        input_schema=NO_INPUT,
        output_schema=object_schema(
            {"artifacts": {"type": "array", "items": {"type": "object"}}}, ["artifacts"]
        ),
        handler=programs.list_artifacts,
        tag="exec",
        errors=(503,),
        uses_client=True,
        gateway=False,
    ),
    Op(
        name="read_artifact",
        summary="Read one of the caller's artifacts, whole or a range of its bytes",
        description="Without offset and length the artifact comes whole (text, or a base64 "
        "blob), up to transport.maxMessageSize. With either, `length` bytes from `offset` "
        "come as a base64 blob, at most exec.artifactChunk of them; `next` is where the "
        "following range starts, absent at the end.",
        input_schema=object_schema(
            {
                "uri": NAME,
                "offset": {"type": "integer", "minimum": 0},
                "length": {"type": "integer", "minimum": 1},
            },
            ["uri"],
        ),
        output_schema=object_schema(
            {
                "contents": {"type": "array", "items": {"type": "object"}},
                "offset": {"type": "integer"},
                "length": {"type": "integer"},
                "size": {"type": "integer"},
                "next": {"type": "integer"},
            },
            ["contents"],
        ),
        handler=programs.read_artifact,
        tag="exec",
        errors=(404, 413, 503),
        uses_client=True,
        gateway=False,
    ),
    Op(
        name="list_prompts",
        summary="List the prompts of every server, or of one",
        description="Each prompt as its server describes it (name, title, description, "
        "arguments), with the server's name. A server that cannot be reached is listed "
        "under errors when no server is named.",
        input_schema=ONE_SERVER_OR_ALL,
        output_schema=object_schema(
            {
                "prompts": {"type": "array", "items": _listed("name")},
                "errors": LISTING_ERRORS,
            },
            ["prompts"],
        ),
        handler=servers.list_prompts,
        tag="prompts",
        errors=UPSTREAM_ERRORS,
        uses_client=True,
        gateway=False,
    ),
    Op(
        name="get_prompt",
        summary="Get a prompt, with its arguments filled in",
        input_schema=object_schema(
            {
                "server": NAME,
                "name": NAME,
                "arguments": {"type": "object", "additionalProperties": {"type": "string"}},
            },
            ["server", "name"],
        ),
        output_schema=object_schema(
            {"description": {"type": "string"}, "messages": {"type": "array"}},
            ["messages"],
            closed=False,
            description="The upstream server's GetPromptResult.",
        ),
        handler=calls.get_prompt,
        tag="prompts",
        errors=UPSTREAM_ERRORS,
        uses_client=True,
    ),
    Op(
        name="list_resources",
        summary="List the resources and resource templates of every server, or of one",
        description="Each resource (uri, name, title, description, mimeType, ...) and "
        "template (uriTemplate, ...) as its server describes it, with the server's name. "
        "A server that cannot be reached is listed under errors when no server is named.",
        input_schema=ONE_SERVER_OR_ALL,
        output_schema=object_schema(
            {
                "resources": {"type": "array", "items": _listed("uri")},
                "templates": {"type": "array", "items": _listed("uriTemplate")},
                "errors": LISTING_ERRORS,
            },
            ["resources", "templates"],
        ),
        handler=servers.list_resources,
        tag="resources",
        errors=UPSTREAM_ERRORS,
        uses_client=True,
        gateway=False,
    ),
    Op(
        name="read_resource",
        summary="Read a resource",
        input_schema=object_schema({"server": NAME, "uri": NAME}, ["server", "uri"]),
        output_schema=object_schema(
            {"contents": {"type": "array", "items": {"type": "object"}}},
            ["contents"],
            closed=False,
            description="The upstream server's ReadResourceResult.",
        ),
        handler=calls.read_resource,
        tag="resources",
        errors=UPSTREAM_ERRORS,
        uses_client=True,
    ),
    Op(
        name="complete",
        summary="Complete a prompt argument or a resource template variable",
        description="Forwarded as completion/complete to a server that declared "
        'completions; otherwise answered from the cached catalogue with "source": "cache" '
        "and the reason.",
        input_schema=object_schema(
            {
                "server": NAME,
                "ref": REF,
                "argument": object_schema(
                    {"name": NAME, "value": {"type": "string"}}, ["name", "value"]
                ),
                "context": object_schema(
                    {"arguments": {"type": "object", "additionalProperties": {"type": "string"}}}
                ),
            },
            ["server", "ref", "argument"],
        ),
        output_schema=object_schema(
            {
                "completion": COMPLETION,
                "source": {"type": "string", "enum": ["upstream", "cache"]},
                "reason": {"type": "string"},
            },
            ["completion", "source"],
        ),
        handler=calls.complete,
        tag="prompts",
        errors=UPSTREAM_ERRORS,
        uses_client=True,
    ),
    Op(
        name="list_questions",
        summary="List the questions upstream servers asked: the pending ones by default",
        description="state keeps the questions in that state; all=true lists every question "
        "still kept, finished ones included (they are kept proto.askTTL). kind says what "
        "is asked: elicitation, sampling or roots. run keeps those of one /v1/exec run.",
        input_schema=object_schema(
            {
                "state": {
                    "type": "string",
                    "enum": [state.value for state in QuestionState],
                    "description": "Only the questions in this state.",
                },
                "all": {
                    "type": "string",
                    "enum": ["true", "false"],
                    "description": "true: every kept question, not just the pending ones.",
                },
                "run": {
                    **NAME,
                    "description": 'Only the questions of this mcpx_exec run (/v1/exec\'s "run").',
                },
            }
        ),
        output_schema=object_schema(
            {"questions": {"type": "array", "items": QUESTION}}, ["questions"]
        ),
        handler=questions.list_questions,
        tag="questions",
        errors=(503,),
        gateway=False,
    ),
    Op(
        name="get_question",
        summary="One question, pending or finished",
        input_schema=object_schema({"id": NAME}, ["id"]),
        output_schema=QUESTION,
        handler=questions.get_question,
        tag="questions",
        errors=(404, 503),
        gateway=False,
    ),
    Op(
        name="answer_question",
        summary="Answer a pending question: accept (with content or result), decline or cancel",
        description='An elicitation is accepted with "content", the values its requestedSchema '
        'asks for (none in url mode); sampling with "result", a CreateMessageResult; roots '
        'with "result", {"roots": [...]}. An answer that does not fit the question is '
        "refused with 400 invalid_answer and the question stays pending; a question that "
        "is no longer pending answers 409. The answer is the question as it now stands.",
        input_schema=object_schema(
            {
                "id": NAME,
                "action": {"type": "string", "enum": list(ANSWER_ACTIONS)},
                "content": {
                    "type": "object",
                    "description": "An elicitation's values, when accepting.",
                },
                "result": {
                    "type": "object",
                    "description": "The sampling or roots result, when accepting.",
                },
                "by": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 64,
                    "description": "Who answers, recorded with the answer.",
                    "default": DEFAULT_ANSWERER,
                },
            },
            ["id", "action"],
        ),
        output_schema=QUESTION,
        handler=questions.answer_question,
        tag="questions",
        errors=(404, 409, 503),
        gateway=False,
    ),
    Op(
        name="restart_server",
        summary="Restart a server's running instances",
        input_schema=object_schema({"name": NAME}, ["name"]),
        output_schema=object_schema({"server": SERVER_STATUS}, ["server"]),
        handler=servers.restart_server,
        errors=(404, 503),
        gateway=False,
        owner_only=True,
    ),
    Op(
        name="list_calls",
        summary="List the last tool calls that reached a server, newest first",
        description="The daemon keeps the last calls (limit says how many) in memory: the "
        "server, the tool, when the call ended, how long it took and how it ended (ok, "
        "tool_error: answered with isError, error: failed). Never the arguments or the "
        "result. Each call that ends is also a call.finished event on GET /v1/events.",
        input_schema=ONE_SERVER_OR_ALL,
        output_schema=object_schema(
            {
                "calls": {"type": "array", "items": RECENT_CALL},
                "limit": {"type": "integer", "minimum": 1},
            },
            ["calls", "limit"],
        ),
        handler=servers.list_calls,
        gateway=False,
    ),
    Op(
        name="auth_status",
        summary="Show each OAuth server's sign-in: signed in or not, issuer, scopes, expiry",
        input_schema=NO_INPUT,
        output_schema=object_schema(
            {"servers": {"type": "array", "items": AUTH_STATE}}, ["servers"]
        ),
        handler=auth.auth_status,
        gateway=False,
    ),
    Op(
        name="auth_begin",
        summary="Begin signing in to an OAuth server: the URL for the browser",
        description="redirect_uri is where the browser is sent back to (mcpx auth login "
        "listens on 127.0.0.1); finish with POST /v1/auth/{name}/finish. A caller let in "
        "with an access token (daemon.auth oauth) signs in for itself: its calls alone use "
        'that sign-in. A server whose sign-in is shared ("shared": true) is the owner\'s '
        "alone to sign in or out: anyone else gets 403 owner_only.",
        input_schema=object_schema(
            {"name": NAME, "redirect_uri": {"type": "string", "pattern": "^https?://"}},
            ["name", "redirect_uri"],
        ),
        output_schema=object_schema(
            {"url": {"type": "string"}, "state": {"type": "string"}, "issuer": {"type": "string"}},
            ["url", "state", "issuer"],
        ),
        handler=auth.auth_begin,
        errors=(403, 404, 409, 422, 502, 503),
        gateway=False,
    ),
    Op(
        name="auth_finish",
        summary="Finish signing in with the URL the browser was redirected to",
        input_schema=object_schema({"name": NAME, "url": {"type": "string"}}, ["name", "url"]),
        output_schema=object_schema({"server": AUTH_STATE}, ["server"]),
        handler=auth.auth_finish,
        errors=(403, 404, 409, 422, 502, 503),
        gateway=False,
    ),
    Op(
        name="auth_logout",
        summary="Forget an OAuth server's tokens and registered clients, revoking the tokens",
        input_schema=object_schema({"name": NAME}, ["name"]),
        output_schema=object_schema(
            {
                "server": NAME,
                "forgotten": {"type": "integer"},
                "warnings": {"type": "array", "items": {"type": "string"}},
            },
            ["server", "forgotten", "warnings"],
        ),
        handler=auth.auth_logout,
        errors=(403, 404, 409, 503),
        gateway=False,
    ),
    Op(
        name="reload",
        summary="Re-read the config file's servers and apply the differences",
        input_schema=NO_INPUT,
        output_schema=object_schema(
            {
                **{key: STRINGS for key in ("removed", "added", "changed", "unchanged")},
                "misconfigured": {
                    "type": "object",
                    "additionalProperties": {"type": "string"},
                    "description": "the servers that cannot start as configured, with why",
                },
                "settings": object_schema(
                    {"applied": STRINGS, "restart_needed": STRINGS},
                    ["applied", "restart_needed"],
                ),
            },
            ["removed", "added", "changed", "unchanged"],
        ),
        handler=servers.reload,
        errors=(400, 503),
        gateway=False,
        owner_only=True,
    ),
    Op(
        name="get_settings",
        summary="Every setting, its value and where it came from (mcpx settings --json)",
        input_schema=NO_INPUT,
        output_schema=object_schema(
            {
                "settings": {"type": "array", "items": {"type": "object"}},
                "policy": {"type": "object"},
                "servers": {"type": "object"},
                "config": NULLABLE_STRING,
                "configOrigin": {"type": "string"},
                "stateDir": {"type": "string"},
            },
            ["settings", "policy", "servers", "config", "configOrigin", "stateDir"],
        ),
        handler=servers.get_settings,
        tag="daemon",
        errors=(503,),
        gateway=False,
        owner_only=True,
    ),
    Op(
        name="get_protocol",
        summary="The protocol matrix: revisions, features, and the conflict policy in force",
        input_schema=NO_INPUT,
        output_schema=object_schema(
            {
                "revisions": {"type": "array"},
                "kinds": STRINGS,
                "extensions": STRINGS,
                "features": {"type": "array"},
                "spec": {"type": "object"},
            },
            ["revisions", "kinds", "extensions", "features", "spec"],
        ),
        handler=servers.get_protocol,
        tag="daemon",
        errors=(503,),
        gateway=False,
    ),
    Op(
        name="health",
        summary="Whether the daemon is up: version, pid, uptime",
        input_schema=NO_INPUT,
        output_schema=object_schema(
            {
                "status": {"const": "ok"},
                "version": {"type": "string"},
                "pid": {"type": "integer"},
                "uptime": {"type": "number", "minimum": 0},
                "last_reload": object_schema(
                    {
                        "at": {"type": "number"},
                        "ok": {"type": "boolean"},
                        "error": {"type": ["string", "null"]},
                    },
                    ["at", "ok", "error"],
                ),
            },
            ["status", "version", "pid", "uptime"],
        ),
        handler=servers.health,
        tag="daemon",
        gateway=False,
    ),
    Op(
        name="events",
        summary="Stream the daemon's events as server-sent events",
        description="server and kind filter the stream; each may be repeated or "
        "comma-separated, and a kind such as server.* (or server) names a family. Comments "
        "keep the stream alive every transport.sseKeepAlive; a consumer too slow to keep "
        "up is sent a final dropped event and disconnected. uri (repeatable, at most 64) "
        "watches resources: an mcpx:// URI, or a server's own URI with one server=; the "
        "stream holds their subscriptions while it is open, its first event (watching) "
        "says what was subscribed and why anything was not, and it then carries their "
        "resource.updated events (and the kinds asked for).",
        input_schema=object_schema({"server": STRINGS, "kind": STRINGS, "uri": STRINGS}),
        output_schema=EVENT,
        handler=watch.events,
        tag="daemon",
        media=Media.EVENT_STREAM,
        gateway=False,
    ),
    Op(
        name="openapi",
        summary="This API, as an OpenAPI 3.1 document",
        input_schema=NO_INPUT,
        output_schema=object_schema(
            {
                "openapi": {"type": "string"},
                "info": {"type": "object"},
                "paths": {"type": "object"},
            },
            ["openapi", "info", "paths"],
            closed=False,
        ),
        handler=openapi,
        tag="daemon",
        gateway=False,
    ),
)

BY_NAME: Mapping[str, Op] = {op.name: op for op in OPS}
