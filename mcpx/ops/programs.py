# -*- test-case-name: tests.daemon.test_api -*-
"""
The operations of C{mcpx_exec}: run a program, list the artifacts runs left, read one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcpx.ops.errors import OpError
from mcpx.ops.host import Invocation, OpHost, Reply, required
from mcpx.ops.tasks import task_error
from mcpx.scripts.artifacts import UnknownArtifact
from mcpx.scripts.outcome import RunFailed, RunOutcome, TooManyRuns
from mcpx.scripts.runner import Scripts


def scripts_of(host: OpHost) -> Scripts:
    return required(
        host.scripts,
        "exec_unavailable",
        "this daemon runs without its script runner; restart it with `mcpx daemon`",
    )


#: The HTTP status of each way a run can fail to finish.
RUN_STATUS: Mapping[str, int] = {
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


def _too_many_runs(error: TooManyRuns) -> OpError:
    return OpError(
        429,
        "too_many_runs",
        f"{error.limit} programs are running already (exec.maxRuns); try again when one ends",
        retry_in=1.0,
    )


async def _run_to_its_end(
    scripts: Scripts, call: Invocation, run_id: str | None = None
) -> dict[str, Any]:
    args = call.args
    try:
        outcome = await scripts.execute(
            args["program"],
            identity=call.client,
            owner=call.owner,
            call=call.call,
            timeout=args.get("timeoutSec"),
            inputs=args.get("inputs"),
            run_id=run_id,
        )
    except TooManyRuns as e:
        raise _too_many_runs(e) from None
    except RunFailed as e:
        raise OpError(RUN_STATUS.get(e.code, 500), e.code, str(e)) from None
    return outcome_json(outcome)


def _owner_only_in_cpython(scripts: Scripts, call: Invocation) -> None:
    """
    Refuse a run in C{exec.mode: cpython} to anyone but the daemon's owner: such a
    program runs as the daemon's user, and its processes can reach the daemon's unix
    socket, where every request is the owner's; a caller let in with an access token
    would run as the owner from there.

    @raise OpError: C{403 owner_only}.
    """
    if scripts.limits.mode == "cpython" and not call.by_owner:
        raise OpError(
            403,
            "owner_only",
            "exec.mode is cpython: programs run as the daemon's user and can reach its "
            "unix socket as the owner, so only the owner may run them; a caller let in "
            "with an access token can run programs when exec.mode is monty",
        )


async def run_program(host: OpHost, call: Invocation) -> Any:
    scripts = scripts_of(host)
    _owner_only_in_cpython(scripts, call)
    if not call.args.get("task"):
        return await _run_to_its_end(scripts, call)
    # A task: the run's id is made first, so the answer can name it and the questions
    # its program causes can be found under it (GET /v1/questions?run=) from the start.
    try:
        scripts.check_room()
    except TooManyRuns as e:
        raise _too_many_runs(e) from None
    run_id = scripts.new_run_id()
    task = host.tasks.start(
        lambda: _run_to_its_end(scripts, call, run_id),
        task_error,
        client=call.client,
        tool="mcpx_exec",
    )
    return Reply(
        {"task": {"id": task.id, "status": task.status.value}, "run": run_id},
        status=202,
        headers={"location": f"/v1/tasks/{task.id}"},
    )


async def list_artifacts(host: OpHost, call: Invocation) -> dict[str, Any]:
    store = scripts_of(host).artifacts
    return {"artifacts": store.listed(call.client) if store is not None else []}


async def read_artifact(host: OpHost, call: Invocation) -> dict[str, Any]:
    store = scripts_of(host).artifacts
    args = call.args
    uri = args["uri"]
    settings = host.settings
    limit = settings.integer("transport.maxMessageSize")
    chunk = settings.integer("exec.artifactChunk")
    try:
        if store is None:
            raise UnknownArtifact(uri)
        if "offset" not in args and "length" not in args:
            return {"contents": [store.read(call.client, uri, limit)]}
        offset = args.get("offset", 0)
        content, returned, size = store.read_range(
            call.client, uri, offset, min(args.get("length", chunk), chunk)
        )
    except UnknownArtifact:
        raise OpError(
            404,
            "unknown_artifact",
            f"no artifact {uri!r} of caller {call.client!r}: it never existed, belongs to "
            "another caller, or was removed after exec.artifactRetention",
        ) from None
    except ValueError as e:
        raise OpError(413, "artifact_too_large", str(e)) from None
    answer: dict[str, Any] = {
        "contents": [content],
        "offset": min(offset, size),
        "length": returned,
        "size": size,
    }
    if offset + returned < size:
        answer["next"] = offset + returned
    return answer
