# -*- test-case-name: tests.daemon.test_ops -*-
"""
The operations on the daemon and its servers: their state, their tools, a restart, a
reload, the settings, the protocol table and the daemon's health.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from twisted.internet.defer import CancelledError, Deferred, FirstError, gatherResults

from mcpx._version import __version__
from mcpx.ops.errors import OpError, error_from, unknown_name
from mcpx.ops.host import Invocation, OpHost, pool_of, settings_of
from mcpx.ops.reloading import ReloadRefused
from mcpx.pool.errors import UnknownServer
from mcpx.settings.render import render_json
from mcpx.settings.servers import ServersConfig
from mcpx.spec.matrix import protocol_json


def _tool_summary(server: str, tool: Mapping[str, Any]) -> dict[str, Any]:
    annotations = tool.get("annotations")
    title = tool.get("title")
    if title is None and isinstance(annotations, Mapping):
        title = annotations.get("title")
    description = tool.get("description")
    return {
        "server": server,
        "name": tool.get("name"),
        "title": title if isinstance(title, str) else None,
        "description": description if isinstance(description, str) else None,
    }


def _matches(summary: Mapping[str, Any], words: Sequence[str]) -> bool:
    text = " ".join(
        str(summary[key]) for key in ("name", "title", "description") if summary[key]
    ).lower()
    return all(word in text for word in words)


async def list_servers(host: OpHost, call: Invocation) -> dict[str, Any]:
    listed = []
    for status in pool_of(host).status():
        entry = status.to_json()
        shadowed = host.clashes.shadowed(status.name, host.servers)
        if shadowed:
            entry["shadowed"] = [clash.to_json() for clash in shadowed]
        listed.append(entry)
    return {"servers": listed}


async def list_tools(host: OpHost, call: Invocation) -> dict[str, Any]:
    pool = pool_of(host)
    server = call.args.get("server")
    words = str(call.args.get("search", "")).lower().split()
    errors: list[dict[str, Any]] = []
    if server:
        fetched = [(server, await pool.tools(server, client=call.client))]
    else:

        async def one(name: str) -> tuple[str, list[dict[str, Any]]]:
            try:
                return name, await pool.tools(name, client=call.client)
            except CancelledError:
                raise
            except Exception as e:
                # One server that cannot be reached must not hide every other's tools.
                errors.append({"server": name, "error": error_from(e).to_json()})
                return name, []

        names = [status.name for status in pool.status()]
        fetched = await gatherResults([Deferred.fromCoroutine(one(name)) for name in names])
    tools: list[dict[str, Any]] = []
    for name, catalogue in fetched:
        for tool in catalogue:
            summary = _tool_summary(name, tool)
            if not words or _matches(summary, words):
                tools.append(summary)
    answer: dict[str, Any] = {"tools": tools}
    if errors:
        answer["errors"] = sorted(errors, key=lambda entry: str(entry["server"]))
    return answer


Listing = Callable[[str], Awaitable[list[dict[str, Any]]]]


async def _every_server(
    host: OpHost, call: Invocation, listings: Mapping[str, Listing]
) -> dict[str, Any]:
    """
    Each of C{listings} (a kind of catalogue: C{prompts}, C{resources}, ...) of the server
    C{call} names, or of every server, each item with its C{server}.  A server that
    cannot be listed is an error when named, and otherwise listed under C{errors}, so that
    it does not hide the others.
    """
    server = call.args.get("server")
    names = [server] if server else [status.name for status in pool_of(host).status()]
    errors: list[dict[str, Any]] = []

    async def one(name: str) -> dict[str, list[dict[str, Any]]]:
        found: dict[str, list[dict[str, Any]]] = {}
        for kind, listing in listings.items():
            try:
                found[kind] = await listing(name)
            except CancelledError:
                raise
            except Exception as e:
                if server:
                    raise
                errors.append({"server": name, "error": error_from(e).to_json()})
                return {}
        return found

    try:
        fetched = await gatherResults(
            [Deferred.fromCoroutine(one(name)) for name in names], consumeErrors=True
        )
    except FirstError as e:
        # Only the server named fails: its own error, as when asking it alone.
        e.subFailure.raiseException()
    answer: dict[str, Any] = {kind: [] for kind in listings}
    for name, found in zip(names, fetched, strict=True):
        for kind, items in found.items():
            answer[kind] += [{**item, "server": name} for item in items if isinstance(item, dict)]
    if errors:
        answer["errors"] = sorted(errors, key=lambda entry: str(entry["server"]))
    return answer


async def list_prompts(host: OpHost, call: Invocation) -> dict[str, Any]:
    pool = pool_of(host)
    return await _every_server(
        host, call, {"prompts": lambda name: pool.prompts(name, client=call.client)}
    )


async def list_resources(host: OpHost, call: Invocation) -> dict[str, Any]:
    pool = pool_of(host)
    return await _every_server(
        host,
        call,
        {
            "resources": lambda name: pool.resources(name, client=call.client),
            "templates": lambda name: pool.templates(name, client=call.client),
        },
    )


async def describe_tool(host: OpHost, call: Invocation) -> dict[str, Any]:
    server, name = call.args["server"], call.args["tool"]
    catalogue = await pool_of(host).tools(server, client=call.client)
    for tool in catalogue:
        if tool.get("name") == name:
            return {"server": server, "tool": tool}
    raise unknown_name(
        404, "unknown_tool", f"tool on server {server!r}", name, tool_names(catalogue)
    )


def tool_names(catalogue: Iterable[Mapping[str, Any]]) -> list[str]:
    return [str(tool.get("name")) for tool in catalogue]


async def restart_server(host: OpHost, call: Invocation) -> dict[str, Any]:
    pool = pool_of(host)
    name = call.args["name"]
    await pool.restart(name)
    statuses = pool.status()
    for status in statuses:
        if status.name == name:
            return {"server": status.to_json()}
    # Restarted, then reloaded away before it could be shown.
    raise error_from(UnknownServer(name, [s.name for s in statuses]))


async def reload(host: OpHost, call: Invocation) -> dict[str, Any]:
    pool = pool_of(host)
    if host.reloads.read is None:
        raise OpError(
            503,
            "reload_unavailable",
            "this daemon cannot re-read its config file; restart it to apply changes",
        )
    try:
        return await host.reloads.run(
            host, lambda servers: Deferred.fromCoroutine(pool.reload(servers)), pool
        )
    except ReloadRefused as e:
        raise OpError(
            400,
            "invalid_config",
            f"{e}; the running configuration is kept: fix the config file and "
            "POST /v1/reload (or send SIGHUP) again",
        ) from None


async def get_settings(host: OpHost, call: Invocation) -> dict[str, Any]:
    settings = settings_of(host)
    servers = host.servers if host.servers is not None else ServersConfig({}, "none")
    return render_json(settings, servers, state_dir=host.state_dir)


async def get_protocol(host: OpHost, call: Invocation) -> dict[str, Any]:
    return protocol_json(settings_of(host).policy())


async def health(host: OpHost, call: Invocation) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "status": "ok",
        "version": __version__,
        "pid": host.pid,
        "uptime": round(host.clock.seconds() - host.started_at, 3),
    }
    if host.reloads.last is not None:
        answer["last_reload"] = host.reloads.last.to_json()
    return answer


async def list_calls(host: OpHost, call: Invocation) -> dict[str, Any]:
    return {
        "calls": host.calls.newest_first(call.args.get("server")),
        "limit": host.calls.limit,
    }
