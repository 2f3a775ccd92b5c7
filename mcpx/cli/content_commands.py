# -*- test-case-name: tests.cli.test_content_commands -*-
"""
C{mcpx prompt} and C{mcpx read}: a server's prompts and resources, through the daemon's
C{get_prompt} and C{read_resource} ops.

The text is printed as text; C{--json} prints the upstream's own result.
"""

from __future__ import annotations

import json
from typing import Any

import click

from mcpx.cli.client import DaemonClient
from mcpx.cli.commands import asks_the_daemon
from mcpx.ops import routes


def _echo_json(value: object) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


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
    if as_json:
        _echo_json(answer)
    else:
        click.echo(prompt_text(answer), nl=False)


@asks_the_daemon("read")
@click.argument("server")
@click.argument("uri")
def read(client: DaemonClient, as_json: bool, server: str, uri: str) -> None:
    """Read resource URI of SERVER."""
    answer = client.post(
        routes.path("read_resource"), {"server": server, "uri": uri}, timeout=120.0
    )
    if as_json:
        _echo_json(answer)
    else:
        click.echo(read_text(answer), nl=False)
