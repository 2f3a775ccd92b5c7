# -*- test-case-name: tests.daemon.test_ops -*-
"""
The method and path of every operation, by name: the one statement of the routes.

The op table (L{mcpx.ops.table}) takes each op's route from here, and the CLI builds
its requests from here.  Standard library only: the CLI must start without Twisted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple
from urllib.parse import quote


class Route(NamedTuple):
    """An HTTP method and an OpenAPI path template (C{/v1/tools/{server}/{tool}})."""

    method: str
    path: str


ROUTES: Mapping[str, Route] = {
    "list_servers": Route("GET", "/v1/servers"),
    "list_tools": Route("GET", "/v1/tools"),
    "describe_tool": Route("GET", "/v1/tools/{server}/{tool}"),
    "call_tool": Route("POST", "/v1/call"),
    "get_task": Route("GET", "/v1/tasks/{id}"),
    "list_tasks": Route("GET", "/v1/tasks"),
    "cancel_task": Route("POST", "/v1/tasks/{id}/cancel"),
    "exec": Route("POST", "/v1/exec"),
    "list_artifacts": Route("GET", "/v1/artifacts"),
    "read_artifact": Route("POST", "/v1/artifacts/read"),
    "get_prompt": Route("POST", "/v1/prompt"),
    "read_resource": Route("POST", "/v1/read"),
    "complete": Route("POST", "/v1/complete"),
    "list_questions": Route("GET", "/v1/questions"),
    "get_question": Route("GET", "/v1/questions/{id}"),
    "answer_question": Route("POST", "/v1/questions/{id}/answer"),
    "restart_server": Route("POST", "/v1/servers/{name}/restart"),
    "auth_status": Route("GET", "/v1/auth"),
    "auth_begin": Route("POST", "/v1/auth/{name}/begin"),
    "auth_finish": Route("POST", "/v1/auth/{name}/finish"),
    "auth_logout": Route("DELETE", "/v1/auth/{name}"),
    "reload": Route("POST", "/v1/reload"),
    "get_settings": Route("GET", "/v1/settings"),
    "get_protocol": Route("GET", "/v1/protocol"),
    "health": Route("GET", "/health"),
    "events": Route("GET", "/v1/events"),
    "openapi": Route("GET", "/openapi.json"),
}


def path(name: str, **params: str) -> str:
    """
    The path of op C{name} with its path parameters filled in, each quoted to stand as
    one segment (a server or task id may hold C{/}).

    @raise KeyError: for an op that does not exist, or a parameter its path lacks.
    """
    template = ROUTES[name].path
    return template.format_map({key: quote(value, safe="") for key, value in params.items()})
