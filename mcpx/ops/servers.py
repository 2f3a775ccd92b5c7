# -*- test-case-name: tests.daemon.test_ops,tests.server.test_discovery_bytes -*-
"""
The operations on the daemon and its servers: their state, their tools, a restart, a
reload, the settings, the protocol table and the daemon's health.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from functools import partial
from typing import Any, AnyStr, Final

from twisted.internet.defer import CancelledError, Deferred, FirstError, gatherResults

from mcpx._version import __version__
from mcpx.ops.errors import OpError, error_from, unknown_name
from mcpx.ops.host import Invocation, OpHost, pool_of
from mcpx.ops.listing import server_wait, within
from mcpx.ops.reloading import ReloadRefused
from mcpx.ops.uris import ui_meta_renamed
from mcpx.ops.written import CONTENT_HEAD, CONTENT_TAIL, WrittenAnswer
from mcpx.pool.errors import UnknownServer
from mcpx.settings.render import render_json
from mcpx.settings.servers import ServersConfig
from mcpx.spec.apps import app_only, resource_uri
from mcpx.spec.matrix import protocol_json
from mcpx.wire.messages import utf8_json


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


def _searched_text(summary: Mapping[str, Any]) -> str:
    """What a search looks for its words in: the name, title and description, lowered."""
    return " ".join(
        str(summary[key]) for key in ("name", "title", "description") if summary[key]
    ).lower()


def _inside(written: bytes) -> bytes:
    """An encoded list less its brackets, or string less its quotes."""
    return written[1:-1]


class _Summaries:
    """
    One server's tool summaries, written from one list of its tools, with their JSON.

    @ivar server: the server's name, which each summary carries.
    @ivar tools: the tool objects they were written from.
    @ivar searched: each summary's L{_searched_text}.
    @ivar text: the summaries as C{json.dumps} writes a list of them, less its brackets.
    @ivar json: the same for L{utf8_json}, or C{None} when they cannot be UTF-8.
    @ivar text_json: L{utf8_json} of C{text}, less its quotes, or C{None} likewise.
    """

    __slots__ = ("json", "searched", "server", "summaries", "text", "text_json", "tools")

    def __init__(self, server: str, tools: list[dict[str, Any]]) -> None:
        self.server = server
        self.tools = tools
        # A tool only an app may call (MCP Apps) is never offered to a model.
        self.summaries = [_tool_summary(server, tool) for tool in tools if not app_only(tool)]
        self.searched = [_searched_text(summary) for summary in self.summaries]
        self.text = json.dumps(self.summaries, ensure_ascii=False)[1:-1]
        written = utf8_json(self.summaries)
        self.json = None if written is None else _inside(written)
        text_json = utf8_json(self.text)
        self.text_json = None if text_json is None else _inside(text_json)

    def written_from(self, tools: list[dict[str, Any]]) -> bool:
        # The pool hands out copies of its cached list holding the same tool objects, and
        # a server that lists again (a list_changed, a new instance) gives new ones.
        return len(tools) == len(self.tools) and all(map(operator.is_, tools, self.tools))


#: The most servers whose summaries are kept (all of them are kept until then).
_MAX_KEPT: Final = 4096

#: The most answers kept for the same summaries asked again (every server, or one).
_MAX_ANSWERS: Final = 16


class _KeptSummaries:
    """
    Each server's L{_Summaries}, written again only when its list of tools is new, and the
    answers without a search put together from them, kept while they are current.
    """

    def __init__(self) -> None:
        self._kept: dict[str, _Summaries] = {}
        self._answers: dict[tuple[_Summaries, ...], dict[str, Any]] = {}

    def of(self, server: str, tools: list[dict[str, Any]]) -> _Summaries:
        kept = self._kept.get(server)
        if kept is None or not kept.written_from(tools):
            if len(self._kept) >= _MAX_KEPT:
                self._kept.clear()
            kept = self._kept[server] = _Summaries(server, tools)
        return kept

    def answer(self, listed: list[_Summaries], errors: list[dict[str, Any]]) -> dict[str, Any]:
        """Every summary of C{listed}, and the C{errors} met listing the others."""
        key = tuple(listed)
        found = None if errors else self._answers.get(key)
        if found is not None:
            return found
        tools: list[dict[str, Any]] = []
        for summaries in listed:
            tools += summaries.summaries
        answer: dict[str, Any] = {"tools": tools}
        if errors:
            answer["errors"] = errors
        written = _written(answer, listed)
        if not errors and type(written) is WrittenAnswer:
            # Only answers of the summaries still current are kept (and a few of those).
            self._answers = {
                kept: cached
                for kept, cached in self._answers.items()
                if all(self._kept.get(summaries.server) is summaries for summaries in kept)
            }
            if len(self._answers) >= _MAX_ANSWERS:
                self._answers.clear()
            self._answers[key] = written
        return written


# Shared by every daemon of the process: an entry is used only for the very tool objects
# it was written from, so whichever pool listed them, the summaries are theirs.
_KEPT_SUMMARIES: Final = _KeptSummaries()

_TOOLS_HEAD: Final = '{"tools": ['


def _framed(head: AnyStr, parts: list[AnyStr], separator: AnyStr, tail: AnyStr) -> AnyStr:
    """C{head + separator.join(parts) + tail}, with each part copied once."""
    pieces = [head]
    for part in parts:
        pieces += (part, separator)
    if parts:
        pieces.pop()
    pieces.append(tail)
    return head[:0].join(pieces)


def _written(answer: dict[str, Any], listed: Sequence[_Summaries]) -> dict[str, Any]:
    """
    C{answer}, every summary of C{listed} (and maybe C{errors}), with its JSON put
    together from theirs (L{WrittenAnswer}); C{answer} itself when some of it cannot be
    written as UTF-8.
    """
    filled = [summaries for summaries in listed if summaries.summaries]
    texts: list[bytes] = []
    encoded: list[bytes] = []
    for summaries in filled:
        if summaries.text_json is None or summaries.json is None:
            return answer
        texts.append(summaries.text_json)
        encoded.append(summaries.json)
    tail = "]}"
    tail_encoded: bytes | None = b"]}"
    if "errors" in answer:
        tail = f'], "errors": {json.dumps(answer["errors"], ensure_ascii=False)}}}'
        errors = utf8_json(answer["errors"])
        tail_encoded = None if errors is None else b'],"errors":%s}' % errors
    head_json, tail_json = utf8_json(_TOOLS_HEAD), utf8_json(tail)
    if tail_encoded is None or head_json is None or tail_json is None:
        return answer
    # The text is encoded as the content's one text block, in the same pass.
    content_head = CONTENT_HEAD + b'"' + _inside(head_json)
    content_tail = _inside(tail_json) + b'"' + CONTENT_TAIL
    return WrittenAnswer(
        answer,
        json=_framed(b'{"tools":[', encoded, b",", tail_encoded),
        text=_framed(_TOOLS_HEAD, [summaries.text for summaries in filled], ", ", tail),
        content_json=_framed(content_head, texts, b", ", content_tail),
    )


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
                listing = Deferred.fromCoroutine(pool.tools(name, client=call.client))
                return name, await within(
                    host.clock,
                    server_wait(host.settings, pool, name),
                    name,
                    listing,
                    lambda: pool.cached_catalogue(name, "tools", client=call.client),
                )
            except CancelledError:
                raise
            except Exception as e:
                # One server that cannot be reached must not hide every other's tools.
                errors.append({"server": name, "error": error_from(e).to_json()})
                return name, []

        names = [status.name for status in pool.status()]
        fetched = await gatherResults([Deferred.fromCoroutine(one(name)) for name in names])
    listed = [_KEPT_SUMMARIES.of(name, catalogue) for name, catalogue in fetched]
    errors.sort(key=lambda entry: str(entry["server"]))
    if not words:
        return _KEPT_SUMMARIES.answer(listed, errors)
    tools: list[dict[str, Any]] = []
    for summaries in listed:
        for summary, searched in zip(summaries.summaries, summaries.searched, strict=True):
            if all(word in searched for word in words):
                tools.append(summary)
    answer: dict[str, Any] = {"tools": tools}
    if errors:
        answer["errors"] = errors
    # Written whole, as before: a search's answer holds only part of each server's.
    return answer


Listing = Callable[[str], Coroutine[Any, Any, list[dict[str, Any]]]]


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
    pool = pool_of(host)

    async def one(name: str) -> dict[str, list[dict[str, Any]]]:
        found: dict[str, list[dict[str, Any]]] = {}
        for kind, listing in listings.items():
            try:
                if server:
                    found[kind] = await listing(name)
                    continue
                found[kind] = await within(
                    host.clock,
                    server_wait(host.settings, pool, name),
                    name,
                    Deferred.fromCoroutine(listing(name)),
                    partial(pool.cached_catalogue, name, kind, client=call.client),
                )
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
    listed = await pool_of(host).tools(server, client=call.client)
    # A tool only an app may call (MCP Apps) is not described to a model either.
    catalogue = [tool for tool in listed if not app_only(tool)]
    for tool in catalogue:
        if tool.get("name") == name:
            meta = tool.get("_meta")
            if type(meta) is dict and resource_uri(tool) is not None:
                # Its app's resource under the name a host reads it by through mcpx.
                return {"server": server, "tool": {**tool, "_meta": ui_meta_renamed(server, meta)}}
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
    settings = host.settings
    servers = host.servers if host.servers is not None else ServersConfig({}, "none")
    return render_json(settings, servers, state_dir=host.state_dir)


async def get_protocol(host: OpHost, call: Invocation) -> dict[str, Any]:
    return protocol_json(host.settings.policy())


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
        "calls": host.calls.newest_first(
            call.args.get("server"), None if call.holder is None else call.holds
        ),
        "limit": host.calls.limit,
    }
