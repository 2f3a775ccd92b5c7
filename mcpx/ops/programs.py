# -*- test-case-name: tests.daemon.test_api -*-
"""
The operations of C{mcpx_exec}: run a program, list the artifacts runs left, read one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcpx.ops.errors import OpError
from mcpx.ops.host import Invocation, OpHost, required
from mcpx.scripts.artifacts import UnknownArtifact
from mcpx.scripts.outcome import RunFailed, RunOutcome, TooManyRuns
from mcpx.scripts.runner import Scripts


def _scripts(host: OpHost) -> Scripts:
    return required(
        host.scripts,
        "exec_unavailable",
        "this daemon runs without its script runner; restart it with `mcpx daemon`",
    )


#: The HTTP status of each way a run can fail to finish.
_RUN_STATUS: Mapping[str, int] = {
    "timeout": 504,
    "output_too_large": 413,
    "too_many_calls": 429,
    "program_syntax": 400,
    "program_failed": 422,
    "program_crashed": 422,
    "cancelled": 409,
    "pool_unavailable": 503,
    "daemon_stopping": 503,
}


def outcome_json(outcome: RunOutcome) -> dict[str, Any]:
    """A finished run as C{/v1/exec} answers it."""
    body: dict[str, Any] = {
        "run": outcome.run,
        "output": outcome.output,
        "artifacts": outcome.artifacts,
    }
    if outcome.has_value:
        body["result"] = outcome.value
    elif outcome.shown is not None:
        body["text"] = outcome.shown
    return body


async def run_program(host: OpHost, call: Invocation) -> dict[str, Any]:
    scripts = _scripts(host)
    args = call.args
    try:
        outcome = await scripts.execute(
            args["program"],
            identity=call.client,
            caller=call.caller,
            timeout=args.get("timeoutSec"),
            inputs=args.get("inputs"),
        )
    except TooManyRuns as e:
        raise OpError(
            429,
            "too_many_runs",
            f"{e.limit} programs are running already (exec.maxRuns); try again when one ends",
            retry_in=1.0,
        ) from None
    except RunFailed as e:
        raise OpError(_RUN_STATUS.get(e.code, 500), e.code, str(e)) from None
    return outcome_json(outcome)


async def list_artifacts(host: OpHost, call: Invocation) -> dict[str, Any]:
    store = _scripts(host).artifacts
    return {"artifacts": store.listed(call.client) if store is not None else []}


async def read_artifact(host: OpHost, call: Invocation) -> dict[str, Any]:
    store = _scripts(host).artifacts
    uri = call.args["uri"]
    limit = (
        64 * 1024 * 1024
        if host.settings is None
        else host.settings.integer("transport.maxMessageSize")
    )
    try:
        if store is None:
            raise UnknownArtifact(uri)
        return {"contents": [store.read(call.client, uri, limit)]}
    except UnknownArtifact:
        raise OpError(
            404,
            "unknown_artifact",
            f"no artifact {uri!r} of caller {call.client!r}: it never existed, belongs to "
            "another caller, or was removed after exec.artifactRetention",
        ) from None
    except ValueError as e:
        raise OpError(413, "artifact_too_large", str(e)) from None
