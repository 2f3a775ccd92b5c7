# -*- test-case-name: tests.cli.test_exec_command -*-
"""
C{mcpx exec FILE|-}: run a program through the daemon's sandbox (C{POST /v1/exec}), and
C{mcpx artifacts}: the files the caller's runs left.

C{exec} prints what the program printed, then its result (JSON as JSON), then the
artifacts it left; it exits 1 when the program did not finish, with the daemon's message
(which carries what the program printed until then).
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


def _artifact_lines(artifacts: Any) -> list[str]:
    if not isinstance(artifacts, list):
        return []
    return [
        f"{a.get('uri')}  {a.get('mimeType', '?')}  {a.get('size', '?')} bytes"
        for a in artifacts
        if isinstance(a, dict)
    ]


@asks_the_daemon("exec")
@click.argument("program", type=click.File("r", encoding="utf-8"), metavar="FILE|-")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds the run may take (clamped to exec.timeout).",
)
def exec_command(client: DaemonClient, as_json: bool, program: Any, timeout: float | None) -> None:
    """Run the Python program in FILE (- for stdin) in the daemon's sandbox."""
    body: dict[str, Any] = {"program": program.read()}
    if timeout is not None:
        body["timeoutSec"] = timeout
    # The run's own bound is the daemon's; wait for it rather than a quick request's.
    answer = client.post(routes.path("exec"), body, timeout=None)
    if as_json:
        _echo_json(answer)
        return
    output = answer.get("output", "")
    if output:
        click.echo(output, nl=not output.endswith("\n"))
    if "result" in answer:
        result = answer["result"]
        click.echo(result if isinstance(result, str) else json.dumps(result, ensure_ascii=False))
    elif "text" in answer:
        click.echo(answer["text"])
    for line in _artifact_lines(answer.get("artifacts")):
        click.echo(line, err=True)


@asks_the_daemon("artifacts")
def artifacts(client: DaemonClient, as_json: bool) -> None:
    """List the files your runs left (mcpx://artifacts/...), kept exec.artifactRetention."""
    answer = client.get(routes.path("list_artifacts"))
    if as_json:
        _echo_json(answer)
        return
    lines = _artifact_lines(answer.get("artifacts"))
    click.echo("\n".join(lines) if lines else "no artifacts")
