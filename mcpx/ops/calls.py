# -*- test-case-name: tests.daemon.test_ops -*-
"""
The operations that call into an upstream server: a tool (now, or as a task), a prompt,
a resource read and a completion.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any

from twisted.logger import Logger

from mcpx.call import Call
from mcpx.ops.errors import OpError, unknown_name
from mcpx.ops.host import Invocation, OpHost, Reply, pool_of
from mcpx.ops.programs import RUN_STATUS, scripts_of
from mcpx.ops.schemas import MAX_COMPLETION_VALUES
from mcpx.ops.servers import tool_names
from mcpx.ops.tasks import task_error
from mcpx.scripts.outcome import RunRefusedCall, UnknownRun
from mcpx.wire.errors import INVALID_PARAMS, RESOURCE_NOT_FOUND, RpcError

_log = Logger()


async def call_tool(host: OpHost, call: Invocation) -> Any:
    if call.run is not None:
        return await _call_in_run(host, call, call.run)
    pool_of(host)
    args = call.args
    call_id = args.get("call_id")
    task_named = call_id is None and bool(args.get("task"))
    if call_id is not None and host.broker is not None:
        # A call that names itself is watched for its questions from the start (`mcpx
        # call` lists them by that name): one asked before the watch's first look is not
        # refused for want of a watcher (proto.brokerWhenUnwatched).
        host.broker.looked()
    # Always a Call, so a question the upstream asks is attributed to this call (the
    # pool's rule) and carries its id in the broker, where the caller can find it.  It
    # declares nothing and cannot be asked directly: its questions wait in the broker.
    if call_id is None:
        # A task's call is named after the task, once it has one (below).
        call_id = "" if task_named else _v1_call_id()
    tool_call = Call(
        call_id,
        {},
        None,
        wants_task=bool(args.get("task")),
        owner=call.holder,
    )

    def work() -> Awaitable[dict[str, Any]]:
        return call_upstream(host, call, tool_call)

    if not args.get("task"):
        return await work()
    server, tool = args["server"], args["tool"]
    task = host.tasks.start(work, task_error, client=call.client, server=server, tool=tool)
    if task_named:
        # Before the upstream can ask anything: that takes a turn of the reactor.
        tool_call.id = task.id
    return Reply(
        {"task": {"id": task.id, "status": task.status.value}},
        status=202,
        headers={"location": f"/v1/tasks/{task.id}"},
    )


async def call_upstream(host: OpHost, invocation: Invocation, call: Call | None) -> dict[str, Any]:
    """
    Call C{invocation.args}' tool once, now, for C{call}: the call of L{call_tool} (C{/v1/call})
    and of the MCP gateway's C{mcpx_call} alike.

    @raise OpError: C{404 unknown_tool} when the server refuses a tool it does not list.
    """
    pool = pool_of(host)
    args = invocation.args
    server, tool = args["server"], args["tool"]
    try:
        return await pool.call_tool(
            server,
            tool,
            args.get("arguments", {}),
            client=invocation.client,
            timeout=args.get("timeout"),
            meta=invocation.meta,
            on_progress=invocation.on_progress if args.get("progress") else None,
            call=call,
        )
    except RpcError as e:
        if e.code != INVALID_PARAMS:
            raise
        catalogue = await _listed_or_none(pool.tools(server, client=invocation.client))
        names = tool_names(catalogue or ())
        if catalogue is None or tool in names:
            raise
        raise unknown_name(404, "unknown_tool", f"tool on server {server!r}", tool, names) from e


async def _call_in_run(host: OpHost, call: Invocation, run: tuple[str, str]) -> Any:
    """A call a CPython-mode program makes: its run's, bounded and counted by it."""
    args = call.args
    if args.get("task") or args.get("progress") or "call_id" in args:
        raise OpError(
            400,
            "invalid_input",
            'a call made for a run (X-Mcpx-Run) takes no "task", "progress" or "call_id": '
            "it is the run's",
        )
    try:
        return await scripts_of(host).call_in_run(
            run[0],
            run[1],
            server=args["server"],
            tool=args["tool"],
            arguments=args.get("arguments", {}),
            timeout=args.get("timeout"),
        )
    except UnknownRun as e:
        raise OpError(
            403,
            "unknown_run",
            f"no run {e.run!r} is running with that key (X-Mcpx-Run, X-Mcpx-Run-Key): "
            "it ended, or the header was not given to this program",
        ) from None
    except RunRefusedCall as e:
        raise OpError(RUN_STATUS.get(e.code, 429), e.code, e.message) from None


#: Numbers the C{/v1/call} calls that name no C{call_id} and are not tasks.
_v1_calls = itertools.count(1)


def _v1_call_id() -> str:
    """The id of a call that did not name one: C{v1-} and a number, unique in this daemon."""
    return f"v1-{next(_v1_calls)}"


async def _listed_or_none(
    listing: Awaitable[Sequence[Mapping[str, Any]]],
) -> Sequence[Mapping[str, Any]] | None:
    """A catalogue, or C{None} when it cannot be had (the original error is what matters)."""
    try:
        return await listing
    except Exception:
        return None


# The upstream answers an unknown tool or prompt, and wrong arguments, with the same -32602;
# only on that error path is the (cached) catalogue consulted, to tell "no such name" (404,
# with close names) from "the server refused these arguments" (422).


async def get_prompt(host: OpHost, call: Invocation) -> dict[str, Any]:
    pool = pool_of(host)
    server, name = call.args["server"], call.args["name"]
    params: dict[str, Any] = {"name": name}
    if "arguments" in call.args:
        params["arguments"] = call.args["arguments"]
    try:
        return await pool.request(server, "prompts/get", params, client=call.client)
    except RpcError as e:
        if e.code != INVALID_PARAMS:
            raise
        catalogue = await _listed_or_none(pool.prompts(server, client=call.client))
        names = [str(prompt.get("name")) for prompt in catalogue or ()]
        if catalogue is None or name in names:
            raise
        raise unknown_name(
            404, "unknown_prompt", f"prompt on server {server!r}", name, names
        ) from e


async def read_resource(host: OpHost, call: Invocation) -> dict[str, Any]:
    server, uri = call.args["server"], call.args["uri"]
    try:
        return await pool_of(host).request(
            server, "resources/read", {"uri": uri}, client=call.client
        )
    except RpcError as e:
        # The URI is the request's only parameter: a refusal of it means there is no such
        # resource, whichever of the two codes revisions have used for that.
        if e.code not in (INVALID_PARAMS, RESOURCE_NOT_FOUND):
            raise
        raise OpError(
            404,
            "unknown_resource",
            f"server {server!r} has no resource {uri!r} ({e.message}); GET /v1/servers "
            "and the server's resources/list say what it has",
            rpc=e.to_json(),
        ) from e


async def complete(host: OpHost, call: Invocation) -> dict[str, Any]:
    """
    Forward to a server that declared C{completions}; otherwise answer from the cache.

    Without the server's help, the only names mcpx knows are the prompt's argument names
    or the resource template's variables; the answer says so in C{reason}.
    """
    pool = pool_of(host)
    server = call.args["server"]
    ref, argument = call.args["ref"], call.args["argument"]
    session = await pool.session(server, call.client)
    declaration = session.declaration
    if declaration is not None and declaration.declares("completions"):
        params: dict[str, Any] = {"ref": ref, "argument": argument}
        if "context" in call.args:
            params["context"] = call.args["context"]
        result = await pool.request(server, "completion/complete", params, client=call.client)
        return {"completion": result.get("completion", {"values": []}), "source": "upstream"}
    if ref["type"] == "ref/prompt":
        prompts = await pool.prompts(server, client=call.client)
        found = next((p for p in prompts if p.get("name") == ref["name"]), None)
        if found is None:
            known = [str(p.get("name")) for p in prompts]
            raise unknown_name(
                404, "unknown_prompt", f"prompt on server {server!r}", ref["name"], known
            )
        names = [str(a.get("name")) for a in found.get("arguments") or ()]
        what = f"the argument names of prompt {ref['name']!r}"
    else:
        templates = await pool.templates(server, client=call.client)
        uri = ref["uri"]
        match = next((t for t in templates if t.get("uriTemplate") == uri), None)
        if match is None:
            known = [str(t.get("uriTemplate")) for t in templates]
            raise unknown_name(
                404, "unknown_resource_template", f"resource template on {server!r}", uri, known
            )
        names = template_variables(uri)
        what = f"the variables of resource template {uri!r}"
    if argument["name"] not in names:
        raise OpError(
            400,
            "invalid_input",
            f"argument.name: {argument['name']!r} is not one of {what}: "
            f"{', '.join(names) or 'none'}",
            field="argument.name",
        )
    shown = names[:MAX_COMPLETION_VALUES]
    return {
        "completion": {"values": shown, "total": len(names), "hasMore": len(names) > len(shown)},
        "source": "cache",
        "reason": f"server {server!r} did not declare completions, so these are {what} "
        "from the cached catalogue, not suggested values",
    }


_TEMPLATE_EXPRESSION = re.compile(r"{([^}]*)}")


def template_variables(uri_template: str) -> list[str]:
    """The variable names of an RFC 6570 URI template, in order, each once."""
    names: list[str] = []
    for expression in _TEMPLATE_EXPRESSION.findall(uri_template):
        for spec in expression.lstrip("+#./;?&=,!@|").split(","):
            name = spec.split(":", 1)[0].rstrip("*").strip()
            if name and name not in names:
                names.append(name)
    return names
