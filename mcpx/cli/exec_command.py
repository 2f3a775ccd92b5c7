# -*- test-case-name: tests.cli.test_exec_command -*-
"""
C{mcpx exec FILE|-}: run a program through the daemon's sandbox (C{POST /v1/exec}), and
C{mcpx artifacts [list|read]}: the files the caller's runs left, and their bytes.

C{exec} prints what the program printed, then its result (JSON as JSON), then the
artifacts it left; it exits 1 when the program did not finish, with the daemon's message
(which carries what the program printed until then).
"""

from __future__ import annotations

import base64
import json
from typing import Any, BinaryIO

import click

from mcpx.cli.client import DaemonClient
from mcpx.cli.commands import asks_the_daemon, echo_json
from mcpx.cli.terminal import echo
from mcpx.ops import routes


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
        echo_json(answer)
        return
    output = answer.get("output", "")
    if output:
        echo(output, nl=not output.endswith("\n"))
    if "result" in answer:
        result = answer["result"]
        echo(result if isinstance(result, str) else json.dumps(result, ensure_ascii=False))
    elif "text" in answer:
        echo(answer["text"])
    for line in _artifact_lines(answer.get("artifacts")):
        echo(line, err=True)


@click.group("artifacts", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON answer, for scripts.")
@click.pass_context
def artifacts(context: click.Context, as_json: bool) -> None:
    """The files your runs left (mcpx://artifacts/...), kept exec.artifactRetention.

    With no command, list them.
    """
    if context.invoked_subcommand is None:
        context.invoke(list_artifacts, as_json=as_json, start=False)


@asks_the_daemon("list")
def list_artifacts(client: DaemonClient, as_json: bool) -> None:
    """List the files your runs left."""
    answer = client.get(routes.path("list_artifacts"))
    if as_json:
        echo_json(answer)
        return
    lines = _artifact_lines(answer.get("artifacts"))
    echo("\n".join(lines) if lines else "no artifacts")


@asks_the_daemon("read")
@click.argument("uri", metavar="URI")
@click.option("--offset", type=click.IntRange(min=0), default=0, help="The first byte to read.")
@click.option(
    "--length",
    type=click.IntRange(min=1),
    help="How many bytes to read (default: to the end).",
)
@click.option(
    "--output",
    "-o",
    type=click.File("wb"),
    default="-",
    help="Where the bytes go (default: standard output).",
)
def read_artifact(
    client: DaemonClient,
    as_json: bool,
    uri: str,
    *,
    offset: int,
    length: int | None,
    output: BinaryIO,
) -> None:
    """Write the bytes of the artifact URI, or of a range of it, as they are.

    The daemon hands them over in ranges of at most exec.artifactChunk, so an artifact of
    any size can be read.
    """
    wanted = length
    while True:
        body: dict[str, Any] = {"uri": uri, "offset": offset}
        if wanted is not None:
            body["length"] = wanted
        answer = client.post(routes.path("read_artifact"), body)
        if as_json:
            echo_json(answer)
            return
        [content] = answer["contents"]
        output.write(base64.b64decode(content["blob"]))
        got = int(answer["length"])
        if wanted is not None:
            wanted -= got
        following = answer.get("next")
        if following is None or got == 0 or wanted == 0:
            break
        offset = int(following)
    output.flush()


artifacts.add_command(list_artifacts)
artifacts.add_command(read_artifact)
