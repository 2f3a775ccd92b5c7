# -*- test-case-name: tests.daemon.test_ops -*-
"""
The method and path of every operation, by name: the one statement of the routes.

The op table (L{mcpx.ops.table}) takes each op's route from here, and the CLI builds
its requests from here.  It imports nothing at run time: a plain C{mcpx call} builds
its request with it, and L{tests.cli.test_quick} holds that path to the few modules
it needs.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    #: An HTTP method and an OpenAPI path template (C{/v1/tools/{server}/{tool}}).
    Route = tuple[str, str]

ROUTES: Mapping[str, Route] = {
    "list_servers": ("GET", "/v1/servers"),
    "list_tools": ("GET", "/v1/tools"),
    "describe_tool": ("GET", "/v1/tools/{server}/{tool}"),
    "call_tool": ("POST", "/v1/call"),
    "get_task": ("GET", "/v1/tasks/{id}"),
    "list_tasks": ("GET", "/v1/tasks"),
    "cancel_task": ("POST", "/v1/tasks/{id}/cancel"),
    "exec": ("POST", "/v1/exec"),
    "list_artifacts": ("GET", "/v1/artifacts"),
    "read_artifact": ("POST", "/v1/artifacts/read"),
    "list_prompts": ("GET", "/v1/prompts"),
    "get_prompt": ("POST", "/v1/prompt"),
    "list_resources": ("GET", "/v1/resources"),
    "read_resource": ("POST", "/v1/read"),
    "complete": ("POST", "/v1/complete"),
    "list_questions": ("GET", "/v1/questions"),
    "get_question": ("GET", "/v1/questions/{id}"),
    "answer_question": ("POST", "/v1/questions/{id}/answer"),
    "restart_server": ("POST", "/v1/servers/{name}/restart"),
    "list_calls": ("GET", "/v1/calls"),
    "auth_status": ("GET", "/v1/auth"),
    "auth_begin": ("POST", "/v1/auth/{name}/begin"),
    "auth_finish": ("POST", "/v1/auth/{name}/finish"),
    "auth_logout": ("DELETE", "/v1/auth/{name}"),
    "reload": ("POST", "/v1/reload"),
    "get_settings": ("GET", "/v1/settings"),
    "get_protocol": ("GET", "/v1/protocol"),
    "health": ("GET", "/health"),
    "events": ("GET", "/v1/events"),
    "openapi": ("GET", "/openapi.json"),
}


def path(op: str, /, **params: str) -> str:
    """
    The path of op C{op} with its path parameters filled in, each quoted to stand as
    one segment (a server or task id may hold C{/}).

    @raise KeyError: for an op that does not exist, or a parameter its path lacks.
    """
    _, template = ROUTES[op]
    if not params:
        return template
    # Imported here for start-up time: a plain `mcpx call` fills in no parameter.
    from urllib.parse import quote

    return template.format_map({key: quote(value, safe="") for key, value in params.items()})
