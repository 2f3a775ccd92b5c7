# -*- test-case-name: tests.cli.test_content_commands -*-
"""
C{mcpx prompts}, C{mcpx prompt}, C{mcpx resources} and C{mcpx read}: a server's prompts and
resources, through the daemon's C{list_prompts}, C{get_prompt}, C{list_resources} and
C{read_resource} ops.

The text is printed as text; C{--json} prints the upstream's own result.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from mcpx.cli.client import DaemonClient, target
from mcpx.cli.commands import asks_the_daemon, echo_answer, say_missing
from mcpx.cli.render import first_line, table
from mcpx.ops import routes


def _content_text(content: object) -> str:
    """One content block as a line or more of text."""
    if not isinstance(content, dict):
        return str(content)
    if isinstance(content.get("text"), str):
        return str(content["text"])
    resource = content.get("resource")
    if isinstance(resource, dict):
        return _resource_text(resource)
    kind = content.get("type", "content")
    return f"({kind}{', ' + str(content['mimeType']) if content.get('mimeType') else ''})"


def _resource_text(contents: dict[str, Any]) -> str:
    """A resource's contents: its text, or a note of the binary it holds."""
    if isinstance(contents.get("text"), str):
        return str(contents["text"])
    blob = contents.get("blob")
    size = len(blob) * 3 // 4 if isinstance(blob, str) else 0
    mime = contents.get("mimeType") or "binary"
    return f"({mime}, about {size} bytes; mcpx read --json shows it in base64)"


def prompt_text(answer: object) -> str:
    """A C{GetPromptResult} as text: its description, then each message after its role."""
    answer = answer if isinstance(answer, dict) else {}
    lines: list[str] = []
    if isinstance(answer.get("description"), str):
        lines += [answer["description"], ""]
    messages = answer.get("messages")
    for message in messages if isinstance(messages, list) else ():
        if isinstance(message, dict):
            lines.append(f"{message.get('role', '?')}: {_content_text(message.get('content'))}")
    return "".join(line + "\n" for line in lines)


def read_text(answer: object) -> str:
    """A C{ReadResourceResult} as text: each content's text, one after another."""
    contents = answer.get("contents") if isinstance(answer, dict) else None
    parts = [
        _resource_text(item)
        for item in (contents if isinstance(contents, list) else ())
        if isinstance(item, dict)
    ]
    return "".join(part if part.endswith("\n") else part + "\n" for part in parts)


@asks_the_daemon("prompt")
@click.argument("server")
@click.argument("name")
@click.argument("arguments", nargs=-1)
def prompt(
    client: DaemonClient, as_json: bool, server: str, name: str, arguments: tuple[str, ...]
) -> None:
    """Get prompt NAME of SERVER with its arguments filled in (key=value ...)."""
    filled: dict[str, str] = {}
    for argument in arguments:
        key, equals, value = argument.partition("=")
        if not equals or not key:
            raise click.UsageError(
                f"{argument!r} is not key=value; run mcpx prompt SERVER NAME key=value ..."
            )
        filled[key] = value
    body = {"server": server, "name": name, "arguments": filled}
    answer = client.post(routes.path("get_prompt"), body, timeout=120.0)
    echo_answer(answer, as_json, prompt_text)


@asks_the_daemon("read")
@click.argument("server")
@click.argument("uri")
def read(client: DaemonClient, as_json: bool, server: str, uri: str) -> None:
    """Read resource URI of SERVER."""
    answer = client.post(
        routes.path("read_resource"), {"server": server, "uri": uri}, timeout=120.0
    )
    echo_answer(answer, as_json, read_text)


def _text(value: object) -> str:
    return value if isinstance(value, str) and value else "-"


def prompts_text(answer: object) -> str:
    """C{GET /v1/prompts} as a table: server, prompt, its arguments, what it does."""
    prompts = answer.get("prompts") if isinstance(answer, dict) else None
    if not prompts:
        return "No prompts found.\n"
    rows = []
    for prompt in prompts:
        arguments = prompt.get("arguments")
        names = [
            str(a.get("name")) + ("" if a.get("required") else "?")
            for a in (arguments if isinstance(arguments, list) else ())
            if isinstance(a, dict)
        ]
        rows.append(
            (
                _text(prompt.get("server")),
                _text(prompt.get("name")),
                " ".join(names) or "-",
                first_line(prompt.get("description") or prompt.get("title")) or "-",
            )
        )
    return table(("SERVER", "PROMPT", "ARGUMENTS", "DESCRIPTION"), rows)


def resources_text(answer: object) -> str:
    """C{GET /v1/resources} as a table of resources, then one of templates."""
    answer = answer if isinstance(answer, dict) else {}
    resources = answer.get("resources") or []
    templates = answer.get("templates") or []
    if not resources and not templates:
        return "No resources found.\n"
    parts = []
    if resources:
        parts.append(
            table(
                ("SERVER", "URI", "NAME", "TYPE", "DESCRIPTION"),
                [
                    (
                        _text(item.get("server")),
                        _text(item.get("uri")),
                        _text(item.get("title") or item.get("name")),
                        _text(item.get("mimeType")),
                        first_line(item.get("description")) or "-",
                    )
                    for item in resources
                ],
            )
        )
    if templates:
        parts.append(
            table(
                ("SERVER", "URI TEMPLATE", "NAME", "DESCRIPTION"),
                [
                    (
                        _text(item.get("server")),
                        _text(item.get("uriTemplate")),
                        _text(item.get("title") or item.get("name")),
                        first_line(item.get("description")) or "-",
                    )
                    for item in templates
                ],
            )
        )
    return "\n".join(parts)


def _show_catalogue(
    client: DaemonClient,
    as_json: bool,
    server: str | None,
    *,
    op: str,
    text: Callable[[object], str],
    what: str,
) -> None:
    """Ask for one listing of every server's (or C{server}'s) and show it, or its JSON."""
    answer = client.get(target(routes.path(op), server=server), timeout=120.0)
    echo_answer(answer, as_json, text)
    if not as_json:
        say_missing(answer, what)


@asks_the_daemon("prompts")
@click.argument("server", required=False)
def prompts(client: DaemonClient, as_json: bool, server: str | None) -> None:
    """List the prompts of every server, or of SERVER."""
    _show_catalogue(client, as_json, server, op="list_prompts", text=prompts_text, what="prompts")


@asks_the_daemon("resources")
@click.argument("server", required=False)
def resources(client: DaemonClient, as_json: bool, server: str | None) -> None:
    """List the resources and resource templates of every server, or of SERVER."""
    _show_catalogue(
        client, as_json, server, op="list_resources", text=resources_text, what="resources"
    )
